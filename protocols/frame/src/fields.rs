//! Primitive field encoding inside a frame's message part.
//!
//! Everything is big-endian (Netty's `ByteBuf` default). A byte array or string is an
//! `i32` length followed by the bytes. Uniffle writes Java `null` as length -1
//! (`ByteBufUtils.writeLengthAndString`); Celeborn has no null (`Encoders.Strings`), so
//! its fields use [`FieldReader::byte_array`] and [`FieldReader::string`], where -1 is
//! just a negative length.

use std::collections::VecDeque;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::WireError;

/// Reads fields from one message part; slices it hands out share the frame's allocation
/// (block data is never copied).
///
/// A message part read split ([`crate::Splitter`]) comes as its fields without the
/// large byte arrays, plus those arrays, each in a buffer of its own, in wire
/// order: [`FieldReader::split_byte_array`] takes the next one.
pub struct FieldReader {
    buf: Bytes,
    /// The byte arrays read apart, when the message part was read split.
    arrays: Option<VecDeque<Bytes>>,
}

/// A byte array as [`FieldReader::split_byte_array`] found it.
#[derive(Debug)]
pub enum ByteArray {
    /// Read into a buffer of its own: it pins nothing else.
    Own(Bytes),
    /// A slice of the message part, which it keeps alive.
    InFrame(Bytes),
}

impl FieldReader {
    pub fn new(buf: Bytes) -> Self {
        Self { buf, arrays: None }
    }

    /// A message part read split: `fields` holds every byte but the arrays'
    /// contents (their lengths stay), `arrays` those contents in wire order.
    pub fn split(fields: Bytes, arrays: Vec<Bytes>) -> Self {
        Self {
            buf: fields,
            arrays: Some(arrays.into()),
        }
    }

    /// Byte arrays read apart and not taken yet (a decoder that consumed its
    /// message exactly leaves none).
    pub fn arrays_left(&self) -> usize {
        self.arrays.as_ref().map_or(0, VecDeque::len)
    }

    /// A non-null byte array (a protocol with `null`) that a [`crate::Splitter`]
    /// may have read apart: the next array read apart when the message part was
    /// read split, else a slice of it.
    pub fn split_byte_array(&mut self, field: &'static str) -> Result<ByteArray, WireError> {
        if self.arrays.is_none() {
            return self.non_null_byte_array(field).map(ByteArray::InFrame);
        }
        let len = self
            .nullable_len(field)?
            .ok_or(WireError::NullString { field })?;
        match self.arrays.as_mut().and_then(VecDeque::pop_front) {
            Some(array) if array.len() == len => Ok(ByteArray::Own(array)),
            // The splitter and the decoder disagree about where arrays are, or
            // the frame ended first: either way the message is short.
            _ => Err(WireError::Truncated { field }),
        }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, n: usize, field: &'static str) -> Result<(), WireError> {
        if self.buf.len() < n {
            Err(WireError::Truncated { field })
        } else {
            Ok(())
        }
    }

