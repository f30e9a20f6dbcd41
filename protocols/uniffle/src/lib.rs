//! The Uniffle protocol adapter: the coordinator and shuffle-server roles of
//! Apache Uniffle, translated onto the storage crate's block API.
//!
//! - [`proto`]: the gRPC messages and service stubs (package `rss.common`);
//! - [`bitmap`]: block-id bitmaps in the Java `Roaring64NavigableMap` format;
//! - [`netty`]: the frame codec of the Netty data plane (`GRPC_NETTY` clients);
//! - [`coordinator`]: assignment of partitions to shuffle servers;
//! - [`server`]: the shuffle server (one core, gRPC and Netty transports);
//! - [`node`]: starts all of it in one process.
//!
//! The Rust client of the protocol, for tests and benchmarks, is the
//! `switchyard-clients` crate; the server never links it.

pub mod bitmap;
pub mod bounded;
pub mod config;
pub mod coordinator;
pub mod error;
pub mod grpc_memory;
pub mod netty;
pub mod node;
pub mod proto;
pub mod rpc_timing;
pub mod server;

pub use config::UniffleConfig;
pub use error::UniffleError;
pub use node::{UniffleAddrs, UniffleNode};
