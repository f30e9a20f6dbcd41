//! Whether the worker tells pushers it is congested (`[celeborn.congestion]`).
//!
//! Without it a push that finds the memory budget full waits in
//! `append_waiting`, and the client feels that only as slower replies (TCP
//! back-pressure). With it, a push that was written while the budget is past
//! the high watermark is answered `PUSH_DATA_SUCCESS_PRIMARY_CONGESTED`
//! instead of the empty success: the data is held all the same, and a client
//! with `celeborn.client.push.limit.strategy=SLOWSTART` halves its pushes in
//! flight to this worker and sleeps between them (the default `SIMPLE`
//! strategy ignores the answer). The state latches until the budget falls
//! to the low watermark, so that replies do not flap at one threshold.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::config::CongestionConfig;

pub(crate) struct Congestion {
    config: CongestionConfig,
    congested: AtomicBool,
}

impl Congestion {
    pub(crate) fn new(config: CongestionConfig) -> Self {
        Congestion {
            config,
            congested: AtomicBool::new(false),
        }
    }

    /// Whether a push just written, with `used` of `capacity` bytes of the
    /// budget in use, is answered congested (counted when it is).
    pub(crate) fn check(&self, used: u64, capacity: u64) -> bool {
        if !self.config.enabled || capacity == 0 {
            return false;
        }
        let share = used as f64 / capacity as f64;
        let was = self.congested.load(Ordering::Relaxed);
        let now = if was {
            share > self.config.low_watermark
        } else {
            share >= self.config.high_watermark
        };
        if now != was {
            self.congested.store(now, Ordering::Relaxed);
            tracing::info!(
                congested = now,
                used,
                capacity,
                "celeborn worker congestion changed"
            );
        }
        if now {
            metrics::counter!("switchyard_celeborn_congested_replies_total").increment(1);
        }
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(high: f64, low: f64) -> Congestion {
        Congestion::new(CongestionConfig {
            enabled: true,
            high_watermark: high,
            low_watermark: low,
        })
    }

    #[test]
    fn off_by_default() {
        let c = Congestion::new(CongestionConfig::default());
        assert!(!c.check(100, 100));
    }

    #[test]
    fn latches_between_the_watermarks() {
        let c = on(0.8, 0.5);
        assert!(!c.check(70, 100));
        assert!(c.check(80, 100));
        // Still congested until the low watermark.
        assert!(c.check(60, 100));
        assert!(!c.check(50, 100));
        assert!(!c.check(70, 100));
    }

    #[test]
    fn an_empty_budget_is_never_congested() {
        assert!(!on(0.0, 0.0).check(0, 0));
    }
}
