//! The memory tier: each partition's buffered blocks.
//!
//! A partition's memory holds blocks being flushed ("in flight", oldest flush
//! first) followed by blocks not yet handed to a flush ("staging"), each in
//! arrival order. Blocks leave memory only when their flush is durable, so a
//! block is always readable from memory or from a persisted segment.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::block::Block;

/// A batch of blocks handed to one flush.
#[derive(Debug)]
pub(crate) struct FlushBatch {
    pub id: u64,
    pub blocks: Arc<[Block]>,
    /// Budget charge of the batch (data plus per-block overhead).
    pub charge: u64,
    /// Data bytes of the batch.
    pub bytes: u64,
}

/// A partition's blocks in memory, allocated only while it has some: at a
/// million partitions held, nearly all flushed and idle, the empty queues
/// were 70 bytes each.
#[derive(Debug, Default)]
pub(crate) struct PartitionBuffer(Option<Box<Buffered>>);

#[derive(Debug, Default)]
struct Buffered {
    staging: Vec<Block>,
    staging_charge: u64,
    staging_bytes: u64,
    in_flight: VecDeque<FlushBatch>,
    next_flush_id: u64,
}

/// Result of a memory read: blocks in read order.
#[derive(Debug, Default, Clone)]
pub struct MemoryRead {
    pub blocks: Vec<Block>,
}

impl MemoryRead {
    pub fn bytes(&self) -> u64 {
        self.blocks.iter().map(Block::len).sum()
    }
}

impl PartitionBuffer {
    pub(crate) fn push(&mut self, blocks: Vec<Block>) {
        self.0.get_or_insert_with(Box::default).push(blocks);
    }

    pub(crate) fn staging_charge(&self) -> u64 {
        self.0.as_ref().map_or(0, |b| b.staging_charge)
    }

    /// Bytes held: staged and in flight.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |b| b.memory_bytes())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|b| b.is_empty())
    }

    /// Moves the staged blocks into a new in-flight batch.
    pub(crate) fn start_flush(&mut self) -> Option<(u64, Arc<[Block]>, u64, u64)> {
        self.0.as_mut()?.start_flush()
    }

    /// The oldest in-flight batch, which a retry must write before anything newer.
    pub(crate) fn oldest_in_flight(&self) -> Option<(u64, Arc<[Block]>, u64, u64)> {
        self.0.as_ref()?.oldest_in_flight()
    }

    /// Drops a batch whose flush is durable; returns its charge. A buffer
    /// left empty is freed (no batch id is outstanding then, so the ids may
    /// start again).
    pub(crate) fn finish_flush(&mut self, id: u64) -> Option<u64> {
        let charge = self.0.as_mut()?.finish_flush(id);
        if self.is_empty() {
            self.0 = None;
        }
        charge
    }

    /// Drops the staged blocks (the shuffle was removed) and returns their
    /// charge, which the caller releases. In-flight batches stay: their
    /// charges are released by the flushes that own them.
    pub(crate) fn clear_staging(&mut self) -> u64 {
        let charge = self.0.as_mut().map_or(0, |b| b.clear_staging());
        if self.is_empty() {
            self.0 = None;
        }
        charge
    }

    /// See [`Buffered::read`].
    pub(crate) fn read(
        &self,
        after: Option<i64>,
        max_bytes: u64,
        keep: &dyn Fn(&Block) -> bool,
    ) -> MemoryRead {
        self.0
            .as_ref()
            .map_or_else(MemoryRead::default, |b| b.read(after, max_bytes, keep))
    }
}

impl Buffered {
    fn push(&mut self, blocks: Vec<Block>) {
        for b in &blocks {
            self.staging_charge += b.charge();
            self.staging_bytes += b.len();
        }
        if self.staging.is_empty() {
            self.staging = blocks;
        } else {
            self.staging.extend(blocks);
        }
    }

    /// Everything in memory: staged plus in flight (data bytes).
    fn memory_bytes(&self) -> u64 {
        self.staging_bytes + self.in_flight.iter().map(|b| b.bytes).sum::<u64>()
    }

    fn is_empty(&self) -> bool {
        self.staging.is_empty() && self.in_flight.is_empty()
    }

