//! Fair shares of the memory budget: one application that pushes faster
//! than the disks drain must not take all of it and make every other
//! application's pushes wait (a Celeborn worker pauses everyone at its
//! high watermark).
//!
//! Below `memory.fair_share_from` of the budget, every append is admitted
//! first come, first served. Past it, an application holding more than its
//! share (the budget divided among the applications holding memory and one
//! more, the next to come, in proportion to their users'
//! `memory.user_weights`) is admitted no further until flushes bring it
//! back under, while one under its share is admitted up to the whole
//! budget: the room between the threshold and the capacity is kept for the
//! applications that hold little. A lone application can still fill the
//! budget up to the threshold, and its flushes keep the disks busy.
//!
//! Which applications hold memory, and their weights, are counted by the
//! store's background loop every `memory.spill_check_interval` (a walk of
//! the applications' counters), not on every append.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{Result, StorageError};

/// Weights are kept in thousandths, to sum them in one atomic.
const MILLI: f64 = 1000.0;

pub(crate) struct Shares {
    /// Past this many bytes of the budget, shares apply.
    from_fraction: f64,
    weights: HashMap<String, f64>,
    /// The weights of the applications holding memory, summed, in
    /// thousandths (as last counted).
    active_weight_milli: AtomicU64,
    /// Applications holding memory (as last counted).
    active: AtomicU64,
    /// Those holding more than their share (as last counted): the spill
    /// flushes their partitions first.
    over: Mutex<HashSet<String>>,
}

/// What an application brings to the share check.
pub(crate) struct Claimant<'a> {
    pub(crate) app: &'a str,
    pub(crate) user: Option<&'a str>,
    /// Data bytes it holds in memory now.
    pub(crate) holds: u64,
}

impl Shares {
    pub(crate) fn new(from_fraction: f64, weights: HashMap<String, f64>) -> Self {
        Shares {
            from_fraction,
            weights,
            active_weight_milli: AtomicU64::new(0),
            active: AtomicU64::new(0),
            over: Mutex::new(HashSet::new()),
        }
    }

    /// The weight of an application of `user` (1 unless configured).
    pub(crate) fn weight(&self, user: Option<&str>) -> f64 {
        user.and_then(|u| self.weights.get(u))
            .copied()
            .unwrap_or(1.0)
    }

