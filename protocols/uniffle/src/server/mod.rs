//! The Uniffle shuffle server: one core of request handling, reached through
//! two transports (gRPC in `grpc`, the Netty data plane in `netty`) that share
//! `wire`: block and segment mapping, and error counting.

mod apps;
mod core;
pub mod grpc;
pub mod netty;
mod split;
mod tickets;
mod wire;

pub use self::core::{stored as stored_app, MemoryData, ShuffleServerCore};
