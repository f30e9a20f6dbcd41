//! The block API: the one facade both protocol adapters call. It owns the
//! parts and only delegates to them:
//! - [`Apps`] (`apps/`): applications, their leases, quotas, shuffles and
//!   partitions, removal events and history;
//! - the tiers (`tiers/`): the memory budget, the durable tiers
//!   ([`Durable`]: disks and the cold tier, and reads from them), and the
//!   [`Flusher`] that moves blocks from memory to them;
//! - [`Recovery`] (`persist/`): what survives restarts.
//!
//! What spans parts (a removal, a commit) is a short sequence of calls
//! here; no part calls back into the store.

mod background;
mod late_writes;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::apps::ledger::AppRecord;
use crate::apps::lifecycle::{AppListener, RemovalReason};
use crate::apps::{App, Apps};
use crate::block::{Block, IndexRecord};
use crate::config::StoreConfig;
use crate::counters::Counters;
use crate::error::{Result, StorageError};
use crate::fault::DiskFaults;
use crate::id::{path_component, AppId, PartitionKey};
use crate::persist::manifest::{Change, RecoveredNote};
use crate::persist::recovery::RecoveryStatus;
use crate::persist::Recovery;
use crate::status::{ShuffleStatus, StoreCounts, StoreStatus, TierBytes, UserConsumption};
use crate::tiers::budget::{MemoryBudget, Reservation};
use crate::tiers::memory::MemoryRead;
use crate::tiers::partition::Partition;
use crate::tiers::shares::{Claimant, Shares};
use crate::tiers::waits::WaitKind;
use crate::tiers::{Durable, Flusher, IoPlacement};
use crate::view::{Chunk, PartitionView, SelectedView, Selection};
use switchyard_memory::NodeMemory;

pub use crate::tiers::PartitionIndex;

/// Size of each partition at its first commit (seal), in bytes: Celeborn's
/// partition file sizes.
pub(crate) const PARTITION_FILE_BYTES: &str = "switchyard_partition_file_bytes";

/// Figures of one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionStats {
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub cold_bytes: u64,
    pub received_bytes: u64,
    pub received_blocks: u64,
    /// Persisted segments (files or objects) holding its flushed bytes.
    pub segments: usize,
}

pub struct Store {
    config: StoreConfig,
    budget: Arc<MemoryBudget>,
    /// The node's one memory number, which the store's budget is a share of; the
    /// frame servers take the network share from it.
    node: Arc<NodeMemory>,
    apps: Apps,
    durable: Arc<Durable>,
    flusher: Arc<Flusher>,
    recovery: Recovery,
    counters: Arc<Counters>,
    cancel: CancellationToken,
    tasks: TaskTracker,
    /// [`PURGES_AT_ONCE`] places for the purges the store's tasks run.
    purges: tokio::sync::Semaphore,
    shutting_down: AtomicBool,
    /// Appends waiting for memory now, and since when some have been: the
    /// node's pause, as a Celeborn worker pauses pushes when its memory is
    /// full.
    pause: parking_lot::Mutex<Pause>,
    /// Users whose consumption gauges were published: one whose
    /// applications all went is set to 0 once, then forgotten.
    published_users: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Fair shares of `budget` among the applications holding memory.
    shares: Shares,
}

#[derive(Default)]
struct Pause {
    waiting: u64,
    since: Option<Instant>,
}

/// An append's part in a pause; the last one to go on ends the pause.
struct Paused<'a>(&'a Store);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let mut pause = self.0.pause.lock();
        pause.waiting -= 1;
        if pause.waiting == 0 {
            if let Some(since) = pause.since.take() {
                metrics::histogram!(PAUSE_SECONDS).record(since.elapsed().as_secs_f64());
            }
        }
    }
}

/// The length of each pause: from the first append that found the budget
/// full to the last waiting one going on (its count: the pauses).
pub(crate) const PAUSE_SECONDS: &str = "switchyard_memory_pause_seconds";

