//! `switchyard-bench uniffle --coordinator HOST:PORT`: M mappers push N bytes
//! over P partitions through the Uniffle protocol to any Uniffle deployment,
//! then reducers read everything back and check every block's CRC. The
//! baseline is raw loopback TCP throughput measured in the same run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_clients::uniffle::{
    ClientBlock, Coordinator, ReadOptions, ShuffleServer, Transport,
};
use switchyard_uniffle::proto::{PartitionRangeAssignment, ShuffleServerId};

use crate::harness::{self, Latency, Phase, Tally, WorkQueue};
use crate::report;

#[derive(Debug, Clone, clap::Args)]
pub struct UniffleBenchArgs {
    /// Coordinator address (ours, or any Uniffle coordinator).
    #[arg(long, required_unless_present = "server")]
    pub coordinator: Option<String>,
    /// Shuffle servers to use directly, without a coordinator:
    /// `host:grpcPort[:nettyPort]`, repeatable; partitions go to them
    /// round-robin (to measure a server that cannot register with the
    /// coordinator at hand, such as another vendor's).
    #[arg(long, conflicts_with = "coordinator")]
    pub server: Vec<String>,
    /// Bytes to push in total.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,
    /// Concurrent mappers (and reducers).
    #[arg(long, default_value_t = 8)]
    pub mappers: usize,
    /// Reduce partitions.
    #[arg(long, default_value_t = 64)]
    pub partitions: i32,
    /// Block size (the Spark client's default writer buffer is 3 MiB).
    #[arg(long, default_value = "1MiB")]
    pub block_size: ByteSize,
    /// Blocks per sendShuffleData request.
    #[arg(long, default_value_t = 8)]
    pub blocks_per_request: usize,
    /// GRPC or GRPC_NETTY.
    #[arg(long, default_value = "GRPC")]
    pub transport: String,
    /// Servers per partition (the client's `rss.data.replica`): every block
    /// is sent to each of them, as the client writes its replicas itself.
    #[arg(long, default_value_t = 1)]
    pub replicas: i32,
    /// Which replica (0-based) the readers read, e.g. 1 to read the copies
    /// a reader falls back to when the first server is gone.
    #[arg(long, default_value_t = 0)]
    pub read_replica: usize,
    /// PID of the server, to report its peak RSS (when it runs on this machine).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Application id (default: `bench-<unix millis>`).
    #[arg(long)]
    pub app: Option<String>,
}

