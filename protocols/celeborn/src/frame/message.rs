//! The transport message types, their dispatch, and the legacy "message inside an
//! RpcRequest body" form.
//!
//! Type ids are upstream `Message.Type` (`common/.../network/protocol/Message.java`):
//! 0-22 since before 0.5, 23-25 added in 0.6.0. There is no id 8 or 10.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::FrameError;
use super::fields::{
    OpenStream, OpenStreamWithCredit, PushData, PushDataHandShake, PushMergedData, RegionFinish,
    RegionStart, StreamChunkSlice,
};
use switchyard_frame::{put_bytes, put_string, wire_len, FieldReader as Reader, WireError};

/// The message types that travel as raw frames, with their wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// Legacy raw chunk fetch (clients ≤ 0.3); newer clients send `PbChunkFetchRequest`.
    ChunkFetchRequest = 0,
    /// Chunk bytes, header = the requested slice.
    ChunkFetchSuccess = 1,
    /// Chunk fetch error, header = the requested slice.
    ChunkFetchFailure = 2,
    /// Request expecting a reply with the same id.
    RpcRequest = 3,
    /// Reply to an RpcRequest, PushData or PushMergedData.
    RpcResponse = 4,
    /// Error reply.
    RpcFailure = 5,
    /// Legacy open (inside an RpcRequest body only).
    OpenStream = 6,
    /// Legacy open reply (inside an RpcResponse body only).
    StreamHandle = 7,
    /// Fire-and-forget RPC.
    OneWayMessage = 9,
    /// One batch.
    PushData = 11,
    /// Several batches for several partitions.
    PushMergedData = 12,
    /// Legacy Flink region start (inside an RpcRequest body only).
    RegionStart = 13,
    /// Legacy Flink region finish (inside an RpcRequest body only).
    RegionFinish = 14,
    /// Legacy Flink handshake (inside an RpcRequest body only).
    PushDataHandShake = 15,
    /// Legacy raw credit grant.
    ReadAddCredit = 16,
    /// One Flink record, worker → client.
    ReadData = 17,
    /// Legacy Flink open (inside an RpcRequest body only).
    OpenStreamWithCredit = 18,
    /// Records ready on a credit stream, worker → client.
    BacklogAnnouncement = 19,
    /// Stream error, worker → Flink client.
    TransportableError = 20,
    /// Legacy raw stream close.
    BufferStreamEnd = 21,
    /// Keep-alive; one zero byte of message part.
    Heartbeat = 22,
    /// One Flink hybrid-shuffle record of one subpartition, worker → client (0.6+).
    SubPartitionReadData = 25,
}

impl MessageType {
    /// The name a request of this type has in metrics.
    pub fn name(self) -> &'static str {
        use MessageType::*;
        match self {
            ChunkFetchRequest => "ChunkFetchRequest",
            RpcRequest => "RpcRequest",
            OneWayMessage => "OneWayMessage",
            PushData => "PushData",
            PushMergedData => "PushMergedData",
            ReadAddCredit => "ReadAddCredit",
            BufferStreamEnd => "BufferStreamEnd",
            _ => "other",
        }
    }

    /// The type for a header's type byte.
    pub fn from_id(id: u8) -> Result<Self, FrameError> {
        use MessageType::*;
        Ok(match id {
            0 => ChunkFetchRequest,
            1 => ChunkFetchSuccess,
            2 => ChunkFetchFailure,
            3 => RpcRequest,
            4 => RpcResponse,
            5 => RpcFailure,
            6 => OpenStream,
            7 => StreamHandle,
            9 => OneWayMessage,
            11 => PushData,
            12 => PushMergedData,
            13 => RegionStart,
            14 => RegionFinish,
            15 => PushDataHandShake,
            16 => ReadAddCredit,
            17 => ReadData,
            18 => OpenStreamWithCredit,
            19 => BacklogAnnouncement,
            20 => TransportableError,
            21 => BufferStreamEnd,
            22 => Heartbeat,
            25 => SubPartitionReadData,
            // Declared in 0.6 `Message.Type` but with no message class: the content always
            // travels as PbSegmentStart / PbNotifyRequiredSegment inside an RpcRequest.
            23 => {
                return Err(FrameError::UnsupportedMessageType {
                    id,
                    name: "SEGMENT_START",
                })
            }
            24 => {
                return Err(FrameError::UnsupportedMessageType {
                    id,
                    name: "NOTIFY_REQUIRED_SEGMENT",
                })
            }
            _ => return Err(WireError::UnknownMessageType(id).into()),
        })
    }

    /// The wire id.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// Whether frames of this type carry a body after the message part.
    pub fn has_body(self) -> bool {
        use MessageType::*;
        matches!(
            self,
            ChunkFetchSuccess
                | RpcRequest
                | RpcResponse
                | OneWayMessage
                | PushData
                | PushMergedData
                | ReadData
                | SubPartitionReadData
        )
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}({})", self, self.id())
    }
}

