//! The local-disk tier: one [`LocalDisk`] per data directory.
//!
//! Each disk has its own write and read concurrency limits, optional byte-rate
//! throttles, and a health state. A disk whose free space drops under
//! `min_free` (or that holds `capacity` bytes), or that fails an I/O, takes no
//! new writes until it recovers; what it already holds stays readable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::block::Block;
use crate::config::DiskConfig;
use crate::fault::DiskFaults;
use crate::throttle::ByteThrottle;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskHealth {
    Healthy,
    /// Less than `min_free` available, or `capacity` reached.
    Full,
    /// An I/O error; rests until a probe succeeds.
    Faulted,
}

impl DiskHealth {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => DiskHealth::Healthy,
            1 => DiskHealth::Full,
            _ => DiskHealth::Faulted,
        }
    }
    fn as_u8(self) -> u8 {
        match self {
            DiskHealth::Healthy => 0,
            DiskHealth::Full => 1,
            DiskHealth::Faulted => 2,
        }
    }
}

/// Figures of one disk for status pages and placement.
#[derive(Clone, Debug, Serialize)]
pub struct DiskStatus {
    pub dir: PathBuf,
    pub health: DiskHealth,
    /// Fraction of the filesystem in use at the last check, as df's "Use%":
    /// used / (used + available).
    pub used_ratio: f64,
    /// Bytes the filesystem had available at the last check.
    pub available_bytes: u64,
    /// Bytes of shuffle data this disk holds.
    pub stored_bytes: u64,
    pub written_bytes: u64,
    pub read_bytes: u64,
    pub write_errors: u64,
    /// Time flushes and reads spent waiting on this disk's rate limits.
    pub throttled_ms: u64,
}

pub(crate) struct LocalDisk {
    pub(crate) index: usize,
    pub(crate) dir: PathBuf,
    health: AtomicU8,
    faulted_at: Mutex<Option<Instant>>,
    used_ratio_millis: AtomicU64,
    available_bytes: AtomicU64,
    pub(crate) stored_bytes: AtomicU64,
    written_bytes: AtomicU64,
    read_bytes: AtomicU64,
    write_errors: AtomicU64,
    throttled_us: AtomicU64,
    write_slots: Semaphore,
    read_slots: Semaphore,
    write_throttle: Option<ByteThrottle>,
    read_throttle: Option<ByteThrottle>,
    faults: Option<Arc<dyn DiskFaults>>,
    config: DiskConfig,
    /// The store's "some tier's health changed" signal: flushes with nowhere
    /// to write wait on it.
    health_changed: Arc<tokio::sync::Notify>,
}

