//! What a map partition (Flink, `PartitionType.MAP`) needs beyond its bytes:
//! the handshake's sub-partition count and its regions.
//!
//! One map task writes one location. Its data is a sequence of regions; in
//! each region the records are grouped by sub-partition in ascending order
//! (Celeborn's "Must writing data in reduce partition index order"). Each
//! record is one stored block whose map id is its sub-partition and whose
//! block id is its sequence number in the location, so a region is a range
//! of sequence numbers. A reader of sub-partitions `[start, end]` gets, for
//! every finished region in order, the records of those sub-partitions; in a
//! broadcast region the data is written once (as sub-partition 0) and every
//! reader gets it. Records after the last RegionFinish are not readable, as
//! in Celeborn, whose index only covers finished regions.

use std::ops::Range;

use switchyard_storage::{IndexRecord, Selection};

use super::segments::Segments;

/// How a credit stream cuts stored bytes back into records (fuzzed with the
/// rest of this module's decoding).
pub use super::credit::split_records;

/// Most sub-partitions a handshake may announce: Flink's largest max
/// parallelism (`KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM`,
/// 2^15), so the most reducers a map partition can have. A reader's range
/// and a broadcast region's repeats are bounded by it.
pub const MAX_SUB_PARTITIONS: i32 = 1 << 15;

/// Size of the big-endian header Flink's client writes before each record:
/// sub-partition id, attempt id, batch id, length of the rest.
pub const FLINK_HEADER_LEN: usize = 16;

/// The parsed header of one pushed Flink record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlinkHeader {
    pub sub_partition: i32,
    pub attempt: i32,
    pub batch: i32,
    pub len: i32,
}

impl FlinkHeader {
    pub fn parse(record: &[u8]) -> Option<FlinkHeader> {
        let word = |i: usize| i32::from_be_bytes(record[i..i + 4].try_into().unwrap());
        (record.len() >= FLINK_HEADER_LEN).then(|| FlinkHeader {
            sub_partition: word(0),
            attempt: word(4),
            batch: word(8),
            len: word(12),
        })
    }
}

