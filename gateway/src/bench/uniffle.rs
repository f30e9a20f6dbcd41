//! `switchyard bench uniffle --coordinator HOST:PORT`: M mappers push N bytes
//! over P partitions through the Uniffle protocol to any Uniffle deployment,
//! then reducers read everything back and check every block's CRC. The
//! baseline is raw loopback TCP throughput measured in the same run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use switchyard_clients::uniffle::{
    ClientBlock, Coordinator, ReadOptions, ShuffleServer, Transport,
};
use switchyard_uniffle::proto::{PartitionRangeAssignment, ShuffleServerId};

use super::report::{self, gbps};

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

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
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
    let app = match &args.app {
        Some(app) => app.clone(),
        None => super::app_id("bench"),
    };
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

    let baseline = loopback_tcp_gbps(total.min(4 << 30)).await?;
    println!("baseline: raw loopback TCP {baseline:.3} GB/s (one stream)");

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
    let assignments = match &args.coordinator {
        Some(address) => {
            let mut coordinator = Coordinator::connect(address).await?;
            coordinator
                .assignments_replicated(&app, 0, args.partitions, transport, args.replicas)
                .await
                .context("getShuffleAssignments")?
        }
        None => direct_assignments(&args.server, args.partitions, args.replicas)?,
    };
    // Per partition, its servers: the first is the one written first.
    let mut owners: HashMap<i32, Vec<_>> = HashMap::new();
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
        client.register_shuffle(&app, 0, &ranges).await?;
    }
    let owners = Arc::new(owners);

    // Writers.
    let pattern = Bytes::from(
        (0..(4usize << 20))
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    );
    let send_latency = Arc::new(Mutex::new(histogram()));
    // reportShuffleResult: where Switchyard makes the blocks durable (a
    // restart keeps them), so its share of the write time is shown apart.
    let report_latency = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in 0..args.mappers {
        let owners = owners.clone();
        let app = app.clone();
        let pattern = pattern.clone();
        let latency = send_latency.clone();
        let report_latency = report_latency.clone();
        let args = args.clone();
        tasks.push(tokio::spawn(async move {
            let mut clients: HashMap<String, ShuffleServer> = HashMap::new();
            let mut reported: HashMap<String, HashMap<i32, Vec<i64>>> = HashMap::new();
            let mut pending: HashMap<String, Vec<(i32, Vec<ClientBlock>)>> = HashMap::new();
            let mut seq = 0i64;
            let mut i = m;
            let flush = |server: String,
                         batch: Vec<(i32, Vec<ClientBlock>)>,
                         clients: &mut HashMap<String, ShuffleServer>| {
                let client = clients.remove(&server);
                let owners = owners.clone();
                let app = app.clone();
                let latency = latency.clone();
                async move {
                    let mut client = match client {
                        Some(c) => c,
                        None => {
                            let id = owners
                                .values()
                                .flatten()
                                .find(|s| s.id == server)
                                .unwrap()
                                .clone();
                            ShuffleServer::connect(&id, transport).await?
                        }
                    };
                    let t = Instant::now();
                    client.send(&app, 0, batch).await?;
                    latency.lock().record(t.elapsed().as_micros() as u64).ok();
                    Ok::<_, anyhow::Error>((server, client))
                }
            };
            while i < total_blocks {
                let partition = (i % args.partitions as usize) as i32;
                let id = (seq << 42) | ((partition as i64) << 22) | m as i64;
                seq += 1;
                let start = (i * 7919) % (pattern.len() - block_size);
                // A fresh copy per block, as a client serializes it.
                let data = Bytes::copy_from_slice(&pattern[start..start + block_size]);
                for owner in &owners[&partition] {
                    let server = owner.id.clone();
                    reported
                        .entry(server.clone())
                        .or_default()
                        .entry(partition)
                        .or_default()
                        .push(id);
                    let block = ClientBlock::new(id, m as i64, data.clone());
                    let batch = pending.entry(server.clone()).or_default();
                    match batch.iter_mut().find(|(p, _)| *p == partition) {
                        Some((_, blocks)) => blocks.push(block),
                        None => batch.push((partition, vec![block])),
                    }
                    if batch.iter().map(|(_, b)| b.len()).sum::<usize>() >= args.blocks_per_request
                    {
                        let batch = pending.remove(&server).unwrap();
                        let (server, client) = flush(server, batch, &mut clients).await?;
                        clients.insert(server, client);
                    }
                }
                i += args.mappers;
            }
            for (server, batch) in pending.drain().collect::<Vec<_>>() {
                let (server, client) = flush(server, batch, &mut clients).await?;
                clients.insert(server, client);
            }
            let sent = Instant::now();
            for (server, ids) in reported {
                let client = clients.get_mut(&server).expect("sent to it");
                let t = Instant::now();
                client.report(&app, 0, m as i64, ids).await?;
                report_latency
                    .lock()
                    .record(t.elapsed().as_micros() as u64)
                    .ok();
            }
            Ok::<_, anyhow::Error>(sent)
        }));
    }
    let mut last_sent = started;
    for t in tasks {
        last_sent = last_sent.max(t.await??);
    }
    let write_time = started.elapsed();
    let report_phase = write_time - (last_sent - started);

    // Readers: partitions handed out one at a time.
    let read_latency = Arc::new(Mutex::new(histogram()));
    let next = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.mappers {
        let owners = owners.clone();
        let read_replica = args.read_replica;
        let app = app.clone();
        let next = next.clone();
        let latency = read_latency.clone();
        let partitions = args.partitions;
        tasks.push(tokio::spawn(async move {
            let mut bytes = 0u64;
            let mut blocks = 0u64;
            loop {
                let p = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if p >= partitions {
                    return Ok::<_, anyhow::Error>((blocks, bytes));
                }
                let mut client =
                    ShuffleServer::connect(&owners[&p][read_replica], transport).await?;
                let t = Instant::now();
                let expected = client.shuffle_result(&app, 0, vec![p]).await?;
                let got = client
                    .read_partition(&app, 0, p, &expected, ReadOptions::default())
                    .await?;
                latency.lock().record(t.elapsed().as_micros() as u64).ok();
                blocks += got.len() as u64;
                bytes += got.iter().map(|b| b.data.len() as u64).sum::<u64>();
            }
        }));
    }
    let (mut blocks, mut bytes) = (0, 0);
    for t in tasks {
        let (b, n) = t.await??;
        blocks += b;
        bytes += n;
    }
    let read_time = started.elapsed();
    ensure!(
        blocks == total_blocks as u64 && bytes == total,
        "read back {blocks} blocks / {bytes} bytes of {total_blocks} / {total}"
    );
    for s in &servers {
        let mut client = ShuffleServer::connect(s, transport).await?;
        client.unregister_app(&app).await?;
    }

    let sl = send_latency.lock();
    let rl = read_latency.lock();
    let write = gbps(total, write_time);
    let read = gbps(total, read_time);
    println!(
        "write {write:.3} GB/s ({:.2} s) = {:.0}% of loopback TCP; sendShuffleData p50 {:.1} ms, p99 {:.1} ms ({} requests)",
        write_time.as_secs_f64(),
        write / baseline * 100.0,
        sl.value_at_quantile(0.5) as f64 / 1000.0,
        sl.value_at_quantile(0.99) as f64 / 1000.0,
        sl.len()
    );
    let rep = report_latency.lock();
    println!(
        "      of which {:.2} s after the last send, in reportShuffleResult (p50 {:.1} ms, p99 {:.1} ms, {} requests)",
        report_phase.as_secs_f64(),
        rep.value_at_quantile(0.5) as f64 / 1000.0,
        rep.value_at_quantile(0.99) as f64 / 1000.0,
        rep.len()
    );
    println!(
        "read  {read:.3} GB/s ({:.2} s, {blocks} blocks crc-checked) = {:.0}% of loopback TCP; partition read p50 {:.1} ms, p99 {:.1} ms",
        read_time.as_secs_f64(),
        read / baseline * 100.0,
        rl.value_at_quantile(0.5) as f64 / 1000.0,
        rl.value_at_quantile(0.99) as f64 / 1000.0,
    );
    report::print_server_rss(args.server_pid);
    Ok(())
}

/// One TCP stream over loopback: what the wire can carry on this machine.
pub(crate) async fn loopback_tcp_gbps(bytes: u64) -> anyhow::Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sink = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            let r = s.read(&mut buf).await?;
            if r == 0 {
                return Ok::<_, std::io::Error>(n);
            }
            n += r as u64;
        }
    });
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let chunk = vec![7u8; 1 << 20];
    let started = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        s.write_all(&chunk).await?;
        sent += chunk.len() as u64;
    }
    s.shutdown().await?;
    drop(s);
    let received = tokio::time::timeout(Duration::from_secs(120), sink).await???;
    ensure!(received == sent, "loopback sink got {received} of {sent}");
    Ok(gbps(sent, started.elapsed()))
}
