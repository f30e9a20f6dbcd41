//! Client-to-server messages of the Netty data plane.
//!
//! Field order mirrors the `encode` methods of upstream
//! `common/src/main/java/org/apache/uniffle/common/netty/protocol/*Request.java` and
//! `Encoders.java` (v0.10.0); every field is big-endian. Requests never carry a body.

use bytes::{BufMut, Bytes, BytesMut};

use super::error::CodecError;
use crate::bitmap::{BitmapError, IdBitmap};
use switchyard_frame::{
    put_count, put_nullable_bytes, put_string, ByteArray, FieldReader as Reader, Next, Splitter,
};

/// Replica servers listed per block: the client lists the block's replica
/// servers (`rss.data.replica`, 1 to 3 in practice); servers ignore them.
pub(crate) const MAX_REPLICAS_PER_BLOCK: usize = 16;
/// Read-ahead hints per V3 read: the client sends a handful
/// (`rss.client.read.nextReadSegmentsReportCount`); more is not a client.
pub(crate) const MAX_NEXT_READ_SEGMENTS: usize = 1024;

/// A replica server listed with each block of a send request. Client-side bookkeeping:
/// the Java server parses and ignores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaServer {
    /// Server id (e.g. `ip-grpcPort-nettyPort`).
    pub id: String,
    /// Host or ip.
    pub host: String,
    /// gRPC port.
    pub grpc_port: i32,
    /// Netty port.
    pub netty_port: i32,
}

impl ReplicaServer {
    // Two empty strings and two ints.
    const MIN_ENCODED_LEN: usize = 4 + 4 + 4 + 4;

    fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        put_string(dst, &self.id, "replica server id")?;
        put_string(dst, &self.host, "replica server host")?;
        dst.put_i32(self.grpc_port);
        dst.put_i32(self.netty_port);
        Ok(())
    }

    fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            id: r.non_null_string("replica server id")?,
            host: r.non_null_string("replica server host")?,
            grpc_port: r.i32("replica grpcPort")?,
            netty_port: r.i32("replica nettyPort")?,
        })
    }
}

/// One block of a [`SendShuffleDataRequest`] (upstream `Encoders.encodeShuffleBlockInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShuffleBlock {
    /// Partition id, repeated per block by the client.
    pub partition_id: i32,
    /// Block id.
    pub block_id: i64,
    /// Compressed length as declared by the client. Not checked against `data.len()` here:
    /// the Java server does not check either; handlers should before storing.
    pub length: i32,
    /// Shuffle id, repeated per block by the client.
    pub shuffle_id: i32,
    /// CRC-32 of `data` (unsigned value in an i64).
    pub crc: i64,
    /// The client's encoded task attempt id.
    pub task_attempt_id: i64,
    /// The block bytes; a slice of the received frame.
    pub data: Bytes,
    /// Replica servers of this block (ignored by servers).
    pub replicas: Vec<ReplicaServer>,
    /// Length before compression.
    pub uncompress_length: i32,
    /// Client-side memory bookkeeping (ignored by servers).
    pub free_memory: i64,
}

impl ShuffleBlock {
    // Fixed fields with empty data and no replicas.
    const MIN_ENCODED_LEN: usize = 4 + 8 + 4 + 4 + 8 + 8 + 4 + 4 + 4 + 8;

    fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i32(self.partition_id);
        dst.put_i64(self.block_id);
        dst.put_i32(self.length);
        dst.put_i32(self.shuffle_id);
        dst.put_i64(self.crc);
        dst.put_i64(self.task_attempt_id);
        put_nullable_bytes(dst, Some(&self.data), "block data")?;
        put_count(dst, self.replicas.len(), "replica count")?;
        for server in &self.replicas {
            server.encode(dst)?;
        }
        dst.put_i32(self.uncompress_length);
        dst.put_i64(self.free_memory);
        Ok(())
    }

    /// `frame_len`: the message part the block's data is a slice of.
    fn decode(r: &mut Reader, frame_len: usize) -> Result<Self, CodecError> {
        let partition_id = r.i32("block partitionId")?;
        let block_id = r.i64("blockId")?;
        let length = r.i32("block length")?;
        let shuffle_id = r.i32("block shuffleId")?;
        let crc = r.i64("block crc")?;
        let task_attempt_id = r.i64("block taskAttemptId")?;
        // A block read apart owns its buffer (see `SendDataSplitter`). One
        // sliced from a frame read whole and less than half of it is copied
        // out, or it would pin the whole frame (other blocks, ignored replica
        // strings) while charged for its own bytes only.
        let data = match r.split_byte_array("block data")? {
            ByteArray::Own(data) => data,
            ByteArray::InFrame(data) => switchyard_storage::Block::detach(data, frame_len),
        };
        let replica_count = r.count_at_most(
            "replica",
            ReplicaServer::MIN_ENCODED_LEN,
            MAX_REPLICAS_PER_BLOCK,
        )?;
        let mut replicas = Vec::with_capacity(r.capacity_for::<ReplicaServer>(replica_count));
        for _ in 0..replica_count {
            replicas.push(ReplicaServer::decode(r)?);
        }
        Ok(Self {
            partition_id,
            block_id,
            length,
            shuffle_id,
            crc,
            task_attempt_id,
            data,
            replicas,
            uncompress_length: r.i32("block uncompressLength")?,
            free_memory: r.i64("block freeMemory")?,
        })
    }
}

/// The blocks of one partition inside a [`SendShuffleDataRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionBlocks {
    /// Partition id.
    pub partition_id: i32,
    /// Its blocks, in client order.
    pub blocks: Vec<ShuffleBlock>,
}

/// Type 3: the Netty form of gRPC `sendShuffleData`. Answered with an `RpcResponse`.
/// There is no stageAttemptNumber on this wire (the Java server assumes 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendShuffleDataRequest {
    /// Request id, echoed in the response.
    pub request_id: i64,
    /// Application id.
    pub app_id: String,
    /// Shuffle id.
    pub shuffle_id: i32,
    /// Ticket from gRPC `requireBuffer`.
    pub require_buffer_id: i64,
    /// Blocks grouped by partition.
    pub partitions: Vec<PartitionBlocks>,
    /// Client clock in ms.
    pub timestamp: i64,
}

