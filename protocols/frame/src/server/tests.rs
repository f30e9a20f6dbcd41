//! The server against a tiny protocol of its own: requests that reply at once, block on
//! a gate, sleep (optionally ordered) or ask for a reply that cannot be encoded.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::codec::{Encoder, FramedRead};
use tokio_util::sync::CancellationToken;

use super::{serve, ConnectionLimits, Handler, Replier, TransportBudget};
use crate::{FieldReader, FrameCodec, FrameMessage, WireError, HEADER_LEN};
use switchyard_memory::{NodeMemory, Part};

#[path = "../../tests/support/eventually.rs"]
mod wait;
use wait::{eventually, PATIENCE};

const REQUEST: u8 = 1;
const REPLY: u8 = 2;
const HEARTBEAT: u8 = 3;
const DATA: u8 = 4;
/// Byte arrays, read split when the frame is large enough.
const ARRAYS: u8 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Fast = 0,
    /// Waits for a permit of the handler's gate.
    Block = 1,
    /// Sleeps `arg` ms, handled before the next frame is read.
    OrderedSleep = 2,
    /// Sleeps `arg` ms.
    Sleep = 3,
    /// Replies with a message that fails to encode.
    BadReply = 4,
    /// Reserves `arg` reply bytes, then replies with a body that long.
    BigReply = 5,
}

/// The reply id that fails to encode.
const UNENCODABLE: u32 = u32::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Msg {
    Request {
        id: u32,
        op: Op,
        tag: u8,
        arg: u32,
    },
    Reply {
        id: u32,
    },
    Heartbeat,
    Data {
        id: u32,
        body: Bytes,
    },
    /// Encoded as id, count, then each array (length + bytes); decoded with
    /// how many arrays were read into buffers of their own.
    Arrays {
        id: u32,
        arrays: Vec<Bytes>,
        own: u32,
    },
}

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
    #[error("bad op {0}")]
    BadOp(u8),
    #[error("unencodable reply")]
    Unencodable,
}

/// Requests decoded so far, by tag: each test uses its own tag.
static DECODED: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

impl FrameMessage for Msg {
    const PROTOCOL: &'static str = "test";
    type Kind = u8;
    type Error = TestError;

    fn kind_from_id(id: u8) -> Result<u8, TestError> {
        match id {
            REQUEST | REPLY | HEARTBEAT | DATA | ARRAYS => Ok(id),
            other => Err(WireError::UnknownMessageType(other).into()),
        }
    }

    fn decode_frame(kind: u8, mut message: FieldReader, body: Bytes) -> Result<Self, TestError> {
        Ok(match kind {
            REQUEST => {
                let id = message.i32("id")? as u32;
                let op = match message.u8("op")? {
                    0 => Op::Fast,
                    1 => Op::Block,
                    2 => Op::OrderedSleep,
                    3 => Op::Sleep,
                    4 => Op::BadReply,
                    5 => Op::BigReply,
                    other => return Err(TestError::BadOp(other)),
                };
                let tag = message.u8("tag")?;
                DECODED[tag as usize].fetch_add(1, Ordering::SeqCst);
                Msg::Request {
                    id,
                    op,
                    tag,
                    arg: message.i32("arg")? as u32,
                }
            }
            REPLY => Msg::Reply {
                id: message.i32("id")? as u32,
            },
            DATA => Msg::Data {
                id: message.i32("id")? as u32,
                body,
            },
            ARRAYS => {
                let id = message.i32("id")? as u32;
                let count = message.count("arrays", 4)?;
                let (mut arrays, mut own) = (Vec::new(), 0);
                for _ in 0..count {
                    arrays.push(match message.split_byte_array("array")? {
                        crate::ByteArray::Own(a) => {
                            own += 1;
                            a
                        }
                        crate::ByteArray::InFrame(a) => a,
                    });
                }
                if message.remaining() != 0 || message.arrays_left() != 0 {
                    return Err(WireError::Truncated { field: "trailing" }.into());
                }
                Msg::Arrays { id, arrays, own }
            }
            _ => Msg::Heartbeat,
        })
    }

