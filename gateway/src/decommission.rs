//! Decommission: a node that takes no new partitions, serves what it holds,
//! and exits 0 once no application holds data on it (or at a deadline), as
//! Uniffle's and Celeborn's decommission do.
//!
//! The state travels in every cluster heartbeat, so coordinators stop
//! placing on the node; the node's own Uniffle coordinator and Celeborn
//! master (when it has them) stop placing on it at once. Cancelled (the
//! admin `DELETE`), the node is active again and takes new partitions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use switchyard_storage::Store;
use tokio::sync::Notify;

/// Shared by the admin endpoint, the heartbeat, the protocol roles and the
/// watcher.
pub struct Decommission {
    started: parking_lot::Mutex<Option<Instant>>,
    /// The protocol roles' "draining" flags, set with `started`.
    flags: Vec<Arc<AtomicBool>>,
    /// Wakes the watcher when decommissioning begins or is cancelled.
    changed: Notify,
}

#[derive(Clone, Debug, Serialize)]
pub struct DecommissionStatus {
    /// `active` or `decommissioning`.
    pub state: &'static str,
    /// Seconds since the decommission began.
    pub for_seconds: Option<u64>,
}

impl Decommission {
    /// `flags`: what the protocol roles read to leave this node out of
    /// their own placement; set when decommissioning begins.
    pub fn new(flags: Vec<Arc<AtomicBool>>) -> Arc<Self> {
        Arc::new(Decommission {
            started: parking_lot::Mutex::new(None),
            flags,
            changed: Notify::new(),
        })
    }

    /// Begins decommissioning; false if it had begun already.
    pub fn begin(&self) -> bool {
        let mut started = self.started.lock();
        if started.is_some() {
            return false;
        }
        *started = Some(Instant::now());
        for f in &self.flags {
            f.store(true, Ordering::Relaxed);
        }
        self.changed.notify_one();
        tracing::warn!(
            "decommissioning: no new partitions; exiting once no application holds data here"
        );
        true
    }

    /// Cancels a decommission: the node takes new partitions again and
    /// does not exit; false if it was not decommissioning.
    pub fn cancel(&self) -> bool {
        let mut started = self.started.lock();
        let Some(at) = started.take() else {
            return false;
        };
        for f in &self.flags {
            f.store(false, Ordering::Relaxed);
        }
        self.changed.notify_one();
        tracing::warn!(after = ?at.elapsed(), "decommission cancelled: taking new partitions again");
        true
    }

    pub fn is_active(&self) -> bool {
        self.started.lock().is_some()
    }

    pub fn status(&self) -> DecommissionStatus {
        let started = *self.started.lock();
        DecommissionStatus {
            state: if started.is_some() {
                "decommissioning"
            } else {
                "active"
            },
            for_seconds: started.map(|t| t.elapsed().as_secs()),
        }
    }

    /// Returns once the node may exit: decommissioning began and no
    /// application holds data in `store` (checked every `interval`), or
    /// `timeout` passed since it began. A cancel sends it back to waiting
    /// for the next decommission.
    pub async fn finished(&self, store: &Store, interval: Duration, timeout: Duration) {
        loop {
            // Registered before the check, so a begin or cancel in between
            // is not missed.
            let changed = self.changed.notified();
            let Some(started) = *self.started.lock() else {
                changed.await;
                continue;
            };
            let holding: Vec<String> = store
                .status()
                .applications
                .into_iter()
                .filter(|a| a.partitions > 0)
                .map(|a| a.id)
                .collect();
            if holding.is_empty() {
                tracing::info!(
                    after = ?started.elapsed(),
                    "decommissioned: no application holds data here"
                );
                return;
            }
            if started.elapsed() >= timeout {
                tracing::warn!(
                    ?timeout,
                    apps = ?holding,
                    "decommission timeout: exiting while applications still hold data here"
                );
                return;
            }
            tracing::info!(
                apps = holding.len(),
                "decommissioning: waiting for applications to release their data"
            );
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = changed => {}
            }
        }
    }
}
