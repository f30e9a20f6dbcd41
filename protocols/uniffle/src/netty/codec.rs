//! Uniffle's Netty frames: the shared 9-byte frame (`switchyard-frame`) carrying
//! [`Message`]s.
//!
//! Frame = header + message part + body, as upstream `MessageEncoder`,
//! `TransportFrameDecoder` and `FrameDecoder.HEADER_SIZE` (the same layout as
//! Celeborn's). The default incoming limit, 1 GiB, is the cap the Java server puts on a
//! gRPC message (`rss.rpc.message.max.size`).

use bytes::{Bytes, BytesMut};
use switchyard_frame::{FieldReader, FrameCodec, FrameMessage, Splitter};

pub use switchyard_frame::{DEFAULT_MAX_FRAME_SIZE, HEADER_LEN};

use super::error::CodecError;
use super::message::{Message, MessageType};
use super::requests::SendDataSplitter;

/// Codec for the Uniffle Netty data plane, usable on both ends of a connection.
pub type UniffleCodec = FrameCodec<Message>;

impl FrameMessage for Message {
    const PROTOCOL: &'static str = "uniffle";
    type Kind = MessageType;
    type Error = CodecError;

    fn kind_from_id(id: u8) -> Result<MessageType, CodecError> {
        MessageType::from_id(id)
    }
    fn decode_frame(
        kind: MessageType,
        message: FieldReader,
        body: Bytes,
    ) -> Result<Self, CodecError> {
        Message::decode(kind, message, body)
    }
    fn splitter(kind: MessageType) -> Option<Box<dyn Splitter>> {
        (kind == MessageType::SendShuffleDataRequest)
            .then(|| Box::new(SendDataSplitter::default()) as Box<dyn Splitter>)
    }
    fn kind_id(&self) -> u8 {
        self.message_type().id()
    }
    fn frame_body(&self) -> Option<&Bytes> {
        self.body()
    }
    fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        Message::encode_fields(self, dst)
    }
    fn kind_name(&self) -> &'static str {
        self.message_type().name()
    }
}

impl Message {
    /// Encodes this message as (header + message part, body) without copying the body, for
    /// a vectored or two-step write of large payloads.
    pub fn frame_parts(&self) -> Result<(Bytes, Bytes), CodecError> {
        switchyard_frame::frame_parts(self)
    }
}
