//! The block API: the one facade both protocol adapters call.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::block::{Block, IndexRecord, INDEX_RECORD_LEN};
use crate::budget::{MemoryBudget, Reservation};
use crate::cold::ColdTier;
use crate::config::StoreConfig;
use crate::disk::LocalDisk;
use crate::error::{Result, StorageError};
use crate::fault::DiskFaults;
use crate::id::{path_component, AppId, PartitionKey};
use crate::ledger::{AppRecord, Ledger, Removal};
use crate::lifecycle::{AppListener, AppRemoved, Lifecycle, RemovalReason};
use crate::memory::MemoryRead;
use crate::partition::{App, Partition, Shuffle};
use crate::segment::{Segment, SegmentLocation};

/// A partition's index as Uniffle serves it: 40-byte records in data order,
/// offsets in the partition's logical data stream, and that stream's length.
#[derive(Debug, Clone, Default)]
pub struct PartitionIndex {
    pub index: Bytes,
    pub data_len: u64,
}

impl PartitionIndex {
    pub fn records(&self) -> Vec<IndexRecord> {
        IndexRecord::decode_all(&self.index)
    }
}

/// Figures of one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub cold_bytes: u64,
    pub received_bytes: u64,
    pub received_blocks: u64,
}

pub struct Store {
    pub(crate) config: StoreConfig,
    pub(crate) budget: Arc<MemoryBudget>,
    pub(crate) disks: Vec<Arc<LocalDisk>>,
    pub(crate) cold: Option<Arc<ColdTier>>,
    pub(crate) apps: DashMap<AppId, Arc<App>>,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) ledger: Ledger,
    pub(crate) index_cache: moka::future::Cache<(u64, u64), Bytes>,
    pub(crate) flush_slots: Arc<Semaphore>,
    /// Read budget in KiB units: bounds the memory that reads hold at once.
    pub(crate) read_budget: Arc<Semaphore>,
    read_budget_kib: u32,
    pub(crate) next_segment: AtomicU64,
    pub(crate) spill_wakeup: tokio::sync::Notify,
    /// Flushes with nowhere to write wait on it; notified when a disk's
    /// health changes and when partitions are removed.
    pub(crate) retarget: Arc<tokio::sync::Notify>,
    /// Largest charge refused since the last spill check (0: none).
    pub(crate) pressure: AtomicU64,
    pub(crate) counters: crate::status::Counters,
    pub(crate) epoch: Instant,
    pub(crate) cancel: CancellationToken,
    pub(crate) tasks: TaskTracker,
    pub(crate) shutting_down: AtomicBool,
    /// Where commits are recorded; none with recovery off.
    pub(crate) manifest: Option<crate::manifest::Manifest>,
    pub(crate) recovery: parking_lot::Mutex<crate::recovery::RecoveryStatus>,
    /// Front ends' notes found at open, until they take them.
    pub(crate) recovered_notes: parking_lot::Mutex<Vec<crate::manifest::RecoveredNote>>,
    /// The first segment uid of this open: files of older uids were made
    /// by an earlier process.
    pub(crate) uid_start: u64,
}

impl Store {
    /// Opens the store and starts its background work (spill, disk health,
    /// application expiry) on the current tokio runtime.
    pub async fn open(config: StoreConfig) -> Result<Arc<Store>> {
        Self::open_with_faults(config, None).await
    }

    /// Like [`Store::open`], with a fault injector on every disk (tests).
    pub async fn open_with_faults(
        config: StoreConfig,
        faults: Option<Arc<dyn DiskFaults>>,
    ) -> Result<Arc<Store>> {
        Self::open_inner(config, faults, &|_| None).await
    }

    /// Like [`Store::open`], each disk's blocking I/O on the runtime `io`
    /// names for its directory (the runtime of the disk's NUMA node), or on
    /// the current one.
    pub async fn open_placed(
        config: StoreConfig,
        io: &(dyn Fn(&std::path::Path) -> Option<tokio::runtime::Handle> + Sync),
    ) -> Result<Arc<Store>> {
        Self::open_inner(config, None, io).await
    }

