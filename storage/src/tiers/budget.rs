//! The one memory budget every protocol shares.
//!
//! One counter, charged before a block is accepted (or when a client reserves
//! room ahead, as Uniffle's `requireBuffer` does) and released only after the
//! block's flush is durable. A charge that does not fit fails with
//! [`StorageError::NoBuffer`]: memory never grows past the configured capacity.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Result, StorageError};

#[derive(Debug)]
pub struct MemoryBudget {
    capacity: u64,
    /// Everything charged: reservations, buffered blocks, blocks being flushed.
    used: AtomicU64,
    /// Part of `used` held by reservations not yet turned into blocks.
    reserved: AtomicU64,
    /// Part of `used` held by blocks whose flush is under way.
    flushing: AtomicU64,
    /// Woken on every release: writers waiting for room retry then.
    released: tokio::sync::Notify,
}

impl MemoryBudget {
    pub fn new(capacity: u64) -> Self {
        MemoryBudget {
            capacity,
            used: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            flushing: AtomicU64::new(0),
            released: tokio::sync::Notify::new(),
        }
    }

    /// A future that completes at the next release of memory. Create (and
    /// `enable`) it before the charge that may fail, so that a release
    /// between the failure and the wait is not missed.
    pub(crate) fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }
    pub fn flushing(&self) -> u64 {
        self.flushing.load(Ordering::Acquire)
    }
    /// Bytes buffered and not yet handed to a flush: what spilling can free.
    pub fn unflushed(&self) -> u64 {
        self.used()
            .saturating_sub(self.reserved())
            .saturating_sub(self.flushing())
    }

    /// Charges `bytes` or fails without charging anything.
    pub(crate) fn try_charge(&self, bytes: u64) -> Result<()> {
        if bytes > self.capacity {
            return Err(StorageError::TooLarge {
                requested: bytes,
                capacity: self.capacity,
            });
        }
        let mut current = self.used.load(Ordering::Acquire);
        loop {
            if current + bytes > self.capacity {
                return Err(StorageError::NoBuffer {
                    requested: bytes,
                    available: self.capacity.saturating_sub(current),
                    capacity: self.capacity,
                });
            }
            match self.used.compare_exchange_weak(
                current,
                current + bytes,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    pub(crate) fn release(&self, bytes: u64) {
        let prev = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "memory budget released more than charged");
        if bytes > 0 {
            self.released.notify_waiters();
        }
    }

    pub(crate) fn start_flush(&self, bytes: u64) {
        self.flushing.fetch_add(bytes, Ordering::AcqRel);
    }

    /// A flush finished (durably, or its data was discarded with its shuffle).
    pub(crate) fn end_flush(&self, bytes: u64) {
        self.flushing.fetch_sub(bytes, Ordering::AcqRel);
        self.release(bytes);
    }
}

/// Room reserved ahead of an append (Uniffle's buffer ticket). Dropping it
/// returns whatever was not used.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl Reservation {
    pub(crate) fn new(budget: Arc<MemoryBudget>, bytes: u64) -> Result<Self> {
        budget.try_charge(bytes)?;
        budget.reserved.fetch_add(bytes, Ordering::AcqRel);
        Ok(Reservation { budget, bytes })
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Turns up to `bytes` of the reservation into buffered-block charge and
    /// returns how much it covered.
    pub(crate) fn consume(&mut self, bytes: u64) -> u64 {
        let taken = bytes.min(self.bytes);
        self.bytes -= taken;
        self.budget.reserved.fetch_sub(taken, Ordering::AcqRel);
        taken
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.reserved.fetch_sub(self.bytes, Ordering::AcqRel);
            self.budget.release(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fail_past_capacity_without_side_effects() {
        let b = MemoryBudget::new(100);
        b.try_charge(60).unwrap();
        let err = b.try_charge(50).unwrap_err();
        assert!(err.is_backpressure());
        assert_eq!(b.used(), 60);
        assert!(matches!(
            b.try_charge(101),
            Err(StorageError::TooLarge { .. })
        ));
        b.release(60);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn reservation_returns_unused_part_on_drop() {
        let b = Arc::new(MemoryBudget::new(100));
        let mut r = Reservation::new(b.clone(), 80).unwrap();
        assert_eq!(b.reserved(), 80);
        assert_eq!(r.consume(30), 30);
        assert_eq!(b.reserved(), 50);
        drop(r);
        assert_eq!(b.reserved(), 0);
        assert_eq!(b.used(), 30, "the consumed part stays charged to blocks");
    }
}