    pub fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        self.need(1, field)?;
        Ok(self.buf.get_u8())
    }

    pub fn i32(&mut self, field: &'static str) -> Result<i32, WireError> {
        self.need(4, field)?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self, field: &'static str) -> Result<i64, WireError> {
        self.need(8, field)?;
        Ok(self.buf.get_i64())
    }

    /// `n` raw bytes as a zero-copy slice.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<Bytes, WireError> {
        self.need(n, field)?;
        Ok(self.buf.split_to(n))
    }

    /// `i32` length + raw bytes, zero-copy; every negative length is an error.
    pub fn byte_array(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        let len = self.i32(field)?;
        let len =
            usize::try_from(len).map_err(|_| WireError::NegativeLength { field, value: len })?;
        self.bytes(len, field)
    }

    /// `i32` length + UTF-8; every negative length is an error.
    pub fn string(&mut self, field: &'static str) -> Result<String, WireError> {
        let raw = self.byte_array(field)?;
        utf8(raw, field)
    }

    /// A byte array where length -1 is Java `null`.
    pub fn nullable_byte_array(&mut self, field: &'static str) -> Result<Option<Bytes>, WireError> {
        match self.nullable_len(field)? {
            None => Ok(None),
            Some(len) => self.bytes(len, field).map(Some),
        }
    }

    /// The length of a byte array where -1 is Java `null` (None).
    fn nullable_len(&mut self, field: &'static str) -> Result<Option<usize>, WireError> {
        match self.i32(field)? {
            -1 => Ok(None),
            len if len < 0 => Err(WireError::NegativeLength { field, value: len }),
            len => Ok(Some(len as usize)),
        }
    }

    /// A string where length -1 is Java `null`.
    pub fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, WireError> {
        self.nullable_byte_array(field)?
            .map(|raw| utf8(raw, field))
            .transpose()
    }

    /// A byte array of a protocol with `null`, which this field must not be.
    pub fn non_null_byte_array(&mut self, field: &'static str) -> Result<Bytes, WireError> {
        self.nullable_byte_array(field)?
            .ok_or(WireError::NullString { field })
    }

    /// A string of a protocol with `null`, which this field must not be (app ids, server
    /// ids: the Java clients always set them).
    pub fn non_null_string(&mut self, field: &'static str) -> Result<String, WireError> {
        self.nullable_string(field)?
            .ok_or(WireError::NullString { field })
    }

    /// An `i32` element count; every element takes at least `min_element_size` bytes, so a
    /// hostile count is rejected before anything is allocated for it.
    pub fn count(
        &mut self,
        field: &'static str,
        min_element_size: usize,
    ) -> Result<usize, WireError> {
        let count = self.i32(field)?;
        let n = usize::try_from(count).map_err(|_| WireError::NegativeLength {
            field,
            value: count,
        })?;
        if n.saturating_mul(min_element_size) > self.buf.len() {
            return Err(WireError::CountTooLarge {
                field,
                count,
                remaining: self.buf.len(),
            });
        }
        Ok(n)
    }

    /// [`FieldReader::count`], also refused above `limit`.
    pub fn count_at_most(
        &mut self,
        field: &'static str,
        min_element_size: usize,
        limit: usize,
    ) -> Result<usize, WireError> {
        let n = self.count(field, min_element_size)?;
        if n > limit {
            return Err(WireError::CountAboveLimit {
                field,
                count: n,
                limit,
            });
        }
        Ok(n)
    }

    /// A capacity for `count` elements of `T` that allocates no more than the
    /// bytes left could hold: a count only promises `min_element_size` wire
    /// bytes per element, and a decoded element is often larger, so sizing a
    /// vector from the count alone would let a frame allocate a multiple of
    /// itself before any element is read.
    pub fn capacity_for<T>(&self, count: usize) -> usize {
        count.min(self.buf.len() / std::mem::size_of::<T>().max(1))
    }
}

fn utf8(raw: Bytes, field: &'static str) -> Result<String, WireError> {
    String::from_utf8(raw.into()).map_err(|_| WireError::InvalidUtf8 { field })
}

/// Converts a length to the wire's `i32`.
pub fn wire_len(len: usize, what: &'static str) -> Result<i32, WireError> {
    i32::try_from(len).map_err(|_| WireError::TooLargeToEncode { what, len })
}

/// `i32` length + bytes.
pub fn put_bytes(dst: &mut BytesMut, value: &[u8], what: &'static str) -> Result<(), WireError> {
    dst.put_i32(wire_len(value.len(), what)?);
    dst.put_slice(value);
    Ok(())
}

/// `i32` length + UTF-8.
pub fn put_string(dst: &mut BytesMut, value: &str, what: &'static str) -> Result<(), WireError> {
    put_bytes(dst, value.as_bytes(), what)
}

/// A byte array where `None` is written as Java `null` (length -1).
pub fn put_nullable_bytes(
    dst: &mut BytesMut,
    value: Option<&[u8]>,
    what: &'static str,
) -> Result<(), WireError> {
    match value {
        None => {
            dst.put_i32(-1);
            Ok(())
        }
        Some(v) => put_bytes(dst, v, what),
    }
}

/// A string where `None` is written as Java `null` (length -1).
pub fn put_nullable_string(
    dst: &mut BytesMut,
    value: Option<&str>,
    what: &'static str,
) -> Result<(), WireError> {
    put_nullable_bytes(dst, value.map(str::as_bytes), what)
}

