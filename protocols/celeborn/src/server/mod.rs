//! The Celeborn Master and Worker roles of one process.
//!
//! - `conn`: the shared frame server's types for Celeborn's messages;
//! - `error`: [`CelebornError`], each failure with the status the client sees;
//! - `rpc`: envelopes, the endpoint verifier, Java-serialized replies;
//! - `master`: `MasterEndpoint` (applications, slots, quota, unregister);
//! - `tags`: which workers a client's tags expression selects;
//! - `worker`: `WorkerEndpoint` (reserve, commit, destroy) and the push and
//!   fetch ports, all over the storage crate's block API.

pub mod conn;
pub mod error;
pub mod fleet;
pub mod master;
pub mod node;
pub mod rpc;
pub mod slot_reply;
pub mod tags;
pub mod worker;

pub use error::{CelebornError, MapStage};
pub use node::{CelebornAddrs, CelebornNode};
