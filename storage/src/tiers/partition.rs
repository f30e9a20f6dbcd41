//! The state of one partition, and the tally of its application that its
//! hot paths count into.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::memory::{MemoryRead, PartitionBuffer};
use super::waits::Waits;
use crate::block::Block;
use crate::error::{Result, StorageError};
use crate::id::PartitionKey;
use crate::segment::Segment;

pub(crate) struct Partition {
    key: PartitionKey,
    pub(super) buffer: Mutex<PartitionBuffer>,
    /// Its segments in stream order (a boxed slice: see `write_to`).
    pub(super) segments: RwLock<Box<[Arc<Segment>]>>,
    /// Held while a flush writes: a partition's flushes are serialised, so its
    /// segments grow in the order its blocks arrived.
    pub(super) persist: tokio::sync::Mutex<()>,
    pub(super) flush_queued: AtomicBool,
    sealed: AtomicBool,
    removed: AtomicBool,
    /// Data bytes ever appended (for huge-partition placement and figures).
    received_bytes: AtomicU64,
    received_blocks: AtomicU64,
    /// Its application's tally, counted on the hot paths without a lookup.
    tally: Arc<AppTally>,
}

/// What an application wrote and had read back, in data bytes.
#[derive(Debug, Default)]
pub(crate) struct AppTally {
    written: AtomicU64,
    read: AtomicU64,
    /// Data bytes appended and not yet removed (the byte quota's measure).
    held: AtomicU64,
    /// Partitions created and not yet removed (the partition quota's).
    partitions: AtomicU64,
    /// Data bytes in memory now (staged or being flushed), and the most it
    /// ever held: counted where blocks enter and leave memory, so the peak
    /// costs two atomics per append and per flush, never a walk.
    memory: AtomicU64,
    peak_memory: AtomicU64,
    /// Data bytes in disk and cold segments, counted where a flush or a
    /// recovery commits them and where their partitions are removed, so
    /// that a status request reads three counters per application instead
    /// of walking its partitions.
    disk: AtomicU64,
    cold: AtomicU64,
    /// Partitions with at least one segment written (the rest live in
    /// memory alone): counted where the first segment is written or
    /// recovered and where the partition is removed.
    durable_partitions: AtomicU64,
    /// Segments (a data file and its index each) on disks and in the cold
    /// tier: Celeborn's per-user file counts.
    disk_segments: AtomicU64,
    cold_segments: AtomicU64,
    /// How long it waited for memory, flush slots and read places.
    waits: Waits,
}

impl AppTally {
    pub(crate) fn waits(&self) -> &Waits {
        &self.waits
    }

    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub(crate) fn read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn partitions(&self) -> u64 {
        self.partitions.load(Ordering::Relaxed)
    }

    /// A partition was created.
    pub(crate) fn count_partition(&self) {
        self.partitions.fetch_add(1, Ordering::Relaxed);
    }

