//! One accepted connection: this task reads frames and runs their handlers (a handler
//! that has to wait goes on in a task of its own); replies go out through the
//! connection's [`Outbox`].
//!
//! What a connection may hold is bounded before it is allocated: a frame's bytes are
//! taken from the connection's and the protocol's incoming pools when its header
//! arrives, before the body is read; a reply's bytes from the reply pools before it is
//! queued (a reader reserves them before it reads a chunk from the store). Without
//! room the task waits and the socket is not read, so the client's sends wait on its
//! side.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::AsyncRead;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use super::outbox::{Outbox, WriteHalf};
use super::session::Session;
use tokio_util::task::TaskTracker;

use super::limits::{ConnectionLimits, Pool, TransportBudget};
use super::{Handler, Labels};
use crate::log_limit::{self, LogLimiter};
use crate::{
    FieldReader, FrameCodec, FrameMessage, Next, HEADER_LEN, MIN_DIRECT_READ, MIN_SPLIT_FRAME,
};
use switchyard_memory::{FairBytes, FairPool, Holder, NetworkBytes, NodeMemory, Part, TooLarge};

/// Replies queued for one connection's socket. A handler that finds the queue full
/// waits, holding its in-flight slot, so a client that does not read its replies stops
/// being read too.
pub(super) const REPLY_QUEUE: usize = 128;

/// What the reader asks the socket for while it waits for a header.
const HEADER_READ: usize = 8 << 10;

/// Frames and replies up to this size take room only in their connection's pool,
/// not the protocol's: control messages, their answers and ordinary pushes are
/// never stuck behind another client's half-sent large frames or unread chunks.
/// The node's network share still bounds what they hold together.
const SMALL_FRAME: usize = 64 << 10;

/// Client-caused warnings, rate-limited (the counters count every event).
static BAD_FRAME_LOG: LogLimiter = log_limit::client_caused();
pub(super) static TIMEOUT_LOG: LogLimiter = log_limit::client_caused();

/// Bytes taken from a connection's pool, its protocol's pool and the node's network
/// share, given back on drop.
#[derive(Debug)]
pub struct HeldBytes {
    _connection: OwnedSemaphorePermit,
    _shared: Option<FairBytes>,
    _node: NetworkBytes,
    _port: PortBytes,
}

/// Where a connection's bytes are taken from: its own pool, its protocol's, the
/// node's memory; and its port's `switchyard_connection_memory_bytes`, which
/// counts them per port (the node's share counts them per protocol only).
pub(super) struct Pools {
    pub(super) connection: Pool,
    /// Shared with the protocol's other connections, which wait their turn by
    /// what each holds (fair, not first come), as in the node's pools.
    pub(super) protocol: FairPool,
    pub(super) node: Arc<NodeMemory>,
    /// This connection, as the fair pools know it.
    pub(super) holder: Holder,
    pub(super) port: metrics::Gauge,
}

/// The memory a port's connections hold for frames and replies.
pub(super) const CONNECTION_MEMORY: &str = "switchyard_connection_memory_bytes";

/// Bytes counted in a port's gauge while they are held.
#[derive(Debug)]
struct PortBytes {
    gauge: metrics::Gauge,
    bytes: f64,
}

impl Drop for PortBytes {
    fn drop(&mut self) {
        self.gauge.decrement(self.bytes);
    }
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pools").finish_non_exhaustive()
    }
}

/// Reply bytes reserved on a connection ([`Replier::reserve`]), given back once the
/// reply that carries them is written (or dropped).
pub type ReplyBytes = HeldBytes;

