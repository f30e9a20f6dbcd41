//! Errors of the Netty frame codec.

use std::io;

use switchyard_frame::WireError;

use super::message::MessageType;

/// Why a frame could not be decoded or encoded.
///
/// Header errors (lengths, unknown type) leave the byte stream unusable: the connection
/// must be closed. Errors inside a frame's fields are reported after the whole frame was
/// consumed, so the stream itself is still aligned on the next frame.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// A header, length, count or string on the wire (the layer both protocols share).
    #[error(transparent)]
    Wire(#[from] WireError),

    /// The type exists in Uniffle's `Message.Type` but no client sends it over Netty (those
    /// calls go over gRPC), so it is not part of this codec.
    #[error("message type {id} ({name}) is not carried over the Netty data plane")]
    UnsupportedMessageType {
        /// The type byte.
        id: u8,
        /// Its upstream name.
        name: &'static str,
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
}

impl From<io::Error> for CodecError {
    fn from(e: io::Error) -> Self {
        CodecError::Wire(WireError::Io(e))
    }
}
