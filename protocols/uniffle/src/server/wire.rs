//! What both transports share at their edge: their blocks into the core's
//! [`IncomingBlock`]s, the core's memory-read segments back out, and the one place a
//! failed request is logged and counted.

use super::core::{IncomingBlock, SegmentMeta};
use crate::error::UniffleError;
use crate::netty;
use crate::proto;
use crate::proto::StatusCode;
use switchyard_frame::log_limit::{self, LogLimiter};

/// The transport a request came by, for the `transport` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Grpc,
    Netty,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Netty => "netty",
        }
    }
}

/// Failed requests are often client-caused: their lines are rate-limited, the
/// counter counts each.
static FAILED_LOG: LogLimiter = log_limit::client_caused();

/// Logs and counts a request answered with an error (`switchyard_uniffle_errors_total`);
/// returns the status it is answered with. "No buffer" is the client's cue to back off
/// and retry, so it is logged at debug only.
pub fn failed(transport: Transport, op: &'static str, e: &UniffleError) -> StatusCode {
    let status = e.status();
    if status == StatusCode::NoBuffer {
        tracing::debug!(transport = transport.as_str(), op, error = %e, "no buffer");
    } else if let Some(suppressed) = FAILED_LOG.allow() {
        tracing::warn!(transport = transport.as_str(), op, error = %e, suppressed, "request failed");
    }
    metrics::counter!(
        "switchyard_uniffle_errors_total",
        "transport" => transport.as_str(),
        "op" => op,
        "status" => status.as_str_name()
    )
    .increment(1);
    status
}

/// The blocks of one partition of a `sendShuffleData`, as the core takes them.
pub type PartitionBlocks = (i32, Vec<IncomingBlock>);

impl From<proto::ShuffleBlock> for IncomingBlock {
    fn from(b: proto::ShuffleBlock) -> Self {
        IncomingBlock {
            block_id: b.block_id,
            length: b.length,
            uncompress_length: b.uncompress_length,
            crc: b.crc,
            task_attempt_id: b.task_attempt_id,
            data: b.data,
        }
    }
}

impl From<netty::ShuffleBlock> for IncomingBlock {
    fn from(b: netty::ShuffleBlock) -> Self {
        IncomingBlock {
            block_id: b.block_id,
            length: b.length,
            uncompress_length: b.uncompress_length,
            crc: b.crc,
            task_attempt_id: b.task_attempt_id,
            data: b.data,
        }
    }
}

/// One partition's blocks of a gRPC `sendShuffleData`.
pub fn grpc_partition(d: proto::ShuffleData) -> PartitionBlocks {
    (
        d.partition_id,
        d.block.into_iter().map(Into::into).collect(),
    )
}

/// One partition's blocks of a Netty `sendShuffleData` (type 3).
pub fn netty_partition(p: netty::PartitionBlocks) -> PartitionBlocks {
    (
        p.partition_id,
        p.blocks.into_iter().map(Into::into).collect(),
    )
}

impl From<&SegmentMeta> for proto::ShuffleDataBlockSegment {
    fn from(s: &SegmentMeta) -> Self {
        proto::ShuffleDataBlockSegment {
            block_id: s.block_id,
            offset: s.offset,
            length: s.length,
            uncompress_length: s.uncompress_length,
            crc: s.crc,
            task_attempt_id: s.task_attempt_id,
        }
    }
}

impl From<&SegmentMeta> for netty::BufferSegment {
    // Netty's offsets are i32: a memory read stops past the client's `readBufferSize`
    // (an i32) after one more block.
    fn from(s: &SegmentMeta) -> Self {
        netty::BufferSegment {
            block_id: s.block_id,
            offset: s.offset as i32,
            length: s.length,
            uncompress_length: s.uncompress_length,
            crc: s.crc,
            task_attempt_id: s.task_attempt_id,
        }
    }
}
