//! The status page's throughput history: bytes per second pushed and fetched
//! per protocol, sampled every [`SAMPLE_INTERVAL`] over the last
//! [`SAMPLES`] samples (10 minutes), from the protocols' traffic totals.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;
use switchyard_frame::traffic::{self, Protocol, Totals};
use tokio::sync::watch;

pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
pub const SAMPLES: usize = 120;

#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Rates {
    pub pushed_bytes_per_second: f64,
    pub fetched_bytes_per_second: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// End of the sampled interval, in Unix milliseconds.
    pub unix_ms: u64,
    /// Rates over the interval, by protocol name.
    pub protocols: BTreeMap<&'static str, Rates>,
}

#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub interval_seconds: u64,
    pub samples: Vec<Sample>,
}

pub struct ThroughputHistory {
    samples: Mutex<VecDeque<Sample>>,
    last: Mutex<(Instant, [Totals; 3])>,
}

fn all_totals() -> [Totals; 3] {
    Protocol::ALL.map(traffic::totals)
}

impl ThroughputHistory {
    pub fn new() -> Arc<Self> {
        Arc::new(ThroughputHistory {
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
            last: Mutex::new((Instant::now(), all_totals())),
        })
    }

    /// Records the rates since the previous sample.
    pub fn sample(&self) {
        let (now, totals) = (Instant::now(), all_totals());
        let (since, before) = std::mem::replace(&mut *self.last.lock(), (now, totals));
        let seconds = now.duration_since(since).as_secs_f64().max(1e-3);
        let rate = |after: u64, before: u64| after.saturating_sub(before) as f64 / seconds;
        let protocols = Protocol::ALL
            .iter()
            .zip(totals.iter().zip(before.iter()))
            .map(|(p, (t, b))| {
                let rates = Rates {
                    pushed_bytes_per_second: rate(t.pushed, b.pushed),
                    fetched_bytes_per_second: rate(t.fetched, b.fetched),
                };
                (p.as_str(), rates)
            })
            .collect();
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut samples = self.samples.lock();
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(Sample { unix_ms, protocols });
    }

    pub fn history(&self) -> History {
        History {
            interval_seconds: SAMPLE_INTERVAL.as_secs(),
            samples: self.samples.lock().iter().cloned().collect(),
        }
    }

    /// Samples every [`SAMPLE_INTERVAL`] until `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => self.sample(),
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_rates_and_keeps_a_window() {
        let h = ThroughputHistory::new();
        traffic::pushed(Protocol::Flink, 1000);
        h.sample();
        let first = h.history();
        assert_eq!(first.samples.len(), 1);
        // Other tests in this process may push too: at least ours.
        assert!(first.samples[0].protocols["flink"].pushed_bytes_per_second > 0.0);
        assert_eq!(first.samples[0].protocols.len(), 3);
        for _ in 0..SAMPLES + 5 {
            h.sample();
        }
        assert_eq!(h.history().samples.len(), SAMPLES);
    }
}
