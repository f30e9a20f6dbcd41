//! `switchyard-bench neighbours`: noisy neighbours on one node (issue 42).
//! A node with a small memory budget and a throttled disk, so that the disk
//! and not the two CPUs is what everyone shares; an aggressor writing as
//! fast as the node takes it through one protocol (several skewed
//! applications, [`aggressor`]); victims that are real small jobs through
//! the stock clients (`integration/soak-jobs.sh`: Spark 3.5 through the
//! Uniffle 0.10.0 and the Celeborn 0.6.3 clients, Flink 1.20 through the
//! Celeborn Flink client). Phases: (a) the victims alone, (b) the aggressor
//! alone, (c) the victims beside the aggressor. It prints each victim's
//! slowdown and what the aggressor kept of its throughput, and checks that
//! the aggressor really held the node at its budget during (c).

pub mod aggressor;
pub mod clients;
pub mod figures;
pub mod node;
pub mod watch;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use bytesize::ByteSize;
use switchyard_clients::uniffle::Transport;

use self::aggressor::{Aggressor, AggressorOptions, Protocol};
use self::clients::ClientRuntime;
use self::figures::{Cpu, Figures, Rate};
use self::node::{Node, NodeOptions};
use self::watch::Watch;
use crate::report::{mib, peak_rss_of};
use crate::soak::jobs::{build_script, Round};

#[derive(Debug, Clone, clap::Args)]
pub struct NeighboursArgs {
    /// The `switchyard` binary to start.
    #[arg(long, default_value = "target/release/switchyard")]
    pub bin: PathBuf,
    /// The node's loopback address (every role on its default port).
    #[arg(long, default_value = "127.0.4.2")]
    pub ip: Ipv4Addr,
    /// `storage.memory.capacity` of the node.
    #[arg(long, default_value = "256MiB")]
    pub memory: ByteSize,
    /// `storage.disks.write_rate_limit` of its one data directory, per second:
    /// below what the aggressor can send, so the disk is the bottleneck.
    #[arg(long, default_value = "64MiB")]
    pub write_rate: ByteSize,
    /// `storage.disks.read_rate_limit`, per second.
    #[arg(long, default_value = "256MiB")]
    pub read_rate: ByteSize,
    /// `storage.disks.min_free` of the node's data directory.
    #[arg(long, default_value = "256MiB")]
    pub min_free: ByteSize,
    /// The aggressor's protocol.
    #[arg(long, value_enum, default_value_t = Protocol::Celeborn)]
    pub aggressor: Protocol,
    /// The aggressor's applications at once.
    #[arg(long, default_value_t = 4)]
    pub apps: usize,
    /// Writers per aggressor application.
    #[arg(long, default_value_t = 4)]
    pub mappers: usize,
    /// Partitions of an aggressor application (partition 0 gets 20x each other's bytes).
    #[arg(long, default_value_t = 16)]
    pub partitions: i32,
    /// Bytes an aggressor application writes before it commits and reads back.
    #[arg(long, default_value = "256MiB")]
    pub app_size: ByteSize,
    /// The nice value of the aggressor's client threads (0: the victims'
    /// priority). They stand for a big job's executors, which on a fleet
    /// have machines of their own; here they would take the victims' CPUs.
    /// The node keeps the default priority.
    #[arg(long, default_value_t = 19)]
    pub aggressor_nice: i32,
    /// The Uniffle aggressor's transport: GRPC or GRPC_NETTY.
    #[arg(long, default_value = "GRPC_NETTY")]
    pub transport: String,
    /// Rounds of the victims, alone and beside the aggressor.
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
    /// Seconds the aggressor runs before its throughput is measured (the
    /// budget filling up).
    #[arg(long, default_value_t = 10)]
    pub warmup_secs: u64,
    /// Seconds the aggressor's throughput alone is measured.
    #[arg(long, default_value_t = 30)]
    pub solo_secs: u64,
    /// The script that runs one round of victims.
    #[arg(long, default_value = "integration/soak-jobs.sh")]
    pub jobs: PathBuf,
    /// Records of each Spark victim (200,000: about 22 MB shuffled).
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// Lines of the Flink victim's word count.
    #[arg(long, default_value_t = 100_000)]
    pub flink_lines: u64,
    /// The node's directory (kept); a temporary one when absent.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the figures as Markdown to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Fail when a victim's median beside the aggressor is more than this
    /// many times its median alone.
    #[arg(long)]
    pub max_slowdown: Option<f64>,
    /// Fail when the aggressor keeps less than this share of its throughput
    /// alone while the victims run.
    #[arg(long)]
    pub min_aggressor_ratio: Option<f64>,
}

