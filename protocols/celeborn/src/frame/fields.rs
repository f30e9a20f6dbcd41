//! Field layouts of the transport messages that carry more than two plain numbers.
//!
//! Each `decode`/`encode` pair follows the upstream class of the same name in
//! `common/src/main/java/org/apache/celeborn/common/network/protocol/` (identical from
//! v0.5.1 to v0.7.0).

use bytes::{BufMut, Bytes, BytesMut};

use super::error::FrameError;
use crate::proto::PbStreamChunkSlice;
use switchyard_frame::{put_bytes, put_string, FieldReader as Reader, WireError};

/// `StreamChunkSlice`: which part of which chunk a fetch asks for. The client matches
/// replies on all four fields, so a server must echo the slice unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamChunkSlice {
    /// Stream id from OpenStream.
    pub stream_id: i64,
    /// Chunk index within the stream.
    pub chunk_index: i32,
    /// Offset inside the chunk.
    pub offset: i32,
    /// Bytes wanted; the clients send `i32::MAX` for "the whole chunk".
    pub len: i32,
}

impl StreamChunkSlice {
    /// Encoded size: i64 + 3 × i32.
    pub const WIRE_LEN: usize = 20;

    /// The slice a client asks for when it wants a whole chunk.
    pub fn whole_chunk(stream_id: i64, chunk_index: i32) -> Self {
        Self {
            stream_id,
            chunk_index,
            offset: 0,
            len: i32::MAX,
        }
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            stream_id: r.i64("streamId")?,
            chunk_index: r.i32("chunkIndex")?,
            offset: r.i32("offset")?,
            len: r.i32("len")?,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) {
        dst.put_i64(self.stream_id);
        dst.put_i32(self.chunk_index);
        dst.put_i32(self.offset);
        dst.put_i32(self.len);
    }
}

impl From<PbStreamChunkSlice> for StreamChunkSlice {
    fn from(pb: PbStreamChunkSlice) -> Self {
        Self {
            stream_id: pb.stream_id,
            chunk_index: pb.chunk_index,
            offset: pb.offset,
            len: pb.len,
        }
    }
}

impl From<StreamChunkSlice> for PbStreamChunkSlice {
    fn from(s: StreamChunkSlice) -> Self {
        Self {
            stream_id: s.stream_id,
            chunk_index: s.chunk_index,
            offset: s.offset,
            len: s.len,
        }
    }
}

/// `PartitionLocation.Mode` as one byte on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Mode {
    /// The primary copy (what clients push to).
    Primary = 0,
    /// The replica copy (what a primary worker forwards to its peer).
    Replica = 1,
}

impl Mode {
    fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        match r.u8("mode")? {
            0 => Ok(Mode::Primary),
            1 => Ok(Mode::Replica),
            other => Err(FrameError::InvalidMode(other)),
        }
    }
}

/// PUSH_DATA (11): one batch for one partition location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushData {
    /// Matches the RpcResponse / RpcFailure reply.
    pub request_id: i64,
    /// Primary or replica.
    pub mode: Mode,
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>"`.
    pub partition_unique_id: String,
    /// The batch: 16-byte header (little-endian for Spark, big-endian for Flink) + data.
    pub body: Bytes,
}

impl PushData {
    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, FrameError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            mode: Mode::decode(r)?,
            shuffle_key: r.string("shuffleKey")?,
            partition_unique_id: r.string("partitionUniqueId")?,
            body,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put_i64(self.request_id);
        dst.put_u8(self.mode as u8);
        put_string(dst, &self.shuffle_key, "shuffleKey")?;
        Ok(put_string(
            dst,
            &self.partition_unique_id,
            "partitionUniqueId",
        )?)
    }
}

/// PUSH_MERGED_DATA (12): batches of one map task for several partitions on one worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushMergedData {
    /// Matches the RpcResponse / RpcFailure reply.
    pub request_id: i64,
    /// Primary or replica.
    pub mode: Mode,
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// Target of batch i.
    pub partition_unique_ids: UniqueIds,
    /// Start of batch i inside `body`; the last batch runs to the end of the body.
    pub batch_offsets: Vec<i32>,
    /// The batches, concatenated.
    pub body: Bytes,
}

