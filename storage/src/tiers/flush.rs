//! Spilling and flushing: moving blocks from memory to a disk or the cold tier.
//!
//! Triggers: a partition buffering more than the single-buffer threshold
//! spills at once; when unflushed memory passes the high watermark the largest
//! partitions spill until it would fall to the low watermark.
//!
//! A flush never drops data. Its blocks stay in memory, readable, until the
//! write is durable; a failed write marks the disk faulted (a timed-out one
//! hung) and the same blocks are written again to another disk or the cold
//! tier. With nowhere to write, they wait in memory, and the full budget
//! pushes back on writers.
//!
//! Faults do not spread: a flush holds one of the store's flush slots only
//! while it writes, never while it waits for a healthy target or backs off,
//! so a flush that cannot write never keeps other partitions from writing.
//! Lock order: a partition's `persist` lock, then a slot; a slot holder
//! waits only on I/O, which `disks.io_timeout` and `cold.io_timeout` bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::MemoryBudget;
use super::durable::Durable;
use super::fair::{FairGate, Turn};
use super::waits::WaitKind;
use crate::block::{Block, IndexRecord, INDEX_RECORD_LEN};
use crate::config::StoreConfig;
use crate::counters::Counters;
use crate::error::{Result, StorageError};
use crate::segment::{Segment, SegmentFiles, SegmentLocation};
use crate::tiers::partition::Partition;

/// Time a flush waited for a flush slot (0 when one was free).
pub(crate) const SLOT_WAIT_SECONDS: &str = "switchyard_flush_slot_wait_seconds";
/// Flushes of at most this many bytes take their places in the small-flush
/// lane (see [`Flusher`]): what a small job's partition holds at its
/// commit, a few hundred KiB to a few MiB, which writes in well under a
/// tenth of a second even at a throttled disk's share.
pub(crate) const SMALL_FLUSH: u64 = 2 * 1024 * 1024;

/// Partitions whose data went to a tier for the first time, by tier.
pub(crate) const EVICTED_PARTITIONS: &str = "switchyard_partitions_evicted_total";

/// The labels of a spill's metrics: its tier, and a cold spill's service.
pub(crate) fn spill_labels(tier: &'static str, service: &'static str) -> Vec<metrics::Label> {
    let mut labels = vec![metrics::Label::new("tier", tier)];
    if !service.is_empty() {
        labels.push(metrics::Label::new("service", service));
    }
    labels
}

/// Where one flush goes.
enum Target {
    /// Append to the partition's open segment on this disk.
    Append(Arc<Segment>),
    /// Start a new segment on this disk.
    NewDisk(usize),
    Cold,
}

/// Moves blocks from memory to the durable tiers: queued and waited-for
/// flushes, and spills when memory runs high. Owns the flush slots and the
/// wake-ups of flushes that wait for a tier.
pub(crate) struct Flusher {
    budget: Arc<MemoryBudget>,
    durable: Arc<Durable>,
    high_watermark: f64,
    low_watermark: f64,
    commit_timeout: Duration,
    /// Taken application by application when flushes queue, so that a big
    /// application's backlog does not delay a small one's flush.
    slots: Arc<FairGate>,
    /// As many places again for flushes of at most [`SMALL_FLUSH`] bytes
    /// whose size is known before they queue (those a commit or a report
    /// waits for): a small flush then never waits for a big one's write to
    /// end, which at a throttled disk's rate takes a quarter second for
    /// 16 MiB. The disk's throttle serves small writes first as well.
    small_slots: Arc<FairGate>,
    spill_wakeup: Notify,
    /// Flushes with nowhere to write wait on it; notified when a disk's
    /// health changes and when partitions are removed.
    retarget: Arc<Notify>,
    /// Largest charge refused since the last spill check (0: none).
    pressure: AtomicU64,
    /// Flushes waiting for a flush slot now (`switchyard_flush_queue`): how
    /// far the writes lag behind what memory asks of them.
    queued: AtomicU64,
    counters: Arc<Counters>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl Flusher {
    /// `retarget` is the notify the disks signal health changes on;
    /// `tasks` and `cancel` are the store's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        config: &StoreConfig,
        budget: Arc<MemoryBudget>,
        durable: Arc<Durable>,
        retarget: Arc<Notify>,
        counters: Arc<Counters>,
        cancel: CancellationToken,
        tasks: TaskTracker,
    ) -> Flusher {
        let slots = config.disks.dirs.len() * config.disks.write_concurrency
            + config
                .cold
                .as_ref()
                .map(|c| c.write_concurrency)
                .unwrap_or(0);
        Flusher {
            budget,
            durable,
            high_watermark: config.memory.high_watermark,
            low_watermark: config.memory.low_watermark,
            commit_timeout: config.commit_timeout,
            slots: FairGate::new(slots),
            small_slots: FairGate::new(slots),
            spill_wakeup: Notify::new(),
            retarget,
            pressure: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            counters,
            cancel,
            tasks,
        }
    }

