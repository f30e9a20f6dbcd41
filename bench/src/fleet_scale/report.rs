//! The simulation's figures and the table it prints.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::drivers::{LatencyRow, Protocol, Tally};
use super::FleetScaleArgs;

/// Every coordinator over one window.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Window {
    pub secs: f64,
    /// Per coordinator, % of one core.
    pub cpu_pct: Vec<f64>,
    pub rss_mib: Vec<f64>,
    /// Worker heartbeats accepted per second, per coordinator.
    pub heartbeats_per_s: Vec<f64>,
    /// App-book exchange bytes per second, every coordinator together.
    pub sync_bytes_per_s: f64,
    /// The simulation's own process (workers and drivers), % of a core:
    /// on a small machine it competes with the coordinators.
    pub bench_cpu_pct: f64,
}

impl Window {
    /// CPU µs per heartbeat handled, per coordinator (everything the
    /// coordinator did in the window, so an upper bound).
    pub fn cpu_us_per_heartbeat(&self) -> Vec<f64> {
        self.cpu_pct
            .iter()
            .zip(&self.heartbeats_per_s)
            .map(|(cpu, hb)| cpu / 100.0 * 1e6 / hb.max(1e-9))
            .collect()
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DeadWorkers {
    pub stopped: Vec<usize>,
    pub worker_timeout_s: f64,
    /// From the last heartbeat's stop until placements no longer name
    /// them; None: not within the timeout + 60 s.
    pub celeborn_excluded_s: Option<f64>,
    pub uniffle_excluded_s: Option<f64>,
}

impl DeadWorkers {
    pub fn indices(&self) -> std::collections::HashSet<usize> {
        self.stopped.iter().copied().collect()
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Restart {
    /// From the kill until the restarted coordinator answers `/readyz`.
    pub ready_s: f64,
    /// Until it is warm and lists exactly the live workers.
    pub listed_s: f64,
    /// Until both protocols' placements on it name only live workers.
    pub placing_s: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Figures {
    pub workers: usize,
    pub apps: usize,
    pub shuffle_rate: f64,
    pub fleet_up_s: f64,
    pub workers_only: Window,
    pub loaded: Window,
    /// After the drivers stopped: books full, no changes.
    pub quiet: Window,
    pub latency: Vec<LatencyRow>,
    pub shuffles_skipped: u64,
    pub app_calls_per_s: f64,
    pub app_call_failures: u64,
    /// The first failed driver call's error.
    pub first_app_call_error: Option<String>,
    pub apps_started: u64,
    pub celeborn_balance: f64,
    pub uniffle_balance: f64,
    pub dead: DeadWorkers,
    pub restart: Restart,
}

impl Figures {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        args: &FleetScaleArgs,
        fleet_up_s: f64,
        workers_only: Window,
        loaded: Window,
        quiet: Window,
        tally: &Tally,
        app_calls: u64,
        dead: DeadWorkers,
        restart: Restart,
    ) -> Figures {
        let shuffle_rate = args.driver_settings().shuffle_rate;
        Figures {
            workers: args.workers,
            apps: args.apps,
            shuffle_rate,
            fleet_up_s,
            app_calls_per_s: app_calls as f64 / (loaded.secs + args.app_heartbeat as f64).max(1.0),
            workers_only,
            loaded,
            quiet,
            latency: tally.rows(),
            shuffles_skipped: tally.skipped.load(Ordering::Relaxed),
            app_call_failures: tally.app_call_failures.load(Ordering::Relaxed),
            first_app_call_error: tally.first_app_call_error.lock().clone(),
            apps_started: tally.apps_started.load(Ordering::Relaxed),
            celeborn_balance: tally.balance(Protocol::Celeborn),
            uniffle_balance: tally.balance(Protocol::Uniffle),
            dead,
            restart,
        }
    }

    /// The p99 of one protocol's placement at one size, if measured.
    pub fn p99_ms(&self, protocol: Protocol, partitions: i32) -> Option<f64> {
        self.latency
            .iter()
            .find(|r| r.protocol == protocol && r.partitions == partitions && r.count > 0)
            .map(|r| r.p99_ms)
    }
}

fn list(v: &[f64], digits: usize) -> String {
    v.iter()
        .map(|x| format!("{x:.digits$}"))
        .collect::<Vec<_>>()
        .join(" / ")
}

fn secs(s: Option<f64>) -> String {
    s.map_or("never".into(), |s| format!("{s:.1} s"))
}

/// The figures as a markdown table (what docs/benchmarks.md shows).
pub fn table(f: &Figures) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "fleet-scale: 3 coordinators, {} simulated workers, {} applications ({:.0} shuffles/s offered, {} skipped; {:.0} driver calls/s, {} failed; {} applications started)\n",
        f.workers, f.apps, f.shuffle_rate, f.shuffles_skipped, f.app_calls_per_s, f.app_call_failures, f.apps_started
    );
    if let Some(e) = &f.first_app_call_error {
        let _ = writeln!(t, "first failed driver call: {e}\n");
    }
    let _ = writeln!(t, "| figure | coordinator 1 / 2 / 3 |\n|---|---|");
    let rows = [
        (
            "CPU, workers only (% of a core)",
            list(&f.workers_only.cpu_pct, 1),
        ),
        (
            "CPU, with drivers (% of a core)",
            list(&f.loaded.cpu_pct, 1),
        ),
        (
            "CPU of the simulation itself, with drivers (% of a core)",
            format!("{:.0}", f.loaded.bench_cpu_pct),
        ),
        ("RSS with drivers (MiB)", list(&f.loaded.rss_mib, 0)),
        (
            "worker heartbeats/s handled",
            list(&f.workers_only.heartbeats_per_s, 0),
        ),
        (
            "CPU µs per heartbeat (workers only, upper bound)",
            list(&f.workers_only.cpu_us_per_heartbeat(), 0),
        ),
    ];
    for (name, value) in rows {
        let _ = writeln!(t, "| {name} | {value} |");
    }
    let _ = writeln!(t, "\n| figure | value |\n|---|---|");
    let rows = [
        (
            "app-book exchange, workers only (bytes/s, all coordinators)",
            format!("{:.0}", f.workers_only.sync_bytes_per_s),
        ),
        (
            "app-book exchange, with drivers (bytes/s)",
            format!("{:.0}", f.loaded.sync_bytes_per_s),
        ),
        (
            "app-book exchange, full book unchanged (bytes/s)",
            format!("{:.0}", f.quiet.sync_bytes_per_s),
        ),
        (
            "placement balance, Celeborn (max/mean partitions per worker)",
            format!("{:.2}", f.celeborn_balance),
        ),
        (
            "placement balance, Uniffle (max/mean)",
            format!("{:.2}", f.uniffle_balance),
        ),
        (
            "dead workers out of Celeborn placement",
            format!(
                "{} ({} stopped, worker_timeout {:.0} s)",
                secs(f.dead.celeborn_excluded_s),
                f.dead.stopped.len(),
                f.dead.worker_timeout_s
            ),
        ),
        (
            "dead workers out of Uniffle placement",
            secs(f.dead.uniffle_excluded_s),
        ),
        (
            "restarted coordinator: ready / lists live workers / correct placements",
            format!(
                "{:.1} s / {:.1} s / {:.1} s",
                f.restart.ready_s, f.restart.listed_s, f.restart.placing_s
            ),
        ),
    ];
    for (name, value) in rows {
        let _ = writeln!(t, "| {name} | {value} |");
    }
    let _ = writeln!(
        t,
        "\n| placement | partitions | calls | failed | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|---|---|"
    );
    for r in &f.latency {
        let name = match r.protocol {
            Protocol::Celeborn => "RequestSlots",
            Protocol::Uniffle => "getShuffleAssignments",
        };
        let _ = writeln!(
            t,
            "| {name} | {} | {} | {} | {:.1} | {:.1} | {:.1} |",
            r.partitions, r.count, r.failures, r.p50_ms, r.p99_ms, r.max_ms
        );
    }
    for r in f.latency.iter().filter(|r| r.first_error.is_some()) {
        let _ = writeln!(
            t,
            "\nfirst failure of {:?} at {} partitions: {}",
            r.protocol,
            r.partitions,
            r.first_error.as_deref().unwrap_or_default()
        );
    }
    t
}
