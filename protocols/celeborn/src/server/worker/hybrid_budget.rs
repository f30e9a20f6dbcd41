//! The byte budget of hybrid-shuffle data in memory
//! (`celeborn.hybrid_memory`).
//!
//! A hybrid partition is read while it is written, and its pushes would
//! otherwise stay in the store's memory for as long as the store's own
//! spill policy leaves them there, competing with every other shuffle for
//! the node's budget. So hybrid pushes also count here, against a budget of
//! their own inside the node's (clamped to it): a push that takes the count
//! past the budget flushes its shuffle to disk before it is answered. The
//! producer waits for its pushes' answers, so that holds it back, and the
//! hybrid bytes in memory stay within the budget plus the pushes in flight.
//! The count errs high, never low: bytes the store flushed on its own stay
//! counted until their shuffle's next flush (a cheap one then), its commit
//! or its removal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The node's hybrid budget.
pub struct HybridBudget {
    capacity: u64,
    held: AtomicU64,
}

impl HybridBudget {
    pub fn new(capacity: u64) -> Arc<HybridBudget> {
        Arc::new(HybridBudget {
            capacity,
            held: AtomicU64::new(0),
        })
    }

    /// Hybrid bytes counted as in memory.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    fn add(&self, bytes: u64) -> u64 {
        let now = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.publish(now);
        now
    }

    fn release(&self, bytes: u64) {
        let now = self.held.fetch_sub(bytes, Ordering::Relaxed) - bytes;
        self.publish(now);
    }

    fn publish(&self, now: u64) {
        metrics::gauge!("switchyard_celeborn_hybrid_memory_bytes").set(now as f64);
    }
}

/// One shuffle's part of the budget; given back when the shuffle is
/// forgotten (its state dropped).
pub struct ShuffleHold {
    budget: Arc<HybridBudget>,
    held: AtomicU64,
}

impl ShuffleHold {
    pub fn new(budget: Arc<HybridBudget>) -> ShuffleHold {
        ShuffleHold {
            budget,
            held: AtomicU64::new(0),
        }
    }

    /// Counts a stored hybrid push; true when the node's hybrid bytes are
    /// now past the budget (the caller flushes this shuffle).
    pub fn add(&self, bytes: u64) -> bool {
        self.held.fetch_add(bytes, Ordering::Relaxed);
        self.budget.add(bytes) > self.budget.capacity
    }

    /// Takes this shuffle's count before a flush: pushes stored while the
    /// flush runs are counted afresh.
    pub fn take(&self) -> u64 {
        self.held.swap(0, Ordering::Relaxed)
    }

    /// The flush of what [`ShuffleHold::take`] took is durable.
    pub fn flushed(&self, taken: u64) {
        self.budget.release(taken);
    }

    /// The flush failed: the bytes are still in memory.
    pub fn restore(&self, taken: u64) {
        self.held.fetch_add(taken, Ordering::Relaxed);
    }
}

impl Drop for ShuffleHold {
    fn drop(&mut self) {
        let held = self.take();
        if held > 0 {
            self.budget.release(held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushes_past_the_budget_ask_for_a_flush_and_flushes_give_back() {
        let budget = HybridBudget::new(100);
        let a = ShuffleHold::new(budget.clone());
        let b = ShuffleHold::new(budget.clone());
        assert!(!a.add(60));
        assert!(!b.add(40));
        assert!(b.add(1), "101 > 100");
        let taken = b.take();
        assert_eq!(taken, 41);
        assert!(a.add(5), "still counted until the flush is done");
        b.flushed(taken);
        assert_eq!(budget.held(), 65);
        let taken = a.take();
        a.restore(taken);
        assert_eq!(budget.held(), 65, "a failed flush keeps the bytes counted");
        drop(a);
        assert_eq!(budget.held(), 0, "a forgotten shuffle gives its bytes back");
    }
}
