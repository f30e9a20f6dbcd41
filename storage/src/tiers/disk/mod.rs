//! The local-disk tier: one [`LocalDisk`] per data directory.
//!
//! Each disk has its own write and read concurrency limits, optional byte-rate
//! throttles, and a health state. A disk whose free space drops under
//! `min_free` (or that holds `capacity` bytes), or that fails an I/O, takes no
//! new writes until it recovers; what it already holds stays readable.
//!
//! A disk's I/O goes through a stack of layers built once when it opens,
//! each a file of its own, as OpenDAL composes its services ([`io`] has the
//! two traits they implement):
//!
//! - [`metrics`]: counts the bytes written and read (its `DiskFigures`
//!   holds every counter of the disk, which the other layers feed);
//! - [`throttle`]: holds writes and reads until the rate limits let their
//!   bytes pass, small ones first;
//! - [`limit`]: the write and read concurrency slots, taken only once the
//!   throttle let a request through;
//! - [`timeout`]: runs each blocking call on tokio's blocking pool, never on
//!   a runtime thread, and waits at most `io_timeout`; a call that outlives
//!   it marks the disk hung (see [`health`]);
//! - [`fault`]: injected failures and hangs, in tests only;
//! - [`fs`]: the files themselves, buffered or O_DIRECT ([`direct`]).
//!
//! This file keeps what the store asks of a disk: placement state (health,
//! capacity) and the decisions of a hung or faulted
//! disk. A hung disk takes no writes and no reads, so hung threads do not
//! pile up, until every stuck call returned; then it is faulted and a probe
//! decides, as after an error.

pub(crate) mod direct;
#[cfg(test)]
mod fake;
pub mod fault;
mod fs;
mod health;
mod io;
mod limit;
mod metrics;
mod open;
mod throttle;
mod timeout;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

use crate::block::Block;
use crate::config::DiskConfig;
use fault::{DiskFaults, Faults};
use fs::Fs;
pub use health::DiskHealth;
use health::Health;
use io::{DiskCalls, DiskIo, IndexAppend, ReadAt, SegmentWrite, Space};
use limit::Limit;
use metrics::{DiskFigures, Metrics};
use throttle::Throttle;
use timeout::Timeout;

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
    health: Arc<Health>,
    used_ratio_millis: AtomicU64,
    available_bytes: AtomicU64,
    /// Bytes of shuffle data this disk holds.
    pub(crate) stored_bytes: AtomicU64,
    figures: Arc<DiskFigures>,
    /// This disk's I/O, through its layers.
    calls: Layers,
    config: DiskConfig,
    /// Data files written and read with O_DIRECT (`disks.direct_io`, where
    /// the filesystem takes it).
    pub(crate) direct: bool,
}

/// The layers of a disk's I/O, outermost first.
type Layers = Metrics<Throttle<Limit<Timeout>>>;

impl LocalDisk {
    pub(crate) fn open(
        index: usize,
        dir: PathBuf,
        config: &DiskConfig,
        faults: Option<Arc<dyn DiskFaults>>,
        health_changed: Arc<tokio::sync::Notify>,
        io: Option<tokio::runtime::Handle>,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let direct = match config.direct_io {
            crate::config::DirectIo::Off => false,
            wanted => {
                let works = direct::supported(&dir);
                if !works && wanted == crate::config::DirectIo::On {
                    tracing::warn!(dir = %dir.display(), "storage.disks.direct_io = on, but this filesystem takes no O_DIRECT: buffered I/O");
                }
                works
            }
        };
        tracing::info!(dir = %dir.display(), direct_io = direct, "disk opened");
        let health = Arc::new(Health::new(dir.clone(), health_changed));
        let figures = Arc::new(DiskFigures::new(&dir));
        let calls = layers(&dir, config, faults, io, &health, &figures);
        let disk = LocalDisk {
            index,
            dir,
            health,
            used_ratio_millis: AtomicU64::new(0),
            available_bytes: AtomicU64::new(0),
            stored_bytes: AtomicU64::new(0),
            figures,
            calls,
            config: config.clone(),
            direct,
        };
        // At startup, before any flush: calling statvfs directly is fine.
        match fs::statvfs(&disk.dir) {
            Ok(space) => disk.apply_capacity(space),
            Err(e) => tracing::warn!(dir = %disk.dir.display(), error = %e, "statvfs failed"),
        }
        Ok(disk)
    }

