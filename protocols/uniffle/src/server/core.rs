//! Request handling shared by the gRPC and Netty transports. Every method
//! takes plain values and returns a typed [`UniffleError`] that the transport
//! turns into its status code.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use switchyard_ident::FrontEnd;
use switchyard_storage::{
    AppId, AppListener, AppRemoved, Block, BlockMeta, PartitionIndex, PartitionKey, StorageError,
    Store,
};

use switchyard_frame::traffic::{self, Protocol, Request};

use super::apps::{AppState, ShuffleState};
use super::tickets::Tickets;
use crate::bitmap::IdBitmap;
use crate::config::{ReportDurability, UniffleConfig};
use crate::error::{Result, UniffleError};

/// Blocks read from memory, as both transports return them.
#[derive(Debug, Default)]
pub struct MemoryData {
    /// (block id, offset in `data`, length, uncompressed length, crc, task attempt id)
    pub segments: Vec<SegmentMeta>,
    pub data: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentMeta {
    pub block_id: i64,
    pub offset: i64,
    pub length: i32,
    pub uncompress_length: i32,
    pub crc: i64,
    pub task_attempt_id: i64,
}

/// A block as a client sends it.
pub struct IncomingBlock {
    pub block_id: i64,
    pub length: i32,
    pub uncompress_length: i32,
    pub crc: i64,
    pub task_attempt_id: i64,
    pub data: Bytes,
}

/// Durable notes beside a shuffle: its registration, and one per report.
const REGISTRATION_NOTE: &str = "registration";
const REPORT_NOTE: &str = "report/";

/// The store's id of a Uniffle application.
pub fn stored(app: &str) -> AppId {
    FrontEnd::Uniffle.stored(app)
}

/// Partition splits, logged at most this often (each is counted).
static SPLIT_LOG: switchyard_frame::log_limit::LogLimiter =
    switchyard_frame::log_limit::LogLimiter::new(10_000, 1);

/// The SparkConf key (sent with registerShuffle by 0.10+ clients) that says
/// the application's writers reassign refused partitions.
const REASSIGN_KEY: &str = "spark.rss.client.reassign.enabled";

/// Failed background commits, logged at most this often (each is counted).
static BACKGROUND_COMMIT_LOG: switchyard_frame::log_limit::LogLimiter =
    switchyard_frame::log_limit::LogLimiter::new(10_000, 1);

/// The commit of a report already answered (`report_durability =
/// background`). A failure is counted and logged: a restart will not recover
/// those blocks. A shuffle removed meanwhile has nothing left to keep.
async fn commit_behind_answer(
    store: Arc<Store>,
    app: AppId,
    shuffle: i32,
    partitions: Vec<i32>,
    notes: Vec<(String, Vec<u8>)>,
) {
    match store
        .commit_partitions(&app, shuffle, &partitions, notes)
        .await
    {
        Ok(()) | Err(StorageError::ShuffleRemoved { .. } | StorageError::UnknownApp(_)) => {}
        Err(e) => {
            metrics::counter!("switchyard_uniffle_background_commit_failures_total").increment(1);
            if let Some(suppressed) = BACKGROUND_COMMIT_LOG.allow() {
                tracing::warn!(%app, shuffle, error = %e, suppressed, "background commit of a reported shuffle result failed: a restart will not recover those blocks");
            }
        }
    }
}

pub struct ShuffleServerCore {
    store: Arc<Store>,
    apps: DashMap<String, Arc<AppState>>,
    tickets: Tickets,
    config: UniffleConfig,
    /// Names report notes uniquely, across restarts too (starts at the clock).
    report_seq: std::sync::atomic::AtomicU64,
    /// Set while the node decommissions (the gateway's flag): reassigning
    /// applications get their writes refused.
    draining: Arc<AtomicBool>,
}

impl ShuffleServerCore {
    /// A core whose application state follows the store's removals.
    pub fn new(store: Arc<Store>, config: UniffleConfig) -> Arc<Self> {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let core = Arc::new(ShuffleServerCore {
            store,
            apps: DashMap::new(),
            tickets: Tickets::default(),
            config,
            report_seq: start.into(),
            draining: Arc::default(),
        });
        core.recover();
        let listener: Arc<dyn AppListener> = core.clone();
        core.store.subscribe(Arc::downgrade(&listener));
        core
    }