    pub(crate) fn over_high_watermark(&self) -> bool {
        self.budget.unflushed() as f64 > self.high_watermark * self.budget.capacity() as f64
    }

    /// Asks the spill loop to look now.
    pub(crate) fn wake_spill(&self) {
        self.spill_wakeup.notify_one();
    }

    /// Resolves when a spill check is asked for.
    pub(crate) fn spill_requested(&self) -> tokio::sync::futures::Notified<'_> {
        self.spill_wakeup.notified()
    }

    /// A charge of `bytes` did not fit: make room even below the high
    /// watermark, or a writer whose request is larger than the room between
    /// the watermark and the capacity would wait forever.
    pub(crate) fn refused(&self, bytes: u64) {
        self.counters.no_buffer();
        self.pressure.fetch_max(bytes, Ordering::AcqRel);
        self.spill_wakeup.notify_one();
    }

    /// Drops removed partitions' memory, stops their flushes, and forgets
    /// their segments in the tiers' figures (the caller deletes the files).
    pub(crate) async fn discard(&self, partitions: &[Arc<Partition>]) {
        for p in partitions {
            self.budget.release(p.mark_removed());
        }
        // A flush waiting for a healthy tier looks again and sees `removed`.
        self.retarget.notify_waiters();
        for p in partitions {
            // Wait for a running flush; it sees `removed` and stops.
            let _guard = p.persist.lock().await;
            let segments: Box<[Arc<Segment>]> = std::mem::take(&mut *p.segments.write());
            for seg in segments {
                self.durable.forget_segment(p.key(), &seg).await;
            }
        }
    }

    /// Queues a flush of the partition's staged blocks unless one is queued.
    pub(crate) fn schedule_flush(self: &Arc<Self>, p: &Arc<Partition>) {
        if p.flush_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let flusher = self.clone();
        let p = p.clone();
        self.tasks.spawn(async move {
            if let Err(e) = flusher.flush_partition(&p, true).await {
                tracing::debug!(partition = %p.key(), error = %e, "flush ended early");
            }
        });
    }

    /// Flushes until the partition holds nothing in memory (or is removed).
    /// Unbounded: it ends only when the blocks are durable, the partition is
    /// removed or the store stops; callers that answer a client bound their
    /// wait with [`Flusher::flush_fully_until`].
    pub(crate) async fn flush_fully(&self, p: &Arc<Partition>) -> Result<()> {
        loop {
            if p.buffer.lock().is_empty() || p.is_removed() {
                return Ok(());
            }
            self.flush_partition(p, false).await?;
        }
    }

    /// Starts [`Flusher::flush_fully`] as a task of the store, so that a caller
    /// who stops waiting for it (see [`Flusher::flush_fully_until`]) cuts no
    /// write off halfway: the flush goes on, and a later commit finds its
    /// blocks durable.
    pub(crate) fn flush_in_background(
        self: &Arc<Self>,
        p: &Arc<Partition>,
    ) -> tokio::task::JoinHandle<Result<()>> {
        let flusher = self.clone();
        let p = p.clone();
        self.tasks
            .spawn(async move { flusher.flush_fully(&p).await })
    }

    /// Waits for a flush started by [`Flusher::flush_in_background`] until
    /// `deadline`, then fails with [`StorageError::FlushTimeout`] (`what`
    /// names it) while the flush goes on.
    pub(crate) async fn flush_fully_until(
        &self,
        flush: tokio::task::JoinHandle<Result<()>>,
        deadline: tokio::time::Instant,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        match tokio::time::timeout_at(deadline, flush).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => Err(StorageError::io(what(), std::io::Error::other(join))),
            Err(_) => {
                self.counters.flush_timed_out();
                metrics::counter!("switchyard_flush_timeouts_total").increment(1);
                Err(StorageError::FlushTimeout {
                    what: what(),
                    timeout: self.commit_timeout,
                })
            }
        }
    }

    /// Flushes waiting for a flush slot now.
    pub(crate) fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// One flush slot for a flush of `p` of `bytes` (None: not known yet),
    /// or ShuttingDown: in the small-flush lane when `bytes` is known and
    /// at most [`SMALL_FLUSH`]. The wait is counted in the queue gauge while
    /// it lasts and timed once it ends, for the node and for `p`'s
    /// application (a slot is every write's one shared resource, as a
    /// Celeborn flusher's buffers are).
    async fn flush_slot(&self, p: &Partition, bytes: Option<u64>) -> Result<Turn> {
        let gate = match bytes {
            Some(b) if b <= SMALL_FLUSH => &self.small_slots,
            _ => &self.slots,
        };
        if let Some(slot) = gate.try_enter() {
            metrics::histogram!(SLOT_WAIT_SECONDS).record(0.0);
            return Ok(slot);
        }
        // Turns are shared by bytes: what this flush writes is charged once
        // written (`write_batch`), since a queued flush cuts its batch only
        // once it has its slot.
        let cost = 1;
        let started = Instant::now();
        self.queued.fetch_add(1, Ordering::Relaxed);
        let slot = tokio::select! {
            slot = gate.enter(&p.key().app, cost) => Ok(slot),
            _ = self.cancel.cancelled() => Err(StorageError::ShuttingDown),
        };
        self.queued.fetch_sub(1, Ordering::Relaxed);
        metrics::histogram!(SLOT_WAIT_SECONDS).record(started.elapsed().as_secs_f64());
        p.tally().waits().count(WaitKind::Flush, started.elapsed());
        slot
    }

    /// Writes the partition's in-flight batches (left by failed attempts),
    /// then its staged blocks, in order. A queued flush (`queued`) waits for
    /// a flush slot before it cuts its batch, so blocks that arrive while it
    /// waits join it.
    pub(crate) async fn flush_partition(&self, p: &Arc<Partition>, queued: bool) -> Result<()> {
        let _persist = p.persist.lock().await;
        let mut slot = None;
        if queued {
            let acquired = self.flush_slot(p, None).await;
            p.flush_queued.store(false, Ordering::Release);
            slot = Some(acquired?);
        }
        let mut started_new = false;
        loop {
            let next = {
                let mut buf = p.buffer.lock();
                match buf.oldest_in_flight() {
                    Some(batch) => Some(batch),
                    None if !started_new => {
                        started_new = true;
                        let batch = buf.start_flush();
                        if let Some((_, _, charge, _)) = &batch {
                            self.budget.start_flush(*charge);
                        }
                        batch
                    }
                    None => None,
                }
            };
            let Some((id, blocks, charge, bytes)) = next else {
                return Ok(());
            };
            let result = self.write_batch(p, &blocks, bytes, &mut slot).await;
            // Whether written or abandoned with its removed shuffle, the batch
            // leaves memory now, and only now.
            let finished = p.buffer.lock().finish_flush(id);
            debug_assert_eq!(finished, Some(charge));
            p.tally().count_memory_out(bytes);
            self.budget.end_flush(charge);
            result?;
        }
    }

    /// Writes one batch somewhere durable, retrying elsewhere until it succeeds.
    /// Fails only when the partition was removed or the store stops.
    ///
    /// A failed disk write faults that disk (a timed-out one: hung), so the
    /// next attempt goes to another target at once. With no target at all
    /// the flush waits for a disk's health to change (or its partition to be
    /// removed), woken by that change rather than by polling. Only cold-tier
    /// failures back off (briefly) before retrying; they also turn huge
    /// partitions to disks for `cold.error_cooldown`.
    ///
    /// Each attempt holds a flush slot (the caller's `slot` first) only while
    /// it writes.
    async fn write_batch(
        &self,
        p: &Partition,
        blocks: &Arc<[Block]>,
        bytes: u64,
        slot: &mut Option<Turn>,
    ) -> Result<()> {
        let mut attempt: u32 = 0;
        loop {
            // Armed before looking, so a change between the look and the
            // wait is not missed.
            let retarget = self.retarget.notified();
            tokio::pin!(retarget);
            retarget.as_mut().enable();
            if p.is_removed() {
                return Err(StorageError::ShuffleRemoved {
                    app: p.key().app.to_string(),
                    shuffle: p.key().shuffle,
                });
            }
            let permit = match slot.take() {
                Some(permit) => permit,
                None => self.flush_slot(p, Some(bytes)).await?,
            };
            let Some(target) = self.choose_target(p) else {
                drop(permit);
                attempt += 1;
                if attempt == 1 || attempt.is_multiple_of(50) {
                    tracing::error!(partition = %p.key(), bytes, "no healthy disk or cold tier; blocks wait in memory");
                }
                tokio::select! {
                    _ = &mut retarget => continue,
                    _ = self.cancel.cancelled() => return Err(StorageError::ShuttingDown),
                }
            };
            let tier = match target {
                Target::Cold => "cold",
                _ => "disk",
            };
            // Cold spills also name their service (fs, s3, hdfs): the
            // upstream dashboards chart S3 and HDFS flushes apart.
            let service = match target {
                Target::Cold => self.durable.cold().map_or("", |c| c.service()),
                _ => "",
            };
            let labels = spill_labels(tier, service);
            let disk = match &target {
                Target::Append(seg) => seg.disk(),
                Target::NewDisk(d) => Some(*d),
                Target::Cold => None,
            };
            let started = Instant::now();
            let written = self.write_to(p, target, blocks, bytes).await;
            permit.charge(&p.key().app, bytes);
            drop(permit);
            match written {
                Ok(()) => {
                    if let Some(d) = disk {
                        // A fast writer must not run far past min_free or
                        // capacity between the periodic checks. After the
                        // slot is given back: a statvfs on a hung mount
                        // delays only this flush's return, by at most
                        // io_timeout, and later ones skip it while it is
                        // stuck.
                        self.durable.disk(d).check_capacity().await;
                    }
                    metrics::counter!("switchyard_spill_total", labels.clone()).increment(1);
                    metrics::counter!("switchyard_spill_bytes_total", labels.clone())
                        .increment(bytes);
                    metrics::histogram!("switchyard_spill_duration_seconds", labels.clone())
                        .record(started.elapsed().as_secs_f64());
                    self.counters.spilled(bytes);
                    return Ok(());
                }
                Err(e) => {
                    attempt += 1;
                    self.counters.spill_failed();
                    metrics::counter!("switchyard_spill_failures_total", labels.clone())
                        .increment(1);
                    tracing::warn!(partition = %p.key(), tier, attempt, error = %e, "flush failed; blocks stay in memory and are retried");
                    if tier == "cold" {
                        // Huge partitions turn to disks for a while.
                        if let Some(cold) = self.durable.cold() {
                            cold.record_write_failure();
                        }
                        // Short and bounded: the partition (and removal of
                        // its shuffle) waits for this flush.
                        let pause = Duration::from_millis(20 * u64::from(attempt.min(10)));
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {}
                            _ = &mut retarget => {}
                            _ = self.cancel.cancelled() => return Err(StorageError::ShuttingDown),
                        }
                    }
                }
            }
        }
    }

    fn choose_target(&self, p: &Partition) -> Option<Target> {
        if let Some(cold) = self.durable.cold() {
            // A huge partition goes cold unless a cold write failed lately:
            // then to a healthy disk, as any partition (the cold tier stays
            // the last resort below).
            if p.persisted_len() >= cold.huge_partition_threshold && !cold.is_failing() {
                return Some(Target::Cold);
            }
        }
        if let Some(last) = p.segments.read().last() {
            if let Some(d) = last.disk() {
                if last.is_open() && self.durable.disk(d).is_writable() {
                    return Some(Target::Append(last.clone()));
                }
            }
        }
        // Rendezvous hashing: a partition's preferred disk stays the same while
        // the set of healthy disks does, and spreads partitions evenly.
        let best = self
            .durable
            .disks()
            .iter()
            .filter(|d| d.is_writable())
            .max_by_key(|d| placement_hash(p.key(), d.index));
        match best {
            Some(d) => Some(Target::NewDisk(d.index)),
            None if self.durable.cold().is_some() => Some(Target::Cold),
            None => None,
        }
    }

    async fn write_to(
        &self,
        p: &Partition,
        target: Target,
        blocks: &Arc<[Block]>,
        bytes: u64,
    ) -> Result<()> {
        let (segment, is_new) = match target {
            Target::Append(seg) => (seg, false),
            Target::NewDisk(d) => {
                let uid = self.durable.next_segment_uid();
                let location = SegmentLocation::new_disk(d);
                let direct = self.durable.disk(d).direct && bytes >= super::disk::direct::MIN_FLUSH;
                (
                    Arc::new(Segment::new(uid, location, p.persisted_len()).with_direct(direct)),
                    true,
                )
            }
            Target::Cold => {
                self.durable.cold_tier()?;
                let uid = self.durable.next_segment_uid();
                let location = SegmentLocation::new_cold();
                (
                    Arc::new(Segment::new(uid, location, p.persisted_len())),
                    true,
                )
            }
        };
        let extent = segment.extent();
        let mut index = bytes::BytesMut::with_capacity(blocks.len() * INDEX_RECORD_LEN);
        let mut offset = extent.len;
        for b in blocks.iter() {
            IndexRecord::for_block(offset, b).encode(&mut index);
            offset += b.len();
        }
        let index = index.freeze();
        match self.durable.segment_files(p.key(), &segment)? {
            SegmentFiles::Disk {
                disk,
                data,
                index: index_path,
            } => {
                let d = self.durable.disk(disk);
                match d
                    .write(
                        data.clone(),
                        index_path,
                        extent.len,
                        blocks.clone(),
                        extent.records * INDEX_RECORD_LEN as u64,
                        index,
                        segment.direct.then(|| segment.tail()),
                    )
                    .await
                {
                    Ok((_, tail)) => segment.set_tail(tail),
                    Err(e) => {
                        d.record_error(&e);
                        // Bytes past the committed length may be garbage now.
                        segment.close();
                        return Err(StorageError::io(&data, e));
                    }
                }
                d.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            SegmentFiles::Cold {
                data,
                index: index_path,
            } => {
                let cold = self.durable.cold_tier()?;
                cold.write_segment(&data, &index_path, blocks.clone(), index)
                    .await?;
                cold.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        segment.commit(bytes, blocks.len() as u64);
        // A partition removed meanwhile has left its tally already.
        if !p.is_removed() {
            p.tally().count_persisted(bytes, segment.disk().is_none());
        }
        if is_new {
            let cold = segment.disk().is_none();
            let mut segs = p.segments.write();
            // A partition removed meanwhile has left its tally already.
            if !p.is_removed() {
                p.tally().count_segment(cold);
                if segs.is_empty() {
                    // It no longer lives in memory alone.
                    p.tally().count_durable_partition();
                }
                if !segs.iter().any(|s| s.disk().is_none() == cold) {
                    // Its data's first move to this tier (Celeborn's
                    // eviction of a memory file to a disk or a DFS): a
                    // partition that turns huge counts under disk, then
                    // under cold.
                    let tier = if cold { "cold" } else { "disk" };
                    metrics::counter!(EVICTED_PARTITIONS, "tier" => tier).increment(1);
                }
            }
            if let Some(prev) = segs.last() {
                prev.close();
            }
            // A boxed slice, not a Vec: most partitions keep one segment,
            // and the Vec's capacity word is 8 bytes of every partition.
            let mut grown = std::mem::take(&mut *segs).into_vec();
            grown.push(segment);
            *segs = grown.into_boxed_slice();
        }
        Ok(())
    }

    /// Picks partitions, those `first` picks (of applications over their
    /// fair share) and then the rest, largest staged first, until unflushed
    /// memory would fall to the low watermark, and queues their flushes.
    /// After a refused charge it also frees at least the refused amount,
    /// watermark or not.
    pub(crate) fn spill_if_needed(
        self: &Arc<Self>,
        partitions: impl FnOnce() -> Vec<Arc<Partition>>,
        first: impl Fn(&Partition) -> bool,
    ) {
        let refused = self.pressure.swap(0, Ordering::AcqRel);
        if !self.over_high_watermark() && refused == 0 {
            return;
        }
        let target = (self.low_watermark * self.budget.capacity() as f64) as u64;
        let unflushed = self.budget.unflushed();
        let mut excess = unflushed.saturating_sub(target).max(refused.min(unflushed));
        if excess == 0 {
            return;
        }
        let mut candidates: Vec<(u64, Arc<Partition>)> = partitions()
            .into_iter()
            .map(|p| {
                let size = p.buffer.lock().staging_charge();
                (size, p)
            })
            .filter(|(size, _)| *size > 0)
            .collect();
        // Partitions `first` picks (of applications over their fair share),
        // then the rest, each largest first.
        candidates.sort_by_cached_key(|(size, p)| std::cmp::Reverse((first(p), *size)));
        for (size, p) in candidates {
            if excess == 0 {
                break;
            }
            self.schedule_flush(&p);
            excess = excess.saturating_sub(size);
        }
    }
}

fn placement_hash(key: &crate::id::PartitionKey, disk: usize) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&key.app, key.shuffle, key.partition, disk).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::sync::atomic::AtomicBool;

    use bytesize::ByteSize;

    use super::*;
    use crate::block::BlockMeta;
    use crate::config::StoreConfig;
    use crate::fault::DiskFaults;
    use crate::id::PartitionKey;
    use crate::store::Store;
    use crate::tiers::disk::DiskHealth;

    struct Failing(AtomicBool);

    impl DiskFaults for Failing {
        fn before_write(&self, _dir: &Path, _bytes: u64) -> Option<io::Error> {
            self.0
                .load(Ordering::SeqCst)
                .then(|| io::Error::other("injected"))
        }
    }

    fn block(id: i64) -> Block {
        sized_block(id, 100)
    }

    fn sized_block(id: i64, len: usize) -> Block {
        Block {
            meta: BlockMeta {
                block_id: id,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: len as i32,
            },
            data: bytes::Bytes::from(vec![id as u8; len]),
        }
    }

    /// A store on one disk under `dir` with one flush slot, and no free
    /// space kept.
    fn one_slot_disk(dir: &Path) -> StoreConfig {
        let mut c = StoreConfig::default();
        c.disks.dirs = vec![dir.join("disk0")];
        c.disks.write_concurrency = 1;
        c.disks.min_free = ByteSize::b(0);
        c.disks.resume_margin = ByteSize::b(0);
        c
    }

    /// A commit's small flush takes a place in the small-flush lane: it is
    /// durable while a big flush holds the disk's one flush slot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_flush_does_not_wait_for_a_big_ones_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = one_slot_disk(dir.path());
        // A second's burst, then the big flush's last 2 MiB take 2 s.
        c.disks.write_rate_limit = Some(ByteSize::mib(1));
        let store = Store::open(c).await.unwrap();
        store.register_app("big");
        store.register_app("small");
        let big = PartitionKey::new("big", 0, 0);
        let large: Vec<Block> = (0..3).map(|i| sized_block(i, 1024 * 1024)).collect();
        store.append(&big, large, None).await.unwrap();
        let big_part = store.apps().partition(&big).unwrap().unwrap();
        store.flusher().schedule_flush(&big_part);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while store.budget().flushing() == 0 {
            assert!(tokio::time::Instant::now() < deadline, "no big flush");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let small = PartitionKey::new("small", 0, 0);
        store.append(&small, vec![block(7)], None).await.unwrap();
        let stats = store.seal(&small).await.unwrap();
        assert_eq!(stats.disk_bytes, 100, "the small partition is on disk");
        assert_eq!(
            big_part.persisted_len(),
            0,
            "the small flush waited for the big one's write"
        );
        store.seal(&big).await.unwrap();
        assert_eq!(big_part.persisted_len(), 3 * 1024 * 1024);
    }

    /// A flush with nowhere to write gives its slot back while it waits, so
    /// the store's slots stay free for flushes that can write.
    #[tokio::test]
    async fn waiting_flushes_hold_no_flush_slot() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = one_slot_disk(dir.path());
        c.disks.error_cooldown = Duration::from_millis(50);
        c.disks.health_check_interval = Duration::from_millis(20);
        let faults = Arc::new(Failing(AtomicBool::new(true)));
        let store = Store::open_with_faults(c, Some(faults.clone()))
            .await
            .unwrap();
        let flusher = store.flusher();
        assert_eq!(flusher.slots.figures(), (1, 0));
        store.register_app("a");
        let mut parts = Vec::new();
        for p in 0..3 {
            let key = PartitionKey::new("a", 0, p);
            store
                .append(&key, vec![block(p as i64)], None)
                .await
                .unwrap();
            let part = store.apps().partition(&key).unwrap().unwrap();
            flusher.schedule_flush(&part);
            parts.push(part);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while store.status().disks[0].health != DiskHealth::Faulted
            || store.status().operations.spill_failures == 0
        {
            assert!(tokio::time::Instant::now() < deadline, "no failed flush");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every flush now waits for a healthy disk (the probes fail too);
        // on a slow machine the last may cut its batch a while later.
        while store.budget().flushing() < 3 * block(0).charge() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a batch never waited"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            store.budget().flushing(),
            3 * block(0).charge(),
            "all three batches wait"
        );
        assert_eq!(
            flusher.slots.figures(),
            (1, 0),
            "no waiting flush holds the slot"
        );
        faults.0.store(false, Ordering::SeqCst);
        while store.budget().used() > 0 {
            assert!(tokio::time::Instant::now() < deadline, "never flushed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for p in &parts {
            assert_eq!(p.persisted_len(), 100);
        }
    }
}
