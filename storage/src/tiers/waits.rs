//! How long an application waited for the node's shared resources: memory
//! for its pushes, flush slots for its flushes, read places for its reads.
//! Counted per application (its status) and per kind across applications
//! (`switchyard_app_wait_seconds`), so that an operator sees who waits when
//! the node is contended, and whether the fair shares keep the small
//! applications from waiting behind a big one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// Time an application's requests waited, by what for: memory (pushes, in
/// `Store::append_waiting`), a flush slot, a read place.
pub(crate) const APP_WAIT_SECONDS: &str = "switchyard_app_wait_seconds";

#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitKind {
    Memory,
    Flush,
    Read,
}

impl WaitKind {
    fn label(self) -> &'static str {
        match self {
            WaitKind::Memory => "memory",
            WaitKind::Flush => "flush",
            WaitKind::Read => "read",
        }
    }
}

/// An application's waits, as counters (microseconds, and refusals).
#[derive(Debug, Default)]
pub(crate) struct Waits {
    memory_us: AtomicU64,
    flush_us: AtomicU64,
    read_us: AtomicU64,
    share_refusals: AtomicU64,
}

/// An application's waits as its status reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AppWaits {
    /// Seconds its pushes waited for memory (Celeborn pushes wait; Uniffle
    /// clients are told NO_BUFFER and retry, counted as refusals).
    pub memory_seconds: f64,
    /// Seconds its flushes waited for a flush slot.
    pub flush_seconds: f64,
    /// Seconds its reads waited for a read place.
    pub read_seconds: f64,
    /// Pushes and buffer requests refused because it held more than its
    /// fair share of the memory.
    pub share_refusals: u64,
}

impl Waits {
    /// A wait of `kind` that lasted `waited` ended.
    pub(crate) fn count(&self, kind: WaitKind, waited: Duration) {
        let counter = match kind {
            WaitKind::Memory => &self.memory_us,
            WaitKind::Flush => &self.flush_us,
            WaitKind::Read => &self.read_us,
        };
        counter.fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        metrics::histogram!(APP_WAIT_SECONDS, "kind" => kind.label()).record(waited.as_secs_f64());
    }

    /// A push or buffer request was refused for being over its share.
    pub(crate) fn count_share_refusal(&self) {
        self.share_refusals.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn figures(&self) -> AppWaits {
        let secs = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / 1e6;
        AppWaits {
            memory_seconds: secs(&self.memory_us),
            flush_seconds: secs(&self.flush_us),
            read_seconds: secs(&self.read_us),
            share_refusals: self.share_refusals.load(Ordering::Relaxed),
        }
    }
}
