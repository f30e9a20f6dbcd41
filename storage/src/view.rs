//! Sequential chunked reads (Celeborn's streams).
//!
//! A view cuts a partition's persisted blocks into chunks whose boundaries
//! fall on block boundaries. An unfiltered view keeps data order, so each
//! chunk is one contiguous range. A map-range view keeps only blocks whose map
//! id is in the range, ordered by map id (arrival order within a map), as
//! Celeborn's sorted reads for AQE skew splits require.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::block::IndexRecord;
use crate::error::{Result, StorageError};
use crate::id::PartitionKey;
use crate::partition::Partition;
use crate::store::{concat, Store};

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
        &self.partition.key
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
        match current.ranges.last_mut() {
            Some((start, len)) if *start + *len == r.offset => *len += r.length as u64,
            _ => current.ranges.push((r.offset, r.length as u64)),
        }
        current.len += r.length as u64;
        current.records += 1;
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

impl Store {
    /// Flushes the partition, then opens a chunked view of it. `maps` keeps
    /// only blocks whose map id is in the range, ordered by map id.
    pub async fn open_view(
        self: &Arc<Self>,
        key: &PartitionKey,
        maps: Option<Range<i64>>,
        chunk_size: u64,
    ) -> Result<PartitionView> {
        let index = self.read_index_flushed(key).await?;
        let mut records = IndexRecord::decode_all(&index.0);
        if let Some(maps) = &maps {
            records.retain(|r| maps.contains(&r.map_id));
            // Stable: arrival order is kept within each map.
            records.sort_by_key(|r| r.map_id);
        }
        Ok(PartitionView {
            partition: index.1,
            chunks: chunk_records(&records, chunk_size.max(1)),
            blocks: records.len(),
        })
    }

    /// Flushes the partition, then opens a chunked view of the blocks
    /// `select` picks from its records (in data order), in the order it
    /// returns them, repeats allowed (Celeborn's map partitions serve a
    /// broadcast region once per sub-partition read).
    pub async fn open_selected_view(
        self: &Arc<Self>,
        key: &PartitionKey,
        select: impl FnOnce(Vec<IndexRecord>) -> Vec<IndexRecord>,
        chunk_size: u64,
    ) -> Result<PartitionView> {
        let index = self.read_index_flushed(key).await?;
        let records = select(IndexRecord::decode_all(&index.0));
        Ok(PartitionView {
            partition: index.1,
            chunks: chunk_records(&records, chunk_size.max(1)),
            blocks: records.len(),
        })
    }

    async fn read_index_flushed(
        self: &Arc<Self>,
        key: &PartitionKey,
    ) -> Result<(Bytes, Arc<Partition>)> {
        let p = self
            .partition(key)?
            .ok_or_else(|| StorageError::UnknownPartition(key.clone()))?;
        self.flush_fully(&p).await?;
        let index = self.read_index(key).await?;
        Ok((index.index, p))
    }

    pub async fn read_chunk(&self, view: &PartitionView, index: usize) -> Result<Bytes> {
        let chunk = view.chunks.get(index).ok_or(StorageError::NoSuchChunk {
            index,
            count: view.chunks.len(),
        })?;
        let mut pieces = Vec::with_capacity(chunk.ranges.len());
        for &(offset, len) in &chunk.ranges {
            pieces.push(self.read_range(&view.partition, offset, len).await?);
        }
        Ok(concat(pieces))
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
    fn sorted_records_make_gapped_ranges() {
        let mut recs = vec![rec(0, 5, 1), rec(5, 5, 0), rec(10, 5, 1)];
        recs.sort_by_key(|r| r.map_id);
        let chunks = chunk_records(&recs, 100);
        assert_eq!(chunks[0].ranges, vec![(5, 5), (0, 5), (10, 5)]);
        assert_eq!(chunks[0].len, 15);
    }
}