/// Partitions over `servers` (`host:grpc[:netty]`) round-robin, each with
/// `replicas` consecutive servers, as a coordinator would assign them.
fn direct_assignments(
    servers: &[String],
    partitions: i32,
    replicas: i32,
) -> anyhow::Result<Vec<PartitionRangeAssignment>> {
    let ids = servers
        .iter()
        .map(|s| {
            let parts: Vec<&str> = s.split(':').collect();
            ensure!(
                parts.len() == 2 || parts.len() == 3,
                "--server {s}: expected host:grpcPort[:nettyPort]"
            );
            let port: i32 = parts[1].parse().context("--server grpc port")?;
            let netty_port: i32 = match parts.get(2) {
                Some(p) => p.parse().context("--server netty port")?,
                None => -1,
            };
            Ok(ShuffleServerId {
                id: format!("{}-{port}-{netty_port}", parts[0]),
                ip: parts[0].to_string(),
                port,
                netty_port,
                jetty_port: 0,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    ensure!(
        !ids.is_empty() && replicas as usize <= ids.len(),
        "--server: at least --replicas servers"
    );
    Ok((0..partitions)
        .map(|p| PartitionRangeAssignment {
            start_partition: p,
            end_partition: p,
            server: (0..replicas as usize)
                .map(|r| ids[(p as usize + r) % ids.len()].clone())
                .collect(),
        })
        .collect())
}

/// What every mapper and reader of one run shares.
struct Job {
    app: String,
    transport: Transport,
    block_size: usize,
    total_blocks: usize,
    /// Per partition, its servers: the first is the one written first.
    owners: HashMap<i32, Vec<ShuffleServerId>>,
    pattern: Bytes,
    args: UniffleBenchArgs,
    /// sendShuffleData.
    send_latency: Latency,
    /// reportShuffleResult: where Switchyard makes the blocks durable (a
    /// restart keeps them), so its share of the write time is shown apart.
    report_latency: Latency,
}

impl Job {
    /// The server `id` names, among the partitions' owners.
    fn server(&self, id: &str) -> &ShuffleServerId {
        self.owners
            .values()
            .flatten()
            .find(|s| s.id == id)
            .expect("an owner")
    }
}

pub async fn run(args: UniffleBenchArgs) -> anyhow::Result<()> {
    let transport = match args.transport.to_ascii_uppercase().as_str() {
        "GRPC" => Transport::Grpc,
        "GRPC_NETTY" | "NETTY" => Transport::GrpcNetty,
        other => anyhow::bail!("unknown transport {other}: GRPC or GRPC_NETTY"),
    };
    let block_size = args.block_size.as_u64() as usize;
    let total_blocks = (args.size.as_u64() as usize).div_ceil(block_size);
    let total = (total_blocks * block_size) as u64;
    let app = args.app.clone().unwrap_or_else(|| harness::app_id("bench"));
    println!(
        "uniffle bench: {} in {} blocks of {} over {} partitions, {} mappers, {:?}, {}",
        ByteSize::b(total),
        total_blocks,
        args.block_size,
        args.partitions,
        args.mappers,
        transport,
        match &args.coordinator {
            Some(c) => format!("coordinator {c}"),
            None => format!("servers {}", args.server.join(", ")),
        }
    );
    let baseline = harness::loopback_baseline(total).await?;
    ensure!(
        args.replicas >= 1 && args.read_replica < args.replicas as usize,
        "--replicas must be at least 1 and --read-replica below it"
    );
    if args.replicas > 1 {
        println!(
            "replicas: {} per partition, each block sent to every one; reads from replica {}",
            args.replicas, args.read_replica
        );
    }
    let (owners, servers) = register(&args, &app, transport).await?;
    let job = Arc::new(Job {
        app,
        transport,
        block_size,
        total_blocks,
        owners,
        pattern: harness::pattern(),
        args,
        send_latency: Latency::default(),
        report_latency: Latency::default(),
    });

    let started = Instant::now();
    let last_sent = harness::run_tasks(job.args.mappers, |m| write(job.clone(), m))
        .await?
        .into_iter()
        .fold(started, Instant::max);
    let write_time = started.elapsed();
    let report_phase = write_time - (last_sent - started);

    let read_latency = Latency::default();
    let (read_time, read) = harness::read_phase(job.args.mappers, job.args.partitions, |queue| {
        read(job.clone(), queue, read_latency.clone())
    })
    .await?;
    ensure!(
        read.items == total_blocks as u64 && read.bytes == total,
        "read back {} blocks / {} bytes of {total_blocks} / {total}",
        read.items,
        read.bytes
    );
    for s in &servers {
        let mut client = ShuffleServer::connect(s, transport).await?;
        client.unregister_app(&job.app).await?;
    }

    let write = Phase::new(total, write_time, baseline);
    let (sl, rl) = (&job.send_latency, &job.report_latency);
    println!(
        "write {:.3} GB/s ({:.2} s) = {:.0}% of loopback TCP; sendShuffleData p50 {:.1} ms, p99 {:.1} ms ({} requests)",
        write.gbps,
        write.secs(),
        write.percent_of_baseline,
        sl.ms(0.5),
        sl.ms(0.99),
        sl.count()
    );
    println!(
        "      of which {:.2} s after the last send, in reportShuffleResult (p50 {:.1} ms, p99 {:.1} ms, {} requests)",
        report_phase.as_secs_f64(),
        rl.ms(0.5),
        rl.ms(0.99),
        rl.count()
    );
    let read_phase = Phase::new(total, read_time, baseline);
    println!(
        "read  {:.3} GB/s ({:.2} s, {} blocks crc-checked) = {:.0}% of loopback TCP; partition read p50 {:.1} ms, p99 {:.1} ms",
        read_phase.gbps,
        read_phase.secs(),
        read.items,
        read_phase.percent_of_baseline,
        read_latency.ms(0.5),
        read_latency.ms(0.99),
    );
    report::print_server_rss(job.args.server_pid);
    Ok(())
}

/// Gets the partitions' servers (from the coordinator, or `--server`) and
/// registers the shuffle on each: per partition its servers, and every
/// server once.
async fn register(
    args: &UniffleBenchArgs,
    app: &str,
    transport: Transport,
) -> anyhow::Result<(HashMap<i32, Vec<ShuffleServerId>>, Vec<ShuffleServerId>)> {
    let assignments = match &args.coordinator {
        Some(address) => {
            let mut coordinator = Coordinator::connect(address).await?;
            coordinator
                .assignments_replicated(app, 0, args.partitions, transport, args.replicas)
                .await
                .context("getShuffleAssignments")?
        }
        None => direct_assignments(&args.server, args.partitions, args.replicas)?,
    };
    let mut owners = HashMap::new();
    let mut servers = Vec::new();
    for a in &assignments {
        ensure!(
            a.server.len() == args.replicas as usize,
            "asked for {} servers per partition, the coordinator gave {}",
            args.replicas,
            a.server.len()
        );
        for server in &a.server {
            if !servers.contains(server) {
                servers.push(server.clone());
            }
        }
        for p in a.start_partition..=a.end_partition {
            owners.insert(p, a.server.clone());
        }
    }
    for s in &servers {
        let mut client = ShuffleServer::connect(s, transport).await?;
        let ranges: Vec<(i32, i32)> = assignments
            .iter()
            .filter(|a| a.server.contains(s))
            .map(|a| (a.start_partition, a.end_partition))
            .collect();
        client.register_shuffle(app, 0, &ranges).await?;
    }
    Ok((owners, servers))
}

/// One mapper: its connections, the blocks it has sent per server and
/// partition (to report), and those it still holds per server.
struct Mapper {
    job: Arc<Job>,
    m: usize,
    clients: HashMap<String, ShuffleServer>,
    reported: HashMap<String, HashMap<i32, Vec<i64>>>,
    pending: HashMap<String, Vec<(i32, Vec<ClientBlock>)>>,
}

/// Mapper `m` sends every `mappers`-th block to each of its partition's
/// servers, `blocks_per_request` per sendShuffleData, then reports them.
/// Returns when its last send ended.
async fn write(job: Arc<Job>, m: usize) -> anyhow::Result<Instant> {
    let mut mapper = Mapper {
        job: job.clone(),
        m,
        clients: HashMap::new(),
        reported: HashMap::new(),
        pending: HashMap::new(),
    };
    let block_size = job.block_size;
    let blocks = (m..job.total_blocks).step_by(job.args.mappers);
    for (seq, i) in blocks.enumerate() {
        let partition = (i % job.args.partitions as usize) as i32;
        let id = ((seq as i64) << 42) | ((partition as i64) << 22) | m as i64;
        let start = (i * 7919) % (job.pattern.len() - block_size);
        // A fresh copy per block, as a client serializes it.
        let data = Bytes::copy_from_slice(&job.pattern[start..start + block_size]);
        mapper.add(partition, id, data).await?;
    }
    for (server, batch) in mapper.pending.drain().collect::<Vec<_>>() {
        mapper.flush(server, batch).await?;
    }
    let sent = Instant::now();
    mapper.report().await?;
    Ok(sent)
}

impl Mapper {
    /// Adds a block for each of the partition's servers; a server's batch
    /// goes out once it holds `blocks_per_request` blocks.
    async fn add(&mut self, partition: i32, id: i64, data: Bytes) -> anyhow::Result<()> {
        let job = self.job.clone();
        for owner in &job.owners[&partition] {
            let server = owner.id.clone();
            self.reported
                .entry(server.clone())
                .or_default()
                .entry(partition)
                .or_default()
                .push(id);
            let block = ClientBlock::new(id, self.m as i64, data.clone());
            let batch = self.pending.entry(server.clone()).or_default();
            match batch.iter_mut().find(|(p, _)| *p == partition) {
                Some((_, blocks)) => blocks.push(block),
                None => batch.push((partition, vec![block])),
            }
            if batch.iter().map(|(_, b)| b.len()).sum::<usize>() >= job.args.blocks_per_request {
                let batch = self.pending.remove(&server).expect("just added");
                self.flush(server, batch).await?;
            }
        }
        Ok(())
    }

    /// One sendShuffleData to `server`, connecting on first use.
    async fn flush(
        &mut self,
        server: String,
        batch: Vec<(i32, Vec<ClientBlock>)>,
    ) -> anyhow::Result<()> {
        let mut client = match self.clients.remove(&server) {
            Some(c) => c,
            None => ShuffleServer::connect(self.job.server(&server), self.job.transport).await?,
        };
        let t = Instant::now();
        client.send(&self.job.app, 0, batch).await?;
        self.job.send_latency.record(t.elapsed());
        self.clients.insert(server, client);
        Ok(())
    }

    /// reportShuffleResult to every server written to.
    async fn report(&mut self) -> anyhow::Result<()> {
        for (server, ids) in std::mem::take(&mut self.reported) {
            let client = self.clients.get_mut(&server).expect("sent to it");
            let t = Instant::now();
            client.report(&self.job.app, 0, self.m as i64, ids).await?;
            self.job.report_latency.record(t.elapsed());
        }
        Ok(())
    }
}

/// A reader: partitions from `queue`, each read whole from its
/// `--read-replica` server (the client checks every block's CRC).
async fn read(job: Arc<Job>, queue: WorkQueue, latency: Latency) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    while let Some(p) = queue.take() {
        let server = &job.owners[&p][job.args.read_replica];
        let mut client = ShuffleServer::connect(server, job.transport).await?;
        let t = Instant::now();
        let expected = client.shuffle_result(&job.app, 0, vec![p]).await?;
        let got = client
            .read_partition(&job.app, 0, p, &expected, ReadOptions::default())
            .await?;
        latency.record(t.elapsed());
        tally.items += got.len() as u64;
        tally.bytes += got.iter().map(|b| b.data.len() as u64).sum::<u64>();
    }
    Ok(tally)
}