/// Takes `bytes` from a connection's pool, then (unless None) its protocol's, then
/// the node's network share for `part`: always in this order, so two waiters cannot
/// hold one each. A request larger than the connection's or the protocol's pool
/// takes all of that pool; the node's share never lets more in than it has (a frame
/// larger is refused before this, a reply clamped). None once `closed` is cancelled.
async fn take(
    pools: &Pools,
    shared: bool,
    part: Part,
    bytes: usize,
    closed: &CancellationToken,
) -> Option<HeldBytes> {
    let connection = &pools.connection;
    let shared = shared.then_some(&pools.protocol);
    let holder = pools.holder;
    let node = (&pools.node, part);
    let take = async {
        let c = connection
            .semaphore
            .clone()
            .acquire_many_owned(connection.permits_for(bytes))
            .await
            .ok()?;
        let s = match shared {
            Some(shared) => Some(shared.take(holder, bytes as u64).await),
            None => None,
        };
        let n = node.0.take(holder, node.1, bytes).await.ok()?;
        pools.port.increment(bytes as f64);
        Some(HeldBytes {
            _connection: c,
            _shared: s,
            _node: n,
            _port: PortBytes {
                gauge: pools.port.clone(),
                bytes: bytes as f64,
            },
        })
    };
    // Biased: once the connection is closed, no waiter takes room freed by its
    // dropped replies.
    let permits = tokio::select! {
        biased;
        _ = closed.cancelled() => None,
        permits = take => permits,
    }?;
    (!closed.is_cancelled()).then_some(permits)
}

/// A request being answered: when its frame arrived and what it is. Its first reply
/// written to the socket (or the end of its handling, for a request without a reply)
/// records `switchyard_rpc_duration_seconds`.
struct Timing {
    labels: Labels,
    arrived: Instant,
    /// The frame's kind, unless the handler named the request ([`Replier::label`]).
    kind: &'static str,
    label: std::sync::OnceLock<&'static str>,
    recorded: std::sync::atomic::AtomicBool,
}

impl Timing {
    fn answered(&self) {
        if !self
            .recorded
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            let message = self.label.get().copied().unwrap_or(self.kind);
            crate::traffic::rpc_answered(
                self.labels.protocol,
                self.labels.port,
                message,
                self.arrived.elapsed(),
            );
        }
    }
}

/// A reply on its way to the socket, with what it holds until written.
pub(super) struct Reply<M> {
    pub(super) message: M,
    _bytes: Option<ReplyBytes>,
    /// Its place in the connection's reply queue.
    _place: OwnedSemaphorePermit,
    /// Keeps the connection from counting as idle while the reply waits.
    _alive: Arc<()>,
    /// The request it answers, when it answers one.
    timing: Option<Arc<Timing>>,
}

impl<M> Reply<M> {
    /// Written to the socket: the request it answers is timed.
    pub(super) fn answered(&self) {
        if let Some(t) = &self.timing {
            t.answered();
        }
    }
}

/// Sends frames back on the connection a request came from, in the order they are sent.
pub struct Replier<M> {
    outbox: Arc<Outbox<M>>,
    closed: CancellationToken,
    /// (this connection's, the protocol's reply pool, the node's memory).
    pools: Arc<Pools>,
    /// One count per live replier or queued reply: the connection is idle when only
    /// the reader's own is left (no handler, no stream, no reply in flight).
    alive: Arc<()>,
    session: Arc<Session>,
    /// The request this replier answers (none for the connection's own).
    timing: Option<Arc<Timing>>,
}

impl<M> Clone for Replier<M> {
    fn clone(&self) -> Self {
        Replier {
            outbox: self.outbox.clone(),
            closed: self.closed.clone(),
            pools: self.pools.clone(),
            alive: self.alive.clone(),
            session: self.session.clone(),
            timing: self.timing.clone(),
        }
    }
}

