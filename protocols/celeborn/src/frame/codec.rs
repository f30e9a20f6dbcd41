//! Framing: the 9-byte header and the tokio-util `Decoder`/`Encoder`.
//!
//! ```text
//! i32 BE  message length  (the type's fields only)
//! u8      message type
//! i32 BE  body length
//! message length bytes of fields, then body length bytes of body
//! ```
//!
//! Upstream `MessageEncoder.encode` writes exactly this; `TransportFrameDecoder` reads the
//! header, then `message length + body length` bytes as one frame, and rejects frames of
//! size 0 or ≥ `Integer.MAX_VALUE`. Unchanged from v0.5.1 to v0.7.0.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::error::FrameError;
use super::message::{Message, MessageType};
use super::wire::wire_len;

/// Size of the frame header.
pub const HEADER_LEN: usize = 4 + 1 + 4;

/// Default limit on message + body length of an incoming frame. Pushes are normally tens
/// of KiB, chunks ~8 MiB; a single large record can make one push larger.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 1 << 30;

/// Java's `TransportFrameDecoder` rejects frames of `Integer.MAX_VALUE` bytes or more.
const JAVA_MAX_FRAME: usize = i32::MAX as usize - 1;

#[derive(Debug, Clone, Copy)]
struct FrameHeader {
    message_type: MessageType,
    message_len: usize,
    body_len: usize,
}

/// Codec for Celeborn's transport frames, usable on both ends of any Celeborn port.
#[derive(Debug, Clone)]
pub struct CelebornCodec {
    max_frame_size: usize,
    // Header of a frame whose bytes have not all arrived yet; parsed once, not per poll.
    pending: Option<FrameHeader>,
}

impl Default for CelebornCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl CelebornCodec {
    /// A codec that rejects incoming frames whose message + body length exceeds
    /// `max_frame_size` (capped at what Java itself accepts).
    pub fn new(max_frame_size: usize) -> Self {
        Self {
            max_frame_size: max_frame_size.min(JAVA_MAX_FRAME),
            pending: None,
        }
    }

    /// The incoming frame limit in effect.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Validates a header before anything is buffered for it: a bad type or a huge length
    /// must not make us wait for (or allocate) gigabytes first.
    fn parse_header(&self, mut h: &[u8]) -> Result<FrameHeader, FrameError> {
        let message_len = h.get_i32();
        let type_id = h.get_u8();
        let body_len = h.get_i32();
        let message_len = usize::try_from(message_len).map_err(|_| FrameError::NegativeLength {
            field: "message length",
            value: message_len,
        })?;
        let body_len = usize::try_from(body_len).map_err(|_| FrameError::NegativeLength {
            field: "body length",
            value: body_len,
        })?;
        let message_type = MessageType::from_id(type_id)?;
        // Both are < 2^31, so the sum cannot overflow.
        let size = message_len + body_len;
        if size == 0 {
            return Err(FrameError::EmptyFrame);
        }
        if size > self.max_frame_size {
            return Err(FrameError::FrameTooLarge {
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

impl Decoder for CelebornCodec {
    type Item = Message;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Message>, FrameError> {
        let header = match self.pending {
            Some(header) => header,
            None => {
                if src.len() < HEADER_LEN {
                    return Ok(None);
                }
                let header = self.parse_header(&src[..HEADER_LEN])?;
                src.advance(HEADER_LEN);
                self.pending = Some(header);
                header
            }
        };
        let frame_len = header.message_len + header.body_len;
        if src.len() < frame_len {
            // Grow once to the announced size instead of doubling repeatedly.
            src.reserve(frame_len - src.len());
            return Ok(None);
        }
        self.pending = None;
        // One freeze, then slices: bodies point into this buffer.
        let mut frame = src.split_to(frame_len).freeze();
        let body = frame.split_off(header.message_len);
        Message::decode(header.message_type, frame, body).map(Some)
    }
}

impl Encoder<Message> for CelebornCodec {
    type Error = FrameError;

    fn encode(&mut self, message: Message, dst: &mut BytesMut) -> Result<(), FrameError> {
        Encoder::<&Message>::encode(self, &message, dst)
    }
}

impl Encoder<&Message> for CelebornCodec {
    type Error = FrameError;

    /// Copies the body into `dst`; for large bodies prefer [`Message::frame_parts`].
    fn encode(&mut self, message: &Message, dst: &mut BytesMut) -> Result<(), FrameError> {
        let start = dst.len();
        match encode_head(message, dst) {
            Ok(()) => {
                if let Some(body) = message.body() {
                    dst.extend_from_slice(body);
                }
                Ok(())
            }
            Err(e) => {
                // Leave no half-written frame behind.
                dst.truncate(start);
                Err(e)
            }
        }
    }
}

/// Appends header + message part to `dst`.
fn encode_head(message: &Message, dst: &mut BytesMut) -> Result<(), FrameError> {
    let body_len = message.body().map_or(0, Bytes::len);
    let start = dst.len();
    dst.put_i32(0); // message length, patched below
    dst.put_u8(message.message_type().id());
    dst.put_i32(wire_len(body_len, "body")?);
    message.encode_fields(dst)?;
    let message_len = dst.len() - start - HEADER_LEN;
    if message_len + body_len > JAVA_MAX_FRAME {
        return Err(FrameError::TooLargeToEncode {
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
    /// a vectored or two-step write of large chunks.
    pub fn frame_parts(&self) -> Result<(Bytes, Bytes), FrameError> {
        let mut head = BytesMut::new();
        encode_head(self, &mut head)?;
        Ok((head.freeze(), self.body().cloned().unwrap_or_default()))
    }
}
