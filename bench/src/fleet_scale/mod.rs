//! `switchyard-bench fleet-scale` (issue 43): the control plane of a big
//! fleet. Three real coordinators (the `switchyard` binary,
//! [`coordinators`]), up to a thousand simulated workers that heartbeat
//! them over the cluster protocol with skewed, moving load ([`workers`]),
//! and simulated drivers of both protocols at a population's rate
//! ([`drivers`]). In phases:
//!
//! 1. workers only: each coordinator's CPU per heartbeat handled;
//! 2. drivers too, for `--duration`: coordinator CPU and RSS, p50/p99 of
//!    RequestSlots and getShuffleAssignments by shuffle size, app-book
//!    exchange bytes per second, placement balance (max/mean);
//! 3. `--dead-workers` of the workers with the most free memory stop: the
//!    time until no placement of either protocol names them;
//! 4. coordinator 3 is killed (SIGKILL) and restarted: the time until it
//!    lists every live worker and answers placements naming only them;
//! 5. the drivers stop (the books stay full, nothing changes): app-book
//!    exchange bytes per second of an unchanging book.
//!
//! [`report`] prints the table.

pub mod coordinators;
pub mod drivers;
pub mod plot;
pub mod report;
pub mod workers;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use coordinators::{Coordinators, Settings, COUNT};
use drivers::{Clients, DriverSettings, Drivers, Placement, Tally};
use report::{DeadWorkers, Figures, Restart, Window};
use workers::SimFleet;

/// The app-book exchange metric (bytes each coordinator sent and received
/// as the asking side of `SyncApps`).
pub const SYNC_BYTES: &str = "switchyard_cluster_app_sync_bytes_total";
const HEARTBEATS: &str = "switchyard_cluster_heartbeats_received_total";

#[derive(Debug, Clone, clap::Args)]
pub struct FleetScaleArgs {
    /// The `switchyard` binary (default: next to this one).
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// Where the coordinators' directories go (default: a temporary one).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Simulated workers.
    #[arg(long, default_value_t = 100)]
    pub workers: usize,
    /// Applications alive at once, half of each protocol.
    #[arg(long, default_value_t = 1000)]
    pub apps: usize,
    /// Seconds of the measured window with drivers.
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// Shuffle sizes (partitions), comma separated; a size s is drawn with
    /// weight 1/sqrt(s).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,10000,100000,200000"
    )]
    pub sizes: Vec<i32>,
    /// Shuffles per second, both protocols (default: apps / 200, what
    /// applications of 5 minutes with about 3 shuffles each ask).
    #[arg(long)]
    pub shuffle_rate: Option<f64>,
    /// Seconds a shuffle lives before its driver unregisters it.
    #[arg(long, default_value_t = 30)]
    pub shuffle_life: u64,
    /// Seconds an application lives before it ends and a new one starts.
    #[arg(long, default_value_t = 300)]
    pub app_life: u64,
    /// Seconds between a driver's heartbeats (both clients' default: 10).
    #[arg(long, default_value_t = 10)]
    pub app_heartbeat: u64,
    /// `cluster.heartbeat_interval`, seconds (workers and book exchanges).
    #[arg(long, default_value_t = 3)]
    pub heartbeat: u64,
    /// `cluster.worker_timeout`, seconds.
    #[arg(long, default_value_t = 10)]
    pub worker_timeout: u64,
    /// `cluster.warmup`, seconds.
    #[arg(long, default_value_t = 6)]
    pub warmup: u64,
    /// Seconds of the workers-only window.
    #[arg(long, default_value_t = 15)]
    pub idle_secs: u64,
    /// Workers stopped in the dead-worker phase (default: 1 in 20).
    #[arg(long)]
    pub dead_workers: Option<usize>,
    /// Also write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also write the table (markdown) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Run nothing: plot these runs' `--json` files (comma separated) into
    /// `--svg`, against the number of workers.
    #[arg(long, value_delimiter = ',')]
    pub plot: Vec<PathBuf>,
    /// Where `--plot` writes its SVG.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