/// An `i32` element count.
pub fn put_count(dst: &mut BytesMut, count: usize, what: &'static str) -> Result<(), WireError> {
    dst.put_i32(wire_len(count, what)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_is_minus_one_only_where_a_protocol_has_it() {
        let mut b = BytesMut::new();
        put_nullable_string(&mut b, None, "s").unwrap();
        put_nullable_string(&mut b, Some("é"), "s").unwrap();
        put_nullable_string(&mut b, None, "s").unwrap();
        put_nullable_string(&mut b, None, "s").unwrap();
        let mut r = FieldReader::new(b.freeze());
        assert_eq!(r.nullable_string("a").unwrap(), None);
        assert_eq!(r.non_null_string("b").unwrap(), "é");
        assert!(matches!(
            r.non_null_string("c"),
            Err(WireError::NullString { field: "c" })
        ));
        // Without null, -1 is a negative length.
        assert!(matches!(
            r.string("d"),
            Err(WireError::NegativeLength {
                field: "d",
                value: -1
            })
        ));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn split_arrays_come_in_wire_order_and_must_match_their_lengths() {
        let mut fields = BytesMut::new();
        fields.put_i32(3);
        fields.put_i32(2);
        fields.put_i32(5);
        fields.put_i32(-1);
        let arrays = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")];
        let mut r = FieldReader::split(fields.freeze(), arrays);
        assert!(matches!(r.split_byte_array("a"), Ok(ByteArray::Own(b)) if b == "abc"));
        assert!(matches!(r.split_byte_array("b"), Ok(ByteArray::Own(b)) if b == "de"));
        assert_eq!(r.arrays_left(), 0);
        // Announced 5 bytes, but no array is left.
        assert!(matches!(
            r.split_byte_array("c"),
            Err(WireError::Truncated { field: "c" })
        ));
        assert!(matches!(
            r.split_byte_array("d"),
            Err(WireError::NullString { field: "d" })
        ));
        // Not split: the array is a slice of the message part.
        let mut inline = BytesMut::new();
        inline.put_i32(2);
        inline.put_slice(b"xy");
        let mut r = FieldReader::new(inline.freeze());
        assert!(matches!(r.split_byte_array("e"), Ok(ByteArray::InFrame(b)) if b == "xy"));
        // An array whose length disagrees with the one read apart.
        let mut fields = BytesMut::new();
        fields.put_i32(4);
        let mut r = FieldReader::split(fields.freeze(), vec![Bytes::from_static(b"abc")]);
        assert!(matches!(
            r.split_byte_array("f"),
            Err(WireError::Truncated { field: "f" })
        ));
    }

    #[test]
    fn lengths_and_counts_are_checked_against_what_is_left() {
        let mut b = BytesMut::new();
        b.put_i32(10);
        b.put_slice(b"abc");
        let mut r = FieldReader::new(b.clone().freeze());
        assert!(matches!(
            r.byte_array("x"),
            Err(WireError::Truncated { field: "x" })
        ));
        let mut r = FieldReader::new(b.freeze());
        assert!(matches!(
            r.count("n", 1),
            Err(WireError::CountTooLarge {
                count: 10,
                remaining: 3,
                ..
            })
        ));
        let mut b = BytesMut::new();
        b.put_i32(3);
        b.put_slice(&[0; 12]);
        let mut r = FieldReader::new(b.freeze());
        assert!(matches!(
            r.count_at_most("n", 4, 2),
            Err(WireError::CountAboveLimit {
                count: 3,
                limit: 2,
                ..
            })
        ));
        // 12 bytes left hold no more than one 8-byte element.
        assert_eq!(r.capacity_for::<u64>(1000), 1);
        assert_eq!(r.capacity_for::<u8>(5), 5);
        let mut b = BytesMut::new();
        b.put_slice(&[0xff, 0xfe]);
        let mut r = FieldReader::new(b.freeze());
        assert!(matches!(
            r.i32("y"),
            Err(WireError::Truncated { field: "y" })
        ));
    }
}
