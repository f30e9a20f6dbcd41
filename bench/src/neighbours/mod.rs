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
//! the aggressor really held the node at its budget during (c). With the
//! JVM servers' classpaths and `--jvm-dir`, the same phases then run
//! against the upstream Celeborn and Uniffle servers ([`jvm`]).

pub mod aggressor;
pub mod clients;
pub mod figures;
pub mod jvm;
pub mod node;
pub mod watch;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use bytesize::ByteSize;
use switchyard_clients::uniffle::Transport;

use self::aggressor::{Aggressor, AggressorOptions, Protocol};
use self::clients::ClientRuntime;
use self::figures::{Cpu, Figures, Rate};
use self::jvm::{JvmOptions, JvmServers};
use self::node::{ensure_space, Node, NodeOptions};
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
    /// Where the JVM servers keep their data and logs: on a device
    /// throttled to --write-rate (bench/throttled-disk.sh), as --dir should
    /// then be too. Needs JVM_CELEBORN_CLASSPATH and JVM_UNIFFLE_CLASSPATH.
    #[arg(long)]
    pub jvm_dir: Option<PathBuf>,
    /// The write rate of the device --dir and --jvm-dir are on, when it is
    /// itself throttled: the "of the disk" figures are shares of it. Give
    /// the node a --write-rate a little below it, as an operator would, so
    /// that the node's own queue and not the device's orders the writes.
    #[arg(long)]
    pub device_rate: Option<ByteSize>,
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
    let jvm = jvm_options(&args)?;
    println!(
        "neighbours: building the victims ({} --build)",
        args.jobs.display()
    );
    build_script(&args.jobs).await?;
    let switchyard = on_switchyard(&args, transport).await?;
    if jvm.is_some() {
        // Printed now: the JVM servers' run may fail without taking it along.
        println!("\n## Switchyard\n\n{}", switchyard.table());
    }
    let jvm = match jvm {
        Some(o) => Some(on_jvm(&args, &o, transport).await?),
        None => None,
    };
    judge(&args, &switchyard, jvm.as_ref())
}

/// The JVM servers' options when both classpaths and `--jvm-dir` are given.
fn jvm_options(args: &NeighboursArgs) -> anyhow::Result<Option<JvmOptions>> {
    let classpaths = JvmOptions::classpaths()?;
    let (celeborn_classpath, uniffle_classpath, dir) = match (classpaths, &args.jvm_dir) {
        (None, None) => {
            println!("neighbours: JVM servers not given (JVM_CELEBORN_CLASSPATH, JVM_UNIFFLE_CLASSPATH, --jvm-dir): Switchyard only");
            return Ok(None);
        }
        (Some((c, u)), Some(dir)) => (c, u, dir.clone()),
        (Some(_), None) => bail!(
            "the JVM servers need --jvm-dir on a device throttled to --write-rate \
             (bench/throttled-disk.sh): they have no disk throttle of their own"
        ),
        (None, Some(_)) => {
            bail!("--jvm-dir needs JVM_CELEBORN_CLASSPATH and JVM_UNIFFLE_CLASSPATH")
        }
    };
    std::fs::create_dir_all(&dir)?;
    ensure_space(&dir, args.min_free.as_u64() + disk_need(args))?;
    println!(
        "neighbours: then the JVM servers (Celeborn master and worker, Uniffle coordinator and server) in {}",
        dir.display()
    );
    Ok(Some(JvmOptions {
        celeborn_classpath,
        uniffle_classpath,
        memory: args.memory.as_u64(),
        dir,
        min_free: args.min_free.as_u64(),
    }))
}

/// Every aggressor application at its full size at once, plus a margin
/// for the victims' few tens of MB.
fn disk_need(args: &NeighboursArgs) -> u64 {
    args.apps as u64 * args.app_size.as_u64() + (256 << 20)
}

/// The phases against the Switchyard node.
async fn on_switchyard(args: &NeighboursArgs, transport: Transport) -> anyhow::Result<Figures> {
    let mut node = Node::start(&NodeOptions {
        bin: args.bin.clone(),
        ip: args.ip,
        memory: args.memory.as_u64(),
        write_rate: args.write_rate.as_u64(),
        read_rate: args.read_rate.as_u64(),
        min_free: args.min_free.as_u64(),
        disk_need: disk_need(args),
        root: args.dir.clone(),
    })
    .await?;
    println!(
        "neighbours: node ready (pid {}, dir {})",
        node.pid().unwrap_or(0),
        node.dir.display()
    );
    let subject = Subject {
        uniffle: node.uniffle_coordinator(),
        celeborn: node.celeborn_master(),
        pids: node.pid().into_iter().collect(),
        admin: Some(node.admin()),
    };
    let measured = phases(args, &subject, transport).await;
    let peak_rss = subject.peak_rss();
    let log = node.log_tail(20);
    let stopped = node.stop().await;
    let mut figures = match measured {
        Ok(f) => f,
        Err(e) => bail!("{e:#}\nthe node's log ends:\n{log}"),
    };
    stopped?;
    figures.peak_rss = peak_rss;
    Ok(figures)
}

