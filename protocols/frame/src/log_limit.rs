//! Rate limits for log lines that clients cause (bad frames, failed requests,
//! timeouts): a client in a loop must not be able to fill the disk with logs.
//! Counters still count every event; only the lines are limited.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// At most `burst` lines per `interval_ms` for one kind of event; the lines
/// left out are counted and reported by the next line that is written.
pub struct LogLimiter {
    interval_ms: u64,
    burst: u64,
    /// Start of the current window, in ms since [`epoch`].
    window: AtomicU64,
    /// Lines written in the current window.
    written: AtomicU64,
    suppressed: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl LogLimiter {
    pub const fn new(interval_ms: u64, burst: u64) -> Self {
        LogLimiter {
            interval_ms,
            burst,
            window: AtomicU64::new(0),
            written: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out since the last one written)` when this event may be
    /// logged, None when it must not.
    pub fn allow(&self) -> Option<u64> {
        let now = epoch().elapsed().as_millis() as u64;
        let window = self.window.load(Ordering::Relaxed);
        if now.saturating_sub(window) >= self.interval_ms
            && self
                .window
                .compare_exchange(window, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.written.store(0, Ordering::Relaxed);
        }
        if self.written.fetch_add(1, Ordering::Relaxed) < self.burst {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// The limit for client-caused warnings: 10 lines per 10 s per kind.
pub const fn client_caused() -> LogLimiter {
    LogLimiter::new(10_000, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_written_then_lines_are_counted_until_the_next_window() {
        // A window of 1 s: the ten calls must fall in one window even when
        // a loaded machine stalls this thread between them.
        let limiter = LogLimiter::new(1_000, 3);
        let allowed: Vec<_> = (0..10).map(|_| limiter.allow()).collect();
        assert_eq!(&allowed[..3], &[Some(0), Some(0), Some(0)]);
        assert!(allowed[3..].iter().all(Option::is_none));
        std::thread::sleep(std::time::Duration::from_millis(1_050));
        // The next window's first line reports the 7 left out.
        assert_eq!(limiter.allow(), Some(7));
        assert_eq!(limiter.allow(), Some(0));
    }
}