    /// Rebuilds what the store recovered: every Uniffle application it
    /// holds, its shuffles' registrations and reported block ids, so that
    /// readers get the same getShuffleResult as before the restart.
    fn recover(&self) {
        for stored_id in self.store.app_ids() {
            if let Some(app) = FrontEnd::Uniffle.own_id(&stored_id) {
                self.apps.entry(app.to_string()).or_default();
            }
        }
        let (mut shuffles, mut reports, mut damaged) = (0, 0, 0);
        for note in self.store.take_recovered_notes(FrontEnd::Uniffle) {
            let Some(app) = FrontEnd::Uniffle.own_id(&note.app) else {
                continue;
            };
            let state = self.apps.entry(app.to_string()).or_default().clone();
            let shuffle = state.shuffles.entry(note.shuffle).or_default().clone();
            let ok = if note.name == REGISTRATION_NOTE {
                shuffles += 1;
                shuffle.restore_registration(&note.value).is_some()
            } else if note.name.starts_with(REPORT_NOTE) {
                reports += 1;
                match super::apps::parse_report_note(&note.value) {
                    Some(parts) => {
                        for (p, ids) in parts {
                            shuffle.report(p, &ids);
                        }
                        true
                    }
                    None => false,
                }
            } else {
                true
            };
            if !ok {
                damaged += 1;
                tracing::error!(
                    app,
                    shuffle = note.shuffle,
                    note = note.name,
                    "damaged note not recovered"
                );
            }
        }
        if !self.apps.is_empty() {
            tracing::info!(
                apps = self.apps.len(),
                shuffles,
                reports,
                damaged,
                "uniffle: recovered applications"
            );
        }
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    pub fn config(&self) -> &UniffleConfig {
        &self.config
    }

    /// The flag that says this node decommissions, shared with whoever
    /// starts and cancels the decommission.
    pub fn draining_flag(&self) -> Arc<AtomicBool> {
        self.draining.clone()
    }

    /// Expires unused tickets, until `cancel` fires. (Applications the store
    /// removes are forgotten when it says so: [`AppListener`].)
    pub async fn run_housekeeping(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        let period = (self.config.ticket_timeout / 4).max(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let expired = self.tickets.expire(self.config.ticket_timeout);
            if expired > 0 {
                tracing::debug!(expired, "buffer tickets expired unused");
                metrics::counter!("switchyard_uniffle_tickets_expired_total")
                    .increment(expired as u64);
            }
            metrics::gauge!("switchyard_uniffle_tickets").set(self.tickets.len() as f64);
        }
    }

    fn forget_app(&self, app: &str) {
        self.apps.remove(app);
        self.tickets.remove_app(app);
    }

    /// The app's state, if it is registered here and alive in the store.
    fn app(&self, app: &str) -> Result<Arc<AppState>> {
        let state = self
            .apps
            .get(app)
            .map(|a| a.clone())
            .ok_or_else(|| UniffleError::NoRegister(app.to_string()))?;
        if !self.store.heartbeat(&stored(app)) {
            // Removed between the store's event and this lookup.
            return Err(UniffleError::NoRegister(app.to_string()));
        }
        Ok(state)
    }

    fn shuffle(&self, app: &str, shuffle: i32) -> Result<Arc<ShuffleState>> {
        self.app(app)?
            .shuffles
            .get(&shuffle)
            .map(|s| s.clone())
            .ok_or_else(|| UniffleError::ShuffleNotRegistered {
                app: app.to_string(),
                shuffle,
            })
    }

    // ---- registration ---------------------------------------------------

    /// Registers partition ranges of a shuffle; idempotent. A higher stage
    /// attempt (0.10+ stage retry) first removes the shuffle's old data.
    /// Returns false when the request is for an older stage attempt.
    pub async fn register_shuffle(
        &self,
        app: &str,
        shuffle: i32,
        ranges: Vec<(i32, i32)>,
        stage_attempt: i32,
    ) -> Result<bool> {
        if app.is_empty() {
            return Err(UniffleError::InvalidRequest("empty appId".into()));
        }
        if ranges.iter().any(|&(s, e)| s < 0 || e < s) {
            return Err(UniffleError::InvalidRequest(format!(
                "bad partition ranges {ranges:?}"
            )));
        }
        // A shuffle that died with its application stays dead: its old
        // blocks and reports are gone, and a reader must not be told less.
        self.store.check_shuffle_alive(&stored(app), shuffle)?;
        self.store.register_app(&stored(app));
        // An application (or user) at its quota sets up nothing more.
        self.store.check_quota(&stored(app))?;
        let state = self.apps.entry(app.to_string()).or_default().clone();
        let existing = state.shuffles.get(&shuffle).map(|s| s.clone());
        if let Some(s) = &existing {
            let last = s.stage_attempt.load(std::sync::atomic::Ordering::Acquire);
            if stage_attempt < last {
                return Ok(false);
            }
            if stage_attempt > last {
                tracing::info!(
                    app,
                    shuffle,
                    stage_attempt,
                    "stage retry: dropping the shuffle's earlier data"
                );
                state.shuffles.remove(&shuffle);
                self.store.remove_shuffle(&stored(app), shuffle).await?;
            }
        }
        let s = state.shuffles.entry(shuffle).or_default().clone();
        s.stage_attempt
            .store(stage_attempt, std::sync::atomic::Ordering::Release);
        s.add_ranges(ranges);
        Ok(true)
    }

    /// Names the user an application runs as (registerShuffle's `user`),
    /// for the per-user quota.
    pub fn set_user(&self, app: &str, user: &str) {
        if !user.is_empty() && user.len() <= 256 {
            self.store.set_app_user(&stored(app), user);
        }
    }

    /// Notes whether the application's writers reassign refused partitions,
    /// from the SparkConf a 0.10+ driver sends with registerShuffle.
    pub fn set_client_properties(&self, app: &str, properties: &HashMap<String, String>) {
        let reassign = properties
            .get(REASSIGN_KEY)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if let Some(state) = self.apps.get(app) {
            state.reassign.store(reassign, Ordering::Relaxed);
        }
    }

    pub fn heartbeat(&self, app: &str) -> Result<()> {
        self.app(app).map(|_| ())
    }

    pub fn has_app(&self, app: &str) -> bool {
        self.apps.contains_key(app)
    }

    pub async fn unregister_shuffle(&self, app: &str, shuffle: i32) -> Result<()> {
        if let Some(a) = self.apps.get(app).map(|a| a.clone()) {
            a.shuffles.remove(&shuffle);
        }
        self.store.remove_shuffle(&stored(app), shuffle).await?;
        Ok(())
    }

    pub async fn unregister_app(&self, app: &str) -> Result<()> {
        self.forget_app(app);
        self.store.remove_app(&stored(app)).await?;
        Ok(())
    }

    // ---- writes ---------------------------------------------------------

    /// Reserves memory for a coming `sendShuffleData`; returns the ticket id.
    pub fn require_buffer(&self, app: &str, shuffle: i32, size: i64) -> Result<i64> {
        let mut request = Request::start(Protocol::Uniffle, "require_buffer");
        if size < 0 {
            return Err(UniffleError::InvalidRequest(format!("requireSize {size}")));
        }
        // An empty app id is the legacy path: only the size is checked. A
        // ticket of nothing for nobody reserves nothing and only piles up.
        if app.is_empty() && size == 0 {
            return Err(UniffleError::InvalidRequest(
                "requireSize 0 without an application".into(),
            ));
        }
        if !app.is_empty() {
            self.shuffle(app, shuffle)?;
            self.refuse_if_draining(app)?;
            self.store.check_quota(&stored(app))?;
        }
        let reservation = if app.is_empty() {
            self.store.reserve(size as u64)?
        } else {
            self.store.reserve_for(&stored(app), size as u64)?
        };
        request.ok();
        Ok(self.tickets.issue(app, reservation))
    }

    /// A decommissioning node refuses new blocks of applications that move
    /// refused partitions elsewhere, so it drains; others it keeps serving
    /// (they would fail their tasks), as a JVM server serves everyone.
    fn refuse_if_draining(&self, app: &str) -> Result<()> {
        let reassigns = || {
            self.app(app)
                .is_ok_and(|a| a.reassign.load(Ordering::Relaxed))
        };
        if self.draining.load(Ordering::Relaxed) && reassigns() {
            return Err(UniffleError::Draining);
        }
        Ok(())
    }

    /// The partitions of a granted `requireBuffer` that the client should
    /// split onto other servers (`uniffle.huge_partition_split_limit`; none
    /// when it is unset), each named once (see `split`). `sizes` is the
    /// request's `partitionRequireSizes`.
    pub fn partitions_to_split(
        &self,
        app: &str,
        shuffle: i32,
        ids: &[i32],
        sizes: &[i32],
    ) -> Vec<i32> {
        let Some(limit) = self.config.huge_partition_split_limit else {
            return Vec::new();
        };
        let Ok(state) = self.shuffle(app, shuffle) else {
            return Vec::new();
        };
        let received = |partition| {
            let key = PartitionKey::new(stored(app), shuffle, partition);
            self.store
                .partition_stats(&key)
                .map_or(0, |s| s.received_bytes)
        };
        let split = super::split::newly_past_limit(&state, received, limit.as_u64(), ids, sizes);
        if !split.is_empty() {
            metrics::counter!("switchyard_uniffle_partition_splits_total")
                .increment(split.len() as u64);
            if let Some(suppressed) = SPLIT_LOG.allow() {
                tracing::info!(app, shuffle, partitions = ?split, %limit, suppressed, "huge partition: asking the client to split it onto other servers");
            }
        }
        split
    }

    /// Appends the blocks of one request, spending its ticket.
    pub async fn send_shuffle_data(
        &self,
        app: &str,
        shuffle: i32,
        ticket: i64,
        partitions: Vec<(i32, Vec<IncomingBlock>)>,
    ) -> Result<()> {
        let mut request = Request::start(Protocol::Uniffle, "send_shuffle_data");
        let state = self.shuffle(app, shuffle)?;
        if partitions.iter().all(|(_, b)| b.is_empty()) {
            return Err(UniffleError::InvalidRequest("No data in request".into()));
        }
        // Another application's ticket is unknown to this one (and stays
        // with its owner).
        let mut ticket = self
            .tickets
            .take(ticket, app)
            .ok_or(UniffleError::UnknownTicket(ticket))?;
        for (partition, blocks) in partitions {
            if !state.has_partition(partition) {
                return Err(UniffleError::ShuffleNotRegistered {
                    app: app.to_string(),
                    shuffle,
                });
            }
            let mut out = Vec::with_capacity(blocks.len());
            for b in blocks {
                if b.length as usize != b.data.len() {
                    return Err(UniffleError::InvalidRequest(format!(
                        "block {} says length {} but carries {} bytes",
                        b.block_id,
                        b.length,
                        b.data.len()
                    )));
                }
                out.push(Block {
                    meta: BlockMeta {
                        block_id: b.block_id,
                        map_id: b.task_attempt_id,
                        batch_id: None,
                        crc: b.crc,
                        uncompressed_len: b.uncompress_length,
                    },
                    data: b.data,
                });
            }
            let key = PartitionKey::new(stored(app), shuffle, partition);
            let bytes = out.iter().map(Block::len).sum();
            self.store
                .append(&key, out, Some(&mut ticket.reservation))
                .await?;
            traffic::pushed(Protocol::Uniffle, bytes);
        }
        request.ok();
        Ok(())
    }

    /// Records a map task's block ids. The blocks of the partitions it names
    /// are made durable and recorded with the ids first (the store's
    /// `commit_partitions`), so that what a reader is told exists survives a
    /// restart of this server; with `report_durability = background` the ids
    /// are recorded at once and that commit runs in the background.
    pub async fn report_shuffle_result(
        &self,
        app: &str,
        shuffle: i32,
        partitions: Vec<(i32, Vec<i64>)>,
    ) -> Result<()> {
        let state = self.shuffle(app, shuffle)?;
        let ids: Vec<i32> = partitions.iter().map(|(p, _)| *p).collect();
        let seq = self
            .report_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let notes = vec![
            (REGISTRATION_NOTE.to_string(), state.registration_note()),
            (
                format!("{REPORT_NOTE}{seq:020}"),
                super::apps::report_note(&partitions),
            ),
        ];
        let app = stored(app);
        if self.config.report_durability == ReportDurability::Background {
            for (p, ids) in partitions {
                state.report(p, &ids);
            }
            tokio::spawn(commit_behind_answer(
                self.store.clone(),
                app,
                shuffle,
                ids,
                notes,
            ));
            return Ok(());
        }
        self.store
            .commit_partitions(&app, shuffle, &ids, notes)
            .await?;
        for (p, ids) in partitions {
            state.report(p, &ids);
        }
        Ok(())
    }

    /// Reported block ids of the partitions, in Java's bitmap format. A shuffle
    /// this server never saw reports an empty set.
    pub fn shuffle_result(&self, app: &str, shuffle: i32, partitions: &[i32]) -> Result<Bytes> {
        let app_state = self.app(app)?;
        // An empty set for a dead shuffle would tell the reader to expect
        // nothing from this server.
        self.store.check_shuffle_alive(&stored(app), shuffle)?;
        let bitmap = match app_state.shuffles.get(&shuffle) {
            Some(s) => s.result(partitions),
            None => IdBitmap::new(),
        };
        Ok(Bytes::from(bitmap.to_java_bytes()))
    }

    pub fn commit(&self, app: &str, shuffle: i32) -> Result<i32> {
        Ok(self.shuffle(app, shuffle)?.commit())
    }

    /// Flushes every block of the shuffle and waits until it is durable.
    pub async fn finish_shuffle(&self, app: &str, shuffle: i32) -> Result<()> {
        self.shuffle(app, shuffle)?;
        self.store.flush_shuffle(&stored(app), shuffle).await?;
        Ok(())
    }

    // ---- reads ----------------------------------------------------------

    /// Blocks in memory after `last_block_id` (-1: from the start), only of the
    /// expected task attempts when a filter is given, until `max_bytes`.
    pub fn memory_data(
        &self,
        app: &str,
        shuffle: i32,
        partition: i32,
        last_block_id: i64,
        max_bytes: i64,
        expected_tasks: Option<&IdBitmap>,
    ) -> Result<MemoryData> {
        let mut request = Request::start(Protocol::Uniffle, "get_memory_data");
        self.app(app)?;
        let key = PartitionKey::new(stored(app), shuffle, partition);
        let after = (last_block_id != -1).then_some(last_block_id);
        let keep = |b: &Block| expected_tasks.is_none_or(|t| t.contains_i64(b.meta.map_id));
        let read = self
            .store
            .read_memory(&key, after, max_bytes.max(1) as u64, &keep)?;
        let mut data = BytesMut::with_capacity(read.bytes() as usize);
        let mut segments = Vec::with_capacity(read.blocks.len());
        for b in &read.blocks {
            segments.push(SegmentMeta {
                block_id: b.meta.block_id,
                offset: data.len() as i64,
                length: b.data.len() as i32,
                uncompress_length: b.meta.uncompressed_len,
                crc: b.meta.crc,
                task_attempt_id: b.meta.map_id,
            });
            data.extend_from_slice(&b.data);
        }
        traffic::fetched(Protocol::Uniffle, data.len() as u64);
        request.ok();
        Ok(MemoryData {
            segments,
            data: data.freeze(),
        })
    }

    pub async fn local_index(
        &self,
        app: &str,
        shuffle: i32,
        partition: i32,
    ) -> Result<PartitionIndex> {
        let mut request = Request::start(Protocol::Uniffle, "get_local_index");
        self.app(app)?;
        let index = self
            .store
            .read_index(&PartitionKey::new(stored(app), shuffle, partition))
            .await?;
        request.ok();
        Ok(index)
    }

    pub async fn local_data(
        &self,
        app: &str,
        shuffle: i32,
        partition: i32,
        offset: i64,
        length: i32,
    ) -> Result<Bytes> {
        let mut request = Request::start(Protocol::Uniffle, "get_local_data");
        self.app(app)?;
        if offset < 0 || length < 0 {
            return Err(UniffleError::InvalidRequest(format!(
                "offset {offset} length {length}"
            )));
        }
        let data = self
            .store
            .read_data(
                &PartitionKey::new(stored(app), shuffle, partition),
                offset as u64,
                length as u64,
            )
            .await?;
        traffic::fetched(Protocol::Uniffle, data.len() as u64);
        request.ok();
        Ok(data)
    }

    /// Parses an expected-task filter; empty bytes mean no filter.
    pub fn parse_filter(bytes: Option<&[u8]>) -> Result<Option<IdBitmap>> {
        match bytes {
            None | Some([]) => Ok(None),
            Some(b) => IdBitmap::from_java_bytes(b).map(Some).map_err(|e| {
                UniffleError::InvalidRequest(format!("expected task ids bitmap: {e}"))
            }),
        }
    }
}

impl AppListener for ShuffleServerCore {
    fn app_removed(&self, event: &AppRemoved) {
        let Some(app) = FrontEnd::Uniffle.own_id(&event.app) else {
            return;
        };
        tracing::debug!(
            app,
            reason = event.reason.as_str(),
            "uniffle: forgetting application"
        );
        self.forget_app(app);
    }
}
