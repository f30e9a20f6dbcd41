//! Sequential chunked reads (Celeborn's streams).
//!
//! A view cuts a partition's persisted blocks into chunks whose boundaries
//! fall on block boundaries. An unfiltered view keeps data order, so each
//! chunk is one contiguous range. A map-range view keeps only blocks whose map
//! id is in the range, ordered by map id (arrival order within a map), as
//! Celeborn's sorted reads for AQE skew splits require.

use std::ops::Range;
use std::sync::Arc;

use crate::block::IndexRecord;
use crate::error::{Result, StorageError};
use crate::id::PartitionKey;
use crate::tiers::partition::Partition;

/// One chunk: logical byte ranges of the partition, read back to back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub ranges: Vec<(u64, u64)>,
    pub len: u64,
    /// Index records (blocks) in the chunk: what a credit stream announces as
    /// its backlog before it reads anything.
    pub records: usize,
}

pub struct PartitionView {
    partition: Arc<Partition>,
    pub chunks: Vec<Chunk>,
    pub blocks: usize,
}

impl PartitionView {
    pub fn key(&self) -> &PartitionKey {
        self.partition.key()
    }

    pub fn total_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).sum()
    }

    /// Chunk start offsets plus the end, for a view whose chunks are contiguous
    /// and in data order (an unfiltered view): Celeborn's `chunkOffsets`.
    pub fn chunk_offsets(&self) -> Option<Vec<u64>> {
        let mut out = vec![self.chunks.first().map(|c| c.ranges[0].0).unwrap_or(0)];
        for c in &self.chunks {
            let [(start, len)] = c.ranges[..] else {
                return None;
            };
            if start != *out.last().unwrap() {
                return None;
            }
            out.push(start + len);
        }
        Some(out)
    }
}

/// Cuts records into chunks of at least `chunk_size` bytes (the last may be
/// smaller), merging physically adjacent records into one range.
pub(crate) fn chunk_records(records: &[IndexRecord], chunk_size: u64) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut current = Chunk {
        ranges: Vec::new(),
        len: 0,
        records: 0,
    };
    for r in records {
        add_record(&mut current, r);
        if current.len >= chunk_size {
            chunks.push(std::mem::replace(
                &mut current,
                Chunk {
                    ranges: Vec::new(),
                    len: 0,
                    records: 0,
                },
            ));
        }
    }
    if !current.ranges.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// What a selected view reads, in order: runs of records, each run read
/// `repeat` times in a row. A record served many times (Flink's broadcast
/// regions, once per sub-partition read) is held once with its count, so a
/// view costs what the partition's index costs, never the reader's range
/// times it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Every record any run reads, once.
    pub records: Vec<IndexRecord>,
    pub runs: Vec<Run>,
}

/// `records[range]` of a [`Selection`], `repeat` times over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub range: Range<usize>,
    pub repeat: u32,
}

impl Selection {
    /// Appends `records` as a run read `repeat` times (nothing when either
    /// is empty).
    pub fn push_run(&mut self, records: impl IntoIterator<Item = IndexRecord>, repeat: u32) {
        let start = self.records.len();
        self.records.extend(records);
        if repeat > 0 && self.records.len() > start {
            self.runs.push(Run {
                range: start..self.records.len(),
                repeat,
            });
        } else {
            self.records.truncate(start);
        }
    }

    /// Records read, repeats counted.
    pub fn total_records(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| r.range.len() as u64 * u64::from(r.repeat))
            .sum()
    }

    /// The records in reading order, repeats included, computed as they go.
    pub fn iter(&self) -> impl Iterator<Item = &IndexRecord> + '_ {
        self.runs.iter().flat_map(move |run| {
            let records = &self.records[run.range.clone()];
            (0..run.repeat).flat_map(move |_| records.iter())
        })
    }
}

/// A view over a [`Selection`] whose chunks are cut as they are asked for,
/// in order: the same chunks [`chunk_records`] would cut from the expanded
/// records, but only one at a time is ever built.
pub struct SelectedView {
    partition: Arc<Partition>,
    selection: Selection,
    chunk_size: u64,
    /// Records the view reads, repeats counted.
    pub blocks: u64,
}

impl SelectedView {
    pub fn key(&self) -> &PartitionKey {
        self.partition.key()
    }

    pub fn selection(&self) -> &Selection {
        &self.selection
    }

    /// Bytes the view reads, repeats counted.
    pub fn total_bytes(&self) -> u64 {
        self.selection
            .runs
            .iter()
            .map(|run| {
                let len: u64 = self.selection.records[run.range.clone()]
                    .iter()
                    .map(|r| u64::from(r.length))
                    .sum();
                len * u64::from(run.repeat)
            })
            .sum()
    }

    /// The chunks, in order, each built when the iterator reaches it.
    pub fn chunks(&self) -> impl Iterator<Item = Chunk> + '_ {
        let mut records = self.selection.iter().peekable();
        let chunk_size = self.chunk_size;
        std::iter::from_fn(move || {
            records.peek()?;
            let mut current = Chunk {
                ranges: Vec::new(),
                len: 0,
                records: 0,
            };
            for r in records.by_ref() {
                add_record(&mut current, r);
                if current.len >= chunk_size {
                    break;
                }
            }
            Some(current)
        })
    }
}

