//! What the Uniffle shuffle server remembers per application beyond the
//! stored blocks: registered shuffles, reported block ids, commit counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;

use switchyard_storage::small_map;

use crate::bitmap::IdBitmap;

pub(crate) struct AppState {
    pub shuffles: DashMap<i32, Arc<ShuffleState>>,
    /// The driver registered with `spark.rss.client.reassign.enabled=true`
    /// (0.10+ clients send their SparkConf with registerShuffle): its writers
    /// move a partition to another server when this one refuses a write, so a
    /// decommissioning server may refuse them. Not kept across a restart,
    /// where it falls back to accepting, as for any client.
    pub reassign: AtomicBool,
}

impl Default for AppState {
    fn default() -> Self {
        AppState {
            shuffles: small_map(),
            reassign: AtomicBool::new(false),
        }
    }
}

pub(crate) struct ShuffleState {
    /// Registered partition ranges, inclusive ends.
    pub ranges: Mutex<Vec<(i32, i32)>>,
    /// Block ids reported by finished map tasks, per partition.
    pub reported: Mutex<HashMap<i32, IdBitmap>>,
    pub commits: AtomicI32,
    pub stage_attempt: AtomicI32,
    /// Partitions a client was told to split (see `split`). The bytes each
    /// partition received here are the store's to count: a map of them
    /// here cost some 40 bytes a partition held.
    split_told: Mutex<std::collections::HashSet<i32>>,
}

impl Default for ShuffleState {
    fn default() -> Self {
        ShuffleState {
            ranges: Mutex::default(),
            reported: Mutex::default(),
            commits: AtomicI32::new(0),
            stage_attempt: AtomicI32::new(0),
            split_told: Mutex::default(),
        }
    }
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

    /// Marks the partition as told to split; true only the first time.
    pub(crate) fn first_split_notice(&self, partition: i32) -> bool {
        self.split_told.lock().insert(partition)
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

    /// The shuffle's registration as a durable note: stage attempt, then
    /// the partition ranges.
    pub(crate) fn registration_note(&self) -> Vec<u8> {
        let ranges = self.ranges.lock();
        let mut out = Vec::with_capacity(8 + ranges.len() * 8);
        out.extend_from_slice(&self.stage_attempt.load(Ordering::Acquire).to_be_bytes());
        out.extend_from_slice(&(ranges.len() as u32).to_be_bytes());
        for &(s, e) in ranges.iter() {
            out.extend_from_slice(&s.to_be_bytes());
            out.extend_from_slice(&e.to_be_bytes());
        }
        out
    }

    /// Applies a note written by [`ShuffleState::registration_note`].
    pub(crate) fn restore_registration(&self, note: &[u8]) -> Option<()> {
        let mut r = Reader(note);
        let attempt = r.i32()?;
        let n = r.u32()? as usize;
        let mut ranges = Vec::with_capacity(n.min(note.len() / 8));
        for _ in 0..n {
            ranges.push((r.i32()?, r.i32()?));
        }
        self.stage_attempt.fetch_max(attempt, Ordering::AcqRel);
        self.add_ranges(ranges);
        Some(())
    }
}

/// One reportShuffleResult as a durable note: per partition its id, the
/// count of block ids, and the ids.
pub(crate) fn report_note(partitions: &[(i32, Vec<i64>)]) -> Vec<u8> {
    let ids: usize = partitions.iter().map(|(_, ids)| ids.len()).sum();
    let mut out = Vec::with_capacity(partitions.len() * 8 + ids * 8);
    for (p, ids) in partitions {
        out.extend_from_slice(&p.to_be_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        for id in ids {
            out.extend_from_slice(&id.to_be_bytes());
        }
    }
    out
}

/// Reads a note written by [`report_note`]; None if it is damaged.
pub(crate) fn parse_report_note(note: &[u8]) -> Option<Vec<(i32, Vec<i64>)>> {
    let mut r = Reader(note);
    let mut out = Vec::new();
    while !r.0.is_empty() {
        let p = r.i32()?;
        let n = r.u32()? as usize;
        let mut ids = Vec::with_capacity(n.min(r.0.len() / 8));
        for _ in 0..n {
            ids.push(r.i64()?);
        }
        out.push((p, ids));
    }
    Some(out)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_round_trip() {
        let report = vec![(3, vec![1, -2, i64::MAX]), (7, vec![])];
        assert_eq!(parse_report_note(&report_note(&report)), Some(report));
        assert_eq!(parse_report_note(&[0, 0, 0, 1, 0, 0, 0, 5]), None, "short");
        let s = ShuffleState::default();
        s.add_ranges([(0, 3), (8, 9)]);
        s.stage_attempt.store(2, Ordering::Release);
        let restored = ShuffleState::default();
        restored
            .restore_registration(&s.registration_note())
            .unwrap();
        assert_eq!(*restored.ranges.lock(), vec![(0, 3), (8, 9)]);
        assert_eq!(restored.stage_attempt.load(Ordering::Acquire), 2);
    }
}
