//! Server-to-client messages of the Netty data plane.
//!
//! Every response starts with the `RpcResponse` fields (upstream `RpcResponse.java`):
//! `i64 requestId · i32 status · string retMessage`, then its own fields. Data-carrying
//! responses put their payload in the frame body, after the message part, so a server can
//! write it without copying (see [`super::Message::frame_parts`]).

use bytes::{BufMut, Bytes, BytesMut};

use super::error::CodecError;
use crate::proto::StatusCode;
use switchyard_frame::{put_count, put_nullable_string, FieldReader as Reader};

/// The fields shared by all responses; on its own it is the type-0 `RpcResponse` that
/// answers a send request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The request id being answered.
    pub request_id: i64,
    /// A [`StatusCode`] number. Java writes `StatusCode.ordinal()`, which equals the code
    /// for every value; kept raw so that codes newer than ours survive decoding.
    pub status: i32,
    /// Error text; Java `null` is `None`.
    pub ret_message: Option<String>,
}

impl ResponseHead {
    /// A response head with a known status.
    pub fn new(
        request_id: i64,
        status: StatusCode,
        ret_message: impl Into<Option<String>>,
    ) -> Self {
        Self {
            request_id,
            status: status as i32,
            ret_message: ret_message.into(),
        }
    }

    /// The status as our enum, or `None` for a number we do not know.
    pub fn status_code(&self) -> Option<StatusCode> {
        StatusCode::try_from(self.status).ok()
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        dst.put_i32(self.status);
        put_nullable_string(dst, self.ret_message.as_deref(), "retMessage")?;
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            status: r.i32("status")?,
            ret_message: r.nullable_string("retMessage")?,
        })
    }
}

/// Type 14: answer to type 4. Decodable by 0.9 and 0.10 clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleIndexResponse {
    /// Request id, status, message.
    pub head: ResponseHead,
    /// Length of the partition's data file when the index was read; the client ignores
    /// index records beyond it.
    pub data_file_len: i64,
    /// The index file (40-byte records); travels as the frame body.
    pub index_data: Bytes,
}

impl GetLocalShuffleIndexResponse {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.head.encode(dst)?;
        dst.put_i64(self.data_file_len);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        Ok(Self {
            head: ResponseHead::decode(r)?,
            data_file_len: r.i64("dataFileLen")?,
            index_data: body,
        })
    }
}

/// Type 23 (0.10+): type 14 plus storage ids. 0.9 clients fail on it
/// ("Unknown message type: 23"), so only send it to clients known to be 0.10+.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleIndexV2Response {
    /// The type-14 fields.
    pub base: GetLocalShuffleIndexResponse,
    /// Storage ids of the partition's parts; an offset decrease between consecutive index
    /// records moves the client to the next id.
    pub storage_ids: Vec<i32>,
}

impl GetLocalShuffleIndexV2Response {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.base.encode(dst)?;
        put_count(dst, self.storage_ids.len(), "storage id count")?;
        for id in &self.storage_ids {
            dst.put_i32(*id);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        let base = GetLocalShuffleIndexResponse::decode(r, body)?;
        let count = r.count("storage id", 4)?;
        let storage_ids = (0..count)
            .map(|_| r.i32("storageId"))
            .collect::<Result<_, _>>()?;
        Ok(Self { base, storage_ids })
    }
}

/// Type 15: answer to types 5, 24 and 25.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleDataResponse {
    /// Request id, status, message.
    pub head: ResponseHead,
    /// Exactly the requested bytes (empty on error); travels as the frame body.
    pub data: Bytes,
}

impl GetLocalShuffleDataResponse {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.head.encode(dst)
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        Ok(Self {
            head: ResponseHead::decode(r)?,
            data: body,
        })
    }
}

