//! Per-disk byte-rate throttles (`disks.write_rate_limit`,
//! `disks.read_rate_limit`), and the [`Throttle`] layer that makes writes
//! and reads wait on them before they take an I/O thread.
//!
//! A throttle stands for a disk of that rate shared by everyone who uses
//! it, and it serves small requests first, as a disk's queue would serve a
//! short request between a long one's pieces: a request of at most one
//! step (10 ms of the rate) passes at once, counted against the rate as
//! debt, while the debt is under 100 ms of the rate; larger ones pass in
//! steps of 10 ms, each once the debt is paid, concurrent large requests
//! taking their steps in turn (sharing the rate as a disk shares its
//! time). A big application's 16 MiB flush therefore cannot sit in front
//! of a small one's 40 KiB flush for the quarter second the big one takes,
//! nor in front of another's 1 MiB flush for all of it, and the rate over
//! any second still holds. A large step that waited 100 ms competes with
//! the small requests as one of them, so a stream of them cannot starve
//! it. Waits are computed, not polled on a tick: a tick of 100 ms (as a
//! token bucket's refill) made every small request behind a busy disk wait
//! 50 ms on average.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::io::{DiskCalls, DiskOp, ReadAt, SegmentWrite, Space, Written};
use super::metrics::DiskFigures;

/// A large request's step, and the most a small request may be.
const STEP: Duration = Duration::from_millis(10);
/// How far small requests may run ahead of the rate before they wait too.
const MAX_DEBT: Duration = Duration::from_millis(100);

/// Bytes per second, with a burst of one second's worth after idle time.
pub(crate) struct ByteThrottle {
    rate: f64,
    step: u64,
    bucket: Mutex<Bucket>,
    /// Large requests take their steps in turn, in arrival order (tokio's
    /// mutex is FIFO): each step goes to the back of the line.
    large: tokio::sync::Mutex<()>,
}

/// Bytes that may pass now (negative: debt), as of `at`.
struct Bucket {
    balance: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, rate: f64) {
        let now = Instant::now();
        let earned = now.duration_since(self.at).as_secs_f64() * rate;
        self.balance = (self.balance + earned).min(rate);
        self.at = now;
    }
}

impl ByteThrottle {
    pub(crate) fn new(bytes_per_sec: u64) -> Self {
        let rate = bytes_per_sec.max(1024) as f64;
        ByteThrottle {
            rate,
            step: ((rate * STEP.as_secs_f64()) as u64).max(1),
            bucket: Mutex::new(Bucket {
                balance: rate,
                at: Instant::now(),
            }),
            large: tokio::sync::Mutex::new(()),
        }
    }

    /// Waits until `bytes` may pass; returns how long it waited.
    pub(crate) async fn acquire(&self, bytes: u64) -> Duration {
        let start = Instant::now();
        if bytes <= self.step {
            self.take(bytes, true).await;
        } else {
            let mut left = bytes;
            while left > 0 {
                let step = left.min(self.step);
                // Each step in turn: concurrent large requests share the
                // rate, as a disk shares its time between them.
                let _turn = self.large.lock().await;
                self.take(step, false).await;
                left -= step;
            }
        }
        start.elapsed()
    }

