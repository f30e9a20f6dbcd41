//! `switchyard-bench scale`: what partitions and applications held cost a
//! node at rest. It starts the `switchyard` binary (a fleet of one, so the
//! node heartbeats its coordinator as a fleet's nodes do), registers A
//! applications × S shuffles × P partitions through both protocols' real
//! RPCs (half Uniffle, half Celeborn; one 64-byte block or batch per
//! partition, committed), and at each level of partitions held measures:
//! RSS per partition and per application, p50/p99 of a small push and a
//! small read per protocol (rounds of the four spread evenly over
//! `--probe-secs`), the idle node's CPU (heartbeats, expiry checks,
//! a metrics scrape and a status request per interval). Then: kill -9 and
//! restart (time to ready, every committed partition read back), half the
//! applications unregistered and the other half left to expire.
//!
//! - [`server`]: the node as a child process, its RSS and CPU;
//! - [`load`]: the protocols' calls;
//! - [`probe`]: latency probes, the idle window, the heartbeats;
//! - [`plot`]: the figures as an SVG.

pub mod load;
pub mod plot;
pub mod probe;
pub mod server;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};

use crate::harness::WorkQueue;
use crate::report::mib;
use load::{Clients, Endpoints, HeldApp, Protocol};
use probe::{Heartbeats, IdleFigures, ProbeFigures};
use server::{NodeSettings, Server};

#[derive(Debug, Clone, clap::Args)]
pub struct ScaleBenchArgs {
    /// The `switchyard` binary (default: next to this one).
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// The node's directory (config, data, log); removed and recreated.
    #[arg(long, default_value = "bench-scale")]
    pub dir: PathBuf,
    /// Applications (with `--shape mixed`, half of each protocol).
    #[arg(long, default_value_t = 100)]
    pub apps: usize,
    /// How the applications hold their partitions: `mixed` (Uniffle and
    /// Celeborn reduce partitions, alternately), or every application one
    /// shape: `uniffle`, `celeborn-reduce`, `celeborn-map` (Flink's map
    /// partitions) or `celeborn-replica` (replicas held for another worker).
    #[arg(long, value_enum, default_value_t = Shape::Mixed)]
    pub shape: Shape,
    /// Shuffles per application.
    #[arg(long, default_value_t = 10)]
    pub shuffles: i32,
    /// Partitions per shuffle.
    #[arg(long, default_value_t = 1000)]
    pub partitions: i32,
    /// Partitions held at which to measure, comma separated; each a
    /// multiple of shuffles × partitions, the last one at most the total.
    #[arg(long, value_delimiter = ',', default_value = "0,10000,100000,1000000")]
    pub levels: Vec<usize>,
    /// Requests of each kind per latency probe.
    #[arg(long, default_value_t = 2000)]
    pub samples: usize,
    /// Seconds over which each level's probe requests are spread, one
    /// round of the four kinds at a time at an even pace. A p99 is a
    /// statement about a stretch of time: over one second of back-to-back
    /// requests it is set by whatever else that second held (a heartbeat
    /// round, a scrape), and two runs of the same build differed by 2x.
    #[arg(long, default_value_t = 20)]
    pub probe_secs: u64,
    /// Before each level's probes, write the load back (sync) and wait
    /// until the kernel's dirty and writeback pages are under 16 MiB (at
    /// most 120 s), so the probes measure the node at rest rather than
    /// beside the kernel's writeback of the load just made.
    #[arg(long)]
    pub settle: bool,
    /// Seconds of each idle window.
    #[arg(long, default_value_t = 30)]
    pub idle_secs: u64,
    /// Seconds between client heartbeats, scrapes and status requests.
    #[arg(long, default_value_t = 5)]
    pub interval_secs: u64,
    /// The node's application lease (both protocols), in seconds.
    #[arg(long, default_value_t = 30)]
    pub lease_secs: u64,
    /// The node's heartbeat to its coordinator (`cluster.heartbeat_interval`), in seconds.
    #[arg(long, default_value_t = 3)]
    pub node_heartbeat_secs: u64,
    /// Applications loaded at once.
    #[arg(long, default_value_t = 2)]
    pub concurrency: usize,
    /// `storage.memory.capacity`.
    #[arg(long, default_value = "1GiB")]
    pub memory: String,
    /// Also write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also draw the figures as an SVG here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Run nothing: draw `--svg` from earlier runs' `--json` files, each
    /// `label=path`, comma separated (e.g. before and after a change).
    #[arg(long, value_delimiter = ',', requires = "svg")]
    pub plot: Vec<String>,
}

