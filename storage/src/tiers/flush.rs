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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use crate::block::{Block, IndexRecord, INDEX_RECORD_LEN};
use crate::error::{Result, StorageError};
use crate::partition::Partition;
use crate::segment::{Segment, SegmentLocation};
use crate::store::{shuffle_rel, Store};

/// Where one flush goes.
enum Target {
    /// Append to the partition's open segment on this disk.
    Append(Arc<Segment>),
    /// Start a new segment on this disk.
    NewDisk(usize),
    Cold,
}

impl Store {
    pub(crate) fn over_high_watermark(&self) -> bool {
        let m = &self.config.memory;
        self.budget.unflushed() as f64 > m.high_watermark * self.budget.capacity() as f64
    }

    /// Queues a flush of the partition's staged blocks unless one is queued.
    pub(crate) fn schedule_flush(self: &Arc<Self>, p: &Arc<Partition>) {
        if p.flush_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        let p = p.clone();
        self.tasks.spawn(async move {
            if let Err(e) = store.flush_partition(&p, true).await {
                tracing::debug!(partition = %p.key, error = %e, "flush ended early");
            }
        });
    }

    /// Flushes until the partition holds nothing in memory (or is removed).
    /// Unbounded: it ends only when the blocks are durable, the partition is
    /// removed or the store stops; callers that answer a client bound their
    /// wait with [`Store::flush_fully_until`].
    pub(crate) async fn flush_fully(&self, p: &Arc<Partition>) -> Result<()> {
        loop {
            if p.buffer.lock().is_empty() || p.is_removed() {
                return Ok(());
            }
            self.flush_partition(p, false).await?;
        }
    }

    /// Starts [`Store::flush_fully`] as a task of the store, so that a caller
    /// who stops waiting for it (see [`Store::flush_fully_until`]) cuts no
    /// write off halfway: the flush goes on, and a later commit finds its
    /// blocks durable.
    pub(crate) fn flush_in_background(
        self: &Arc<Self>,
        p: &Arc<Partition>,
    ) -> tokio::task::JoinHandle<Result<()>> {
        let store = self.clone();
        let p = p.clone();
        self.tasks.spawn(async move { store.flush_fully(&p).await })
    }