impl PushMergedData {
    pub(crate) fn decode(r: &mut Reader, body: Bytes) -> Result<Self, FrameError> {
        let request_id = r.i64("requestId")?;
        let mode = Mode::decode(r)?;
        let shuffle_key = r.string("shuffleKey")?;
        let n = r.count("partitionUniqueIds", 4)?;
        // `count` has checked that the n length prefixes fit in what is
        // left, so these exact capacities are at most the wire bytes.
        let mut partition_unique_ids = UniqueIds::with_capacity(n);
        for _ in 0..n {
            let raw = r.byte_array("partitionUniqueId")?;
            let id = std::str::from_utf8(&raw).map_err(|_| WireError::InvalidUtf8 {
                field: "partitionUniqueId",
            })?;
            partition_unique_ids.push(id);
        }
        let m = r.count("batchOffsets", 4)?;
        let mut batch_offsets = Vec::with_capacity(m);
        for _ in 0..m {
            batch_offsets.push(r.i32("batchOffset")?);
        }
        if n != m {
            // Java would index past one array or the other.
            return Err(FrameError::MismatchedBatchCounts { ids: n, offsets: m });
        }
        Ok(Self {
            request_id,
            mode,
            shuffle_key,
            partition_unique_ids,
            batch_offsets,
            body,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put_i64(self.request_id);
        dst.put_u8(self.mode as u8);
        put_string(dst, &self.shuffle_key, "shuffleKey")?;
        dst.put_i32(switchyard_frame::wire_len(
            self.partition_unique_ids.len(),
            "partitionUniqueIds",
        )?);
        for id in self.partition_unique_ids.iter() {
            put_string(dst, id, "partitionUniqueId")?;
        }
        dst.put_i32(switchyard_frame::wire_len(
            self.batch_offsets.len(),
            "batchOffsets",
        )?);
        for offset in &self.batch_offsets {
            dst.put_i32(*offset);
        }
        Ok(())
    }

    /// The body cut into one batch each, index-aligned with
    /// `partition_unique_ids`: zero-copy slices, except that a batch smaller
    /// than half the body is copied. Offsets must be non-decreasing and
    /// inside the body.
    pub fn batches(&self) -> Result<Vec<Bytes>, FrameError> {
        let body_len = self.body.len();
        let mut starts = Vec::with_capacity(self.batch_offsets.len());
        let mut previous = 0usize;
        for (index, &offset) in self.batch_offsets.iter().enumerate() {
            let start = usize::try_from(offset)
                .ok()
                .filter(|&s| s >= previous && s <= body_len)
                .ok_or(FrameError::BadBatchOffset {
                    index,
                    offset,
                    body_len,
                })?;
            starts.push(start);
            previous = start;
        }
        // A batch less than half the frame is copied out (`Block::detach`):
        // kept as a slice it would pin the whole frame while being charged
        // only its own bytes, e.g. the one stored batch of a merged push
        // whose other batches went to split or unknown locations.
        Ok(starts
            .iter()
            .enumerate()
            .map(|(i, &start)| {
                let end = starts.get(i + 1).copied().unwrap_or(body_len);
                switchyard_storage::Block::detach(self.body.slice(start..end), body_len)
            })
            .collect())
    }
}

/// The partition unique ids of a [`PushMergedData`]: one text buffer and
/// the end of each id in it. A `Vec<String>` would cost 24 bytes per id, so
/// 6× (12× while the vector doubles) the 4 wire bytes of an empty id; here
/// an id costs its 4-byte end plus its own bytes, no more than on the wire.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct UniqueIds {
    text: String,
    ends: Vec<u32>,
}

impl UniqueIds {
    pub fn with_capacity(ids: usize) -> Self {
        Self {
            text: String::new(),
            ends: Vec::with_capacity(ids),
        }
    }

    pub fn push(&mut self, id: &str) {
        self.text.push_str(id);
        // A frame is below 2^31 bytes, so its text always fits.
        self.ends.push(self.text.len() as u32);
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        Some(&self.text[start..end])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).unwrap_or_default())
    }
}

impl std::fmt::Debug for UniqueIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for UniqueIds {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut ids = UniqueIds::default();
        for id in iter {
            ids.push(id.as_ref());
        }
        ids
    }
}

impl From<Vec<String>> for UniqueIds {
    fn from(ids: Vec<String>) -> Self {
        ids.into_iter().collect()
    }
}

/// REGION_START (13), legacy form of `PbRegionStart` (Flink MAP partitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionStart {
    /// Primary or replica.
    pub mode: Mode,
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>"`.
    pub partition_unique_id: String,
    /// Task attempt.
    pub attempt_id: i32,
    /// Index of the region being started.
    pub current_region_index: i32,
    /// Whether every subpartition gets the same data.
    pub is_broadcast: bool,
}

