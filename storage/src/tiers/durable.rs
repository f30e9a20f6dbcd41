//! The durable tiers: the local disks and the cold tier that flushes write
//! segments to. They own the file and object layout (`<app>/<shuffle>/…`),
//! the segment uids, the stored-bytes figures, and every read of persisted
//! data (through the index cache and the read budget).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::Semaphore;

use super::fair::{FairGate, Turn};
use super::waits::WaitKind;

use super::cold::ColdTier;
use super::disk::LocalDisk;
use crate::block::{IndexRecord, INDEX_RECORD_LEN};
use crate::config::StoreConfig;
use crate::counters::Counters;
use crate::error::{clone_error, Result, StorageError};
use crate::fault::DiskFaults;
use crate::id::{path_component, PartitionKey};
use crate::segment::{cold_objects, disk_files, Segment, SegmentFiles, SegmentLocation};
use crate::tiers::partition::Partition;

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

/// Picks the tokio runtime a disk's blocking I/O runs on, by its directory.
pub(crate) type IoPlacement<'a> = &'a (dyn Fn(&Path) -> Option<tokio::runtime::Handle> + Sync);

pub(crate) struct Durable {
    disks: Vec<Arc<LocalDisk>>,
    cold: Option<Arc<ColdTier>>,
    index_cache: moka::future::Cache<(u64, u64), Bytes>,
    /// Places for reads of persisted data, taken application by application
    /// when reads queue: a heavy reader's backlog cannot hold every place
    /// before a small reader gets one.
    read_places: Arc<FairGate>,
    /// Read budget in KiB units: bounds the memory that reads hold at once.
    read_budget: Arc<Semaphore>,
    read_budget_kib: u32,
    /// Reads holding part of the read budget, and reads waiting for it
    /// (Celeborn's allocated read buffers and its buffer dispatcher's
    /// pending requests).
    reads_holding: AtomicU64,
    reads_waiting: AtomicU64,
    next_segment: AtomicU64,
    /// The first segment uid of this open: files of older uids were made
    /// by an earlier process.
    uid_start: u64,
    io_timeout: std::time::Duration,
    counters: Arc<Counters>,
}

/// What one index cache entry costs beyond its bytes (moka's entry, its
/// key, its place in the eviction queues, the `Bytes`), counted in its
/// weight: a small partition's index is one 40-byte record, so a cache
/// weighing only the records held 64 MiB of them in several times that.
const INDEX_ENTRY_OVERHEAD: usize = 256;

impl Durable {
    /// Opens every configured disk and the cold tier. `health_changed` is
    /// notified when a disk's health changes.
    pub(crate) fn open(
        config: &StoreConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        io: IoPlacement<'_>,
        health_changed: Arc<tokio::sync::Notify>,
        counters: Arc<Counters>,
    ) -> Result<Durable> {
        let mut disks = Vec::new();
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
        // As many as the disks (and the cold tier, as one more disk) read
        // at once, so the gate only orders what would queue anyway.
        let tiers = config.disks.dirs.len() + usize::from(config.cold.is_some());
        let read_places = FairGate::new(tiers * config.disks.read_concurrency);
        let read_budget_kib =
            (config.memory.read_capacity.as_u64() / 1024).min(u32::MAX as u64) as u32;
        let read_budget = Arc::new(Semaphore::new(read_budget_kib as usize));
        let cold = config
            .cold
            .as_ref()
            .map(|c| ColdTier::open(c, read_budget.clone()))
            .transpose()?;
        let index_cache = moka::future::Cache::builder()
            .weigher(|_: &(u64, u64), v: &Bytes| {
                (v.len() + INDEX_ENTRY_OVERHEAD).min(u32::MAX as usize) as u32
            })
            .max_capacity(config.memory.index_cache.as_u64())
            .build();
        // Segment uids only need to be unique within this process's lifetime
        // and its files; start from the clock so a restart does not reuse them.
        let uid_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        Ok(Durable {
            disks,
            cold,
            index_cache,
            read_places,
            read_budget,
            read_budget_kib,
            reads_holding: AtomicU64::new(0),
            reads_waiting: AtomicU64::new(0),
            next_segment: AtomicU64::new(uid_start),
            uid_start,
            io_timeout: config.disks.io_timeout,
            counters,
        })
    }

