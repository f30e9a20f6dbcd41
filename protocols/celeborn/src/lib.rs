//! The Celeborn protocol adapter: the wire protocols of an Apache Celeborn Master and
//! Worker, as spoken by the stock Spark 3 and Flink clients, translated onto the storage
//! crate's block API.
//!
//! - [`proto`]: the protobuf messages (`proto/celeborn.proto`);
//! - [`TransportMessage`]: a message type number + protobuf payload, the unit of every
//!   control message, with its push/fetch-port byte form;
//! - [`StatusCode`]: the status numbers clients understand; [`modes`]: split mode and
//!   partition type;
//! - [`frame`]: the 9-byte-header transport framing shared by every port;
//! - [`rpc`]: the NettyRpcEnv layer of the master/worker RPC ports (envelope, the Java
//!   serialization subset, the endpoint-verifier handshake);
//! - [`peer`]: one outgoing connection to a Celeborn port (a worker's push replication;
//!   the test client in `switchyard-clients` is built on it).

pub mod auth;
pub mod config;
pub mod frame;
pub mod modes;
pub mod peer;
pub mod proto;
pub mod rpc;
pub mod server;
pub mod shuffle_key;
pub mod status;
pub mod transport_message;

pub use config::CelebornConfig;
pub use server::{CelebornAddrs, CelebornNode};
pub use shuffle_key::ShuffleKey;
pub use status::StatusCode;
pub use transport_message::{DataPlaneBody, SerdeVersion, TransportMessage};
