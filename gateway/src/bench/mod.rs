//! `switchyard bench ...`: benchmarks that print figures and a ratio against a
//! baseline measured in the same run.

pub mod celeborn;
pub mod cold;
pub mod flink;
pub mod memory_wait;
pub mod overload;
pub mod report;
pub mod storage;
pub mod uniffle;
