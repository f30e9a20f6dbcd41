//! Per-disk byte-rate throttle: a token bucket in bytes per second.

use std::time::Duration;

use tokio::time::Instant;

use leaky_bucket::RateLimiter;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn limits_rate_after_the_initial_burst() {
        let t = ByteThrottle::new(10 * 1024 * 1024);
        // The first second's worth passes at once, the next two take ~2 s.
        assert!(t.acquire(10 * 1024 * 1024).await < Duration::from_millis(50));
        let waited = t.acquire(20 * 1024 * 1024).await;
        assert!(waited >= Duration::from_millis(1900), "waited {waited:?}");
    }
}