impl SendShuffleDataRequest {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        put_string(dst, &self.app_id, "appId")?;
        dst.put_i32(self.shuffle_id);
        dst.put_i64(self.require_buffer_id);
        put_count(dst, self.partitions.len(), "partition count")?;
        for partition in &self.partitions {
            dst.put_i32(partition.partition_id);
            put_count(dst, partition.blocks.len(), "block count")?;
            for block in &partition.blocks {
                block.encode(dst)?;
            }
        }
        dst.put_i64(self.timestamp);
        Ok(())
    }

    /// The length of its message part, as Java's `encodedLength()` counts it
    /// (what the stock Netty client adds to its requireBuffer).
    pub fn encoded_len(&self) -> usize {
        let string = |s: &str| 4 + s.len();
        let blocks: usize = self
            .partitions
            .iter()
            .map(|p| {
                4 + 4
                    + p.blocks
                        .iter()
                        .map(|b| {
                            ShuffleBlock::MIN_ENCODED_LEN
                                + b.data.len()
                                + b.replicas
                                    .iter()
                                    .map(|r| string(&r.id) + string(&r.host) + 4 + 4)
                                    .sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum();
        8 + string(&self.app_id) + 4 + 8 + 4 + blocks + 8
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        let frame_len = r.remaining();
        let request_id = r.i64("requestId")?;
        let app_id = r.non_null_string("appId")?;
        let shuffle_id = r.i32("shuffleId")?;
        let require_buffer_id = r.i64("requireBufferId")?;
        // partition id + block count
        let partition_count = r.count("partition", 8)?;
        // Sized from the bytes left, not the count alone: a PartitionBlocks
        // is 32 bytes against 8 on the wire, a ShuffleBlock ~130 against 56.
        let mut partitions = Vec::with_capacity(r.capacity_for::<PartitionBlocks>(partition_count));
        for _ in 0..partition_count {
            let partition_id = r.i32("partitionId")?;
            let block_count = r.count("block", ShuffleBlock::MIN_ENCODED_LEN)?;
            let mut blocks = Vec::with_capacity(r.capacity_for::<ShuffleBlock>(block_count));
            for _ in 0..block_count {
                blocks.push(ShuffleBlock::decode(r, frame_len)?);
            }
            partitions.push(PartitionBlocks {
                partition_id,
                blocks,
            });
        }
        Ok(Self {
            request_id,
            app_id,
            shuffle_id,
            require_buffer_id,
            partitions,
            timestamp: r.i64("timestamp")?,
        })
    }
}

/// Walks a [`SendShuffleDataRequest`] as it arrives, so the server reads each
/// block's data into a buffer of its own ([`Splitter`]). It follows the
/// layout of `decode` by lengths and counts only; `decode` checks the rest.
#[derive(Debug, Default)]
pub(crate) struct SendDataSplitter {
    /// Where the next unwalked field starts in the fields read so far.
    pos: usize,
    step: SendDataStep,
    partitions_left: usize,
    blocks_left: usize,
    replicas_left: usize,
}

#[derive(Debug, Default, Clone, Copy)]
enum SendDataStep {
    /// requestId, appId's length.
    #[default]
    Head,
    /// appId, shuffleId, requireBufferId, the partition count.
    AppId,
    /// partitionId, the block count.
    Partition,
    /// The fixed fields of a block and its data's length.
    Block,
    /// The replica count after a block's data.
    ReplicaCount,
    /// One replica server: two strings and two ports.
    Replica,
    /// uncompressLength, freeMemory.
    BlockTail,
    /// timestamp.
    Done,
}

/// The `i32` at `pos`, or 0 for a length a decoder refuses anyway.
fn len_at(fields: &[u8], pos: usize) -> usize {
    let raw = i32::from_be_bytes(fields[pos..pos + 4].try_into().expect("4 bytes"));
    usize::try_from(raw).unwrap_or(0)
}

impl Splitter for SendDataSplitter {
    fn next(&mut self, fields: &[u8]) -> Next {
        use SendDataStep as S;
        loop {
            // Each step's fixed part must have arrived before it is walked.
            let need = |n: usize| (fields.len() < n).then_some(Next::Fields(n));
            match self.step {
                S::Head => {
                    let end = self.pos + 8 + 4;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.pos = end;
                    self.step = S::AppId;
                }
                S::AppId => {
                    let end = self.pos + len_at(fields, self.pos - 4) + 4 + 8 + 4;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.partitions_left = len_at(fields, end - 4);
                    self.pos = end;
                    self.step = S::Partition;
                }
                S::Partition => {
                    if self.partitions_left == 0 {
                        self.step = S::Done;
                        continue;
                    }
                    let end = self.pos + 8;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.blocks_left = len_at(fields, end - 4);
                    self.partitions_left -= 1;
                    self.pos = end;
                    self.step = S::Block;
                }
                S::Block => {
                    if self.blocks_left == 0 {
                        self.step = S::Partition;
                        continue;
                    }
                    // partitionId, blockId, length, shuffleId, crc,
                    // taskAttemptId, the data's length.
                    let end = self.pos + 4 + 8 + 4 + 4 + 8 + 8 + 4;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.pos = end;
                    self.step = S::ReplicaCount;
                    // Null (-1) has no contents; `decode` refuses it.
                    let raw = i32::from_be_bytes(fields[end - 4..end].try_into().expect("4"));
                    if let Ok(len) = usize::try_from(raw) {
                        return Next::Array(len);
                    }
                }
                S::ReplicaCount => {
                    let end = self.pos + 4;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.replicas_left = len_at(fields, self.pos);
                    self.pos = end;
                    self.step = S::Replica;
                }
                S::Replica => {
                    if self.replicas_left == 0 {
                        self.step = S::BlockTail;
                        continue;
                    }
                    let id_end = self.pos + 4;
                    if let Some(more) = need(id_end) {
                        return more;
                    }
                    let host_len_end = id_end + len_at(fields, self.pos) + 4;
                    if let Some(more) = need(host_len_end) {
                        return more;
                    }
                    let end = host_len_end + len_at(fields, host_len_end - 4) + 4 + 4;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.replicas_left -= 1;
                    self.pos = end;
                }
                S::BlockTail => {
                    let end = self.pos + 4 + 8;
                    if let Some(more) = need(end) {
                        return more;
                    }
                    self.blocks_left -= 1;
                    self.pos = end;
                    self.step = S::Block;
                }
                S::Done => return Next::Rest,
            }
        }
    }
}

/// Type 4: the Netty form of gRPC `getLocalShuffleIndex`. Answered with type 14 (or 23).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleIndexRequest {
    /// Request id, echoed in the response.
    pub request_id: i64,
    /// Application id.
    pub app_id: String,
    /// Shuffle id.
    pub shuffle_id: i32,
    /// Partition id.
    pub partition_id: i32,
    /// Partitions per range (1 for Spark).
    pub partition_num_per_range: i32,
    /// Number of reduce partitions.
    pub partition_num: i32,
}

impl GetLocalShuffleIndexRequest {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        put_string(dst, &self.app_id, "appId")?;
        dst.put_i32(self.shuffle_id);
        dst.put_i32(self.partition_id);
        dst.put_i32(self.partition_num_per_range);
        dst.put_i32(self.partition_num);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            app_id: r.non_null_string("appId")?,
            shuffle_id: r.i32("shuffleId")?,
            partition_id: r.i32("partitionId")?,
            partition_num_per_range: r.i32("partitionNumPerRange")?,
            partition_num: r.i32("partitionNum")?,
        })
    }
}

