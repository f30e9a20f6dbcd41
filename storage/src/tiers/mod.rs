//! Where blocks live: the memory budget and a partition's staged blocks,
//! the cold tier, and the flushes that move blocks from memory to a disk or
//! the cold tier.

pub mod budget;
pub(crate) mod cold;
mod flush;
pub mod memory;
