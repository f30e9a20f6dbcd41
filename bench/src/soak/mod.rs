//! `switchyard-bench soak`: a fleet of `switchyard` nodes on 127.0.0.2..
//! with replication, under a steady mixed load of both protocols for a
//! given time while faults are injected on a schedule, and a verifier that
//! proves every acknowledged record was read back exactly once (or the
//! client got a clear error and the application's rerun succeeded).
//!
//! - [`record`]: the self-checking records every application writes;
//! - [`ledger`]: what was acknowledged against what was read;
//! - [`spec`]: the seeded generator of applications (sizes, skew);
//! - [`uniffle_app`], [`celeborn_app`] (reduce partitions), [`flink_app`]
//!   (map partitions): one application attempt each;
//! - [`fleet`]: the node processes; [`faults`]: what is done to them;
//! - [`probe`]: latencies in and out of faults; [`tally`]: the report.
//! - [`jobs`]: real Spark and Flink jobs beside the load (`--jobs`).
//!
//! Each run prints its seed; `--seed` replays the same applications and the
//! same fault order (timing on a shared machine varies).

pub mod celeborn_app;
pub mod faults;
pub mod fleet;
pub mod flink_app;
pub mod ledger;
pub mod probe;
pub mod record;
pub mod s3;
pub mod spec;
pub mod tally;
pub mod uniffle_app;

// Apart from the loads above: the real jobs run as other processes.
pub mod jobs;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use parking_lot::Mutex;
use switchyard_clients::uniffle::Transport;

use faults::FaultKind;
use fleet::Fleet;
use probe::Probe;
use spec::{AppSpec, Rng};
use tally::{Load, NodeMemory, Tally};

#[derive(Debug, Clone, clap::Args)]
pub struct SoakArgs {
    /// The `switchyard` binary the fleet runs.
    #[arg(long, default_value = "target/release/switchyard")]
    pub bin: PathBuf,
    /// Nodes: node 1 coordinates, node 2 coordinates and works, the rest work.
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// Node 1's address (node i takes the i-th from it, each with every
    /// role's default port): the gateway tests' cluster layout by default;
    /// another range lets a soak run beside them.
    #[arg(long, default_value = "127.0.0.2")]
    pub first_ip: std::net::Ipv4Addr,
    /// The S3 test server (storage/examples/s3_server.rs) for the cold tier;
    /// default: `examples/s3_server` beside `--bin`. "" runs without a cold tier.
    #[arg(long)]
    pub s3_server: Option<PathBuf>,
    /// Size of each worker's second data directory, a tmpfs the disk-full
    /// fault fills (0: a plain directory, no disk-full fault).
    #[arg(long, default_value_t = 160)]
    pub small_disk_mib: u64,
    /// How long the load runs, in seconds (faults stop a hold and a quiet
    /// spell before the end).
    #[arg(long, default_value_t = 600)]
    pub duration: u64,
    /// The run's seed (applications and fault order); printed, random when absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Every node's `storage.memory.capacity`.
    #[arg(long, default_value = "128MiB")]
    pub memory: String,
    /// Concurrent applications per load (Uniffle GRPC, Uniffle GRPC_NETTY,
    /// Celeborn reduce, Celeborn Flink map).
    #[arg(long, default_value_t = 2)]
    pub clients: usize,
    /// Seconds of quiet between one fault's repair and the next fault.
    #[arg(long, default_value_t = 20)]
    pub quiet: u64,
    /// Seconds a fault is held before it is repaired.
    #[arg(long, default_value_t = 8)]
    pub hold: u64,
    /// The loads to run (default: every one).
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<Load>,
    /// The faults to inject, in turn (default: every kind).
    #[arg(long, value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Fail unless every fault kind was injected at least this many times
    /// (the run must be long enough: about 30 s a fault with the defaults).
    #[arg(long, default_value_t = 1)]
    pub min_each: u64,
    /// Also write the report (Markdown) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Keep the fleet's directories (configs, data, logs) here instead of a
    /// temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub jobs: jobs::JobsArgs,
}