impl FleetScaleArgs {
    fn settings(&self) -> Settings {
        Settings {
            heartbeat: Duration::from_secs(self.heartbeat),
            worker_timeout: Duration::from_secs(self.worker_timeout),
            warmup: Duration::from_secs(self.warmup),
            // Past an application's heartbeat: drivers keep it alive.
            app_timeout: Duration::from_secs(self.app_heartbeat * 6),
        }
    }

    fn driver_settings(&self) -> DriverSettings {
        DriverSettings {
            apps: self.apps,
            app_heartbeat: Duration::from_secs(self.app_heartbeat),
            app_life: Duration::from_secs(self.app_life),
            shuffle_rate: self
                .shuffle_rate
                .unwrap_or((self.apps as f64 / 200.0).max(1.0)),
            shuffle_life: Duration::from_secs(self.shuffle_life),
            sizes: self.sizes.clone(),
        }
    }

    fn dead(&self) -> usize {
        self.dead_workers.unwrap_or((self.workers / 20).max(1))
    }
}

fn default_bin() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    Ok(me.with_file_name("switchyard"))
}

pub async fn run(args: FleetScaleArgs) -> anyhow::Result<()> {
    if !args.plot.is_empty() {
        let out = args.svg.as_ref().context("--plot needs --svg")?;
        std::fs::write(out, plot::svg(&args.plot)?)?;
        return Ok(());
    }
    let figures = simulate(&args).await?;
    let table = report::table(&figures);
    println!("{table}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&figures)?)?;
    }
    if let Some(path) = &args.report {
        std::fs::write(path, &table)?;
    }
    Ok(())
}

/// Runs every phase; the figures (the caller prints them).
pub async fn simulate(args: &FleetScaleArgs) -> anyhow::Result<Figures> {
    ensure!((2..=2_000).contains(&args.workers), "--workers: 2 to 2000");
    ensure!(args.apps >= 2, "--apps: at least 2");
    ensure!(
        !args.sizes.is_empty() && args.sizes.iter().all(|&s| s > 0),
        "--sizes: positive partition counts"
    );
    ensure!(
        args.dead() < args.workers,
        "--dead-workers: fewer than --workers"
    );
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => default_bin()?,
    };
    let settings = args.settings();
    let mut coords = Coordinators::start(&bin, args.dir.as_deref(), &settings).await?;
    let fleet = Arc::new(SimFleet::new(args.workers));
    let cluster: Vec<String> = (1..=COUNT).map(coordinators::cluster).collect();
    let outcome = phases(args, &mut coords, &fleet, cluster).await;
    fleet.stop_all().await;
    outcome
}

async fn phases(
    args: &FleetScaleArgs,
    coords: &mut Coordinators,
    fleet: &Arc<SimFleet>,
    cluster: Vec<String>,
) -> anyhow::Result<Figures> {
    let settings = args.settings();
    let config = workers::cluster_config(cluster, settings.heartbeat);
    let started = Instant::now();
    fleet.start(&config).await?;
    let all: HashSet<usize> = (0..args.workers).collect();
    for i in 1..=COUNT {
        wait_listed(coords, i, &all, Duration::from_secs(60)).await?;
    }
    let fleet_up_s = started.elapsed().as_secs_f64();
    let workers_only = measure(coords, Duration::from_secs(args.idle_secs)).await?;

    let clients = Arc::new(Clients::connect().await?);
    let tally = Arc::new(Tally::default());
    let drivers = Drivers::start(
        args.driver_settings(),
        clients,
        fleet.clone(),
        tally.clone(),
    )?;
    // The population starts over one driver heartbeat interval.
    tokio::time::sleep(Duration::from_secs(args.app_heartbeat)).await;
    let loaded = measure(coords, Duration::from_secs(args.duration)).await?;

    let dead = dead_workers(args, fleet).await?;
    let live: HashSet<usize> = all.difference(&dead.indices()).copied().collect();
    let restart = restart(coords, fleet, &live, &drivers).await?;
    let app_calls = tally.app_calls.load(std::sync::atomic::Ordering::Relaxed);
    drivers.stop().await;
    // The books are full and nothing changes: what an exchange then costs
    // (after two rounds, which carry the drivers' last changes).
    tokio::time::sleep(settings.heartbeat * 2).await;
    let quiet = measure(coords, settings.heartbeat * 4).await?;
    Ok(Figures::new(
        args,
        fleet_up_s,
        workers_only,
        loaded,
        quiet,
        &tally,
        app_calls,
        dead,
        restart,
    ))
}