/// Removed applications whose data is deleted at once, by the store's own
/// tasks (lapsed ones, and those removed by [`Store::remove_app_later`]).
const PURGES_AT_ONCE: usize = 8;

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

    /// As [`Store::open_placed`], with `faults` in every disk's stack (a
    /// node whose admin HTTP may switch disk faults).
    pub async fn open_placed_with_faults(
        config: StoreConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        io: &(dyn Fn(&std::path::Path) -> Option<tokio::runtime::Handle> + Sync),
    ) -> Result<Arc<Store>> {
        Self::open_inner(config, faults, io).await
    }

    async fn open_inner(
        config: StoreConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        io: IoPlacement<'_>,
    ) -> Result<Arc<Store>> {
        config
            .validate()
            .map_err(|e| StorageError::Config(e.to_string()))?;
        let counters = Arc::new(Counters::default());
        // Disks signal health changes on it; flushes waiting for a tier
        // wait on it.
        let health_changed = Arc::new(tokio::sync::Notify::new());
        let durable = Arc::new(Durable::open(
            &config,
            faults,
            io,
            health_changed.clone(),
            counters.clone(),
        )?);
        let (recovery, loaded) = Recovery::open(&config)?;
        let capacity = config.memory.capacity.as_u64();
        let node = match config.memory.network {
            Some(network) => NodeMemory::new(capacity, network.as_u64()),
            None => NodeMemory::unbounded(capacity),
        };
        // The store's blocks get what the network share leaves of the number.
        let budget = Arc::new(MemoryBudget::new(node.store_share()));
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let flusher = Arc::new(Flusher::new(
            &config,
            budget.clone(),
            durable.clone(),
            health_changed,
            counters.clone(),
            cancel.clone(),
            tasks.clone(),
        ));
        let store = Arc::new(Store {
            budget,
            node,
            apps: Apps::new(&config.apps),
            durable,
            flusher,
            recovery,
            counters,
            cancel,
            tasks,
            purges: tokio::sync::Semaphore::new(PURGES_AT_ONCE),
            shutting_down: AtomicBool::new(false),
            pause: parking_lot::Mutex::new(Pause::default()),
            published_users: Default::default(),
            shares: Shares::new(
                config.memory.fair_share_from,
                config.memory.user_weights.clone(),
            ),
            config,
        });
        if let Some(loaded) = loaded {
            store.recovery.recover(loaded, &store.apps, &store.durable);
        }
        store.start_background();
        crate::status::register_failure_counters(&store.durable);
        if store.recovery.is_enabled() {
            // Recorded commits and failed ones from the start: the upstream
            // dashboard's metadata operation panels chart both.
            metrics::counter!("switchyard_manifest_commits_total").increment(0);
            metrics::counter!("switchyard_manifest_failures_total").increment(0);
        }
        tracing::info!(
            memory = %store.config.memory.capacity,
            disks = store.durable.disks().len(),
            cold = store.durable.cold().is_some(),
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

    /// The node's memory: the one number, of which the store's budget is a share
    /// and the network's bytes (frames being read, replies) take the rest.
    pub fn node_memory(&self) -> Arc<NodeMemory> {
        self.node.clone()
    }

    /// True while some tier can take flushes.
    pub fn is_ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire) && self.durable.is_writable()
    }

    #[cfg(test)]
    pub(crate) fn apps(&self) -> &Apps {
        &self.apps
    }

    #[cfg(test)]
    pub(crate) fn flusher(&self) -> &Arc<Flusher> {
        &self.flusher
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
        self.register_app_lapsing(app, lease, RemovalReason::Expired);
    }

    /// Like [`Store::register_app_leased`], and says what the end of the
    /// lease is called: [`RemovalReason::Lost`] for a protocol whose master
    /// calls a silent application lost (Celeborn), `Expired` otherwise.
    pub fn register_app_lapsing(&self, app: &str, lease: Duration, lapse: RemovalReason) {
        self.apps.register(app, lease, lapse);
    }

    /// Refreshes an application's lease. False if the application is unknown.
    pub fn heartbeat(&self, app: &str) -> bool {
        self.apps.heartbeat(app)
    }

    /// Describes an application's client (its protocol version, say), for
    /// the status and the migration report. The store gives it no meaning.
    /// An application not registered yet gets it when it registers (within
    /// an hour).
    pub fn set_app_client(&self, app: &str, client: &str) {
        self.apps.set_client(app, client);
    }

    /// Names the user an application runs as (for `apps.max_user_bytes`).
    pub fn set_app_user(&self, app: &str, user: &str) {
        self.apps.set_user(app, user);
    }

    /// Whether the application, and its user, may set up more: refused with
    /// [`StorageError::QuotaExceeded`] when either holds its quota of bytes.
    /// (Appends check the application's own quota each time.)
    pub fn check_quota(&self, app: &str) -> Result<()> {
        self.apps.check_quota(app)
    }

    /// Whether a user's applications hold less than `apps.max_user_bytes`
    /// together.
    pub fn check_user_quota(&self, user: &str) -> Result<()> {
        self.apps.check_user_quota(user)
    }

    /// Every live application's figures, then those of applications removed
    /// within `apps.history_retention` (oldest removal first).
    pub fn app_history(&self) -> Vec<AppRecord> {
        self.apps.history()
    }

    pub fn has_app(&self, app: &str) -> bool {
        self.apps.contains(app)
    }

    pub fn app_ids(&self) -> Vec<String> {
        self.apps.ids()
    }

    /// Tells `listener` of every application removal from now on, for as
    /// long as it is alive (the store holds it weakly).
    pub fn subscribe(&self, listener: std::sync::Weak<dyn AppListener>) {
        self.apps.subscribe(listener);
    }

    /// Fails with [`StorageError::ShuffleRemoved`] if the shuffle died with
    /// its application (expired or unregistered), so that an adapter can
    /// refuse to set it up again.
    pub fn check_shuffle_alive(&self, app: &str, shuffle: i32) -> Result<()> {
        self.apps.check_alive(&AppId::from(app), shuffle)
    }

    // ---- writes ---------------------------------------------------------

    /// Reserves memory ahead of an append (Uniffle's buffer ticket), for
    /// no application in particular (no fair share applies).
    pub fn reserve(&self, bytes: u64) -> Result<Reservation> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(StorageError::ShuttingDown);
        }
        let r = Reservation::new(self.budget.clone(), bytes);
        if r.is_err() {
            self.flusher.refused(bytes);
        }
        r
    }

    /// Reserves memory ahead of an append of `app`, within its fair share
    /// when the budget is contended.
    pub fn reserve_for(&self, app: &str, bytes: u64) -> Result<Reservation> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(StorageError::ShuttingDown);
        }
        let holds = self.apps.get(app).map_or(0, |a| a.tally().tier_bytes().0);
        if let Err(e) = self.check_share(app, holds, bytes) {
            self.flusher.refused(bytes);
            return Err(e);
        }
        let r = Reservation::new(self.budget.clone(), bytes);
        if r.is_err() {
            self.flusher.refused(bytes);
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
        let partition = self.apps.partition_or_create(key)?;
        if partition.is_sealed() {
            return Err(StorageError::Sealed(key.clone()));
        }
        let charge: u64 = blocks.iter().map(Block::charge).sum();
        let bytes: u64 = blocks.iter().map(Block::len).sum();
        self.apps.check_append(&partition, bytes)?;
        let covered = reservation.map(|r| r.consume(charge)).unwrap_or(0);
        if covered < charge {
            let more = charge - covered;
            let held = partition.tally().tier_bytes().0;
            if let Err(e) = self
                .check_share(&key.app, held, more)
                .and_then(|()| self.budget.try_charge(more))
            {
                // Give the covered part back: nothing is appended.
                self.budget.release(covered);
                self.flusher.refused(charge - covered);
                return Err(e);
            }
        }
        let count = blocks.len() as u64;
        let staged = match partition.stage(blocks) {
            Ok(staged) => staged,
            Err(e) => {
                self.budget.release(charge);
                return Err(e);
            }
        };
        partition.count_received(bytes, count);
        self.counters.appended(bytes);
        if staged >= self.config.memory.single_buffer_threshold.as_u64() {
            self.flusher.schedule_flush(&partition);
        }
        if self.flusher.over_high_watermark() {
            self.flusher.wake_spill();
        }
        Ok(())
    }

    /// The fair-share check of `bytes` more for `app`, which holds `holds`
    /// bytes in memory (see [`crate::tiers::shares`]).
    fn check_share(&self, app: &str, holds: u64, bytes: u64) -> Result<()> {
        let (used, capacity) = (self.budget.used(), self.budget.capacity());
        if !self.shares.contended(used, bytes, capacity) {
            return Ok(());
        }
        let registered = self.apps.get(app);
        let user = registered.as_ref().and_then(|a| a.user());
        let claimant = Claimant {
            app,
            user: user.as_deref(),
            holds,
        };
        let checked = self.shares.check(&claimant, bytes, used, capacity);
        if checked.is_err() {
            metrics::counter!("switchyard_memory_share_refusals_total").increment(1);
            if let Some(a) = registered {
                a.tally().waits().count_share_refusal();
            }
        }
        checked
    }

    /// Counts the applications holding memory, for the fair shares.
    pub(crate) fn count_share_holders(&self) {
        let apps = self.apps.all();
        let users: Vec<(&App, Option<String>, u64)> = apps
            .iter()
            .map(|a| (&**a, a.tally().tier_bytes().0))
            .filter(|(_, holds)| *holds > 0)
            .map(|(a, holds)| (a, a.user(), holds))
            .collect();
        let holders: Vec<Claimant<'_>> = users
            .iter()
            .map(|(a, user, holds)| Claimant {
                app: a.id(),
                user: user.as_deref(),
                holds: *holds,
            })
            .collect();
        self.shares.count_active(&holders, self.budget.capacity());
        metrics::gauge!("switchyard_memory_share_applications").set(holders.len() as f64);
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
        // This append's part in the node's pause, ended however the wait ends.
        let mut paused: Option<Paused<'_>> = None;
        loop {
            let released = self.budget.released();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.append(key, blocks.clone(), None).await {
                Err(e) if e.is_backpressure() => {
                    waited.get_or_insert_with(Instant::now);
                    if paused.is_none() {
                        paused = Some(self.pause_started());
                    }
                    tokio::select! {
                        _ = &mut released => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            self.counters.memory_wait_timed_out();
                            if let Some(since) = waited {
                                self.count_memory_wait(&key.app, since);
                            }
                            return Err(e);
                        }
                        _ = self.cancel.cancelled() => return Err(StorageError::ShuttingDown),
                    }
                }
                result => {
                    if let Some(since) = waited {
                        self.counters.memory_waited();
                        metrics::histogram!("switchyard_memory_wait_seconds")
                            .record(since.elapsed().as_secs_f64());
                        self.count_memory_wait(&key.app, since);
                    }
                    return result;
                }
            }
        }
    }

    /// Counts an application's wait for memory that began `since`.
    fn count_memory_wait(&self, app: &str, since: Instant) {
        if let Some(a) = self.apps.get(app) {
            a.tally().waits().count(WaitKind::Memory, since.elapsed());
        }
    }

    /// An append starts waiting for memory: the first one starts a pause.
    fn pause_started(&self) -> Paused<'_> {
        let mut pause = self.pause.lock();
        pause.waiting += 1;
        pause.since.get_or_insert_with(Instant::now);
        Paused(self)
    }

    /// Whether appends wait for memory now.
    pub fn is_paused(&self) -> bool {
        self.pause.lock().waiting > 0
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
        Ok(match self.apps.partition(key)? {
            Some(p) => p.read_memory(after, max_bytes, keep),
            None => MemoryRead::default(),
        })
    }

    /// The persisted index of a partition. An unknown partition, or one whose
    /// data is all still in memory, has an empty index.
    pub async fn read_index(&self, key: &PartitionKey) -> Result<PartitionIndex> {
        match self.apps.partition(key)? {
            Some(p) => self.durable.read_index(&p).await,
            None => Ok(PartitionIndex::default()),
        }
    }

    /// Bytes `[offset, offset + len)` of a partition's persisted data.
    pub async fn read_data(&self, key: &PartitionKey, offset: u64, len: u64) -> Result<Bytes> {
        let p = self.known_partition(key)?;
        self.durable.read_range(&p, offset, len).await
    }

    fn known_partition(&self, key: &PartitionKey) -> Result<Arc<Partition>> {
        self.apps
            .partition(key)?
            .ok_or_else(|| StorageError::UnknownPartition(key.clone()))
    }

    pub fn partition_stats(&self, key: &PartitionKey) -> Result<PartitionStats> {
        Ok(match self.apps.partition(key)? {
            Some(p) => {
                let (memory_bytes, disk_bytes, cold_bytes) = p.tier_bytes();
                PartitionStats {
                    memory_bytes,
                    disk_bytes,
                    cold_bytes,
                    received_bytes: p.received_bytes(),
                    received_blocks: p.received_blocks(),
                    segments: p.segment_count(),
                }
            }
            None => PartitionStats::default(),
        })
    }

    /// Flushes the partition, then opens a chunked view of it. `maps` keeps
    /// only blocks whose map id is in the range, ordered by map id.
    pub async fn open_view(
        self: &Arc<Self>,
        key: &PartitionKey,
        maps: Option<std::ops::Range<i64>>,
        chunk_size: u64,
    ) -> Result<PartitionView> {
        let (index, p) = self.read_index_flushed(key).await?;
        Ok(PartitionView::open(p, &index, maps, chunk_size))
    }

    /// Flushes the partition, then opens a view of the records `select`
    /// picks from its records (in data order), in the order and with the
    /// repeats it gives them (Celeborn's map partitions serve a broadcast
    /// region once per sub-partition read). Chunks are cut as they are read
    /// ([`SelectedView::chunks`]).
    pub async fn open_selected_view(
        self: &Arc<Self>,
        key: &PartitionKey,
        select: impl FnOnce(Vec<IndexRecord>) -> Selection,
        chunk_size: u64,
    ) -> Result<SelectedView> {
        let (index, p) = self.read_index_flushed(key).await?;
        Ok(SelectedView::open(p, &index, select, chunk_size))
    }

    /// Reads one chunk of a [`SelectedView`].
    pub async fn read_selected_chunk(&self, view: &SelectedView, chunk: &Chunk) -> Result<Bytes> {
        self.durable
            .read_ranges(view.partition(), &chunk.ranges)
            .await
    }

    pub async fn read_chunk(&self, view: &PartitionView, index: usize) -> Result<Bytes> {
        let chunk = view.chunk(index)?;
        self.durable
            .read_ranges(view.partition(), &chunk.ranges)
            .await
    }

    async fn read_index_flushed(&self, key: &PartitionKey) -> Result<(Bytes, Arc<Partition>)> {
        let p = self.known_partition(key)?;
        self.flusher.flush_fully(&p).await?;
        let index = self.read_index(key).await?;
        Ok((index.index, p))
    }

    // ---- commits --------------------------------------------------------

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
        let p = self.apps.partition_or_create(key)?;
        let first = p.seal();
        let deadline = self.commit_deadline();
        let flush = self.flusher.flush_in_background(&p);
        self.flusher
            .flush_fully_until(flush, deadline, || format!("partition {key}"))
            .await?;
        let notes = Recovery::note_changes(&key.app, key.shuffle, notes);
        self.record_until(std::slice::from_ref(&p), notes, deadline)
            .await?;
        let stats = self.partition_stats(key)?;
        if first {
            // The size of the file a Celeborn worker would close here
            // (a commit that timed out at its first seal is not counted).
            metrics::histogram!(PARTITION_FILE_BYTES)
                .record((stats.disk_bytes + stats.cold_bytes) as f64);
        }
        Ok(stats)
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
        let app_state = self.apps.app(app)?;
        self.apps.check_alive(app_state.id(), shuffle)?;
        let parts = app_state
            .shuffle_partitions(shuffle, Some(partitions))
            .unwrap_or_default();
        let deadline = self.commit_deadline();
        let flushes: Vec<_> = parts
            .iter()
            .map(|p| self.flusher.flush_in_background(p))
            .collect();
        for (p, flush) in parts.iter().zip(flushes) {
            self.flusher
                .flush_fully_until(flush, deadline, || format!("partition {}", p.key()))
                .await?;
        }
        let notes = Recovery::note_changes(app_state.id(), shuffle, notes);
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
        let app_state = self.apps.app(app)?;
        let changes = Recovery::note_changes(app_state.id(), shuffle, notes);
        self.record_until(&[], changes, self.commit_deadline())
            .await
    }

    pub fn is_sealed(&self, key: &PartitionKey) -> Result<bool> {
        Ok(self
            .apps
            .partition(key)?
            .map(|p| p.is_sealed())
            .unwrap_or(false))
    }

    /// Flushes every block of a shuffle and waits until it is durable
    /// (Uniffle's finishShuffle), at most `commit_timeout` in all; then it
    /// fails with [`StorageError::FlushTimeout`] while the flushes go on.
    pub async fn flush_shuffle(self: &Arc<Self>, app: &str, shuffle: i32) -> Result<()> {
        let Some(partitions) = self.apps.app(app)?.shuffle_partitions(shuffle, None) else {
            return Ok(());
        };
        let deadline = self.commit_deadline();
        // All at once: the flush slots bound how many write together.
        let flushes: Vec<_> = partitions
            .iter()
            .map(|p| self.flusher.flush_in_background(p))
            .collect();
        let mut first_error = None;
        for flush in flushes {
            let what = || format!("shuffle {shuffle} of application {app}");
            if let Err(e) = self.flusher.flush_fully_until(flush, deadline, what).await {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        self.record_until(&partitions, Vec::new(), deadline).await
    }

    fn commit_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.config.commit_timeout
    }

    /// Records partitions and notes in the manifest (see
    /// [`Recovery::record_until`]: a failure is counted, not returned).
    async fn record_until(
        &self,
        partitions: &[Arc<Partition>],
        notes: Vec<Change>,
        deadline: tokio::time::Instant,
    ) -> Result<()> {
        self.recovery
            .record_until(partitions, notes, deadline, &self.apps, &self.durable)
            .await
    }

    // ---- removal --------------------------------------------------------

    /// Removes a shuffle: its memory at once, its files and objects before
    /// this returns.
    pub async fn remove_shuffle(&self, app: &str, shuffle: i32) -> Result<()> {
        if let Some((id, partitions)) = self.apps.remove_shuffle(app, shuffle) {
            self.recovery
                .forget(Change::RemoveShuffle(id.clone(), shuffle))
                .await;
            self.purge_shuffle(&id, shuffle, &partitions).await;
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
        if let Some((a, shuffles)) = self.apps.remove(app, reason) {
            self.purge_app(&a, shuffles).await;
        }
        Ok(())
    }

    /// Removes an application for clients at once, as [`Store::remove_app`]
    /// does, and leaves its memory, files and objects to a task of the
    /// store: the caller answers without waiting for the deletes (a Celeborn
    /// ApplicationLost, from a driver that is stopping: the files of 10^4
    /// partitions took ~2 s to delete).
    pub fn remove_app_later(self: &Arc<Self>, app: &str, reason: RemovalReason) {
        if let Some((a, shuffles)) = self.apps.remove(app, reason) {
            self.purge_later(a, shuffles);
        }
    }

    /// [`Store::purge_app`] in a task of the store, [`PURGES_AT_ONCE`] at a
    /// time over all callers.
    fn purge_later(self: &Arc<Self>, a: Arc<App>, shuffles: Vec<(i32, Vec<Arc<Partition>>)>) {
        let store = self.clone();
        self.tasks.spawn(async move {
            let _place = store.purges.acquire().await;
            store.purge_app(&a, shuffles).await;
        });
    }

    /// A removed application's records, memory, files and objects go.
    /// An application registered again by then (a Celeborn driver back after
    /// its lease ran out, while its purge waited for a place) keeps its new
    /// shuffles' records and files: only the removed shuffles go.
    async fn purge_app(&self, a: &App, shuffles: Vec<(i32, Vec<Arc<Partition>>)>) {
        if self.apps.contains(a.id()) {
            for (id, _) in &shuffles {
                let change = Change::RemoveShuffle(a.id().clone(), *id);
                self.recovery.forget(change).await;
            }
        } else {
            self.recovery
                .forget(Change::RemoveApp(a.id().clone()))
                .await;
        }
        for (id, partitions) in shuffles {
            self.purge_shuffle(a.id(), id, &partitions).await;
        }
        if !self.apps.contains(a.id()) {
            self.durable.remove_app_files(a.id()).await;
        }
    }

    /// A removed shuffle's data goes: its quota, memory, segments, files.
    async fn purge_shuffle(&self, app: &AppId, shuffle: i32, partitions: &[Arc<Partition>]) {
        self.apps.release(partitions);
        self.flusher.discard(partitions).await;
        self.durable.remove_shuffle_files(app, shuffle).await;
        tracing::debug!(%app, shuffle, "shuffle removed");
    }

    /// Removes applications whose last heartbeat or request is older than
    /// their lease, and forgets tombstones past their retention. Returns the
    /// ids removed.
    pub async fn expire_apps(self: &Arc<Self>) -> Vec<String> {
        let stale = self.apps.expired();
        // Every lapsed application is gone for clients at once (tombstones,
        // listeners); its files go in tasks of their own, so that the next
        // check is not held up by the deletes (a thousand lapsing together
        // once waited for each other's files, the last minutes after its
        // lease).
        for (app, lapse) in &stale {
            tracing::warn!(
                app,
                reason = lapse.as_str(),
                "application removed: no heartbeat within its lease"
            );
            self.counters.app_expired();
            if let Some((a, shuffles)) = self.apps.remove(app, *lapse) {
                self.purge_later(a, shuffles);
            }
        }
        self.apps.prune_tombstones();
        stale.into_iter().map(|(app, _)| app).collect()
    }

    // ---- cold tier ------------------------------------------------------

    /// Empties the cold tier's read cache (benchmarks start each run cold).
    pub fn clear_cold_read_cache(&self) {
        if let Some(cold) = self.durable.cold() {
            cold.clear_read_cache();
        }
    }

    /// Lists the cold tier's objects below an application (tests, checks).
    pub async fn cold_objects(&self, app: &str) -> Result<Vec<String>> {
        self.durable.cold_tier()?.list(&path_component(app)).await
    }

    // ---- recovery -------------------------------------------------------

    /// Front-end notes recovered for the applications of `front_end`; each
    /// is handed out once.
    pub fn take_recovered_notes(
        &self,
        front_end: switchyard_ident::FrontEnd,
    ) -> Vec<RecoveredNote> {
        self.recovery.take_notes(front_end)
    }

    /// What the last start recovered and removed.
    pub fn recovery_status(&self) -> RecoveryStatus {
        self.recovery.status()
    }

    // ---- figures --------------------------------------------------------

    /// The shuffles of an application, by id; None if it is unknown.
    pub fn shuffle_status(&self, app: &str) -> Option<Vec<ShuffleStatus>> {
        let app = self.apps.get(app)?;
        Some(crate::status::shuffle_status(&app))
    }

    pub fn status(&self) -> StoreStatus {
        crate::status::store_status(crate::status::Sources {
            ready: self.is_ready(),
            budget: &self.budget,
            node: &self.node,
            memory: &self.config.memory,
            apps: &self.apps,
            durable: &self.durable,
            counters: &self.counters,
            recovery: self.recovery_status(),
        })
    }

    /// What a heartbeat reports (cheap: counters, no walk of partitions).
    pub fn node_load(&self) -> crate::status::NodeLoad {
        crate::status::node_load(self.is_ready(), &self.budget, &self.durable, &self.apps)
    }

    /// Bytes held per tier, summed over tier counters (cheap: no walk).
    pub fn tier_bytes(&self) -> TierBytes {
        crate::status::tier_bytes(&self.budget, &self.durable)
    }

    /// Shuffles, partitions (and those in memory alone), queued flushes and
    /// the pause, from counters.
    pub fn counts(&self) -> StoreCounts {
        StoreCounts {
            shuffles: self.apps.shuffle_count(),
            partitions: self.apps.partition_count(),
            memory_only_partitions: self.apps.memory_only_partition_count(),
            flush_queue: self.flusher.queued(),
            read_queue: self.durable.read_queue() as u64,
            paused: self.is_paused(),
        }
    }

    /// Per user (applications without one left out): bytes and segments on
    /// disks and in the cold tier.
    pub fn user_consumption(&self) -> std::collections::HashMap<String, UserConsumption> {
        self.apps.user_consumption()
    }

    /// Publishes gauges to the `metrics` recorder, if the process installed one.
    pub fn publish_gauges(&self) {
        crate::status::publish_gauges(&self.budget, &self.node, &self.durable, self.apps.len());
        crate::status::publish_store_gauges(&self.counts(), &self.durable);
        let users = self.user_consumption();
        let mut published = self.published_users.lock();
        for gone in published.iter().filter(|u| !users.contains_key(*u)) {
            crate::status::publish_user_gauges(gone, Default::default());
        }
        published.clear();
        for (user, consumption) in users {
            crate::status::publish_user_gauges(&user, consumption);
            published.insert(user);
        }
    }

    // ---- shutdown -------------------------------------------------------

    /// Flushes everything buffered, waits for it, and stops background work.
    /// Appends are refused from the moment this starts.
    pub async fn shutdown(self: &Arc<Self>) {
        self.shutting_down.store(true, Ordering::Release);
        let started = Instant::now();
        let partitions = self.apps.all_partitions();
        tracing::info!(
            partitions = partitions.len(),
            buffered = self.budget.used(),
            "flushing before shutdown"
        );
        // Bounded like a commit: with no writable tier, stop waiting (and
        // say what is lost) rather than never exit.
        let deadline = self.commit_deadline();
        let flushes: Vec<_> = partitions
            .iter()
            .map(|p| (p.key().clone(), self.flusher.flush_in_background(p)))
            .collect();
        for (key, flush) in flushes {
            if let Err(e) = self
                .flusher
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
        if self.recovery.is_enabled() {
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
}
