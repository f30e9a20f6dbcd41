//! The frame header and the tokio-util `Decoder`/`Encoder`, generic over a protocol's
//! messages.

use std::fmt;
use std::io;
use std::marker::PhantomData;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::{wire_len, FieldReader, Splitter, WireError};

/// Size of the frame header.
pub const HEADER_LEN: usize = 4 + 1 + 4;

/// Default limit on message + body length of an incoming frame: 1 GiB. Celeborn pushes
/// are tens of KiB and chunks about 8 MiB, Uniffle sends about 16 MiB, but one large
/// record or block can make a frame larger.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 1 << 30;

/// Java's `TransportFrameDecoder` rejects frames of `Integer.MAX_VALUE` bytes or more.
const JAVA_MAX_FRAME: usize = i32::MAX as usize - 1;

/// A protocol's message, as the frame codec sees it.
pub trait FrameMessage: Sized {
    /// The protocol's name, for logs and metric labels (`uniffle`, `celeborn`).
    const PROTOCOL: &'static str;
    /// The protocol's message type (what the header's type byte names).
    type Kind: Copy + fmt::Debug;
    /// The protocol's error, which carries the frame layer's.
    type Error: From<WireError> + From<io::Error>;

    /// The type for a header's type byte; an unknown or unsupported id is an error (the
    /// stream cannot be realigned after it).
    fn kind_from_id(id: u8) -> Result<Self::Kind, Self::Error>;
    /// Decodes one whole frame: its message part (a [`FieldReader::new`] over
    /// it, or [`FieldReader::split`] when it was read split) and its body.
    fn decode_frame(
        kind: Self::Kind,
        message: FieldReader,
        body: Bytes,
    ) -> Result<Self, Self::Error>;
    /// Where the large byte arrays of a frame of `kind` are, for the server to
    /// read each into a buffer of its own (see [`Splitter`]); None: read whole.
    fn splitter(_kind: Self::Kind) -> Option<Box<dyn Splitter>> {
        None
    }
    /// The type byte of this message.
    fn kind_id(&self) -> u8;
    /// The body, for types that carry one.
    fn frame_body(&self) -> Option<&Bytes>;
    /// Appends the message part (the type's fields).
    fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), Self::Error>;
    /// Whether this frame only keeps the connection alive: the server drops it without
    /// calling a handler.
    fn is_heartbeat(&self) -> bool {
        false
    }
    /// The message's kind as the `message` label of `switchyard_rpc_duration_seconds`
    /// (a handler may name a request more precisely, [`crate::server::Replier::label`]).
    fn kind_name(&self) -> &'static str {
        "frame"
    }
}

pub(crate) struct FrameHeader<K> {
    pub(crate) kind: K,
    pub(crate) message_len: usize,
    pub(crate) body_len: usize,
}

impl<K: Copy> Clone for FrameHeader<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K: Copy> Copy for FrameHeader<K> {}

/// Codec for one protocol's frames, usable on both ends of a connection.
pub struct FrameCodec<M: FrameMessage> {
    max_frame_size: usize,
    // Header of a frame whose bytes have not all arrived yet; parsed once, not per poll.
    pending: Option<FrameHeader<M::Kind>>,
    _message: PhantomData<fn() -> M>,
}

impl<M: FrameMessage> fmt::Debug for FrameCodec<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameCodec")
            .field("max_frame_size", &self.max_frame_size)
            .field("pending", &self.pending.as_ref().map(|h| h.kind))
            .finish()
    }
}

impl<M: FrameMessage> Clone for FrameCodec<M> {
    fn clone(&self) -> Self {
        Self {
            max_frame_size: self.max_frame_size,
            pending: self.pending,
            _message: PhantomData,
        }
    }
}

impl<M: FrameMessage> Default for FrameCodec<M> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl<M: FrameMessage> FrameCodec<M> {
    /// A codec that rejects incoming frames whose message + body length exceeds
    /// `max_frame_size` (capped at what Java itself accepts).
    pub fn new(max_frame_size: usize) -> Self {
        Self {
            max_frame_size: max_frame_size.min(JAVA_MAX_FRAME),
            pending: None,
            _message: PhantomData,
        }
    }

