//! The local-disk tier: one [`LocalDisk`] per data directory.
//!
//! Each disk has its own write and read concurrency limits, optional byte-rate
//! throttles, and a health state. A disk whose free space drops under
//! `min_free` (or that holds `capacity` bytes), or that fails an I/O, takes no
//! new writes until it recovers; what it already holds stays readable.
//!
//! Every filesystem call runs on tokio's blocking pool, never on a runtime
//! thread, and is waited for at most `io_timeout`. A call that outlives it
//! marks the disk hung: its flush gives up on it and goes elsewhere, while
//! the call itself, which no one can cancel (a thread in uninterruptible
//! sleep), is left to return on its own. A hung disk takes no writes and no
//! reads, so hung threads do not pile up, until every stuck call returned;
//! then it is faulted and a probe decides, as after an error.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Semaphore;

use crate::block::Block;
use crate::config::DiskConfig;
use crate::fault::{DiskFaults, DiskOp};
use crate::throttle::ByteThrottle;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskHealth {
    Healthy,
    /// Less than `min_free` available, or `capacity` reached.
    Full,
    /// An I/O error; rests until a probe succeeds.
    Faulted,
    /// A filesystem call did not return within `io_timeout`; no writes and
    /// no reads until every stuck call has returned, then faulted.
    Hung,
}