    /// Takes `bytes` once the balance allows, waiting as long as the rate
    /// needs to bring it there. A small request may take it into debt (down
    /// to [`MAX_DEBT`]); a large step waits for the debt to be paid, unless
    /// it has waited [`MAX_DEBT`] already: then it may take the balance into
    /// debt as a small one, so that a steady stream of small requests
    /// delays large ones but cannot starve them.
    async fn take(&self, bytes: u64, small: bool) {
        let max_debt = self.rate * MAX_DEBT.as_secs_f64();
        let start = Instant::now();
        loop {
            let patient = small || start.elapsed() >= MAX_DEBT;
            let floor = if patient { -max_debt } else { 0.0 };
            let short = {
                let mut b = self.bucket.lock();
                b.refill(self.rate);
                if b.balance >= floor {
                    b.balance -= bytes as f64;
                    return;
                }
                floor - b.balance
            };
            let mut wait = Duration::from_secs_f64(short / self.rate);
            if !patient {
                wait = wait.min(MAX_DEBT.saturating_sub(start.elapsed()));
            }
            // At least a millisecond: the timer's resolution.
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
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

    /// `t.acquire(bytes)` on a task of its own; resolves to its wait.
    fn acquire_in_background(
        t: &Arc<ByteThrottle>,
        bytes: u64,
    ) -> tokio::task::JoinHandle<Duration> {
        let t = t.clone();
        tokio::spawn(async move { t.acquire(bytes).await })
    }

    /// A small request behind a large one on a busy disk passes at once,
    /// not after the large one's bytes; the large one pays for it, so the
    /// rate over the whole still holds.
    #[tokio::test(start_paused = true)]
    async fn small_requests_pass_before_a_large_one() {
        let t = Arc::new(ByteThrottle::new(10 * MIB));
        // Spend the burst: the disk is busy from here on.
        t.acquire(10 * MIB).await;
        let start = Instant::now();
        let big = acquire_in_background(&t, 5 * MIB);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let small = t.acquire(40 * 1024).await;
        assert!(small <= Duration::from_millis(1), "waited {small:?}");
        let big = big.await.unwrap();
        assert!(big >= Duration::from_millis(500), "{big:?}");
        // 5 MiB and 40 KiB at 10 MiB/s: the large one ends about 4 ms
        // later for the small one, and no earlier than the rate allows.
        assert!(
            start.elapsed() >= Duration::from_millis(503),
            "{:?}",
            start.elapsed()
        );
        assert!(
            start.elapsed() <= Duration::from_millis(530),
            "{:?}",
            start.elapsed()
        );
    }

    /// Two large requests share the rate step by step: a 1 MiB one that
    /// comes after a 5 MiB one ends long before it, at about half the rate.
    #[tokio::test(start_paused = true)]
    async fn large_requests_take_their_steps_in_turn() {
        let t = Arc::new(ByteThrottle::new(10 * MIB));
        t.acquire(10 * MIB).await;
        let start = Instant::now();
        let first = acquire_in_background(&t, 5 * MIB);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let second = t.acquire(MIB).await;
        assert!(first.await.unwrap() >= Duration::from_millis(600));
        // 1 MiB at half of 10 MiB/s: about 200 ms, not the 450 ms left of
        // the first request.
        assert!(second >= Duration::from_millis(150), "{second:?}");
        assert!(second <= Duration::from_millis(260), "{second:?}");
        assert!(start.elapsed() >= Duration::from_millis(600));
    }

    /// A steady stream of small requests delays a large one but does not
    /// starve it: after waiting 100 ms its steps compete with them.
    #[tokio::test(start_paused = true)]
    async fn small_requests_do_not_starve_a_large_one() {
        let t = Arc::new(ByteThrottle::new(10 * MIB));
        t.acquire(10 * MIB).await;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut streams = Vec::new();
        for _ in 0..4 {
            let (t, stop) = (t.clone(), stop.clone());
            streams.push(tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    t.acquire(64 * 1024).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 1 MiB is 100 ms of the rate alone; beside the streams it gets a
        // share, not nothing.
        let waited = tokio::time::timeout(Duration::from_secs(5), t.acquire(MIB))
            .await
            .expect("the large request was starved");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in streams {
            s.await.unwrap();
        }
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    }

    /// Small requests alone cannot outrun the rate: past 100 ms of debt
    /// they wait too.
    #[tokio::test(start_paused = true)]
    async fn small_requests_still_keep_the_rate() {
        let t = ByteThrottle::new(10 * MIB);
        t.acquire(10 * MIB).await;
        let start = Instant::now();
        // 2 MiB in 64 KiB requests: 200 ms at the rate.
        for _ in 0..32 {
            t.acquire(64 * 1024).await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(90), "{took:?}");
        assert!(took <= Duration::from_millis(220), "{took:?}");
    }

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
