//! Logs (tracing-subscriber) and metrics (the Prometheus recorder).

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Resident set size of this process; refreshed on each scrape of /metrics.
pub const PROCESS_RESIDENT_BYTES: &str = "switchyard_process_resident_bytes";
/// Always 1; the `version` label carries the build's version.
pub const BUILD_INFO: &str = "switchyard_build_info";

/// Bucket bounds for every histogram whose name ends in `_seconds`
/// (spill durations, throttle waits, ...): 1 ms to 2 min.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// How often the recorder's upkeep (histogram maintenance) runs.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

pub fn init_logging(config: &LogConfig) -> anyhow::Result<()> {
    // The level was validated with the config; this only fails on a bug.
    let filter = EnvFilter::try_new(&config.level)
        .with_context(|| format!("log.level {:?}", config.level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    let result = match config.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))
}

/// Installs the global Prometheus recorder. Call before anything records a
/// metric (in particular before the store opens): metrics recorded earlier
/// are lost.
pub fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("cannot install the Prometheus recorder")?;

    metrics::describe_gauge!(
        PROCESS_RESIDENT_BYTES,
        Unit::Bytes,
        "Resident set size of the switchyard process"
    );
    metrics::describe_gauge!(BUILD_INFO, "Build information; the value is always 1");
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    update_process_metrics();
    Ok(handle)
}

/// Refreshes the process gauges; cheap enough to run on every scrape.
pub fn update_process_metrics() {
    if let Some(rss) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| parse_vm_rss(&s))
    {
        metrics::gauge!(PROCESS_RESIDENT_BYTES).set(rss as f64);
    }
}

/// Bytes from the `VmRSS:  1234 kB` line of `/proc/<pid>/status`.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => Some(value * 1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tswitchyard\nVmPeak:\t  10000 kB\nVmRSS:\t    5120 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(5120 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn reads_own_rss() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(parse_vm_rss(&status).unwrap() > 0);
    }
}