impl DiskHealth {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => DiskHealth::Healthy,
            1 => DiskHealth::Full,
            3 => DiskHealth::Hung,
            _ => DiskHealth::Faulted,
        }
    }
    fn as_u8(self) -> u8 {
        match self {
            DiskHealth::Healthy => 0,
            DiskHealth::Full => 1,
            DiskHealth::Faulted => 2,
            DiskHealth::Hung => 3,
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
    /// Filesystem calls that did not return within `io_timeout`.
    pub io_timeouts: u64,
    /// Of those, calls still stuck now (their threads have not returned).
    pub stuck_calls: u64,
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
    io_timeouts: AtomicU64,
    /// Blocking calls that outlived `io_timeout` and have not returned yet.
    stuck: Arc<AtomicU64>,
    /// Set while a statvfs runs (until its thread returns, even after a
    /// timeout), so that a hung mount costs one thread, not one per check.
    checking: Arc<AtomicBool>,
    throttled_us: AtomicU64,
    write_slots: Semaphore,
    read_slots: Semaphore,
    write_throttle: Option<ByteThrottle>,
    read_throttle: Option<ByteThrottle>,
    faults: Option<Arc<dyn DiskFaults>>,
    config: DiskConfig,
    /// Data files written and read with O_DIRECT (`disks.direct_io`, where
    /// the filesystem takes it).
    pub(crate) direct: bool,
    /// The runtime whose blocking pool runs this disk's calls (its NUMA
    /// node's); None: the current runtime's.
    io: Option<tokio::runtime::Handle>,
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
        io: Option<tokio::runtime::Handle>,
    ) -> io::Result<Self> {
        fs::create_dir_all(&dir)?;
        let direct = match config.direct_io {
            crate::config::DirectIo::Off => false,
            wanted => {
                let works = crate::direct::supported(&dir);
                if !works && wanted == crate::config::DirectIo::On {
                    tracing::warn!(dir = %dir.display(), "storage.disks.direct_io = on, but this filesystem takes no O_DIRECT: buffered I/O");
                }
                works
            }
        };
        tracing::info!(dir = %dir.display(), direct_io = direct, "disk opened");
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
            io_timeouts: AtomicU64::new(0),
            stuck: Arc::new(AtomicU64::new(0)),
            checking: Arc::new(AtomicBool::new(false)),
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
            direct,
            io,
            health_changed,
        };
        // At startup, before any flush: calling statvfs directly is fine.
        match statvfs_figures(&disk.dir) {
            Ok((used, avail)) => disk.apply_capacity(used, avail),
            Err(e) => tracing::warn!(dir = %disk.dir.display(), error = %e, "statvfs failed"),
        }
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
        // A hung disk stays hung (its timed-out call is reported here too):
        // only the stuck calls' return may end that state.
        if self.health() != DiskHealth::Hung {
            self.set_health(DiskHealth::Faulted);
        }
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
            io_timeouts: self.io_timeouts.load(Ordering::Relaxed),
            stuck_calls: self.stuck.load(Ordering::Acquire),
            throttled_ms: self.throttled_us.load(Ordering::Relaxed) / 1000,
        }
    }

    /// Updates the capacity state from the filesystem's own figures and the
    /// bytes this disk holds: one statvfs, off the runtime and bounded by
    /// `io_timeout` (a statvfs on a hung mount marks the disk hung). Skipped
    /// while an earlier statvfs has not returned.
    pub(crate) async fn check_capacity(&self) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let dir = self.dir.clone();
        let checking = self.checking.clone();
        let figures = self
            .blocking(DiskOp::Statvfs, move || {
                let figures = statvfs_figures(&dir);
                // On the blocking thread: cleared when the call returns,
                // however long after its timeout that is.
                checking.store(false, Ordering::Release);
                figures
            })
            .await;
        match figures {
            Ok((used, avail)) => self.apply_capacity(used, avail),
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "statvfs failed"),
        }
    }

    /// The capacity state from statvfs figures (used and available bytes).
    fn apply_capacity(&self, used: u64, avail: u64) {
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

    /// A hung disk whose stuck calls have all returned becomes faulted; a
    /// faulted disk that has rested long enough is probed with a real write.
    pub(crate) async fn probe_if_faulted(&self) {
        if self.health() == DiskHealth::Hung && self.stuck.load(Ordering::Acquire) == 0 {
            tracing::warn!(dir = %self.dir.display(), "hung disk calls returned; probing after the cooldown");
            *self.faulted_at.lock() = Some(Instant::now());
            self.set_health(DiskHealth::Faulted);
        }
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
        let result = self
            .blocking(DiskOp::Probe, move || {
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
            .await;
        match result {
            Ok(()) => {
                self.set_health(DiskHealth::Healthy);
                self.check_capacity().await;
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
    /// `direct`: write with O_DIRECT, from this tail (the data file's bytes from
    /// the aligned block at `data_offset` on; None: read them from the file);
    /// the new tail is returned. None: a buffered write, which returns None.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn write(
        &self,
        data_path: PathBuf,
        index_path: PathBuf,
        data_offset: u64,
        blocks: Arc<[Block]>,
        index_offset: u64,
        index: Bytes,
        direct: Option<Option<Bytes>>,
    ) -> io::Result<(Duration, Option<Bytes>)> {
        let bytes: u64 = blocks.iter().map(Block::len).sum();
        let _slot = self
            .write_slots
            .acquire()
            .await
            .map_err(|_| io::Error::other("disk closed"))?;
        if self.health() == DiskHealth::Hung {
            // Placed before the disk hung, queued behind the call that did.
            return Err(self.hung_error());
        }
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
        let root = self.dir.clone();
        let direct = direct.filter(|_| self.direct);
        let new_tail = self
            .blocking(DiskOp::Write, move || {
                write_segment(
                    &data_path,
                    &index_path,
                    data_offset,
                    &blocks,
                    index_offset,
                    &index,
                    sync.then_some(root.as_path()),
                    fault,
                    direct,
                )
            })
            .await?;
        self.written_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok((waited, new_tail))
    }

    /// Reads exactly `len` bytes at `offset` of a segment's data file: with
    /// O_DIRECT when the segment was written so (`direct`) on a disk that
    /// takes it.
    pub(crate) async fn read_data(
        &self,
        path: PathBuf,
        offset: u64,
        len: u64,
        direct: bool,
    ) -> io::Result<Bytes> {
        self.read_file(path, offset, len, direct && self.direct)
            .await
    }

    /// Reads exactly `len` bytes at `offset` of an index (or any) file.
    pub(crate) async fn read(&self, path: PathBuf, offset: u64, len: u64) -> io::Result<Bytes> {
        self.read_file(path, offset, len, false).await
    }

    async fn read_file(
        &self,
        path: PathBuf,
        offset: u64,
        len: u64,
        direct: bool,
    ) -> io::Result<Bytes> {
        if self.health() == DiskHealth::Hung {
            // It would hang too, holding one more thread: fail at once.
            return Err(self.hung_error());
        }
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
        let out = self
            .blocking(DiskOp::Read, move || -> io::Result<Bytes> {
                if direct {
                    return crate::direct::read(&path, offset, len);
                }
                let file = File::open(&path)?;
                let mut buf = vec![0u8; len as usize];
                file.read_exact_at(&mut buf, offset)?;
                Ok(Bytes::from(buf))
            })
            .await?;
        self.read_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(out)
    }

    /// Runs a blocking filesystem call on tokio's blocking pool and waits at
    /// most `io_timeout` for it. A call that outlives the timeout marks the
    /// disk hung and fails with `TimedOut`; its thread is left to return on
    /// its own, counted in `stuck` until it does.
    async fn blocking<T: Send + 'static>(
        &self,
        op: DiskOp,
        call: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        const RUNNING: u8 = 0;
        const RETURNED: u8 = 1;
        const ABANDONED: u8 = 2;
        let state = Arc::new(AtomicU8::new(RUNNING));
        let (st, stuck) = (state.clone(), self.stuck.clone());
        let (faults, dir) = (self.faults.clone(), self.dir.clone());
        let work = move || {
            if let Some(f) = &faults {
                f.on_io_thread(&dir, op);
            }
            let out = call();
            if st.swap(RETURNED, Ordering::AcqRel) == ABANDONED {
                stuck.fetch_sub(1, Ordering::AcqRel);
            }
            out
        };
        let mut handle = match &self.io {
            Some(runtime) => runtime.spawn_blocking(work),
            None => tokio::task::spawn_blocking(work),
        };
        let joined = match tokio::time::timeout(self.config.io_timeout, &mut handle).await {
            Ok(joined) => joined,
            Err(_) => {
                // Counted before it is marked abandoned, so the thread's
                // decrement can never come first.
                self.stuck.fetch_add(1, Ordering::AcqRel);
                if state.swap(ABANDONED, Ordering::AcqRel) == RETURNED {
                    // It returned right at the deadline: not a hang.
                    self.stuck.fetch_sub(1, Ordering::AcqRel);
                    handle.await
                } else {
                    self.mark_hung(op);
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{op:?} on {} did not return within {:?}",
                            self.dir.display(),
                            self.config.io_timeout
                        ),
                    ));
                }
            }
        };
        joined.map_err(io::Error::other)?
    }

    fn hung_error(&self) -> io::Error {
        io::Error::other(format!(
            "disk {} is hung: a call did not return within {:?}",
            self.dir.display(),
            self.config.io_timeout
        ))
    }

    fn mark_hung(&self, op: DiskOp) {
        self.io_timeouts.fetch_add(1, Ordering::Relaxed);
        let op_label = match op {
            DiskOp::Write => "write",
            DiskOp::Read => "read",
            DiskOp::Probe => "probe",
            DiskOp::Statvfs => "statvfs",
        };
        metrics::counter!("switchyard_disk_io_timeouts_total", "dir" => self.dir.display().to_string(), "op" => op_label)
            .increment(1);
        tracing::error!(
            dir = %self.dir.display(),
            op = op_label,
            timeout = ?self.config.io_timeout,
            stuck = self.stuck.load(Ordering::Acquire),
            "disk call hung; the disk takes no writes or reads until it returns"
        );
        *self.faulted_at.lock() = Some(Instant::now());
        self.set_health(DiskHealth::Hung);
    }
}

