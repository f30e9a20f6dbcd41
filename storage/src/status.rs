//! Figures of the store: a JSON-able status and Prometheus gauges, read
//! from each part through its methods.

use serde::Serialize;

pub use crate::apps::registry::UserConsumption;
use crate::apps::registry::SHUFFLES_CREATED;
use crate::apps::{App, Apps};
use crate::config::MemoryConfig;
use crate::counters::Counters;
pub use crate::counters::OperationCounts;
use crate::persist::recovery::RecoveryStatus;
use crate::store::{PARTITION_FILE_BYTES, PAUSE_SECONDS};
use crate::tiers::budget::MemoryBudget;
use crate::tiers::cold::ColdStatus;
use crate::tiers::disk::{DiskHealth, DiskStatus};
use crate::tiers::flush::{spill_labels, EVICTED_PARTITIONS, SLOT_WAIT_SECONDS};
use crate::tiers::Durable;
use switchyard_memory::{NodeMemory, Part};

#[derive(Clone, Debug, Serialize)]
pub struct StoreStatus {
    pub ready: bool,
    pub memory: MemoryStatus,
    pub tiers: TierBytes,
    pub disks: Vec<DiskStatus>,
    pub cold: Option<ColdStatus>,
    pub operations: OperationCounts,
    /// What the last start recovered, discarded and removed.
    pub recovery: RecoveryStatus,
    pub applications: Vec<AppStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryStatus {
    /// The store's share of the node's number: what its blocks may hold.
    pub capacity: u64,
    /// `memory.capacity`, the node's one number: the store's share plus the
    /// network's.
    pub node_capacity: u64,
    /// The network's share: frames being read and replies being written.
    pub network: u64,
    /// Frame bytes being read and not yet handled, over every protocol.
    pub in_flight: u64,
    /// Reply bytes reserved and not yet written, over every protocol.
    pub replies: u64,
    pub used: u64,
    pub reserved: u64,
    pub flushing: u64,
    pub high_watermark: f64,
    pub low_watermark: f64,
    /// `memory.read_capacity`: disk and cold reads in progress, outside `capacity`.
    pub read_capacity: u64,
}

/// Bytes of shuffle data held per tier.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct TierBytes {
    pub memory: u64,
    pub disk: u64,
    pub cold: u64,
}

/// One shuffle of an application (`switchyard ctl shuffles`).
#[derive(Clone, Debug, Serialize)]
pub struct ShuffleStatus {
    pub id: i32,
    pub partitions: usize,
    /// Partitions that take no more appends (committed).
    pub sealed: usize,
    /// Data bytes appended to it.
    pub written_bytes: u64,
    pub bytes: TierBytes,
}

#[derive(Clone, Debug, Serialize)]
pub struct AppStatus {
    pub id: String,
    /// What its front end knows of the client (its version), if anything.
    pub client: Option<String>,
    /// Data bytes appended, and read back, over its life.
    pub written_bytes: u64,
    pub read_bytes: u64,
    pub shuffles: usize,
    pub partitions: usize,
    pub bytes: TierBytes,
    pub idle_ms: u64,
    /// How long it waited for the node's shared resources.
    pub waits: crate::AppWaits,
}

/// What a node's heartbeat to its coordinators reports, read from counters
/// only: unlike [`StoreStatus`] it walks no partition, so a heartbeat costs
/// the same with a million partitions held as with none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLoad {
    pub ready: bool,
    pub memory_capacity: u64,
    pub memory_used: u64,
    /// Bytes available on the healthy disks.
    pub disk_free: u64,
    /// Partitions held (every application's partition count).
    pub partitions: u64,
    /// The live applications' ids (unordered).
    pub applications: Vec<String>,
}

pub(crate) fn node_load(
    ready: bool,
    budget: &MemoryBudget,
    durable: &Durable,
    apps: &Apps,
) -> NodeLoad {
    NodeLoad {
        ready,
        memory_capacity: budget.capacity(),
        memory_used: budget.used(),
        disk_free: durable
            .disks()
            .iter()
            .map(|d| d.status())
            .filter(|d| d.health == DiskHealth::Healthy)
            .map(|d| d.available_bytes)
            .sum(),
        partitions: apps.partition_count(),
        applications: apps.ids(),
    }
}

/// What the store's status is read from: each part, through its methods.
pub(crate) struct Sources<'a> {
    pub ready: bool,
    pub budget: &'a MemoryBudget,
    pub node: &'a NodeMemory,
    pub memory: &'a MemoryConfig,
    pub apps: &'a Apps,
    pub durable: &'a Durable,
    pub counters: &'a Counters,
    pub recovery: RecoveryStatus,
}

