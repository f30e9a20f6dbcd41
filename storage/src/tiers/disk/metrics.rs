//! A disk's figures: the counters its status reports and the metrics it
//! exports under its `dir` label. The layers that see an event report it
//! here (the throttle its waits, the timeout layer its timeouts, the disk
//! its errors); the [`Metrics`] layer counts the bytes calls moved.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::io::{DiskCalls, DiskOp, ReadAt, SegmentWrite, Space, Written};

/// Counters of one disk, from its opening on.
pub(crate) struct DiskFigures {
    /// The `dir` label of its metrics.
    dir: String,
    written_bytes: AtomicU64,
    read_bytes: AtomicU64,
    write_errors: AtomicU64,
    io_timeouts: AtomicU64,
    throttled_us: AtomicU64,
}

impl DiskFigures {
    pub(crate) fn new(dir: &Path) -> Self {
        DiskFigures {
            dir: dir.display().to_string(),
            written_bytes: AtomicU64::new(0),
            read_bytes: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            io_timeouts: AtomicU64::new(0),
            throttled_us: AtomicU64::new(0),
        }
    }

    /// A call of `op` waited `waited` on the disk's rate limit.
    pub(crate) fn waited(&self, op: DiskOp, waited: Duration) {
        self.throttled_us
            .fetch_add(waited.as_micros() as u64, Ordering::Relaxed);
        metrics::histogram!("switchyard_throttle_wait_seconds", "dir" => self.dir.clone(), "op" => op.label())
            .record(waited.as_secs_f64());
    }

    /// A call of `op` did not return within `io_timeout`.
    pub(crate) fn timed_out(&self, op: DiskOp) {
        self.io_timeouts.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("switchyard_disk_io_timeouts_total", "dir" => self.dir.clone(), "op" => op.label())
            .increment(1);
    }

    /// A write failed (the disk is faulted or hung for it).
    pub(crate) fn write_error(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("switchyard_disk_errors_total", "dir" => self.dir.clone()).increment(1);
    }

    pub(crate) fn written_bytes(&self) -> u64 {
        self.written_bytes.load(Ordering::Relaxed)
    }
    pub(crate) fn read_bytes(&self) -> u64 {
        self.read_bytes.load(Ordering::Relaxed)
    }
    pub(crate) fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }
    pub(crate) fn io_timeouts(&self) -> u64 {
        self.io_timeouts.load(Ordering::Relaxed)
    }
    pub(crate) fn throttled(&self) -> Duration {
        Duration::from_micros(self.throttled_us.load(Ordering::Relaxed))
    }
}

/// The [`DiskCalls`] layer that counts the bytes of writes and reads that
/// succeeded.
pub(crate) struct Metrics<I> {
    inner: I,
    figures: Arc<DiskFigures>,
}

impl<I: DiskCalls> Metrics<I> {
    pub(crate) fn new(inner: I, figures: Arc<DiskFigures>) -> Self {
        Metrics { inner, figures }
    }
}

impl<I: DiskCalls> DiskCalls for Metrics<I> {
    async fn write(&self, w: SegmentWrite) -> io::Result<Written> {
        let bytes = w.bytes();
        let written = self.inner.write(w).await?;
        self.figures
            .written_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(written)
    }

    async fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        let len = r.len;
        let out = self.inner.read(r).await?;
        self.figures.read_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(out)
    }

    fn probe(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        self.inner.probe()
    }

    fn statvfs(&self) -> impl std::future::Future<Output = io::Result<Option<Space>>> + Send {
        self.inner.statvfs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tiers::disk::fake::{self, FakeCalls};

    #[tokio::test]
    async fn counts_the_bytes_of_calls_that_succeeded() {
        let figures = Arc::new(DiskFigures::new("/d".as_ref()));
        let layer = Metrics::new(FakeCalls::default(), figures.clone());
        layer.write(fake::write(3, 100)).await.unwrap();
        layer.read(fake::read(40)).await.unwrap();
        layer.read(fake::read(2)).await.unwrap();
        assert_eq!(figures.written_bytes(), 300);
        assert_eq!(figures.read_bytes(), 42);
        layer.inner.fail(true);
        assert!(layer.write(fake::write(1, 100)).await.is_err());
        assert!(layer.read(fake::read(5)).await.is_err());
        assert!(layer.probe().await.is_err());
        assert_eq!(figures.written_bytes(), 300, "a failed write moved nothing");
        assert_eq!(figures.read_bytes(), 42);
        let ops: Vec<_> = layer.inner.calls().into_iter().map(|c| c.0).collect();
        use DiskOp::*;
        assert_eq!(ops, [Write, Read, Read, Write, Read, Probe]);
    }

    #[test]
    fn figures_add_up() {
        let figures = DiskFigures::new("/d".as_ref());
        figures.waited(DiskOp::Write, Duration::from_millis(3));
        figures.waited(DiskOp::Read, Duration::from_micros(1500));
        figures.timed_out(DiskOp::Statvfs);
        figures.write_error();
        figures.write_error();
        assert_eq!(figures.throttled(), Duration::from_micros(4500));
        assert_eq!(figures.io_timeouts(), 1);
        assert_eq!(figures.write_errors(), 2);
    }
}