/// How the bench's applications hold their partitions.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    Mixed,
    Uniffle,
    CelebornReduce,
    CelebornMap,
    CelebornReplica,
}

impl Shape {
    /// The protocol (and kind of location) of application `i`.
    fn protocol(self, i: usize) -> Protocol {
        match self {
            Shape::Mixed if i.is_multiple_of(2) => Protocol::Uniffle,
            Shape::Mixed => Protocol::Celeborn,
            Shape::Uniffle => Protocol::Uniffle,
            Shape::CelebornReduce => Protocol::Celeborn,
            Shape::CelebornMap => Protocol::CelebornMap,
            Shape::CelebornReplica => Protocol::CelebornReplica,
        }
    }
}

/// The figures at one level of partitions held.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Level {
    pub partitions: usize,
    pub apps: usize,
    pub rss_bytes: u64,
    pub load_s: f64,
    /// Seconds waited for the load's writeback before the probes
    /// (`--settle`; 0 without it).
    #[serde(default)]
    pub settle_s: f64,
    /// Seconds the probes took (about `--probe-secs`; 0 in figures from
    /// before 2026-12-07 late evening, whose probes ran back to back and
    /// did not record it).
    #[serde(default)]
    pub probe_s: f64,
    pub probes: ProbeFigures,
    pub idle: IdleFigures,
}

/// After kill -9 with everything committed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Restart {
    pub partitions: usize,
    pub ready_s: f64,
    pub recovery: serde_json::Value,
    pub read_back_s: f64,
    pub rss_bytes: u64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Removal {
    pub unregistered_apps: usize,
    pub unregistered_partitions: usize,
    pub unregister_s: f64,
    pub expired_apps: usize,
    pub expired_partitions: usize,
    /// From the last heartbeat until the node holds no application.
    pub expire_s: f64,
    pub lease_s: f64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    /// Absent in runs from before shapes (all of them mixed).
    #[serde(default = "mixed")]
    pub shape: Shape,
    pub apps: usize,
    pub shuffles: i32,
    pub partitions_per_shuffle: i32,
    pub baseline_rss_bytes: u64,
    pub levels: Vec<Level>,
    pub restart: Restart,
    pub removal: Removal,
}

fn mixed() -> Shape {
    Shape::Mixed
}

impl Figures {
    /// RSS over the baseline per partition held at the last level.
    pub fn rss_per_partition(&self) -> f64 {
        let last = self.levels.last().filter(|l| l.partitions > 0);
        last.map_or(0.0, |l| {
            l.rss_bytes.saturating_sub(self.baseline_rss_bytes) as f64 / l.partitions as f64
        })
    }
}

fn check(args: &ScaleBenchArgs) -> anyhow::Result<usize> {
    let per_app = (args.shuffles * args.partitions) as usize;
    ensure!(
        per_app > 0 && args.apps > 0,
        "apps, shuffles and partitions must be > 0"
    );
    for &l in &args.levels {
        ensure!(
            l % per_app == 0,
            "level {l} is not a multiple of {per_app} partitions per app"
        );
        ensure!(
            l <= per_app * args.apps,
            "level {l} is more than {} apps hold",
            args.apps
        );
    }
    ensure!(
        args.levels.windows(2).all(|w| w[0] < w[1]),
        "levels must rise"
    );
    Ok(per_app)
}

fn app(i: usize, args: &ScaleBenchArgs) -> HeldApp {
    HeldApp {
        id: format!("scale-{i:05}"),
        protocol: args.shape.protocol(i),
        shuffles: args.shuffles,
        partitions: args.partitions,
    }
}

