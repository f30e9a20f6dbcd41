//! How much one listening port, one connection on it, and all the ports of one
//! protocol on a node may take; and the shared byte pools that enforce the last.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use switchyard_memory::{FairPool, NodeMemory};
use tokio::sync::Semaphore;

/// Limits of a protocol's frame ports, set per protocol (`[uniffle.connections]`,
/// `[celeborn.connections]`). Counts are per port (each Celeborn port has its own);
/// the byte pools `max_in_flight_bytes` and `max_reply_bytes` are shared by every port
/// of the protocol on one node ([`TransportBudget`]). Zero is rejected when the config
/// is read.
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
    /// Connections open at once on one port from one peer address; one more is
    /// closed at once like one over `max_connections`, so a single host cannot take
    /// every place. Default 1024: a host running 64 executors with a few pooled
    /// connections each stays far below it.
    pub max_connections_per_peer: NonZeroUsize,
    /// Requests of one connection handled at once. At the limit the connection's
    /// socket is not read until one of them finishes, so a client that sends faster
    /// than the store answers is slowed by TCP flow control (its requests wait on its
    /// side, not in server memory).
    ///
    /// Default 256: Celeborn's client keeps at most 256 pushes in flight per executor
    /// (`celeborn.client.push.maxReqsInFlight.total`, 32 per worker) and a few chunk
    /// fetches per stream, and Uniffle's sends as many as its send threads (10), so a
    /// client on its defaults never waits here.
    pub max_in_flight_per_connection: NonZeroUsize,
    /// Bytes of frames one connection may have read and not yet handled. A frame's
    /// bytes are taken from this (and from `max_in_flight_bytes`) when its header
    /// arrives, before its body is read, and given back when its handler is done (a
    /// pushed block is charged to the memory budget by then). Without room the socket
    /// is not read. A frame larger than the limit waits for all of it.
    ///
    /// Default 32 MiB: 256 Celeborn pushes of 64 KiB, or two of Uniffle's largest
    /// sends (`rss.client.send.size.limit`, 16 MiB).
    pub max_in_flight_bytes_per_connection: ByteSize,
    /// Bytes of frames all connections of this protocol's ports on the node may have
    /// read and not yet handled. Under memory pressure handlers wait for the store, their
    /// bytes stay taken, and every connection stops reading, as Celeborn pauses receive:
    /// what clients send waits on their side, not in server memory.
    ///
    /// Default 128 MiB.
    pub max_in_flight_bytes: ByteSize,
    /// Reply bytes (chunks, reads) of one connection queued or being written. A reader
    /// reserves the bytes of a chunk before it reads it from the store and the writer
    /// gives them back once the chunk is on the socket, so a client that sends fetches
    /// and does not read the replies stops getting chunks read for it.
    ///
    /// Default 32 MiB: four of Celeborn's 8 MiB chunks, sixteen of Uniffle's 2 MiB
    /// reads.
    pub max_reply_bytes_per_connection: ByteSize,
    /// Reply bytes of all connections of this protocol's ports on the node, queued or
    /// being written, of replies over 64 KiB (smaller ones, answers to control
    /// messages, take only their connection's pool). Default 128 MiB.
    pub max_reply_bytes: ByteSize,
    /// A connection that has sent nothing for this long while nothing of it is in
    /// flight (no request, no reply, no open credit stream) is closed. Clients open a
    /// new connection when they need one again. Default 10 min (Celeborn's network
    /// timeout is 240 s; clients that heartbeat never reach it).
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Once a frame's header has arrived its body must arrive within this, and a
    /// reply must be written within it: a peer that stalls mid-frame (slowloris) or
    /// stops reading its socket is cut off. Default 120 s.
    #[serde(with = "humantime_serde")]
    pub frame_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: NonZeroUsize::new(4096).expect("non-zero"),
            max_connections_per_peer: NonZeroUsize::new(1024).expect("non-zero"),
            max_in_flight_per_connection: NonZeroUsize::new(256).expect("non-zero"),
            max_in_flight_bytes_per_connection: ByteSize::mib(32),
            max_in_flight_bytes: ByteSize::mib(128),
            max_reply_bytes_per_connection: ByteSize::mib(32),
            max_reply_bytes: ByteSize::mib(128),
            idle_timeout: Duration::from_secs(600),
            frame_timeout: Duration::from_secs(120),
        }
    }
}

