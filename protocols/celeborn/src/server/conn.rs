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

/// Sends frames back on the connection a request came from.
#[derive(Clone)]
pub struct Replier {
    tx: mpsc::Sender<Message>,
}

impl Replier {
    pub async fn send(&self, m: Message) {
        let _ = self.tx.send(m).await;
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
    let replier = Replier { tx };
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
    drop(replier);
    let _ = writer.await;
}
