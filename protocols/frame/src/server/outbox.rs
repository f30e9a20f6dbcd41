//! A connection's replies on their way to its socket.
//!
//! No writer task: the task that queues a reply writes it, if no other task is writing
//! to the socket at that moment; otherwise the one writing takes it along before it
//! lets go of the socket. A reply therefore leaves with no scheduler hop between the
//! handler that made it and the socket (a handler run by the reader answers a push on
//! the spot, as a Netty worker does), and replies queued while a write is under way
//! leave together in the next write. A write that cannot complete at once (the peer's
//! window is full) goes on in a task of its own, holding the socket, so that the reader
//! never waits for a slow peer; replies queued meanwhile wait for it, and their senders
//! wait for room ([`super::connection::REPLY_QUEUE`]), which stops the reader.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::connection::{Reply, TIMEOUT_LOG};
use super::Labels;
use crate::{frame_parts, FrameMessage};

pub(super) type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// Replies written with one write at most.
const WRITE_BATCH: usize = 64;

/// A reply body up to this size is copied into its batch's buffer; a larger one (a
/// chunk, a memory read) is written from its own buffer, never copied.
const GATHER_BODY: usize = 16 << 10;

pub(super) struct Outbox<M> {
    queue: parking_lot::Mutex<VecDeque<Reply<M>>>,
    /// A place in the queue per reply: a sender without one waits.
    room: Arc<Semaphore>,
    /// The socket's write half; None once the connection closed.
    write: Arc<tokio::sync::Mutex<Option<WriteHalf>>>,
    closed: CancellationToken,
    frame_timeout: Duration,
    labels: Labels,
    peer: SocketAddr,
}

impl<M: FrameMessage + Send + 'static> Outbox<M>
where
    M::Error: fmt::Display,
{
    pub(super) fn new(
        write: WriteHalf,
        places: usize,
        closed: CancellationToken,
        frame_timeout: Duration,
        labels: Labels,
        peer: SocketAddr,
    ) -> Arc<Self> {
        Arc::new(Outbox {
            queue: parking_lot::Mutex::new(VecDeque::new()),
            room: Arc::new(Semaphore::new(places)),
            write: Arc::new(tokio::sync::Mutex::new(Some(write))),
            closed,
            frame_timeout,
            labels,
            peer,
        })
    }

    /// A place for one reply, waiting while the queue is full; None once closed.
    pub(super) async fn place(&self) -> Option<OwnedSemaphorePermit> {
        tokio::select! {
            biased;
            _ = self.closed.cancelled() => None,
            permit = self.room.clone().acquire_owned() => permit.ok(),
        }
    }

    /// Queues a reply and, unless another task is writing, writes what is queued.
    pub(super) async fn push(self: &Arc<Self>, reply: Reply<M>) -> bool {
        if self.closed.is_cancelled() {
            return false;
        }
        self.queue.lock().push_back(reply);
        if let Ok(socket) = self.write.clone().try_lock_owned() {
            let mut writing = Box::pin(self.clone().drain(socket));
            // Most writes complete at once; one that waits for the peer goes on alone.
            if futures::poll!(writing.as_mut()).is_pending() {
                tokio::spawn(writing);
            }
        }
        true
    }

    /// Writes queued replies until none is left, then lets go of the socket.
    async fn drain(self: Arc<Self>, mut socket: OwnedMutexGuard<Option<WriteHalf>>) {
        let mut parts: Vec<Bytes> = Vec::new();
        let mut gathered = BytesMut::new();
        loop {
            let batch: Vec<Reply<M>> = {
                let mut q = self.queue.lock();
                let n = q.len().min(WRITE_BATCH);
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                drop(socket);
                // A reply queued after the look above found the socket taken and left
                // it to us: take the socket back for it, unless another task did.
                if self.queue.lock().is_empty() {
                    return;
                }
                match self.write.clone().try_lock_owned() {
                    Ok(again) => {
                        socket = again;
                        continue;
                    }
                    Err(_) => return,
                }
            }
            let Some(write) = socket.as_mut() else {
                // Closed: what is queued is dropped (its bytes given back).
                self.queue.lock().clear();
                continue;
            };
            let labels = self.labels;
            for reply in &batch {
                let (head, body) = match frame_parts(&reply.message) {
                    Ok(parts) => parts,
                    Err(e) => {
                        // The client would wait for this reply until its timeout: close
                        // instead, so it fails (and retries) now.
                        tracing::error!(protocol = labels.protocol, port = labels.port, peer = %self.peer, error = %e, "cannot encode a reply; closing the connection");
                        metrics::counter!("switchyard_reply_encode_errors_total", "protocol" => labels.protocol, "port" => labels.port)
                            .increment(1);
                        self.close(&mut socket);
                        return;
                    }
                };
                gathered.extend_from_slice(&head);
                if body.len() <= GATHER_BODY {
                    gathered.extend_from_slice(&body);
                } else {
                    parts.push(gathered.split().freeze());
                    parts.push(body);
                }
            }
            if !gathered.is_empty() {
                parts.push(gathered.split().freeze());
            }
            let written = async {
                for part in &parts {
                    write.write_all(part).await?;
                }
                // TLS keeps records until flushed (a no-op on plain TCP).
                write.flush().await?;
                Ok::<_, io::Error>(())
            };
            let written = tokio::select! {
                _ = self.closed.cancelled() => Ok(Err(io::ErrorKind::ConnectionAborted.into())),
                written = tokio::time::timeout(self.frame_timeout, written) => written,
            };
            parts.clear();
            match written {
                Ok(Ok(())) => {
                    for reply in &batch {
                        reply.answered();
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(protocol = labels.protocol, port = labels.port, peer = %self.peer, error = %e, "write failed");
                    self.close(&mut socket);
                    return;
                }
                Err(_) => {
                    metrics::counter!("switchyard_connection_timeouts_total", "protocol" => labels.protocol, "port" => labels.port, "kind" => "write")
                        .increment(1);
                    if let Some(suppressed) = TIMEOUT_LOG.allow() {
                        tracing::warn!(protocol = labels.protocol, port = labels.port, peer = %self.peer, suppressed, "reply not taken in time; closing the connection");
                    }
                    self.close(&mut socket);
                    return;
                }
            }
        }
    }

    /// Closes the connection from the writing side: the reader stops too (a connection
    /// that cannot answer takes no more requests), the socket is shut, and queued
    /// replies give their bytes back now.
    fn close(&self, socket: &mut OwnedMutexGuard<Option<WriteHalf>>) {
        self.closed.cancel();
        socket.take();
        self.queue.lock().clear();
    }

    /// At the connection's end: shuts the socket once any write under way gave up
    /// (they stop when `closed` is cancelled) and drops what is queued.
    pub(super) async fn shut(&self) {
        self.closed.cancel();
        let mut socket = self.write.lock().await;
        if let Some(mut write) = socket.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), write.shutdown()).await;
        }
        self.queue.lock().clear();
    }
}