    async fn open_inner(
        config: StoreConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        io: &(dyn Fn(&std::path::Path) -> Option<tokio::runtime::Handle> + Sync),
    ) -> Result<Arc<Store>> {
        config
            .validate()
            .map_err(|e| StorageError::Config(e.to_string()))?;
        let mut disks = Vec::new();
        let health_changed = Arc::new(tokio::sync::Notify::new());
        for (i, dir) in config.disks.dirs.iter().enumerate() {
            let disk = LocalDisk::open(
                i,
                dir.clone(),
                &config.disks,
                faults.clone(),
                health_changed.clone(),
                io(dir),
            )
            .map_err(|e| StorageError::io(dir, e))?;
            disks.push(Arc::new(disk));
        }
        let read_budget_kib =
            (config.memory.read_capacity.as_u64() / 1024).min(u32::MAX as u64) as u32;
        let read_budget = Arc::new(Semaphore::new(read_budget_kib as usize));
        let cold = config
            .cold
            .as_ref()
            .map(|c| ColdTier::open(c, read_budget.clone()))
            .transpose()?;
        let index_cache = moka::future::Cache::builder()
            .weigher(|_: &(u64, u64), v: &Bytes| v.len().min(u32::MAX as usize) as u32)
            .max_capacity(config.memory.index_cache.as_u64())
            .build();
        let flush_slots = config.disks.dirs.len() * config.disks.write_concurrency
            + config
                .cold
                .as_ref()
                .map(|c| c.write_concurrency)
                .unwrap_or(0);
        // Segment uids only need to be unique within this process's lifetime
        // and its files; start from the clock so a restart does not reuse them.
        let uid_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        let manifest = crate::recovery::open_manifest(&config)?;
        let recovery = crate::recovery::RecoveryStatus {
            enabled: manifest.is_some(),
            manifest: manifest
                .as_ref()
                .map(|(m, _)| m.path().display().to_string()),
            ..Default::default()
        };
        let (manifest, loaded) = match manifest {
            Some((m, l)) => (Some(m), Some(l)),
            None => (None, None),
        };
        let store = Arc::new(Store {
            budget: Arc::new(MemoryBudget::new(config.memory.capacity.as_u64())),
            disks,
            cold,
            apps: DashMap::new(),
            lifecycle: Lifecycle::default(),
            ledger: Ledger::default(),
            index_cache,
            flush_slots: Arc::new(Semaphore::new(flush_slots.max(1))),
            read_budget,
            read_budget_kib,
            next_segment: AtomicU64::new(uid_start),
            spill_wakeup: tokio::sync::Notify::new(),
            retarget: health_changed,
            pressure: AtomicU64::new(0),
            counters: Default::default(),
            epoch: Instant::now(),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
            shutting_down: AtomicBool::new(false),
            manifest,
            recovery: parking_lot::Mutex::new(recovery),
            recovered_notes: Default::default(),
            uid_start,
            config,
        });
        if let Some(loaded) = loaded {
            store.recover(loaded);
        }
        store.start_background();
        store.register_failure_counters();
        tracing::info!(
            memory = %store.config.memory.capacity,
            disks = store.disks.len(),
            cold = store.cold.is_some(),
            "store opened"
        );
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// True while some tier can take flushes.
    pub fn is_ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire)
            && (self.disks.iter().any(|d| d.is_writable()) || self.cold.is_some())
    }

    // ---- applications ---------------------------------------------------

    /// Registers an application with the default lease (`apps.expiry`), or
    /// refreshes it if known.
    pub fn register_app(&self, app: &str) {
        self.register_app_leased(app, self.config.apps.expiry);
    }

    /// Registers an application that lives `lease` past its last heartbeat or
    /// request, or refreshes it (and sets its lease) if known. An application
    /// registered again after its removal starts afresh: the shuffles it had
    /// stay dead (see [`crate::lifecycle`]).
    pub fn register_app_leased(&self, app: &str, lease: Duration) {
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
        a.touch(now);
    }

    /// Refreshes an application's lease. False if the application is unknown.
    pub fn heartbeat(&self, app: &str) -> bool {
        match self.apps.get(app) {
            Some(a) => {
                a.touch(self.now_ms());
                true
            }
            None => false,
        }
    }

    /// Describes an application's client (its protocol version, say), for
    /// the status and the migration report. The store gives it no meaning.
    /// An application not registered yet gets it when it registers (within
    /// an hour).
    pub fn set_app_client(&self, app: &str, client: &str) {
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

    /// Names the user an application runs as (for `apps.max_user_bytes`).
    pub fn set_app_user(&self, app: &str, user: &str) {
        if let Some(a) = self.apps.get(app) {
            let mut current = a.user.lock();
            if current.as_deref() != Some(user) {
                *current = Some(user.to_string());
            }
        }
    }

    /// Whether the application, and its user, may set up more: refused with
    /// [`StorageError::QuotaExceeded`] when either holds its quota of bytes.
    /// (Appends check the application's own quota each time.)
    pub fn check_quota(&self, app: &str) -> Result<()> {
        let Some(a) = self.apps.get(app).map(|a| a.clone()) else {
            return Ok(());
        };
        if let Some(limit) = self.config.apps.max_app_bytes {
            let used = a.tally.held.load(Ordering::Relaxed);
            if used >= limit.as_u64() {
                return Err(self.quota_refused(
                    format!("application {app}"),
                    "bytes",
                    limit.as_u64(),
                    used,
                ));
            }
        }
        let user = a.user.lock().clone();
        drop(a);
        match user {
            Some(user) => self.check_user_quota(&user),
            None => Ok(()),
        }
    }

    /// Whether a user's applications hold less than `apps.max_user_bytes`
    /// together.
    pub fn check_user_quota(&self, user: &str) -> Result<()> {
        let Some(limit) = self.config.apps.max_user_bytes else {
            return Ok(());
        };
        let used: u64 = self
            .apps
            .iter()
            .filter(|other| other.user.lock().as_deref() == Some(user))
            .map(|other| other.tally.held.load(Ordering::Relaxed))
            .sum();
        if used >= limit.as_u64() {
            return Err(self.quota_refused(format!("user {user}"), "bytes", limit.as_u64(), used));
        }
        Ok(())
    }

    fn quota_refused(
        &self,
        who: String,
        what: &'static str,
        limit: u64,
        used: u64,
    ) -> StorageError {
        metrics::counter!("switchyard_quota_refusals_total", "quota" => what).increment(1);
        StorageError::QuotaExceeded {
            who,
            what,
            limit,
            used,
        }
    }

    /// Every live application's figures, then those of applications removed
    /// within `apps.history_retention` (oldest removal first).
    pub fn app_history(&self) -> Vec<AppRecord> {
        let mut live: Vec<AppRecord> = self.apps.iter().map(|a| self.app_record(&a)).collect();
        live.sort_by(|a, b| a.id.cmp(&b.id));
        live.extend(self.ledger.removed(self.config.apps.history_retention));
        live
    }

    pub(crate) fn app_record(&self, a: &App) -> AppRecord {
        let idle = self
            .now_ms()
            .saturating_sub(a.last_seen_ms.load(Ordering::Relaxed));
        AppRecord {
            id: a.id.to_string(),
            client: a.client.lock().clone(),
            written_bytes: a.tally.written.load(Ordering::Relaxed),
            read_bytes: a.tally.read.load(Ordering::Relaxed),
            registered_unix_ms: a.registered_unix_ms,
            last_seen_unix_ms: crate::ledger::unix_ms().saturating_sub(idle),
            removed: None,
        }
    }

    pub fn has_app(&self, app: &str) -> bool {
        self.apps.contains_key(app)
    }

    pub fn app_ids(&self) -> Vec<String> {
        self.apps.iter().map(|a| a.key().to_string()).collect()
    }

    /// Tells `listener` of every application removal from now on, for as
    /// long as it is alive (the store holds it weakly).
    pub fn subscribe(&self, listener: std::sync::Weak<dyn AppListener>) {
        self.lifecycle.subscribe(listener);
    }

    /// Fails with [`StorageError::ShuffleRemoved`] if the shuffle died with
    /// its application (expired or unregistered), so that an adapter can
    /// refuse to set it up again.
    pub fn check_shuffle_alive(&self, app: &str, shuffle: i32) -> Result<()> {
        self.lifecycle.check_alive(&AppId::from(app), shuffle)
    }

    pub(crate) fn app(&self, app: &str) -> Result<Arc<App>> {
        let a = self
            .apps
            .get(app)
            .map(|a| a.clone())
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

    fn partition_or_create(&self, key: &PartitionKey) -> Result<Arc<Partition>> {
        self.lifecycle.check_alive(&key.app, key.shuffle)?;
        let app = self.app(&key.app)?;
        let shuffle = app
            .shuffles
            .entry(key.shuffle)
            .or_insert_with(|| Arc::new(Shuffle::default()))
            .clone();
        let p = match shuffle.partitions.entry(key.local()) {
            dashmap::Entry::Occupied(e) => e.get().clone(),
            dashmap::Entry::Vacant(v) => {
                if let Some(limit) = self.config.apps.max_app_partitions {
                    let used = app.tally.partitions.load(Ordering::Relaxed);
                    if used >= limit {
                        return Err(self.quota_refused(
                            format!("application {}", key.app),
                            "partitions",
                            limit,
                            used,
                        ));
                    }
                }
                app.tally.partitions.fetch_add(1, Ordering::Relaxed);
                v.insert(Arc::new(Partition::new(key.clone(), app.tally.clone())))
                    .clone()
            }
        };
        Ok(p)
    }

    // ---- writes ---------------------------------------------------------

    /// Reserves memory ahead of an append (Uniffle's buffer ticket).
    pub fn reserve(&self, bytes: u64) -> Result<Reservation> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(StorageError::ShuttingDown);
        }
        let r = Reservation::new(self.budget.clone(), bytes);
        if r.is_err() {
            self.refused(bytes);
        }
        r
    }

    /// Appends blocks to a partition, charging the memory budget (first from
    /// `reservation`, then directly). When this returns Ok the blocks are
    /// readable; when it fails nothing was appended.
    pub async fn append(
        self: &Arc<Self>,
        key: &PartitionKey,
        blocks: Vec<Block>,
        reservation: Option<&mut Reservation>,
    ) -> Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(StorageError::ShuttingDown);
        }
        let partition = self.partition_or_create(key)?;
        if partition.sealed.load(Ordering::Acquire) {
            return Err(StorageError::Sealed(key.clone()));
        }
        let charge: u64 = blocks.iter().map(Block::charge).sum();
        let bytes: u64 = blocks.iter().map(Block::len).sum();
        if let Some(limit) = self.config.apps.max_app_bytes {
            let used = partition.tally.held.load(Ordering::Relaxed);
            if used.saturating_add(bytes) > limit.as_u64() {
                return Err(self.quota_refused(
                    format!("application {}", key.app),
                    "bytes",
                    limit.as_u64(),
                    used,
                ));
            }
        }
        let covered = reservation.map(|r| r.consume(charge)).unwrap_or(0);
        if covered < charge {
            if let Err(e) = self.budget.try_charge(charge - covered) {
                // Give the covered part back: nothing is appended.
                self.budget.release(covered);
                self.refused(charge - covered);
                return Err(e);
            }
        }
        let count = blocks.len() as u64;
        let staged = {
            let mut buf = partition.buffer.lock();
            // Checked under the buffer lock: removal and sealing take it too.
            if partition.is_removed() {
                drop(buf);
                self.budget.release(charge);
                return Err(StorageError::ShuffleRemoved {
                    app: key.app.to_string(),
                    shuffle: key.shuffle,
                });
            }
            if partition.sealed.load(Ordering::Acquire) {
                drop(buf);
                self.budget.release(charge);
                return Err(StorageError::Sealed(key.clone()));
            }
            buf.push(blocks);
            buf.staging_charge()
        };
        partition.received_bytes.fetch_add(bytes, Ordering::Relaxed);
        partition.tally.written.fetch_add(bytes, Ordering::Relaxed);
        partition.tally.held.fetch_add(bytes, Ordering::Relaxed);
        partition
            .received_blocks
            .fetch_add(count, Ordering::Relaxed);
        self.counters
            .appended_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        if staged >= self.config.memory.single_buffer_threshold.as_u64() {
            self.schedule_flush(&partition);
        }
        if self.over_high_watermark() {
            self.spill_wakeup.notify_one();
        }
        Ok(())
    }

    /// Like [`Store::append`], but while the memory budget is full it waits
    /// for memory to be released (a flush finishing, a shuffle removed) and
    /// tries again, up to `max_wait`. Woken by the release itself, not by
    /// polling. Celeborn pushes use it: their protocol has no "no buffer"
    /// reply a client would back off on.
    pub async fn append_waiting(
        self: &Arc<Self>,
        key: &PartitionKey,
        blocks: Vec<Block>,
        max_wait: Duration,
    ) -> Result<()> {
        let deadline = tokio::time::Instant::now() + max_wait;
        let mut waited: Option<Instant> = None;
        loop {
            let released = self.budget.released();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.append(key, blocks.clone(), None).await {
                Err(e) if e.is_backpressure() => {
                    waited.get_or_insert_with(Instant::now);
                    tokio::select! {
                        _ = &mut released => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            self.counters.memory_wait_timeouts.fetch_add(1, Ordering::Relaxed);
                            return Err(e);
                        }
                        _ = self.cancel.cancelled() => return Err(StorageError::ShuttingDown),
                    }
                }
                result => {
                    if let Some(since) = waited {
                        self.counters.memory_waits.fetch_add(1, Ordering::Relaxed);
                        metrics::histogram!("switchyard_memory_wait_seconds")
                            .record(since.elapsed().as_secs_f64());
                    }
                    return result;
                }
            }
        }
    }

    /// A charge of `bytes` did not fit: make room even below the high
    /// watermark, or a writer whose request is larger than the room between
    /// the watermark and the capacity would wait forever.
    fn refused(&self, bytes: u64) {
        self.counters.no_buffer.fetch_add(1, Ordering::Relaxed);
        self.pressure.fetch_max(bytes, Ordering::AcqRel);
        self.spill_wakeup.notify_one();
    }

    // ---- reads ----------------------------------------------------------

    /// Blocks still in memory after the block `after` (from the start when
    /// `None`, or when that block already left memory), skipping blocks `keep`
    /// rejects, until at least `max_bytes` (always one block if any is left).
    /// An unknown partition reads as empty.
    pub fn read_memory(
        &self,
        key: &PartitionKey,
        after: Option<i64>,
        max_bytes: u64,
        keep: &dyn Fn(&Block) -> bool,
    ) -> Result<MemoryRead> {
        Ok(match self.partition(key)? {
            Some(p) => {
                let read = p.buffer.lock().read(after, max_bytes, keep);
                p.tally.read.fetch_add(read.bytes(), Ordering::Relaxed);
                read
            }
            None => MemoryRead::default(),
        })
    }

    /// The persisted index of a partition. An unknown partition, or one whose
    /// data is all still in memory, has an empty index.
    pub async fn read_index(&self, key: &PartitionKey) -> Result<PartitionIndex> {
        let Some(p) = self.partition(key)? else {
            return Ok(PartitionIndex::default());
        };
        let segments = p.segments_snapshot();
        let mut parts = Vec::with_capacity(segments.len());
        let mut data_len = 0;
        for seg in &segments {
            let extent = seg.extent();
            if extent.records == 0 {
                continue;
            }
            let raw = self.segment_index(seg, extent.records).await?;
            data_len = seg.logical_start + extent.len;
            parts.push((seg.logical_start, raw));
        }
        let index = match parts.len() {
            0 => Bytes::new(),
            1 if parts[0].0 == 0 => parts.pop().unwrap().1,
            _ => {
                let mut out = BytesMut::with_capacity(parts.iter().map(|p| p.1.len()).sum());
                for (start, raw) in parts {
                    for mut r in IndexRecord::decode_all(&raw) {
                        r.offset += start;
                        r.encode(&mut out);
                    }
                }
                out.freeze()
            }
        };
        Ok(PartitionIndex { index, data_len })
    }

    /// A segment's first `records` index records, through the index cache.
    async fn segment_index(&self, seg: &Arc<Segment>, records: u64) -> Result<Bytes> {
        let len = records * INDEX_RECORD_LEN as u64;
        let seg2 = seg.clone();
        let load = async move {
            match &seg2.location {
                SegmentLocation::Disk { disk, index, .. } => self.disks[*disk]
                    .read(index.clone(), 0, len)
                    .await
                    .map_err(|e| StorageError::io(index, e)),
                SegmentLocation::Cold { index, .. } => self.cold_tier()?.read(index, 0, len).await,
            }
        };
        self.index_cache
            .try_get_with((seg.uid, records), load)
            .await
            .map_err(|e: Arc<StorageError>| clone_error(&e))
    }

    pub(crate) fn cold_tier(&self) -> Result<&Arc<ColdTier>> {
        self.cold
            .as_ref()
            .ok_or_else(|| StorageError::Config("no cold tier configured".into()))
    }

    /// Bytes `[offset, offset + len)` of a partition's persisted data.
    pub async fn read_data(&self, key: &PartitionKey, offset: u64, len: u64) -> Result<Bytes> {
        let p = self
            .partition(key)?
            .ok_or_else(|| StorageError::UnknownPartition(key.clone()))?;
        self.read_range(&p, offset, len).await
    }

    pub(crate) async fn read_range(&self, p: &Partition, offset: u64, len: u64) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let segments = p.segments_snapshot();
        let size = segments
            .last()
            .map(|s| s.logical_start + s.len())
            .unwrap_or(0);
        let end = offset.saturating_add(len);
        if end > size {
            return Err(StorageError::OutOfRange {
                key: p.key.clone(),
                offset,
                len,
                size,
            });
        }
        // Reads of cold data also hold the windows they may fetch around them.
        let cold_overhead = match &self.cold {
            Some(cold) if segments.iter().any(|s| s.is_cold()) => cold.read_overhead(),
            _ => 0,
        };
        // A read larger than the whole budget takes all of it, alone.
        let kib = ((len + cold_overhead).div_ceil(1024)).min(self.read_budget_kib as u64) as u32;
        let _budget = self
            .read_budget
            .acquire_many(kib)
            .await
            .map_err(|_| StorageError::ShuttingDown)?;
        let mut pieces = Vec::new();
        for seg in &segments {
            let seg_end = seg.logical_start + seg.len();
            if seg_end <= offset || seg.logical_start >= end {
                continue;
            }
            let from = offset.max(seg.logical_start) - seg.logical_start;
            let to = end.min(seg_end) - seg.logical_start;
            pieces.push(self.read_segment(seg, from, to - from).await?);
        }
        p.tally.read.fetch_add(len, Ordering::Relaxed);
        Ok(concat(pieces))
    }

    async fn read_segment(&self, seg: &Segment, offset: u64, len: u64) -> Result<Bytes> {
        self.counters.read_bytes.fetch_add(len, Ordering::Relaxed);
        match &seg.location {
            SegmentLocation::Disk { disk, data, .. } => self.disks[*disk]
                .read_data(data.clone(), offset, len, seg.direct)
                .await
                .map_err(|e| StorageError::io(data, e)),
            SegmentLocation::Cold { data, .. } => {
                // A cold segment is written once: its length is its object's.
                self.cold_tier()?
                    .read_data(data, seg.len(), offset, len)
                    .await
            }
        }
    }

    pub fn partition_stats(&self, key: &PartitionKey) -> Result<PartitionStats> {
        Ok(match self.partition(key)? {
            Some(p) => {
                let (memory_bytes, disk_bytes, cold_bytes) = p.tier_bytes();
                PartitionStats {
                    memory_bytes,
                    disk_bytes,
                    cold_bytes,
                    received_bytes: p.received_bytes.load(Ordering::Relaxed),
                    received_blocks: p.received_blocks.load(Ordering::Relaxed),
                }
            }
            None => PartitionStats::default(),
        })
    }

    // ---- lifecycle ------------------------------------------------------

    /// Flushes every block of a partition and refuses further appends (a
    /// Celeborn commit). Idempotent. Returns the partition's figures. Waits
    /// at most `commit_timeout`, then fails with
    /// [`StorageError::FlushTimeout`] while the flush goes on.
    pub async fn seal(self: &Arc<Self>, key: &PartitionKey) -> Result<PartitionStats> {
        self.seal_with_notes(key, Vec::new()).await
    }

    /// [`Store::seal`], recording the front end's notes on the partition's
    /// shuffle in the same manifest transaction (Celeborn's map regions), so
    /// that a restart never finds the partition without them.
    pub async fn seal_with_notes(
        self: &Arc<Self>,
        key: &PartitionKey,
        notes: Vec<(String, Vec<u8>)>,
    ) -> Result<PartitionStats> {
        let p = self.partition_or_create(key)?;
        {
            let _buf = p.buffer.lock();
            p.sealed.store(true, Ordering::Release);
        }
        let deadline = tokio::time::Instant::now() + self.config.commit_timeout;
        let flush = self.flush_in_background(&p);
        self.flush_fully_until(flush, deadline, || format!("partition {key}"))
            .await?;
        let notes = self.note_changes(&key.app, key.shuffle, notes);
        self.record_until(std::slice::from_ref(&p), notes, deadline)
            .await?;
        self.partition_stats(key)
    }

    /// Records committed partitions (and notes) in the manifest, waiting at
    /// most until `deadline`. A failure does not fail the commit: the blocks
    /// are durable in their tier and readable until the next restart, which
    /// then does not recover them. It is logged and counted
    /// (`recovery.record_failures`), so that a full or broken metadata disk
    /// degrades restarts instead of failing every job.
    async fn record_until(
        &self,
        partitions: &[Arc<Partition>],
        notes: Vec<crate::manifest::Change>,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        let result = match tokio::time::timeout_at(deadline, self.record(partitions, notes)).await {
            Ok(r) => r,
            Err(_) => Err(StorageError::Manifest(format!(
                "commit not recorded within {:?}",
                self.config.commit_timeout
            ))),
        };
        if let Err(e) = result {
            let failures = {
                let mut r = self.recovery.lock();
                r.record_failures += 1;
                r.record_failures
            };
            metrics::counter!("switchyard_manifest_failures_total").increment(1);
            if failures == 1 || failures.is_power_of_two() {
                tracing::error!(error = %e, failures, "commit not recorded: a restart will not recover it");
            }
        }
        Ok(())
    }

    /// Makes the partitions durable and records them with the front end's
    /// notes on their shuffle (`(name, value)`, a later note of the same name
    /// replacing the earlier), so that a restart serves them again: what a
    /// client is told is stored (Uniffle's reportShuffleResult). Partitions
    /// this store never saw are skipped. Bounded by `commit_timeout`, then
    /// [`StorageError::FlushTimeout`] while the flushes go on.
    pub async fn commit_partitions(
        self: &Arc<Self>,
        app: &str,
        shuffle: i32,
        partitions: &[i32],
        notes: Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let app_state = self.app(app)?;
        self.lifecycle.check_alive(&app_state.id, shuffle)?;
        let parts: Vec<Arc<Partition>> = match app_state.shuffles.get(&shuffle) {
            Some(s) => s
                .partitions
                .iter()
                .filter(|p| partitions.contains(&p.key().partition))
                .map(|p| p.clone())
                .collect(),
            None => Vec::new(),
        };
        let deadline = tokio::time::Instant::now() + self.config.commit_timeout;
        let flushes: Vec<_> = parts.iter().map(|p| self.flush_in_background(p)).collect();
        for (p, flush) in parts.iter().zip(flushes) {
            self.flush_fully_until(flush, deadline, || format!("partition {}", p.key))
                .await?;
        }
        let notes = self.note_changes(&app_state.id, shuffle, notes);
        self.record_until(&parts, notes, deadline).await
    }

    /// Records a front end's notes on a shuffle (Celeborn's map regions)
    /// beside its committed partitions; recovered with them
    /// ([`Store::take_recovered_notes`]) and removed with the shuffle.
    pub async fn record_notes(
        &self,
        app: &str,
        shuffle: i32,
        notes: Vec<(String, Vec<u8>)>,
    ) -> Result<()> {
        let app_state = self.app(app)?;
        let changes = self.note_changes(&app_state.id, shuffle, notes);
        let deadline = tokio::time::Instant::now() + self.config.commit_timeout;
        self.record_until(&[], changes, deadline).await
    }

    fn note_changes(
        &self,
        app: &AppId,
        shuffle: i32,
        notes: Vec<(String, Vec<u8>)>,
    ) -> Vec<crate::manifest::Change> {
        notes
            .into_iter()
            .map(|(name, value)| crate::manifest::Change::PutNote {
                app: app.clone(),
                shuffle,
                name,
                value,
            })
            .collect()
    }

    pub fn is_sealed(&self, key: &PartitionKey) -> Result<bool> {
        Ok(self
            .partition(key)?
            .map(|p| p.sealed.load(Ordering::Acquire))
            .unwrap_or(false))
    }

    /// Flushes every block of a shuffle and waits until it is durable
    /// (Uniffle's finishShuffle), at most `commit_timeout` in all; then it
    /// fails with [`StorageError::FlushTimeout`] while the flushes go on.
    pub async fn flush_shuffle(self: &Arc<Self>, app: &str, shuffle: i32) -> Result<()> {
        let app_state = self.app(app)?;
        let partitions: Vec<Arc<Partition>> = match app_state.shuffles.get(&shuffle) {
            Some(s) => s.partitions.iter().map(|p| p.clone()).collect(),
            None => return Ok(()),
        };
        let deadline = tokio::time::Instant::now() + self.config.commit_timeout;
        // All at once: the flush slots bound how many write together.
        let flushes: Vec<_> = partitions
            .iter()
            .map(|p| self.flush_in_background(p))
            .collect();
        let mut first_error = None;
        for flush in flushes {
            let what = || format!("shuffle {shuffle} of application {app}");
            if let Err(e) = self.flush_fully_until(flush, deadline, what).await {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        self.record_until(&partitions, Vec::new(), deadline).await
    }

    /// Removes a shuffle: its memory at once, its files and objects before
    /// this returns.
    pub async fn remove_shuffle(&self, app: &str, shuffle: i32) -> Result<()> {
        let Some(a) = self.apps.get(app).map(|a| a.clone()) else {
            return Ok(());
        };
        if let Some((_, s)) = a.shuffles.remove(&shuffle) {
            self.forget_recorded(crate::manifest::Change::RemoveShuffle(
                a.id.clone(),
                shuffle,
            ))
            .await;
            self.purge_shuffle(&a.id, shuffle, &s).await;
        }
        Ok(())
    }

    /// Removes an application and everything it stored, because its client
    /// unregistered it.
    pub async fn remove_app(&self, app: &str) -> Result<()> {
        self.remove_app_because(app, RemovalReason::Unregistered)
            .await
    }

    /// Removes an application: its shuffles die (see [`crate::lifecycle`]),
    /// listeners forget it, then its memory, files and objects go.
    pub async fn remove_app_because(&self, app: &str, reason: RemovalReason) -> Result<()> {
        let Some((_, a)) = self.apps.remove(app) else {
            return Ok(());
        };
        let mut record = self.app_record(&a);
        record.removed = Some(Removal {
            unix_ms: crate::ledger::unix_ms(),
            reason: reason.as_str(),
        });
        self.ledger.record_removal(record);
        let shuffles: Vec<(i32, Arc<Shuffle>)> =
            a.shuffles.iter().map(|s| (*s.key(), s.clone())).collect();
        tracing::info!(
            app,
            reason = reason.as_str(),
            shuffles = shuffles.len(),
            "removing application"
        );
        self.lifecycle.removed(
            &AppRemoved {
                app: a.id.clone(),
                reason,
                shuffles: shuffles.iter().map(|(id, _)| *id).collect(),
            },
            self.now_ms(),
        );
        metrics::counter!("switchyard_apps_removed_total", "reason" => reason.as_str())
            .increment(1);
        a.shuffles.clear();
        self.forget_recorded(crate::manifest::Change::RemoveApp(a.id.clone()))
            .await;
        for (id, s) in shuffles {
            self.purge_shuffle(&a.id, id, &s).await;
        }
        let component = path_component(&a.id);
        for d in &self.disks {
            self.remove_dir(d.dir.join(&component)).await;
        }
        if let Some(cold) = &self.cold {
            if let Err(e) = cold.delete_prefix(&component).await {
                tracing::warn!(app, error = %e, "cold cleanup failed");
            }
        }
        Ok(())
    }

    async fn purge_shuffle(&self, app: &AppId, shuffle: i32, s: &Shuffle) {
        let partitions: Vec<Arc<Partition>> = s.partitions.iter().map(|p| p.clone()).collect();
        // What the shuffle held leaves its application's quota.
        if let Some(first) = partitions.first() {
            let bytes: u64 = partitions
                .iter()
                .map(|p| p.received_bytes.load(Ordering::Relaxed))
                .sum();
            let sub = |counter: &AtomicU64, n: u64| {
                let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                    Some(v.saturating_sub(n))
                });
            };
            sub(&first.tally.held, bytes);
            sub(&first.tally.partitions, partitions.len() as u64);
        }
        for p in &partitions {
            let staged = {
                let mut buf = p.buffer.lock();
                p.removed.store(true, Ordering::Release);
                buf.clear_staging()
            };
            self.budget.release(staged);
        }
        // A flush waiting for a healthy tier looks again and sees `removed`.
        self.retarget.notify_waiters();
        for p in &partitions {
            // Wait for a running flush; it sees `removed` and stops.
            let _guard = p.persist.lock().await;
            let segments: Vec<Arc<Segment>> = std::mem::take(&mut *p.segments.write());
            for seg in segments {
                let len = seg.len();
                match &seg.location {
                    SegmentLocation::Disk { disk, .. } => {
                        self.disks[*disk]
                            .stored_bytes
                            .fetch_sub(len, Ordering::Relaxed);
                    }
                    SegmentLocation::Cold { data, index } => {
                        if let Some(cold) = &self.cold {
                            cold.stored_bytes.fetch_sub(len, Ordering::Relaxed);
                            for (path, len) in [(data, len), (index, 0)] {
                                if let Err(e) = cold.delete(path, len).await {
                                    tracing::warn!(path, error = %e, "cold delete failed");
                                }
                            }
                        }
                    }
                }
            }
        }
        let rel = shuffle_rel(app, shuffle);
        for d in &self.disks {
            self.remove_dir(d.dir.join(&rel)).await;
        }
        if let Some(cold) = &self.cold {
            if let Err(e) = cold.delete_prefix(&rel.to_string_lossy()).await {
                tracing::warn!(%app, shuffle, error = %e, "cold cleanup failed");
            }
        }
        tracing::debug!(%app, shuffle, "shuffle removed");
    }

    /// Removes applications whose last heartbeat or request is older than
    /// their lease, and forgets tombstones past their retention. Returns the
    /// ids removed.
    pub async fn expire_apps(&self) -> Vec<String> {
        let now = self.now_ms();
        let stale: Vec<String> = self
            .apps
            .iter()
            .filter(|a| a.is_expired(now))
            .map(|a| a.key().to_string())
            .collect();
        for app in &stale {
            tracing::warn!(app, "application expired: no heartbeat within its lease");
            self.counters.apps_expired.fetch_add(1, Ordering::Relaxed);
            let _ = self.remove_app_because(app, RemovalReason::Expired).await;
        }
        let retention = self.config.apps.tombstone_retention.as_millis() as u64;
        self.lifecycle.prune(now, retention);
        stale
    }

    /// Empties the cold tier's read cache (benchmarks start each run cold).
    pub fn clear_cold_read_cache(&self) {
        if let Some(cold) = &self.cold {
            cold.clear_read_cache();
        }
    }

    /// Lists the cold tier's objects below an application (tests, checks).
    pub async fn cold_objects(&self, app: &str) -> Result<Vec<String>> {
        self.cold_tier()?.list(&path_component(app)).await
    }

    /// Flushes everything buffered, waits for it, and stops background work.
    /// Appends are refused from the moment this starts.
    pub async fn shutdown(self: &Arc<Self>) {
        self.shutting_down.store(true, Ordering::Release);
        let started = Instant::now();
        let partitions = self.all_partitions();
        tracing::info!(
            partitions = partitions.len(),
            buffered = self.budget.used(),
            "flushing before shutdown"
        );
        // Bounded like a commit: with no writable tier, stop waiting (and
        // say what is lost) rather than never exit.
        let deadline = tokio::time::Instant::now() + self.config.commit_timeout;
        let flushes: Vec<_> = partitions
            .iter()
            .map(|p| (p.key.clone(), self.flush_in_background(p)))
            .collect();
        for (key, flush) in flushes {
            if let Err(e) = self
                .flush_fully_until(flush, deadline, || format!("partition {key}"))
                .await
            {
                tracing::error!(partition = %key, error = %e, "flush at shutdown failed");
            }
        }
        // A graceful stop records every partition as it stands, committed or
        // not, so that the restarted node resumes running jobs: a Uniffle
        // report or a Celeborn commit that arrives after the restart finds
        // the blocks sent before it. (After a crash only commits count.)
        if self.manifest.is_some() {
            // Failures are counted and logged inside; the stop goes on.
            let _ = self.record_until(&partitions, Vec::new(), deadline).await;
            tracing::info!(
                partitions = partitions.len(),
                "partitions recorded for the restart"
            );
        }
        self.cancel.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.tasks.wait()).await;
        tracing::info!(elapsed = ?started.elapsed(), "store shut down");
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

    pub(crate) fn next_segment_uid(&self) -> u64 {
        self.next_segment.fetch_add(1, Ordering::Relaxed)
    }
}