    /// The read budget (`memory.read_capacity`) and the part of it reads
    /// hold now, in bytes.
    pub(crate) fn read_budget_bytes(&self) -> (u64, u64) {
        let total = self.read_budget_kib as u64;
        let free = (self.read_budget.available_permits() as u64).min(total);
        (total * 1024, (total - free) * 1024)
    }

    /// Reads waiting for a read place (`switchyard_read_queue`).
    pub(crate) fn read_queue(&self) -> usize {
        self.read_places.figures().1
    }

    /// Reads holding read budget, and reads waiting for it.
    pub(crate) fn reads(&self) -> (u64, u64) {
        (
            self.reads_holding.load(Ordering::Relaxed),
            self.reads_waiting.load(Ordering::Relaxed),
        )
    }

    /// True while some tier can take flushes.
    pub(crate) fn is_writable(&self) -> bool {
        self.disks.iter().any(|d| d.is_writable()) || self.cold.is_some()
    }

    pub(crate) fn disks(&self) -> &[Arc<LocalDisk>] {
        &self.disks
    }

    pub(crate) fn disk(&self, index: usize) -> &LocalDisk {
        &self.disks[index]
    }

    pub(crate) fn cold(&self) -> Option<&Arc<ColdTier>> {
        self.cold.as_ref()
    }

    pub(crate) fn cold_tier(&self) -> Result<&Arc<ColdTier>> {
        self.cold.as_ref().ok_or_else(no_cold_tier)
    }

    pub(crate) fn next_segment_uid(&self) -> u64 {
        self.next_segment.fetch_add(1, Ordering::Relaxed)
    }

    /// The first segment uid of this open (older ones are an earlier
    /// process's).
    pub(crate) fn first_uid(&self) -> u64 {
        self.uid_start
    }

    /// Each data dir and its disk's index (recovery finds recorded files
    /// by their dir).
    pub(crate) fn dir_indexes(&self) -> HashMap<&Path, usize> {
        self.disks
            .iter()
            .map(|d| (d.dir.as_path(), d.index))
            .collect()
    }

