//! Codec for Uniffle's Netty data plane (client type `GRPC_NETTY`).
//!
//! A `GRPC_NETTY` client keeps control calls on gRPC and moves four calls to a plain TCP
//! port: send blocks (type 3), read the index (4), read a data range (5, or 24/25 on 0.10+)
//! and read memory (6). Requests are multiplexed on a connection and matched to responses
//! by request id, so responses may go out in any order.
//!
//! - [`codec`]: the frame header and the tokio-util [`UniffleCodec`];
//! - [`message`]: the type ids and the [`Message`] enum;
//! - [`requests`] / [`responses`]: one struct per message type;
//! - [`error`]: the typed [`CodecError`], which carries the shared frame layer's
//!   `switchyard_frame::WireError`.
//!
//! The header and the primitive field encoding are the `switchyard-frame` crate's, shared
//! with Celeborn's transport (same layout).
//!
//! Checked against upstream v0.10.0 `common/src/main/java/org/apache/uniffle/common/netty/`
//! (`MessageEncoder`, `TransportFrameDecoder`, `protocol/*`), which is wire-identical to
//! v0.9.1 for the types 0.9 knows.

pub mod codec;
pub mod error;
pub mod message;
pub mod requests;
pub mod responses;

#[cfg(test)]
mod tests;

pub use codec::{UniffleCodec, DEFAULT_MAX_FRAME_SIZE, HEADER_LEN};
pub use error::CodecError;
pub use message::{Message, MessageType};
pub use requests::{
    GetLocalShuffleDataRequest, GetLocalShuffleDataV2Request, GetLocalShuffleDataV3Request,
    GetLocalShuffleIndexRequest, GetMemoryShuffleDataRequest, GetSortedShuffleDataRequest,
    PartitionBlocks, ReadSegment, ReplicaServer, SendShuffleDataRequest, ShuffleBlock,
};
pub use responses::{
    BufferSegment, GetLocalShuffleDataResponse, GetLocalShuffleIndexResponse,
    GetLocalShuffleIndexV2Response, GetMemoryShuffleDataResponse, GetMemoryShuffleDataV2Response,
    GetSortedShuffleDataResponse, ResponseHead,
};