/// Where one block sits inside a memory-read reply (upstream `BufferSegment`, 36 bytes).
/// Unlike the gRPC form, `offset` is an `i32` here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferSegment {
    /// Block id.
    pub block_id: i64,
    /// Offset inside the reply body.
    pub offset: i32,
    /// Compressed length.
    pub length: i32,
    /// Length before compression.
    pub uncompress_length: i32,
    /// CRC-32 of the block bytes.
    pub crc: i64,
    /// The client's encoded task attempt id.
    pub task_attempt_id: i64,
}

impl BufferSegment {
    const ENCODED_LEN: usize = 8 + 4 + 4 + 4 + 8 + 8;

    fn encode(&self, dst: &mut BytesMut) {
        dst.put_i64(self.block_id);
        dst.put_i32(self.offset);
        dst.put_i32(self.length);
        dst.put_i32(self.uncompress_length);
        dst.put_i64(self.crc);
        dst.put_i64(self.task_attempt_id);
    }

    fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            block_id: r.i64("segment blockId")?,
            offset: r.i32("segment offset")?,
            length: r.i32("segment length")?,
            uncompress_length: r.i32("segment uncompressLength")?,
            crc: r.i64("segment crc")?,
            task_attempt_id: r.i64("segment taskAttemptId")?,
        })
    }
}

fn encode_segments(dst: &mut BytesMut, segments: &[BufferSegment]) -> Result<(), CodecError> {
    put_count(dst, segments.len(), "segment count")?;
    for segment in segments {
        segment.encode(dst);
    }
    Ok(())
}

fn decode_segments(r: &mut Reader) -> Result<Vec<BufferSegment>, CodecError> {
    let count = r.count("segment", BufferSegment::ENCODED_LEN)?;
    (0..count).map(|_| BufferSegment::decode(r)).collect()
}

/// Type 16: answer to type 6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMemoryShuffleDataResponse {
    /// Request id, status, message.
    pub head: ResponseHead,
    /// One entry per block in `data`.
    pub segments: Vec<BufferSegment>,
    /// Concatenated block bytes; travels as the frame body.
    pub data: Bytes,
}

impl GetMemoryShuffleDataResponse {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.head.encode(dst)?;
        encode_segments(dst, &self.segments)
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        Ok(Self {
            head: ResponseHead::decode(r)?,
            segments: decode_segments(r)?,
            data: body,
        })
    }
}

/// Type 26 (upstream master after 0.10.0, unreleased): type 16 plus an end-of-data flag.
/// Neither 0.9 nor 0.10 clients can decode it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMemoryShuffleDataV2Response {
    /// The type-16 fields.
    pub base: GetMemoryShuffleDataResponse,
    /// No more data in memory for this partition.
    pub is_end: bool,
}

impl GetMemoryShuffleDataV2Response {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.base.encode(dst)?;
        dst.put_u8(u8::from(self.is_end));
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        let head = ResponseHead::decode(r)?;
        let segments = decode_segments(r)?;
        // Java reads `readByte() == 1`: any other byte means false.
        let is_end = r.u8("isEnd")? == 1;
        Ok(Self {
            base: GetMemoryShuffleDataResponse {
                head,
                segments,
                data: body,
            },
            is_end,
        })
    }
}

/// Type 22 (0.10+, remote merge only): answer to type 21.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSortedShuffleDataResponse {
    /// Request id, status, message.
    pub head: ResponseHead,
    /// Next merged block to ask for.
    pub next_block_id: i64,
    /// Merge state of the partition.
    pub merge_state: i32,
    /// The sorted bytes; travels as the frame body.
    pub data: Bytes,
}

impl GetSortedShuffleDataResponse {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.head.encode(dst)?;
        dst.put_i64(self.next_block_id);
        dst.put_i32(self.merge_state);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, CodecError> {
        Ok(Self {
            head: ResponseHead::decode(r)?,
            next_block_id: r.i64("nextBlockId")?,
            merge_state: r.i32("mergeState")?,
            data: body,
        })
    }
}