/// Type 5: the Netty form of gRPC `getLocalShuffleData`. Answered with type 15.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleDataRequest {
    /// Request id, echoed in the response.
    pub request_id: i64,
    /// Application id.
    pub app_id: String,
    /// Shuffle id.
    pub shuffle_id: i32,
    /// Partition id.
    pub partition_id: i32,
    /// Partitions per range (1 for Spark).
    pub partition_num_per_range: i32,
    /// Number of reduce partitions.
    pub partition_num: i32,
    /// Start of the range in the partition's data file.
    pub offset: i64,
    /// Bytes wanted; the client rejects a reply of any other length.
    pub length: i32,
    /// Client clock in ms.
    pub timestamp: i64,
}

impl GetLocalShuffleDataRequest {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        put_string(dst, &self.app_id, "appId")?;
        dst.put_i32(self.shuffle_id);
        dst.put_i32(self.partition_id);
        dst.put_i32(self.partition_num_per_range);
        dst.put_i32(self.partition_num);
        dst.put_i64(self.offset);
        dst.put_i32(self.length);
        dst.put_i64(self.timestamp);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            app_id: r.non_null_string("appId")?,
            shuffle_id: r.i32("shuffleId")?,
            partition_id: r.i32("partitionId")?,
            partition_num_per_range: r.i32("partitionNumPerRange")?,
            partition_num: r.i32("partitionNum")?,
            offset: r.i64("offset")?,
            length: r.i32("length")?,
            timestamp: r.i64("timestamp")?,
        })
    }
}

/// Type 24 (0.10+): type 5 plus the storage id of a multi-disk partition part. Only sent
/// when the index reply (type 23) carried storage ids. Answered with type 15.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleDataV2Request {
    /// The type-5 fields.
    pub base: GetLocalShuffleDataRequest,
    /// Which storage (disk part) to read.
    pub storage_id: i32,
}

impl GetLocalShuffleDataV2Request {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.base.encode(dst)?;
        dst.put_i32(self.storage_id);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            base: GetLocalShuffleDataRequest::decode(r)?,
            storage_id: r.i32("storageId")?,
        })
    }
}

/// A byte range the client announces it will read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadSegment {
    /// Offset in the data file.
    pub offset: i64,
    /// Length in bytes.
    pub length: i64,
}

/// Type 25 (0.10.0): type 24 plus read-ahead hints. Sent only when storage ids were
/// returned and `rss.client.read.nextReadSegmentsReportEnabled` is on (default off). Note
/// that the 0.10.0 Java server cannot decode it (its `Message.Type.decode` has no case 25).
/// Answered with type 15.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetLocalShuffleDataV3Request {
    /// The type-5 fields.
    pub base: GetLocalShuffleDataRequest,
    /// Which storage (disk part) to read.
    pub storage_id: i32,
    /// Ranges the client will ask for next.
    pub next_read_segments: Vec<ReadSegment>,
    /// The reading task's attempt id.
    pub task_attempt_id: i64,
}

