//! Spilling and flushing: moving blocks from memory to a disk or the cold tier.
//!
//! Triggers: a partition buffering more than the single-buffer threshold
//! spills at once; when unflushed memory passes the high watermark the largest
//! partitions spill until it would fall to the low watermark.
//!
//! A flush never drops data. Its blocks stay in memory, readable, until the
//! write is durable; a failed write marks the disk faulted and the same blocks
//! are written again to another disk or the cold tier. With nowhere to write,
//! they wait in memory, and the full budget pushes back on writers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
            let _slot = store.flush_slots.clone().acquire_owned().await;
            p.flush_queued.store(false, Ordering::Release);
            if let Err(e) = store.flush_partition(&p).await {
                tracing::debug!(partition = %p.key, error = %e, "flush ended early");
            }
        });
    }

    /// Flushes until the partition holds nothing in memory (or is removed).
    pub(crate) async fn flush_fully(&self, p: &Arc<Partition>) -> Result<()> {
        loop {
            if p.buffer.lock().is_empty() || p.is_removed() {
                return Ok(());
            }
            self.flush_partition(p).await?;
        }
    }

    /// Writes the partition's in-flight batches (left by failed attempts),
    /// then its staged blocks, in order.
    pub(crate) async fn flush_partition(&self, p: &Arc<Partition>) -> Result<()> {
        let _persist = p.persist.lock().await;
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
            let result = self.write_batch(p, &blocks, bytes).await;
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
    /// A failed disk write faults that disk, so the next attempt goes to
    /// another target at once. With no target at all the flush waits for a
    /// disk's health to change (or its partition to be removed), woken by
    /// that change rather than by polling. Only cold-tier failures, which
    /// have no health state to wait on, back off (briefly) before retrying.
    async fn write_batch(&self, p: &Partition, blocks: &Arc<[Block]>, bytes: u64) -> Result<()> {
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
            let Some(target) = self.choose_target(p) else {
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
            let started = Instant::now();
            match self.write_to(p, target, blocks, bytes).await {
                Ok(()) => {
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
            let size = p.persisted_len();
            if size >= cold.huge_partition_threshold {
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
                (
                    Arc::new(Segment::new(uid, location, p.persisted_len())),
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
                if let Err(e) = d
                    .write(
                        data.clone(),
                        index_path.clone(),
                        extent.len,
                        blocks.clone(),
                        extent.records * INDEX_RECORD_LEN as u64,
                        index,
                    )
                    .await
                {
                    d.record_error(&e);
                    // Bytes past the committed length may be garbage now.
                    segment.close();
                    return Err(StorageError::io(data, e));
                }
                d.stored_bytes.fetch_add(bytes, Ordering::Relaxed);
                // A fast writer must not run far past min_free or capacity
                // between the periodic checks.
                d.check_capacity();
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