    fn splitter(kind: u8) -> Option<Box<dyn crate::Splitter>> {
        (kind == ARRAYS).then(|| Box::new(ArraysSplitter::default()) as Box<dyn crate::Splitter>)
    }

    fn kind_id(&self) -> u8 {
        match self {
            Msg::Request { .. } => REQUEST,
            Msg::Reply { .. } => REPLY,
            Msg::Heartbeat => HEARTBEAT,
            Msg::Data { .. } => DATA,
            Msg::Arrays { .. } => ARRAYS,
        }
    }

    fn frame_body(&self) -> Option<&Bytes> {
        match self {
            Msg::Data { body, .. } => Some(body),
            _ => None,
        }
    }

    fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), TestError> {
        match *self {
            Msg::Request { id, op, tag, arg } => {
                dst.put_u32(id);
                dst.put_u8(op as u8);
                dst.put_u8(tag);
                dst.put_u32(arg);
            }
            Msg::Reply { id: UNENCODABLE } => return Err(TestError::Unencodable),
            Msg::Reply { id } => dst.put_u32(id),
            Msg::Heartbeat => dst.put_u8(0),
            Msg::Data { id, .. } => dst.put_u32(id),
            Msg::Arrays { id, ref arrays, .. } => {
                dst.put_u32(id);
                dst.put_i32(arrays.len() as i32);
                for a in arrays {
                    dst.put_i32(a.len() as i32);
                    dst.put_slice(a);
                }
            }
        }
        Ok(())
    }

    fn is_heartbeat(&self) -> bool {
        matches!(self, Msg::Heartbeat)
    }
}

/// Walks an `ARRAYS` message part: id, count, then length + contents.
#[derive(Default)]
struct ArraysSplitter {
    pos: usize,
    left: Option<usize>,
}

impl crate::Splitter for ArraysSplitter {
    fn next(&mut self, fields: &[u8]) -> crate::Next {
        let at = |pos: usize| i32::from_be_bytes(fields[pos..pos + 4].try_into().unwrap());
        let left = match self.left {
            Some(left) => left,
            None if fields.len() < 8 => return crate::Next::Fields(8),
            None => {
                self.pos = 8;
                *self.left.insert(at(4).max(0) as usize)
            }
        };
        if left == 0 {
            return crate::Next::Rest;
        }
        if fields.len() < self.pos + 4 {
            return crate::Next::Fields(self.pos + 4);
        }
        let len = at(self.pos);
        self.pos += 4;
        self.left = Some(left - 1);
        crate::Next::Array(len.max(0) as usize)
    }
}

struct TestHandler {
    gate: Semaphore,
    running: AtomicUsize,
    max_running: AtomicUsize,
    done: AtomicUsize,
    /// Ids of sleeping requests, in the order they finished.
    finished: Mutex<Vec<u32>>,
    /// Frames other than requests that reached the handler.
    unexpected: AtomicUsize,
    /// BigReply requests that got their reply room.
    reserved: AtomicUsize,
    /// Ids of BigReply requests, in the order they got their room.
    reserved_order: Mutex<Vec<u32>>,
}

impl TestHandler {
    fn new() -> Self {
        TestHandler {
            gate: Semaphore::new(0),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            finished: Mutex::new(Vec::new()),
            unexpected: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            reserved_order: Mutex::new(Vec::new()),
        }
    }
}