impl<M: FrameMessage + Send + 'static> Replier<M>
where
    M::Error: fmt::Display,
{
    /// Queues a frame, first taking its body's bytes from the reply pools (waiting
    /// while they are full); false when the connection is gone.
    pub async fn send(&self, message: M) -> bool {
        let len = message.frame_body().map_or(0, |b| b.len());
        let bytes = if len > 0 {
            match self.reserve(len).await {
                Some(bytes) => Some(bytes),
                None => return false,
            }
        } else {
            None
        };
        self.queue(message, bytes).await
    }

    /// Queues a frame whose bytes were reserved with [`Self::reserve`].
    pub async fn send_reserved(&self, message: M, bytes: ReplyBytes) -> bool {
        self.queue(message, Some(bytes)).await
    }

    async fn queue(&self, message: M, bytes: Option<ReplyBytes>) -> bool {
        let Some(place) = self.outbox.place().await else {
            return false;
        };
        let reply = Reply {
            message,
            _bytes: bytes,
            _place: place,
            _alive: self.alive.clone(),
            timing: self.timing.clone(),
        };
        self.outbox.push(reply).await
    }
}

impl<M> Replier<M> {
    /// Names the request this replier answers in `switchyard_rpc_duration_seconds` (a
    /// Celeborn RPC's message type, known once its body is decoded); the frame's kind
    /// otherwise. The first name given counts.
    pub fn label(&self, message: &'static str) {
        if let Some(t) = &self.timing {
            let _ = t.label.set(message);
        }
    }

    /// Records a request that gets no reply (a one-way message) as answered now.
    pub fn no_reply(&self) {
        if let Some(t) = &self.timing {
            t.answered();
        }
    }

    /// This replier for one request whose frame header was read at `arrived`.
    fn for_request(&self, labels: Labels, kind: &'static str, arrived: Instant) -> Self {
        Replier {
            outbox: self.outbox.clone(),
            closed: self.closed.clone(),
            pools: self.pools.clone(),
            alive: self.alive.clone(),
            session: self.session.clone(),
            timing: Some(Arc::new(Timing {
                labels,
                arrived,
                kind,
                label: std::sync::OnceLock::new(),
                recorded: Default::default(),
            })),
        }
    }

    /// Reserves `bytes` of reply room, waiting while this connection's (or every
    /// connection's) unwritten replies fill it; None when the connection is gone. A
    /// handler that reads data for a reply reserves first, so data is read only for
    /// clients that take it.
    pub async fn reserve(&self, bytes: usize) -> Option<ReplyBytes> {
        // The server sizes its replies (chunks, read buffers), not the client: one
        // larger than the node's share takes all of it rather than failing.
        let bytes = bytes.min(self.pools.node.largest(bytes) as usize);
        // A small reply (a control message's answer) takes room in its connection's
        // pool only, as a small frame does, so it never waits behind other
        // connections' unread chunks.
        let shared = bytes > SMALL_FRAME;
        take(&self.pools, shared, Part::Reply, bytes, &self.closed).await
    }

    /// Cancelled when the connection closes (the peer left, a bad frame, a timeout, a
    /// reply that could not be encoded or written, shutdown): work that streams to this
    /// connection on its own stops then.
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }

    /// This connection's session: whom it authenticated as.
    pub fn session(&self) -> &Session {
        &self.session
    }
}

type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;

/// An accepted connection, in plain TCP or TLS, split for the reader and
/// the writer.
pub(super) struct Stream {
    read: ReadHalf,
    write: WriteHalf,
}

impl Stream {
    /// The connection as it is, or after a TLS handshake that must finish
    /// within `timeout`.
    pub(super) async fn accept(
        stream: TcpStream,
        tls: Option<&tokio_rustls::TlsAcceptor>,
        timeout: Duration,
    ) -> io::Result<Stream> {
        match tls {
            None => {
                let (read, write) = stream.into_split();
                Ok(Stream {
                    read: Box::new(read),
                    write: Box::new(write),
                })
            }
            Some(acceptor) => {
                let tls = tokio::time::timeout(timeout, acceptor.accept(stream))
                    .await
                    .map_err(|_| {
                        io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
                    })??;
                let (read, write) = tokio::io::split(tls);
                Ok(Stream {
                    read: Box::new(read),
                    write: Box::new(write),
                })
            }
        }
    }
}

