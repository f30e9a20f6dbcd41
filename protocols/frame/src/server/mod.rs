//! The one TCP server behind every frame port (Celeborn's master and worker ports,
//! Uniffle's Netty data plane), generic over a protocol's [`FrameMessage`].
//!
//! [`serve`] accepts connections until its token is cancelled. Per connection:
//! - a reader decodes frames and runs the port's [`Handler`] on each at once; a
//!   handler that has to wait (for the store, the disk, a peer) goes on in a task of its
//!   own, so requests run concurrently and are answered in completion order (clients
//!   match replies by request id), while one that completes at once (a push appended to
//!   memory) costs no scheduler hop. A frame the handler marks [`Handler::ordered`] is
//!   handled to its end before the next frame is read;
//! - at most `max_in_flight_per_connection` handlers run at once; at that bound the
//!   reader stops reading the socket until one finishes (backpressure through TCP, not
//!   a queue in memory). Ordered frames count too; heartbeats are dropped unhandled;
//! - **bytes in flight**: a frame's length is taken from the connection's pool
//!   (`max_in_flight_bytes_per_connection`), the protocol's ([`TransportBudget`],
//!   `max_in_flight_bytes`) and the node's network share of its one memory number
//!   (`switchyard_memory::NodeMemory`, shared with the other protocol and the store)
//!   when its header arrives, before the body is read or allocated, and given back
//!   when its handler returns. Without room the reader waits and the socket is not
//!   read (counted in `switchyard_read_pauses_total`): under memory pressure
//!   (handlers waiting for the store) every connection stops reading, as Celeborn
//!   pauses receive. A frame larger than the node's share could ever hold is a bad
//!   frame;
//! - **split reads**: a large frame whose protocol names a [`crate::Splitter`] for it
//!   (Uniffle's `sendShuffleData`) is read with each byte array it carries in a buffer
//!   of its own, mostly straight from the socket, so a block kept in memory owns its
//!   bytes instead of pinning its frame, and is not copied out of it;
//! - **reply bytes**: a reply's body takes room in the reply pools
//!   (`max_reply_bytes_per_connection`, `max_reply_bytes`, the node's share) until it
//!   is written (a small one skips the protocol's pool, as a small frame does); a
//!   handler that reads data for a reply [`Replier::reserve`]s first, so a client that
//!   does not read its socket stops getting data read for it;
//! - **timeouts**: a frame whose header arrived must complete within `frame_timeout`
//!   (slowloris), a reply must be written within it (a peer that stopped reading), and
//!   a connection with nothing in flight that sends nothing for `idle_timeout` is
//!   closed; each counted in `switchyard_connection_timeouts_total{kind}`;
//! - replies go out through the connection's outbox: the task that queues one writes
//!   it unless another is writing (which then takes it along), small frames of a batch
//!   gathered into one write, large bodies from their own buffers; see `outbox.rs`.
//!
//! Limits and failures, the same for every protocol:
//! - **connection limit**: a port holds at most `max_connections`, and at most
//!   `max_connections_per_peer` from one peer address; one more is accepted and closed
//!   at once, counted in `switchyard_connections_rejected_total` and logged at
//!   most every 10 s, so its client fails fast instead of hanging in the backlog. A
//!   connection keeps its place until its last handler is done;
//! - **accept errors** (EMFILE, ENFILE, ENOBUFS) pause accepting for 1 s, as Netty does,
//!   rather than spinning on the error; a connection reset before it was accepted is
//!   skipped;
//! - **bad frame** (a header or message that does not decode): the connection is closed
//!   and counted in `switchyard_bad_frames_total`; a socket error closes it uncounted;
//! - **a reply that cannot be encoded**: logged as an error, counted in
//!   `switchyard_reply_encode_errors_total` and the connection closed, since its client
//!   would otherwise wait for that reply until its timeout;
//! - **shutdown**: cancelling the token stops accepting and closes every connection;
//!   handlers already running finish, their replies are dropped.
//!
//! A closed connection cancels its [`Replier::closed`] token, so work that streams to it
//! on its own (Celeborn's credit streams) stops.

mod connection;
mod limits;
mod outbox;
mod session;
#[cfg(test)]
mod tests;
pub mod tls;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use connection::{HeldBytes, Replier, ReplyBytes};
pub use limits::{ConnectionLimits, LimitsError, TransportBudget};
pub use session::Session;

