//! One application's state: its shuffles (and their partitions), its lease,
//! what it is (client, user) and what it holds. Only the registry
//! ([`super::registry::Apps`]) creates and changes it; other parts read it
//! through the methods below.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;

use super::lifecycle::RemovalReason;
use crate::id::{AppId, LocalPartition};
use crate::tiers::partition::{AppTally, Partition};

pub(super) struct Shuffle {
    pub(super) partitions: DashMap<LocalPartition, Arc<Partition>>,
}

impl Default for Shuffle {
    fn default() -> Self {
        Shuffle {
            partitions: crate::small_map(),
        }
    }
}

impl Shuffle {
    pub(super) fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions.iter().map(|p| p.clone()).collect()
    }
}

pub(crate) struct App {
    id: AppId,
    pub(super) shuffles: DashMap<i32, Arc<Shuffle>>,
    /// Milliseconds since the store's epoch at the last heartbeat or request.
    last_seen_ms: AtomicU64,
    /// How long it lives without a heartbeat or request, in milliseconds.
    pub(super) lease_ms: AtomicU64,
    /// Whether its protocol calls a lapse of its lease losing it
    /// ([`RemovalReason::Lost`]) rather than its expiry.
    pub(super) lost_on_lapse: AtomicBool,
    pub(super) tally: Arc<AppTally>,
    /// Wall-clock time of its registration, in Unix milliseconds.
    pub(super) registered_unix_ms: u64,
    /// The client, as its front end describes it ([`crate::Store::set_app_client`]).
    pub(super) client: Mutex<Option<String>>,
    /// The user it runs as, as the client names it ([`crate::Store::set_app_user`]).
    pub(super) user: Mutex<Option<String>>,
}

impl App {
    pub(super) fn new(id: AppId, now_ms: u64, lease_ms: u64) -> Self {
        App {
            id,
            shuffles: crate::small_map(),
            last_seen_ms: AtomicU64::new(now_ms),
            lease_ms: AtomicU64::new(lease_ms),
            lost_on_lapse: AtomicBool::new(false),
            tally: Arc::default(),
            registered_unix_ms: super::ledger::unix_ms(),
            client: Mutex::new(None),
            user: Mutex::new(None),
        }
    }

    pub(crate) fn id(&self) -> &AppId {
        &self.id
    }

    pub(crate) fn lease_ms(&self) -> u64 {
        self.lease_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn registered_unix_ms(&self) -> u64 {
        self.registered_unix_ms
    }

    pub(crate) fn client(&self) -> Option<String> {
        self.client.lock().clone()
    }

    pub(crate) fn user(&self) -> Option<String> {
        self.user.lock().clone()
    }

    /// What it wrote and had read back, and holds.
    pub(crate) fn tally(&self) -> &AppTally {
        &self.tally
    }

    /// Its shuffles with their partitions, by id (unordered).
    pub(crate) fn shuffle_count(&self) -> usize {
        self.shuffles.len()
    }

    pub(crate) fn shuffles(&self) -> Vec<(i32, Vec<Arc<Partition>>)> {
        self.shuffles.iter().map(|s| (*s.key(), s.all())).collect()
    }

    /// The partitions of a shuffle (`only`: those of these ids); None if
    /// the shuffle has none.
    pub(crate) fn shuffle_partitions(
        &self,
        shuffle: i32,
        only: Option<&[i32]>,
    ) -> Option<Vec<Arc<Partition>>> {
        let s = self.shuffles.get(&shuffle)?;
        Some(match only {
            None => s.all(),
            Some(ids) => s
                .partitions
                .iter()
                .filter(|p| ids.contains(&p.key().partition))
                .map(|p| p.clone())
                .collect(),
        })
    }

    /// Milliseconds since its last heartbeat or request.
    pub(crate) fn idle_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed))
    }

    /// Why it goes when its lease runs out.
    pub(super) fn lapse(&self) -> RemovalReason {
        if self.lost_on_lapse.load(Ordering::Relaxed) {
            RemovalReason::Lost
        } else {
            RemovalReason::Expired
        }
    }

    pub(super) fn is_expired(&self, now_ms: u64) -> bool {
        self.idle_ms(now_ms) > self.lease_ms()
    }

    pub(super) fn touch(&self, now_ms: u64) {
        self.last_seen_ms.fetch_max(now_ms, Ordering::Relaxed);
    }
}
