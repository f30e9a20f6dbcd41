//! A disk's health state, shared by the disk and its timeout layer (which
//! marks it hung and counts its stuck calls): every change is logged and
//! wakes the flushes that wait for somewhere to write.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskHealth {
    Healthy,
    /// Less than `min_free` available, or `capacity` reached.
    Full,
    /// An I/O error; rests until a probe succeeds.
    Faulted,
    /// A filesystem call did not return within `io_timeout`; no writes and
    /// no reads until every stuck call has returned, then faulted.
    Hung,
}

impl DiskHealth {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => DiskHealth::Healthy,
            1 => DiskHealth::Full,
            3 => DiskHealth::Hung,
            _ => DiskHealth::Faulted,
        }
    }
    fn as_u8(self) -> u8 {
        match self {
            DiskHealth::Healthy => 0,
            DiskHealth::Full => 1,
            DiskHealth::Faulted => 2,
            DiskHealth::Hung => 3,
        }
    }
}

/// The health of the disk at `dir`, when it last failed, and its stuck
/// calls.
pub(crate) struct Health {
    dir: PathBuf,
    state: AtomicU8,
    /// Blocking calls that outlived `io_timeout` and have not returned yet:
    /// a hung disk stays hung until there are none.
    stuck: AtomicU64,
    /// When the disk last failed (error, hang, failed probe): a faulted
    /// disk rests `error_cooldown` from then before it is probed.
    faulted_at: Mutex<Option<Instant>>,
    /// The store's "some tier's health changed" signal: flushes with nowhere
    /// to write wait on it.
    changed: Arc<tokio::sync::Notify>,
    /// Files written by stuck writes that returned after their flush gave
    /// up on them: their application may have been removed meanwhile, and
    /// the write recreated its directory. The store's disk check takes
    /// them (see `Store::remove_late_orphans`).
    late_writes: Mutex<Vec<PathBuf>>,
}

impl Health {
    pub(crate) fn new(dir: PathBuf, changed: Arc<tokio::sync::Notify>) -> Self {
        Health {
            dir,
            state: AtomicU8::new(DiskHealth::Healthy.as_u8()),
            stuck: AtomicU64::new(0),
            faulted_at: Mutex::new(None),
            changed,
            late_writes: Mutex::new(Vec::new()),
        }
    }

    /// The error of a call refused because the disk is hung.
    pub(crate) fn hung_error(&self, io_timeout: Duration) -> std::io::Error {
        std::io::Error::other(format!(
            "disk {} is hung: a call did not return within {io_timeout:?}",
            self.dir.display()
        ))
    }

    pub(crate) fn get(&self) -> DiskHealth {
        DiskHealth::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(crate) fn set(&self, h: DiskHealth) {
        let prev = DiskHealth::from_u8(self.state.swap(h.as_u8(), Ordering::AcqRel));
        if prev != h {
            self.changed.notify_waiters();
            match h {
                DiskHealth::Healthy => {
                    tracing::info!(dir = %self.dir.display(), from = ?prev, "disk takes writes again")
                }
                _ => {
                    tracing::warn!(dir = %self.dir.display(), state = ?h, "disk takes no new writes")
                }
            }
        }
    }

    pub(crate) fn stuck_calls(&self) -> u64 {
        self.stuck.load(Ordering::Acquire)
    }

    pub(crate) fn stuck_added(&self) {
        self.stuck.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn stuck_returned(&self) {
        self.stuck.fetch_sub(1, Ordering::AcqRel);
    }

    /// A stuck write returned, having touched `files`: recorded before its
    /// stuck count drops, so a disk with no stuck calls has them all here.
    pub(crate) fn late_write_returned(&self, files: Vec<PathBuf>) {
        self.late_writes.lock().extend(files);
        self.stuck_returned();
    }

    /// The files late writes touched since the last call.
    pub(crate) fn take_late_writes(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.late_writes.lock())
    }

    /// Starts the cooldown: the disk failed now.
    pub(crate) fn failed_now(&self) {
        *self.faulted_at.lock() = Some(Instant::now());
    }

    /// Whether `cooldown` has passed since the disk last failed.
    pub(crate) fn rested(&self, cooldown: Duration) -> bool {
        self.faulted_at
            .lock()
            .map(|t| t.elapsed() >= cooldown)
            .unwrap_or(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_waiters_and_a_same_state_set_does_not() {
        let changed = Arc::new(tokio::sync::Notify::new());
        let health = Health::new("/d".into(), changed.clone());
        assert_eq!(health.get(), DiskHealth::Healthy);
        let woken = changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        health.set(DiskHealth::Healthy);
        assert!(
            futures::poll!(woken.as_mut()).is_pending(),
            "no change, no wake-up"
        );
        health.set(DiskHealth::Hung);
        assert!(futures::poll!(woken.as_mut()).is_ready());
        assert_eq!(health.get(), DiskHealth::Hung);
    }

    #[test]
    fn rests_from_the_last_failure() {
        let health = Health::new("/d".into(), Default::default());
        assert!(health.rested(Duration::from_secs(3600)), "never failed");
        health.failed_now();
        assert!(!health.rested(Duration::from_secs(3600)));
        assert!(health.rested(Duration::ZERO));
    }
}