/// The same phases against the JVM servers.
async fn on_jvm(
    args: &NeighboursArgs,
    o: &JvmOptions,
    transport: Transport,
) -> anyhow::Result<Figures> {
    let mut servers = JvmServers::start(o).await?;
    println!(
        "neighbours: JVM servers ready (pids {:?}, dir {})",
        servers.pids(),
        servers.dir.display()
    );
    let subject = Subject {
        uniffle: servers.uniffle_coordinator(),
        celeborn: servers.celeborn_master(),
        pids: servers.pids(),
        admin: None,
    };
    let measured = phases(args, &subject, transport).await;
    let peak_rss = subject.peak_rss();
    let log = servers.log_tail(20);
    servers.stop().await?;
    let mut figures = match measured {
        Ok(f) => f,
        Err(e) => bail!("{e:#}\nthe JVM servers' logs end:\n{log}"),
    };
    figures.peak_rss = peak_rss;
    Ok(figures)
}

/// What the phases run against: the Switchyard node or the JVM servers.
struct Subject {
    uniffle: String,
    celeborn: String,
    /// The server processes, for CPU and peak RSS.
    pids: Vec<u32>,
    /// The status page its memory fill is read from (Switchyard's).
    admin: Option<SocketAddr>,
}

impl Subject {
    /// The sum over its processes; `None` when one is not readable.
    fn peak_rss(&self) -> Option<u64> {
        self.pids.iter().map(|&p| peak_rss_of(p)).sum()
    }
}

/// (a), (b), (c) on the running servers.
async fn phases(
    args: &NeighboursArgs,
    subject: &Subject,
    transport: Transport,
) -> anyhow::Result<Figures> {
    let mut f = Figures {
        write_rate: args.device_rate.unwrap_or(args.write_rate).as_u64(),
        ..Default::default()
    };
    let round = Round {
        script: args.jobs.clone(),
        uniffle: subject.uniffle.clone(),
        celeborn: subject.celeborn.clone(),
        env: vec![
            ("SOAK_JOBS_RECORDS".into(), args.records.to_string()),
            ("SOAK_JOBS_FLINK_LINES".into(), args.flink_lines.to_string()),
            // One node: nowhere for a second copy.
            ("SOAK_JOBS_REPLICAS".into(), "1".into()),
        ],
    };
    let watch = subject.admin.map(Watch::start);
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
        celeborn_master: subject.celeborn.clone(),
        uniffle_coordinator: subject.uniffle.clone(),
        transport,
    };
    let aggressor = Aggressor::start(options, clients.handle());
    let running = Running {
        aggressor: &aggressor,
        clients: &clients,
        servers: &subject.pids,
    };
    let measured = beside(args, &round, &watch, &running, &mut f).await;
    f.aggressor_apps = aggressor.completed();
    f.aggressor_slot_waits = aggressor.slot_waits();
    // Stopped on every path; its error comes first (it explains a victim's).
    aggressor.stop().await?;
    measured?;
    if let Some(w) = watch.as_ref().filter(|w| w.misses() > 0) {
        println!("neighbours: {} status readings went unanswered", w.misses());
    }
    Ok(f)
}

/// The aggressor while it runs, and what its CPU is read from.
struct Running<'a> {
    aggressor: &'a Aggressor,
    clients: &'a ClientRuntime,
    servers: &'a [u32],
}

impl Running<'_> {
    /// CPU time used so far by the servers and by the aggressor's clients.
    fn cpu(&self) -> (Duration, Duration) {
        let servers = self
            .servers
            .iter()
            .filter_map(|&pid| crate::report::cpu_time_of(pid).ok())
            .sum();
        (servers, self.clients.cpu_time())
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
    watch: &Option<Watch>,
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
    let fill = || watch.as_ref().map(Watch::take);
    fill();
    let (bytes, started, cpu) = (aggressor.acked(), Instant::now(), running.cpu());
    hold(aggressor, Duration::from_secs(args.solo_secs)).await?;
    f.aggressor_alone = Rate {
        bytes: aggressor.acked() - bytes,
        time: started.elapsed(),
    };
    f.cpu_alone = running.cores_since(cpu, started);
    f.fill_alone = fill();
    println!(
        "neighbours: aggressor alone {:.1} MiB/s, node memory at most {} of its budget",
        f.aggressor_alone.mib_s(),
        f.fill_alone
            .map_or("(not readable)".into(), |f| format!("{:.2}", f.store))
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
    f.fill_beside = fill();
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

/// Prints the tables, writes the report, and fails on any problem of
/// Switchyard's (the JVM servers' figures are there to compare with).
fn judge(args: &NeighboursArgs, f: &Figures, jvm: Option<&Figures>) -> anyhow::Result<()> {
    let mut text = f.table();
    if let Some(j) = jvm {
        text += &format!(
            "\n## The JVM servers, same run\n\n{}\n## Side by side\n\n{}",
            j.table(),
            f.compare(j)
        );
    }
    println!("\n{text}");
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
        std::fs::write(path, head + &text)?;
    }
    let problems = f.problems(args.max_slowdown, args.min_aggressor_ratio);
    if problems.is_empty() {
        println!("neighbours: PASS");
        return Ok(());
    }
    bail!("neighbours: FAIL:\n- {}", problems.join("\n- "))
}