impl LocalDisk {
    pub(crate) fn open(
        index: usize,
        dir: PathBuf,
        config: &DiskConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        health_changed: Arc<tokio::sync::Notify>,
    ) -> io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let disk = LocalDisk {
            index,
            dir,
            health: AtomicU8::new(DiskHealth::Healthy.as_u8()),
            faulted_at: Mutex::new(None),
            used_ratio_millis: AtomicU64::new(0),
            available_bytes: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            written_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            throttled_us: AtomicU64::new(0),
            write_slots: Semaphore::new(config.write_concurrency),
            read_slots: Semaphore::new(config.read_concurrency),
            write_throttle: config
                .write_rate_limit
                .map(|r| ByteThrottle::new(r.as_u64())),
            read_throttle: config
                .read_rate_limit
                .map(|r| ByteThrottle::new(r.as_u64())),
            faults,
            config: config.clone(),
            health_changed,
        };
        disk.check_capacity();
        Ok(disk)
    }

    pub(crate) fn health(&self) -> DiskHealth {
        DiskHealth::from_u8(self.health.load(Ordering::Acquire))
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.health() == DiskHealth::Healthy
    }

    fn set_health(&self, h: DiskHealth) {
        let prev = DiskHealth::from_u8(self.health.swap(h.as_u8(), Ordering::AcqRel));
        if prev != h {
            self.health_changed.notify_waiters();
            match h {
                DiskHealth::Healthy => {
                    tracing::info!(dir = %self.dir.display(), from = ?prev, "disk takes writes again")
                }
                _ => {
                    tracing::warn!(dir = %self.dir.display(), state = ?h, "disk takes no new writes")
                }
            }
        }
    }

    pub(crate) fn record_error(&self, err: &io::Error) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        tracing::error!(dir = %self.dir.display(), error = %err, "disk i/o error");
        *self.faulted_at.lock() = Some(Instant::now());
        self.set_health(DiskHealth::Faulted);
        metrics::counter!("switchyard_disk_errors_total", "dir" => self.dir.display().to_string())
            .increment(1);
    }

    pub(crate) fn status(&self) -> DiskStatus {
        DiskStatus {
            dir: self.dir.clone(),
            health: self.health(),
            used_ratio: self.used_ratio_millis.load(Ordering::Relaxed) as f64 / 1e6,
            available_bytes: self.available_bytes.load(Ordering::Relaxed),
            stored_bytes: self.stored_bytes.load(Ordering::Relaxed),
            written_bytes: self.written_bytes.load(Ordering::Relaxed),
            read_bytes: self.read_bytes.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            throttled_ms: self.throttled_us.load(Ordering::Relaxed) / 1000,
        }
    }

    /// Updates the capacity state from the filesystem's own figures and the
    /// bytes this disk holds. Cheap (one statvfs), so flushes call it too.
    pub(crate) fn check_capacity(&self) {
        let (used, avail) = match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(s) => {
                let frag = s.fragment_size();
                let used = s.blocks().saturating_sub(s.blocks_free()) * frag;
                (used, s.blocks_available() * frag)
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "statvfs failed");
                return;
            }
        };
        let ratio = if used + avail > 0 {
            used as f64 / (used + avail) as f64
        } else {
            0.0
        };
        self.used_ratio_millis
            .store((ratio * 1e6) as u64, Ordering::Relaxed);
        self.available_bytes.store(avail, Ordering::Relaxed);
        let stored = self.stored_bytes.load(Ordering::Relaxed);
        let min_free = self.config.min_free.as_u64();
        let margin = self.config.resume_margin.as_u64();
        let capacity = self.config.capacity.map(|c| c.as_u64());
        match self.health() {
            DiskHealth::Healthy if avail < min_free || capacity.is_some_and(|c| stored >= c) => {
                tracing::warn!(
                    dir = %self.dir.display(),
                    available = %bytesize::ByteSize::b(avail),
                    min_free = %self.config.min_free,
                    stored = %bytesize::ByteSize::b(stored),
                    capacity = ?self.config.capacity,
                    "disk is full for shuffle data"
                );
                self.set_health(DiskHealth::Full)
            }
            DiskHealth::Full
                if avail >= min_free.saturating_add(margin)
                    && capacity.is_none_or(|c| stored.saturating_add(margin) <= c) =>
            {
                self.set_health(DiskHealth::Healthy)
            }
            _ => {}
        }
    }

    /// A faulted disk that has rested long enough is probed with a real write.
    pub(crate) async fn probe_if_faulted(&self) {
        if self.health() != DiskHealth::Faulted {
            return;
        }
        let rested = self
            .faulted_at
            .lock()
            .map(|t| t.elapsed() >= self.config.error_cooldown)
            .unwrap_or(true);
        if !rested {
            return;
        }
        let path = self.dir.join(".switchyard-probe");
        let faults = self.faults.clone();
        let dir = self.dir.clone();
        let result = tokio::task::spawn_blocking(move || {
            if let Some(e) = faults.as_ref().and_then(|f| f.before_write(&dir, 4096)) {
                return Err(e);
            }
            fs::write(&path, [0u8; 4096])?;
            let back = fs::read(&path)?;
            fs::remove_file(&path)?;
            if back.len() != 4096 {
                return Err(io::Error::other("probe read back a different length"));
            }
            Ok(())
        })
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)));
        match result {
            Ok(()) => {
                self.set_health(DiskHealth::Healthy);
                self.check_capacity();
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "disk probe failed");
                *self.faulted_at.lock() = Some(Instant::now());
            }
        }
    }

    /// Appends blocks to a segment's data file at `data_offset` and their index
    /// records at `index_offset`. Both offsets are the segment's committed
    /// lengths, so a retried or failed write never leaves a gap that is read.
    pub(crate) async fn write(
        &self,
        data_path: PathBuf,
        index_path: PathBuf,
        data_offset: u64,
        blocks: Arc<[Block]>,
        index_offset: u64,
        index: Bytes,
    ) -> io::Result<Duration> {
        let bytes: u64 = blocks.iter().map(Block::len).sum();
        let _slot = self
            .write_slots
            .acquire()
            .await
            .map_err(|_| io::Error::other("disk closed"))?;
        let waited = match &self.write_throttle {
            Some(t) => t.acquire(bytes).await,
            None => Duration::ZERO,
        };
        if !waited.is_zero() {
            self.throttled_us
                .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
            metrics::histogram!("switchyard_throttle_wait_seconds", "dir" => self.dir.display().to_string(), "op" => "write")
                .record(waited.as_secs_f64());
        }
        let fault = self
            .faults
            .as_ref()
            .and_then(|f| f.before_write(&self.dir, bytes));
        let sync = self.config.sync;
        tokio::task::spawn_blocking(move || {
            write_segment(
                &data_path,
                &index_path,
                data_offset,
                &blocks,
                index_offset,
                &index,
                sync,
                fault,
            )
        })
        .await
        .map_err(io::Error::other)??;
        self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(waited)
    }

    /// Reads exactly `len` bytes at `offset` of a data or index file.
    pub(crate) async fn read(&self, path: PathBuf, offset: u64, len: u64) -> io::Result<Bytes> {
        let _slot = self
            .read_slots
            .acquire()
            .await
            .map_err(|_| io::Error::other("disk closed"))?;
        if let Some(t) = &self.read_throttle {
            let waited = t.acquire(len).await;
            self.throttled_us
                .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
            metrics::histogram!("switchyard_throttle_wait_seconds", "dir" => self.dir.display().to_string(), "op" => "read")
                .record(waited.as_secs_f64());
        }
        let out = tokio::task::spawn_blocking(move || -> io::Result<Bytes> {
            let file = File::open(&path)?;
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset)?;
            Ok(Bytes::from(buf))
        })
        .await
        .map_err(io::Error::other)??;
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(out)
    }
}

