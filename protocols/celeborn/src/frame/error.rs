//! Errors of the transport frame codec.

use std::io;

use super::message::MessageType;

/// Why a frame (or a message encoded without a frame header) could not be decoded or
/// encoded.
///
/// Header errors (lengths, unknown type) leave the byte stream unusable: close the
/// connection. Errors inside a frame are reported after the whole frame was consumed, so
/// the stream is still aligned on the next frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// Reading from or writing to the transport failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),

    /// A length or element count on the wire was negative.
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

    /// The type byte is not a Celeborn `Message.Type`.
    #[error("unknown message type {0}")]
    UnknownMessageType(u8),

    /// The id exists upstream but never travels as a raw frame (Java's own decoder rejects
    /// it too): its content is sent as a protobuf inside an RpcRequest.
    #[error("message type {id} ({name}) is not carried as a raw frame")]
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

    /// The message part is longer than the fields of its type.
    #[error("{unread} unread bytes at the end of a {message} message")]
    TrailingBytes {
        /// The message type.
        message: MessageType,
        /// Bytes left after the last field.
        unread: usize,
    },

    /// A type that never carries a body arrived with one.
    #[error("{message} message carries an unexpected body of {len} bytes")]
    UnexpectedBody {
        /// The message type.
        message: MessageType,
        /// The body length from the header.
        len: usize,
    },

    /// A string was not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },

    /// The partition mode byte is neither 0 (primary) nor 1 (replica).
    #[error("invalid partition mode {0}")]
    InvalidMode(u8),

    /// PushMergedData lists a different number of partition ids and batch offsets.
    #[error("{ids} partition ids but {offsets} batch offsets")]
    MismatchedBatchCounts {
        /// Number of partition unique ids.
        ids: usize,
        /// Number of batch offsets.
        offsets: usize,
    },

    /// A PushMergedData batch offset is out of order or past the end of the body.
    #[error(
        "batch offset {offset} at index {index} is out of order or beyond the {body_len}-byte body"
    )]
    BadBatchOffset {
        /// Index into the batch list.
        index: usize,
        /// The offset.
        offset: i32,
        /// Length of the body.
        body_len: usize,
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

    /// A legacy RpcRequest body named a type that has a body of its own or cannot be
    /// carried that way.
    #[error("message type {0} cannot be carried inside an RpcRequest body")]
    NotALegacyBody(MessageType),

    /// A data-plane TransportMessage could not be decoded.
    #[error("bad TransportMessage: {0}")]
    BadTransportMessage(&'static str),
}
