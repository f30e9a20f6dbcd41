//! The Uniffle shuffle server: one core of request handling, reached through
//! two transports (gRPC in `grpc`, the Netty data plane in `netty`).

mod apps;
mod core;
pub mod grpc;
pub mod netty;
mod tickets;

pub use self::core::{MemoryData, ShuffleServerCore};