pub(crate) fn shuffle_rel(app: &str, shuffle: i32) -> PathBuf {
    PathBuf::from(path_component(app)).join(shuffle.to_string())
}

impl Store {
    /// Deletes a directory tree on the blocking pool, never on a runtime
    /// thread (a large application has many files). Waits at most
    /// `disks.io_timeout`; a removal still running then goes on alone.
    /// Not a hang signal: a big tree can legitimately take that long.
    async fn remove_dir(&self, path: PathBuf) {
        let shown = path.display().to_string();
        let removal = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&path));
        match tokio::time::timeout(self.config.disks.io_timeout, removal).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(Ok(Err(e))) => tracing::warn!(path = shown, error = %e, "cleanup failed"),
            Ok(Err(e)) => tracing::warn!(path = shown, error = %e, "cleanup task failed"),
            Err(_) => tracing::warn!(
                path = shown,
                timeout = ?self.config.disks.io_timeout,
                "cleanup still running; not waiting for it"
            ),
        }
    }
}

pub(crate) fn concat(mut pieces: Vec<Bytes>) -> Bytes {
    match pieces.len() {
        0 => Bytes::new(),
        1 => pieces.pop().unwrap(),
        _ => {
            let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for p in pieces {
                out.extend_from_slice(&p);
            }
            out.freeze()
        }
    }
}

/// Errors from the cache loader are shared; rebuild an owned one.
pub(crate) fn clone_error(e: &StorageError) -> StorageError {
    match e {
        StorageError::Io { path, source } => StorageError::Io {
            path: path.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        other => StorageError::ReadFailed(other.to_string()),
    }
}
