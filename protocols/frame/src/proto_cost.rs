//! What decoding a protobuf may allocate, read off the wire before decoding
//! it. Protobuf amplifies: an empty element of a repeated message field is
//! two bytes on the wire and a struct of a few hundred bytes once decoded,
//! so a 64 MiB control message of empty elements would decode into about
//! 8 GB. [`decode_cost`] walks the wire format (nested messages too) and
//! charges each length-delimited field [`FIELD_COST`] plus its bytes, and
//! each scalar [`SCALAR_COST`]: an upper bound of the decoded size for the
//! protocols' messages, checked against a limit before prost runs.

/// Charged per length-delimited field (a message, string or bytes): the
/// largest decoded struct of the protocols' messages is below this.
pub const FIELD_COST: u64 = 256;
/// Charged per varint or fixed-width field.
pub const SCALAR_COST: u64 = 16;
/// Nested messages looked into at most this deep (deeper bytes count as
/// bytes; the protocols' messages nest 4 deep at most).
const MAX_DEPTH: usize = 8;

/// An upper bound of what decoding `buf` allocates. Bytes that are not a
/// valid message count as their length.
pub fn decode_cost(buf: &[u8]) -> u64 {
    scan(buf, 0).unwrap_or(buf.len() as u64)
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The cost of `buf` read as a message, or None if it is not one.
fn scan(mut buf: &[u8], depth: usize) -> Option<u64> {
    let mut cost = 0u64;
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        if key >> 3 == 0 {
            return None;
        }
        match key & 7 {
            0 => {
                varint(&mut buf)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                buf = buf.get(width..)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let sub = buf.get(..len)?;
                buf = &buf[len..];
                let nested = if depth < MAX_DEPTH && !sub.is_empty() {
                    scan(sub, depth + 1).unwrap_or(0)
                } else {
                    0
                };
                cost = cost
                    .saturating_add(FIELD_COST)
                    .saturating_add(len as u64)
                    .saturating_add(nested);
            }
            // Groups (proto2) and reserved wire types: not a proto3 message.
            _ => return None,
        }
    }
    Some(cost)
}

/// How a field of a message decodes, for [`shaped_cost`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldShape {
    /// A nested message: the index of its [`Shape`].
    Message(usize),
    /// A repeated scalar, packed: each byte may be an element of 8 bytes.
    Packed,
    /// A string or bytes: never looked into.
    Leaf,
}

/// A message's fields by number, from its schema (a protocol builds these
/// from its `.proto` descriptors). Fields not listed are unknown to the
/// decoder, which skips them without allocating.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub fields: std::collections::HashMap<u32, FieldShape>,
}

/// An upper bound of what decoding `buf` as message `shapes[root]`
/// allocates, following the schema: nested messages are walked, strings
/// and bytes count as their length and are never read as messages (block
/// data would otherwise look like millions of tiny fields), packed scalars
/// count 8 bytes per wire byte. Bytes that are not a valid message count as
/// their length (prost then fails without allocating more).
pub fn shaped_cost(shapes: &[Shape], root: usize, buf: &[u8]) -> u64 {
    shaped(shapes, root, buf, 0).unwrap_or(buf.len() as u64)
}

fn shaped(shapes: &[Shape], at: usize, mut buf: &[u8], depth: usize) -> Option<u64> {
    let shape = shapes.get(at)?;
    let mut cost = 0u64;
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let number = u32::try_from(key >> 3).ok().filter(|&n| n != 0)?;
        match key & 7 {
            0 => {
                varint(&mut buf)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                buf = buf.get(width..)?;
                cost = cost.saturating_add(SCALAR_COST);
            }
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let sub = buf.get(..len)?;
                buf = &buf[len..];
                let field = match shape.fields.get(&number) {
                    Some(FieldShape::Message(m)) if depth < MAX_DEPTH => {
                        shaped(shapes, *m, sub, depth + 1).unwrap_or(len as u64)
                    }
                    Some(FieldShape::Packed) => (len as u64).saturating_mul(8),
                    // Unknown fields are skipped by the decoder.
                    None => 0,
                    _ => len as u64,
                };
                cost = cost.saturating_add(FIELD_COST).saturating_add(field);
            }
            _ => return None,
        }
    }
    Some(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_repeated_elements_cost_what_they_decode_into() {
        // Field 2, length 0, a million times: 2 MB on the wire.
        let wire: Vec<u8> = std::iter::repeat_n([0x12u8, 0x00], 1_000_000)
            .flatten()
            .collect();
        assert_eq!(decode_cost(&wire), 1_000_000 * FIELD_COST);
        // Nested one level inside a single field: still counted.
        let mut outer = vec![0x0a];
        let mut len = wire.len();
        while len >= 0x80 {
            outer.push((len as u8) | 0x80);
            len >>= 7;
        }
        outer.push(len as u8);
        outer.extend_from_slice(&wire);
        assert!(decode_cost(&outer) > 1_000_000 * FIELD_COST);
    }

    #[test]
    fn shaped_costs_follow_the_schema() {
        // 0: Request { 1: repeated Block (1) }, 1: Block { 1: bytes data, 2: packed ids }
        let shapes = vec![
            Shape {
                fields: [(1, FieldShape::Message(1))].into(),
            },
            Shape {
                fields: [(1, FieldShape::Leaf), (2, FieldShape::Packed)].into(),
            },
        ];
        // Block data full of bytes that would parse as millions of empty
        // fields is a leaf: it costs its length, not 128x.
        let data: Vec<u8> = std::iter::repeat_n([0x0au8, 0x00], 50_000)
            .flatten()
            .collect();
        let mut block = vec![0x0a, 0xa0, 0x8d, 0x06]; // field 1, length 100_000
        block.extend_from_slice(&data);
        let mut request = vec![0x0a, 0xa4, 0x8d, 0x06]; // field 1, length 100_004
        request.extend_from_slice(&block);
        let cost = shaped_cost(&shapes, 0, &request);
        assert_eq!(cost, 2 * FIELD_COST + 100_000);
        assert!(
            decode_cost(&request) > 50_000 * FIELD_COST,
            "the schema-less scan over-counts"
        );
        // Empty blocks still cost what they decode into.
        let empties: Vec<u8> = std::iter::repeat_n([0x0au8, 0x00], 1000)
            .flatten()
            .collect();
        assert_eq!(shaped_cost(&shapes, 0, &empties), 1000 * FIELD_COST);
        // Packed ids: 8 bytes per wire byte; unknown fields: skipped.
        let block = [0x12, 0x03, 1, 2, 3, 0x1a, 0x02, 9, 9];
        assert_eq!(
            shaped_cost(&shapes, 1, &block),
            FIELD_COST + 24 + FIELD_COST
        );
    }

    #[test]
    fn scalars_strings_and_garbage() {
        // id = 5 (varint), name = "abc" (string), x = fixed32.
        let m = [0x08, 0x05, 0x12, 0x03, b'a', b'b', b'c', 0x1d, 1, 2, 3, 4];
        assert_eq!(decode_cost(&m), SCALAR_COST + FIELD_COST + 3 + SCALAR_COST);
        // A length past the end, a zero field number, a group: not messages.
        for bad in [&[0x12u8, 0x05, 1][..], &[0x00, 0x01][..], &[0x0b][..]] {
            assert_eq!(decode_cost(bad), bad.len() as u64);
        }
        assert_eq!(decode_cost(&[]), 0);
    }
}