/// (used, available) bytes of the filesystem holding `dir`, as df counts them.
fn statvfs_figures(dir: &Path) -> io::Result<(u64, u64)> {
    let s = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    let frag = s.fragment_size();
    let used = s.blocks().saturating_sub(s.blocks_free()) * frag;
    Ok((used, s.blocks_available() * frag))
}

#[allow(clippy::too_many_arguments)]
fn write_segment(
    data_path: &Path,
    index_path: &Path,
    data_offset: u64,
    blocks: &[Block],
    index_offset: u64,
    index: &[u8],
    sync_below: Option<&Path>,
    fault: Option<io::Error>,
    direct: Option<Option<Bytes>>,
) -> io::Result<Option<Bytes>> {
    let sync = sync_below.is_some();
    if let Some(parent) = data_path.parent() {
        fs::create_dir_all(parent)?;
    }
    let open = || {
        OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(data_path)
    };
    let data = match open() {
        // The orphan sweep removes empty directories of applications it
        // does not know; one may have gone between create_dir_all and here.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = data_path.parent() {
                fs::create_dir_all(parent)?;
            }
            open()?
        }
        other => other?,
    };
    let slices: Vec<&[u8]> = blocks.iter().map(|b| &b.data[..]).collect();
    let mut new_tail = None;
    if let Some(tail) = direct {
        drop(data);
        let tail = match tail {
            Some(t) => t,
            None => crate::direct::read_tail(data_path, data_offset)?,
        };
        if let Some(err) = fault {
            // Write about half, then fail, as a dying or filling device would.
            let half: u64 = slices[..slices.len() / 2]
                .iter()
                .map(|s| s.len() as u64)
                .sum();
            crate::direct::write(data_path, data_offset, &tail, &slices, Some(half))?;
            return Err(err);
        }
        new_tail = Some(crate::direct::write(
            data_path,
            data_offset,
            &tail,
            &slices,
            None,
        )?);
        if sync {
            File::open(data_path)?.sync_data()?;
        }
    } else {
        if let Some(err) = fault {
            // Write about half, then fail, as a dying or filling device would.
            let half = slices.len() / 2;
            pwrite_all(&data, &slices[..half], data_offset)?;
            return Err(err);
        }
        pwrite_all(&data, &slices, data_offset)?;
        // Data goes first: an index record never points past written data.
        if sync {
            data.sync_data()?;
        }
    }
    let idx = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(index_path)?;
    idx.write_all_at(index, index_offset)?;
    if sync {
        idx.sync_data()?;
    }
    if let Some(root) = sync_below {
        if data_offset == 0 {
            // New files (a segment's first write): their directory entries,
            // and any directory create_dir_all just made, are durable only
            // once the directories holding them are synced.
            sync_dirs(data_path, root)?;
        }
    }
    Ok(new_tail)
}