    /// Records the applications holding memory now, and which of them
    /// hold more than their share of `capacity`.
    pub(crate) fn count_active(&self, holders: &[Claimant<'_>], capacity: u64) {
        let milli: u64 = holders
            .iter()
            .map(|c| (self.weight(c.user) * MILLI) as u64)
            .sum();
        self.active.store(holders.len() as u64, Ordering::Relaxed);
        self.active_weight_milli.store(milli, Ordering::Relaxed);
        let over = holders
            .iter()
            .filter(|c| c.holds > self.share(capacity, self.weight(c.user), c.holds))
            .map(|c| c.app.to_string())
            .collect();
        *self.over.lock() = over;
    }

    /// Whether `app` held more than its share when last counted.
    pub(crate) fn is_over(&self, app: &str) -> bool {
        self.over.lock().contains(app)
    }

    /// Applications holding memory, as last counted.
    pub(crate) fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// The share of `capacity` of an application of weight `weight` that
    /// holds `holds` bytes: `capacity` divided among the applications
    /// holding memory (one that holds nothing yet counted in) and one more
    /// of weight 1, the next to come, so that even a lone application
    /// leaves room for a newcomer.
    pub(crate) fn share(&self, capacity: u64, weight: f64, holds: u64) -> u64 {
        let own = (weight * MILLI) as u64;
        let active = self.active_weight_milli.load(Ordering::Relaxed);
        let mut total = active + MILLI as u64;
        // Not counted yet: it holds nothing, or it started holding since
        // the last count (which found less than itself).
        if holds == 0 || active < own {
            total += own;
        }
        ((capacity as u128 * own as u128) / total.max(1) as u128) as u64
    }

    /// Whether `bytes` more with `used` of `capacity` taken pass the
    /// threshold, where shares apply.
    pub(crate) fn contended(&self, used: u64, bytes: u64, capacity: u64) -> bool {
        self.from_fraction < 1.0
            && used.saturating_add(bytes) > (capacity as f64 * self.from_fraction) as u64
    }

    /// Whether `c` may take `bytes` more with `used` of `capacity` taken:
    /// always below the threshold; past it, only within its share.
    pub(crate) fn check(
        &self,
        c: &Claimant<'_>,
        bytes: u64,
        used: u64,
        capacity: u64,
    ) -> Result<()> {
        if !self.contended(used, bytes, capacity) {
            return Ok(());
        }
        let share = self.share(capacity, self.weight(c.user), c.holds);
        if c.holds.saturating_add(bytes) <= share {
            return Ok(());
        }
        Err(StorageError::OverShare {
            app: c.app.to_string(),
            holds: c.holds,
            share,
            applications: self.active().max(1),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 1000;

    fn claimant(holds: u64) -> Claimant<'static> {
        Claimant {
            app: "a",
            user: None,
            holds,
        }
    }

    /// `n` applications holding 1 byte each, of `user`.
    fn holders(users: &[Option<&'static str>]) -> Vec<Claimant<'static>> {
        users
            .iter()
            .map(|u| Claimant {
                app: "x",
                user: *u,
                holds: 1,
            })
            .collect()
    }

    #[test]
    fn below_the_threshold_everyone_is_admitted() {
        let s = Shares::new(0.8, HashMap::new());
        s.count_active(&holders(&[None, None, None, None]), CAP);
        // Far over its quarter share, but the budget is not contended.
        assert!(s.check(&claimant(700), 100, 700, CAP).is_ok());
    }

    #[test]
    fn past_it_an_application_over_its_share_waits_and_one_under_is_admitted() {
        let s = Shares::new(0.8, HashMap::new());
        s.count_active(&holders(&[None, None]), CAP);
        // Two holders and room for a third: a third each.
        let big = s.check(&claimant(790), 10, 850, CAP).unwrap_err();
        assert!(big.is_backpressure(), "{big}");
        assert!(
            big.to_string().contains("fair share of 333"),
            "names its share: {big}"
        );
        assert!(
            s.check(&claimant(60), 10, 850, CAP).is_ok(),
            "under its share"
        );
        // A newcomer holding nothing counts itself in as well.
        assert_eq!(s.share(CAP, 1.0, 0), 250);
        assert!(s.check(&claimant(0), 250, 850, CAP).is_ok());
        assert!(s.check(&claimant(0), 251, 850, CAP).is_err());
    }

    #[test]
    fn a_lone_application_leaves_room_for_a_newcomer() {
        let s = Shares::new(0.8, HashMap::new());
        s.count_active(&holders(&[None]), CAP);
        assert!(
            s.check(&claimant(790), 10, 790, CAP).is_ok(),
            "up to the threshold"
        );
        assert!(
            s.check(&claimant(800), 100, 800, CAP).is_err(),
            "past it: half"
        );
        assert!(
            s.check(&claimant(0), 200, 800, CAP).is_ok(),
            "the newcomer's room"
        );
        s.count_active(&[], CAP);
        assert!(
            s.check(&claimant(0), 400, 800, CAP).is_ok(),
            "not yet counted"
        );
        assert!(
            s.check(&claimant(850), 10, 850, CAP).is_err(),
            "holding since the last count: counted in"
        );
    }

    #[test]
    fn weights_divide_the_budget() {
        let weights = HashMap::from([("etl".to_string(), 3.0)]);
        let s = Shares::new(0.5, weights);
        s.count_active(&holders(&[Some("etl"), Some("adhoc")]), CAP);
        // 3 + 1, and 1 for the next to come.
        assert_eq!(s.share(CAP, s.weight(Some("etl")), 10), 600);
        assert_eq!(s.share(CAP, s.weight(Some("adhoc")), 10), 200);
        assert_eq!(s.share(CAP, s.weight(None), 10), 200, "default weight 1");
    }

    #[test]
    fn the_applications_over_their_share_are_known() {
        let s = Shares::new(0.8, HashMap::new());
        let c = |app, holds| Claimant {
            app,
            user: None,
            holds,
        };
        s.count_active(&[c("big", 900), c("small", 50), c("mid", 250)], CAP);
        assert!(s.is_over("big"));
        assert!(!s.is_over("small") && !s.is_over("mid"), "a quarter each");
        s.count_active(&[c("small", 50)], CAP);
        assert!(!s.is_over("big"), "recounted");
    }

    #[test]
    fn a_threshold_of_one_turns_shares_off() {
        let s = Shares::new(1.0, HashMap::new());
        s.count_active(&holders(&[None, None, None]), CAP);
        assert!(s.check(&claimant(990), 10, 990, CAP).is_ok());
    }
}