    /// The incoming frame limit in effect.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Validates a header before anything is buffered for it: a bad type or a huge length
    /// must not make us wait for (or allocate) gigabytes first.
    pub(crate) fn parse_header(&self, mut h: &[u8]) -> Result<FrameHeader<M::Kind>, M::Error> {
        let message_len = h.get_i32();
        let type_id = h.get_u8();
        let body_len = h.get_i32();
        let message_len = usize::try_from(message_len).map_err(|_| WireError::NegativeLength {
            field: "message length",
            value: message_len,
        })?;
        let body_len = usize::try_from(body_len).map_err(|_| WireError::NegativeLength {
            field: "body length",
            value: body_len,
        })?;
        let kind = M::kind_from_id(type_id)?;
        // Both are < 2^31, so the sum cannot overflow.
        let size = message_len + body_len;
        if size == 0 {
            return Err(WireError::EmptyFrame.into());
        }
        if size > self.max_frame_size {
            return Err(WireError::FrameTooLarge {
                size: size as u64,
                max: self.max_frame_size,
            }
            .into());
        }
        Ok(FrameHeader {
            kind,
            message_len,
            body_len,
        })
    }
}

/// Smallest step a pending frame's buffer grows by.
const MIN_GROWTH: usize = 64 * 1024;

/// How much room to ask for while a frame of `frame_len` bytes is pending
/// and `have` of them arrived: the bytes missing, but no more than what has
/// arrived (or 64 KiB). Reserving the announced size at once let a 9-byte
/// header allocate up to the frame limit (256 MiB) for bytes that may never
/// come; growing with the bytes that did arrive keeps a pending frame's
/// buffer within twice its received bytes, at the cost of a few copies
/// (about one frame's worth in all) while a big frame arrives.
fn growth(have: usize, frame_len: usize) -> usize {
    (frame_len - have).min(have.max(MIN_GROWTH))
}

impl<M: FrameMessage> Decoder for FrameCodec<M> {
    type Item = M;
    type Error = M::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<M>, M::Error> {
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
            src.reserve(growth(src.len(), frame_len));
            return Ok(None);
        }
        self.pending = None;
        // One freeze, then slices: block data and bodies point into this buffer.
        let mut frame = src.split_to(frame_len).freeze();
        let body = frame.split_off(header.message_len);
        M::decode_frame(header.kind, FieldReader::new(frame), body).map(Some)
    }
}

impl<M: FrameMessage> Encoder<M> for FrameCodec<M> {
    type Error = M::Error;

    fn encode(&mut self, message: M, dst: &mut BytesMut) -> Result<(), M::Error> {
        Encoder::<&M>::encode(self, &message, dst)
    }
}

impl<M: FrameMessage> Encoder<&M> for FrameCodec<M> {
    type Error = M::Error;

    /// Copies the body into `dst`; for large bodies prefer [`frame_parts`] and a
    /// vectored write.
    fn encode(&mut self, message: &M, dst: &mut BytesMut) -> Result<(), M::Error> {
        let start = dst.len();
        let result = encode_head(message, dst).map(|()| {
            if let Some(body) = message.frame_body() {
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
fn encode_head<M: FrameMessage>(message: &M, dst: &mut BytesMut) -> Result<(), M::Error> {
    let body_len = message.frame_body().map_or(0, Bytes::len);
    let body_len_wire = wire_len(body_len, "body")?;
    let start = dst.len();
    dst.put_i32(0); // message length, patched below
    dst.put_u8(message.kind_id());
    dst.put_i32(body_len_wire);
    message.encode_fields(dst)?;
    let message_len = dst.len() - start - HEADER_LEN;
    if message_len + body_len > JAVA_MAX_FRAME {
        return Err(WireError::TooLargeToEncode {
            what: "frame",
            len: message_len + body_len,
        }
        .into());
    }
    let message_len = wire_len(message_len, "message part")?;
    dst[start..start + 4].copy_from_slice(&message_len.to_be_bytes());
    Ok(())
}

/// Encodes `message` as (header + message part, body) without copying the body, for a
/// vectored or two-step write of large payloads.
pub fn frame_parts<M: FrameMessage>(message: &M) -> Result<(Bytes, Bytes), M::Error> {
    let mut head = BytesMut::new();
    encode_head(message, &mut head)?;
    Ok((
        head.freeze(),
        message.frame_body().cloned().unwrap_or_default(),
    ))
}