/// The shuffles of an application, by id.
pub(crate) fn shuffle_status(app: &App) -> Vec<ShuffleStatus> {
    let mut out: Vec<ShuffleStatus> = app
        .shuffles()
        .into_iter()
        .map(|(id, partitions)| {
            let mut bytes = TierBytes::default();
            let (mut sealed, mut written) = (0, 0);
            for p in &partitions {
                bytes.add(p.tier_bytes());
                sealed += usize::from(p.is_sealed());
                written += p.received_bytes();
            }
            ShuffleStatus {
                id,
                partitions: partitions.len(),
                sealed,
                written_bytes: written,
                bytes,
            }
        })
        .collect();
    out.sort_by_key(|s| s.id);
    out
}

impl TierBytes {
    fn add(&mut self, (memory, disk, cold): (u64, u64, u64)) {
        self.memory += memory;
        self.disk += disk;
        self.cold += cold;
    }
}

/// An application's figures, from its tally's counters: no walk of its
/// partitions, so a status request costs the same at a million of them.
fn app_status(a: &App, now_ms: u64) -> AppStatus {
    let tally = a.tally();
    let mut bytes = TierBytes::default();
    bytes.add(tally.tier_bytes());
    AppStatus {
        id: a.id().to_string(),
        client: a.client(),
        written_bytes: tally.written(),
        read_bytes: tally.read(),
        shuffles: a.shuffle_count(),
        partitions: tally.partitions() as usize,
        bytes,
        idle_ms: a.idle_ms(now_ms),
        waits: tally.waits().figures(),
    }
}

pub(crate) fn store_status(src: Sources<'_>) -> StoreStatus {
    let now = src.apps.now_ms();
    let mut tiers = TierBytes::default();
    let mut applications: Vec<AppStatus> = src
        .apps
        .all()
        .iter()
        .map(|a| {
            let s = app_status(a, now);
            tiers.add((s.bytes.memory, s.bytes.disk, s.bytes.cold));
            s
        })
        .collect();
    applications.sort_by(|a, b| a.id.cmp(&b.id));
    let b = src.budget;
    StoreStatus {
        ready: src.ready,
        memory: MemoryStatus {
            capacity: b.capacity(),
            node_capacity: src.node.capacity(),
            network: src.node.capacity() - src.node.store_share(),
            in_flight: src.node.in_use(Part::InFlight),
            replies: src.node.in_use(Part::Reply),
            used: b.used(),
            reserved: b.reserved(),
            flushing: b.flushing(),
            high_watermark: src.memory.high_watermark,
            low_watermark: src.memory.low_watermark,
            read_capacity: src.memory.read_capacity.as_u64(),
        },
        tiers,
        disks: src.durable.disks().iter().map(|d| d.status()).collect(),
        cold: src.durable.cold().map(|c| c.status()),
        operations: src.counters.snapshot(src.apps.tombstone_count() as u64),
        recovery: src.recovery,
        applications,
    }
}

/// Bytes held per tier, summed over tier counters (cheap: no walk).
pub(crate) fn tier_bytes(budget: &MemoryBudget, durable: &Durable) -> TierBytes {
    let (disk, cold) = durable.stored_bytes();
    TierBytes {
        memory: budget.used().saturating_sub(budget.reserved()),
        disk,
        cold,
    }
}

/// Failure counters exist from the start at 0, so that `rate()` and
/// `increase()` over them (dashboards, alerts) work before the first
/// failure rather than showing no data.
pub(crate) fn register_failure_counters(durable: &Durable) {
    for dir in durable.dirs() {
        let dir = dir.display().to_string();
        metrics::counter!("switchyard_disk_errors_total", "dir" => dir.clone()).increment(0);
        for op in ["write", "read", "probe", "statvfs"] {
            metrics::counter!("switchyard_disk_io_timeouts_total", "dir" => dir.clone(), "op" => op)
                .increment(0);
        }
    }
    if !durable.disks().is_empty() {
        metrics::counter!("switchyard_spill_failures_total", "tier" => "disk").increment(0);
        metrics::counter!(EVICTED_PARTITIONS, "tier" => "disk").increment(0);
    }
    if let Some(cold) = durable.cold() {
        metrics::counter!(
            "switchyard_spill_failures_total",
            spill_labels("cold", cold.service())
        )
        .increment(0);
        metrics::counter!(EVICTED_PARTITIONS, "tier" => "cold").increment(0);
        for op in ["read", "write"] {
            metrics::counter!("switchyard_cold_failures_total", "op" => op).increment(0);
        }
        for op in ["read", "write", "delete", "list", "stat"] {
            metrics::counter!("switchyard_cold_retries_total", "op" => op).increment(0);
        }
    }
    metrics::counter!("switchyard_flush_timeouts_total").increment(0);
    // Event counts and times the dashboards chart from the start: a panel
    // shows 0 shuffles created, 0 pauses, rather than no data.
    metrics::counter!(SHUFFLES_CREATED).increment(0);
    let _ = metrics::histogram!(PAUSE_SECONDS);
    let _ = metrics::histogram!(SLOT_WAIT_SECONDS);
    let _ = metrics::histogram!(PARTITION_FILE_BYTES);
}