/// One decoded transport message. Bodies are zero-copy slices of the received frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// 0: legacy raw fetch.
    ChunkFetchRequest(StreamChunkSlice),
    /// 1: chunk bytes.
    ChunkFetchSuccess {
        /// The requested slice, echoed.
        slice: StreamChunkSlice,
        /// The bytes.
        body: Bytes,
    },
    /// 2: chunk fetch error.
    ChunkFetchFailure {
        /// The requested slice, echoed.
        slice: StreamChunkSlice,
        /// Free text.
        error: String,
    },
    /// 3: request. Its header repeats the body length; like Java, the copy is ignored on
    /// decode and recomputed on encode.
    RpcRequest {
        /// Reply-matching id (one process-wide counter on the client).
        request_id: i64,
        /// Envelope + Java-serialized content (RPC ports) or TransportMessage bytes (push
        /// and fetch ports).
        body: Bytes,
    },
    /// 4: reply (the body may be empty).
    RpcResponse {
        /// Id of the request.
        request_id: i64,
        /// Reply payload.
        body: Bytes,
    },
    /// 5: error reply.
    RpcFailure {
        /// Id of the request.
        request_id: i64,
        /// Free text; push failures start with a `StatusCode` name.
        error: String,
    },
    /// 6: legacy open.
    OpenStream(OpenStream),
    /// 7: legacy open reply.
    StreamHandle {
        /// New stream.
        stream_id: i64,
        /// Chunks in the stream.
        num_chunks: i32,
    },
    /// 9: one-way RPC (the header repeats the body length, ignored like in Java).
    OneWayMessage {
        /// Envelope + content.
        body: Bytes,
    },
    /// 11.
    PushData(PushData),
    /// 12.
    PushMergedData(PushMergedData),
    /// 13: legacy region start.
    RegionStart(RegionStart),
    /// 14: legacy region finish.
    RegionFinish(RegionFinish),
    /// 15: legacy handshake.
    PushDataHandShake(PushDataHandShake),
    /// 16: legacy raw credit grant.
    ReadAddCredit {
        /// Credit stream.
        stream_id: i64,
        /// Buffers granted.
        credit: i32,
    },
    /// 17: one record of a credit stream.
    ReadData {
        /// Credit stream.
        stream_id: i64,
        /// The stored record (16-byte header + data).
        body: Bytes,
    },
    /// 18: legacy Flink open.
    OpenStreamWithCredit(OpenStreamWithCredit),
    /// 19.
    BacklogAnnouncement {
        /// Credit stream.
        stream_id: i64,
        /// Records ready.
        backlog: i32,
    },
    /// 20.
    TransportableError {
        /// Credit stream.
        stream_id: i64,
        /// Error text.
        message: String,
    },
    /// 21: legacy raw close.
    BufferStreamEnd {
        /// Stream to close.
        stream_id: i64,
    },
    /// 22.
    Heartbeat,
    /// 25: one record of one subpartition (Flink hybrid shuffle, 0.6+).
    SubPartitionReadData {
        /// Credit stream.
        stream_id: i64,
        /// Subpartition of the record.
        sub_partition_id: i32,
        /// The record.
        body: Bytes,
    },
}

