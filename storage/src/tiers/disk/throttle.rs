//! Per-disk byte-rate throttles (`disks.write_rate_limit`,
//! `disks.read_rate_limit`): a token bucket in bytes per second, and the
//! [`Throttle`] layer that makes writes and reads wait on it before they
//! take an I/O thread.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use leaky_bucket::RateLimiter;

use super::io::{DiskCalls, DiskOp, ReadAt, SegmentWrite, Space, Written};
use super::metrics::DiskFigures;

/// Tokens are refilled ten times a second; one acquire takes at most one
/// second's worth so a large write waits in several steps.
pub(crate) struct ByteThrottle {
    limiter: RateLimiter,
    max_step: usize,
}

impl ByteThrottle {
    pub(crate) fn new(bytes_per_sec: u64) -> Self {
        let per_sec = bytes_per_sec.clamp(1024, usize::MAX as u64) as usize;
        let refill = (per_sec / 10).max(1);
        ByteThrottle {
            limiter: RateLimiter::builder()
                .max(per_sec)
                .initial(per_sec)
                .refill(refill)
                .interval(Duration::from_millis(100))
                .build(),
            max_step: per_sec,
        }
    }

    /// Waits until `bytes` may pass; returns how long it waited.
    pub(crate) async fn acquire(&self, bytes: u64) -> Duration {
        let start = Instant::now();
        let mut left = bytes as usize;
        while left > 0 {
            let step = left.min(self.max_step);
            self.limiter.acquire(step).await;
            left -= step;
        }
        start.elapsed()
    }
}

/// The [`DiskCalls`] layer that holds writes and reads until their bytes
/// may pass. Probes and statvfs pass at once.
pub(crate) struct Throttle<I> {
    inner: I,
    write: Option<ByteThrottle>,
    read: Option<ByteThrottle>,
    figures: Arc<DiskFigures>,
}

impl<I: DiskCalls> Throttle<I> {
    /// `write`, `read`: bytes per second; None: that direction is not limited.
    pub(crate) fn new(
        inner: I,
        write: Option<u64>,
        read: Option<u64>,
        figures: Arc<DiskFigures>,
    ) -> Self {
        Throttle {
            inner,
            write: write.map(ByteThrottle::new),
            read: read.map(ByteThrottle::new),
            figures,
        }
    }
}

impl<I: DiskCalls> DiskCalls for Throttle<I> {
    async fn write(&self, w: SegmentWrite) -> io::Result<Written> {
        let waited = match &self.write {
            Some(t) => t.acquire(w.bytes()).await,
            None => Duration::ZERO,
        };
        if !waited.is_zero() {
            self.figures.waited(DiskOp::Write, waited);
        }
        let written = self.inner.write(w).await?;
        Ok(Written {
            throttled: written.throttled + waited,
            ..written
        })
    }

    async fn read(&self, r: ReadAt) -> io::Result<Bytes> {
        if let Some(t) = &self.read {
            let waited = t.acquire(r.len).await;
            self.figures.waited(DiskOp::Read, waited);
        }
        self.inner.read(r).await
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

    #[tokio::test(start_paused = true)]
    async fn limits_rate_after_the_initial_burst() {
        let t = ByteThrottle::new(10 * 1024 * 1024);
        // The first second's worth passes at once, the next two take ~2 s.
        assert!(t.acquire(10 * 1024 * 1024).await < Duration::from_millis(50));
        let waited = t.acquire(20 * 1024 * 1024).await;
        assert!(waited >= Duration::from_millis(1900), "waited {waited:?}");
    }

    const MIB: u64 = 1024 * 1024;

    /// A write waits for its bytes past the first second's burst, before it
    /// reaches the disk, and the wait is reported and counted.
    #[tokio::test(start_paused = true)]
    async fn writes_wait_for_their_bytes_before_they_reach_the_disk() {
        let figures = Arc::new(DiskFigures::new("/d".as_ref()));
        let t = Throttle::new(FakeCalls::default(), Some(10 * MIB), None, figures.clone());
        let start = Instant::now();
        let first = t.write(fake::write(10, MIB)).await.unwrap();
        assert!(first.throttled < Duration::from_millis(50), "{first:?}");
        let second = t.write(fake::write(20, MIB)).await.unwrap();
        assert!(
            second.throttled >= Duration::from_millis(1900),
            "{second:?}"
        );
        let reached = t.inner.calls();
        assert_eq!(reached.len(), 2);
        assert!(reached[1].1 - start >= second.throttled, "it waited first");
        assert_eq!(figures.throttled(), first.throttled + second.throttled);
        // Reads are not limited: they pass at once and count no wait.
        let before = Instant::now();
        t.read(fake::read(100 * MIB)).await.unwrap();
        assert_eq!(before.elapsed(), Duration::ZERO);
        assert_eq!(figures.throttled(), first.throttled + second.throttled);
    }

    #[tokio::test(start_paused = true)]
    async fn reads_wait_for_their_length() {
        let figures = Arc::new(DiskFigures::new("/d".as_ref()));
        let t = Throttle::new(FakeCalls::default(), None, Some(MIB), figures.clone());
        t.read(fake::read(MIB)).await.unwrap();
        let before = Instant::now();
        t.read(fake::read(3 * MIB)).await.unwrap();
        let waited = before.elapsed();
        assert!(waited >= Duration::from_millis(2900), "{waited:?}");
        assert!(figures.throttled() >= waited);
        // A failed call still waited: the wait is counted all the same.
        t.inner.fail(true);
        assert!(t.read(fake::read(MIB)).await.is_err());
        assert!(figures.throttled() >= waited + Duration::from_millis(900));
    }
}
