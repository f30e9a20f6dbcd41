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