/// Why a map-partition request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapPartitionError {
    #[error("no handshake yet for this map partition")]
    NoHandshake,
    #[error("bad handshake: {0} sub-partitions (must be in [1, {MAX_SUB_PARTITIONS}])")]
    BadHandshake(i32),
    #[error("data outside a region")]
    NoRegion,
    #[error("record header is shorter than {FLINK_HEADER_LEN} bytes")]
    ShortRecord,
    #[error("record length {header} in its header, but {actual} bytes follow it")]
    LengthMismatch { header: i32, actual: usize },
    #[error("sub-partition {sub} is outside [0, {count})")]
    SubPartitionOutOfRange { sub: i32, count: i32 },
    #[error(
        "Must writing data in reduce partition index order, but now partitionId is {sub} and pre partitionId is {previous}"
    )]
    OutOfOrder { sub: i32, previous: i32 },
    #[error("segment {segment} of sub-partition {sub} starts after segment {last}")]
    SegmentOutOfOrder { sub: i32, segment: i32, last: i32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Region {
    broadcast: bool,
    records: Range<i64>,
}

#[derive(Debug, Clone)]
struct OpenRegion {
    index: i32,
    broadcast: bool,
    first: i64,
    current_sub: i32,
}

/// Region bookkeeping of one map-partition location.
#[derive(Debug, Default, Clone)]
pub struct MapPartition {
    num_sub_partitions: i32,
    buffer_size: i32,
    open: Option<OpenRegion>,
    regions: Vec<Region>,
    /// A hybrid producer's segments, from its first SEGMENT_START on; boxed,
    /// as the blocking shuffle's map partitions (most) never have them.
    segments: Option<Box<Segments>>,
}

/// A committed map partition's handshake and regions, as a worker keeps it
/// until its shuffle goes (see `ShuffleState::seal_maps`): 32 bytes with
/// no allocation for the one region a Flink map task mostly writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedMap {
    num_sub_partitions: i32,
    buffer_size: i32,
    regions: SealedRegions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SealedRegions {
    One(Region),
    Many(Box<[Region]>),
}

impl SealedMap {
    /// The map partition to read it through: committed, nothing open.
    pub fn unseal(&self) -> MapPartition {
        let regions = match &self.regions {
            SealedRegions::One(r) => vec![r.clone()],
            SealedRegions::Many(rs) => rs.to_vec(),
        };
        MapPartition {
            num_sub_partitions: self.num_sub_partitions,
            buffer_size: self.buffer_size,
            open: None,
            regions,
            segments: None,
        }
    }
}

impl MapPartition {
    /// Its handshake and finished regions, compact; None for a hybrid
    /// producer's partition (streams follow its segments) or one that never
    /// got a handshake (read as empty).
    pub fn seal(&self) -> Option<SealedMap> {
        if self.segments.is_some() || self.num_sub_partitions == 0 {
            return None;
        }
        let regions = match self.regions.as_slice() {
            [one] => SealedRegions::One(one.clone()),
            many => SealedRegions::Many(many.into()),
        };
        Some(SealedMap {
            num_sub_partitions: self.num_sub_partitions,
            buffer_size: self.buffer_size,
            regions,
        })
    }

    pub fn handshake(
        &mut self,
        num_sub_partitions: i32,
        buffer_size: i32,
    ) -> Result<(), MapPartitionError> {
        if !(1..=MAX_SUB_PARTITIONS).contains(&num_sub_partitions) {
            return Err(MapPartitionError::BadHandshake(num_sub_partitions));
        }
        self.num_sub_partitions = num_sub_partitions;
        self.buffer_size = buffer_size;
        Ok(())
    }

    pub fn num_sub_partitions(&self) -> i32 {
        self.num_sub_partitions
    }

    /// The Flink network buffer size from the handshake: no record sent to a
    /// reader may be larger.
    pub fn buffer_size(&self) -> i32 {
        self.buffer_size
    }

    /// Starts a region; `next_record` is the sequence number the region's
    /// first record will get. An unfinished region is dropped, as its data
    /// would be in Celeborn (no index entry covers it).
    pub fn region_start(
        &mut self,
        index: i32,
        broadcast: bool,
        next_record: i64,
    ) -> Result<(), MapPartitionError> {
        if self.num_sub_partitions == 0 {
            return Err(MapPartitionError::NoHandshake);
        }
        self.open = Some(OpenRegion {
            index,
            broadcast,
            first: next_record,
            current_sub: 0,
        });
        Ok(())
    }

    /// Checks one pushed record before it is stored; returns its header.
    pub fn accept(&mut self, record: &[u8]) -> Result<FlinkHeader, MapPartitionError> {
        let header = FlinkHeader::parse(record).ok_or(MapPartitionError::ShortRecord)?;
        let actual = record.len() - FLINK_HEADER_LEN;
        if header.len < 0 || header.len as usize != actual {
            return Err(MapPartitionError::LengthMismatch {
                header: header.len,
                actual,
            });
        }
        let count = self.num_sub_partitions;
        let open = self.open.as_mut().ok_or(MapPartitionError::NoRegion)?;
        let sub = header.sub_partition;
        if sub < 0 || sub >= count {
            return Err(MapPartitionError::SubPartitionOutOfRange { sub, count });
        }
        if sub < open.current_sub {
            return Err(MapPartitionError::OutOfOrder {
                sub,
                previous: open.current_sub,
            });
        }
        open.current_sub = sub;
        if let Some(segments) = &mut self.segments {
            segments.count(sub);
        }
        Ok(header)
    }

    /// SEGMENT_START: segment `segment` of `sub` begins with the next record
    /// of `sub` (see [`Segments`]).
    pub fn segment_start(&mut self, sub: i32, segment: i32) -> Result<(), MapPartitionError> {
        if self.num_sub_partitions == 0 {
            return Err(MapPartitionError::NoHandshake);
        }
        let count = self.num_sub_partitions;
        self.segments
            .get_or_insert_with(|| Box::new(Segments::new(count)))
            .start(sub, segment)
    }

    /// Whether a hybrid producer writes this partition (segment by segment).
    pub fn has_segments(&self) -> bool {
        self.segments.is_some()
    }

    /// The segment of the `index`-th record of `sub` (0 when unknown).
    pub fn segment_of(&self, sub: i32, index: i64) -> i32 {
        self.segments
            .as_ref()
            .and_then(|s| s.segment_of(sub, index))
            .unwrap_or(0)
    }

    /// Finishes the open region; `next_record` is one past its last record.
    /// A region without records leaves no trace. Returns the region's index.
    pub fn region_finish(&mut self, next_record: i64) -> Option<i32> {
        let open = self.open.take()?;
        if next_record > open.first {
            self.regions.push(Region {
                broadcast: open.broadcast,
                records: open.first..next_record,
            });
        }
        Some(open.index)
    }

    pub fn regions(&self) -> usize {
        self.regions.len()
    }

    /// What a reader of sub-partitions `[start, end]` gets, in order, from a
    /// location's stored records (in data order; block id = sequence number,
    /// map id = sub-partition): region by region, the records of those
    /// sub-partitions, ascending as written; a broadcast region's records
    /// (written once, as sub-partition 0) once for each sub-partition of the
    /// range, as Celeborn's index gives every sub-partition of a broadcast
    /// region the same entry. Flink counts on it: the end-of-partition event
    /// is a broadcast region, and a reader waits for one per sub-partition.
    ///
    /// A broadcast region is held once, as a run repeated per sub-partition
    /// (the range is at most [`MAX_SUB_PARTITIONS`] wide), so the selection
    /// never holds more records than the location stored.
    pub fn select(&self, records: Vec<IndexRecord>, start: i32, end: i32) -> Selection {
        self.select_after(records, start, end, 0)
    }

    /// [`MapPartition::select`] of the finished regions after the first
    /// `skip` (a stream that follows a partition still being written).
    pub fn select_after(
        &self,
        records: Vec<IndexRecord>,
        start: i32,
        end: i32,
        skip: usize,
    ) -> Selection {
        let repeat = u32::try_from(i64::from(end) - i64::from(start) + 1).unwrap_or(0);
        let (start, end) = (start as i64, end as i64);
        let mut out = Selection::default();
        let mut rest = records.as_slice();
        for region in self.regions.iter().skip(skip) {
            // Records are in sequence order: skip to this region, take it.
            let from = rest.partition_point(|r| r.block_id < region.records.start);
            rest = &rest[from..];
            let len = rest.partition_point(|r| r.block_id < region.records.end);
            let (records, after) = rest.split_at(len);
            rest = after;
            if region.broadcast {
                out.push_run(records.iter().filter(|r| r.map_id == 0).copied(), repeat);
            } else {
                let wanted = records.iter().filter(|r| (start..=end).contains(&r.map_id));
                out.push_run(wanted.copied(), 1);
            }
        }
        out
    }
}

/// Version byte of [`MapPartition::to_note`]'s encoding.
const NOTE_FORMAT: u8 = 1;
/// Bytes of the note's header (format, sub-partitions, buffer size, region
/// count) and of each region (broadcast flag, first and end record).
const NOTE_HEADER: usize = 1 + 4 + 4 + 4;
const NOTE_REGION: usize = 1 + 8 + 8;

impl MapPartition {
    /// The finished regions and the handshake, as the store keeps them beside
    /// a committed map partition, so a restarted worker serves it again. An
    /// open region is not kept (it is not readable either).
    pub fn to_note(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(NOTE_HEADER + NOTE_REGION * self.regions.len());
        out.push(NOTE_FORMAT);
        out.extend_from_slice(&self.num_sub_partitions.to_be_bytes());
        out.extend_from_slice(&self.buffer_size.to_be_bytes());
        out.extend_from_slice(&(self.regions.len() as u32).to_be_bytes());
        for r in &self.regions {
            out.push(u8::from(r.broadcast));
            out.extend_from_slice(&r.records.start.to_be_bytes());
            out.extend_from_slice(&r.records.end.to_be_bytes());
        }
        out
    }

    /// Reads [`MapPartition::to_note`]'s bytes; None when they are not a
    /// note of this format (damaged, or from a newer build).
    pub fn from_note(bytes: &[u8]) -> Option<MapPartition> {
        let (&format, rest) = bytes.split_first()?;
        if format != NOTE_FORMAT || rest.len() < NOTE_HEADER - 1 {
            return None;
        }
        let word = |b: &[u8], i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap());
        let num_sub_partitions = word(rest, 0) as i32;
        let buffer_size = word(rest, 4) as i32;
        let count = word(rest, 8) as usize;
        let body = &rest[12..];
        // The count must match the bytes that follow before anything is built.
        if !(1..=MAX_SUB_PARTITIONS).contains(&num_sub_partitions)
            || body.len() != count.checked_mul(NOTE_REGION)?
        {
            return None;
        }
        let long = |b: &[u8]| i64::from_be_bytes(b.try_into().unwrap());
        let regions = body
            .chunks_exact(NOTE_REGION)
            .map(|r| {
                let records = long(&r[1..9])..long(&r[9..17]);
                (r[0] <= 1 && records.start <= records.end).then_some(Region {
                    broadcast: r[0] == 1,
                    records,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(MapPartition {
            num_sub_partitions,
            buffer_size,
            open: None,
            regions,
            segments: None,
        })
    }

    /// One past the last record of the last finished region.
    pub fn records_end(&self) -> i64 {
        self.regions.last().map_or(0, |r| r.records.end)
    }
}

/// A Flink record as the client pushes it (tests).
#[cfg(test)]
pub(crate) fn test_record(sub: i32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for word in [sub, 1, 2, payload.len() as i32] {
        v.extend_from_slice(&word.to_be_bytes());
    }
    v.extend_from_slice(payload);
    v
}

#[cfg(test)]
mod tests {
    use super::test_record as record;
    use super::*;

    fn stored(seq: i64, sub: i64) -> IndexRecord {
        IndexRecord {
            offset: 0,
            length: 0,
            uncompressed_len: 0,
            crc: 0,
            block_id: seq,
            map_id: sub,
        }
    }

    #[test]
    fn headers_are_big_endian() {
        let r = record(7, b"abc");
        assert_eq!(
            FlinkHeader::parse(&r),
            Some(FlinkHeader {
                sub_partition: 7,
                attempt: 1,
                batch: 2,
                len: 3
            })
        );
        assert_eq!(FlinkHeader::parse(&r[..15]), None);
    }

    #[test]
    fn records_need_a_handshake_a_region_and_ascending_sub_partitions() {
        let mut m = MapPartition::default();
        assert_eq!(
            m.region_start(0, false, 0),
            Err(MapPartitionError::NoHandshake)
        );
        assert!(m.handshake(0, 32768).is_err());
        m.handshake(4, 32768).unwrap();
        assert_eq!(m.accept(&record(0, b"x")), Err(MapPartitionError::NoRegion));
        m.region_start(0, false, 0).unwrap();
        assert_eq!(m.accept(&record(1, b"x")).map(|h| h.sub_partition), Ok(1));
        assert_eq!(m.accept(&record(1, b"y")).map(|h| h.sub_partition), Ok(1));
        assert_eq!(m.accept(&record(3, b"z")).map(|h| h.sub_partition), Ok(3));
        assert_eq!(
            m.accept(&record(2, b"x")),
            Err(MapPartitionError::OutOfOrder {
                sub: 2,
                previous: 3
            })
        );
        assert_eq!(
            m.accept(&record(4, b"x")),
            Err(MapPartitionError::SubPartitionOutOfRange { sub: 4, count: 4 })
        );
        let mut lying = record(3, b"abc");
        lying.truncate(18);
        assert!(matches!(
            m.accept(&lying),
            Err(MapPartitionError::LengthMismatch {
                header: 3,
                actual: 2
            })
        ));
        // A new region starts again at sub-partition 0.
        assert_eq!(m.region_finish(3), Some(0));
        m.region_start(1, false, 3).unwrap();
        assert_eq!(m.accept(&record(0, b"x")).map(|h| h.sub_partition), Ok(0));
    }

    #[test]
    fn readers_get_their_sub_partitions_of_finished_regions_and_every_broadcast() {
        let mut m = MapPartition::default();
        m.handshake(4, 32768).unwrap();
        // Region 0: records 0..4 with subs 0, 1, 1, 3.
        m.region_start(0, false, 0).unwrap();
        assert_eq!(m.region_finish(4), Some(0));
        // An empty region leaves nothing.
        m.region_start(1, false, 4).unwrap();
        m.region_finish(4);
        // Region 2 (broadcast): records 4..6, all sub 0.
        m.region_start(2, true, 4).unwrap();
        m.region_finish(6);
        // Region 3 never finishes: record 6 is unreadable.
        m.region_start(3, false, 6).unwrap();
        assert_eq!(m.regions(), 2);

        let subs = [0, 1, 1, 3, 0, 0, 2];
        let stored: Vec<IndexRecord> = (0..subs.len() as i64)
            .map(|seq| stored(seq, subs[seq as usize]))
            .collect();
        let read = |start, end| -> Vec<i64> {
            m.select(stored.clone(), start, end)
                .iter()
                .map(|r| r.block_id)
                .collect()
        };
        assert_eq!(read(1, 1), vec![1, 2, 4, 5]);
        // The broadcast region once per sub-partition of the range.
        assert_eq!(read(0, 3), vec![0, 1, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5]);
        assert_eq!(read(2, 2), vec![4, 5]);
        assert_eq!(read(3, 3), vec![3, 4, 5]);
        assert_eq!(read(1, 2), vec![1, 2, 4, 5, 4, 5]);
    }

    #[test]
    fn handshakes_past_flinks_max_parallelism_are_refused() {
        let mut m = MapPartition::default();
        for bad in [i32::MAX, MAX_SUB_PARTITIONS + 1, 0, -1] {
            let err = m.handshake(bad, 32768).unwrap_err();
            assert_eq!(err, MapPartitionError::BadHandshake(bad));
            assert!(err.to_string().contains("[1, 32768]"), "{err}");
        }
        assert_eq!(m.num_sub_partitions(), 0, "nothing accepted");
        m.handshake(MAX_SUB_PARTITIONS, 32768).unwrap();
        assert_eq!(m.num_sub_partitions(), MAX_SUB_PARTITIONS);
    }

    #[test]
    fn a_broadcast_read_over_every_sub_partition_holds_each_record_once() {
        let n = MAX_SUB_PARTITIONS;
        let mut m = MapPartition::default();
        m.handshake(n, 32768).unwrap();
        // Region 0: records 0..3 for subs 0, 5 and n-1; region 1 (broadcast):
        // records 3..5; region 2: record 5 for sub 5.
        m.region_start(0, false, 0).unwrap();
        m.region_finish(3);
        m.region_start(1, true, 3).unwrap();
        m.region_finish(5);
        m.region_start(2, false, 5).unwrap();
        m.region_finish(6);
        let subs = [0, 5, n as i64 - 1, 0, 0, 5];
        let stored: Vec<IndexRecord> = (0..6).map(|seq| stored(seq, subs[seq as usize])).collect();

        let all = m.select(stored.clone(), 0, n - 1);
        // The index built: six records and three runs, not 2 × 32768 copies.
        assert_eq!(all.records.len(), 6);
        assert_eq!(all.runs.len(), 3);
        assert_eq!(all.total_records(), 3 + 2 * n as u64 + 1);
        let order: Vec<i64> = all.iter().map(|r| r.block_id).take(7).collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4, 3, 4]);
        assert_eq!(all.iter().last().map(|r| r.block_id), Some(5));

        // Every sub-partition's reader gets its own records and the broadcast.
        for sub in 0..n {
            let read: Vec<i64> = m
                .select(stored.clone(), sub, sub)
                .iter()
                .map(|r| r.block_id)
                .collect();
            let want: Vec<i64> = match sub as i64 {
                0 => vec![0, 3, 4],
                5 => vec![1, 3, 4, 5],
                s if s == n as i64 - 1 => vec![2, 3, 4],
                _ => vec![3, 4],
            };
            assert_eq!(read, want, "sub-partition {sub}");
        }
    }

    #[test]
    fn sealed_maps_keep_the_handshake_and_finished_regions() {
        assert_eq!(MapPartition::default().seal(), None, "no handshake");
        let mut m = MapPartition::default();
        m.handshake(4, 32768).unwrap();
        let none = m.seal().expect("a handshake without regions seals");
        assert!(none.unseal().regions.is_empty());
        m.region_start(0, false, 0).unwrap();
        m.region_finish(3);
        let one = m.seal().unwrap();
        assert!(matches!(one.regions, SealedRegions::One(_)));
        m.region_start(1, true, 3).unwrap();
        m.region_finish(4);
        m.region_start(2, false, 4).unwrap(); // open: not kept
        let two = m.seal().unwrap();
        assert!(matches!(two.regions, SealedRegions::Many(_)));
        let back = two.unseal();
        assert_eq!(back.regions, m.regions);
        assert_eq!((back.num_sub_partitions(), back.buffer_size()), (4, 32768));
        assert!(back.open.is_none());
        assert_eq!(back.to_note(), m.to_note());
        assert_eq!(std::mem::size_of::<SealedMap>(), 32);
    }

    #[test]
    fn notes_round_trip_and_refuse_what_they_cannot_read() {
        let mut m = MapPartition::default();
        m.handshake(4, 32768).unwrap();
        m.region_start(0, false, 0).unwrap();
        m.region_finish(3);
        m.region_start(1, true, 3).unwrap();
        m.region_finish(4);
        m.region_start(2, false, 4).unwrap(); // open: not kept
        let note = m.to_note();
        let back = MapPartition::from_note(&note).expect("decodes");
        assert_eq!(back.regions, m.regions);
        assert_eq!(back.num_sub_partitions(), 4);
        assert_eq!(back.buffer_size(), 32768);
        assert_eq!(back.records_end(), 4);
        assert!(back.open.is_none());
        // truncated, a lying count, a newer format, a bad flag
        assert!(MapPartition::from_note(&note[..note.len() - 1]).is_none());
        let mut lying = note.clone();
        lying[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(MapPartition::from_note(&lying).is_none());
        let mut newer = note.clone();
        newer[0] = 2;
        assert!(MapPartition::from_note(&newer).is_none());
        let mut flag = note.clone();
        flag[13] = 7;
        assert!(MapPartition::from_note(&flag).is_none());
        assert!(MapPartition::from_note(&[]).is_none());
    }
}
