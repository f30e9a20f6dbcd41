//! Segments of a hybrid-shuffle map partition (Flink 1.20's tiered storage
//! with Celeborn as its remote tier, Celeborn's CIP-6).
//!
//! A hybrid producer cuts each sub-partition's data into segments and says
//! SEGMENT_START (sub-partition, segment id) before the first record of each;
//! a reader asks for one segment of a sub-partition at a time
//! (NOTIFY_REQUIRED_SEGMENT) and must get no record of a later one before it
//! asked, since Flink may read that segment from another tier. The producer
//! waits for its pushes in flight before a SEGMENT_START, and the push port
//! handles a map partition's frames in order, so a segment's records are
//! exactly the sub-partition's records counted from its start on: a start is
//! kept as (segment id, index of its first record among the sub-partition's
//! records), and a reader, which gets each sub-partition's records in push
//! order, finds a record's segment from that index alone.

use super::map_partition::MapPartitionError;

#[derive(Debug, Default, Clone)]
pub struct Segments {
    /// Per sub-partition: (segment id, index of its first record), with
    /// ascending ids.
    starts: Vec<Vec<(i32, i64)>>,
    /// Records of each sub-partition accepted so far.
    records: Vec<i64>,
}

impl Segments {
    pub fn new(num_sub_partitions: i32) -> Segments {
        let n = usize::try_from(num_sub_partitions).unwrap_or(0);
        Segments {
            starts: vec![Vec::new(); n],
            records: vec![0; n],
        }
    }

    /// Records that segment `segment` of `sub` starts with its next record.
    /// A negative id (a client re-announcing a sub-partition it never
    /// started) and a repeat of the current segment change nothing.
    pub fn start(&mut self, sub: i32, segment: i32) -> Result<(), MapPartitionError> {
        let count = self.starts.len() as i32;
        let i = usize::try_from(sub)
            .ok()
            .filter(|&i| i < self.starts.len())
            .ok_or(MapPartitionError::SubPartitionOutOfRange { sub, count })?;
        if segment < 0 {
            return Ok(());
        }
        let starts = &mut self.starts[i];
        match starts.last() {
            Some(&(last, _)) if segment == last => Ok(()),
            Some(&(last, _)) if segment < last => {
                Err(MapPartitionError::SegmentOutOfOrder { sub, segment, last })
            }
            _ => {
                starts.push((segment, self.records[i]));
                Ok(())
            }
        }
    }

    /// Counts one accepted record of `sub` (already checked to be in range).
    pub fn count(&mut self, sub: i32) {
        if let Some(n) = usize::try_from(sub)
            .ok()
            .and_then(|i| self.records.get_mut(i))
        {
            *n += 1;
        }
    }

    /// The segment of the `index`-th record of `sub`; None for a record
    /// before any segment start (not a hybrid producer's).
    pub fn segment_of(&self, sub: i32, index: i64) -> Option<i32> {
        let starts = self.starts.get(usize::try_from(sub).ok()?)?;
        let after = starts.partition_point(|&(_, first)| first <= index);
        after.checked_sub(1).map(|i| starts[i].0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_belong_to_the_last_segment_started_before_them() {
        let mut s = Segments::new(2);
        s.start(0, 0).unwrap();
        s.count(0);
        s.count(0);
        s.start(1, 0).unwrap();
        s.count(1);
        // A memory tier may have taken segments 1 and 2 of sub-partition 0.
        s.start(0, 3).unwrap();
        s.count(0);
        assert_eq!(s.segment_of(0, 0), Some(0));
        assert_eq!(s.segment_of(0, 1), Some(0));
        assert_eq!(s.segment_of(0, 2), Some(3));
        assert_eq!(s.segment_of(0, 99), Some(3));
        assert_eq!(s.segment_of(1, 0), Some(0));
        assert_eq!(s.segment_of(2, 0), None);
    }

    #[test]
    fn bad_starts_are_refused_and_repeats_ignored() {
        let mut s = Segments::new(2);
        assert!(s.start(2, 0).is_err());
        assert!(s.start(-1, 0).is_err());
        s.start(0, -1).unwrap();
        assert_eq!(s.segment_of(0, 0), None);
        s.start(0, 1).unwrap();
        s.count(0);
        s.start(0, 1).unwrap();
        assert_eq!(s.segment_of(0, 1), Some(1));
        assert_eq!(
            s.start(0, 0),
            Err(MapPartitionError::SegmentOutOfOrder {
                sub: 0,
                segment: 0,
                last: 1
            })
        );
    }
}