impl Message {
    /// The wire type.
    pub fn message_type(&self) -> MessageType {
        use MessageType as T;
        match self {
            Message::ChunkFetchRequest(_) => T::ChunkFetchRequest,
            Message::ChunkFetchSuccess { .. } => T::ChunkFetchSuccess,
            Message::ChunkFetchFailure { .. } => T::ChunkFetchFailure,
            Message::RpcRequest { .. } => T::RpcRequest,
            Message::RpcResponse { .. } => T::RpcResponse,
            Message::RpcFailure { .. } => T::RpcFailure,
            Message::OpenStream(_) => T::OpenStream,
            Message::StreamHandle { .. } => T::StreamHandle,
            Message::OneWayMessage { .. } => T::OneWayMessage,
            Message::PushData(_) => T::PushData,
            Message::PushMergedData(_) => T::PushMergedData,
            Message::RegionStart(_) => T::RegionStart,
            Message::RegionFinish(_) => T::RegionFinish,
            Message::PushDataHandShake(_) => T::PushDataHandShake,
            Message::ReadAddCredit { .. } => T::ReadAddCredit,
            Message::ReadData { .. } => T::ReadData,
            Message::OpenStreamWithCredit(_) => T::OpenStreamWithCredit,
            Message::BacklogAnnouncement { .. } => T::BacklogAnnouncement,
            Message::TransportableError { .. } => T::TransportableError,
            Message::BufferStreamEnd { .. } => T::BufferStreamEnd,
            Message::Heartbeat => T::Heartbeat,
            Message::SubPartitionReadData { .. } => T::SubPartitionReadData,
        }
    }

    /// The body, for types that carry one.
    pub fn body(&self) -> Option<&Bytes> {
        match self {
            Message::ChunkFetchSuccess { body, .. }
            | Message::RpcRequest { body, .. }
            | Message::RpcResponse { body, .. }
            | Message::OneWayMessage { body }
            | Message::ReadData { body, .. }
            | Message::SubPartitionReadData { body, .. } => Some(body),
            Message::PushData(m) => Some(&m.body),
            Message::PushMergedData(m) => Some(&m.body),
            _ => None,
        }
    }

    /// Decodes one frame's message part (`fields`) and body.
    pub(crate) fn decode(ty: MessageType, mut r: Reader, body: Bytes) -> Result<Self, FrameError> {
        if !ty.has_body() && !body.is_empty() {
            return Err(FrameError::UnexpectedBody {
                message: ty,
                len: body.len(),
            });
        }
        let message = Self::decode_fields(ty, &mut r, body)?;
        if r.remaining() != 0 {
            return Err(FrameError::TrailingBytes {
                message: ty,
                unread: r.remaining(),
            });
        }
        Ok(message)
    }

    fn decode_fields(ty: MessageType, r: &mut Reader, body: Bytes) -> Result<Self, FrameError> {
        use MessageType as T;
        Ok(match ty {
            T::ChunkFetchRequest => Message::ChunkFetchRequest(StreamChunkSlice::decode(r)?),
            T::ChunkFetchSuccess => Message::ChunkFetchSuccess {
                slice: StreamChunkSlice::decode(r)?,
                body,
            },
            T::ChunkFetchFailure => Message::ChunkFetchFailure {
                slice: StreamChunkSlice::decode(r)?,
                error: r.string("errorString")?,
            },
            T::RpcRequest => {
                let request_id = r.i64("requestId")?;
                r.i32("bodyLength")?;
                Message::RpcRequest { request_id, body }
            }
            T::RpcResponse => {
                let request_id = r.i64("requestId")?;
                r.i32("bodyLength")?;
                Message::RpcResponse { request_id, body }
            }
            T::RpcFailure => Message::RpcFailure {
                request_id: r.i64("requestId")?,
                error: r.string("errorString")?,
            },
            T::OpenStream => Message::OpenStream(OpenStream::decode(r)?),
            T::StreamHandle => Message::StreamHandle {
                stream_id: r.i64("streamId")?,
                num_chunks: r.i32("numChunks")?,
            },
            T::OneWayMessage => {
                r.i32("bodyLength")?;
                Message::OneWayMessage { body }
            }
            T::PushData => Message::PushData(PushData::decode(r, body)?),
            T::PushMergedData => Message::PushMergedData(PushMergedData::decode(r, body)?),
            T::RegionStart => Message::RegionStart(RegionStart::decode(r)?),
            T::RegionFinish => Message::RegionFinish(RegionFinish::decode(r)?),
            T::PushDataHandShake => Message::PushDataHandShake(PushDataHandShake::decode(r)?),
            T::ReadAddCredit => Message::ReadAddCredit {
                stream_id: r.i64("streamId")?,
                credit: r.i32("credit")?,
            },
            T::ReadData => Message::ReadData {
                stream_id: r.i64("streamId")?,
                body,
            },
            T::OpenStreamWithCredit => {
                Message::OpenStreamWithCredit(OpenStreamWithCredit::decode(r)?)
            }
            T::BacklogAnnouncement => Message::BacklogAnnouncement {
                stream_id: r.i64("streamId")?,
                backlog: r.i32("backlog")?,
            },
            T::TransportableError => Message::TransportableError {
                stream_id: r.i64("streamId")?,
                message: r.string("errorMessage")?,
            },
            T::BufferStreamEnd => Message::BufferStreamEnd {
                stream_id: r.i64("streamId")?,
            },
            T::Heartbeat => {
                // Java writes one 0 byte and never looks at it.
                r.u8("heartbeat")?;
                Message::Heartbeat
            }
            T::SubPartitionReadData => Message::SubPartitionReadData {
                stream_id: r.i64("streamId")?,
                sub_partition_id: r.i32("subPartitionId")?,
                body,
            },
        })
    }

