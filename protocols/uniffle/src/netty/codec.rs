//! Framing: the 9-byte header and the tokio-util `Decoder`/`Encoder`.
//!
//! Frame = header + message part + body, with the header (upstream `MessageEncoder`,
//! `TransportFrameDecoder`, `FrameDecoder.HEADER_SIZE`):
//!
//! ```text
//! i32 BE  message length (the message part only)
//! u8      message type
//! i32 BE  body length
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::error::CodecError;
use super::message::{Message, MessageType};
use super::wire::wire_len;

/// Size of the frame header.
pub const HEADER_LEN: usize = 4 + 1 + 4;

/// Default limit on message + body length of one incoming frame: 1 GiB, the same cap the
/// Java server puts on a gRPC message (`rss.rpc.message.max.size`). Send requests are
/// normally around 16 MiB (`rss.client.send.size.limit`) but one block can be larger.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 1 << 30;

/// The Java decoder rejects frames of `Integer.MAX_VALUE` bytes or more.
const JAVA_MAX_FRAME: usize = i32::MAX as usize - 1;

#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    message_type: MessageType,
    message_len: usize,
    body_len: usize,
}

impl FrameHeader {
    fn frame_len(&self) -> usize {
        self.message_len + self.body_len
    }
}

/// Codec for the Uniffle Netty data plane, usable on both ends of a connection.
#[derive(Debug, Clone)]
pub struct UniffleCodec {
    max_frame_size: usize,
    // Header of a frame whose bytes have not all arrived yet; parsed once, not per poll.
    pending: Option<FrameHeader>,
}

impl Default for UniffleCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl UniffleCodec {
    /// A codec that rejects incoming frames whose message + body length exceeds
    /// `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        Self {
            max_frame_size,
            pending: None,
        }
    }

    /// The configured incoming frame limit.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Validates a header without consuming it, so a bad header never leaves a half-read
    /// stream behind. Everything is checked before the frame is buffered: an unknown type
    /// or a huge length must not make us wait for (or allocate) gigabytes first.
    fn parse_header(&self, src: &[u8]) -> Result<FrameHeader, CodecError> {
        let mut h = &src[..HEADER_LEN];
        let message_len = h.get_i32();
        let type_id = h.get_u8();
        let body_len = h.get_i32();
        let message_len = usize::try_from(message_len).map_err(|_| CodecError::NegativeLength {
            field: "message length",
            value: message_len,
        })?;
        let body_len = usize::try_from(body_len).map_err(|_| CodecError::NegativeLength {
            field: "body length",
            value: body_len,
        })?;
        let message_type = MessageType::from_id(type_id)?;
        // Both are < 2^31, so the sum cannot overflow usize.
        let size = message_len + body_len;
        if size == 0 {
            return Err(CodecError::EmptyFrame);
        }
        if size > self.max_frame_size {
            return Err(CodecError::FrameTooLarge {
                size: size as u64,
                max: self.max_frame_size,
            });
        }
        Ok(FrameHeader {
            message_type,
            message_len,
            body_len,
        })
    }
}

impl Decoder for UniffleCodec {
    type Item = Message;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, CodecError> {
        let header = match self.pending {
            Some(header) => header,
            None => {
                if src.len() < HEADER_LEN {
                    return Ok(None);
                }
                let header = self.parse_header(src)?;
                src.advance(HEADER_LEN);
                self.pending = Some(header);
                header
            }
        };
        let frame_len = header.frame_len();
        if src.len() < frame_len {
            // Grow once to the announced size instead of doubling repeatedly.
            src.reserve(frame_len - src.len());
            return Ok(None);
        }
        self.pending = None;
        // One freeze, then slices: block data and bodies point into this buffer.
        let mut frame = src.split_to(frame_len).freeze();
        let body = frame.split_off(header.message_len);
        Message::decode(header.message_type, frame, body).map(Some)
    }
}

impl Encoder<Message> for UniffleCodec {
    type Error = CodecError;

    fn encode(&mut self, message: Message, dst: &mut BytesMut) -> Result<(), CodecError> {
        Encoder::<&Message>::encode(self, &message, dst)
    }
}

impl Encoder<&Message> for UniffleCodec {
    type Error = CodecError;

    /// Copies the body into `dst`. For large bodies prefer [`Message::frame_parts`] and a
    /// vectored write.
    fn encode(&mut self, message: &Message, dst: &mut BytesMut) -> Result<(), CodecError> {
        let start = dst.len();
        let result = encode_head(message, dst).map(|()| {
            if let Some(body) = message.body() {
                dst.extend_from_slice(body);
            }
        });
        if result.is_err() {
            // Leave no half-written frame behind.
            dst.truncate(start);
        }
        result
    }
}

/// Appends header + message part to `dst`.
fn encode_head(message: &Message, dst: &mut BytesMut) -> Result<(), CodecError> {
    let body_len = message.body().map_or(0, Bytes::len);
    let body_len_wire = wire_len(body_len, "body")?;
    let start = dst.len();
    dst.put_i32(0); // message length, patched below
    dst.put_u8(message.message_type().id());
    dst.put_i32(body_len_wire);
    message.encode_fields(dst)?;
    let message_len = dst.len() - start - HEADER_LEN;
    if message_len + body_len > JAVA_MAX_FRAME {
        return Err(CodecError::TooLargeToEncode {
            what: "frame",
            len: message_len + body_len,
        });
    }
    let message_len = wire_len(message_len, "message part")?;
    dst[start..start + 4].copy_from_slice(&message_len.to_be_bytes());
    Ok(())
}

impl Message {
    /// Encodes this message as (header + message part, body) without copying the body, for
    /// a vectored or two-step write of large payloads.
    pub fn frame_parts(&self) -> Result<(Bytes, Bytes), CodecError> {
        let mut head = BytesMut::new();
        encode_head(self, &mut head)?;
        Ok((head.freeze(), self.body().cloned().unwrap_or_default()))
    }
}