#[allow(clippy::too_many_arguments)]
fn write_segment(
    data_path: &Path,
    index_path: &Path,
    data_offset: u64,
    blocks: &[Block],
    index_offset: u64,
    index: &[u8],
    sync: bool,
    fault: Option<io::Error>,
) -> io::Result<()> {
    if let Some(parent) = data_path.parent() {
        fs::create_dir_all(parent)?;
    }
    let data = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(data_path)?;
    let slices: Vec<&[u8]> = blocks.iter().map(|b| &b.data[..]).collect();
    if let Some(err) = fault {
        // Write about half, then fail, as a dying or filling device would.
        let half = slices.len() / 2;
        pwrite_all(&data, &slices[..half], data_offset)?;
        return Err(err);
    }
    pwrite_all(&data, &slices, data_offset)?;
    let idx = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(index_path)?;
    // Data goes first: an index record never points past written data.
    if sync {
        data.sync_data()?;
    }
    idx.write_all_at(index, index_offset)?;
    if sync {
        idx.sync_data()?;
    }
    Ok(())
}

/// Writes every slice back to back at `offset` with as few syscalls as the
/// kernel allows (pwritev), without copying the blocks into one buffer.
fn pwrite_all(file: &File, slices: &[&[u8]], mut offset: u64) -> io::Result<()> {
    const MAX_IOV: usize = 512;
    let mut pending: Vec<&[u8]> = slices.iter().copied().filter(|s| !s.is_empty()).collect();
    let mut start = 0;
    while start < pending.len() {
        let end = (start + MAX_IOV).min(pending.len());
        let iov: Vec<IoSlice<'_>> = pending[start..end]
            .iter()
            .map(|s| IoSlice::new(s))
            .collect();
        let written = match nix::sys::uio::pwritev(file, &iov, offset as i64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ))
            }
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        };
        offset += written as u64;
        let mut left = written;
        while left > 0 {
            let first = pending[start];
            if left >= first.len() {
                left -= first.len();
                start += 1;
            } else {
                pending[start] = &first[left..];
                left = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pwrite_all_writes_slices_contiguously() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let many: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize])
            .collect();
        let slices: Vec<&[u8]> = many.iter().map(|v| &v[..]).collect();
        pwrite_all(&file, &slices, 3).unwrap();
        let expected: Vec<u8> = many.concat();
        let got = fs::read(&path).unwrap();
        assert_eq!(&got[3..], &expected[..]);
    }
}
