//! Errors of the Netty frame codec.

use std::io;

use super::message::MessageType;

/// Why a frame could not be decoded or encoded.
///
/// Header errors (lengths, unknown type) leave the byte stream unusable: the connection
/// must be closed. Errors inside a frame's fields are reported after the whole frame was
/// consumed, so the stream itself is still aligned on the next frame.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Reading from or writing to the transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),

    /// A length or element count on the wire was negative (only strings and byte arrays
    /// may use -1, meaning Java `null`).
    #[error("negative {field}: {value}")]
    NegativeLength {
        /// What the length belongs to.
        field: &'static str,
        /// The value read.
        value: i32,
    },

    /// The frame announced by a header is larger than the configured limit.
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge {
        /// message length + body length from the header.
        size: u64,
        /// The codec's limit.
        max: usize,
    },

    /// A header announced a frame of zero bytes (Java rejects those too).
    #[error("frame header announces an empty frame")]
    EmptyFrame,

    /// The header's type byte is not a Uniffle message type.
    #[error("unknown message type {0}")]
    UnknownMessageType(u8),

    /// The type exists in Uniffle's `Message.Type` but no client sends it over Netty (those
    /// calls go over gRPC), so it is not part of this codec.
    #[error("message type {id} ({name}) is not carried over the Netty data plane")]
    UnsupportedMessageType {
        /// The type byte.
        id: u8,
        /// Its upstream name.
        name: &'static str,
    },

    /// The message part ended before `field` could be read.
    #[error("message truncated while reading {field}")]
    Truncated {
        /// The field being read.
        field: &'static str,
    },

    /// An element count cannot possibly fit into the bytes that are left; rejected before
    /// anything is allocated for it.
    #[error("{field} count {count} cannot fit in the {remaining} bytes left")]
    CountTooLarge {
        /// What is being counted.
        field: &'static str,
        /// The count read.
        count: i32,
        /// Bytes left in the message part.
        remaining: usize,
    },

    /// The message part is longer than the fields of its type (the header's message
    /// length and the fields disagree).
    #[error("{unread} unread bytes at the end of a {message} message")]
    TrailingBytes {
        /// The message type.
        message: MessageType,
        /// Bytes left after the last field.
        unread: usize,
    },

    /// A message type that never carries a body arrived with one.
    #[error("{message} message carries an unexpected body of {len} bytes")]
    UnexpectedBody {
        /// The message type.
        message: MessageType,
        /// The body length from the header.
        len: usize,
    },

    /// A string that Uniffle always sets was sent as Java `null`.
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

    /// A value is too large for the wire's 32-bit signed lengths, or the whole frame would
    /// exceed what the Java decoder accepts (< 2^31 - 1 bytes).
    #[error("{what} of {len} bytes is too large to encode")]
    TooLargeToEncode {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: usize,
    },
}