/// fsyncs each directory from `file`'s parent up to `root` (included), or
/// only the parent when `file` is not below `root`. Returns how many.
fn sync_dirs(file: &Path, root: &Path) -> io::Result<usize> {
    let mut synced = 0;
    let mut dir = file.parent();
    while let Some(d) = dir {
        File::open(d)?.sync_all()?;
        synced += 1;
        if d == root || !d.starts_with(root) {
            break;
        }
        dir = d.parent();
    }
    Ok(synced)
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

    /// With sync on, a segment's first write makes the new files durable:
    /// every directory from theirs up to the disk's root is synced, and only
    /// then; later writes to the same files sync none.
    #[test]
    fn sync_mode_syncs_the_directories_of_new_files() {
        let root = tempfile::tempdir().unwrap();
        let data = root.path().join("app/0/1-0-p.7.data");
        let index = root.path().join("app/0/1-0-p.7.index");
        assert_eq!(
            sync_dirs(&data, root.path()).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        let blocks = [Block {
            meta: crate::block::BlockMeta {
                block_id: 1,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: 3,
            },
            data: Bytes::from_static(b"abc"),
        }];
        write_segment(
            &data,
            &index,
            0,
            &blocks,
            0,
            &[7; 40],
            Some(root.path()),
            None,
            None,
        )
        .unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"abc");
        assert_eq!(fs::read(&index).unwrap(), [7; 40]);
        // app/0, app and the root itself.
        assert_eq!(sync_dirs(&data, root.path()).unwrap(), 3);
        // A file outside the root: only its own directory.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(sync_dirs(&other.path().join("f"), root.path()).unwrap(), 1);
        write_segment(
            &data,
            &index,
            3,
            &blocks,
            40,
            &[8; 40],
            Some(root.path()),
            None,
            None,
        )
        .unwrap();
        assert_eq!(fs::read(&data).unwrap(), b"abcabc");
    }

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
