//! Push and fetch latencies of the soak's clients, split by whether a fault
//! was in force (from its injection until a while after its repair) when
//! the request ended; and when faults were in force, in wall-clock time,
//! for results that arrive later from other processes (the real jobs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use crate::harness::Latency;

#[derive(Clone, Default)]
pub struct Probe {
    faulting: Arc<AtomicBool>,
    /// [outside faults, during faults]
    push: [Latency; 2],
    fetch: [Latency; 2],
    windows: Arc<Mutex<Vec<Window>>>,
}

/// A fault window as (from, until), the last one open while it lasts.
type Window = (SystemTime, Option<SystemTime>);

impl Probe {
    pub fn set_faulting(&self, on: bool) {
        let was = self.faulting.swap(on, Ordering::Relaxed);
        let mut windows = self.windows.lock();
        match (was, on) {
            (false, true) => windows.push((SystemTime::now(), None)),
            (true, false) => {
                if let Some(w) = windows.last_mut() {
                    w.1 = Some(SystemTime::now());
                }
            }
            _ => {}
        }
    }

    /// Whether a fault was in force at any time from `from` to `until`.
    pub fn faulted_between(&self, from: SystemTime, until: SystemTime) -> bool {
        self.windows
            .lock()
            .iter()
            .any(|&(a, b)| a <= until && b.is_none_or(|b| b >= from))
    }

    fn window(&self) -> usize {
        usize::from(self.faulting.load(Ordering::Relaxed))
    }

    pub fn push(&self, took: Duration) {
        self.push[self.window()].record(took);
    }

    pub fn fetch(&self, took: Duration) {
        self.fetch[self.window()].record(took);
    }

    /// (p99 ms, count) of pushes and of fetches, outside and during faults.
    pub fn p99s(&self) -> [[(f64, u64); 2]; 2] {
        let f = |l: &Latency| (l.ms(0.99), l.count());
        [
            [f(&self.push[0]), f(&self.push[1])],
            [f(&self.fetch[0]), f(&self.fetch[1])],
        ]
    }
}
