//! One outgoing connection to a Celeborn port: frames out, replies matched to
//! their requests (by request id, or by stream and chunk), every other frame
//! handed to a subscriber. A worker uses it to forward pushes to its replica
//! peer (`server/worker/replicate.rs`); the test and bench client
//! (`switchyard-clients`) builds the protocol's calls on top of it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

use crate::frame::{CelebornCodec, Message};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("connection closed")]
    Closed,
    #[error("timed out")]
    Timeout,
    #[error("rpc failure: {0}")]
    Failure(String),
    #[error("bad reply: {0}")]
    BadReply(String),
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Replies matched to requests: by request id, or by (stream, chunk).
#[derive(Default)]
struct Pending {
    rpc: HashMap<i64, oneshot::Sender<Result<Bytes, String>>>,
    chunks: HashMap<(i64, i32), oneshot::Sender<Result<Bytes, String>>>,
    /// Set, under the lock, when the reader stops: a call made after that
    /// would wait for an answer no one reads, so it fails at once (a
    /// replica's connection to a killed peer once held pushes for the
    /// whole answer timeout).
    closed: bool,
}

impl Pending {
    /// Registers a call waiting for its answer; fails if the connection
    /// already ended.
    fn wait_for<K: std::hash::Hash + Eq>(
        map: impl FnOnce(&mut Pending) -> &mut HashMap<K, oneshot::Sender<Result<Bytes, String>>>,
        pending: &Mutex<Pending>,
        key: K,
    ) -> Result<oneshot::Receiver<Result<Bytes, String>>> {
        let mut p = pending.lock();
        if p.closed {
            return Err(ClientError::Closed);
        }
        let (tx, rx) = oneshot::channel();
        map(&mut p).insert(key, tx);
        Ok(rx)
    }
}

/// Frames the server sends on its own (credit streams: READ_DATA, backlog,
/// errors, and its BUFFER_STREAM_END RPC requests).
type Events = Arc<Mutex<Option<mpsc::UnboundedSender<Message>>>>;

/// One connection to any Celeborn port.
pub struct Connection {
    addr: SocketAddr,
    tx: mpsc::Sender<Message>,
    pending: Arc<Mutex<Pending>>,
    events: Events,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    /// Closes the socket: the reader task holds its other half.
    fn drop(&mut self) {
        self.reader.abort();
    }
}

static NEXT_REQUEST: AtomicI64 = AtomicI64::new(1);

/// A fresh request id, unique in this process.
pub fn next_request_id() -> i64 {
    NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
}

impl Connection {
    pub async fn connect(addr: SocketAddr) -> Result<Self> {
        Self::connect_from(addr, None).await
    }