/// How long an application attempt may take before the client gives up
/// (the stock clients' RPC timeouts are of this order).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts of one application before it counts as failed.
const ATTEMPTS: u32 = 8;
/// How long one request may go unanswered before the client gives up on
/// it and names the step (a cut node answers nothing).
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// A fault's latency window lasts this long past its repair.
const SETTLE: Duration = Duration::from_secs(10);

pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let s3_server = match &args.s3_server {
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(p.clone()),
        None => args.bin.parent().map(|d| d.join("examples/s3_server")),
    };
    jobs::build(&args.jobs).await?;
    let mut fleet = Fleet::start(fleet::FleetOptions {
        bin: args.bin.clone(),
        nodes: args.nodes,
        memory: args.memory.clone(),
        first_ip: args.first_ip,
        // Absolute: each node runs in a directory of its own, so a relative
        // path would name a different place for it.
        root: args.dir.as_deref().map(std::path::absolute).transpose()?,
        s3_server,
        small_disk_mib: args.small_disk_mib,
    })
    .await?;
    let kinds = fault_kinds(&args.faults, &fleet)?;
    println!(
        "soak: {} nodes from {}, {} s, seed {seed} (replay: --seed {seed}), faults {:?}",
        args.nodes, args.first_ip, args.duration, kinds
    );
    let bounds = memory_bounds(&fleet)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.duration);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let probe = Probe::default();
    let pids = Arc::new(Mutex::new(fleet.pids()));
    let memory = Arc::new(Mutex::new(NodeMemory::new(&fleet, bounds)));
    let sampler = tokio::spawn(sample_rss(pids.clone(), memory.clone()));

    let loads = spawn_loads(&args, seed, &fleet, deadline, &tally, &probe);
    let real_jobs = jobs::spawn(&args.jobs, &fleet, started, deadline, &tally, &probe);
    let schedule = faults_schedule(
        &args, seed, &kinds, &mut fleet, &pids, deadline, &tally, &probe,
    )
    .await;
    for handle in loads {
        handle.await.context("a load task panicked")?;
    }
    if let Some(handle) = real_jobs {
        handle.await.context("the real jobs' task panicked")?;
    }
    let load_time = started.elapsed();
    let leftovers = wait_for_cleanup(&fleet).await;
    sampler.abort();
    let report = tally.lock().report(tally::Context {
        seed,
        nodes: args.nodes,
        load_time,
        probe: &probe,
        memory: &memory.lock(),
        leftovers: &leftovers,
        kinds: &kinds,
        min_each: args.min_each,
    });
    println!("{report}");
    if let Some(path) = &args.report {
        std::fs::write(path, &report).with_context(|| format!("write {}", path.display()))?;
    }
    schedule?;
    let t = tally.lock();
    ensure!(
        t.passed(&memory.lock(), &leftovers, &kinds, args.min_each),
        "the soak failed: see the report above"
    );
    Ok(())
}

/// The faults asked for, each of which must be possible here; none asked:
/// every kind that is possible (the others named).
fn fault_kinds(asked: &[FaultKind], fleet: &Fleet) -> anyhow::Result<Vec<FaultKind>> {
    if asked.is_empty() {
        let mut kinds = Vec::new();
        for kind in FaultKind::ALL {
            match kind.unavailable(fleet) {
                Some(why) => println!("soak: no {} fault here: it {why}", kind.name()),
                None => kinds.push(kind),
            }
        }
        return Ok(kinds);
    }
    for kind in asked {
        if let Some(why) = kind.unavailable(fleet) {
            anyhow::bail!("the {} fault {why}", kind.name());
        }
    }
    Ok(asked.to_vec())
}