/// The store's counts behind the upstream dashboards' panels, read from
/// counters (one read per application at most, never per partition).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreCounts {
    /// Shuffles held, every protocol's.
    pub shuffles: u64,
    pub partitions: u64,
    /// Partitions with no segment yet (in memory alone).
    pub memory_only_partitions: u64,
    /// Flushes waiting for a flush slot.
    pub flush_queue: u64,
    /// Reads of persisted data waiting for a read place.
    pub read_queue: u64,
    /// Appends wait for memory now.
    pub paused: bool,
}

pub(crate) fn publish_store_gauges(g: &StoreCounts, durable: &Durable) {
    metrics::gauge!("switchyard_shuffles").set(g.shuffles as f64);
    metrics::gauge!("switchyard_partitions").set(g.partitions as f64);
    metrics::gauge!("switchyard_partitions_in_memory").set(g.memory_only_partitions as f64);
    metrics::gauge!("switchyard_flush_queue").set(g.flush_queue as f64);
    metrics::gauge!("switchyard_memory_paused").set(if g.paused { 1.0 } else { 0.0 });
    let (capacity, used) = durable.read_budget_bytes();
    metrics::gauge!("switchyard_memory_read_capacity_bytes").set(capacity as f64);
    metrics::gauge!("switchyard_memory_read_used_bytes").set(used as f64);
    metrics::gauge!("switchyard_read_queue").set(g.read_queue as f64);
    let (reading, waiting) = durable.reads();
    metrics::gauge!("switchyard_tier_reads", "state" => "reading").set(reading as f64);
    metrics::gauge!("switchyard_tier_reads", "state" => "waiting").set(waiting as f64);
}

/// One user's bytes and files (segments) on disks and in the cold tier.
pub(crate) fn publish_user_gauges(user: &str, c: UserConsumption) {
    for (tier, bytes, files) in [
        ("disk", c.disk_bytes, c.disk_files),
        ("cold", c.cold_bytes, c.cold_files),
    ] {
        metrics::gauge!("switchyard_user_bytes", "user" => user.to_string(), "tier" => tier)
            .set(bytes as f64);
        metrics::gauge!("switchyard_user_files", "user" => user.to_string(), "tier" => tier)
            .set(files as f64);
    }
}

/// Publishes gauges to the `metrics` recorder, if the process installed one.
pub(crate) fn publish_gauges(
    budget: &MemoryBudget,
    node: &NodeMemory,
    durable: &Durable,
    applications: usize,
) {
    let b = budget;
    metrics::gauge!("switchyard_memory_capacity_bytes").set(b.capacity() as f64);
    metrics::gauge!("switchyard_memory_node_capacity_bytes").set(node.capacity() as f64);
    // The node's number by part: stored blocks, frames being read, replies.
    for (part, bytes) in [
        ("stored", b.used()),
        ("in_flight", node.in_use(Part::InFlight)),
        ("replies", node.in_use(Part::Reply)),
    ] {
        metrics::gauge!("switchyard_memory_budget_bytes", "part" => part).set(bytes as f64);
    }
    metrics::gauge!("switchyard_memory_used_bytes").set(b.used() as f64);
    metrics::gauge!("switchyard_memory_reserved_bytes").set(b.reserved() as f64);
    metrics::gauge!("switchyard_memory_flushing_bytes").set(b.flushing() as f64);
    let t = tier_bytes(budget, durable);
    metrics::gauge!("switchyard_tier_bytes", "tier" => "memory").set(t.memory as f64);
    metrics::gauge!("switchyard_tier_bytes", "tier" => "disk").set(t.disk as f64);
    metrics::gauge!("switchyard_tier_bytes", "tier" => "cold").set(t.cold as f64);
    if let Some(cold) = durable.cold() {
        let s = cold.status();
        metrics::gauge!("switchyard_cold_read_cache_bytes").set(s.read_cache_bytes as f64);
        metrics::gauge!("switchyard_cold_healthy").set(if s.healthy { 1.0 } else { 0.0 });
    }
    for d in durable.disks() {
        publish_disk_gauges(d.status());
    }
    metrics::gauge!("switchyard_applications").set(applications as f64);
}

fn publish_disk_gauges(s: DiskStatus) {
    let dir = s.dir.display().to_string();
    metrics::gauge!("switchyard_disk_healthy", "dir" => dir.clone()).set(
        if s.health == DiskHealth::Healthy {
            1.0
        } else {
            0.0
        },
    );
    metrics::gauge!("switchyard_disk_hung", "dir" => dir.clone()).set(
        if s.health == DiskHealth::Hung {
            1.0
        } else {
            0.0
        },
    );
    metrics::gauge!("switchyard_disk_stuck_calls", "dir" => dir.clone()).set(s.stuck_calls as f64);
    metrics::gauge!("switchyard_disk_used_ratio", "dir" => dir.clone()).set(s.used_ratio);
    metrics::gauge!("switchyard_disk_available_bytes", "dir" => dir.clone())
        .set(s.available_bytes as f64);
    metrics::gauge!("switchyard_disk_stored_bytes", "dir" => dir).set(s.stored_bytes as f64);
}
