//! The NettyRpcEnv layer of the Master and Worker RPC ports.
//!
//! An ask is an RPC_REQUEST frame whose body is a [`RequestMessage`] (envelope + content);
//! the reply is an RPC_RESPONSE whose body is only a content ([`encode_reply`],
//! [`encode_boolean`]), or an RPC_FAILURE frame with free text, which the JVM client turns
//! into an `IOException`. ONE_WAY_MESSAGE frames carry the same envelope and get no reply.
//!
//! Before its first ask to an endpoint a client asks the endpoint `endpoint-verifier` with
//! `CheckExistence(name)`; the answer is a serialized `java.lang.Boolean`
//! (`RpcEndpointVerifier.scala`, `NettyRpcEnv.asyncSetupEndpointRefByAddr`).
//!
//! - [`envelope`]: sender, receiver, endpoint name;
//! - [`content`]: `TransportMessage` / `CheckExistence` / `Boolean` contents;
//! - `javaser`: the bounded Java serialization subset behind [`content`].
//!
//! Checked against upstream v0.5.1, v0.5.4, v0.6.0 and v0.7.0 (`NettyRpcEnv.scala`,
//! `NettyRpcCallContext.scala`, `RpcEndpointVerifier.scala`, `JavaSerializer.scala`,
//! `TransportMessage.java`), and byte-for-byte against `ObjectOutputStream` output for the
//! 0.5.4 client classes and for stand-ins of the 0.6+ `TransportMessage` (see `tests.rs`).

pub mod content;
pub mod envelope;
pub mod error;
mod java_utf;
mod javaser;

#[cfg(test)]
mod tests;

pub use content::{encode_boolean, encode_reply, RpcContent};
pub use envelope::{RequestMessage, RpcAddress};
pub use error::RpcError;

/// Endpoint names (upstream `RpcNameConstants.java`, `RpcEndpointVerifier.NAME`).
pub mod endpoint {
    /// The verifier every RpcEnv runs.
    pub const VERIFIER: &str = "endpoint-verifier";
    /// What clients (LifecycleManager) ask on the master port.
    pub const MASTER: &str = "MasterEndpoint";
    /// Workers' endpoint on the master's internal port (only when that port is enabled).
    pub const MASTER_INTERNAL: &str = "MasterInternalEndpoint";
    /// The worker RPC port; what the LifecycleManager asks.
    pub const WORKER: &str = "WorkerEndpoint";
    /// The master's endpoint on a worker's internal port.
    pub const WORKER_INTERNAL: &str = "WorkerInternalEndpoint";
    /// On the client side; never served by us.
    pub const LIFECYCLE_MANAGER: &str = "LifecycleManagerEndpoint";
}
