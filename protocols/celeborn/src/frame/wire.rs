//! Primitive field encoding shared by all transport messages.
//!
//! Everything is big-endian (Netty `ByteBuf` default). A string is an `i32` byte length
//! followed by UTF-8 (upstream `Encoders.Strings`); Celeborn has no null string.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::FrameError;

/// Reads fields from one message part; slices it hands out share the frame's allocation.
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

    fn need(&self, n: usize, field: &'static str) -> Result<(), FrameError> {
        if self.buf.len() < n {
            Err(FrameError::Truncated { field })
        } else {
            Ok(())
        }
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        self.need(1, field)?;
        Ok(self.buf.get_u8())
    }

    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32, FrameError> {
        self.need(4, field)?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn i64(&mut self, field: &'static str) -> Result<i64, FrameError> {
        self.need(8, field)?;
        Ok(self.buf.get_i64())
    }

    /// A non-negative `i32` length, checked against the bytes left.
    fn len(&mut self, field: &'static str) -> Result<usize, FrameError> {
        let len = self.i32(field)?;
        let len =
            usize::try_from(len).map_err(|_| FrameError::NegativeLength { field, value: len })?;
        self.need(len, field)?;
        Ok(len)
    }

    /// `i32` length + raw bytes, zero-copy.
    pub(crate) fn byte_array(&mut self, field: &'static str) -> Result<Bytes, FrameError> {
        let len = self.len(field)?;
        Ok(self.buf.split_to(len))
    }

    /// `i32` length + UTF-8.
    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, FrameError> {
        let raw = self.byte_array(field)?;
        String::from_utf8(raw.to_vec()).map_err(|_| FrameError::InvalidUtf8 { field })
    }

    /// An `i32` element count; every element takes at least `min_element_size` bytes, so a
    /// hostile count is rejected before anything is allocated for it.
    pub(crate) fn count(
        &mut self,
        field: &'static str,
        min_element_size: usize,
    ) -> Result<usize, FrameError> {
        let count = self.i32(field)?;
        let n = usize::try_from(count).map_err(|_| FrameError::NegativeLength {
            field,
            value: count,
        })?;
        if n.saturating_mul(min_element_size) > self.buf.len() {
            return Err(FrameError::CountTooLarge {
                field,
                count,
                remaining: self.buf.len(),
            });
        }
        Ok(n)
    }
}

/// Converts a length to the wire's `i32`.
pub(crate) fn wire_len(len: usize, what: &'static str) -> Result<i32, FrameError> {
    i32::try_from(len).map_err(|_| FrameError::TooLargeToEncode { what, len })
}

pub(crate) fn put_bytes(
    dst: &mut BytesMut,
    value: &[u8],
    what: &'static str,
) -> Result<(), FrameError> {
    dst.put_i32(wire_len(value.len(), what)?);
    dst.put_slice(value);
    Ok(())
}

pub(crate) fn put_string(
    dst: &mut BytesMut,
    value: &str,
    what: &'static str,
) -> Result<(), FrameError> {
    put_bytes(dst, value.as_bytes(), what)
}
