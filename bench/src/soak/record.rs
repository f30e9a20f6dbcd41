//! The soak's self-checking record: every record names its application, its
//! partition and a unique id, and ends with a CRC over all of it, so a
//! reader can tell a lost record from a duplicated, misplaced or corrupted
//! one without trusting the service's own framing.
//!
//! Layout (little endian): `id u64 | partition u32 | len u32 | payload
//! (len bytes) | crc32 u32` where the CRC covers everything before it and
//! the payload is derived from the id (so a record with a valid CRC but
//! another record's payload is caught too). The application is the id's
//! high 32 bits.

use bytes::{BufMut, Bytes, BytesMut};

/// Bytes of a record besides its payload.
pub const OVERHEAD: usize = 8 + 4 + 4 + 4;

/// A record id: the application's number in the run (high 32 bits) and the
/// record's sequence number in that application (low 32 bits).
pub fn record_id(app_no: u32, seq: u32) -> u64 {
    (u64::from(app_no) << 32) | u64::from(seq)
}

/// The application number a record id belongs to.
pub fn app_of(id: u64) -> u32 {
    (id >> 32) as u32
}

/// The payload byte `i` of record `id`: a splitmix64 stream seeded by the id.
fn payload_byte(state: &mut u64, i: usize) -> u8 {
    if i.is_multiple_of(8) {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> (8 * (i % 8))) as u8
}

/// Appends record `id` of `partition` with a payload of `len` bytes.
pub fn encode_into(out: &mut BytesMut, id: u64, partition: i32, len: usize) {
    let start = out.len();
    out.put_u64_le(id);
    out.put_i32_le(partition);
    out.put_u32_le(len as u32);
    let mut state = id;
    for i in 0..len {
        out.put_u8(payload_byte(&mut state, i));
    }
    let crc = crc32fast::hash(&out[start..]);
    out.put_u32_le(crc);
}

/// One record, as [`encode_into`] writes it.
pub fn encode(id: u64, partition: i32, len: usize) -> Bytes {
    let mut out = BytesMut::with_capacity(OVERHEAD + len);
    encode_into(&mut out, id, partition, len);
    out.freeze()
}

/// What a reader found in a run of records.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// (id, partition) of every intact record, in order.
    pub records: Vec<(u64, i32)>,
    /// Records (or trailing bytes) that failed their CRC, their payload
    /// check or their framing: the rest of the buffer is not trusted.
    pub corrupt: usize,
}

/// Reads every record of `buf` (a block or batch holds whole records). A
/// bad record stops the walk: its length can no longer be trusted.
pub fn decode(mut buf: &[u8]) -> Decoded {
    let mut out = Decoded::default();
    while !buf.is_empty() {
        match decode_one(buf) {
            Some((id, partition, used)) => {
                out.records.push((id, partition));
                buf = &buf[used..];
            }
            None => {
                out.corrupt += 1;
                break;
            }
        }
    }
    out
}

/// The first record of `buf` and the bytes it took, if it is intact.
fn decode_one(buf: &[u8]) -> Option<(u64, i32, usize)> {
    if buf.len() < OVERHEAD {
        return None;
    }
    let id = u64::from_le_bytes(buf[0..8].try_into().ok()?);
    let partition = i32::from_le_bytes(buf[8..12].try_into().ok()?);
    let len = u32::from_le_bytes(buf[12..16].try_into().ok()?) as usize;
    let end = 16usize.checked_add(len)?;
    if buf.len() < end + 4 {
        return None;
    }
    let crc = u32::from_le_bytes(buf[end..end + 4].try_into().ok()?);
    if crc32fast::hash(&buf[..end]) != crc {
        return None;
    }
    let mut state = id;
    let payload_ok = buf[16..end]
        .iter()
        .enumerate()
        .all(|(i, b)| *b == payload_byte(&mut state, i));
    payload_ok.then_some((id, partition, end + 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let mut buf = BytesMut::new();
        for seq in 0..50 {
            encode_into(
                &mut buf,
                record_id(7, seq),
                seq as i32 % 3,
                seq as usize * 13,
            );
        }
        let d = decode(&buf);
        assert_eq!(d.corrupt, 0);
        assert_eq!(d.records.len(), 50);
        assert_eq!(d.records[49], (record_id(7, 49), 49 % 3));
        assert_eq!(app_of(d.records[10].0), 7);
    }

    #[test]
    fn any_flipped_byte_is_caught() {
        let record = encode(record_id(1, 2), 5, 64);
        for i in 0..record.len() {
            let mut bad = record.to_vec();
            bad[i] ^= 0x40;
            let d = decode(&bad);
            assert_eq!(d.corrupt, 1, "flip at {i} went unseen: {d:?}");
        }
    }

    #[test]
    fn a_cut_record_is_corrupt_not_short() {
        let mut buf = BytesMut::new();
        encode_into(&mut buf, record_id(1, 1), 0, 100);
        encode_into(&mut buf, record_id(1, 2), 0, 100);
        let d = decode(&buf[..buf.len() - 1]);
        assert_eq!(d.records, vec![(record_id(1, 1), 0)]);
        assert_eq!(d.corrupt, 1);
    }

    #[test]
    fn a_valid_crc_over_another_payload_is_caught() {
        // Record 2's header and CRC over record 1's payload.
        let one = encode(record_id(1, 1), 0, 32);
        let mut forged = BytesMut::new();
        forged.put_u64_le(record_id(1, 2));
        forged.put_slice(&one[8..16 + 32]);
        let crc = crc32fast::hash(&forged);
        forged.put_u32_le(crc);
        assert_eq!(decode(&forged).corrupt, 1);
    }
}