    /// Files written by stuck writes that returned late, since the last
    /// call (see [`health::Health::late_write_returned`]).
    pub(crate) fn take_late_writes(&self) -> Vec<std::path::PathBuf> {
        self.health.take_late_writes()
    }

    pub(crate) fn health(&self) -> DiskHealth {
        self.health.get()
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.health() == DiskHealth::Healthy
    }

    pub(crate) fn record_error(&self, err: &std::io::Error) {
        self.figures.write_error();
        tracing::error!(dir = %self.dir.display(), error = %err, "disk i/o error");
        self.health.failed_now();
        // A hung disk stays hung (its timed-out call is reported here too):
        // only the stuck calls' return may end that state.
        if self.health() != DiskHealth::Hung {
            self.health.set(DiskHealth::Faulted);
        }
    }

    pub(crate) fn status(&self) -> DiskStatus {
        DiskStatus {
            dir: self.dir.clone(),
            health: self.health(),
            used_ratio: self.used_ratio_millis.load(Ordering::Relaxed) as f64 / 1e6,
            available_bytes: self.available_bytes.load(Ordering::Relaxed),
            stored_bytes: self.stored_bytes.load(Ordering::Relaxed),
            written_bytes: self.figures.written_bytes(),
            read_bytes: self.figures.read_bytes(),
            write_errors: self.figures.write_errors(),
            io_timeouts: self.figures.io_timeouts(),
            stuck_calls: self.health.stuck_calls(),
            throttled_ms: self.figures.throttled().as_millis() as u64,
        }
    }

    /// Updates the capacity state from the filesystem's own figures and the
    /// bytes this disk holds: one statvfs, off the runtime and bounded by
    /// `io_timeout` (a statvfs on a hung mount marks the disk hung). Skipped
    /// while an earlier statvfs has not returned.
    pub(crate) async fn check_capacity(&self) {
        match self.calls.statvfs().await {
            Ok(Some(space)) => self.apply_capacity(space),
            Ok(None) => {}
            Err(e) => tracing::warn!(dir = %self.dir.display(), error = %e, "statvfs failed"),
        }
    }

    /// The capacity state from statvfs figures.
    fn apply_capacity(&self, space: Space) {
        let Space {
            used,
            available: avail,
        } = space;
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
                self.health.set(DiskHealth::Full)
            }
            DiskHealth::Full
                if avail >= min_free.saturating_add(margin)
                    && capacity.is_none_or(|c| stored.saturating_add(margin) <= c) =>
            {
                self.health.set(DiskHealth::Healthy)
            }
            _ => {}
        }
    }

    /// A hung disk whose stuck calls have all returned becomes faulted; a
    /// faulted disk that has rested long enough is probed with a real write.
    pub(crate) async fn probe_if_faulted(&self) {
        if self.health() == DiskHealth::Hung && self.health.stuck_calls() == 0 {
            tracing::warn!(dir = %self.dir.display(), "hung disk calls returned; probing after the cooldown");
            self.health.failed_now();
            self.health.set(DiskHealth::Faulted);
        }
        if self.health() != DiskHealth::Faulted || !self.health.rested(self.config.error_cooldown) {
            return;
        }
        match self.calls.probe().await {
            Ok(()) => {
                self.health.set(DiskHealth::Healthy);
                self.check_capacity().await;
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "disk probe failed");
                self.health.failed_now();
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
    ) -> std::io::Result<(Duration, Option<Bytes>)> {
        let written = self
            .calls
            .write(SegmentWrite {
                data: data_path,
                data_offset,
                blocks,
                index: Some(IndexAppend {
                    path: index_path,
                    offset: index_offset,
                    records: index,
                }),
                direct: direct.filter(|_| self.direct),
            })
            .await?;
        Ok((written.throttled, written.tail))
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
    ) -> std::io::Result<Bytes> {
        self.read_file(path, offset, len, direct && self.direct)
            .await
    }

    /// Reads exactly `len` bytes at `offset` of an index (or any) file.
    pub(crate) async fn read(
        &self,
        path: PathBuf,
        offset: u64,
        len: u64,
    ) -> std::io::Result<Bytes> {
        self.read_file(path, offset, len, false).await
    }

    async fn read_file(
        &self,
        path: PathBuf,
        offset: u64,
        len: u64,
        direct: bool,
    ) -> std::io::Result<Bytes> {
        if self.health() == DiskHealth::Hung {
            // It would hang too, holding one more thread: fail at once.
            return Err(self.hung_error());
        }
        self.calls
            .read(ReadAt {
                path,
                offset,
                len,
                direct,
            })
            .await
    }

    fn hung_error(&self) -> std::io::Error {
        self.health.hung_error(self.config.io_timeout)
    }
}