/// Serves one connection until it closes, then waits for its handlers.
pub(super) async fn run<M, H>(
    stream: Stream,
    peer: SocketAddr,
    handler: Arc<H>,
    max_frame_size: usize,
    limits: &ConnectionLimits,
    budget: &TransportBudget,
    cancel: &CancellationToken,
) where
    M: FrameMessage + Send + 'static,
    M::Kind: Send,
    M::Error: fmt::Display + Send,
    H: Handler<M>,
{
    let labels = Labels::of::<M, H>(&handler);
    let port_memory =
        metrics::gauge!(CONNECTION_MEMORY, "protocol" => labels.protocol, "port" => labels.port);
    let Stream { read, write } = stream;
    let closed = cancel.child_token();
    // Its frames and replies wait their turn in the shared pools as one.
    let holder = Holder::next();
    let outbox = Outbox::new(
        write,
        REPLY_QUEUE,
        closed.clone(),
        limits.frame_timeout,
        labels,
        peer,
    );
    let replier = Replier {
        outbox: outbox.clone(),
        closed: closed.clone(),
        pools: Arc::new(Pools {
            connection: Pool::new(limits.max_reply_bytes_per_connection),
            protocol: budget.replies.clone(),
            node: budget.node.clone(),
            holder,
            port: port_memory.clone(),
        }),
        alive: Arc::new(()),
        session: Arc::default(),
        timing: None,
    };
    let handlers = TaskTracker::new();
    let reader = Reader {
        read,
        buf: BytesMut::new(),
        codec: FrameCodec::<M>::new(max_frame_size),
        incoming: Pools {
            connection: Pool::new(limits.max_in_flight_bytes_per_connection),
            protocol: budget.incoming.clone(),
            node: budget.node.clone(),
            holder,
            port: port_memory,
        },
        idle_timeout: limits.idle_timeout,
        frame_timeout: limits.frame_timeout,
        labels,
        peer,
    };
    read_frames(
        reader,
        &handler,
        &replier,
        &handlers,
        limits.max_in_flight_per_connection.get(),
    )
    .await;
    drop(replier);
    // The socket is closed now; the connection (and its slot in the port's limit)
    // lasts until its handlers are.
    outbox.shut().await;
    handlers.close();
    handlers.wait().await;
}

async fn read_frames<M, H>(
    mut reader: Reader<M>,
    handler: &Arc<H>,
    replier: &Replier<M>,
    handlers: &TaskTracker,
    max_in_flight: usize,
) where
    M: FrameMessage + Send + 'static,
    M::Error: fmt::Display,
    H: Handler<M>,
{
    let closed = replier.closed();
    let in_flight = Arc::new(Semaphore::new(max_in_flight.min(Semaphore::MAX_PERMITS)));
    loop {
        // Backpressure: without a free slot the socket is not read.
        let slot = tokio::select! {
            _ = closed.cancelled() => return,
            slot = in_flight.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (message, bytes, arrived) = match reader.next(replier).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(end) => {
                end.report(reader.labels, reader.peer);
                return;
            }
        };
        if message.is_heartbeat() {
            continue;
        }
        let request = replier.for_request(reader.labels, message.kind_name(), arrived);
        if handler.ordered(&message) {
            handler.clone().handle(message, request).await;
            drop(bytes);
            continue;
        }
        let handler = handler.clone();
        let mut handling = Box::pin(async move {
            handler.handle(message, request).await;
            drop(bytes);
            drop(slot);
        });
        // Most requests are answered without waiting (a push appended to memory, a
        // control RPC): run them here, and give a task of its own only to one that
        // waits (for the store, the disk, a peer). A task per request would put a
        // scheduler hop between every frame and its reply, which a client with a
        // bounded number of requests in flight pays in throughput.
        if futures::poll!(handling.as_mut()).is_pending() {
            handlers.spawn(handling);
        }
    }
}

/// The read half of a connection and the frame it is reading.
struct Reader<M: FrameMessage> {
    read: ReadHalf,
    buf: BytesMut,
    codec: FrameCodec<M>,
    /// (this connection's, the protocol's) frame-byte pools, and the node's memory.
    incoming: Pools,
    idle_timeout: Duration,
    frame_timeout: Duration,
    labels: Labels,
    peer: SocketAddr,
}