    /// A partition recorded before a restart came back holding `bytes`.
    pub(crate) fn count_recovered(&self, bytes: u64) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
        self.written.fetch_add(bytes, Ordering::Relaxed);
        self.partitions.fetch_add(1, Ordering::Relaxed);
    }

    fn count_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Ordering::Relaxed);
        self.held.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn count_read(&self, bytes: u64) {
        self.read.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The most data bytes it held in memory at once.
    pub(crate) fn peak_memory(&self) -> u64 {
        self.peak_memory.load(Ordering::Relaxed)
    }

    fn count_memory_in(&self, bytes: u64) {
        let now = self.memory.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak_memory.fetch_max(now, Ordering::Relaxed);
    }

    /// Blocks of `bytes` left memory (flushed, or dropped with their shuffle).
    pub(crate) fn count_memory_out(&self, bytes: u64) {
        let _ = self
            .memory
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
    }

    /// A partition got its first segment (a flush or a recovery).
    pub(crate) fn count_durable_partition(&self) {
        self.durable_partitions.fetch_add(1, Ordering::Relaxed);
    }

    /// A segment was written (or recovered) on a disk or in the cold tier.
    pub(crate) fn count_segment(&self, cold: bool) {
        let c = if cold {
            &self.cold_segments
        } else {
            &self.disk_segments
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Segments held: (disk, cold).
    pub(crate) fn segments(&self) -> (u64, u64) {
        (
            self.disk_segments.load(Ordering::Relaxed),
            self.cold_segments.load(Ordering::Relaxed),
        )
    }

    /// Partitions held with at least one segment.
    pub(crate) fn durable_partitions(&self) -> u64 {
        self.durable_partitions.load(Ordering::Relaxed)
    }

    /// A flush or a recovery made `bytes` durable in a segment.
    pub(crate) fn count_persisted(&self, bytes: u64, cold: bool) {
        let tier = if cold { &self.cold } else { &self.disk };
        tier.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes held per tier: (memory, disk, cold), from the counters.
    pub(crate) fn tier_bytes(&self) -> (u64, u64, u64) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (load(&self.memory), load(&self.disk), load(&self.cold))
    }

    /// Removed partitions' bytes and count leave the quotas' measures, and
    /// their segments' bytes the tiers' (`persisted`: disk, cold), those
    /// with segments (`durable` of them) the durable count, and their
    /// segments (disk, cold) the segment counts.
    pub(crate) fn release(
        &self,
        bytes: u64,
        partitions: u64,
        persisted: (u64, u64),
        durable: u64,
        segments: (u64, u64),
    ) {
        let sub = |counter: &AtomicU64, n: u64| {
            let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
        };
        sub(&self.held, bytes);
        sub(&self.partitions, partitions);
        sub(&self.disk, persisted.0);
        sub(&self.cold, persisted.1);
        sub(&self.durable_partitions, durable);
        sub(&self.disk_segments, segments.0);
        sub(&self.cold_segments, segments.1);
    }
}

impl Partition {
    pub(crate) fn new(key: PartitionKey, tally: Arc<AppTally>) -> Self {
        Partition {
            key,
            tally,
            buffer: Mutex::new(PartitionBuffer::default()),
            segments: RwLock::new(Box::default()),
            persist: tokio::sync::Mutex::new(()),
            flush_queued: AtomicBool::new(false),
            sealed: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            received_bytes: AtomicU64::new(0),
            received_blocks: AtomicU64::new(0),
        }
    }

    /// A partition recorded before a restart, with its recorded segments.
    pub(crate) fn recovered(
        key: PartitionKey,
        tally: Arc<AppTally>,
        sealed: bool,
        segments: Vec<Arc<Segment>>,
    ) -> Self {
        let mut p = Partition::new(key, tally);
        p.sealed.store(sealed, Ordering::Release);
        p.received_bytes
            .store(segments.iter().map(|s| s.len()).sum(), Ordering::Relaxed);
        p.received_blocks.store(
            segments.iter().map(|s| s.extent().records).sum(),
            Ordering::Relaxed,
        );
        for s in &segments {
            p.tally.count_persisted(s.len(), s.disk().is_none());
        }
        *p.segments.get_mut() = segments.into_boxed_slice();
        p
    }

    pub(crate) fn key(&self) -> &PartitionKey {
        &self.key
    }

    /// Its application's tally.
    pub(crate) fn tally(&self) -> &AppTally {
        &self.tally
    }

    /// Data bytes ever appended (recovered: the recorded bytes).
    pub(crate) fn received_bytes(&self) -> u64 {
        self.received_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn received_blocks(&self) -> u64 {
        self.received_blocks.load(Ordering::Relaxed)
    }

    pub(crate) fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::Acquire)
    }

    /// Bytes in the logical persisted stream.
    pub(crate) fn persisted_len(&self) -> u64 {
        let segs = self.segments.read();
        segs.last().map(|s| s.logical_start + s.len()).unwrap_or(0)
    }

    /// How many segments hold its flushed bytes.
    pub(crate) fn segment_count(&self) -> usize {
        self.segments.read().len()
    }

    pub(crate) fn segments_snapshot(&self) -> Vec<Arc<Segment>> {
        self.segments.read().to_vec()
    }

    /// Stages appended blocks in memory unless the partition was removed or
    /// sealed (checked under the buffer lock: removal and sealing take it
    /// too). Returns the charge now staged.
    pub(crate) fn stage(&self, blocks: Vec<Block>) -> Result<u64> {
        let mut buf = self.buffer.lock();
        if self.is_removed() {
            return Err(StorageError::ShuffleRemoved {
                app: self.key.app.to_string(),
                shuffle: self.key.shuffle,
            });
        }
        if self.is_sealed() {
            return Err(StorageError::Sealed(self.key.clone()));
        }
        let bytes = blocks.iter().map(Block::len).sum();
        buf.push(blocks);
        self.tally.count_memory_in(bytes);
        Ok(buf.staging_charge())
    }

    /// Blocks still in memory (see [`crate::Store::read_memory`]), counted
    /// as read by its application.
    pub(crate) fn read_memory(
        &self,
        after: Option<i64>,
        max_bytes: u64,
        keep: &dyn Fn(&Block) -> bool,
    ) -> MemoryRead {
        let read = self.buffer.lock().read(after, max_bytes, keep);
        self.tally.count_read(read.bytes());
        read
    }

    /// Counts an append of `count` blocks, `bytes` of data.
    pub(crate) fn count_received(&self, bytes: u64, count: u64) {
        self.received_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.tally.count_written(bytes);
        self.received_blocks.fetch_add(count, Ordering::Relaxed);
    }

    /// Refuses appends from now on (a seal), under the buffer lock so that
    /// no append is half done.
    /// True for the seal that sealed it (false when already sealed).
    pub(crate) fn seal(&self) -> bool {
        let _buf = self.buffer.lock();
        !self.sealed.swap(true, Ordering::AcqRel)
    }

    /// Whether a segment was ever written (or recovered) for it.
    pub(crate) fn has_segments(&self) -> bool {
        !self.segments.read().is_empty()
    }

    /// Its segments: (on disks, in the cold tier).
    pub(crate) fn segment_counts(&self) -> (u64, u64) {
        let segments = self.segments.read();
        let cold = segments.iter().filter(|s| s.disk().is_none()).count() as u64;
        (segments.len() as u64 - cold, cold)
    }

    /// Marks it removed (under its buffer lock, which appends and seals
    /// take too) and empties its staged blocks; returns their charge.
    pub(crate) fn mark_removed(&self) -> u64 {
        let mut buf = self.buffer.lock();
        self.removed.store(true, Ordering::Release);
        let before = buf.memory_bytes();
        let charge = buf.clear_staging();
        self.tally
            .count_memory_out(before.saturating_sub(buf.memory_bytes()));
        charge
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Bytes per tier: (memory, disk, cold).
    pub(crate) fn tier_bytes(&self) -> (u64, u64, u64) {
        let memory = self.buffer.lock().memory_bytes();
        let (disk, cold) = self.persisted_bytes();
        (memory, disk, cold)
    }

    /// Bytes in its segments: (disk, cold).
    pub(crate) fn persisted_bytes(&self) -> (u64, u64) {
        let (mut disk, mut cold) = (0, 0);
        for s in self.segments.read().iter() {
            match s.disk() {
                Some(_) => disk += s.len(),
                None => cold += s.len(),
            }
        }
        (disk, cold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node holds a million of these (issue 43): each `Arc<Partition>`
    /// allocation must stay within jemalloc's 160-byte size class (the next
    /// is 192).
    #[test]
    fn a_partition_fits_the_160_byte_class() {
        let arc = std::mem::size_of::<Partition>() + 2 * std::mem::size_of::<usize>();
        assert!(arc <= 160, "Arc<Partition> is {arc} bytes");
    }
}
