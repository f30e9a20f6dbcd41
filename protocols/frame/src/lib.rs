//! The frame both of Switchyard's Netty-based protocols speak.
//!
//! Celeborn's transport and Uniffle's Netty data plane share one layout, because
//! Uniffle took Celeborn's framing (upstream `MessageEncoder` and
//! `TransportFrameDecoder` in both projects):
//!
//! ```text
//! i32 BE  message length  (the type's fields only)
//! u8      message type
//! i32 BE  body length
//! message length bytes of fields, then body length bytes of body
//! ```
//!
//! This crate owns that layout and the primitive field encoding inside it:
//! - [`FrameCodec`]: the tokio-util codec, generic over a protocol's [`FrameMessage`];
//! - [`FieldReader`] and the `put_*` writers: big-endian integers, length-prefixed
//!   byte arrays and strings (with Java `null` as length -1 where a protocol has it);
//! - [`WireError`]: what can go wrong at this level, whatever the protocol;
//! - [`Splitter`]: where a frame's large byte arrays are, so the server reads each
//!   into a buffer of its own;
//! - [`server`]: the TCP server every frame port runs (connection limits, backpressure,
//!   one behaviour on bad frames and unencodable replies).
//!
//! What the type ids mean, and every message's fields, stay in the protocol crates.

mod codec;
mod error;
mod fields;
pub mod log_limit;
pub mod proto_cost;
pub mod server;
mod split;
pub mod traffic;

pub use codec::{frame_parts, FrameCodec, FrameMessage, DEFAULT_MAX_FRAME_SIZE, HEADER_LEN};
pub use error::WireError;
pub use fields::{
    put_bytes, put_count, put_nullable_bytes, put_nullable_string, put_string, wire_len, ByteArray,
    FieldReader,
};
pub use split::{Next, Splitter, MIN_DIRECT_READ, MIN_SPLIT_FRAME};
