//! Traffic history from the protocols' traffic totals: bytes per second
//! pushed and fetched per protocol, sampled every [`SAMPLE_INTERVAL`] over
//! the last [`SAMPLES`] samples (10 minutes, the status page's chart), and
//! bytes per protocol per clock hour over the last [`HOURS`] hours (the
//! migration report).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;
use switchyard_frame::traffic::{self, Protocol, Totals};
use tokio::sync::watch;

pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
pub const SAMPLES: usize = 120;
pub const HOURS: usize = 24;
const HOUR_MS: u64 = 3_600_000;

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

/// Bytes moved in one clock hour.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Bytes {
    pub pushed_bytes: u64,
    pub fetched_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hour {
    pub start_unix_ms: u64,
    pub protocols: BTreeMap<&'static str, Bytes>,
}

#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub interval_seconds: u64,
    pub samples: Vec<Sample>,
}

pub struct ThroughputHistory {
    samples: Mutex<VecDeque<Sample>>,
    hours: Mutex<VecDeque<Hour>>,
    last: Mutex<(Instant, AllTotals)>,
}

/// Every protocol's totals, in [`Protocol::ALL`]'s order.
type AllTotals = [Totals; Protocol::ALL.len()];

fn all_totals() -> AllTotals {
    Protocol::ALL.map(traffic::totals)
}

impl ThroughputHistory {
    pub fn new() -> Arc<Self> {
        Arc::new(ThroughputHistory {
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
            hours: Mutex::new(VecDeque::with_capacity(HOURS)),
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
        self.add_to_hour(unix_ms, &totals, &before);
        let mut samples = self.samples.lock();
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(Sample { unix_ms, protocols });
    }

    /// Adds the bytes since the previous sample to the clock hour of `unix_ms`.
    fn add_to_hour(&self, unix_ms: u64, totals: &AllTotals, before: &AllTotals) {
        let start = unix_ms - unix_ms % HOUR_MS;
        let mut hours = self.hours.lock();
        if hours.back().is_none_or(|h| h.start_unix_ms != start) {
            if hours.len() == HOURS {
                hours.pop_front();
            }
            hours.push_back(Hour {
                start_unix_ms: start,
                protocols: Protocol::ALL
                    .iter()
                    .map(|p| (p.as_str(), Bytes::default()))
                    .collect(),
            });
        }
        let hour = hours.back_mut().expect("just pushed");
        for (p, (t, b)) in Protocol::ALL.iter().zip(totals.iter().zip(before.iter())) {
            let bytes = hour.protocols.entry(p.as_str()).or_default();
            bytes.pushed_bytes += t.pushed.saturating_sub(b.pushed);
            bytes.fetched_bytes += t.fetched.saturating_sub(b.fetched);
        }
    }

    /// Bytes per protocol per clock hour, oldest first (hours this process
    /// did not run through are absent).
    pub fn hours(&self) -> Vec<Hour> {
        self.hours.lock().iter().cloned().collect()
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
        // Every sample of this test fell into one or two clock hours.
        let hours = h.hours();
        assert!((1..=2).contains(&hours.len()), "{hours:?}");
        let flink: u64 = hours
            .iter()
            .map(|h| h.protocols["flink"].pushed_bytes)
            .sum();
        assert!(flink >= 1000, "{hours:?}");
    }
}
