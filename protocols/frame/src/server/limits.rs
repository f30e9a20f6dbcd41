//! How much one listening port, and one connection on it, may take.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

/// Limits of one listening port, set per protocol (`[uniffle.connections]`,
/// `[celeborn.connections]`; each Celeborn port has its own count). Zero is rejected when
/// the config is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionLimits {
    /// Connections open at once on one port; one more is accepted and closed at once
    /// (counted in `switchyard_connections_rejected_total`), so its client fails fast
    /// and tries another server instead of waiting in the kernel's backlog until its
    /// connect timeout.
    ///
    /// Default 4096. An executor pools a connection or two per server and port
    /// (Celeborn's `celeborn.<module>.io.numConnectionsPerPeer`), so this serves some
    /// 2,000 executors at once, more than one node sees in practice, while a connection
    /// storm cannot take every file descriptor that the disks and the cold tier need:
    /// six ports at the limit are about 25,000 sockets, within the usual 65,536 `nofile`.
    pub max_connections: NonZeroUsize,
    /// Requests of one connection handled at once. At the limit the connection's
    /// socket is not read until one of them finishes, so a client that sends faster
    /// than the store answers is slowed by TCP flow control (its requests wait on its
    /// side, not in server memory).
    ///
    /// Default 256: Celeborn's client keeps at most 256 pushes in flight per executor
    /// (`celeborn.client.push.maxReqsInFlight.total`, 32 per worker) and a few chunk
    /// fetches per stream, and Uniffle's sends as many as its send threads (10), so a
    /// client on its defaults never waits here; what one connection can make the server
    /// hold is then 256 requests (16 MiB of 64 KiB pushes) plus the replies queued for
    /// its socket.
    pub max_in_flight_per_connection: NonZeroUsize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: NonZeroUsize::new(4096).expect("non-zero"),
            max_in_flight_per_connection: NonZeroUsize::new(256).expect("non-zero"),
        }
    }
}

impl ConnectionLimits {
    /// Limits with the given values; `None` if either is zero.
    pub fn new(max_connections: usize, max_in_flight_per_connection: usize) -> Option<Self> {
        Some(ConnectionLimits {
            max_connections: NonZeroUsize::new(max_connections)?,
            max_in_flight_per_connection: NonZeroUsize::new(max_in_flight_per_connection)?,
        })
    }
}
