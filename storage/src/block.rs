//! Blocks and their index records.
//!
//! A block is an opaque byte string from one map task for one partition. The
//! store never looks inside it; it keeps the metadata both protocols need as
//! plain fields and persists it as Uniffle's 40-byte big-endian index record.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Size of one index record on disk and on the wire.
pub const INDEX_RECORD_LEN: usize = 40;

/// Bytes charged to the memory budget per block on top of its data, for its
/// metadata (Uniffle charges the same 32 bytes per block).
pub const BLOCK_OVERHEAD: u64 = 32;

/// Metadata of one block, everything but its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockMeta {
    /// Uniffle's block id; Celeborn adapters use a per-partition sequence.
    pub block_id: i64,
    /// Uniffle's encoded task attempt id, or Celeborn's map id. Map-range
    /// views order and filter by this field.
    pub map_id: i64,
    /// Celeborn's batch id, when the protocol has one. Kept in memory only:
    /// Celeborn also carries it inside the block's own header.
    pub batch_id: Option<i32>,
    /// CRC as the client computed it; stored and returned, never checked.
    pub crc: i64,
    pub uncompressed_len: i32,
}

/// A block with its bytes. `data` is a slice of the receive buffer: appending
/// never copies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub meta: BlockMeta,
    pub data: Bytes,
}

impl Block {
    pub fn len(&self) -> u64 {
        self.data.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// What this block costs the memory budget.
    pub fn charge(&self) -> u64 {
        self.len() + BLOCK_OVERHEAD
    }
}

/// The smallest share of its frame a block may be and still keep the frame's
/// allocation alive: a smaller block is copied out. A `Bytes` slice pins its
/// whole backing buffer while the budget charges only the slice, so a
/// 16-byte batch kept from a 10 MiB frame held 10 MiB behind a 48-byte
/// charge. At one half, memory pinned stays below twice what is charged,
/// and the common cases (one batch per PushData, a Uniffle frame of one
/// big block) stay zero-copy; the copies made are at most one frame's bytes
/// and only for frames cut into small pieces.
pub const MIN_FRAME_SHARE: (usize, usize) = (1, 2);

impl Block {
    /// `data` as a block may keep it, given that it is a slice of a received
    /// frame of `frame_len` bytes: itself when it is at least
    /// [`MIN_FRAME_SHARE`] of the frame, else a copy that owns only its
    /// bytes, so the frame is freed once its other parts are.
    pub fn detach(data: Bytes, frame_len: usize) -> Bytes {
        let (num, den) = MIN_FRAME_SHARE;
        if data.len().saturating_mul(den) >= frame_len.saturating_mul(num) {
            data
        } else {
            Bytes::copy_from_slice(&data)
        }
    }
}

/// One record of a partition's index: where a block sits in the partition's
/// data and its metadata. Layout (big-endian): offset i64, length i32,
/// uncompressed length i32, crc i64, block id i64, task attempt (map) id i64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexRecord {
    pub offset: u64,
    pub length: u32,
    pub uncompressed_len: i32,
    pub crc: i64,
    pub block_id: i64,
    pub map_id: i64,
}

impl IndexRecord {
    pub fn for_block(offset: u64, block: &Block) -> Self {
        IndexRecord {
            offset,
            length: block.data.len() as u32,
            uncompressed_len: block.meta.uncompressed_len,
            crc: block.meta.crc,
            block_id: block.meta.block_id,
            map_id: block.meta.map_id,
        }
    }

    pub fn end(&self) -> u64 {
        self.offset + self.length as u64
    }

    pub fn encode(&self, out: &mut impl BufMut) {
        out.put_i64(self.offset as i64);
        out.put_i32(self.length as i32);
        out.put_i32(self.uncompressed_len);
        out.put_i64(self.crc);
        out.put_i64(self.block_id);
        out.put_i64(self.map_id);
    }

    /// Decodes one record; `buf` must hold at least [`INDEX_RECORD_LEN`] bytes.
    pub fn decode(buf: &mut impl Buf) -> Self {
        IndexRecord {
            offset: buf.get_i64() as u64,
            length: buf.get_i32() as u32,
            uncompressed_len: buf.get_i32(),
            crc: buf.get_i64(),
            block_id: buf.get_i64(),
            map_id: buf.get_i64(),
        }
    }

    /// Decodes every whole record in `bytes` (a trailing partial record is ignored).
    pub fn decode_all(mut bytes: &[u8]) -> Vec<IndexRecord> {
        let mut out = Vec::with_capacity(bytes.len() / INDEX_RECORD_LEN);
        while bytes.len() >= INDEX_RECORD_LEN {
            out.push(IndexRecord::decode(&mut bytes));
        }
        out
    }

    pub fn encode_all(records: &[IndexRecord]) -> Bytes {
        let mut out = BytesMut::with_capacity(records.len() * INDEX_RECORD_LEN);
        for r in records {
            r.encode(&mut out);
        }
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_slices_of_a_frame_are_copied_out_big_ones_kept() {
        let frame = Bytes::from(vec![7u8; 1 << 20]);
        let inside = |b: &Bytes| {
            let base = frame.as_ptr() as usize;
            (base..base + frame.len()).contains(&(b.as_ptr() as usize))
        };
        let small = Block::detach(frame.slice(100..200), frame.len());
        assert_eq!(&small[..], &[7u8; 100][..]);
        assert!(!inside(&small), "a small slice owns its bytes");
        let half = Block::detach(frame.slice(0..1 << 19), frame.len());
        assert!(inside(&half), "half the frame stays zero-copy");
        let just_under = Block::detach(frame.slice(0..(1 << 19) - 1), frame.len());
        assert!(!inside(&just_under));
    }

    #[test]
    fn record_round_trips_in_40_big_endian_bytes() {
        let r = IndexRecord {
            offset: 0x0102_0304_0506_0708,
            length: 17,
            uncompressed_len: 34,
            crc: 0xDEAD_BEEF,
            block_id: (5 << 43) | 9,
            map_id: 12,
        };
        let bytes = IndexRecord::encode_all(&[r, r]);
        assert_eq!(bytes.len(), 2 * INDEX_RECORD_LEN);
        assert_eq!(&bytes[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[8..12], &[0, 0, 0, 17]);
        assert_eq!(&bytes[16..24], &[0, 0, 0, 0, 0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(IndexRecord::decode_all(&bytes[..79]), vec![r]);
        assert_eq!(IndexRecord::decode_all(&bytes), vec![r, r]);
    }
}