impl Handler<Msg> for TestHandler {
    fn port(&self) -> &'static str {
        "test"
    }

    fn ordered(&self, message: &Msg) -> bool {
        matches!(
            message,
            Msg::Request {
                op: Op::OrderedSleep,
                ..
            }
        )
    }

    async fn handle(self: Arc<Self>, message: Msg, replier: Replier<Msg>) {
        if let Msg::Arrays { id, arrays, own } = message {
            // Echoes how many arrays came apart, then their contents.
            let mut body = BytesMut::new();
            body.put_u32(own);
            for a in &arrays {
                body.put_slice(a);
            }
            replier
                .send(Msg::Data {
                    id,
                    body: body.freeze(),
                })
                .await;
            return;
        }
        let Msg::Request { id, op, arg, .. } = message else {
            self.unexpected.fetch_add(1, Ordering::SeqCst);
            return;
        };
        if op == Op::BigReply {
            let Some(bytes) = replier.reserve(arg as usize).await else {
                return;
            };
            self.reserved.fetch_add(1, Ordering::SeqCst);
            self.reserved_order.lock().unwrap().push(id);
            let body = Bytes::from(vec![7u8; arg as usize]);
            replier.send_reserved(Msg::Data { id, body }, bytes).await;
            return;
        }
        let running = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(running, Ordering::SeqCst);
        let reply = match op {
            Op::Fast => id,
            Op::Block => {
                self.gate.acquire().await.expect("open").forget();
                id
            }
            Op::OrderedSleep | Op::Sleep => {
                tokio::time::sleep(Duration::from_millis(arg.into())).await;
                self.finished.lock().unwrap().push(id);
                id
            }
            Op::BadReply => UNENCODABLE,
            Op::BigReply => unreachable!("answered above"),
        };
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        replier.send(Msg::Reply { id: reply }).await;
    }
}

struct Server {
    addr: SocketAddr,
    handler: Arc<TestHandler>,
    budget: TransportBudget,
    cancel: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn start(max_connections: usize, max_in_flight: usize) -> Server {
    start_with(ConnectionLimits::new(max_connections, max_in_flight).unwrap()).await
}

async fn start_with(limits: ConnectionLimits) -> Server {
    start_on(limits, NodeMemory::new(8 << 30, 4 << 30)).await
}

/// A server whose bytes also take from `node`, which other servers may share.
async fn start_on(limits: ConnectionLimits, node: Arc<NodeMemory>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(TestHandler::new());
    let cancel = CancellationToken::new();
    let budget = TransportBudget::new(&limits, node);
    tokio::spawn(serve(
        listener,
        handler.clone(),
        4 << 20,
        limits,
        budget.clone(),
        cancel.clone(),
    ));
    Server {
        addr,
        handler,
        budget,
        cancel,
    }
}

struct Client {
    replies: FramedRead<OwnedReadHalf, FrameCodec<Msg>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let (read, write) = TcpStream::connect(addr).await.unwrap().into_split();
        Client {
            replies: FramedRead::new(read, FrameCodec::default()),
            write,
        }
    }

    async fn send(&mut self, messages: &[Msg]) {
        let mut buf = BytesMut::new();
        let mut codec = FrameCodec::<Msg>::default();
        for m in messages {
            codec.encode(m, &mut buf).unwrap();
        }
        self.write.write_all(&buf).await.unwrap();
    }

    /// The id of the next reply; None if the connection closed first.
    async fn reply(&mut self) -> Option<u32> {
        let next = tokio::time::timeout(PATIENCE, self.replies.next())
            .await
            .expect("no reply within PATIENCE");
        match next {
            Some(Ok(Msg::Reply { id })) | Some(Ok(Msg::Data { id, .. })) => Some(id),
            Some(Ok(Msg::Arrays { .. })) => panic!("arrays are not a reply"),
            Some(Ok(other)) => panic!("not a reply: {other:?}"),
            Some(Err(_)) | None => None,
        }
    }

    /// Sends a fast request and returns whether it was answered.
    async fn served(&mut self, id: u32) -> bool {
        let _ = self
            .write
            .write_all(&encoded(&[request(id, Op::Fast, 0, 0)]))
            .await;
        self.reply().await == Some(id)
    }

    /// Whether the server closes the connection within [`PATIENCE`] (end of
    /// stream or reset).
    async fn closed(&mut self) -> bool {
        match tokio::time::timeout(PATIENCE, self.replies.next()).await {
            Err(_) => false,
            Ok(None) | Ok(Some(Err(_))) => true,
            Ok(Some(Ok(m))) => panic!("a frame on a connection expected to close: {m:?}"),
        }
    }
}

fn request(id: u32, op: Op, tag: u8, arg: u32) -> Msg {
    Msg::Request { id, op, tag, arg }
}