use crate::FrameMessage;

/// How long accepting pauses after an error such as EMFILE (Netty's server channel
/// pauses its reads for 1 s too).
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// At most one log line per this long about connections refused at the limit.
const REJECT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Handles the frames of one port.
pub trait Handler<M>: Send + Sync + 'static {
    /// Handles one frame; replies, if any, go through `replier`. Runs in a task of its
    /// own unless [`Self::ordered`] says otherwise.
    fn handle(self: Arc<Self>, message: M, replier: Replier<M>) -> impl Future<Output = ()> + Send;

    /// The port's name, for logs and the `port` label of metrics.
    fn port(&self) -> &'static str;

    /// Whether `message` must be handled before the next frame of its connection is read
    /// (Flink's map-partition records and regions, whose order is their meaning). Others
    /// run concurrently.
    fn ordered(&self, _message: &M) -> bool {
        false
    }
}

/// Accepts connections on `listener` and serves them with `handler` until `cancel` is
/// cancelled. Incoming frames larger than `max_frame_size` are bad frames. `budget` is
/// shared by every port of the protocol on this node.
pub async fn serve<M, H>(
    listener: TcpListener,
    handler: Arc<H>,
    max_frame_size: usize,
    limits: ConnectionLimits,
    budget: TransportBudget,
    cancel: CancellationToken,
) where
    M: FrameMessage + Send + 'static,
    M::Kind: Send,
    M::Error: fmt::Display + Send,
    H: Handler<M>,
{
    serve_tls(
        listener,
        handler,
        max_frame_size,
        limits,
        budget,
        None,
        cancel,
    )
    .await
}