/// Draws `--svg` from the `--json` files of earlier runs.
fn plot_runs(args: &ScaleBenchArgs) -> anyhow::Result<()> {
    let mut runs = Vec::new();
    for spec in &args.plot {
        let (label, path) = spec.split_once('=').context("--plot takes label=path")?;
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        runs.push((label.to_string(), serde_json::from_str::<Figures>(&text)?));
    }
    let runs: Vec<(&str, &Figures)> = runs.iter().map(|(l, f)| (l.as_str(), f)).collect();
    let svg = args.svg.as_ref().context("--plot needs --svg")?;
    std::fs::write(svg, plot::svg(&runs))?;
    Ok(())
}

pub async fn run(args: ScaleBenchArgs) -> anyhow::Result<()> {
    if !args.plot.is_empty() {
        return plot_runs(&args);
    }
    let per_app = check(&args)?;
    let bin = match &args.bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("switchyard"),
    };
    let settings = NodeSettings {
        memory: args.memory.clone(),
        lease: Duration::from_secs(args.lease_secs),
        expiry_check: Duration::from_secs(2),
        heartbeat: Duration::from_secs(args.node_heartbeat_secs),
    };
    println!(
        "scale bench: {} apps x {} shuffles x {} partitions, shape {:?}, levels {:?}",
        args.apps, args.shuffles, args.partitions, args.shape, args.levels
    );
    let mut server = Server::start(&bin, &args.dir, &settings).await?;
    let ep = endpoints(&server).await?;
    let probes = load_probes(&ep, args.samples * args.levels.len()).await?;
    let heartbeats = Heartbeats::start(ep.clone(), Duration::from_secs(args.interval_secs));
    heartbeats
        .apps
        .lock()
        .extend([probes.0.clone(), probes.1.clone()]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = server.rss()?;
    println!(
        "node pid {}, baseline RSS {:.1} MiB",
        server.pid(),
        mib(baseline)
    );
    let mut held: Vec<HeldApp> = Vec::new();
    let mut levels = Vec::new();
    let mut read_before = probe::ReadBefore::default();
    for &level in &args.levels {
        let started = Instant::now();
        let new: Vec<HeldApp> = (held.len()..level / per_app)
            .map(|i| app(i, &args))
            .collect();
        // Heartbeats from the start: loading a level takes longer than a lease.
        heartbeats.apps.lock().extend(new.iter().cloned());
        load_apps(&ep, &new, args.concurrency).await?;
        held.extend(new);
        let load_s = started.elapsed().as_secs_f64();
        let probing = Probing {
            probes: &probes,
            read_before: &mut read_before,
        };
        let l = measure(&server, &ep, &held, probing, &args, level, load_s).await?;
        print_level(&l, baseline);
        levels.push(l);
    }
    let restart = restart(&mut server, &ep, &held, per_app).await?;
    let removal = remove(&server, &ep, &held, heartbeats, per_app, &args).await?;
    let figures = Figures {
        shape: args.shape,
        apps: held.len(),
        shuffles: args.shuffles,
        partitions_per_shuffle: args.partitions,
        baseline_rss_bytes: baseline,
        levels,
        restart,
        removal,
    };
    report(&figures, &args)
}