fn encoded(messages: &[Msg]) -> BytesMut {
    let mut buf = BytesMut::new();
    for m in messages {
        FrameCodec::<Msg>::default().encode(m, &mut buf).unwrap();
    }
    buf
}

/// Whether a new connection gets served within [`PATIENCE`] (a place may take
/// a moment to come back after a connection closes).
async fn a_new_connection_is_served(addr: SocketAddr) -> bool {
    let deadline = std::time::Instant::now() + PATIENCE;
    let mut attempt = 0;
    while std::time::Instant::now() < deadline {
        let mut c = Client::connect(addr).await;
        if c.served(10 + attempt).await {
            return true;
        }
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn in_flight_bound_stops_reading() {
    const BOUND: usize = 4;
    const SENT: u32 = 20;
    const TAG: usize = 1;
    let server = start(16, BOUND).await;
    let h = &server.handler;
    let mut client = Client::connect(server.addr).await;
    let requests: Vec<Msg> = (0..SENT)
        .map(|id| request(id, Op::Block, TAG as u8, 0))
        .collect();
    client.send(&requests).await;

    eventually("the bound is reached", || {
        h.running.load(Ordering::SeqCst) >= BOUND
    })
    .await;
    // Give a reader that ignores the bound time to go on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(h.max_running.load(Ordering::SeqCst), BOUND);
    // Not read, not merely queued: the frames past the bound were never decoded.
    assert_eq!(DECODED[TAG].load(Ordering::SeqCst), BOUND);

    h.gate.add_permits(SENT as usize);
    let mut ids = Vec::new();
    for _ in 0..SENT {
        ids.push(client.reply().await.expect("a reply"));
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..SENT).collect::<Vec<_>>());
    assert_eq!(h.done.load(Ordering::SeqCst), SENT as usize);
    assert_eq!(h.max_running.load(Ordering::SeqCst), BOUND);
    assert_eq!(DECODED[TAG].load(Ordering::SeqCst), SENT as usize);
}

#[tokio::test]
async fn connection_limit_closes_the_extra_connection() {
    let server = start(2, 8).await;
    let mut first = Client::connect(server.addr).await;
    let mut second = Client::connect(server.addr).await;
    // Answered, so both are accepted before the third connects.
    assert!(first.served(1).await);
    assert!(second.served(2).await);

    let mut third = Client::connect(server.addr).await;
    let _ = third
        .write
        .write_all(&encoded(&[request(3, Op::Fast, 0, 0)]))
        .await;
    assert!(
        third.closed().await,
        "the connection over the limit stays open"
    );
    assert!(first.served(4).await);
    assert!(second.served(5).await);

    // A closed connection gives its place back.
    drop(first);
    assert!(
        a_new_connection_is_served(server.addr).await,
        "no place freed after a connection closed"
    );
    assert!(second.served(6).await);
}

#[tokio::test]
async fn bad_frame_closes_only_its_connection() {
    let server = start(16, 8).await;
    let mut bad = Client::connect(server.addr).await;
    let mut good = Client::connect(server.addr).await;
    assert!(bad.served(1).await);
    // A header naming message type 99, which the protocol does not have.
    bad.write
        .write_all(&[0, 0, 0, 1, 99, 0, 0, 0, 0])
        .await
        .unwrap();
    assert!(bad.closed().await, "a bad frame left the connection open");
    assert!(good.served(2).await);
    let mut later = Client::connect(server.addr).await;
    assert!(later.served(3).await);
}

#[tokio::test]
async fn unencodable_reply_closes_the_connection() {
    let server = start(16, 8).await;
    let mut client = Client::connect(server.addr).await;
    let mut other = Client::connect(server.addr).await;
    client.send(&[request(1, Op::BadReply, 0, 0)]).await;
    assert!(
        client.closed().await,
        "a reply that cannot be encoded left its client waiting"
    );
    assert!(other.served(2).await);
}

#[tokio::test]
async fn ordered_frames_run_in_order_before_the_next_frame() {
    let server = start(16, 64).await;
    let mut client = Client::connect(server.addr).await;
    // Earlier frames sleep longer: run concurrently, they would finish in reverse.
    let mut frames: Vec<Msg> = (0..8)
        .map(|id| request(id, Op::OrderedSleep, 0, (8 - id) * 10))
        .collect();
    frames.insert(3, Msg::Heartbeat);
    // A concurrent frame after them is read only once they are done.
    frames.push(request(100, Op::Sleep, 0, 0));
    client.send(&frames).await;
    for _ in 0..9 {
        client.reply().await.expect("a reply");
    }
    let mut expected: Vec<u32> = (0..8).collect();
    expected.push(100);
    assert_eq!(*server.handler.finished.lock().unwrap(), expected);
    assert_eq!(server.handler.unexpected.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn shutdown_closes_connections() {
    let server = start(16, 8).await;
    let mut client = Client::connect(server.addr).await;
    assert!(client.served(1).await);
    server.cancel.cancel();
    assert!(client.closed().await);
    let mut buf = [0u8; 1];
    let refused = match TcpStream::connect(server.addr).await {
        Err(_) => true,
        Ok(mut s) => matches!(
            tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        ),
    };
    assert!(refused, "a new connection was served after shutdown");
}

#[tokio::test]
async fn a_half_sent_frame_takes_its_room_before_its_body_and_times_out() {
    let limits = ConnectionLimits {
        max_in_flight_bytes: bytesize::ByteSize::mib(1),
        max_in_flight_bytes_per_connection: bytesize::ByteSize::mib(1),
        // Well past the 300 ms in which the other frame must stay unread,
        // however slowly the steps before that window run.
        frame_timeout: Duration::from_secs(3),
        ..ConnectionLimits::default()
    };
    let server = start_with(limits).await;
    let mut slow = Client::connect(server.addr).await;
    // A request announcing 2 MiB of fields, of which 100 KiB arrive.
    let mut head = BytesMut::new();
    head.put_i32(2 << 20);
    head.put_u8(REQUEST);
    head.put_i32(0);
    slow.write.write_all(&head).await.unwrap();
    slow.write.write_all(&vec![0u8; 100 << 10]).await.unwrap();
    eventually("the frame takes the whole pool", || {
        server.budget.incoming_in_use() == 1 << 20
    })
    .await;
    // Another connection's large frame waits for room instead of being read...
    let mut other = Client::connect(server.addr).await;
    let mut big = encoded(&[request(1, Op::Fast, 0, 0)]);
    // (a request padded to 128 KiB of fields, past the small-frame bypass)
    let pad = 128 << 10;
    let len = i32::from_be_bytes(big[0..4].try_into().unwrap()) + pad;
    big[0..4].copy_from_slice(&len.to_be_bytes());
    big.extend_from_slice(&vec![0u8; pad as usize]);
    other.write.write_all(&big).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), other.replies.next()).await;
    assert!(early.is_err(), "a large frame was read with the pool full");
    // ...while small frames (control messages, pushes) are not stuck behind it.
    let mut small = Client::connect(server.addr).await;
    assert!(
        small.served(2).await,
        "a small frame waited for the shared pool"
    );
    // The stalled frame is cut off after frame_timeout; its room goes to the other.
    assert!(slow.closed().await, "a stalled frame kept its connection");
    assert_eq!(other.reply().await, Some(1));
    eventually("the pool is empty again", || {
        server.budget.incoming_in_use() == 0
    })
    .await;
}

/// A request padded to `len` bytes of fields.
fn padded_request(id: u32, len: usize) -> BytesMut {
    let mut frame = encoded(&[request(id, Op::Fast, 0, 0)]);
    let pad = len - (frame.len() - HEADER_LEN);
    let announced = i32::from_be_bytes(frame[0..4].try_into().unwrap()) + pad as i32;
    frame[0..4].copy_from_slice(&announced.to_be_bytes());
    frame.extend_from_slice(&vec![0u8; pad]);
    frame
}

#[tokio::test]
async fn two_protocols_share_the_nodes_network_memory() {
    // 4 MiB of network share: large frames may hold 3 MiB of it.
    let node = NodeMemory::new(16 << 20, 4 << 20);
    let limits = ConnectionLimits {
        frame_timeout: Duration::from_secs(3),
        ..ConnectionLimits::default()
    };
    let one = start_on(limits, node.clone()).await;
    let other = start_on(limits, node.clone()).await;
    // A frame the share could never hold (3.5 MiB, within the port's 4 MiB
    // frame limit) is refused at its header.
    let mut huge = Client::connect(one.addr).await;
    let mut head = BytesMut::new();
    head.put_i32(7 << 19);
    head.put_u8(REQUEST);
    head.put_i32(0);
    huge.write.write_all(&head).await.unwrap();
    assert!(
        huge.closed().await,
        "a frame larger than the share was waited for"
    );
    // A half-sent 3 MiB frame on one server holds the share...
    let mut slow = Client::connect(one.addr).await;
    let half = padded_request(7, 3 << 20);
    slow.write.write_all(&half[..1 << 20]).await.unwrap();
    eventually("the half-sent frame holds the share", || {
        node.in_use(Part::InFlight) == 3 << 20
    })
    .await;
    // ...so the other server's large frame is not read meanwhile...
    let mut waiting = Client::connect(other.addr).await;
    waiting
        .write
        .write_all(&padded_request(1, 1 << 20))
        .await
        .unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.replies.next()).await;
    assert!(
        early.is_err(),
        "a large frame was read past the node's share"
    );
    // ...while its small frames are.
    let mut small = Client::connect(other.addr).await;
    assert!(small.served(2).await, "a small frame waited for the share");
    // Once the stalled frame times out its room goes to the other server.
    assert!(slow.closed().await);
    assert_eq!(waiting.reply().await, Some(1));
    eventually("the share is empty again", || {
        node.in_use(Part::InFlight) == 0
    })
    .await;
}