pub async fn run(args: NeighboursArgs) -> anyhow::Result<()> {
    ensure!(args.rounds >= 1, "--rounds: at least 1");
    ensure!(
        args.apps >= 1 && args.mappers >= 1 && args.partitions >= 2,
        "--apps and --mappers at least 1, --partitions at least 2"
    );
    let transport = match args.transport.to_ascii_uppercase().as_str() {
        "GRPC" => Transport::Grpc,
        "GRPC_NETTY" | "NETTY" => Transport::GrpcNetty,
        other => bail!("unknown transport {other}: GRPC or GRPC_NETTY"),
    };
    println!(
        "neighbours: one node on {} with a {} budget and a disk throttled to {}/s; aggressor: {} {:?} applications of {} ({} writers, {} partitions, one 20x the others); victims: {} round(s) of {}",
        args.ip,
        args.memory,
        args.write_rate,
        args.apps,
        args.aggressor,
        args.app_size,
        args.mappers,
        args.partitions,
        args.rounds,
        args.jobs.display()
    );
    jvm_note();
    println!(
        "neighbours: building the victims ({} --build)",
        args.jobs.display()
    );
    build_script(&args.jobs).await?;
    let mut node = Node::start(&NodeOptions {
        bin: args.bin.clone(),
        ip: args.ip,
        memory: args.memory.as_u64(),
        write_rate: args.write_rate.as_u64(),
        read_rate: args.read_rate.as_u64(),
        min_free: args.min_free.as_u64(),
        // Every aggressor application at its full size at once, plus a
        // margin for the victims' few tens of MB.
        disk_need: args.apps as u64 * args.app_size.as_u64() + (256 << 20),
        root: args.dir.clone(),
    })
    .await?;
    println!(
        "neighbours: node ready (pid {}, dir {})",
        node.pid().unwrap_or(0),
        node.dir.display()
    );
    let measured = phases(&args, &node, transport).await;
    let peak_rss = node.pid().and_then(peak_rss_of);
    let log = node.log_tail(20);
    let stopped = node.stop().await;
    let mut figures = match measured {
        Ok(f) => f,
        Err(e) => bail!("{e:#}\nthe node's log ends:\n{log}"),
    };
    stopped?;
    figures.peak_rss = peak_rss;
    judge(&args, &figures)
}

/// (a), (b), (c) on the running node.
async fn phases(
    args: &NeighboursArgs,
    node: &Node,
    transport: Transport,
) -> anyhow::Result<Figures> {
    let mut f = Figures {
        write_rate: args.write_rate.as_u64(),
        ..Default::default()
    };
    let round = Round {
        script: args.jobs.clone(),
        uniffle: node.uniffle_coordinator(),
        celeborn: node.celeborn_master(),
        env: vec![
            ("SOAK_JOBS_RECORDS".into(), args.records.to_string()),
            ("SOAK_JOBS_FLINK_LINES".into(), args.flink_lines.to_string()),
            // One node: nowhere for a second copy.
            ("SOAK_JOBS_REPLICAS".into(), "1".into()),
        ],
    };
    let watch = Watch::start(node.admin());
    for r in 1..=args.rounds {
        f.add(victims(&round, r, "alone").await, false);
    }
    let clients = ClientRuntime::new(args.aggressor_nice)?;
    let options = AggressorOptions {
        protocol: args.aggressor,
        apps: args.apps,
        mappers: args.mappers,
        partitions: args.partitions,
        app_size: args.app_size.as_u64(),
        celeborn_master: node.celeborn_master(),
        uniffle_coordinator: node.uniffle_coordinator(),
        transport,
    };
    let aggressor = Aggressor::start(options, clients.handle());
    let running = Running {
        aggressor: &aggressor,
        clients: &clients,
        node: node.pid(),
    };
    let measured = beside(args, &round, &watch, &running, &mut f).await;
    f.aggressor_apps = aggressor.completed();
    // Stopped on every path; its error comes first (it explains a victim's).
    aggressor.stop().await?;
    measured?;
    if watch.misses() > 0 {
        println!(
            "neighbours: {} status readings went unanswered",
            watch.misses()
        );
    }
    Ok(f)
}

/// The aggressor while it runs, and what its CPU is read from.
struct Running<'a> {
    aggressor: &'a Aggressor,
    clients: &'a ClientRuntime,
    node: Option<u32>,
}

impl Running<'_> {
    /// CPU time used so far by the node and by the aggressor's clients.
    fn cpu(&self) -> (Duration, Duration) {
        let node = self
            .node
            .and_then(|pid| crate::report::cpu_time_of(pid).ok());
        (node.unwrap_or_default(), self.clients.cpu_time())
    }

    /// Cores used since `since` (a reading of [`Running::cpu`]).
    fn cores_since(&self, since: (Duration, Duration), started: Instant) -> Cpu {
        let now = self.cpu();
        let wall = started.elapsed().as_secs_f64().max(1e-9);
        // Saturating: a node that died, or a client thread that ended, reads
        // as less than before.
        Cpu {
            node: now.0.saturating_sub(since.0).as_secs_f64() / wall,
            clients: now.1.saturating_sub(since.1).as_secs_f64() / wall,
        }
    }
}

