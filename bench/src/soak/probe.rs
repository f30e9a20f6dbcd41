//! Push and fetch latencies of the soak's clients, split by whether a fault
//! was in force (from its injection until a while after its repair) when
//! the request ended.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::Latency;

#[derive(Clone, Default)]
pub struct Probe {
    faulting: Arc<AtomicBool>,
    /// [outside faults, during faults]
    push: [Latency; 2],
    fetch: [Latency; 2],
}

impl Probe {
    pub fn set_faulting(&self, on: bool) {
        self.faulting.store(on, Ordering::Relaxed);
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