#[tokio::test]
async fn idle_connections_close_but_busy_ones_stay() {
    // Long enough that the busy connection's request, sent right after it
    // connects, is read before it counts as idle on a slow machine too.
    let limits = ConnectionLimits {
        idle_timeout: Duration::from_secs(1),
        ..ConnectionLimits::default()
    };
    let server = start_with(limits).await;
    let mut idle = Client::connect(server.addr).await;
    let mut busy = Client::connect(server.addr).await;
    busy.send(&[request(1, Op::Block, 0, 0)]).await;
    assert!(idle.closed().await, "an idle connection stayed open");
    // A request in flight for several idle periods keeps its connection.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    server.handler.gate.add_permits(1);
    assert_eq!(busy.reply().await, Some(1), "a busy connection was closed");
    // Once nothing is in flight it is idle too.
    assert!(busy.closed().await);
}

#[tokio::test]
async fn a_client_that_does_not_read_stops_getting_data_read_for_it() {
    const REPLY: u32 = 1 << 20;
    const SENT: u32 = 100;
    let limits = ConnectionLimits {
        max_reply_bytes_per_connection: bytesize::ByteSize::mib(2),
        frame_timeout: Duration::from_secs(2),
        ..ConnectionLimits::default()
    };
    let server = start_with(limits).await;
    let mut stuck = Client::connect(server.addr).await;
    let requests: Vec<Msg> = (0..SENT)
        .map(|id| request(id, Op::BigReply, 0, REPLY))
        .collect();
    stuck.send(&requests).await;
    // Let the socket buffers fill.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reserved = server.handler.reserved.load(Ordering::SeqCst);
    // What the kernel buffers took, plus at most the connection's 2 MiB: far from
    // the 100 MiB asked for.
    assert!(
        reserved < 40,
        "{reserved} replies of 1 MiB read for a client that reads nothing"
    );
    assert!(server.budget.replies_in_use() <= 2 << 20);
    // Others are served meanwhile.
    let mut other = Client::connect(server.addr).await;
    assert!(other.served(1000).await);
    // The stuck connection is closed once a reply waits frame_timeout, and its room
    // is given back.
    eventually("the stuck connection's room is free", || {
        server.budget.replies_in_use() == 0
    })
    .await;
    assert!(server.handler.reserved.load(Ordering::SeqCst) < 40);
}