    /// The data dirs, in disk order.
    pub(crate) fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.disks.iter().map(|d| d.dir.as_path())
    }

    pub(crate) fn disk_dir(&self, disk: usize) -> &Path {
        &self.disks[disk].dir
    }

    /// The stem this store names a disk segment of `key` by:
    /// `<dir>/<app>/<shuffle>/<partition stem>.<uid>`.
    pub(crate) fn disk_stem(&self, disk: usize, key: &PartitionKey, uid: u64) -> PathBuf {
        self.disk_dir(disk)
            .join(shuffle_rel(&key.app, key.shuffle))
            .join(format!("{}.{uid}", key.file_stem()))
    }

    /// The stem this store names a cold segment of `key` by (None without
    /// a cold tier): `[<prefix>/]<app>/<shuffle>/<partition stem>.<uid>`.
    pub(crate) fn cold_stem(&self, key: &PartitionKey, uid: u64) -> Option<String> {
        let rel = shuffle_rel(&key.app, key.shuffle);
        let cold = self.cold.as_ref()?;
        Some(cold.path(&format!(
            "{}/{}.{uid}",
            rel.to_string_lossy(),
            key.file_stem()
        )))
    }

    /// The files or objects of `seg`, a segment of `key`'s partition.
    pub(crate) fn segment_files(&self, key: &PartitionKey, seg: &Segment) -> Result<SegmentFiles> {
        Ok(match &seg.location {
            SegmentLocation::Disk { disk, stem } => {
                let (data, index) = match stem {
                    Some(stem) => disk_files(stem),
                    None => disk_files(&self.disk_stem(*disk, key, seg.uid)),
                };
                SegmentFiles::Disk {
                    disk: *disk,
                    data,
                    index,
                }
            }
            SegmentLocation::Cold { stem } => {
                let (data, index) = match stem {
                    Some(stem) => cold_objects(stem),
                    None => {
                        let stem = self.cold_stem(key, seg.uid);
                        cold_objects(&stem.ok_or_else(no_cold_tier)?)
                    }
                };
                SegmentFiles::Cold { data, index }
            }
        })
    }

    /// Counts a segment found at recovery in its tier's stored bytes.
    pub(crate) fn count_recovered(&self, s: &Segment) {
        match s.disk() {
            Some(d) => self.disks[d]
                .stored_bytes
                .fetch_add(s.len(), Ordering::Relaxed),
            None => self
                .cold
                .as_ref()
                .map(|c| c.stored_bytes.fetch_add(s.len(), Ordering::Relaxed))
                .unwrap_or(0),
        };
    }

    /// Bytes stored on disks and in the cold tier, from their counters.
    pub(crate) fn stored_bytes(&self) -> (u64, u64) {
        let disk = self
            .disks
            .iter()
            .map(|d| d.stored_bytes.load(Ordering::Relaxed))
            .sum();
        let cold = self
            .cold
            .as_ref()
            .map(|c| c.stored_bytes.load(Ordering::Relaxed))
            .unwrap_or(0);
        (disk, cold)
    }

    /// Checks every disk's room and probes faulted ones, all at once: a hung
    /// one (each call bounded by io_timeout) must not delay the others.
    pub(crate) async fn check_disks(&self) {
        futures::future::join_all(self.disks.iter().map(|d| async move {
            d.check_capacity().await;
            d.probe_if_faulted().await;
        }))
        .await;
    }

    /// Files that stuck writes touched after their flushes gave up on
    /// them, on every disk, with the disk's directory.
    pub(crate) fn take_late_writes(&self) -> Vec<(&Path, PathBuf)> {
        self.disks
            .iter()
            .flat_map(|d| {
                d.take_late_writes()
                    .into_iter()
                    .map(|f| (d.dir.as_path(), f))
            })
            .collect()
    }

    // ---- reads ----------------------------------------------------------

    /// The persisted index of a partition (empty while all its data is in
    /// memory).
    pub(crate) async fn read_index(&self, p: &Partition) -> Result<PartitionIndex> {
        let segments = p.segments_snapshot();
        let mut parts = Vec::with_capacity(segments.len());
        let mut data_len = 0;
        for seg in &segments {
            let extent = seg.extent();
            if extent.records == 0 {
                continue;
            }
            let raw = self.segment_index(p.key(), seg, extent.records).await?;
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
    async fn segment_index(
        &self,
        key: &PartitionKey,
        seg: &Arc<Segment>,
        records: u64,
    ) -> Result<Bytes> {
        let len = records * INDEX_RECORD_LEN as u64;
        let load = async move {
            match self.segment_files(key, seg)? {
                SegmentFiles::Disk { disk, index, .. } => self.disks[disk]
                    .read(index.clone(), 0, len)
                    .await
                    .map_err(|e| StorageError::io(&index, e)),
                SegmentFiles::Cold { index, .. } => self.cold_tier()?.read(&index, 0, len).await,
            }
        };
        self.index_cache
            .try_get_with((seg.uid, records), load)
            .await
            .map_err(|e: Arc<StorageError>| clone_error(&e))
    }

    /// A read place for a read of `len` bytes of `p`, its wait counted for
    /// its application.
    async fn read_place(&self, p: &Partition, len: u64) -> Turn {
        if let Some(place) = self.read_places.try_enter() {
            return place;
        }
        let started = std::time::Instant::now();
        let place = self.read_places.enter(&p.key().app, len.max(1)).await;
        p.tally().waits().count(WaitKind::Read, started.elapsed());
        place
    }

    /// Bytes `[offset, offset + len)` of a partition's persisted data.
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
                key: p.key().clone(),
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
        let _place = self.read_place(p, len).await;
        // A read larger than the whole budget takes all of it, alone.
        let kib = ((len + cold_overhead).div_ceil(1024)).min(self.read_budget_kib as u64) as u32;
        let _budget = match self.read_budget.try_acquire_many(kib) {
            Ok(permit) => permit,
            Err(_) => {
                let _waiting = Held::count(&self.reads_waiting);
                self.read_budget
                    .acquire_many(kib)
                    .await
                    .map_err(|_| StorageError::ShuttingDown)?
            }
        };
        let _holding = Held::count(&self.reads_holding);
        let mut pieces = Vec::new();
        for seg in &segments {
            let seg_end = seg.logical_start + seg.len();
            if seg_end <= offset || seg.logical_start >= end {
                continue;
            }
            let from = offset.max(seg.logical_start) - seg.logical_start;
            let to = end.min(seg_end) - seg.logical_start;
            pieces.push(self.read_segment(p.key(), seg, from, to - from).await?);
        }
        p.tally().count_read(len);
        Ok(concat(pieces))
    }

    /// The `(offset, len)` ranges of a partition's persisted data, back to
    /// back (one chunk of a view).
    pub(crate) async fn read_ranges(&self, p: &Partition, ranges: &[(u64, u64)]) -> Result<Bytes> {
        let mut pieces = Vec::with_capacity(ranges.len());
        for &(offset, len) in ranges {
            pieces.push(self.read_range(p, offset, len).await?);
        }
        Ok(concat(pieces))
    }

    async fn read_segment(
        &self,
        key: &PartitionKey,
        seg: &Segment,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        self.counters.read(len);
        match self.segment_files(key, seg)? {
            SegmentFiles::Disk { disk, data, .. } => self.disks[disk]
                .read_data(data.clone(), offset, len, seg.direct)
                .await
                .map_err(|e| StorageError::io(&data, e)),
            SegmentFiles::Cold { data, .. } => {
                // A cold segment is written once: its length is its object's.
                self.cold_tier()?
                    .read_data(&data, seg.len(), offset, len)
                    .await
            }
        }
    }

    // ---- removal --------------------------------------------------------

    /// A removed partition's segment leaves its tier's figures; a cold one's
    /// objects are deleted (a disk one's files go with its directory).
    pub(crate) async fn forget_segment(&self, key: &PartitionKey, seg: &Segment) {
        let len = seg.len();
        match &seg.location {
            SegmentLocation::Disk { disk, .. } => {
                self.disks[*disk]
                    .stored_bytes
                    .fetch_sub(len, Ordering::Relaxed);
            }
            SegmentLocation::Cold { .. } => {
                if let (Some(cold), Ok(SegmentFiles::Cold { data, index })) =
                    (&self.cold, self.segment_files(key, seg))
                {
                    cold.stored_bytes.fetch_sub(len, Ordering::Relaxed);
                    for (path, len) in [(&data, len), (&index, 0)] {
                        if let Err(e) = cold.delete(path, len).await {
                            tracing::warn!(path, error = %e, "cold delete failed");
                        }
                    }
                }
            }
        }
    }

    /// Deletes a shuffle's directories and cold objects.
    pub(crate) async fn remove_shuffle_files(&self, app: &str, shuffle: i32) {
        let rel = shuffle_rel(app, shuffle);
        for d in &self.disks {
            self.remove_dir(d.dir.join(&rel)).await;
        }
        if let Some(cold) = &self.cold {
            if let Err(e) = cold.delete_prefix(&rel.to_string_lossy()).await {
                tracing::warn!(%app, shuffle, error = %e, "cold cleanup failed");
            }
        }
    }

    /// Deletes an application's directories and cold objects.
    pub(crate) async fn remove_app_files(&self, app: &str) {
        let component = path_component(app);
        for d in &self.disks {
            self.remove_dir(d.dir.join(&component)).await;
        }
        if let Some(cold) = &self.cold {
            if let Err(e) = cold.delete_prefix(&component).await {
                tracing::warn!(app, error = %e, "cold cleanup failed");
            }
        }
    }

    /// Deletes a directory tree on the blocking pool, never on a runtime
    /// thread (a large application has many files). Waits at most
    /// `disks.io_timeout`; a removal still running then goes on alone.
    /// Not a hang signal: a big tree can legitimately take that long.
    async fn remove_dir(&self, path: PathBuf) {
        let shown = path.display().to_string();
        let removal = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&path));
        match tokio::time::timeout(self.io_timeout, removal).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(Ok(Err(e))) => tracing::warn!(path = shown, error = %e, "cleanup failed"),
            Ok(Err(e)) => tracing::warn!(path = shown, error = %e, "cleanup task failed"),
            Err(_) => tracing::warn!(
                path = shown,
                timeout = ?self.io_timeout,
                "cleanup still running; not waiting for it"
            ),
        }
    }
}

/// Where a shuffle's files and objects live, relative to a data dir or the
/// cold tier's root.
fn no_cold_tier() -> StorageError {
    StorageError::Config("no cold tier configured".into())
}

pub(crate) fn shuffle_rel(app: &str, shuffle: i32) -> PathBuf {
    PathBuf::from(path_component(app)).join(shuffle.to_string())
}

fn concat(mut pieces: Vec<Bytes>) -> Bytes {
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

/// One count in a gauge's counter for as long as it lives.
struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    fn count(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Held(counter)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