/// A disk's layers: the raw calls (behind fault injection when a test asked
/// for it) bounded by the timeout, limited in number, throttled, counted.
fn layers(
    dir: &Path,
    config: &DiskConfig,
    faults: Option<Arc<dyn DiskFaults>>,
    pool: Option<tokio::runtime::Handle>,
    health: &Arc<Health>,
    figures: &Arc<DiskFigures>,
) -> Layers {
    let plain = Fs::new(dir.to_path_buf(), config.sync);
    let raw: Arc<dyn DiskIo> = match faults {
        Some(f) => Arc::new(Faults::new(plain, f, dir.to_path_buf())),
        None => Arc::new(plain),
    };
    let timeout = Timeout::new(
        raw,
        config.io_timeout,
        pool,
        dir.to_path_buf(),
        health.clone(),
        figures.clone(),
    );
    let limit = Limit::new(
        timeout,
        config.write_concurrency,
        config.read_concurrency,
        health.clone(),
        config.io_timeout,
    );
    let throttle = Throttle::new(
        limit,
        config.write_rate_limit.map(|r| r.as_u64()),
        config.read_rate_limit.map(|r| r.as_u64()),
        figures.clone(),
    );
    Metrics::new(throttle, figures.clone())
}

#[cfg(test)]
mod tests {
    use bytesize::ByteSize;

    use super::*;
    use crate::block::BlockMeta;

    /// The layers stack in order: a write waits on the rate limit before it
    /// takes an I/O thread, so a wait longer than `io_timeout` is no hang.
    #[tokio::test]
    async fn a_throttled_wait_does_not_count_against_the_io_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let config = DiskConfig {
            dirs: vec![dir.path().to_path_buf()],
            write_rate_limit: Some(ByteSize::kib(1)),
            io_timeout: Duration::from_secs(2),
            min_free: ByteSize::b(0),
            ..DiskConfig::default()
        };
        let disk = LocalDisk::open(
            0,
            dir.path().into(),
            &config,
            None,
            Default::default(),
            None,
        )
        .unwrap();
        let block = Block {
            meta: BlockMeta {
                block_id: 1,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: 1024,
            },
            data: Bytes::from(vec![5u8; 1024]),
        };
        let data = dir.path().join("a/0/p.data");
        // The first KiB passes at once, the next four take about 4 s.
        let (waited, tail) = disk
            .write(
                data.clone(),
                dir.path().join("a/0/p.index"),
                0,
                vec![block; 5].into(),
                0,
                Bytes::from_static(&[1; 8]),
                None,
            )
            .await
            .unwrap();
        assert!(waited > config.io_timeout, "waited {waited:?}");
        assert!(tail.is_none());
        let s = disk.status();
        assert_eq!(s.health, DiskHealth::Healthy);
        assert_eq!((s.io_timeouts, s.written_bytes), (0, 5 * 1024));
        assert!(s.throttled_ms as u128 >= config.io_timeout.as_millis());
        let back = disk.read_data(data, 1020, 8, false).await.unwrap();
        assert_eq!(&back[..], [5u8; 8]);
        assert_eq!(disk.status().read_bytes, 8);
    }
}
