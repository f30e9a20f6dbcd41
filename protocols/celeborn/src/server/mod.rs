//! The Celeborn Master and Worker roles of one process.
//!
//! - `conn`: the shared frame server's types for Celeborn's messages;
//! - `error`: [`CelebornError`], each failure with the status the client sees;
//! - `rpc`: envelopes, the endpoint verifier, Java-serialized replies;
//! - `master`: `MasterEndpoint` (applications, slots, quota, unregister);
//! - `slot_reply`: a RequestSlots reply's workers, plain or packed, and
//!   `packed_wire`, the packed form written straight to protobuf bytes;
//! - `tags`: which workers a client's tags expression selects;
//! - `worker`: `WorkerEndpoint` (reserve, commit, destroy) and the push and
//!   fetch ports, all over the storage crate's block API.

pub mod conn;
pub mod error;
pub mod fleet;
pub mod master;
pub mod node;
pub mod packed_wire;
pub mod rpc;
pub mod slot_reply;
pub mod tags;
pub mod worker;

pub use error::{CelebornError, MapStage};
pub use node::{CelebornAddrs, CelebornNode};