impl RegionStart {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            mode: Mode::decode(r)?,
            shuffle_key: r.string("shuffleKey")?,
            partition_unique_id: r.string("partitionUniqueId")?,
            attempt_id: r.i32("attemptId")?,
            current_region_index: r.i32("currentRegionIndex")?,
            // Java readBoolean: any non-zero byte is true.
            is_broadcast: r.u8("isBroadcast")? != 0,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put_u8(self.mode as u8);
        put_string(dst, &self.shuffle_key, "shuffleKey")?;
        put_string(dst, &self.partition_unique_id, "partitionUniqueId")?;
        dst.put_i32(self.attempt_id);
        dst.put_i32(self.current_region_index);
        dst.put_u8(u8::from(self.is_broadcast));
        Ok(())
    }
}

/// REGION_FINISH (14), legacy form of `PbRegionFinish`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionFinish {
    /// Primary or replica.
    pub mode: Mode,
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>"`.
    pub partition_unique_id: String,
    /// Task attempt.
    pub attempt_id: i32,
}

impl RegionFinish {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            mode: Mode::decode(r)?,
            shuffle_key: r.string("shuffleKey")?,
            partition_unique_id: r.string("partitionUniqueId")?,
            attempt_id: r.i32("attemptId")?,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put_u8(self.mode as u8);
        put_string(dst, &self.shuffle_key, "shuffleKey")?;
        put_string(dst, &self.partition_unique_id, "partitionUniqueId")?;
        dst.put_i32(self.attempt_id);
        Ok(())
    }
}

/// PUSH_DATA_HAND_SHAKE (15), legacy form of `PbPushDataHandShake`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushDataHandShake {
    /// Primary or replica.
    pub mode: Mode,
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>"`.
    pub partition_unique_id: String,
    /// Task attempt.
    pub attempt_id: i32,
    /// Number of downstream subpartitions.
    pub num_partitions: i32,
    /// Flink network buffer size.
    pub buffer_size: i32,
}

impl PushDataHandShake {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            mode: Mode::decode(r)?,
            shuffle_key: r.string("shuffleKey")?,
            partition_unique_id: r.string("partitionUniqueId")?,
            attempt_id: r.i32("attemptId")?,
            num_partitions: r.i32("numPartitions")?,
            buffer_size: r.i32("bufferSize")?,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put_u8(self.mode as u8);
        put_string(dst, &self.shuffle_key, "shuffleKey")?;
        put_string(dst, &self.partition_unique_id, "partitionUniqueId")?;
        dst.put_i32(self.attempt_id);
        dst.put_i32(self.num_partitions);
        dst.put_i32(self.buffer_size);
        Ok(())
    }
}

/// OPEN_STREAM (6), legacy form of `PbOpenStream` (only inside an RpcRequest body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenStream {
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>-<mode>"`.
    pub file_name: String,
    /// First map index.
    pub start_map_index: i32,
    /// End map index (exclusive; `i32::MAX` for all).
    pub end_map_index: i32,
}

impl OpenStream {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            shuffle_key: r.string("shuffleKey")?,
            file_name: r.string("fileName")?,
            start_map_index: r.i32("startMapIndex")?,
            end_map_index: r.i32("endMapIndex")?,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        put_bytes(dst, self.shuffle_key.as_bytes(), "shuffleKey")?;
        put_bytes(dst, self.file_name.as_bytes(), "fileName")?;
        dst.put_i32(self.start_map_index);
        dst.put_i32(self.end_map_index);
        Ok(())
    }
}

/// OPEN_STREAM_WITH_CREDIT (18), legacy Flink credit-stream open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenStreamWithCredit {
    /// `"<appId>-<shuffleId>"`.
    pub shuffle_key: String,
    /// `"<partitionId>-<epoch>-<mode>"`.
    pub file_name: String,
    /// First subpartition.
    pub start_index: i32,
    /// Last subpartition (inclusive).
    pub end_index: i32,
    /// Buffers the client can take right away.
    pub initial_credit: i32,
}

impl OpenStreamWithCredit {
    pub(crate) fn decode(r: &mut Reader) -> Result<Self, FrameError> {
        Ok(Self {
            shuffle_key: r.string("shuffleKey")?,
            file_name: r.string("fileName")?,
            start_index: r.i32("startIndex")?,
            end_index: r.i32("endIndex")?,
            initial_credit: r.i32("initialCredit")?,
        })
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), FrameError> {
        put_bytes(dst, self.shuffle_key.as_bytes(), "shuffleKey")?;
        put_bytes(dst, self.file_name.as_bytes(), "fileName")?;
        dst.put_i32(self.start_index);
        dst.put_i32(self.end_index);
        dst.put_i32(self.initial_credit);
        Ok(())
    }
}