/// Why a connection stopped being read, other than a clean EOF or shutdown.
enum ReadEnd<E> {
    Io(io::Error),
    Frame(E),
    /// Nothing sent and nothing in flight for `idle_timeout`.
    Idle,
    /// A frame begun and not finished within `frame_timeout`.
    Stalled {
        have: usize,
        want: usize,
    },
    /// The peer closed the connection in the middle of a frame.
    Truncated {
        have: usize,
        want: usize,
    },
    /// A frame that the node's network share could never hold.
    TooLarge(TooLarge),
}

impl<E: fmt::Display> ReadEnd<E> {
    fn report(self, labels: Labels, peer: SocketAddr) {
        let timeout = |kind: &'static str| {
            metrics::counter!("switchyard_connection_timeouts_total", "protocol" => labels.protocol, "port" => labels.port, "kind" => kind)
                .increment(1);
        };
        match self {
            ReadEnd::Io(e) => {
                tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "connection failed")
            }
            ReadEnd::Frame(e) => {
                // After a bad header the stream cannot be realigned; after bad fields it
                // could, but a peer that sends them is not one to keep talking to.
                if let Some(suppressed) = BAD_FRAME_LOG.allow() {
                    tracing::warn!(protocol = labels.protocol, port = labels.port, %peer, error = %e, suppressed, "bad frame; closing the connection");
                }
                metrics::counter!("switchyard_bad_frames_total", "protocol" => labels.protocol, "port" => labels.port)
                    .increment(1);
            }
            ReadEnd::Idle => {
                timeout("idle");
                tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, "idle connection closed");
            }
            ReadEnd::Stalled { have, want } => {
                timeout("frame");
                if let Some(suppressed) = TIMEOUT_LOG.allow() {
                    tracing::warn!(protocol = labels.protocol, port = labels.port, %peer, have, want, suppressed, "frame not completed in time; closing the connection");
                }
            }
            ReadEnd::Truncated { have, want } => {
                tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, have, want, "connection closed in the middle of a frame")
            }
            ReadEnd::TooLarge(TooLarge { requested, limit }) => {
                // Waiting would never end: the frame is more than the node may
                // hold on the network, whatever else it holds.
                if let Some(suppressed) = BAD_FRAME_LOG.allow() {
                    tracing::warn!(protocol = labels.protocol, port = labels.port, %peer, frame = requested, limit, suppressed, "frame larger than the node's network share of storage.memory.capacity; closing the connection");
                }
                metrics::counter!("switchyard_bad_frames_total", "protocol" => labels.protocol, "port" => labels.port)
                    .increment(1);
            }
        }
    }
}

