//! One owner of an application's life: the store.
//!
//! An application is registered with a lease, refreshed by heartbeats and
//! requests, and removed explicitly (the client unregistered it or said it was
//! lost) or when its lease runs out. Removal is an event: every protocol
//! adapter that keeps per-application state registers an [`AppListener`] and
//! forgets the application when told, so no adapter keeps serving locations
//! or tickets whose data is gone.
//!
//! A removed application's shuffles are dead: the store keeps a tombstone of
//! them for [`AppConfig::tombstone_retention`](crate::AppConfig), and appends
//! and reads of a dead shuffle fail with [`StorageError::ShuffleRemoved`],
//! even if the application registers again (a Celeborn driver that was silent
//! past its lease heartbeats again). Its client then fails or recomputes
//! instead of reading the part of the data that arrived after the removal.
//! New shuffles of a re-registered application work as usual.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use dashmap::DashMap;
use parking_lot::RwLock;

use crate::error::StorageError;
use crate::id::AppId;

/// Why an application was removed.
///
/// `Lost` and `Expired` are one event, a lease that ran out, named as the
/// application's protocol names it: the front end says which when it
/// registers the application ([`crate::Store::register_app_lapsing`]).
/// Celeborn's master calls an application whose heartbeats stopped for
/// `celeborn.master.heartbeat.application.timeout` *lost* (its
/// `timeoutDeadApplications` fires the ApplicationLost event); Uniffle's
/// coordinator and shuffle server call one silent for
/// `rss.coordinator.app.expired` / `rss.server.app.expired.withoutHeartbeat`
/// *expired*. A Celeborn driver that stops normally also sends
/// ApplicationLost (its `ApplicationHeartbeater.stop`), but that is the
/// client ending it: `Unregistered`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovalReason {
    /// The client ended it (Uniffle `unregisterApp`, Celeborn
    /// `ApplicationLost` or `UnregisterApplication` from its driver) or an
    /// operator removed it.
    Unregistered,
    /// No heartbeat or request within its lease, on a protocol that calls
    /// that losing it (Celeborn).
    Lost,
    /// No heartbeat or request within its lease (Uniffle; the default).
    Expired,
}

impl RemovalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RemovalReason::Unregistered => "unregistered",
            RemovalReason::Lost => "lost",
            RemovalReason::Expired => "expired",
        }
    }
}

/// What listeners hear when an application goes.
#[derive(Debug, Clone)]
pub struct AppRemoved {
    pub app: AppId,
    pub reason: RemovalReason,
    /// The shuffles it had in the store, now dead.
    pub shuffles: Vec<i32>,
}

/// Per-application state outside the store follows the store's removals.
///
/// Called synchronously, before the application's files are deleted and
/// after its shuffles became dead, so a listener that forgets the
/// application cannot race a request into data that is about to go.
/// Implementations must not block or call back into `remove_app`.
pub trait AppListener: Send + Sync {
    fn app_removed(&self, event: &AppRemoved);
}

struct Tombstone {
    shuffles: HashSet<i32>,
    removed_at_ms: u64,
}

/// Listeners and tombstones; owned by the store.
#[derive(Default)]
pub(crate) struct Lifecycle {
    listeners: RwLock<Vec<Weak<dyn AppListener>>>,
    tombstones: DashMap<AppId, Tombstone>,
}

impl Lifecycle {
    pub(crate) fn subscribe(&self, listener: Weak<dyn AppListener>) {
        let mut listeners = self.listeners.write();
        listeners.retain(|l| l.strong_count() > 0);
        listeners.push(listener);
    }

    /// Marks the shuffles dead, then tells every listener.
    pub(crate) fn removed(&self, event: &AppRemoved, now_ms: u64) {
        {
            let mut t = self
                .tombstones
                .entry(event.app.clone())
                .or_insert(Tombstone {
                    shuffles: HashSet::new(),
                    removed_at_ms: now_ms,
                });
            t.shuffles.extend(event.shuffles.iter().copied());
            t.removed_at_ms = now_ms;
        }
        let listeners: Vec<Arc<dyn AppListener>> = self
            .listeners
            .read()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for l in listeners {
            l.app_removed(event);
        }
    }

    /// Fails if the shuffle died with its application.
    pub(crate) fn check_alive(&self, app: &AppId, shuffle: i32) -> Result<(), StorageError> {
        match self.tombstones.get(app) {
            Some(t) if t.shuffles.contains(&shuffle) => Err(StorageError::ShuffleRemoved {
                app: app.to_string(),
                shuffle,
            }),
            _ => Ok(()),
        }
    }

    /// Forgets tombstones older than `retention_ms`; returns how many.
    pub(crate) fn prune(&self, now_ms: u64, retention_ms: u64) -> usize {
        // Counted as they go: a removal on another thread may add a
        // tombstone meanwhile, so "length before minus length after" could
        // go below zero (it did, in the soak, and the panic ended that
        // node's expiry loop).
        let mut pruned = 0;
        self.tombstones.retain(|_, t| {
            let keep = now_ms.saturating_sub(t.removed_at_ms) < retention_ms;
            pruned += usize::from(!keep);
            keep
        });
        pruned
    }

    pub(crate) fn tombstone_count(&self) -> usize {
        self.tombstones.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counter(AtomicUsize);
    impl AppListener for Counter {
        fn app_removed(&self, _: &AppRemoved) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn removal_kills_the_apps_shuffles_and_tells_live_listeners() {
        let l = Lifecycle::default();
        let counter = Arc::new(Counter(AtomicUsize::new(0)));
        let weak: Weak<dyn AppListener> =
            Arc::downgrade(&(counter.clone() as Arc<dyn AppListener>));
        l.subscribe(weak);
        {
            // A dropped listener is skipped, not called.
            let gone: Arc<dyn AppListener> = Arc::new(Counter(AtomicUsize::new(0)));
            l.subscribe(Arc::downgrade(&gone));
        }
        let app = AppId::from("a");
        l.removed(
            &AppRemoved {
                app: app.clone(),
                reason: RemovalReason::Expired,
                shuffles: vec![3],
            },
            1_000,
        );
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            l.check_alive(&app, 3),
            Err(StorageError::ShuffleRemoved { shuffle: 3, .. })
        ));
        assert!(l.check_alive(&app, 4).is_ok(), "a shuffle it did not have");
        assert!(l.check_alive(&AppId::from("b"), 3).is_ok());
        assert_eq!(l.prune(1_500, 1_000), 0);
        assert_eq!(l.prune(2_000, 1_000), 1);
        assert!(l.check_alive(&app, 3).is_ok());
    }

    /// Removals add tombstones while a prune runs (the soak's expiry loop
    /// once died of "length before minus after" going below zero): every
    /// tombstone is pruned once, and the count never exceeds what was added.
    #[test]
    fn prune_counts_while_removals_add_tombstones() {
        let l = Arc::new(Lifecycle::default());
        let adder = {
            let l = l.clone();
            std::thread::spawn(move || {
                for i in 0..20_000 {
                    let event = AppRemoved {
                        app: AppId::from(format!("app-{i}")),
                        reason: RemovalReason::Expired,
                        shuffles: vec![0],
                    };
                    l.removed(&event, 0);
                }
            })
        };
        let mut pruned = 0;
        while !adder.is_finished() {
            pruned += l.prune(10, 1);
        }
        adder.join().unwrap();
        pruned += l.prune(10, 1);
        assert_eq!(pruned, 20_000);
        assert_eq!(l.tombstone_count(), 0);
    }
}
