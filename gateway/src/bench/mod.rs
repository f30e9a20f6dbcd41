//! `switchyard bench ...`: benchmarks that print figures and a ratio against a
//! baseline measured in the same run.

pub mod celeborn;
pub mod cold;
pub mod flink;
pub mod memory_wait;
pub mod overload;
pub mod report;
pub mod restart;
pub mod storage;
pub mod uniffle;

/// A fresh application id for a bench run: `<prefix>-<unix millis>`.
pub(crate) fn app_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{millis}")
}
