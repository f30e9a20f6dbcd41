//! Primitive field encoding shared by all Netty messages.
//!
//! Everything is big-endian (Netty's `ByteBuf` default). Strings and byte arrays are an
//! `i32` length followed by the bytes, where -1 stands for Java `null`
//! (upstream `ByteBufUtils.writeLengthAndString` / `readByteArray`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::CodecError;

/// Reads fields from one message part. Slices it hands out share the frame's allocation
/// (no copy of block data).
pub(crate) struct Reader {
    buf: Bytes,
}

impl Reader {
    pub(crate) fn new(buf: Bytes) -> Self {
        Self { buf }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn need(&self, n: usize, field: &'static str) -> Result<(), CodecError> {
        if self.buf.len() < n {
            Err(CodecError::Truncated { field })
        } else {
            Ok(())
        }
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, CodecError> {
        self.need(1, field)?;
        Ok(self.buf.get_u8())
    }

    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32, CodecError> {
        self.need(4, field)?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, CodecError> {
        self.need(8, field)?;
        Ok(self.buf.get_i64())
    }

    /// `n` raw bytes as a zero-copy slice.
    pub(crate) fn bytes(&mut self, n: usize, field: &'static str) -> Result<Bytes, CodecError> {
        self.need(n, field)?;
        Ok(self.buf.split_to(n))
    }

    /// A length-prefixed byte array; `None` for -1.
    pub(crate) fn opt_byte_array(
        &mut self,
        field: &'static str,
    ) -> Result<Option<Bytes>, CodecError> {
        match self.i32(field)? {
            -1 => Ok(None),
            len if len < 0 => Err(CodecError::NegativeLength { field, value: len }),
            len => self.bytes(len as usize, field).map(Some),
        }
    }

    /// A length-prefixed byte array that must not be null.
    pub(crate) fn byte_array(&mut self, field: &'static str) -> Result<Bytes, CodecError> {
        self.opt_byte_array(field)?
            .ok_or(CodecError::NullString { field })
    }

    /// A length-prefixed UTF-8 string; `None` for -1.
    pub(crate) fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, CodecError> {
        match self.opt_byte_array(field)? {
            None => Ok(None),
            Some(raw) => String::from_utf8(raw.to_vec())
                .map(Some)
                .map_err(|_| CodecError::InvalidUtf8 { field }),
        }
    }

    /// A string the Java client always sets (app ids, server ids).
    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, CodecError> {
        self.opt_string(field)?
            .ok_or(CodecError::NullString { field })
    }

    /// An `i32` element count, checked against the bytes left so that a hostile count
    /// cannot make us allocate: every element takes at least `min_element_size` bytes.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        min_element_size: usize,
    ) -> Result<usize, CodecError> {
        let count = self.i32(field)?;
        if count < 0 {
            return Err(CodecError::NegativeLength {
                field,
                value: count,
            });
        }
        let needed = (count as usize).saturating_mul(min_element_size);
        if needed > self.buf.len() {
            return Err(CodecError::CountTooLarge {
                field,
                count,
                remaining: self.buf.len(),
            });
        }
        Ok(count as usize)
    }
}

/// Converts a length to the wire's `i32`.
pub(crate) fn wire_len(len: usize, what: &'static str) -> Result<i32, CodecError> {
    i32::try_from(len).map_err(|_| CodecError::TooLargeToEncode { what, len })
}

pub(crate) fn put_opt_bytes(
    dst: &mut BytesMut,
    value: Option<&[u8]>,
    what: &'static str,
) -> Result<(), CodecError> {
    match value {
        None => dst.put_i32(-1),
        Some(v) => {
            dst.put_i32(wire_len(v.len(), what)?);
            dst.put_slice(v);
        }
    }
    Ok(())
}

pub(crate) fn put_opt_string(
    dst: &mut BytesMut,
    value: Option<&str>,
    what: &'static str,
) -> Result<(), CodecError> {
    put_opt_bytes(dst, value.map(str::as_bytes), what)
}

pub(crate) fn put_string(
    dst: &mut BytesMut,
    value: &str,
    what: &'static str,
) -> Result<(), CodecError> {
    put_opt_bytes(dst, Some(value.as_bytes()), what)
}

pub(crate) fn put_count(
    dst: &mut BytesMut,
    count: usize,
    what: &'static str,
) -> Result<(), CodecError> {
    dst.put_i32(wire_len(count, what)?);
    Ok(())
}
