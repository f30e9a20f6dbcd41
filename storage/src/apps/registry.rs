//! The registry of applications: leases (register, heartbeat, expiry), the
//! shuffle and partition map below each application, quotas, removal
//! events and the history of removed applications. Other parts find
//! partitions here and call its methods; the map itself is private.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::app::{App, Shuffle};
use super::ledger::{unix_ms, AppRecord, Ledger, Removal};
use super::lifecycle::{AppListener, AppRemoved, Lifecycle, RemovalReason};
use super::quota::Quotas;
use crate::config::AppConfig;
use crate::error::{Result, StorageError};
use crate::id::{AppId, PartitionKey};
use crate::tiers::partition::Partition;

/// What a user's applications hold on the durable tiers.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserConsumption {
    pub disk_bytes: u64,
    pub cold_bytes: u64,
    pub disk_files: u64,
    pub cold_files: u64,
}

/// Shuffles the store created since the process started (every protocol's).
pub(crate) const SHUFFLES_CREATED: &str = "switchyard_shuffles_created_total";

pub(crate) struct Apps {
    config: AppConfig,
    quotas: Quotas,
    apps: DashMap<AppId, Arc<App>>,
    lifecycle: Lifecycle,
    ledger: Ledger,
    /// The clock of leases: `now_ms` counts from here.
    epoch: Instant,
}