#[tokio::test]
async fn small_replies_do_not_wait_behind_unread_chunks() {
    // 4 MiB of network share (large replies may hold 3 MiB of it) and a 2 MiB
    // reply pool for the protocol: four clients that ask for 1 MiB replies
    // and read none fill both, and more of their replies wait for room.
    let node = NodeMemory::new(16 << 20, 4 << 20);
    let limits = ConnectionLimits {
        max_reply_bytes: bytesize::ByteSize::mib(2),
        ..ConnectionLimits::default()
    };
    let server = start_on(limits, node.clone()).await;
    let mut stuck = Vec::new();
    for _ in 0..4 {
        let mut client = Client::connect(server.addr).await;
        let requests: Vec<Msg> = (0..100)
            .map(|id| request(id, Op::BigReply, 0, 1 << 20))
            .collect();
        client.send(&requests).await;
        stuck.push(client);
    }
    eventually("the unread replies fill the reply pool", || {
        server.budget.replies_in_use() >= 1 << 20
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A small reply (an RPC's answer) on another connection is not queued
    // behind them.
    let mut other = Client::connect(server.addr).await;
    other.send(&[request(7, Op::BigReply, 0, 100)]).await;
    let answered = tokio::time::timeout(Duration::from_secs(5), other.reply()).await;
    assert_eq!(
        answered.ok().flatten(),
        Some(7),
        "a small reply waited behind other connections' unread chunks"
    );
    assert!(node.in_use(Part::Reply) <= 4 << 20);
}

#[tokio::test]
async fn a_light_readers_chunk_goes_before_a_heavy_readers_queue() {
    // A 2 MiB reply pool for the protocol; a heavy reader asks for 100
    // chunks of 1 MiB and reads none for a while, so its connection (32 MiB
    // of its own) queues some 30 of them for the protocol's pool.
    let limits = ConnectionLimits {
        max_reply_bytes: bytesize::ByteSize::mib(2),
        ..ConnectionLimits::default()
    };
    let server = start_with(limits).await;
    let mut heavy = Client::connect(server.addr).await;
    let requests: Vec<Msg> = (0..100)
        .map(|id| request(id, Op::BigReply, 0, 1 << 20))
        .collect();
    heavy.send(&requests).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.handler.reserved_order.lock().unwrap().len();
    assert!(
        before < 40,
        "{before} chunks read for a reader that reads nothing"
    );
    // A light reader asks for one chunk; then the heavy one reads.
    let mut light = Client::connect(server.addr).await;
    light.send(&[request(1000, Op::BigReply, 0, 1 << 20)]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reading = tokio::spawn(async move {
        let mut read = 0;
        while read < 100 && data_reply(&mut heavy).await.is_some() {
            read += 1;
        }
        read
    });
    let (id, body) = data_reply(&mut light)
        .await
        .expect("the light reader's chunk");
    assert_eq!((id, body.len()), (1000, 1 << 20));
    let order = server.handler.reserved_order.lock().unwrap().clone();
    let ahead = order.iter().position(|&i| i == 1000).unwrap() - before;
    // First come, first served, the heavy reader's whole queue would go
    // first; by what each holds, the light reader's chunk is among the next.
    assert!(
        ahead <= 3,
        "{ahead} of the heavy reader's chunks went first: {order:?}"
    );
    assert_eq!(
        reading.await.unwrap(),
        100,
        "the heavy reader got every chunk"
    );
}

#[tokio::test]
async fn one_peer_cannot_take_every_place() {
    let limits = ConnectionLimits {
        max_connections_per_peer: std::num::NonZeroUsize::new(2).unwrap(),
        ..ConnectionLimits::default()
    };
    let server = start_with(limits).await;
    let mut first = Client::connect(server.addr).await;
    let mut second = Client::connect(server.addr).await;
    assert!(first.served(1).await);
    assert!(second.served(2).await);
    let mut third = Client::connect(server.addr).await;
    let _ = third
        .write
        .write_all(&encoded(&[request(3, Op::Fast, 0, 0)]))
        .await;
    assert!(
        third.closed().await,
        "a third connection from one peer stayed open"
    );
    // Its place comes back when one of the two closes.
    drop(first);
    assert!(
        a_new_connection_is_served(server.addr).await,
        "no peer place freed after a connection closed"
    );
}

/// Reads one `Data` reply: its id and body.
async fn data_reply(client: &mut Client) -> Option<(u32, Bytes)> {
    let next = tokio::time::timeout(PATIENCE, client.replies.next())
        .await
        .expect("no reply within PATIENCE");
    match next {
        Some(Ok(Msg::Data { id, body })) => Some((id, body)),
        Some(Ok(other)) => panic!("not a data reply: {other:?}"),
        Some(Err(_)) | None => None,
    }
}

fn arrays_of(sizes: &[usize]) -> Vec<Bytes> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| Bytes::from((0..n).map(|k| (k * 31 + i * 7) as u8).collect::<Vec<_>>()))
        .collect()
}

#[tokio::test]
async fn large_arrays_are_read_into_buffers_of_their_own() {
    let server = start(16, 8).await;
    let mut client = Client::connect(server.addr).await;
    // Large and tiny arrays, empty ones, and one just under the direct-read size.
    let sizes = [100, 300 << 10, 5, 0, 70 << 10, (1 << 20) + 3, 63 << 10, 1];
    let arrays = arrays_of(&sizes);
    let mut wire = encoded(&[Msg::Arrays {
        id: 1,
        arrays: arrays.clone(),
        own: 0,
    }]);
    // A request right behind it in the same bytes: what was read ahead of
    // the split frame's end must not be lost.
    wire.extend_from_slice(&encoded(&[request(2, Op::Fast, 0, 0)]));
    // In uneven pieces, so arrays begin and end mid-read.
    for piece in wire.chunks(7919) {
        client.write.write_all(piece).await.unwrap();
        client.write.flush().await.unwrap();
        tokio::task::yield_now().await;
    }
    let (id, body) = data_reply(&mut client).await.expect("a reply");
    assert_eq!(id, 1);
    assert_eq!(
        &body[..4],
        &(sizes.len() as u32).to_be_bytes(),
        "every array came apart"
    );
    assert_eq!(&body[4..], &arrays.concat()[..]);
    assert_eq!(client.reply().await, Some(2));

    // A frame below the split size is read whole: its arrays are slices of it.
    let small = arrays_of(&[10, 20 << 10, 3]);
    client
        .send(&[Msg::Arrays {
            id: 3,
            arrays: small.clone(),
            own: 0,
        }])
        .await;
    let (id, body) = data_reply(&mut client).await.expect("a reply");
    assert_eq!(id, 3);
    assert_eq!(&body[..4], &0u32.to_be_bytes());
    assert_eq!(&body[4..], &small.concat()[..]);
}

#[tokio::test]
async fn a_split_frame_that_lies_about_its_arrays_is_a_bad_frame() {
    let server = start(16, 8).await;
    // Announces three arrays and carries one: the decoder finds it short.
    let mut fields = BytesMut::new();
    fields.put_u32(7);
    fields.put_i32(3);
    fields.put_i32(300 << 10);
    fields.put_slice(&vec![1u8; 300 << 10]);
    // An array longer than its whole frame: the rest is read as fields.
    let mut longer = BytesMut::new();
    longer.put_u32(8);
    longer.put_i32(1);
    longer.put_i32(10 << 20);
    longer.put_slice(&vec![2u8; 300 << 10]);
    for fields in [fields, longer] {
        let mut wire = BytesMut::new();
        wire.put_i32(fields.len() as i32);
        wire.put_u8(ARRAYS);
        wire.put_i32(0);
        wire.extend_from_slice(&fields);
        let mut client = Client::connect(server.addr).await;
        client.write.write_all(&wire).await.unwrap();
        assert!(
            client.closed().await,
            "a bad split frame closes its connection"
        );
        assert!(a_new_connection_is_served(server.addr).await);
    }
}