/// The node's Uniffle server (through its coordinator's assignment) and
/// Celeborn worker (through its master's slots); retried while the fleet
/// of one warms up (its first heartbeat).
async fn endpoints(server: &Server) -> anyhow::Result<Endpoints> {
    let p = &server.ports;
    let started = Instant::now();
    loop {
        let attempt = async {
            let mut coordinator = switchyard_clients::uniffle::Coordinator::connect(&format!(
                "127.0.0.1:{}",
                p.uniffle_coordinator
            ))
            .await?;
            let a = coordinator
                .assignments(
                    "scale-probe-u",
                    0,
                    1,
                    switchyard_clients::uniffle::Transport::Grpc,
                )
                .await?;
            let uniffle = a
                .first()
                .and_then(|r| r.server.first())
                .cloned()
                .context("no server assigned")?;
            let master: std::net::SocketAddr =
                format!("127.0.0.1:{}", p.celeborn_master).parse()?;
            let conn = crate::lifecycle::connect_master(&master.to_string()).await?;
            // An application of its own, left to expire: the probes'
            // shuffles are reserved as every other's.
            crate::lifecycle::heartbeat(&conn, "scale-warmup").await?;
            let worker = load::reserve(&conn, "scale-warmup", 0, 1).await?;
            anyhow::Ok(Endpoints {
                uniffle,
                celeborn_master: master,
                celeborn_worker: worker,
            })
        };
        match attempt.await {
            Ok(ep) => return Ok(ep),
            Err(e) if started.elapsed() > Duration::from_secs(60) => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The two probe applications: shuffle 0 loaded and committed like any
/// other, with `reads` partitions (each read probe reads one no probe read
/// before, and at low levels, or in a shape of the other protocol, the
/// probes' are all a protocol has), shuffle 1 open for the probes' pushes.
async fn load_probes(ep: &Endpoints, reads: usize) -> anyhow::Result<(HeldApp, HeldApp)> {
    let partitions = i32::try_from(reads)?.max(probe::PROBE_PARTITIONS);
    let (u, c) = (
        HeldApp {
            id: "scale-probe-u".into(),
            protocol: Protocol::Uniffle,
            shuffles: 1,
            partitions,
        },
        HeldApp {
            id: "scale-probe-c".into(),
            protocol: Protocol::Celeborn,
            shuffles: 1,
            partitions,
        },
    );
    load::load_uniffle(ep, &u).await?;
    load::load_celeborn(ep, &c).await?;
    let mut server = ep.uniffle().await?;
    server
        .register_shuffle(&u.id, 1, &[(0, probe::PROBE_PARTITIONS - 1)])
        .await?;
    load::reserve(&ep.master().await?, &c.id, 1, probe::PROBE_PARTITIONS).await?;
    Ok((u, c))
}

/// Loads `apps`, `concurrency` at a time.
async fn load_apps(ep: &Endpoints, apps: &[HeldApp], concurrency: usize) -> anyhow::Result<()> {
    let queue = WorkQueue::new(apps.len() as i32);
    let apps = std::sync::Arc::new(apps.to_vec());
    crate::harness::run_tasks(concurrency.max(1), |_| {
        let (queue, apps, ep) = (queue.clone(), apps.clone(), ep.clone());
        async move {
            while let Some(i) = queue.take() {
                let app = &apps[i as usize];
                load::load(&ep, app)
                    .await
                    .with_context(|| format!("loading {}", app.id))?;
            }
            anyhow::Ok(())
        }
    })
    .await?;
    Ok(())
}

/// The probe applications and the partitions the read probes have read.
struct Probing<'a> {
    probes: &'a (HeldApp, HeldApp),
    read_before: &'a mut probe::ReadBefore,
}

async fn measure(
    server: &Server,
    ep: &Endpoints,
    held: &[HeldApp],
    probing: Probing<'_>,
    args: &ScaleBenchArgs,
    partitions: usize,
    load_s: f64,
) -> anyhow::Result<Level> {
    // Reads pick among the held applications and the probes' own (the
    // only ones of a protocol at low levels).
    let (u, c) = probing.probes;
    let mut readable = held.to_vec();
    readable.extend([u.clone(), c.clone()]);
    let settle_s = if args.settle {
        crate::report::settle(Duration::from_secs(120))
            .await?
            .as_secs_f64()
    } else {
        0.0
    };
    let pace = probe::Pace {
        samples: args.samples,
        over: Duration::from_secs(args.probe_secs),
    };
    let started = Instant::now();
    let probes = probe::probe(ep, &readable, (u, c), pace, probing.read_before).await?;
    let probe_s = started.elapsed().as_secs_f64();
    let rss_bytes = server.rss()?;
    let interval = Duration::from_secs(args.interval_secs);
    let idle = probe::idle(server, Duration::from_secs(args.idle_secs), interval).await?;
    Ok(Level {
        partitions,
        apps: held.len(),
        rss_bytes,
        load_s,
        settle_s,
        probe_s,
        probes,
        idle,
    })
}

fn print_level(l: &Level, baseline: u64) {
    let delta = l.rss_bytes.saturating_sub(baseline) as f64;
    let per = |n: usize| if n == 0 { 0.0 } else { delta / n as f64 };
    let p = &l.probes;
    println!(
        "{:>8} partitions in {:>4} apps (loaded in {:.1} s, settled in {:.1} s): RSS {:.1} MiB (+{:.1} MiB: {:.0} B/partition, {:.1} KiB/app); \
         p50/p99 ms over {:.0} s: uniffle push {:.2}/{:.2} read {:.2}/{:.2}, celeborn push {:.2}/{:.2} read {:.2}/{:.2}; \
         idle CPU {:.2}% of a core (status {:.0} ms, metrics {:.0} ms)",
        l.partitions, l.apps, l.load_s, l.settle_s, mib(l.rss_bytes), delta / 1048576.0, per(l.partitions), per(l.apps) / 1024.0, l.probe_s,
        p.uniffle_push.p50_ms, p.uniffle_push.p99_ms, p.uniffle_read.p50_ms, p.uniffle_read.p99_ms,
        p.celeborn_push.p50_ms, p.celeborn_push.p99_ms, p.celeborn_read.p50_ms, p.celeborn_read.p99_ms,
        l.idle.cpu_percent, l.idle.status_ms, l.idle.metrics_ms
    );
}

/// kill -9, time to `/readyz`, then every committed partition read back.
async fn restart(
    server: &mut Server,
    ep: &Endpoints,
    held: &[HeldApp],
    per_app: usize,
) -> anyhow::Result<Restart> {
    let ready = server.kill_and_restart().await?;
    let status: serde_json::Value = serde_json::from_str(&server.get("/api/v1/status").await?)?;
    let recovery = status["storage"]["recovery"].clone();
    let started = Instant::now();
    read_all(ep, held, 4).await?;
    let r = Restart {
        partitions: held.len() * per_app,
        ready_s: ready.as_secs_f64(),
        recovery,
        read_back_s: started.elapsed().as_secs_f64(),
        rss_bytes: server.rss()?,
    };
    println!(
        "kill -9 with {} committed partitions: serving again after {:.2} s (recovery {}); every partition read back and checked in {:.1} s; RSS {:.1} MiB",
        r.partitions, r.ready_s, r.recovery, r.read_back_s, mib(r.rss_bytes)
    );
    Ok(r)
}

/// Reads every partition of `held` with `readers` clients, checking bytes.
async fn read_all(ep: &Endpoints, held: &[HeldApp], readers: usize) -> anyhow::Result<()> {
    let apps = std::sync::Arc::new(held.to_vec());
    let queue = WorkQueue::new(apps.len() as i32);
    crate::harness::run_tasks(readers, |_| {
        let (queue, apps, ep) = (queue.clone(), apps.clone(), ep.clone());
        async move {
            let mut clients = Clients::connect(&ep).await?;
            while let Some(i) = queue.take() {
                let app = &apps[i as usize];
                for s in 0..app.shuffles {
                    for p in 0..app.partitions {
                        clients.read(app, s, p).await?;
                    }
                }
            }
            anyhow::Ok(())
        }
    })
    .await?;
    Ok(())
}

/// Half the applications unregistered (timed), then the heartbeats stop and
/// the rest expire (timed from the last heartbeat).
async fn remove(
    server: &Server,
    ep: &Endpoints,
    held: &[HeldApp],
    heartbeats: Heartbeats,
    per_app: usize,
    args: &ScaleBenchArgs,
) -> anyhow::Result<Removal> {
    let half = held.len() / 2;
    let (gone, kept) = held.split_at(half);
    let mut clients = Clients::connect(ep).await?;
    let started = Instant::now();
    for app in gone {
        clients.remove(app).await?;
        // Heartbeats go on until its turn: one waiting to be unregistered
        // must not expire meanwhile.
        heartbeats.apps.lock().retain(|a| a.id != app.id);
    }
    let unregister_s = started.elapsed().as_secs_f64();
    heartbeats.stop().await;
    let last_heartbeat = Instant::now();
    loop {
        let status: serde_json::Value = serde_json::from_str(&server.get("/api/v1/status").await?)?;
        let left = status["storage"]["applications"]
            .as_array()
            .map_or(0, Vec::len);
        if left == 0 {
            break;
        }
        ensure!(
            last_heartbeat.elapsed() < Duration::from_secs(args.lease_secs * 4 + 60),
            "{left} apps never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = Removal {
        unregistered_apps: gone.len(),
        unregistered_partitions: gone.len() * per_app,
        unregister_s,
        expired_apps: kept.len(),
        expired_partitions: kept.len() * per_app,
        expire_s: last_heartbeat.elapsed().as_secs_f64(),
        lease_s: args.lease_secs as f64,
    };
    println!(
        "removal: {} apps ({} partitions) unregistered in {:.2} s; {} apps ({} partitions) expired {:.1} s after the last heartbeat (lease {} s, checked every 2 s)",
        r.unregistered_apps, r.unregistered_partitions, r.unregister_s, r.expired_apps, r.expired_partitions, r.expire_s, r.lease_s
    );
    Ok(r)
}

fn report(figures: &Figures, args: &ScaleBenchArgs) -> anyhow::Result<()> {
    println!(
        "metadata RSS at {} partitions of shape {:?}: {:.0} bytes per partition",
        figures.levels.last().map_or(0, |l| l.partitions),
        figures.shape,
        figures.rss_per_partition()
    );
    let json = serde_json::to_string(figures)?;
    println!("SCALE_JSON {json}");
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(figures)?)?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, plot::svg(&[("this run", figures)]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> ScaleBenchArgs {
        let cli =
            crate::Cli::try_parse_from(["switchyard-bench", "scale"].iter().chain(extra)).unwrap();
        match cli.command {
            crate::Command::Scale(a) => a,
            _ => panic!("scale expected"),
        }
    }

    #[test]
    fn levels_must_be_whole_applications_within_the_total() {
        assert_eq!(check(&args(&[])).unwrap(), 10_000);
        assert!(check(&args(&["--levels", "0,15000"])).is_err());
        assert!(check(&args(&["--apps", "2", "--levels", "0,30000"])).is_err());
        assert!(check(&args(&["--levels", "20000,10000"])).is_err());
    }

    #[test]
    fn applications_alternate_protocols() {
        let a = args(&[]);
        assert_eq!(app(0, &a).protocol, Protocol::Uniffle);
        assert_eq!(app(1, &a).protocol, Protocol::Celeborn);
        assert_ne!(app(0, &a).id, app(2, &a).id);
    }

    #[test]
    fn a_shape_gives_every_application_its_kind() {
        for (shape, kind) in [
            ("uniffle", Protocol::Uniffle),
            ("celeborn-reduce", Protocol::Celeborn),
            ("celeborn-map", Protocol::CelebornMap),
            ("celeborn-replica", Protocol::CelebornReplica),
        ] {
            let a = args(&["--shape", shape]);
            assert!((0..4).all(|i| app(i, &a).protocol == kind), "{shape}");
        }
    }

    #[test]
    fn payloads_differ_per_partition() {
        assert_ne!(load::payload("a", 0, 1), load::payload("a", 0, 2));
        assert_eq!(load::payload("a", 0, 1).len(), 64);
    }

    #[test]
    fn the_plot_has_a_line_per_run_and_panel() {
        let level = |partitions, rss| Level {
            partitions,
            apps: partitions / 10_000,
            rss_bytes: rss,
            load_s: 1.0,
            settle_s: 0.0,
            probe_s: 0.0,
            probes: ProbeFigures::default(),
            idle: IdleFigures::default(),
        };
        let figures = Figures {
            shape: Shape::Mixed,
            apps: 100,
            shuffles: 10,
            partitions_per_shuffle: 1000,
            baseline_rss_bytes: 1 << 20,
            levels: vec![level(0, 1 << 20), level(1_000_000, 1 << 30)],
            restart: Restart {
                partitions: 1_000_000,
                ready_s: 1.0,
                recovery: serde_json::Value::Null,
                read_back_s: 1.0,
                rss_bytes: 1 << 30,
            },
            removal: Removal {
                unregistered_apps: 50,
                unregistered_partitions: 500_000,
                unregister_s: 1.0,
                expired_apps: 50,
                expired_partitions: 500_000,
                expire_s: 31.0,
                lease_s: 30.0,
            },
        };
        assert!((figures.rss_per_partition() - 1072.7).abs() < 1.0);
        let svg = plot::svg(&[("before", &figures), ("after", &figures)]);
        assert_eq!(svg.matches("<polyline").count(), 8);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