impl Apps {
    pub(crate) fn new(config: &AppConfig) -> Self {
        Apps {
            config: config.clone(),
            quotas: Quotas::new(config),
            apps: DashMap::new(),
            lifecycle: Lifecycle::default(),
            ledger: Ledger::new(config.history_max_apps),
            epoch: Instant::now(),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    // ---- leases ---------------------------------------------------------

    /// See [`crate::Store::register_app_lapsing`].
    pub(crate) fn register(&self, app: &str, lease: Duration, lapse: RemovalReason) {
        let now = self.now_ms();
        let lease_ms = lease.as_millis().min(u64::MAX as u128) as u64;
        let a = self
            .apps
            .entry(AppId::from(app))
            .or_insert_with(|| {
                tracing::info!(app, lease = ?lease, "application registered");
                let a = App::new(AppId::from(app), now, lease_ms);
                *a.client.lock() = self.ledger.take_client(app);
                Arc::new(a)
            })
            .clone();
        a.lease_ms.store(lease_ms, Ordering::Relaxed);
        a.lost_on_lapse
            .store(lapse == RemovalReason::Lost, Ordering::Relaxed);
        a.touch(now);
    }

    /// Refreshes an application's lease. False if the application is unknown.
    pub(crate) fn heartbeat(&self, app: &str) -> bool {
        match self.apps.get(app) {
            Some(a) => {
                a.touch(self.now_ms());
                true
            }
            None => false,
        }
    }

    /// See [`crate::Store::set_app_client`].
    pub(crate) fn set_client(&self, app: &str, client: &str) {
        match self.apps.get(app) {
            Some(a) => {
                let mut current = a.client.lock();
                if current.as_deref() != Some(client) {
                    *current = Some(client.to_string());
                }
            }
            None => self.ledger.remember_client(app, client),
        }
    }

    pub(crate) fn set_user(&self, app: &str, user: &str) {
        if let Some(a) = self.apps.get(app) {
            let mut current = a.user.lock();
            if current.as_deref() != Some(user) {
                *current = Some(user.to_string());
            }
        }
    }

    pub(crate) fn contains(&self, app: &str) -> bool {
        self.apps.contains_key(app)
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        self.apps.iter().map(|a| a.key().to_string()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.apps.len()
    }

    /// Shuffles held, over every application.
    pub(crate) fn shuffle_count(&self) -> u64 {
        self.apps.iter().map(|a| a.shuffle_count() as u64).sum()
    }

    /// Per user (applications without one left out): bytes and segments on
    /// disks and in the cold tier, from the tallies.
    pub(crate) fn user_consumption(&self) -> std::collections::HashMap<String, UserConsumption> {
        let mut out: std::collections::HashMap<String, UserConsumption> = Default::default();
        for a in self.apps.iter() {
            let Some(user) = a.user() else { continue };
            let (_, disk, cold) = a.tally.tier_bytes();
            let (disk_files, cold_files) = a.tally.segments();
            let u = out.entry(user).or_default();
            u.disk_bytes += disk;
            u.cold_bytes += cold;
            u.disk_files += disk_files;
            u.cold_files += cold_files;
        }
        out
    }

    /// Partitions held that have no segment yet (in memory alone).
    pub(crate) fn memory_only_partition_count(&self) -> u64 {
        self.apps
            .iter()
            .map(|a| {
                a.tally
                    .partitions()
                    .saturating_sub(a.tally.durable_partitions())
            })
            .sum()
    }

    /// Partitions held by every live application, from their tallies: one
    /// read per application, whatever the partitions number.
    pub(crate) fn partition_count(&self) -> u64 {
        self.apps.iter().map(|a| a.tally.partitions()).sum()
    }

    /// Every live application (unordered).
    pub(crate) fn all(&self) -> Vec<Arc<App>> {
        self.apps.iter().map(|a| a.clone()).collect()
    }

    /// A live application, without touching its lease.
    pub(crate) fn get(&self, app: &str) -> Option<Arc<App>> {
        self.apps.get(app).map(|a| a.clone())
    }

    /// Applications whose last heartbeat or request is older than their
    /// lease, with what their protocol calls that.
    pub(crate) fn expired(&self) -> Vec<(String, RemovalReason)> {
        let now = self.now_ms();
        self.apps
            .iter()
            .filter(|a| a.is_expired(now))
            .map(|a| (a.key().to_string(), a.lapse()))
            .collect()
    }

    // ---- quotas ---------------------------------------------------------

    /// See [`crate::Store::check_quota`].
    pub(crate) fn check_quota(&self, app: &str) -> Result<()> {
        let Some(a) = self.get(app) else {
            return Ok(());
        };
        self.quotas.check_app(app, &a.tally)?;
        let user = a.user();
        drop(a);
        match user {
            Some(user) => self.check_user_quota(&user),
            None => Ok(()),
        }
    }

    /// See [`crate::Store::check_user_quota`].
    pub(crate) fn check_user_quota(&self, user: &str) -> Result<()> {
        self.quotas.check_user(user, || {
            self.apps
                .iter()
                .filter(|other| other.user.lock().as_deref() == Some(user))
                .map(|other| other.tally.held())
                .sum()
        })
    }

    /// Whether `bytes` more fit in the partition's application's quota.
    pub(crate) fn check_append(&self, p: &Partition, bytes: u64) -> Result<()> {
        self.quotas.check_append(&p.key().app, p.tally(), bytes)
    }

    // ---- history and events ---------------------------------------------

    /// See [`crate::Store::app_history`].
    pub(crate) fn history(&self) -> Vec<AppRecord> {
        let mut live: Vec<AppRecord> = self.apps.iter().map(|a| self.record(&a)).collect();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        live.extend(self.ledger.removed(self.config.history_retention));
        live
    }

    fn record(&self, a: &App) -> AppRecord {
        let idle = a.idle_ms(self.now_ms());
        AppRecord {
            id: a.id().to_string(),
            client: a.client(),
            written_bytes: a.tally.written(),
            read_bytes: a.tally.read(),
            peak_memory_bytes: a.tally.peak_memory(),
            registered_unix_ms: a.registered_unix_ms,
            last_seen_unix_ms: unix_ms().saturating_sub(idle),
            removed: None,
        }
    }

    pub(crate) fn subscribe(&self, listener: std::sync::Weak<dyn AppListener>) {
        self.lifecycle.subscribe(listener);
    }

    /// Fails with [`StorageError::ShuffleRemoved`] if the shuffle died with
    /// its application.
    pub(crate) fn check_alive(&self, app: &AppId, shuffle: i32) -> Result<()> {
        self.lifecycle.check_alive(app, shuffle)
    }

    /// Removed applications whose shuffles are still dead.
    pub(crate) fn tombstone_count(&self) -> usize {
        self.lifecycle.tombstone_count()
    }

    /// Forgets tombstones past `apps.tombstone_retention`.
    pub(crate) fn prune_tombstones(&self) {
        let retention = self.config.tombstone_retention.as_millis() as u64;
        self.lifecycle.prune(self.now_ms(), retention);
    }

    /// Takes the application out of the registry: its removal is recorded,
    /// its shuffles die and listeners are told, in that order. Returns the
    /// application and its shuffles' partitions, whose data the caller then
    /// removes; None if it was unknown.
    #[allow(clippy::type_complexity)]
    pub(crate) fn remove(
        &self,
        app: &str,
        reason: RemovalReason,
    ) -> Option<(Arc<App>, Vec<(i32, Vec<Arc<Partition>>)>)> {
        let (_, a) = self.apps.remove(app)?;
        let mut record = self.record(&a);
        record.removed = Some(Removal {
            unix_ms: unix_ms(),
            reason: reason.as_str(),
        });
        self.ledger.record_removal(record);
        let shuffles = a.shuffles();
        tracing::info!(
            app,
            reason = reason.as_str(),
            shuffles = shuffles.len(),
            "removing application"
        );
        self.lifecycle.removed(
            &AppRemoved {
                app: a.id().clone(),
                reason,
                shuffles: shuffles.iter().map(|(id, _)| *id).collect(),
            },
            self.now_ms(),
        );
        metrics::counter!("switchyard_apps_removed_total", "reason" => reason.as_str())
            .increment(1);
        a.shuffles.clear();
        Some((a, shuffles))
    }

    /// Takes a shuffle out of its application; returns its partitions.
    pub(crate) fn remove_shuffle(
        &self,
        app: &str,
        shuffle: i32,
    ) -> Option<(AppId, Vec<Arc<Partition>>)> {
        let a = self.get(app)?;
        let (_, s) = a.shuffles.remove(&shuffle)?;
        Some((a.id().clone(), s.all()))
    }

    /// What removed partitions held leaves their application's quota.
    pub(crate) fn release(&self, partitions: &[Arc<Partition>]) {
        let Some(first) = partitions.first() else {
            return;
        };
        let bytes: u64 = partitions.iter().map(|p| p.received_bytes()).sum();
        let persisted = partitions
            .iter()
            .map(|p| p.persisted_bytes())
            .fold((0, 0), |(d, c), (pd, pc)| (d + pd, c + pc));
        let durable = partitions.iter().filter(|p| p.has_segments()).count() as u64;
        let segments = partitions
            .iter()
            .map(|p| p.segment_counts())
            .fold((0, 0), |(d, c), (pd, pc)| (d + pd, c + pc));
        first
            .tally()
            .release(bytes, partitions.len() as u64, persisted, durable, segments);
    }

    // ---- partitions -----------------------------------------------------

    /// A live application, its lease refreshed (a request is a sign of life).
    pub(crate) fn app(&self, app: &str) -> Result<Arc<App>> {
        let a = self
            .get(app)
            .ok_or_else(|| StorageError::UnknownApp(app.to_string()))?;
        a.touch(self.now_ms());
        Ok(a)
    }

    pub(crate) fn partition(&self, key: &PartitionKey) -> Result<Option<Arc<Partition>>> {
        self.lifecycle.check_alive(&key.app, key.shuffle)?;
        let app = self.app(&key.app)?;
        let p = app
            .shuffles
            .get(&key.shuffle)
            .and_then(|s| s.partitions.get(&key.local()).map(|p| p.clone()));
        Ok(p)
    }

    pub(crate) fn partition_or_create(&self, key: &PartitionKey) -> Result<Arc<Partition>> {
        self.lifecycle.check_alive(&key.app, key.shuffle)?;
        let app = self.app(&key.app)?;
        let shuffle = app
            .shuffles
            .entry(key.shuffle)
            .or_insert_with(|| {
                metrics::counter!(SHUFFLES_CREATED).increment(1);
                Arc::new(Shuffle::default())
            })
            .clone();
        let p = match shuffle.partitions.entry(key.local()) {
            dashmap::Entry::Occupied(e) => e.get().clone(),
            dashmap::Entry::Vacant(v) => {
                self.quotas.check_new_partition(&key.app, &app.tally)?;
                app.tally.count_partition();
                // The application's own id, not the caller's copy: a
                // front end that builds a key per request would otherwise
                // leave a separate allocation of it in every partition.
                let key = PartitionKey {
                    app: app.id().clone(),
                    ..key.clone()
                };
                v.insert(Arc::new(Partition::new(key, app.tally.clone())))
                    .clone()
            }
        };
        Ok(p)
    }

    pub(crate) fn all_partitions(&self) -> Vec<Arc<Partition>> {
        let mut out = Vec::new();
        for a in self.apps.iter() {
            for s in a.shuffles.iter() {
                out.extend(s.partitions.iter().map(|p| p.clone()));
            }
        }
        out
    }

    // ---- recovery -------------------------------------------------------

    /// Brings back an application recorded before a restart, with a fresh
    /// lease.
    pub(crate) fn restore(
        &self,
        id: AppId,
        lease_ms: u64,
        registered_unix_ms: u64,
        client: Option<String>,
        user: Option<String>,
    ) {
        let mut app = App::new(id.clone(), self.now_ms(), lease_ms);
        app.registered_unix_ms = registered_unix_ms;
        *app.client.get_mut() = client;
        *app.user.get_mut() = user;
        self.apps.insert(id, Arc::new(app));
    }

    /// Brings back a recorded partition of a restored application, counted
    /// in its tally: `build` makes it from the application's tally. False
    /// (and nothing built) if the application is not restored.
    pub(crate) fn restore_partition(
        &self,
        key: &PartitionKey,
        build: impl FnOnce(AppId, Arc<crate::tiers::partition::AppTally>) -> Partition,
    ) -> bool {
        let Some(app) = self.get(&key.app) else {
            return false;
        };
        let p = build(app.id().clone(), app.tally.clone());
        app.tally.count_recovered(p.received_bytes());
        if p.has_segments() {
            app.tally.count_durable_partition();
        }
        let (disk, cold) = p.segment_counts();
        for _ in 0..disk {
            app.tally.count_segment(false);
        }
        for _ in 0..cold {
            app.tally.count_segment(true);
        }
        app.shuffles
            .entry(key.shuffle)
            .or_insert_with(|| Arc::new(Shuffle::default()))
            .partitions
            .insert(key.local(), Arc::new(p));
        true
    }

    /// Forgets restored applications whose every partition was discarded.
    pub(crate) fn drop_empty(&self) {
        self.apps.retain(|_, a| !a.shuffles.is_empty());
    }
}