/// Waits until coordinator `i` is warm and lists exactly `expected` as
/// active; the time it took.
async fn wait_listed(
    coords: &Coordinators,
    i: usize,
    expected: &HashSet<usize>,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        if let Ok(view) = coords.cluster_view(i).await {
            if lists_exactly(&view, expected) {
                return Ok(started.elapsed());
            }
        }
        if started.elapsed() > limit {
            bail!(
                "coordinator {i} did not list the {} live workers within {limit:?}",
                expected.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `/api/v1/cluster` is warm and its active workers are `expected`
/// (simulated worker indices).
fn lists_exactly(view: &serde_json::Value, expected: &HashSet<usize>) -> bool {
    if view["warming"].as_bool() != Some(false) {
        return false;
    }
    let Some(workers) = view["workers"].as_array() else {
        return false;
    };
    let active: HashSet<usize> = workers
        .iter()
        .filter(|w| w["state"] == "active")
        .filter_map(|w| {
            w["node_id"]
                .as_str()?
                .strip_prefix("sim-worker-")?
                .parse()
                .ok()
        })
        .collect();
    active == *expected
}

/// CPU, RSS, heartbeats and book exchange bytes of every coordinator over
/// `window`.
async fn measure(coords: &Coordinators, window: Duration) -> anyhow::Result<Window> {
    let sample = |coords: &Coordinators| -> anyhow::Result<Vec<Duration>> {
        (1..=COUNT).map(|i| coords.cpu_time(i)).collect()
    };
    let me = std::process::id();
    let bench0 = crate::report::cpu_time_of(me)?;
    let (cpu0, c0, t0) = (sample(coords)?, counters(coords).await?, Instant::now());
    tokio::time::sleep(window).await;
    let (cpu1, c1) = (sample(coords)?, counters(coords).await?);
    let bench_cpu = crate::report::cpu_time_of(me)? - bench0;
    let secs = t0.elapsed().as_secs_f64();
    let rss = (1..=COUNT)
        .map(|i| coords.rss(i))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Window {
        secs,
        cpu_pct: cpu0
            .iter()
            .zip(&cpu1)
            .map(|(a, b)| 100.0 * (*b - *a).as_secs_f64() / secs)
            .collect(),
        rss_mib: rss.iter().map(|&r| crate::report::mib(r)).collect(),
        heartbeats_per_s: c0
            .iter()
            .zip(&c1)
            .map(|(a, b)| (b.0 - a.0) / secs)
            .collect(),
        sync_bytes_per_s: c0.iter().zip(&c1).map(|(a, b)| (b.1 - a.1) / secs).sum(),
        bench_cpu_pct: 100.0 * bench_cpu.as_secs_f64() / secs,
    })
}

/// Heartbeats accepted and book exchange bytes, per coordinator.
async fn counters(coords: &Coordinators) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for i in 1..=COUNT {
        out.push((
            coords.metric(i, HEARTBEATS, "result=\"accepted\"").await?,
            coords.metric(i, SYNC_BYTES, "").await?,
        ));
    }
    Ok(out)
}

/// Which simulated workers a placement names.
fn named(fleet: &SimFleet, placed: &Placement, celeborn: bool) -> HashSet<usize> {
    placed
        .keys()
        .filter_map(|id| {
            if celeborn {
                fleet.by_celeborn(id)
            } else {
                fleet.by_uniffle(id)
            }
        })
        .map(|w| w.index)
        .collect()
}

/// Stops the workers with the most free memory (those Uniffle places on
/// first) and times how long placements on coordinator 1 keep naming them.
async fn dead_workers(args: &FleetScaleArgs, fleet: &Arc<SimFleet>) -> anyhow::Result<DeadWorkers> {
    let mut by_free: Vec<(u64, usize)> = fleet
        .workers
        .iter()
        .map(|w| {
            use switchyard_cluster::LocalWorker;
            let load = w.report().load.unwrap_or_default();
            (load.memory_capacity - load.memory_used, w.index)
        })
        .collect();
    by_free.sort_by(|a, b| b.cmp(a));
    let stopped: Vec<usize> = by_free.iter().take(args.dead()).map(|x| x.1).collect();
    let gone: HashSet<usize> = stopped.iter().copied().collect();
    let master = drivers::Clients::connect().await?;
    let probe = |n: i32| format!("fleet-probe-{n}");
    fleet.stop(&stopped).await;
    let t0 = Instant::now();
    let limit = Duration::from_secs(args.worker_timeout + 60);
    let (mut celeborn_s, mut uniffle_s) = (None, None);
    let partitions = (2 * args.workers) as i32;
    let mut n = 0;
    while (celeborn_s.is_none() || uniffle_s.is_none()) && t0.elapsed() < limit {
        n += 1;
        if celeborn_s.is_none() {
            if let Ok((_, p)) =
                drivers::request_slots(master.master(1), &probe(0), n, partitions).await
            {
                if named(fleet, &p, true).is_disjoint(&gone) {
                    celeborn_s = Some(t0.elapsed().as_secs_f64());
                }
            }
        }
        if uniffle_s.is_none() {
            // An assignment names 9 servers at most, so the probe is the
            // coordinator's list of servers it places on, and an assignment.
            let listed = drivers::server_list(master.uniffle(1)).await;
            let c = master.uniffle(1);
            let assigned = drivers::assignments(c, &probe(1), n, partitions, -1).await;
            if let (Ok(listed), Ok((_, p))) = (listed, assigned) {
                let listed: Placement = listed.into_iter().map(|id| (id, 1)).collect();
                if named(fleet, &listed, false).is_disjoint(&gone)
                    && named(fleet, &p, false).is_disjoint(&gone)
                {
                    uniffle_s = Some(t0.elapsed().as_secs_f64());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(DeadWorkers {
        stopped,
        worker_timeout_s: args.worker_timeout as f64,
        celeborn_excluded_s: celeborn_s,
        uniffle_excluded_s: uniffle_s,
    })
}

/// SIGKILL coordinator 3, start it again, and time until it lists every
/// live worker and answers both protocols' placements that name only live
/// workers and cover every partition.
async fn restart(
    coords: &mut Coordinators,
    fleet: &Arc<SimFleet>,
    live: &HashSet<usize>,
    drivers: &Drivers,
) -> anyhow::Result<Restart> {
    const I: usize = 3;
    let limit = Duration::from_secs(120);
    coords.kill(I)?;
    let t0 = Instant::now();
    coords.launch(I).await?;
    let ready_s = t0.elapsed().as_secs_f64();
    let listed_s = {
        wait_listed(coords, I, live, limit).await?;
        t0.elapsed().as_secs_f64()
    };
    let partitions = (2 * fleet.workers.len()) as i32;
    let mut n = 0;
    let placing_s = loop {
        n += 1;
        ensure!(
            t0.elapsed() < limit,
            "coordinator {I} gave no correct placement within {limit:?}"
        );
        if placement_correct(I, fleet, live, partitions, n).await {
            break t0.elapsed().as_secs_f64();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The drivers' connections to the killed master are dead.
    drivers
        .reconnect(I)
        .await
        .context("reconnecting to the restarted master")?;
    Ok(Restart {
        ready_s,
        listed_s,
        placing_s,
    })
}

/// Both protocols' placement on coordinator `i`: answered, every partition
/// covered, only live workers named.
async fn placement_correct(
    i: usize,
    fleet: &SimFleet,
    live: &HashSet<usize>,
    partitions: i32,
    n: i32,
) -> bool {
    let Ok(master) = drivers::connect_master(i).await else {
        return false;
    };
    let celeborn = drivers::request_slots(&master, "fleet-probe-restart", n, partitions).await;
    let uniffle = async {
        let c = drivers::uniffle_client(i).ok()?;
        drivers::assignments(c, "fleet-probe-restart", n, partitions, -1)
            .await
            .ok()
    }
    .await;
    let good = |p: &Placement, is_celeborn: bool| {
        p.values().sum::<u64>() == partitions as u64 && named(fleet, p, is_celeborn).is_subset(live)
    };
    match (celeborn, uniffle) {
        (Ok((_, c)), Some((_, u))) => good(&c, true) && good(&u, false),
        _ => false,
    }
}
