//! Where blocks live: the memory budget and a partition's staged blocks
//! (memory), the durable tiers (local disks and the cold tier) and the
//! flushes that move blocks from memory to them.

pub mod budget;
pub(crate) mod cold;
pub(crate) mod disk;
pub mod durable;
pub(crate) mod fair;
pub(crate) mod flush;
pub mod memory;
pub(crate) mod partition;
pub(crate) mod shares;
pub(crate) mod waits;

pub use durable::PartitionIndex;
pub(crate) use durable::{Durable, IoPlacement};
pub(crate) use flush::Flusher;
