//! One accepted connection: this task reads frames and starts handlers, a writer task
//! sends their replies.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Handler, Labels};
use crate::{frame_parts, FrameCodec, FrameMessage};

/// Replies queued for one connection's socket. A handler that finds the queue full
/// waits, holding its in-flight slot, so a client that does not read its replies stops
/// being read too.
const REPLY_QUEUE: usize = 128;

/// Sends frames back on the connection a request came from, in the order they are sent.
pub struct Replier<M> {
    tx: mpsc::Sender<M>,
    closed: CancellationToken,
}

impl<M> Clone for Replier<M> {
    fn clone(&self) -> Self {
        Replier {
            tx: self.tx.clone(),
            closed: self.closed.clone(),
        }
    }
}

impl<M> Replier<M> {
    /// Queues a frame; false when the connection is gone.
    pub async fn send(&self, message: M) -> bool {
        !self.closed.is_cancelled() && self.tx.send(message).await.is_ok()
    }

    /// Cancelled when the connection closes (the peer left, a bad frame, a reply that
    /// could not be encoded or written, shutdown): work that streams to this connection
    /// on its own stops then.
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }
}

/// Serves one connection until it closes, then waits for its handlers.
pub(super) async fn run<M, H>(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Arc<H>,
    max_frame_size: usize,
    max_in_flight: usize,
    cancel: &CancellationToken,
) where
    M: FrameMessage + Send + 'static,
    M::Kind: Send,
    M::Error: fmt::Display + Send,
    H: Handler<M>,
{
    let labels = Labels::of::<M, H>(&handler);
    let (read, write) = stream.into_split();
    let closed = cancel.child_token();
    let (tx, rx) = mpsc::channel(REPLY_QUEUE);
    let writer = tokio::spawn(write_replies(write, rx, closed.clone(), labels, peer));
    let replier = Replier {
        tx,
        closed: closed.clone(),
    };
    let handlers = TaskTracker::new();
    let frames = FramedRead::new(read, ReadCodec(FrameCodec::<M>::new(max_frame_size)));
    read_frames(
        frames,
        &handler,
        &replier,
        &handlers,
        max_in_flight,
        labels,
        peer,
    )
    .await;
    closed.cancel();
    drop(replier);
    // The socket is closed once the writer is done; the connection (and its slot in
    // the port's limit) lasts until its handlers are.
    let _ = writer.await;
    handlers.close();
    handlers.wait().await;
}

async fn read_frames<M, H>(
    mut frames: FramedRead<OwnedReadHalf, ReadCodec<M>>,
    handler: &Arc<H>,
    replier: &Replier<M>,
    handlers: &TaskTracker,
    max_in_flight: usize,
    labels: Labels,
    peer: SocketAddr,
) where
    M: FrameMessage + Send + 'static,
    M::Error: fmt::Display,
    H: Handler<M>,
{
    let closed = replier.closed();
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    loop {
        // Backpressure: without a free slot the socket is not read.
        let slot = tokio::select! {
            _ = closed.cancelled() => return,
            slot = in_flight.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let frame = tokio::select! {
            _ = closed.cancelled() => return,
            frame = frames.next() => frame,
        };
        let message = match frame {
            None => return,
            Some(Ok(message)) => message,
            Some(Err(ReadError::Io(e))) => {
                tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "connection failed");
                return;
            }
            Some(Err(ReadError::Frame(e))) => {
                // After a bad header the stream cannot be realigned; after bad fields it
                // could, but a peer that sends them is not one to keep talking to.
                tracing::warn!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "bad frame; closing the connection");
                metrics::counter!("switchyard_bad_frames_total", "protocol" => labels.protocol, "port" => labels.port)
                    .increment(1);
                return;
            }
        };
        if message.is_heartbeat() {
            continue;
        }
        if handler.ordered(&message) {
            handler.clone().handle(message, replier.clone()).await;
            continue;
        }
        let handler = handler.clone();
        let replier = replier.clone();
        handlers.spawn(async move {
            handler.handle(message, replier).await;
            drop(slot);
        });
    }
}

/// Writes replies, header and body each from its own buffer: a body (a chunk, a
/// memory read) is never copied into a frame buffer.
async fn write_replies<M>(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::Receiver<M>,
    closed: CancellationToken,
    labels: Labels,
    peer: SocketAddr,
) where
    M: FrameMessage,
    M::Error: fmt::Display,
{
    loop {
        let message = tokio::select! {
            _ = closed.cancelled() => break,
            message = rx.recv() => match message {
                Some(m) => m,
                None => break,
            },
        };
        let (head, body) = match frame_parts(&message) {
            Ok(parts) => parts,
            Err(e) => {
                // The client would wait for this reply until its timeout: close instead,
                // so it fails (and retries) now.
                tracing::error!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "cannot encode a reply; closing the connection");
                metrics::counter!("switchyard_reply_encode_errors_total", "protocol" => labels.protocol, "port" => labels.port)
                    .increment(1);
                break;
            }
        };
        let written = async {
            write.write_all(&head).await?;
            if !body.is_empty() {
                write.write_all(&body).await?;
            }
            Ok::<_, io::Error>(())
        };
        let written = tokio::select! {
            _ = closed.cancelled() => break,
            written = written => written,
        };
        if let Err(e) = written {
            tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "write failed");
            break;
        }
    }
    // Stops the reader too: a connection that cannot answer takes no more requests.
    closed.cancel();
}

/// What reading a frame can fail with: the socket, or the peer's bytes.
enum ReadError<E> {
    Io(io::Error),
    Frame(E),
}

impl<E> From<io::Error> for ReadError<E> {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// The frame codec with socket errors told apart from bad frames (the protocols' errors
/// carry both, so they cannot be told apart afterwards).
struct ReadCodec<M: FrameMessage>(FrameCodec<M>);

impl<M: FrameMessage> Decoder for ReadCodec<M> {
    type Item = M;
    type Error = ReadError<M::Error>;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<M>, Self::Error> {
        self.0.decode(src).map_err(ReadError::Frame)
    }
}