/// (b) the aggressor alone, then (c) the victims beside it.
async fn beside(
    args: &NeighboursArgs,
    round: &Round,
    watch: &Watch,
    running: &Running<'_>,
    f: &mut Figures,
) -> anyhow::Result<()> {
    let aggressor = running.aggressor;
    let nice = running.clients.nice_of_a_thread();
    println!(
        "neighbours: the aggressor's client threads run at nice {}, the node at its own priority",
        nice.map_or("?".into(), |n| n.to_string()),
    );
    println!(
        "neighbours: aggressor alone ({} s warm-up, {} s measured)",
        args.warmup_secs, args.solo_secs
    );
    hold(aggressor, Duration::from_secs(args.warmup_secs)).await?;
    watch.take();
    let (bytes, started, cpu) = (aggressor.acked(), Instant::now(), running.cpu());
    hold(aggressor, Duration::from_secs(args.solo_secs)).await?;
    f.aggressor_alone = Rate {
        bytes: aggressor.acked() - bytes,
        time: started.elapsed(),
    };
    f.cpu_alone = running.cores_since(cpu, started);
    f.fill_alone = watch.take();
    println!(
        "neighbours: aggressor alone {:.1} MiB/s, node memory at most {:.2} of its budget",
        f.aggressor_alone.mib_s(),
        f.fill_alone.store
    );
    let (bytes, started, cpu) = (aggressor.acked(), Instant::now(), running.cpu());
    for r in 1..=args.rounds {
        let results = victims(round, 100 + r, "beside the aggressor").await;
        f.add(results, true);
        ensure!(
            !aggressor.failed(),
            "the aggressor stopped while the victims ran"
        );
    }
    f.aggressor_beside = Rate {
        bytes: aggressor.acked() - bytes,
        time: started.elapsed(),
    };
    f.cpu_beside = running.cores_since(cpu, started);
    f.fill_beside = watch.take();
    Ok(())
}

/// Lets the aggressor run for `time`; an error as soon as it stopped.
async fn hold(aggressor: &Aggressor, time: Duration) -> anyhow::Result<()> {
    let until = Instant::now() + time;
    while Instant::now() < until {
        ensure!(!aggressor.failed(), "the aggressor stopped");
        tokio::time::sleep(Duration::from_millis(250).min(until - Instant::now())).await;
    }
    Ok(())
}

/// One round of the victims, printed as they report.
async fn victims(round: &Round, n: u32, when: &str) -> Vec<crate::soak::jobs::JobResult> {
    let results = round.run(n).await;
    for r in &results {
        println!(
            "neighbours: {when}: {} {} in {} ms: {}",
            r.client,
            r.status.name(),
            r.wall_ms,
            r.detail
        );
    }
    results
}

/// The JVM servers' same-run comparison is not built (see docs/benchmarks.md).
fn jvm_note() {
    let given: Vec<&str> = ["JVM_UNIFFLE_CLASSPATH", "JVM_CELEBORN_CLASSPATH"]
        .into_iter()
        .filter(|v| std::env::var_os(v).is_some())
        .collect();
    if given.is_empty() {
        println!("neighbours: JVM servers not given (JVM_UNIFFLE_CLASSPATH, JVM_CELEBORN_CLASSPATH): Switchyard only");
    } else {
        println!(
            "neighbours: {} given, but the same run against the JVM servers is not implemented (they have no disk throttle of their own): Switchyard only",
            given.join(", ")
        );
    }
}

/// Prints the table, writes the report, and fails on any problem.
fn judge(args: &NeighboursArgs, f: &Figures) -> anyhow::Result<()> {
    let table = f.table();
    println!("\n{table}");
    if let Some(path) = &args.report {
        let head = format!(
            "# Noisy neighbours\n\nOne node, {} budget, disk writes throttled to {}/s ({:.0} MiB/s); aggressor: {} {:?} applications, skewed; victims: {} round(s) of {} records (Spark) and {} lines (Flink).\n\n",
            args.memory,
            args.write_rate,
            mib(args.write_rate.as_u64()),
            args.apps,
            args.aggressor,
            args.rounds,
            args.records,
            args.flink_lines
        );
        std::fs::write(path, head + &table)?;
    }
    let problems = f.problems(args.max_slowdown, args.min_aggressor_ratio);
    if problems.is_empty() {
        println!("neighbours: PASS");
        return Ok(());
    }
    bail!("neighbours: FAIL:\n- {}", problems.join("\n- "))
}