impl<M: FrameMessage> Reader<M> {
    /// The next frame, the bytes it holds in the incoming pools and when its header
    /// was read; None at a clean EOF or when the connection is closed.
    async fn next(
        &mut self,
        replier: &Replier<M>,
    ) -> Result<Option<(M, HeldBytes, Instant)>, ReadEnd<M::Error>> {
        let closed = replier.closed().clone();
        // The header: between frames the connection may idle, but not for ever while
        // nothing of it is in flight; once a header has begun it must complete.
        while self.buf.len() < HEADER_LEN {
            let began = !self.buf.is_empty();
            self.buf.reserve(HEADER_READ);
            let wait = if began {
                self.frame_timeout
            } else {
                self.idle_timeout
            };
            let n = tokio::select! {
                _ = closed.cancelled() => return Ok(None),
                n = self.read.read_buf(&mut self.buf) => n.map_err(ReadEnd::Io)?,
                _ = tokio::time::sleep(wait) => {
                    if began {
                        return Err(ReadEnd::Stalled { have: self.buf.len(), want: HEADER_LEN });
                    }
                    // Only the reader's own replier left: no handler, stream or reply.
                    if Arc::strong_count(&replier.alive) <= 1 {
                        return Err(ReadEnd::Idle);
                    }
                    continue;
                }
            };
            if n == 0 {
                return if began {
                    Err(ReadEnd::Truncated {
                        have: self.buf.len(),
                        want: HEADER_LEN,
                    })
                } else {
                    Ok(None)
                };
            }
        }
        let arrived = Instant::now();
        let header = self
            .codec
            .parse_header(&self.buf[..HEADER_LEN])
            .map_err(ReadEnd::Frame)?;
        let frame_len = header.message_len + header.body_len;
        let Some(bytes) = room_for(&self.incoming, self.labels, frame_len, &closed).await? else {
            return Ok(None);
        };
        // The body's deadline runs from when there is room for it: waiting for room
        // (memory pressure) is the server's doing, not the client's.
        let mut frame = FrameRead {
            deadline: Instant::now() + self.frame_timeout,
            closed,
            have: 0,
            want: frame_len,
        };
        let splitter = M::splitter(header.kind).filter(|_| frame_len >= MIN_SPLIT_FRAME);
        let Some(splitter) = splitter else {
            return match self.read_whole(&mut frame).await? {
                Some(()) => match self.codec.decode(&mut self.buf) {
                    Ok(Some(message)) => Ok(Some((message, bytes, arrived))),
                    Ok(None) => unreachable!("a whole frame is buffered"),
                    Err(e) => Err(ReadEnd::Frame(e)),
                },
                None => Ok(None),
            };
        };
        self.buf.advance(HEADER_LEN);
        let Some(fields) = self
            .read_split(splitter, header.message_len, &mut frame)
            .await?
        else {
            return Ok(None);
        };
        let mut body = BytesMut::new();
        if self
            .fill(&mut body, header.body_len, &mut frame)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        match M::decode_frame(header.kind, fields, body.freeze()) {
            Ok(message) => Ok(Some((message, bytes, arrived))),
            Err(e) => Err(ReadEnd::Frame(e)),
        }
    }