fn add_record(chunk: &mut Chunk, r: &IndexRecord) {
    match chunk.ranges.last_mut() {
        Some((start, len)) if *start + *len == r.offset => *len += r.length as u64,
        _ => chunk.ranges.push((r.offset, r.length as u64)),
    }
    chunk.len += r.length as u64;
    chunk.records += 1;
}

impl PartitionView {
    /// A view of a partition's `index` (its records in data order): `maps`
    /// keeps only blocks whose map id is in the range, ordered by map id.
    pub(crate) fn open(
        partition: Arc<Partition>,
        index: &[u8],
        maps: Option<Range<i64>>,
        chunk_size: u64,
    ) -> PartitionView {
        let mut records = IndexRecord::decode_all(index);
        if let Some(maps) = &maps {
            records.retain(|r| maps.contains(&r.map_id));
            // Stable: arrival order is kept within each map.
            records.sort_by_key(|r| r.map_id);
        }
        PartitionView {
            partition,
            chunks: chunk_records(&records, chunk_size.max(1)),
            blocks: records.len(),
        }
    }

    pub(crate) fn partition(&self) -> &Partition {
        &self.partition
    }

    /// The chunk at `index`, or [`StorageError::NoSuchChunk`].
    pub(crate) fn chunk(&self, index: usize) -> Result<&Chunk> {
        self.chunks.get(index).ok_or(StorageError::NoSuchChunk {
            index,
            count: self.chunks.len(),
        })
    }
}

impl SelectedView {
    /// A view of the records `select` picks from a partition's `index`.
    pub(crate) fn open(
        partition: Arc<Partition>,
        index: &[u8],
        select: impl FnOnce(Vec<IndexRecord>) -> Selection,
        chunk_size: u64,
    ) -> SelectedView {
        let selection = select(IndexRecord::decode_all(index));
        SelectedView {
            partition,
            blocks: selection.total_records(),
            selection,
            chunk_size: chunk_size.max(1),
        }
    }

    pub(crate) fn partition(&self) -> &Partition {
        &self.partition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: u64, length: u32, map_id: i64) -> IndexRecord {
        IndexRecord {
            offset,
            length,
            uncompressed_len: 0,
            crc: 0,
            block_id: 0,
            map_id,
        }
    }

    #[test]
    fn chunks_end_on_block_boundaries() {
        let recs = [rec(0, 5, 0), rec(5, 5, 1), rec(10, 5, 0), rec(15, 2, 1)];
        let chunks = chunk_records(&recs, 8);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].ranges, vec![(0, 10)]);
        assert_eq!(chunks[1].ranges, vec![(10, 7)]);
        assert_eq!((chunks[0].records, chunks[1].records), (2, 2));
    }

    #[test]
    fn repeated_records_are_read_again() {
        let recs = [rec(0, 5, 0), rec(0, 5, 0), rec(5, 5, 1)];
        let chunks = chunk_records(&recs, 100);
        assert_eq!(chunks[0].ranges, vec![(0, 5), (0, 10)]);
        assert_eq!(chunks[0].len, 15);
    }

    #[test]
    fn a_selection_chunks_as_its_expanded_records_would() {
        let recs: Vec<IndexRecord> = (0..6).map(|i| rec(i * 5, 5, i as i64)).collect();
        let mut s = Selection::default();
        s.push_run(recs[0..2].iter().copied(), 1);
        s.push_run(recs[4..5].iter().copied(), 7);
        s.push_run(std::iter::empty(), 3);
        s.push_run(recs[5..6].iter().copied(), 0);
        s.push_run(recs[2..4].iter().copied(), 2);
        assert_eq!(s.records.len(), 5, "each record once");
        assert_eq!(s.runs.len(), 3, "empty runs leave nothing");
        assert_eq!(s.total_records(), 2 + 7 + 4);
        let expanded: Vec<IndexRecord> = s.iter().copied().collect();
        assert_eq!(expanded.len(), 13);
        for size in [1, 7, 12, 40, 1000] {
            let view = SelectedView {
                partition: Arc::new(Partition::new(PartitionKey::new("a", 0, 0), Arc::default())),
                selection: s.clone(),
                chunk_size: size,
                blocks: s.total_records(),
            };
            let lazy: Vec<Chunk> = view.chunks().collect();
            assert_eq!(lazy, chunk_records(&expanded, size), "chunk size {size}");
            assert_eq!(view.total_bytes(), 13 * 5);
        }
    }

    #[test]
    fn sorted_records_make_gapped_ranges() {
        let mut recs = vec![rec(0, 5, 1), rec(5, 5, 0), rec(10, 5, 1)];
        recs.sort_by_key(|r| r.map_id);
        let chunks = chunk_records(&recs, 100);
        assert_eq!(chunks[0].ranges, vec![(5, 5), (0, 5), (10, 5)]);
        assert_eq!(chunks[0].len, 15);
    }
}
