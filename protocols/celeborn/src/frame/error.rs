//! Errors of the transport frame codec.

use std::io;

use switchyard_frame::WireError;

use super::message::MessageType;

/// Why a frame (or a message encoded without a frame header) could not be decoded or
/// encoded.
///
/// Header errors (lengths, unknown type) leave the byte stream unusable: close the
/// connection. Errors inside a frame are reported after the whole frame was consumed, so
/// the stream is still aligned on the next frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A header, length, count or string on the wire (the layer both protocols share).
    #[error(transparent)]
    Wire(#[from] WireError),

    /// The id exists upstream but never travels as a raw frame (Java's own decoder rejects
    /// it too): its content is sent as a protobuf inside an RpcRequest.
    #[error("message type {id} ({name}) is not carried as a raw frame")]
    UnsupportedMessageType {
        /// The type byte.
        id: u8,
        /// Its upstream name.
        name: &'static str,
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

    /// A legacy RpcRequest body named a type that has a body of its own or cannot be
    /// carried that way.
    #[error("message type {0} cannot be carried inside an RpcRequest body")]
    NotALegacyBody(MessageType),

    /// A data-plane TransportMessage could not be decoded.
    #[error("bad TransportMessage: {0}")]
    BadTransportMessage(&'static str),
}

impl From<io::Error> for FrameError {
    fn from(e: io::Error) -> Self {
        FrameError::Wire(WireError::Io(e))
    }
}
