//! Figures of the store: a JSON-able status and Prometheus gauges.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::tiers::cold::ColdStatus;
use crate::disk::DiskStatus;
use crate::store::Store;

#[derive(Default)]
pub(crate) struct Counters {
    pub appended_bytes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub spills: AtomicU64,
    pub spilled_bytes: AtomicU64,
    pub spill_failures: AtomicU64,
    pub no_buffer: AtomicU64,
    /// Appends that waited for memory and then went through.
    pub memory_waits: AtomicU64,
    /// Appends that waited for memory until their deadline.
    pub memory_wait_timeouts: AtomicU64,
    pub apps_expired: AtomicU64,
    /// Commits and flushes that stopped waiting at `commit_timeout`.
    pub flush_timeouts: AtomicU64,
}

#[derive(Clone, Debug, Serialize)]
pub struct StoreStatus {
    pub ready: bool,
    pub memory: MemoryStatus,
    pub tiers: TierBytes,
    pub disks: Vec<DiskStatus>,
    pub cold: Option<ColdStatus>,
    pub operations: OperationCounts,
    /// What the last start recovered, discarded and removed.
    pub recovery: crate::persist::recovery::RecoveryStatus,
    pub applications: Vec<AppStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryStatus {
    pub capacity: u64,
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

#[derive(Clone, Debug, Serialize)]
pub struct OperationCounts {
    pub appended_bytes: u64,
    pub read_bytes: u64,
    pub spills: u64,
    pub spilled_bytes: u64,
    pub spill_failures: u64,
    pub no_buffer_replies: u64,
    pub memory_waits: u64,
    pub memory_wait_timeouts: u64,
    pub apps_expired: u64,
    /// Commits and shuffle flushes that gave up waiting at `commit_timeout`.
    pub flush_timeouts: u64,
    /// Removed applications whose shuffles are still dead (tombstones).
    pub removed_apps_remembered: u64,
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
}

impl Store {
    /// The shuffles of an application, by id; None if it is unknown.
    pub fn shuffle_status(&self, app: &str) -> Option<Vec<ShuffleStatus>> {
        let a = self.apps.get(app)?.clone();
        let mut out: Vec<ShuffleStatus> = a
            .shuffles
            .iter()
            .map(|s| {
                let mut bytes = TierBytes::default();
                let (mut sealed, mut written) = (0, 0);
                for p in s.partitions.iter() {
                    let (m, d, c) = p.tier_bytes();
                    bytes.memory += m;
                    bytes.disk += d;
                    bytes.cold += c;
                    sealed += usize::from(p.sealed.load(Ordering::Acquire));
                    written += p.received_bytes.load(Ordering::Relaxed);
                }
                ShuffleStatus {
                    id: *s.key(),
                    partitions: s.partitions.len(),
                    sealed,
                    written_bytes: written,
                    bytes,
                }
            })
            .collect();
        out.sort_by_key(|s| s.id);
        Some(out)
    }

    pub fn status(&self) -> StoreStatus {
        let now = self.now_ms();
        let mut applications = Vec::new();
        let mut tiers = TierBytes::default();
        for a in self.apps.iter() {
            let mut bytes = TierBytes::default();
            let mut partitions = 0;
            for s in a.shuffles.iter() {
                for p in s.partitions.iter() {
                    partitions += 1;
                    let (m, d, c) = p.tier_bytes();
                    bytes.memory += m;
                    bytes.disk += d;
                    bytes.cold += c;
                }
            }
            tiers.memory += bytes.memory;
            tiers.disk += bytes.disk;
            tiers.cold += bytes.cold;
            applications.push(AppStatus {
                id: a.id.to_string(),
                client: a.client.lock().clone(),
                written_bytes: a.tally.written.load(Ordering::Relaxed),
                read_bytes: a.tally.read.load(Ordering::Relaxed),
                shuffles: a.shuffles.len(),
                partitions,
                bytes,
                idle_ms: now.saturating_sub(a.last_seen_ms.load(Ordering::Relaxed)),
            });
        }
        applications.sort_by(|a, b| a.id.cmp(&b.id));
        let c = &self.counters;
        StoreStatus {
            ready: self.is_ready(),
            memory: MemoryStatus {
                capacity: self.budget.capacity(),
                used: self.budget.used(),
                reserved: self.budget.reserved(),
                flushing: self.budget.flushing(),
                high_watermark: self.config.memory.high_watermark,
                low_watermark: self.config.memory.low_watermark,
                read_capacity: self.config.memory.read_capacity.as_u64(),
            },
            tiers,
            disks: self.disks.iter().map(|d| d.status()).collect(),
            cold: self.cold.as_ref().map(|c| c.status()),
            operations: OperationCounts {
                appended_bytes: c.appended_bytes.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                spills: c.spills.load(Ordering::Relaxed),
                spilled_bytes: c.spilled_bytes.load(Ordering::Relaxed),
                spill_failures: c.spill_failures.load(Ordering::Relaxed),
                no_buffer_replies: c.no_buffer.load(Ordering::Relaxed),
                memory_waits: c.memory_waits.load(Ordering::Relaxed),
                memory_wait_timeouts: c.memory_wait_timeouts.load(Ordering::Relaxed),
                apps_expired: c.apps_expired.load(Ordering::Relaxed),
                flush_timeouts: c.flush_timeouts.load(Ordering::Relaxed),
                removed_apps_remembered: self.lifecycle.tombstone_count() as u64,
            },
            recovery: self.recovery_status(),
            applications,
        }
    }

    /// Bytes held per tier, summed over tier counters (cheap: no walk).
    pub fn tier_bytes(&self) -> TierBytes {
        TierBytes {
            memory: self.budget.used().saturating_sub(self.budget.reserved()),
            disk: self
                .disks
                .iter()
                .map(|d| d.stored_bytes.load(Ordering::Relaxed))
                .sum(),
            cold: self
                .cold
                .as_ref()
                .map(|c| c.stored_bytes.load(Ordering::Relaxed))
                .unwrap_or(0),
        }
    }

    /// Failure counters exist from the start at 0, so that `rate()` and
    /// `increase()` over them (dashboards, alerts) work before the first
    /// failure rather than showing no data.
    pub(crate) fn register_failure_counters(&self) {
        for d in &self.disks {
            let dir = d.dir.display().to_string();
            metrics::counter!("switchyard_disk_errors_total", "dir" => dir.clone()).increment(0);
            for op in ["write", "read", "probe", "statvfs"] {
                metrics::counter!("switchyard_disk_io_timeouts_total", "dir" => dir.clone(), "op" => op)
                    .increment(0);
            }
        }
        if !self.disks.is_empty() {
            metrics::counter!("switchyard_spill_failures_total", "tier" => "disk").increment(0);
        }
        if self.cold.is_some() {
            metrics::counter!("switchyard_spill_failures_total", "tier" => "cold").increment(0);
            for op in ["read", "write"] {
                metrics::counter!("switchyard_cold_failures_total", "op" => op).increment(0);
            }
            for op in ["read", "write", "delete", "list", "stat"] {
                metrics::counter!("switchyard_cold_retries_total", "op" => op).increment(0);
            }
        }
        metrics::counter!("switchyard_flush_timeouts_total").increment(0);
    }

    /// Publishes gauges to the `metrics` recorder, if the process installed one.
    pub fn publish_gauges(&self) {
        let b = &self.budget;
        metrics::gauge!("switchyard_memory_capacity_bytes").set(b.capacity() as f64);
        metrics::gauge!("switchyard_memory_used_bytes").set(b.used() as f64);
        metrics::gauge!("switchyard_memory_reserved_bytes").set(b.reserved() as f64);
        metrics::gauge!("switchyard_memory_flushing_bytes").set(b.flushing() as f64);
        let t = self.tier_bytes();
        metrics::gauge!("switchyard_tier_bytes", "tier" => "memory").set(t.memory as f64);
        metrics::gauge!("switchyard_tier_bytes", "tier" => "disk").set(t.disk as f64);
        metrics::gauge!("switchyard_tier_bytes", "tier" => "cold").set(t.cold as f64);
        if let Some(cold) = &self.cold {
            let s = cold.status();
            metrics::gauge!("switchyard_cold_read_cache_bytes").set(s.read_cache_bytes as f64);
            metrics::gauge!("switchyard_cold_healthy").set(if s.healthy { 1.0 } else { 0.0 });
        }
        for d in &self.disks {
            let s = d.status();
            let dir = s.dir.display().to_string();
            metrics::gauge!("switchyard_disk_healthy", "dir" => dir.clone()).set(
                if s.health == crate::disk::DiskHealth::Healthy {
                    1.0
                } else {
                    0.0
                },
            );
            metrics::gauge!("switchyard_disk_hung", "dir" => dir.clone()).set(
                if s.health == crate::disk::DiskHealth::Hung {
                    1.0
                } else {
                    0.0
                },
            );
            metrics::gauge!("switchyard_disk_stuck_calls", "dir" => dir.clone())
                .set(s.stuck_calls as f64);
            metrics::gauge!("switchyard_disk_used_ratio", "dir" => dir.clone()).set(s.used_ratio);
            metrics::gauge!("switchyard_disk_available_bytes", "dir" => dir.clone())
                .set(s.available_bytes as f64);
            metrics::gauge!("switchyard_disk_stored_bytes", "dir" => dir)
                .set(s.stored_bytes as f64);
        }
        metrics::gauge!("switchyard_applications").set(self.apps.len() as f64);
    }
}
