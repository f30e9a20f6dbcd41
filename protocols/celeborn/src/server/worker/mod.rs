//! The Worker role: slots reserved by the LifecycleManager, pushed batches
//! appended to the store, commits, and streams reading partitions back
//! (chunk streams for Spark's reduce partitions, credit streams for Flink's
//! map partitions).

mod congestion;
mod credit;
mod fetch;
mod gate;
mod hybrid_budget;
pub mod map_partition;
mod push;
mod replicate;
mod rpc;
mod segment_stream;
mod segments;
mod state;

pub use fetch::FetchPort;
pub use push::PushPort;
pub use rpc::WorkerEndpoint;
pub use state::{stored_app, WorkerAddr, WorkerState};