    /// As [`Connection::connect`], leaving from `source` (port chosen by
    /// the kernel) when given.
    pub async fn connect_from(addr: SocketAddr, source: Option<std::net::IpAddr>) -> Result<Self> {
        let stream = match source {
            None => TcpStream::connect(addr).await,
            Some(ip) => {
                async {
                    let socket = match addr {
                        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
                    };
                    socket.bind(SocketAddr::new(ip, 0))?;
                    socket.connect(addr).await
                }
                .await
            }
        }
        .map_err(|e| ClientError::Connect(addr, e))?;
        stream.set_nodelay(true).ok();
        let (mut sink, mut frames) = Framed::new(stream, CelebornCodec::default()).split();
        let (tx, mut rx) = mpsc::channel::<Message>(64);
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                if sink.send(m).await.is_err() {
                    return;
                }
            }
        });
        let pending: Arc<Mutex<Pending>> = Default::default();
        let p = pending.clone();
        let events: Events = Default::default();
        let ev = events.clone();
        let reader = tokio::spawn(async move {
            while let Some(Ok(m)) = frames.next().await {
                let mut p = p.lock();
                match m {
                    Message::RpcResponse { request_id, body } => {
                        if let Some(tx) = p.rpc.remove(&request_id) {
                            let _ = tx.send(Ok(body));
                        }
                    }
                    Message::RpcFailure { request_id, error } => {
                        if let Some(tx) = p.rpc.remove(&request_id) {
                            let _ = tx.send(Err(error));
                        }
                    }
                    Message::ChunkFetchSuccess { slice, body } => {
                        if let Some(tx) = p.chunks.remove(&(slice.stream_id, slice.chunk_index)) {
                            let _ = tx.send(Ok(body));
                        }
                    }
                    Message::ChunkFetchFailure { slice, error } => {
                        if let Some(tx) = p.chunks.remove(&(slice.stream_id, slice.chunk_index)) {
                            let _ = tx.send(Err(error));
                        }
                    }
                    other => {
                        if let Some(tx) = ev.lock().as_ref() {
                            let _ = tx.send(other);
                        }
                    }
                }
            }
            ev.lock().take();
            let mut p = p.lock();
            p.closed = true;
            p.rpc.clear();
            p.chunks.clear();
        });
        Ok(Connection {
            addr,
            tx,
            pending,
            events,
            reader,
        })
    }

    /// The address this connection was opened to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the connection has ended (its reader stopped).
    pub fn is_closed(&self) -> bool {
        self.reader.is_finished()
    }

    /// Receives the frames that answer no request of ours from now on; the
    /// channel ends when the connection does.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Message> {
        let (tx, rx) = mpsc::unbounded_channel();
        *self.events.lock() = Some(tx);
        rx
    }

    async fn wait(rx: oneshot::Receiver<Result<Bytes, String>>) -> Result<Bytes> {
        tokio::time::timeout(Duration::from_secs(120), rx)
            .await
            .map_err(|_| ClientError::Timeout)?
            .map_err(|_| ClientError::Closed)?
            .map_err(ClientError::Failure)
    }

    /// Sends a frame that expects an RpcResponse/RpcFailure with `request_id`.
    pub async fn call(&self, request_id: i64, frame: Message) -> Result<Bytes> {
        self.call_queued(request_id, frame).await?.await
    }

    /// Sends a frame with no reply.
    pub async fn send(&self, frame: Message) -> Result<()> {
        self.tx.send(frame).await.map_err(|_| ClientError::Closed)
    }

    /// Sends a frame whose RpcResponse/RpcFailure carries `request_id`, and
    /// returns its reply as a future, so that several can be in flight:
    /// frames queued one after another go out in that order.
    pub async fn call_queued(
        &self,
        request_id: i64,
        frame: Message,
    ) -> Result<impl std::future::Future<Output = Result<Bytes>> + Send + 'static> {
        let rx = Pending::wait_for(|p| &mut p.rpc, &self.pending, request_id)?;
        self.tx.send(frame).await.map_err(|_| ClientError::Closed)?;
        Ok(Self::wait(rx))
    }

    /// Sends a frame answered by ChunkFetchSuccess/ChunkFetchFailure of
    /// chunk `chunk_index` of stream `stream_id`.
    pub async fn call_chunk(
        &self,
        (stream_id, chunk_index): (i64, i32),
        frame: Message,
    ) -> Result<Bytes> {
        let key = (stream_id, chunk_index);
        let rx = Pending::wait_for(|p| &mut p.chunks, &self.pending, key)?;
        self.send(frame).await?;
        Self::wait(rx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call made after the peer closed the connection fails at once; it
    /// used to wait for the whole answer timeout (120 s), holding a
    /// replica's pushes that long.
    #[tokio::test]
    async fn a_call_after_the_peer_closed_fails_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move { drop(listener.accept().await.unwrap()) });
        let conn = Connection::connect(addr).await.unwrap();
        server.await.unwrap();
        while !conn.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let request = Message::RpcRequest {
            request_id: 7,
            body: Bytes::from_static(b"ping"),
        };
        let answer = tokio::time::timeout(Duration::from_secs(5), conn.call(7, request)).await;
        assert!(
            matches!(answer, Ok(Err(ClientError::Closed))),
            "expected Closed at once, got {answer:?}"
        );
    }
}