/// Each node's memory number (`check-config`'s container figure).
fn memory_bounds(fleet: &Fleet) -> anyhow::Result<Vec<u64>> {
    (1..=fleet.nodes.len())
        .map(|i| fleet.memory_number(i))
        .collect()
}

/// Reads every running node's peak RSS (VmHWM) twice a second.
async fn sample_rss(pids: Arc<Mutex<Vec<(usize, u32)>>>, memory: Arc<Mutex<NodeMemory>>) {
    loop {
        let now: Vec<(usize, u32)> = pids.lock().clone();
        for (node, pid) in now {
            if let Some(peak) = crate::report::peak_rss_of(pid) {
                memory.lock().saw(node, peak);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn spawn_loads(
    args: &SoakArgs,
    seed: u64,
    fleet: &Fleet,
    deadline: Instant,
    tally: &Arc<Mutex<Tally>>,
    probe: &Probe,
) -> Vec<tokio::task::JoinHandle<()>> {
    let coordinators: Vec<String> = fleet
        .nodes
        .iter()
        .filter(|n| n.role != fleet::Role::Worker)
        .map(|n| n.ip.to_string())
        .collect();
    let next_app = Arc::new(AtomicU32::new(1));
    let mut handles = Vec::new();
    let loads = if args.loads.is_empty() {
        Load::ALL.to_vec()
    } else {
        args.loads.clone()
    };
    for (k, load) in loads.into_iter().enumerate() {
        for c in 0..args.clients {
            let rng = Rng::new(seed ^ ((k * 1000 + c) as u64).wrapping_mul(0x9E37_79B9));
            let ctx = LoadTask {
                load,
                coordinators: coordinators.clone(),
                next_app: next_app.clone(),
                tally: tally.clone(),
                probe: probe.clone(),
            };
            handles.push(tokio::spawn(ctx.run(rng, deadline)));
        }
    }
    handles
}

struct LoadTask {
    load: Load,
    coordinators: Vec<String>,
    next_app: Arc<AtomicU32>,
    tally: Arc<Mutex<Tally>>,
    probe: Probe,
}

impl LoadTask {
    /// Applications one after the other until the deadline.
    async fn run(self, mut rng: Rng, deadline: Instant) {
        while Instant::now() < deadline {
            let shape = AppSpec::draw(&mut rng, 0);
            self.application(shape).await;
        }
    }

    /// One application: attempts until one is verified or all failed.
    async fn application(&self, shape: AppSpec) {
        for attempt in 1..=ATTEMPTS {
            let spec = AppSpec {
                app_no: self.next_app.fetch_add(1, Ordering::Relaxed),
                ..shape.clone()
            };
            let app = format!("soak-{}-{}", self.load.slug(), spec.app_no);
            let outcome = tokio::time::timeout(ATTEMPT_TIMEOUT, self.attempt(&app, &spec)).await;
            let outcome = match outcome {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!(
                    "attempt timed out: no answer within {ATTEMPT_TIMEOUT:?}"
                )),
            };
            match outcome {
                Ok(verdict) => {
                    self.tally
                        .lock()
                        .verified(self.load, &spec, verdict, attempt);
                    return;
                }
                Err(e) => {
                    // In full, with its application, for the node logs.
                    println!("attempt {attempt} of {app} failed: {e:#}");
                    self.tally.lock().attempt_failed(self.load, &e);
                    let backoff = Duration::from_secs(1 << (attempt - 1).min(3));
                    tokio::time::sleep(backoff).await;
                }
            }
        }
        self.tally.lock().application_failed(self.load);
    }

    async fn attempt(&self, app: &str, spec: &AppSpec) -> anyhow::Result<ledger::Verdict> {
        let uniffle = |t| {
            let coordinators: Vec<String> = self
                .coordinators
                .iter()
                .map(|ip| format!("{ip}:19999"))
                .collect();
            (t, coordinators)
        };
        match self.load {
            Load::UniffleGrpc | Load::UniffleNetty => {
                let transport = if self.load == Load::UniffleGrpc {
                    Transport::Grpc
                } else {
                    Transport::GrpcNetty
                };
                let (t, coordinators) = uniffle(transport);
                uniffle_app::run(app, spec, t, &coordinators, &self.probe).await
            }
            Load::Celeborn | Load::Flink => {
                let masters: Vec<String> = self
                    .coordinators
                    .iter()
                    .map(|ip| format!("{ip}:9097"))
                    .collect();
                if self.load == Load::Celeborn {
                    celeborn_app::run(app, spec, &masters, &self.probe).await
                } else {
                    flink_app::run(app, spec, &masters, &self.probe).await
                }
            }
        }
    }
}

/// One client step: its error, or its silence past [`RPC_TIMEOUT`], named
/// by `what`.
pub(crate) async fn step<T, E, F>(what: impl FnOnce() -> String, f: F) -> anyhow::Result<T>
where
    F: std::future::Future<Output = Result<T, E>>,
    E: Into<anyhow::Error>,
{
    match tokio::time::timeout(RPC_TIMEOUT, f).await {
        Ok(r) => r.map_err(|e| e.into().context(what())),
        Err(_) => Err(anyhow::anyhow!(
            "{}: no answer within {RPC_TIMEOUT:?}",
            what()
        )),
    }
}

/// Injects the faults in turn (each round in a seeded order) until a hold
/// and a quiet spell no longer fit before the deadline.
#[allow(clippy::too_many_arguments)]
async fn faults_schedule(
    args: &SoakArgs,
    seed: u64,
    kinds: &[FaultKind],
    fleet: &mut Fleet,
    pids: &Mutex<Vec<(usize, u32)>>,
    deadline: Instant,
    tally: &Mutex<Tally>,
    probe: &Probe,
) -> anyhow::Result<()> {
    let mut rng = Rng::new(seed.rotate_left(17));
    let (quiet, hold) = (
        Duration::from_secs(args.quiet),
        Duration::from_secs(args.hold),
    );
    let mut order: Vec<FaultKind> = Vec::new();
    loop {
        tokio::time::sleep(quiet).await;
        if Instant::now() + hold + quiet + SETTLE >= deadline {
            return Ok(());
        }
        if order.is_empty() {
            order = kinds.to_vec();
            // A seeded shuffle (Fisher-Yates) of each round.
            for i in (1..order.len()).rev() {
                order.swap(i, rng.range(0, i as u64) as usize);
            }
        }
        let kind = order.pop().expect("refilled");
        probe.set_faulting(true);
        let began = Instant::now();
        let result = faults::inject(kind, fleet, &mut rng, hold).await;
        *pids.lock() = fleet.pids();
        let at = began
            .duration_since(deadline - Duration::from_secs(args.duration))
            .as_secs();
        let line = match &result {
            Ok(0) => format!(
                "{at} s: {}, repaired after {:.1} s",
                kind.name(),
                began.elapsed().as_secs_f64()
            ),
            Ok(node) => format!(
                "{at} s: {} on node {node}, repaired after {:.1} s",
                kind.name(),
                began.elapsed().as_secs_f64()
            ),
            Err(e) => format!("{at} s: {} FAILED: {e:#}", kind.name()),
        };
        println!("{line}");
        tally
            .lock()
            .fault(kind, line, began.elapsed(), result.as_ref().err());
        if let Err(e) = result {
            // A node that could not be brought back: the rest of the run
            // would not be this fleet any more.
            probe.set_faulting(false);
            return Err(e.context(format!("fault {}", kind.name())));
        }
        tokio::time::sleep(SETTLE).await;
        probe.set_faulting(false);
    }
}

/// Waits up to two application leases for every node's data directories to
/// hold nothing but node state; returns what is left.
async fn wait_for_cleanup(fleet: &Fleet) -> Vec<PathBuf> {
    let until = Instant::now() + Duration::from_secs(75);
    loop {
        let left = fleet.leftovers();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