impl ConnectionLimits {
    /// Default limits with the given counts; `None` if either is zero.
    pub fn new(max_connections: usize, max_in_flight_per_connection: usize) -> Option<Self> {
        Some(ConnectionLimits {
            max_connections: NonZeroUsize::new(max_connections)?,
            max_in_flight_per_connection: NonZeroUsize::new(max_in_flight_per_connection)?,
            ..ConnectionLimits::default()
        })
    }

    /// Rejects limits that would stop every connection: zero sizes and timeouts.
    pub fn validate(&self) -> Result<(), LimitsError> {
        for (name, v) in [
            (
                "max_in_flight_bytes_per_connection",
                self.max_in_flight_bytes_per_connection,
            ),
            ("max_in_flight_bytes", self.max_in_flight_bytes),
            (
                "max_reply_bytes_per_connection",
                self.max_reply_bytes_per_connection,
            ),
            ("max_reply_bytes", self.max_reply_bytes),
        ] {
            if v.as_u64() == 0 {
                return Err(LimitsError::Zero(name));
            }
        }
        for (name, v) in [
            ("idle_timeout", self.idle_timeout),
            ("frame_timeout", self.frame_timeout),
        ] {
            if v.is_zero() {
                return Err(LimitsError::Zero(name));
            }
        }
        Ok(())
    }
}

/// Why [`ConnectionLimits::validate`] refused them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// A size or timeout of zero, which would stop every connection.
    #[error("{0} must be more than 0")]
    Zero(&'static str),
}

/// The byte pools shared by every port of one protocol on one node: frame bytes read
/// and not yet handled, reply bytes reserved and not yet written; and the node's
/// network share of its one memory number, which every protocol's bytes take from
/// too. One per node and protocol, never a process-wide static (a test process runs
/// several nodes).
#[derive(Clone, Debug)]
pub struct TransportBudget {
    pub(super) incoming: FairPool,
    pub(super) replies: FairPool,
    pub(super) node: Arc<NodeMemory>,
}

impl TransportBudget {
    /// `node` is the node's memory (the store's [`NodeMemory`]), shared with the
    /// other protocol.
    pub fn new(limits: &ConnectionLimits, node: Arc<NodeMemory>) -> Self {
        TransportBudget {
            incoming: FairPool::new(limits.max_in_flight_bytes.as_u64()),
            replies: FairPool::new(limits.max_reply_bytes.as_u64()),
            node,
        }
    }

    /// Frame bytes read and not yet handled, over every connection.
    pub fn incoming_in_use(&self) -> u64 {
        self.incoming.in_use()
    }

    /// Reply bytes reserved and not yet written, over every connection.
    pub fn replies_in_use(&self) -> u64 {
        self.replies.in_use()
    }
}

/// A connection's own byte pool: a semaphore with one permit per byte, and its size.
/// A request larger than the pool takes all of it. (Pools shared between
/// connections are [`FairPool`]s.)
#[derive(Clone, Debug)]
pub(super) struct Pool {
    pub(super) semaphore: Arc<Semaphore>,
    pub(super) size: u32,
}

impl Pool {
    pub(super) fn new(size: ByteSize) -> Self {
        // acquire_many takes a u32; 4 GiB is beyond any sane pool.
        let size = size.as_u64().clamp(1, u64::from(u32::MAX)) as u32;
        Pool {
            semaphore: Arc::new(Semaphore::new(size as usize)),
            size,
        }
    }

    /// The permits `bytes` take from this pool.
    pub(super) fn permits_for(&self, bytes: usize) -> u32 {
        (bytes.min(self.size as usize) as u32).max(1)
    }
}
