//! Errors of the frame layer, shared by both protocols.

use std::io;

/// Why a frame header or a field could not be read or written.
///
/// Header errors (lengths, an unknown type) leave the byte stream unusable: close the
/// connection. Errors inside a frame are reported after the whole frame was consumed, so
/// the stream is still aligned on the next frame.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Reading from or writing to the transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),

    /// A length or element count on the wire was negative (where a protocol has Java
    /// `null`, only -1 means that).
    #[error("negative {field}: {value}")]
    NegativeLength {
        /// What the length belongs to.
        field: &'static str,
        /// The value read.
        value: i32,
    },

    /// The header announces a frame larger than the configured limit.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// Message part + body length from the header.
        size: u64,
        /// The codec's limit.
        max: usize,
    },

    /// The header announces a frame of zero bytes (Java rejects those too).
    #[error("frame header announces an empty frame")]
    EmptyFrame,

    /// The type byte is not one of the protocol's message types.
    #[error("unknown message type {0}")]
    UnknownMessageType(u8),

    /// The message part ended before `field` could be read.
    #[error("message truncated while reading {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },

    /// An element count cannot fit into the bytes that are left; rejected before anything
    /// is allocated for it.
    #[error("{field} count {count} cannot fit in the {remaining} bytes left")]
    CountTooLarge {
        /// What is being counted.
        field: &'static str,
        /// The count read.
        count: i32,
        /// Bytes left.
        remaining: usize,
    },

    /// An element count above what the protocol's clients ever send, refused
    /// even when the frame could hold it: each element decodes larger than
    /// its wire bytes, so a realistic cap keeps the decoded size near the
    /// frame's.
    #[error("{field} count {count} is above the limit of {limit}")]
    CountAboveLimit {
        /// What is being counted.
        field: &'static str,
        /// The count read.
        count: usize,
        /// The protocol's limit.
        limit: usize,
    },

    /// A string or byte array the protocol always sets was sent as Java `null`.
    #[error("{field} is null")]
    NullString {
        /// The field.
        field: &'static str,
    },

    /// A string was not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },

    /// A value does not fit the wire's signed 32-bit lengths, or the frame would exceed
    /// what the Java decoder accepts (< 2^31 - 1 bytes).
    #[error("{what} of {len} bytes is too large to encode")]
    TooLargeToEncode {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
    },
}