    /// Moves the staged blocks into a new in-flight batch.
    fn start_flush(&mut self) -> Option<(u64, Arc<[Block]>, u64, u64)> {
        if self.staging.is_empty() {
            return None;
        }
        let blocks: Arc<[Block]> = std::mem::take(&mut self.staging).into();
        let charge = std::mem::take(&mut self.staging_charge);
        let bytes = std::mem::take(&mut self.staging_bytes);
        let id = self.next_flush_id;
        self.next_flush_id += 1;
        self.in_flight.push_back(FlushBatch {
            id,
            blocks: blocks.clone(),
            charge,
            bytes,
        });
        Some((id, blocks, charge, bytes))
    }

    /// The oldest in-flight batch, which a retry must write before anything newer.
    fn oldest_in_flight(&self) -> Option<(u64, Arc<[Block]>, u64, u64)> {
        self.in_flight
            .front()
            .map(|b| (b.id, b.blocks.clone(), b.charge, b.bytes))
    }

    /// Drops a batch whose flush is durable; returns its charge.
    fn finish_flush(&mut self, id: u64) -> Option<u64> {
        let pos = self.in_flight.iter().position(|b| b.id == id)?;
        self.in_flight.remove(pos).map(|b| b.charge)
    }

    /// Drops the staged blocks (the shuffle was removed) and returns their
    /// charge, which the caller releases. In-flight batches stay: their
    /// charges are released by the flushes that own them.
    fn clear_staging(&mut self) -> u64 {
        self.staging.clear();
        self.staging_bytes = 0;
        std::mem::take(&mut self.staging_charge)
    }

    /// Blocks after the one whose id is `after` (from the start when `after` is
    /// `None` or no longer in memory), skipping blocks `keep` rejects, until at
    /// least `max_bytes` are collected (always at least one block if any).
    fn read(
        &self,
        after: Option<i64>,
        max_bytes: u64,
        keep: &dyn Fn(&Block) -> bool,
    ) -> MemoryRead {
        let all = || {
            self.in_flight
                .iter()
                .flat_map(|b| b.blocks.iter())
                .chain(self.staging.iter())
        };
        let skip = match after {
            Some(id) => all()
                .position(|b| b.meta.block_id == id)
                .map(|p| p + 1)
                .unwrap_or(0),
            None => 0,
        };
        let mut out = MemoryRead::default();
        let mut size = 0;
        for block in all().skip(skip) {
            if size >= max_bytes {
                break;
            }
            if !keep(block) {
                continue;
            }
            size += block.len();
            out.blocks.push(block.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockMeta;
    use bytes::Bytes;

    fn block(id: i64, len: usize) -> Block {
        Block {
            meta: BlockMeta {
                block_id: id,
                map_id: id % 3,
                batch_id: None,
                crc: 0,
                uncompressed_len: len as i32,
            },
            data: Bytes::from(vec![id as u8; len]),
        }
    }

    fn ids(r: &MemoryRead) -> Vec<i64> {
        r.blocks.iter().map(|b| b.meta.block_id).collect()
    }

    #[test]
    fn reads_in_flight_before_staging_and_pages_by_last_block() {
        let mut buf = PartitionBuffer::default();
        buf.push(vec![block(1, 10), block(2, 10)]);
        let (id, ..) = buf.start_flush().unwrap();
        buf.push(vec![block(3, 10), block(4, 10)]);
        let all = |_: &Block| true;
        assert_eq!(ids(&buf.read(None, 15, &all)), vec![1, 2]);
        assert_eq!(ids(&buf.read(Some(2), 15, &all)), vec![3, 4]);
        assert_eq!(ids(&buf.read(Some(4), 15, &all)), Vec::<i64>::new());
        // An id no longer in memory restarts from the beginning.
        assert_eq!(ids(&buf.read(Some(99), 1000, &all)), vec![1, 2, 3, 4]);
        assert_eq!(buf.finish_flush(id), Some(2 * (10 + 32)));
        assert_eq!(ids(&buf.read(Some(2), 1000, &all)), vec![3, 4]);
        let only_map_0 = |b: &Block| b.meta.map_id == 0;
        assert_eq!(ids(&buf.read(None, 1000, &only_map_0)), vec![3]);
    }
}