    /// Appends the message part (the fields after the 9-byte header) to `dst`.
    pub(crate) fn encode_fields(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        let body_len = |body: &Bytes| wire_len(body.len(), "body");
        match self {
            Message::ChunkFetchRequest(slice) => slice.encode(dst),
            Message::ChunkFetchSuccess { slice, .. } => slice.encode(dst),
            Message::ChunkFetchFailure { slice, error } => {
                slice.encode(dst);
                put_string(dst, error, "errorString")?;
            }
            Message::RpcRequest { request_id, body }
            | Message::RpcResponse { request_id, body } => {
                dst.put_i64(*request_id);
                dst.put_i32(body_len(body)?);
            }
            Message::RpcFailure { request_id, error } => {
                dst.put_i64(*request_id);
                put_string(dst, error, "errorString")?;
            }
            Message::OpenStream(m) => m.encode(dst)?,
            Message::StreamHandle {
                stream_id,
                num_chunks,
            } => {
                dst.put_i64(*stream_id);
                dst.put_i32(*num_chunks);
            }
            Message::OneWayMessage { body } => dst.put_i32(body_len(body)?),
            Message::PushData(m) => m.encode(dst)?,
            Message::PushMergedData(m) => m.encode(dst)?,
            Message::RegionStart(m) => m.encode(dst)?,
            Message::RegionFinish(m) => m.encode(dst)?,
            Message::PushDataHandShake(m) => m.encode(dst)?,
            Message::ReadAddCredit { stream_id, credit } => {
                dst.put_i64(*stream_id);
                dst.put_i32(*credit);
            }
            Message::ReadData { stream_id, .. } => dst.put_i64(*stream_id),
            Message::OpenStreamWithCredit(m) => m.encode(dst)?,
            Message::BacklogAnnouncement { stream_id, backlog } => {
                dst.put_i64(*stream_id);
                dst.put_i32(*backlog);
            }
            Message::TransportableError { stream_id, message } => {
                dst.put_i64(*stream_id);
                put_bytes(dst, message.as_bytes(), "errorMessage")?;
            }
            Message::BufferStreamEnd { stream_id } => dst.put_i64(*stream_id),
            Message::Heartbeat => dst.put_u8(0),
            Message::SubPartitionReadData {
                stream_id,
                sub_partition_id,
                ..
            } => {
                dst.put_i64(*stream_id);
                dst.put_i32(*sub_partition_id);
            }
        }
        Ok(())
    }

    /// Decodes the legacy form a very old client puts inside an RpcRequest body (and a
    /// legacy RpcResponse body for StreamHandle): `u8 type id` + that type's fields, no
    /// frame header (upstream `Message.toByteBuffer` / `Message.decode(ByteBuffer)`).
    /// Only types without a body can be carried this way.
    pub fn decode_legacy(bytes: Bytes) -> Result<Self, FrameError> {
        let mut r = Reader::new(bytes);
        let ty = MessageType::from_id(r.u8("type")?)?;
        if ty.has_body() {
            return Err(FrameError::NotALegacyBody(ty));
        }
        let message = Self::decode_fields(ty, &mut r, Bytes::new())?;
        if r.remaining() != 0 {
            return Err(FrameError::TrailingBytes {
                message: ty,
                unread: r.remaining(),
            });
        }
        Ok(message)
    }

    /// The legacy in-body form (see [`Message::decode_legacy`]); e.g. the `StreamHandle`
    /// reply to a legacy `OpenStream`.
    pub fn to_legacy_bytes(&self) -> Result<Bytes, FrameError> {
        let ty = self.message_type();
        if ty.has_body() {
            return Err(FrameError::NotALegacyBody(ty));
        }
        let mut dst = BytesMut::new();
        dst.put_u8(ty.id());
        self.encode_fields(&mut dst)?;
        Ok(dst.freeze())
    }
}
