//! Celeborn's transport framing, shared by every port (master/worker RPC, push, fetch,
//! replicate).
//!
//! - [`codec`]: the 9-byte header and the tokio-util [`CelebornCodec`];
//! - [`message`]: the type ids and the [`Message`] enum, plus the legacy in-body form;
//! - [`fields`]: the field layouts of the larger messages;
//! - [`error`]: the typed [`FrameError`], which carries the shared frame layer's
//!   `switchyard_frame::WireError`.
//!
//! The header and the primitive field encoding are the `switchyard-frame` crate's, shared
//! with the Uniffle Netty data plane (same layout).
//!
//! Checked against upstream `common/src/main/java/org/apache/celeborn/common/network/`
//! (`protocol/*`, `util/TransportFrameDecoder`) at v0.5.1, v0.5.4, v0.6.0 and v0.7.0
//! (wire-identical; 0.6 adds ids 23-25), and byte-for-byte against the encoders of the
//! 0.5.4 client jar (see `tests.rs`).

pub mod codec;
pub mod error;
pub mod fields;
pub mod message;

#[cfg(test)]
mod tests;

pub use codec::{CelebornCodec, DEFAULT_MAX_FRAME_SIZE, HEADER_LEN};
pub use error::FrameError;
pub use fields::{
    Mode, OpenStream, OpenStreamWithCredit, PushData, PushDataHandShake, PushMergedData,
    RegionFinish, RegionStart, StreamChunkSlice, UniqueIds,
};
pub use message::{Message, MessageType};
