//! What an application wrote and had acknowledged, checked against what it
//! read back: every acknowledged record exactly once, nothing else.

use std::collections::HashMap;

use super::record::Decoded;

/// The records a partition's writers had acknowledged, by id.
#[derive(Debug, Default, Clone)]
pub struct Acked {
    by_partition: HashMap<i32, Vec<u64>>,
}

impl Acked {
    pub fn add(&mut self, partition: i32, ids: impl IntoIterator<Item = u64>) {
        self.by_partition.entry(partition).or_default().extend(ids);
    }

    pub fn partitions(&self) -> impl Iterator<Item = i32> + '_ {
        self.by_partition.keys().copied()
    }

    pub fn records(&self) -> usize {
        self.by_partition.values().map(Vec::len).sum()
    }

    /// Checks what a reader got for `partition` against what was acked.
    pub fn check(&self, partition: i32, read: &Decoded) -> Verdict {
        let expected = self.by_partition.get(&partition).map_or(&[][..], |v| v);
        let mut seen: HashMap<u64, u32> = expected.iter().map(|id| (*id, 0)).collect();
        let mut verdict = Verdict {
            corrupt: read.corrupt as u64,
            ..Verdict::default()
        };
        for (id, p) in &read.records {
            match seen.get_mut(id) {
                Some(n) if *p == partition => *n += 1,
                // Another partition's record, another application's, or one
                // never acknowledged.
                _ => verdict.misplaced += 1,
            }
        }
        for n in seen.values() {
            match n {
                0 => verdict.lost += 1,
                1 => verdict.exact += 1,
                more => {
                    verdict.exact += 1;
                    verdict.duplicated += u64::from(more - 1);
                }
            }
        }
        verdict
    }
}

/// How a read compared with what was acknowledged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// Acknowledged records read (at least once).
    pub exact: u64,
    /// Acknowledged records never read.
    pub lost: u64,
    /// Extra copies of acknowledged records.
    pub duplicated: u64,
    /// Records that failed their checks (CRC, payload, framing).
    pub corrupt: u64,
    /// Intact records that do not belong here.
    pub misplaced: u64,
}

impl Verdict {
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.duplicated == 0 && self.corrupt == 0 && self.misplaced == 0
    }
}

impl std::ops::AddAssign for Verdict {
    fn add_assign(&mut self, o: Verdict) {
        self.exact += o.exact;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.corrupt += o.corrupt;
        self.misplaced += o.misplaced;
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::{record_id, Decoded};
    use super::*;

    fn read(records: &[(u64, i32)]) -> Decoded {
        Decoded {
            records: records.to_vec(),
            corrupt: 0,
        }
    }

    #[test]
    fn exactly_once_is_clean() {
        let mut acked = Acked::default();
        acked.add(0, [record_id(1, 1), record_id(1, 2)]);
        let v = acked.check(0, &read(&[(record_id(1, 2), 0), (record_id(1, 1), 0)]));
        assert!(v.clean(), "{v:?}");
        assert_eq!(v.exact, 2);
    }

    #[test]
    fn lost_duplicated_and_misplaced_are_counted() {
        let mut acked = Acked::default();
        acked.add(0, [record_id(1, 1), record_id(1, 2), record_id(1, 3)]);
        acked.add(1, [record_id(1, 4)]);
        let v = acked.check(
            0,
            &read(&[
                (record_id(1, 1), 0),
                (record_id(1, 1), 0),
                (record_id(1, 1), 0),
                (record_id(1, 2), 0),
                // partition 1's record, and another application's
                (record_id(1, 4), 1),
                (record_id(2, 1), 0),
            ]),
        );
        assert_eq!(
            v,
            Verdict {
                exact: 2,
                lost: 1,
                duplicated: 2,
                corrupt: 0,
                misplaced: 2
            }
        );
        assert!(!v.clean());
    }

    #[test]
    fn a_corrupt_read_is_not_clean() {
        let acked = Acked::default();
        let v = acked.check(
            3,
            &Decoded {
                records: vec![],
                corrupt: 1,
            },
        );
        assert_eq!(v.corrupt, 1);
        assert!(!v.clean());
    }
}
