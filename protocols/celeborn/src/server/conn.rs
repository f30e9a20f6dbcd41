//! The connection loop shared by every Celeborn port: frames in, handler
//! tasks, replies out (in completion order, matched by request id).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::frame::{CelebornCodec, Message};

/// Sends frames back on the connection a request came from. Frames go out
/// in the order they are sent.
#[derive(Clone)]
pub struct Replier {
    tx: mpsc::Sender<Message>,
    closed: CancellationToken,
}

impl Replier {
    /// Queues a frame; false when the connection is gone.
    pub async fn send(&self, m: Message) -> bool {
        !self.closed.is_cancelled() && self.tx.send(m).await.is_ok()
    }

    /// Cancelled when the peer closes the connection (or it fails): work that
    /// streams to this connection on its own (credit streams) stops then.
    pub fn closed(&self) -> &CancellationToken {
        &self.closed
    }
}

/// Handles one frame. Runs in its own task; replies through `replier`.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        message: Message,
        replier: Replier,
    ) -> impl Future<Output = ()> + Send;

    /// A name for logs.
    fn port(&self) -> &'static str;

    /// Whether `message` must be handled before the next frame of its
    /// connection is read (Flink's map-partition records and regions, whose
    /// order is their meaning). Others run concurrently.
    fn ordered(&self, _message: &Message) -> bool {
        false
    }
}

pub async fn serve<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    max_frame_size: usize,
    cancel: CancellationToken,
) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(port = handler.port(), error = %e, "accept failed");
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            connection(stream, peer, handler, max_frame_size, cancel).await;
        });
    }
}

async fn connection<H: Handler>(
    stream: TcpStream,
    peer: SocketAddr,
    handler: Arc<H>,
    max_frame_size: usize,
    cancel: CancellationToken,
) {
    let (read, mut write) = stream.into_split();
    let mut frames = FramedRead::new(read, CelebornCodec::new(max_frame_size));
    let (tx, mut rx) = mpsc::channel::<Message>(128);
    // Header and body are written from their own buffers: a chunk is never
    // copied into a frame buffer.
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            let (head, body) = match m.frame_parts() {
                Ok(parts) => parts,
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode a reply");
                    continue;
                }
            };
            let written = async {
                write.write_all(&head).await?;
                if !body.is_empty() {
                    write.write_all(&body).await?;
                }
                Ok::<_, std::io::Error>(())
            };
            if written.await.is_err() {
                return;
            }
        }
    });
    let closed = cancel.child_token();
    let replier = Replier {
        tx,
        closed: closed.clone(),
    };
    loop {
        let frame = tokio::select! {
            _ = cancel.cancelled() => break,
            f = frames.next() => f,
        };
        match frame {
            None => break,
            Some(Ok(Message::Heartbeat)) => {
                // Clients answer heartbeats; we just note the peer is alive.
            }
            Some(Ok(m)) if handler.ordered(&m) => handler.clone().handle(m, replier.clone()).await,
            Some(Ok(m)) => {
                let handler = handler.clone();
                let replier = replier.clone();
                tokio::spawn(async move { handler.handle(m, replier).await });
            }
            Some(Err(e)) => {
                // A malformed frame leaves the stream unsynchronised: close it.
                tracing::warn!(port = handler.port(), %peer, error = %e, "bad frame; closing connection");
                metrics::counter!("switchyard_celeborn_bad_frames_total", "port" => handler.port())
                    .increment(1);
                break;
            }
        }
    }
    closed.cancel();
    drop(replier);
    let _ = writer.await;
}
