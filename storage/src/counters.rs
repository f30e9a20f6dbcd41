//! Operation counters of the store, counted by the part doing the work
//! (appends, reads, flushes, expiry) and read as one snapshot by the
//! status. The counters are private: parts count through the methods.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

#[derive(Default)]
pub(crate) struct Counters {
    appended_bytes: AtomicU64,
    read_bytes: AtomicU64,
    spills: AtomicU64,
    spilled_bytes: AtomicU64,
    spill_failures: AtomicU64,
    no_buffer: AtomicU64,
    /// Appends that waited for memory and then went through.
    memory_waits: AtomicU64,
    /// Appends that waited for memory until their deadline.
    memory_wait_timeouts: AtomicU64,
    apps_expired: AtomicU64,
    /// Commits and flushes that stopped waiting at `commit_timeout`.
    flush_timeouts: AtomicU64,
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

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn appended(&self, bytes: u64) {
        add(&self.appended_bytes, bytes);
    }

    pub(crate) fn read(&self, bytes: u64) {
        add(&self.read_bytes, bytes);
    }

    pub(crate) fn spilled(&self, bytes: u64) {
        add(&self.spills, 1);
        add(&self.spilled_bytes, bytes);
    }

    pub(crate) fn spill_failed(&self) {
        add(&self.spill_failures, 1);
    }

    pub(crate) fn no_buffer(&self) {
        add(&self.no_buffer, 1);
    }

    pub(crate) fn memory_waited(&self) {
        add(&self.memory_waits, 1);
    }

    pub(crate) fn memory_wait_timed_out(&self) {
        add(&self.memory_wait_timeouts, 1);
    }

    pub(crate) fn app_expired(&self) {
        add(&self.apps_expired, 1);
    }

    pub(crate) fn flush_timed_out(&self) {
        add(&self.flush_timeouts, 1);
    }

    /// The counts now, with the tombstones the lifecycle remembers.
    pub(crate) fn snapshot(&self, removed_apps_remembered: u64) -> OperationCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        OperationCounts {
            appended_bytes: get(&self.appended_bytes),
            read_bytes: get(&self.read_bytes),
            spills: get(&self.spills),
            spilled_bytes: get(&self.spilled_bytes),
            spill_failures: get(&self.spill_failures),
            no_buffer_replies: get(&self.no_buffer),
            memory_waits: get(&self.memory_waits),
            memory_wait_timeouts: get(&self.memory_wait_timeouts),
            apps_expired: get(&self.apps_expired),
            flush_timeouts: get(&self.flush_timeouts),
            removed_apps_remembered,
        }
    }
}
