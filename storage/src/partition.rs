//! The state of one partition, and of the shuffles and applications above it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::{Mutex, RwLock};

use crate::id::{AppId, LocalPartition, PartitionKey};
use crate::tiers::memory::PartitionBuffer;
use crate::segment::Segment;

pub(crate) struct Partition {
    pub key: PartitionKey,
    pub buffer: Mutex<PartitionBuffer>,
    pub segments: RwLock<Vec<Arc<Segment>>>,
    /// Held while a flush writes: a partition's flushes are serialised, so its
    /// segments grow in the order its blocks arrived.
    pub persist: tokio::sync::Mutex<()>,
    pub flush_queued: AtomicBool,
    pub sealed: AtomicBool,
    pub removed: AtomicBool,
    /// Data bytes ever appended (for huge-partition placement and figures).
    pub received_bytes: AtomicU64,
    pub received_blocks: AtomicU64,
    /// Its application's tally, counted on the hot paths without a lookup.
    pub tally: Arc<AppTally>,
}

/// What an application wrote and had read back, in data bytes.
#[derive(Debug, Default)]
pub(crate) struct AppTally {
    pub written: AtomicU64,
    pub read: AtomicU64,
    /// Data bytes appended and not yet removed (the byte quota's measure).
    pub held: AtomicU64,
    /// Partitions created and not yet removed (the partition quota's).
    pub partitions: AtomicU64,
}

impl Partition {
    pub(crate) fn new(key: PartitionKey, tally: Arc<AppTally>) -> Self {
        Partition {
            key,
            tally,
            buffer: Mutex::new(PartitionBuffer::default()),
            segments: RwLock::new(Vec::new()),
            persist: tokio::sync::Mutex::new(()),
            flush_queued: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            received_bytes: AtomicU64::new(0),
            received_blocks: AtomicU64::new(0),
        }
    }

    /// Bytes in the logical persisted stream.
    pub(crate) fn persisted_len(&self) -> u64 {
        let segs = self.segments.read();
        segs.last().map(|s| s.logical_start + s.len()).unwrap_or(0)
    }

    pub(crate) fn segments_snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments.read().clone()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Bytes per tier: (memory, disk, cold).
    pub(crate) fn tier_bytes(&self) -> (u64, u64, u64) {
        let memory = self.buffer.lock().memory_bytes();
        let (mut disk, mut cold) = (0, 0);
        for s in self.segments.read().iter() {
            match s.disk() {
                Some(_) => disk += s.len(),
                None => cold += s.len(),
            }
        }
        (memory, disk, cold)
    }
}

#[derive(Default)]
pub(crate) struct Shuffle {
    pub partitions: DashMap<LocalPartition, Arc<Partition>>,
}

pub(crate) struct App {
    pub id: AppId,
    pub shuffles: DashMap<i32, Arc<Shuffle>>,
    /// Milliseconds since the store's epoch at the last heartbeat or request.
    pub last_seen_ms: AtomicU64,
    /// How long it lives without a heartbeat or request, in milliseconds.
    pub lease_ms: AtomicU64,
    pub tally: Arc<AppTally>,
    /// Wall-clock time of its registration, in Unix milliseconds.
    pub registered_unix_ms: u64,
    /// The client, as its front end describes it ([`crate::Store::set_app_client`]).
    pub client: Mutex<Option<String>>,
    /// The user it runs as, as the client names it ([`crate::Store::set_app_user`]).
    pub user: Mutex<Option<String>>,
}

impl App {
    pub(crate) fn new(id: AppId, now_ms: u64, lease_ms: u64) -> Self {
        App {
            id,
            shuffles: DashMap::new(),
            last_seen_ms: AtomicU64::new(now_ms),
            lease_ms: AtomicU64::new(lease_ms),
            tally: Arc::default(),
            registered_unix_ms: crate::apps::ledger::unix_ms(),
            client: Mutex::new(None),
            user: Mutex::new(None),
        }
    }

    pub(crate) fn is_expired(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed))
            > self.lease_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.fetch_max(now_ms, Ordering::Relaxed);
    }
}
