//! Logs (tracing-subscriber) and metrics (the Prometheus recorder).

use std::fmt;
use std::io::IsTerminal;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Resident set size of this process; refreshed on each scrape of /metrics.
pub const PROCESS_RESIDENT_BYTES: &str = "switchyard_process_resident_bytes";
/// Always 1; the `version` label carries the build's version.
pub const BUILD_INFO: &str = "switchyard_build_info";
pub const PROCESS_CPU_SECONDS: &str = "switchyard_process_cpu_seconds";
/// The host's load average over the last minute (`/proc/loadavg`).
pub const SYSTEM_LOAD1: &str = "switchyard_system_load1";
/// CPUs this process may run on (its affinity mask and cgroup quota).
pub const AVAILABLE_CPUS: &str = "switchyard_available_cpus";
/// 1 while this node decommissions, else 0.
pub const DECOMMISSIONING: &str = "switchyard_decommissioning";
/// Workers a fleet coordinator's directory holds, by `state`.
pub const FLEET_WORKERS: &str = "switchyard_fleet_workers";

/// Bucket bounds for Switchyard's size histograms ([`BYTES_HISTOGRAMS`]):
/// 1 KiB to 64 GiB, by powers of four.
/// By name, not by suffix: OpenDAL's own `*_bytes` histograms keep the
/// exporter's default form.
const BYTES_HISTOGRAMS: [&str; 2] = [
    "switchyard_partition_file_bytes",
    "switchyard_celeborn_chunk_bytes",
];
const BYTES_BUCKETS: &[f64] = &[
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
    17179869184.0,
    68719476736.0,
];

/// Bucket bounds for every histogram whose name ends in `_seconds`
/// (spill durations, throttle waits, ...): 1 ms to 2 min.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// How often the recorder's upkeep (histogram maintenance) runs.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The label (metrics) and field (log lines) that carry the node id.
pub const NODE_LABEL: &str = "node";

/// The node id for log lines, set once it is known ([`NodeField::set`]);
/// lines logged before that carry none.
#[derive(Clone, Default)]
pub struct NodeField(Arc<OnceLock<String>>);

impl NodeField {
    pub fn set(&self, id: &str) {
        let _ = self.0.set(id.to_string());
    }
}

/// Installs the log subscriber. Every line logged after [`NodeField::set`]
/// carries `node=<id>` (text: at the end of the line; JSON: a `"node"` key),
/// from whatever thread or task it comes.
pub fn init_logging(config: &LogConfig) -> anyhow::Result<NodeField> {
    // The level was validated with the config; this only fails on a bug.
    let filter = EnvFilter::try_new(&config.level)
        .with_context(|| format!("log.level {:?}", config.level))?;
    let node = NodeField::default();
    let ansi = std::io::stdout().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let result = match config.format {
        LogFormat::Text => builder
            .event_format(WithNode {
                inner: format::format().with_ansi(ansi),
                node: node.clone(),
                json: false,
            })
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .map_event_format(|inner| WithNode {
                inner,
                node: node.clone(),
                json: true,
            })
            .try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    Ok(node)
}

/// Formats an event with `inner`, then adds the node id: ` node=<id>` before
/// the line's end, or `"node":"<id>",` as the first key of a JSON object.
/// Node ids need no quoting or escaping (`config::check_node_id`).
struct WithNode<F> {
    inner: F,
    node: NodeField,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithNode<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(node) = self.node.0.get() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&with_node(&line, node, self.json))
    }
}

fn with_node(line: &str, node: &str, json: bool) -> String {
    if json {
        if let Some(rest) = line.strip_prefix('{') {
            return format!("{{\"{NODE_LABEL}\":\"{node}\",{rest}");
        }
    }
    let body = line.strip_suffix('\n').unwrap_or(line);
    format!("{body} {NODE_LABEL}={node}\n")
}

/// Installs the global Prometheus recorder, with `node="<id>"` on every
/// metric so that several nodes' figures never mix in one Prometheus. Call
/// before anything records a metric (in particular before the store opens):
/// metrics recorded earlier are lost.
pub fn install_metrics(node_id: &str) -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .add_global_label(NODE_LABEL, node_id)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .context("histogram buckets")?
        .set_buckets_for_metric(Matcher::Full(BYTES_HISTOGRAMS[0].into()), BYTES_BUCKETS)
        .context("histogram buckets")?
        .set_buckets_for_metric(Matcher::Full(BYTES_HISTOGRAMS[1].into()), BYTES_BUCKETS)
        .context("histogram buckets")?
        .install_recorder()
        .context("cannot install the Prometheus recorder")?;

    metrics::describe_gauge!(
        PROCESS_RESIDENT_BYTES,
        Unit::Bytes,
        "Resident set size of the switchyard process"
    );
    metrics::describe_gauge!(
        PROCESS_CPU_SECONDS,
        Unit::Seconds,
        "CPU time (user and system) the switchyard process used"
    );
    metrics::describe_gauge!(BUILD_INFO, "Build information; the value is always 1");
    metrics::describe_gauge!(SYSTEM_LOAD1, "The host's load average over the last minute");
    metrics::describe_gauge!(AVAILABLE_CPUS, "CPUs the switchyard process may run on");
    metrics::describe_gauge!(DECOMMISSIONING, "1 while this node decommissions");
    metrics::describe_gauge!(
        FLEET_WORKERS,
        "Workers this fleet coordinator's directory holds, by state"
    );
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
    if let Some(cpu) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_cpu_seconds(&s))
    {
        metrics::gauge!(PROCESS_CPU_SECONDS).set(cpu);
    }
    if let Some(load) = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| parse_load1(&s))
    {
        metrics::gauge!(SYSTEM_LOAD1).set(load);
    }
    if let Ok(cpus) = std::thread::available_parallelism() {
        metrics::gauge!(AVAILABLE_CPUS).set(cpus.get() as f64);
    }
}

/// The first field of `/proc/loadavg`: the one-minute load average.
fn parse_load1(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

/// User plus system CPU time, in seconds, from `/proc/<pid>/stat` (fields
/// 14 and 15, in clock ticks of 1/100 s: Linux's USER_HZ on every
/// architecture Switchyard builds for).
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name (field 2) may hold spaces: count from its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
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
    fn parses_cpu_seconds() {
        let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1 2 3";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_cpu_seconds("42 (x) S"), None);
    }

    #[test]
    fn parses_load1() {
        assert_eq!(parse_load1("0.52 0.58 0.59 1/467 12345\n"), Some(0.52));
        assert_eq!(parse_load1(""), None);
        assert_eq!(parse_load1("x 1 2"), None);
    }

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tswitchyard\nVmPeak:\t  10000 kB\nVmRSS:\t    5120 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(5120 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    #[test]
    fn node_goes_into_text_and_json_lines() {
        assert_eq!(
            with_node(
                "2025-01-01T00:00:00Z  INFO switchyard: store open ready=true\n",
                "sy-1",
                false
            ),
            "2025-01-01T00:00:00Z  INFO switchyard: store open ready=true node=sy-1\n"
        );
        let json = with_node("{\"level\":\"INFO\",\"message\":\"m\"}\n", "sy-1", true);
        assert_eq!(
            json,
            "{\"node\":\"sy-1\",\"level\":\"INFO\",\"message\":\"m\"}\n"
        );
        let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        assert_eq!(v["node"], "sy-1");
    }

    #[test]
    fn reads_own_rss() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(parse_vm_rss(&status).unwrap() > 0);
    }
}
