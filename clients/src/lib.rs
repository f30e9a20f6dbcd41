//! Rust clients of the two protocols Switchyard serves, for its tests and
//! benchmarks: each follows its Java client's call sequence. They live apart
//! from the protocol crates so that `switchyard serve` never links them; the
//! protocol crates' integration tests, the gateway's tests and
//! `switchyard-bench` use them.
//!
//! - [`uniffle`]: coordinator assignment, register, requireBuffer + send
//!   (gRPC or Netty), report, reads with CRC checks;
//! - [`celeborn`]: the LifecycleManager's master and worker RPCs, pushes,
//!   chunk fetches and Flink credit streams.

pub mod celeborn;
pub mod uniffle;
