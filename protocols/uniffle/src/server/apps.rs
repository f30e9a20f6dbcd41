//! What the Uniffle shuffle server remembers per application beyond the
//! stored blocks: registered shuffles, reported block ids, commit counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::bitmap::IdBitmap;

#[derive(Default)]
pub(crate) struct AppState {
    pub shuffles: DashMap<i32, Arc<ShuffleState>>,
}

#[derive(Default)]
pub(crate) struct ShuffleState {
    /// Registered partition ranges, inclusive ends.
    pub ranges: Mutex<Vec<(i32, i32)>>,
    /// Block ids reported by finished map tasks, per partition.
    pub reported: Mutex<HashMap<i32, IdBitmap>>,
    pub commits: AtomicI32,
    pub stage_attempt: AtomicI32,
}

impl ShuffleState {
    pub(crate) fn add_ranges(&self, ranges: impl IntoIterator<Item = (i32, i32)>) {
        let mut mine = self.ranges.lock();
        for r in ranges {
            if !mine.contains(&r) {
                mine.push(r);
            }
        }
    }

    pub(crate) fn has_partition(&self, p: i32) -> bool {
        self.ranges.lock().iter().any(|&(s, e)| s <= p && p <= e)
    }

    pub(crate) fn report(&self, partition: i32, ids: &[i64]) {
        let mut reported = self.reported.lock();
        let bitmap = reported.entry(partition).or_default();
        for &id in ids {
            bitmap.insert_i64(id);
        }
    }

    pub(crate) fn result(&self, partitions: &[i32]) -> IdBitmap {
        let reported = self.reported.lock();
        let mut out = IdBitmap::new();
        for p in partitions {
            if let Some(b) = reported.get(p) {
                out.union_with(b);
            }
        }
        out
    }

    pub(crate) fn commit(&self) -> i32 {
        self.commits.fetch_add(1, Ordering::AcqRel) + 1
    }
}