    /// Buffers the rest of a frame (header included) in `buf`, for the codec.
    async fn read_whole(&mut self, frame: &mut FrameRead) -> Result<Option<()>, ReadEnd<M::Error>> {
        let want = HEADER_LEN + frame.want;
        // The node's memory holds the whole frame by now: allocate it once (pages
        // not yet written are not resident) rather than doubling as it arrives,
        // which would copy it and leave the smaller buffers to the allocator.
        self.buf.reserve(want.saturating_sub(self.buf.len()));
        while self.buf.len() < want {
            frame.have = self.buf.len() - HEADER_LEN;
            if self.read_into_buf(frame).await?.is_none() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    }

    /// Reads a message part of `len` bytes as its splitter walks it: its
    /// fields into one buffer, each array into one of its own.
    async fn read_split(
        &mut self,
        mut splitter: Box<dyn crate::Splitter>,
        len: usize,
        frame: &mut FrameRead,
    ) -> Result<Option<FieldReader>, ReadEnd<M::Error>> {
        let mut fields = BytesMut::new();
        let mut arrays = Vec::new();
        let mut left = len;
        while left > 0 {
            match splitter.next(&fields) {
                Next::Fields(upto) if upto.saturating_sub(fields.len()) <= left => {
                    let n = upto.saturating_sub(fields.len());
                    if n == 0 {
                        // A splitter that asks for nothing makes no progress:
                        // take the rest as fields.
                        break;
                    }
                    if self.fill(&mut fields, n, frame).await?.is_none() {
                        return Ok(None);
                    }
                    left -= n;
                }
                Next::Array(n) if n <= left => {
                    // Allocated at its full size so the socket can fill it in
                    // place; the pools already hold the whole frame's bytes,
                    // and pages not yet written are not resident.
                    let mut array = BytesMut::with_capacity(n);
                    if self.fill(&mut array, n, frame).await?.is_none() {
                        return Ok(None);
                    }
                    arrays.push(array.freeze());
                    left -= n;
                }
                // The rest, or a frame shorter than the splitter expects: the
                // decoder reports what is wrong with it.
                Next::Fields(_) | Next::Array(_) | Next::Rest => break,
            }
        }
        if left > 0 && self.fill(&mut fields, left, frame).await?.is_none() {
            return Ok(None);
        }
        Ok(Some(FieldReader::split(fields.freeze(), arrays)))
    }

    /// Appends the next `n` bytes of the frame to `dst`: what the read buffer
    /// holds, then straight from the socket while at least [`MIN_DIRECT_READ`]
    /// is missing (no copy), the last bit through the read buffer.
    async fn fill(
        &mut self,
        dst: &mut BytesMut,
        n: usize,
        frame: &mut FrameRead,
    ) -> Result<Option<()>, ReadEnd<M::Error>> {
        dst.reserve(n);
        let mut left = n;
        loop {
            let from_buf = left.min(self.buf.len());
            dst.extend_from_slice(&self.buf[..from_buf]);
            self.buf.advance(from_buf);
            frame.have += from_buf;
            left -= from_buf;
            if left == 0 {
                return Ok(Some(()));
            }
            let read = if left >= MIN_DIRECT_READ {
                let mut direct = (&mut *dst).limit(left);
                let read = frame.read(&mut self.read, &mut direct).await?;
                if let Some(n) = read {
                    frame.have += n;
                    left -= n;
                }
                read
            } else {
                self.buf.reserve(MIN_DIRECT_READ);
                self.read_into_buf(frame).await?
            };
            if read.is_none() {
                return Ok(None);
            }
        }
    }

    /// One read of the socket into `buf` (bytes it holds count as the frame's
    /// once taken from it); None when the connection closed.
    async fn read_into_buf(
        &mut self,
        frame: &FrameRead,
    ) -> Result<Option<usize>, ReadEnd<M::Error>> {
        frame.read(&mut self.read, &mut self.buf).await
    }
}

/// Room for a frame before its body is read, from `incoming` (a connection's
/// pool, its protocol's, the node's memory); without it the socket is not read (a
/// pause, counted). A frame the node's share could never hold ends the connection.
/// None once the connection is closed.
async fn room_for<E>(
    incoming: &Pools,
    labels: Labels,
    frame_len: usize,
    closed: &CancellationToken,
) -> Result<Option<HeldBytes>, ReadEnd<E>> {
    incoming.node.check(frame_len).map_err(ReadEnd::TooLarge)?;
    let shared = frame_len > SMALL_FRAME;
    let taking = take(incoming, shared, Part::InFlight, frame_len, closed);
    let mut taking = std::pin::pin!(taking);
    if let std::task::Poll::Ready(bytes) = futures::poll!(taking.as_mut()) {
        return Ok(bytes);
    }
    metrics::counter!("switchyard_read_pauses_total", "protocol" => labels.protocol, "port" => labels.port)
        .increment(1);
    Ok(taking.await)
}

/// A frame being read: its deadline and how much of it has arrived.
struct FrameRead {
    deadline: Instant,
    closed: CancellationToken,
    /// Bytes of the frame's message part and body consumed so far.
    have: usize,
    want: usize,
}

impl FrameRead {
    /// One read of the socket into `dst`: the bytes read, None when the
    /// connection is closed; an EOF or the deadline ends the frame.
    async fn read<E, B: bytes::BufMut>(
        &self,
        read: &mut ReadHalf,
        dst: &mut B,
    ) -> Result<Option<usize>, ReadEnd<E>> {
        let n = tokio::select! {
            _ = self.closed.cancelled() => return Ok(None),
            n = read.read_buf(dst) => n.map_err(ReadEnd::Io)?,
            _ = tokio::time::sleep_until(self.deadline) => {
                return Err(ReadEnd::Stalled { have: self.have, want: self.want });
            }
        };
        if n == 0 {
            return Err(ReadEnd::Truncated {
                have: self.have,
                want: self.want,
            });
        }
        Ok(Some(n))
    }
}
