//! Celeborn's frames: the shared 9-byte frame (`switchyard-frame`) carrying [`Message`]s.
//!
//! Upstream `MessageEncoder.encode` writes the header; `TransportFrameDecoder` reads it,
//! then `message length + body length` bytes as one frame, and rejects frames of size 0
//! or ≥ `Integer.MAX_VALUE`. Unchanged from v0.5.1 to v0.7.0.

use bytes::{Bytes, BytesMut};
use switchyard_frame::{FrameCodec, FrameMessage};

pub use switchyard_frame::{DEFAULT_MAX_FRAME_SIZE, HEADER_LEN};

use super::error::FrameError;
use super::message::{Message, MessageType};

/// Codec for Celeborn's transport frames, usable on both ends of any Celeborn port.
pub type CelebornCodec = FrameCodec<Message>;

impl FrameMessage for Message {
    const PROTOCOL: &'static str = "celeborn";
    type Kind = MessageType;
    type Error = FrameError;

    fn kind_from_id(id: u8) -> Result<MessageType, FrameError> {
        MessageType::from_id(id)
    }
    fn decode_frame(
        kind: MessageType,
        message: switchyard_frame::FieldReader,
        body: Bytes,
    ) -> Result<Self, FrameError> {
        Message::decode(kind, message, body)
    }
    fn kind_id(&self) -> u8 {
        self.message_type().id()
    }
    fn frame_body(&self) -> Option<&Bytes> {
        self.body()
    }
    fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        Message::encode_fields(self, dst)
    }
    // Clients answer heartbeats; a server only learns the peer is alive.
    fn is_heartbeat(&self) -> bool {
        matches!(self, Message::Heartbeat)
    }
    fn kind_name(&self) -> &'static str {
        self.message_type().name()
    }
}

impl Message {
    /// Encodes this message as (header + message part, body) without copying the body, for
    /// a vectored or two-step write of large chunks.
    pub fn frame_parts(&self) -> Result<(Bytes, Bytes), FrameError> {
        switchyard_frame::frame_parts(self)
    }
}