impl GetLocalShuffleDataV3Request {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        self.base.encode(dst)?;
        dst.put_i32(self.storage_id);
        put_count(dst, self.next_read_segments.len(), "read segment count")?;
        for segment in &self.next_read_segments {
            dst.put_i64(segment.offset);
            dst.put_i64(segment.length);
        }
        dst.put_i64(self.task_attempt_id);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        let base = GetLocalShuffleDataRequest::decode(r)?;
        let storage_id = r.i32("storageId")?;
        let count = r.count_at_most("read segment", 16, MAX_NEXT_READ_SEGMENTS)?;
        let mut next_read_segments = Vec::with_capacity(count);
        for _ in 0..count {
            next_read_segments.push(ReadSegment {
                offset: r.i64("read segment offset")?,
                length: r.i64("read segment length")?,
            });
        }
        Ok(Self {
            base,
            storage_id,
            next_read_segments,
            task_attempt_id: r.i64("taskAttemptId")?,
        })
    }
}

/// Type 6: the Netty form of gRPC `getMemoryShuffleData`. Answered with type 16.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMemoryShuffleDataRequest {
    /// Request id, echoed in the response.
    pub request_id: i64,
    /// Application id.
    pub app_id: String,
    /// Shuffle id.
    pub shuffle_id: i32,
    /// Partition id.
    pub partition_id: i32,
    /// Return blocks after this one; -1 on the first call.
    pub last_block_id: i64,
    /// Stop adding blocks once this many bytes are collected.
    pub read_buffer_size: i32,
    /// Client clock in ms.
    pub timestamp: i64,
    /// Serialized expected-task-id bitmap, kept raw; `None` is -1 on the wire (no filter).
    /// Read it with [`Self::expected_task_ids`].
    pub expected_task_ids_bitmap: Option<Bytes>,
}

impl GetMemoryShuffleDataRequest {
    /// The task-id filter, if the client sent one.
    pub fn expected_task_ids(&self) -> Result<Option<IdBitmap>, BitmapError> {
        self.expected_task_ids_bitmap
            .as_deref()
            .map(IdBitmap::from_java_bytes)
            .transpose()
    }

    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        put_string(dst, &self.app_id, "appId")?;
        dst.put_i32(self.shuffle_id);
        dst.put_i32(self.partition_id);
        dst.put_i64(self.last_block_id);
        dst.put_i32(self.read_buffer_size);
        dst.put_i64(self.timestamp);
        put_nullable_bytes(
            dst,
            self.expected_task_ids_bitmap.as_deref(),
            "expected task ids bitmap",
        )?;
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            app_id: r.non_null_string("appId")?,
            shuffle_id: r.i32("shuffleId")?,
            partition_id: r.i32("partitionId")?,
            last_block_id: r.i64("lastBlockId")?,
            read_buffer_size: r.i32("readBufferSize")?,
            timestamp: r.i64("timestamp")?,
            expected_task_ids_bitmap: r.nullable_byte_array("expected task ids bitmap")?,
        })
    }
}

/// Type 21 (0.10+, remote merge only). Answered with type 22.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetSortedShuffleDataRequest {
    /// Request id, echoed in the response.
    pub request_id: i64,
    /// Application id.
    pub app_id: String,
    /// Shuffle id.
    pub shuffle_id: i32,
    /// Partition id.
    pub partition_id: i32,
    /// Merged block to read.
    pub merged_block_id: i64,
    /// Bytes wanted.
    pub length: i32,
    /// Client clock in ms.
    pub timestamp: i64,
}

impl GetSortedShuffleDataRequest {
    pub(crate) fn encode(&self, dst: &mut BytesMut) -> Result<(), CodecError> {
        dst.put_i64(self.request_id);
        put_string(dst, &self.app_id, "appId")?;
        dst.put_i32(self.shuffle_id);
        dst.put_i32(self.partition_id);
        dst.put_i64(self.merged_block_id);
        dst.put_i32(self.length);
        dst.put_i64(self.timestamp);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader) -> Result<Self, CodecError> {
        Ok(Self {
            request_id: r.i64("requestId")?,
            app_id: r.non_null_string("appId")?,
            shuffle_id: r.i32("shuffleId")?,
            partition_id: r.i32("partitionId")?,
            merged_block_id: r.i64("blockId")?,
            length: r.i32("length")?,
            timestamp: r.i64("timestamp")?,
        })
    }
}
