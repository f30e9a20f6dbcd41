//! Java "modified UTF-8" (`DataOutput.writeUTF`, serialization strings and class names):
//! UTF-16 code units, each written as 1-3 bytes, NUL as `C0 80`, supplementary characters
//! as two 3-byte surrogates.

use super::error::RpcError;

/// Decodes modified UTF-8.
pub(crate) fn decode(bytes: &[u8], what: &'static str) -> Result<String, RpcError> {
    // Fast path: plain ASCII without NUL is identical in both encodings.
    if bytes.iter().all(|&b| b != 0 && b < 0x80) {
        // Cannot fail: checked ASCII above.
        return Ok(String::from_utf8(bytes.to_vec()).unwrap_or_default());
    }
    let bad = || RpcError::InvalidUtf { what };
    let mut units = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let cont = |j: usize| match bytes.get(j) {
            Some(&c) if c & 0xC0 == 0x80 => Ok(u16::from(c & 0x3F)),
            _ => Err(bad()),
        };
        let (unit, len) = match b {
            0x01..=0x7F => (u16::from(b), 1),
            0xC0..=0xDF => ((u16::from(b & 0x1F) << 6) | cont(i + 1)?, 2),
            0xE0..=0xEF => (
                (u16::from(b & 0x0F) << 12) | (cont(i + 1)? << 6) | cont(i + 2)?,
                3,
            ),
            _ => return Err(bad()),
        };
        units.push(unit);
        i += len;
    }
    String::from_utf16(&units).map_err(|_| bad())
}

/// Encodes modified UTF-8.
pub(crate) fn encode(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for unit in s.encode_utf16() {
        match unit {
            0x0001..=0x007F => out.push(unit as u8),
            0x0000 | 0x0080..=0x07FF => {
                out.push(0xC0 | (unit >> 6) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
            _ => {
                out.push(0xE0 | (unit >> 12) as u8);
                out.push(0x80 | ((unit >> 6) & 0x3F) as u8);
                out.push(0x80 | (unit & 0x3F) as u8);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_java_specific_forms() {
        for s in ["MasterEndpoint", "", "é", "日本", "a\0b", "😀"] {
            assert_eq!(decode(&encode(s), "t").unwrap(), s);
        }
        // Java writes NUL as C0 80 and U+1F600 as a surrogate pair of 3-byte sequences.
        assert_eq!(encode("\0"), [0xC0, 0x80]);
        assert_eq!(encode("😀"), [0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]);
    }

    #[test]
    fn malformed_input_is_an_error() {
        for bad in [
            &[0x00][..],
            &[0x80],
            &[0xC3],
            &[0xE6, 0x97],
            &[0xF0, 0x9F, 0x98, 0x80],
            &[0xED, 0xA0, 0xBD],
        ] {
            assert!(decode(bad, "t").is_err(), "{bad:02x?}");
        }
    }
}