/// As [`serve`], with TLS on every connection when `tls` is given: the
/// handshake must complete within `frame_timeout`, and a connection that
/// does not speak TLS is closed.
pub async fn serve_tls<M, H>(
    listener: TcpListener,
    handler: Arc<H>,
    max_frame_size: usize,
    limits: ConnectionLimits,
    budget: TransportBudget,
    tls: Option<tokio_rustls::TlsAcceptor>,
    cancel: CancellationToken,
) where
    M: FrameMessage + Send + 'static,
    M::Kind: Send,
    M::Error: fmt::Display + Send,
    H: Handler<M>,
{
    let labels = Labels::of::<M, H>(&handler);
    let max_connections = limits.max_connections.get().min(Semaphore::MAX_PERMITS);
    let places = Arc::new(Semaphore::new(max_connections));
    let max_per_peer = limits.max_connections_per_peer.get();
    let peers = Peers::default();
    let mut rejected = RejectLog::default();
    // At 0 from the start, so rates and alerts over them work before the first.
    for kind in ["idle", "frame", "write"] {
        metrics::counter!("switchyard_connection_timeouts_total", "protocol" => labels.protocol, "port" => labels.port, "kind" => kind)
            .increment(0);
    }
    metrics::counter!("switchyard_accept_errors_total", "protocol" => labels.protocol, "port" => labels.port)
        .increment(0);
    metrics::counter!("switchyard_read_pauses_total", "protocol" => labels.protocol, "port" => labels.port)
        .increment(0);
    // Gauges too: a port with no connection yet shows 0 of them, holding 0 bytes.
    metrics::gauge!("switchyard_connections", "protocol" => labels.protocol, "port" => labels.port)
        .increment(0.0);
    metrics::gauge!(connection::CONNECTION_MEMORY, "protocol" => labels.protocol, "port" => labels.port)
        .increment(0.0);
    loop {
        let (stream, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) if reset_before_accept(&e) => {
                    tracing::debug!(protocol = labels.protocol, port = labels.port, error = %e, "connection reset before it was accepted");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(protocol = labels.protocol, port = labels.port, error = %e, "accept failed; pausing accepts for 1 s");
                    metrics::counter!("switchyard_accept_errors_total", "protocol" => labels.protocol, "port" => labels.port)
                        .increment(1);
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    }
                }
            },
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            drop(stream);
            metrics::counter!("switchyard_connections_rejected_total", "protocol" => labels.protocol, "port" => labels.port, "limit" => "port")
                .increment(1);
            rejected.note(labels, peer, "max_connections", max_connections);
            continue;
        };
        let Some(peer_place) = peers.enter(peer.ip(), max_per_peer) else {
            drop(stream);
            metrics::counter!("switchyard_connections_rejected_total", "protocol" => labels.protocol, "port" => labels.port, "limit" => "peer")
                .increment(1);
            rejected.note(labels, peer, "max_connections_per_peer", max_per_peer);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let cancel = cancel.clone();
        let budget = budget.clone();
        let tls = tls.clone();
        spawn_connection(async move {
            let _open = Open::new(labels, place);
            let _peer = peer_place;
            let stream = match connection::Stream::accept(
                stream,
                tls.as_ref(),
                limits.frame_timeout,
            )
            .await
            {
                Ok(stream) => stream,
                Err(e) => {
                    metrics::counter!("switchyard_tls_handshake_failures_total", "protocol" => labels.protocol, "port" => labels.port)
                        .increment(1);
                    tracing::debug!(protocol = labels.protocol, port = labels.port, %peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            connection::run(
                stream,
                peer,
                handler,
                max_frame_size,
                &limits,
                &budget,
                &cancel,
            )
            .await;
        });
    }
}

/// Open connections per peer address on one port.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// A connection's place in its peer's count, given back on drop.
struct PeerPlace {
    peers: Peers,
    ip: IpAddr,
}

impl Peers {
    fn enter(&self, ip: IpAddr, limit: usize) -> Option<PeerPlace> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(PeerPlace {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerPlace {
    fn drop(&mut self) {
        let mut map = self.peers.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Errors of one incoming connection, not of the listener: nothing to back off from.
fn reset_before_accept(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// Runtimes that connections are spread over (one per NUMA node, set once at
/// start by the gateway); empty: the current runtime.
static CONNECTION_RUNTIMES: std::sync::OnceLock<Vec<tokio::runtime::Handle>> =
    std::sync::OnceLock::new();
static NEXT_RUNTIME: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Spreads the connections of every frame port accepted from now on over
/// `runtimes`, round-robin (NUMA placement: one runtime per node). Set once;
/// later calls are ignored.
pub fn spread_connections(runtimes: Vec<tokio::runtime::Handle>) {
    let _ = CONNECTION_RUNTIMES.set(runtimes);
}

fn spawn_connection<F>(connection: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match CONNECTION_RUNTIMES.get().filter(|r| !r.is_empty()) {
        Some(runtimes) => {
            let i = NEXT_RUNTIME.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            runtimes[i % runtimes.len()].spawn(connection);
        }
        None => {
            tokio::spawn(connection);
        }
    }
}

/// The labels of a port's logs and metrics.
#[derive(Clone, Copy)]
struct Labels {
    protocol: &'static str,
    port: &'static str,
}

impl Labels {
    fn of<M: FrameMessage, H: Handler<M>>(handler: &H) -> Self {
        Labels {
            protocol: M::PROTOCOL,
            port: handler.port(),
        }
    }
}

/// A connection's place in its port's limit and in the `switchyard_connections` gauge,
/// given back on drop (also when a handler panics).
struct Open {
    gauge: metrics::Gauge,
    _place: OwnedSemaphorePermit,
}

impl Open {
    fn new(labels: Labels, place: OwnedSemaphorePermit) -> Self {
        let gauge = metrics::gauge!("switchyard_connections", "protocol" => labels.protocol, "port" => labels.port);
        gauge.increment(1.0);
        Open {
            gauge,
            _place: place,
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// Logs connections refused at the limit at most once per [`REJECT_LOG_INTERVAL`]: a
/// client retrying in a loop must not flood the log.
#[derive(Default)]
struct RejectLog {
    last: Option<Instant>,
    since_last: u64,
}

impl RejectLog {
    fn note(&mut self, labels: Labels, peer: SocketAddr, which: &'static str, limit: usize) {
        self.since_last += 1;
        if self.last.is_some_and(|t| t.elapsed() < REJECT_LOG_INTERVAL) {
            return;
        }
        tracing::warn!(
            protocol = labels.protocol,
            port = labels.port,
            %peer,
            which,
            limit,
            refused = self.since_last,
            "connection limit reached; closing new connections"
        );
        self.last = Some(Instant::now());
        self.since_last = 0;
    }
}