    /// Waits for a flush started by [`Store::flush_in_background`] until
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
                self.counters.flush_timeouts.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("switchyard_flush_timeouts_total").increment(1);
                Err(StorageError::FlushTimeout {
                    what: what(),
                    timeout: self.config.commit_timeout,
                })
            }
        }
    }

    /// One flush slot, or ShuttingDown.
    async fn flush_slot(&self) -> Result<OwnedSemaphorePermit> {
        tokio::select! {
            slot = self.flush_slots.clone().acquire_owned() => {
                slot.map_err(|_| StorageError::ShuttingDown)
            }
            _ = self.cancel.cancelled() => Err(StorageError::ShuttingDown),
        }
    }

    /// Writes the partition's in-flight batches (left by failed attempts),
    /// then its staged blocks, in order. A queued flush (`queued`) waits for
    /// a flush slot before it cuts its batch, so blocks that arrive while it
    /// waits join it.
    pub(crate) async fn flush_partition(&self, p: &Arc<Partition>, queued: bool) -> Result<()> {
        let _persist = p.persist.lock().await;
        let mut slot = None;
        if queued {
            let acquired = self.flush_slot().await;
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
        slot: &mut Option<OwnedSemaphorePermit>,
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
                    app: p.key.app.to_string(),
                    shuffle: p.key.shuffle,
                });
            }
            let permit = match slot.take() {
                Some(permit) => permit,
                None => self.flush_slot().await?,
            };
            let Some(target) = self.choose_target(p) else {
                drop(permit);
                attempt += 1;
                if attempt == 1 || attempt.is_multiple_of(50) {
                    tracing::error!(partition = %p.key, bytes, "no healthy disk or cold tier; blocks wait in memory");
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
            let disk = match &target {
                Target::Append(seg) => seg.disk(),
                Target::NewDisk(d) => Some(*d),
                Target::Cold => None,
            };
            let started = Instant::now();
            let written = self.write_to(p, target, blocks, bytes).await;
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
                        self.disks[d].check_capacity().await;
                    }
                    metrics::counter!("switchyard_spill_total", "tier" => tier).increment(1);
                    metrics::counter!("switchyard_spill_bytes_total", "tier" => tier)
                        .increment(bytes);
                    metrics::histogram!("switchyard_spill_duration_seconds", "tier" => tier)
                        .record(started.elapsed().as_secs_f64());
                    self.counters.spills.fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .spilled_bytes
                        .fetch_add(bytes, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => {
                    attempt += 1;
                    self.counters.spill_failures.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("switchyard_spill_failures_total", "tier" => tier)
                        .increment(1);
                    tracing::warn!(partition = %p.key, tier, attempt, error = %e, "flush failed; blocks stay in memory and are retried");
                    if tier == "cold" {
                        // Huge partitions turn to disks for a while.
                        if let Some(cold) = &self.cold {
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
        if let Some(cold) = &self.cold {
            // A huge partition goes cold unless a cold write failed lately:
            // then to a healthy disk, as any partition (the cold tier stays
            // the last resort below).
            if p.persisted_len() >= cold.huge_partition_threshold && !cold.is_failing() {
                return Some(Target::Cold);
            }
        }
        if let Some(last) = p.segments.read().last() {
            if let Some(d) = last.disk() {
                if last.is_open() && self.disks[d].is_writable() {
                    return Some(Target::Append(last.clone()));
                }
            }
        }
        // Rendezvous hashing: a partition's preferred disk stays the same while
        // the set of healthy disks does, and spreads partitions evenly.
        let best = self
            .disks
            .iter()
            .filter(|d| d.is_writable())
            .max_by_key(|d| placement_hash(&p.key, d.index));
        match best {
            Some(d) => Some(Target::NewDisk(d.index)),
            None if self.cold.is_some() => Some(Target::Cold),
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
                let uid = self.next_segment_uid();
                let dir = self.disks[d]
                    .dir
                    .join(shuffle_rel(&p.key.app, p.key.shuffle));
                let stem = format!("{}.{uid}", p.key.file_stem());
                let location = SegmentLocation::Disk {
                    disk: d,
                    data: dir.join(format!("{stem}.data")),
                    index: dir.join(format!("{stem}.index")),
                };
                let direct = self.disks[d].direct && bytes >= crate::direct::MIN_FLUSH;
                (
                    Arc::new(Segment::new(uid, location, p.persisted_len()).with_direct(direct)),
                    true,
                )
            }
            Target::Cold => {
                let cold = self.cold_tier()?;
                let uid = self.next_segment_uid();
                let rel = shuffle_rel(&p.key.app, p.key.shuffle);
                let stem = format!("{}/{}.{uid}", rel.to_string_lossy(), p.key.file_stem());
                let location = SegmentLocation::Cold {
                    data: cold.path(&format!("{stem}.data")),
                    index: cold.path(&format!("{stem}.index")),
                };
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
        match &segment.location {
            SegmentLocation::Disk {
                disk,
                data,
                index: index_path,
            } => {
                let d = &self.disks[*disk];
                match d
                    .write(
                        data.clone(),
                        index_path.clone(),
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
                        return Err(StorageError::io(data, e));
                    }
                }
                d.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            SegmentLocation::Cold {
                data,
                index: index_path,
            } => {
                let cold = self.cold_tier()?;
                cold.write_segment(data, index_path, blocks.clone(), index)
                    .await?;
                cold.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
        }
        segment.commit(bytes, blocks.len() as u64);
        if is_new {
            let mut segs = p.segments.write();
            if let Some(prev) = segs.last() {
                prev.close();
            }
            segs.push(segment);
        }
        Ok(())
    }

    /// Picks partitions, largest staged first, until unflushed memory would
    /// fall to the low watermark, and queues their flushes. After a refused
    /// charge it also frees at least the refused amount, watermark or not.
    pub(crate) fn spill_if_needed(self: &Arc<Self>) {
        let refused = self.pressure.swap(0, Ordering::AcqRel);
        if !self.over_high_watermark() && refused == 0 {
            return;
        }
        let target = (self.config.memory.low_watermark * self.budget.capacity() as f64) as u64;
        let unflushed = self.budget.unflushed();
        let mut excess = unflushed.saturating_sub(target).max(refused.min(unflushed));
        if excess == 0 {
            return;
        }
        let mut candidates: Vec<(u64, Arc<Partition>)> = self
            .all_partitions()
            .into_iter()
            .map(|p| {
                let size = p.buffer.lock().staging_charge();
                (size, p)
            })
            .filter(|(size, _)| *size > 0)
            .collect();
        candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
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
    use crate::disk::DiskHealth;
    use crate::fault::DiskFaults;
    use crate::id::PartitionKey;

    struct Failing(AtomicBool);

    impl DiskFaults for Failing {
        fn before_write(&self, _dir: &Path, _bytes: u64) -> Option<io::Error> {
            self.0
                .load(Ordering::SeqCst)
                .then(|| io::Error::other("injected"))
        }
    }

    fn block(id: i64) -> Block {
        Block {
            meta: BlockMeta {
                block_id: id,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: 100,
            },
            data: bytes::Bytes::from(vec![id as u8; 100]),
        }
    }

    /// A flush with nowhere to write gives its slot back while it waits, so
    /// the store's slots stay free for flushes that can write.
    #[tokio::test]
    async fn waiting_flushes_hold_no_flush_slot() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreConfig::default();
        c.disks.dirs = vec![dir.path().join("disk0")];
        c.disks.write_concurrency = 1;
        c.disks.min_free = ByteSize::b(0);
        c.disks.resume_margin = ByteSize::b(0);
        c.disks.error_cooldown = Duration::from_millis(50);
        c.disks.health_check_interval = Duration::from_millis(20);
        let faults = Arc::new(Failing(AtomicBool::new(true)));
        let store = Store::open_with_faults(c, Some(faults.clone()))
            .await
            .unwrap();
        assert_eq!(store.flush_slots.available_permits(), 1);
        store.register_app("a");
        let mut parts = Vec::new();
        for p in 0..3 {
            let key = PartitionKey::new("a", 0, p);
            store
                .append(&key, vec![block(p as i64)], None)
                .await
                .unwrap();
            let part = store.partition(&key).unwrap().unwrap();
            store.schedule_flush(&part);
            parts.push(part);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while store.disks[0].health() != DiskHealth::Faulted
            || store.counters.spill_failures.load(Ordering::Relaxed) == 0
        {
            assert!(tokio::time::Instant::now() < deadline, "no failed flush");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Every flush now waits for a healthy disk (the probes fail too).
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            store.budget.flushing(),
            3 * block(0).charge(),
            "all three batches wait"
        );
        assert_eq!(
            store.flush_slots.available_permits(),
            1,
            "no waiting flush holds the slot"
        );
        faults.0.store(false, Ordering::SeqCst);
        while store.budget.used() > 0 {
            assert!(tokio::time::Instant::now() < deadline, "never flushed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for p in &parts {
            assert_eq!(p.persisted_len(), 100);
        }
    }
}
