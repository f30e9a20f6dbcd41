//! `switchyard bench celeborn --master HOST:PORT`: M mappers push N bytes
//! over P partitions through the Celeborn protocol to any Celeborn
//! deployment (its master and workers), the files are committed, and readers
//! fetch every chunk back and check every batch. The baseline is raw loopback
//! TCP throughput measured in the same run.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};

use super::report::{self, gbps};

#[derive(Debug, Clone, clap::Args)]
pub struct CelebornBenchArgs {
    /// Master address (ours, or a Celeborn master).
    #[arg(long)]
    pub master: String,
    /// Bytes to push in total.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,
    /// Concurrent mappers (and readers).
    #[arg(long, default_value_t = 8)]
    pub mappers: usize,
    /// Reduce partitions.
    #[arg(long, default_value_t = 64)]
    pub partitions: i32,
    /// Batch size (the Spark client pushes 64 KiB buffers by default).
    #[arg(long, default_value = "64KiB")]
    pub batch_size: ByteSize,
    /// PID of the server, to report its peak RSS (when it runs on this machine).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Application id (default: `bench-<unix millis>`).
    #[arg(long)]
    pub app: Option<String>,
    /// Leave the application and its data on the workers at the end (no
    /// ApplicationLost): they go when the application's lease expires.
    #[arg(long)]
    pub keep_app: bool,
    /// Ask for replication (`push.replicate.enabled`): each partition gets a
    /// replica on another worker, which the primary forwards every push to.
    #[arg(long)]
    pub replicate: bool,
    /// With `--replicate`: read every partition from its replica copy, as a
    /// reader does once the primary's worker is gone.
    #[arg(long, requires = "replicate")]
    pub read_replicas: bool,
    /// With `--replicate`: ask for rack-aware replicas
    /// (`reserveSlots.rackaware.enabled`) and check that every replica is on
    /// another rack than its primary.
    #[arg(long, requires = "replicate")]
    pub rack_aware: bool,
}

/// Who the bench is, as a stock LifecycleManager names its user in RequestSlots
/// and ReserveSlots (a JVM master refuses a request without one).
pub(super) fn bench_user() -> Option<PbUserIdentifier> {
    Some(PbUserIdentifier {
        tenant_id: "default".into(),
        name: "switchyard-bench".into(),
    })
}

pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

pub(super) fn worker_addr(unique_id: &str, which: usize) -> anyhow::Result<SocketAddr> {
    // host:rpc:push:fetch:replicate; the host may itself contain ':'.
    let parts: Vec<&str> = unique_id.rsplitn(5, ':').collect();
    ensure!(parts.len() == 5, "bad worker id {unique_id}");
    let host = parts[4];
    let port = parts[3 - which];
    Ok(format!("{host}:{port}").parse()?)
}

/// Ends the benchmark's application on the master, which removes its data.
pub(super) async fn application_lost(master: &Connection, app: &str) -> anyhow::Result<()> {
    master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::ApplicationLost,
                &PbApplicationLost {
                    app_id: app.to_string(),
                    ..Default::default()
                },
            ),
        )
        .await?;
    Ok(())
}

pub async fn run(args: CelebornBenchArgs) -> anyhow::Result<()> {
    let batch_size = args.batch_size.as_u64() as usize;
    let total_batches = (args.size.as_u64() as usize).div_ceil(batch_size);
    let total = (total_batches * batch_size) as u64;
    let app = match &args.app {
        Some(app) => app.clone(),
        None => super::app_id("bench"),
    };
    let shuffle_key = format!("{app}-0");
    println!(
        "celeborn bench: {} in {} batches of {} over {} partitions, {} mappers, master {}",
        ByteSize::b(total),
        total_batches,
        args.batch_size,
        args.partitions,
        args.mappers,
        args.master
    );
    if args.replicate {
        println!(
            "replication: on (each partition on two workers), reads from the {} copies",
            if args.read_replicas {
                "replica"
            } else {
                "primary"
            }
        );
    }
    let baseline = super::uniffle::loopback_tcp_gbps(total.min(4 << 30)).await?;
    println!("baseline: raw loopback TCP {baseline:.3} GB/s (one stream)");

    // The LifecycleManager's part: slots from the master, reserve on workers.
    let master = Connection::connect(args.master.parse().context("master address")?).await?;
    ensure!(
        master.verify(endpoint::MASTER).await?,
        "no MasterEndpoint at {}",
        args.master
    );
    master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::HeartbeatFromApplication,
                &PbHeartbeatFromApplication {
                    app_id: app.clone(),
                    should_response: true,
                    ..Default::default()
                },
            ),
        )
        .await?;
    let r = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::RequestSlots,
                &PbRequestSlots {
                    application_id: app.clone(),
                    shuffle_id: 0,
                    partition_id_list: (0..args.partitions).collect(),
                    should_replicate: args.replicate,
                    should_rack_aware: args.rack_aware,
                    packed: false,
                    available_storage_types: 2,
                    max_workers: 10_000,
                    user_identifier: bench_user(),
                    hostname: "127.0.0.1".into(),
                    request_id: format!("{app}#1"),
                    ..Default::default()
                },
            ),
        )
        .await?;
    let slots: PbRequestSlotsResponse = decode(&r)?;
    ensure!(slots.status == 0, "RequestSlots status {}", slots.status);
    // partition → worker id, of the primary and of the replica
    let mut owner: HashMap<i32, String> = HashMap::new();
    let mut replica_owner: HashMap<i32, String> = HashMap::new();
    let rack_of: HashMap<&String, &str> = slots
        .worker_resource
        .iter()
        .map(|(w, res)| (w, res.network_location.as_str()))
        .collect();
    for (worker, res) in &slots.worker_resource {
        // Spares (no locations) are for revive; a driver reserves nothing there.
        if res.primary_partitions.is_empty() && res.replica_partitions.is_empty() {
            continue;
        }
        let rpc = Connection::connect(worker_addr(worker, 0)?).await?;
        ensure!(
            rpc.verify(endpoint::WORKER).await?,
            "no WorkerEndpoint at {worker}"
        );
        let r = rpc
            .ask(
                endpoint::WORKER,
                TransportMessage::new(
                    MessageType::ReserveSlots,
                    &PbReserveSlots {
                        application_id: app.clone(),
                        shuffle_id: 0,
                        primary_locations: res.primary_partitions.clone(),
                        replica_locations: res.replica_partitions.clone(),
                        split_threshold: 1 << 40,
                        partition_split_enabled: true,
                        available_storage_types: 2,
                        user_identifier: bench_user(),
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let reserved: PbReserveSlotsResponse = decode(&r)?;
        ensure!(
            reserved.status == 0,
            "ReserveSlots on {worker}: {} {}",
            reserved.status,
            reserved.reason
        );
        for l in &res.primary_partitions {
            owner.insert(l.id, worker.clone());
        }
        for l in &res.replica_partitions {
            replica_owner.insert(l.id, worker.clone());
        }
    }
    if args.replicate {
        ensure!(
            replica_owner.len() == args.partitions as usize
                && replica_owner.iter().all(|(p, w)| owner[p] != *w),
            "replication asked: {} of {} partitions got a replica on another worker",
            replica_owner
                .iter()
                .filter(|(p, w)| owner[*p] != **w)
                .count(),
            args.partitions
        );
    }
    if args.rack_aware {
        let same = replica_owner
            .iter()
            .filter(|(p, w)| rack_of[&owner[*p]] == rack_of[*w])
            .count();
        ensure!(
            same == 0,
            "rack-aware replicas asked: {same} of {} replicas share their primary's rack",
            args.partitions
        );
        println!("racks: every replica on another rack than its primary");
    }
    ensure!(
        owner.len() == args.partitions as usize,
        "slots cover {} of {} partitions",
        owner.len(),
        args.partitions
    );
    let owner = Arc::new(owner);

    // Mappers: every map pushes its batches with PushData.
    let pattern = Bytes::from(
        (0..(4usize << 20))
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    );
    let latency = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in 0..args.mappers {
        let owner = owner.clone();
        let key = shuffle_key.clone();
        let pattern = pattern.clone();
        let latency = latency.clone();
        let args = args.clone();
        tasks.push(tokio::spawn(async move {
            let mut conns: HashMap<String, Connection> = HashMap::new();
            let mut batch_id = 0;
            let mut i = m;
            while i < total_batches {
                let p = (i % args.partitions as usize) as i32;
                batch_id += 1;
                let start = (i * 7919) % (pattern.len() - batch_size);
                let b = batch(m as i32, 0, batch_id, &pattern[start..start + batch_size]);
                let worker = &owner[&p];
                if !conns.contains_key(worker) {
                    conns.insert(
                        worker.clone(),
                        Connection::connect(worker_addr(worker, 1)?).await?,
                    );
                }
                let t = Instant::now();
                let r = conns[worker].push(&key, &format!("{p}-0"), b).await?;
                latency.lock().record(t.elapsed().as_micros() as u64).ok();
                ensure!(r.is_empty(), "push answered {r:?}");
                i += args.mappers;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let push_time = started.elapsed();

    // Commit on every worker (StageEnd).
    let commit_started = Instant::now();
    // Per worker: (primary ids, replica ids).
    let mut by_worker: HashMap<String, (Vec<String>, Vec<String>)> = HashMap::new();
    for (p, w) in owner.iter() {
        by_worker
            .entry(w.clone())
            .or_default()
            .0
            .push(format!("{p}-0"));
    }
    for (p, w) in replica_owner.iter() {
        by_worker
            .entry(w.clone())
            .or_default()
            .1
            .push(format!("{p}-0"));
    }
    for (worker, (ids, replica_ids)) in &by_worker {
        let rpc = Connection::connect(worker_addr(worker, 0)?).await?;
        let r = rpc
            .ask(
                endpoint::WORKER,
                TransportMessage::new(
                    MessageType::CommitFiles,
                    &PbCommitFiles {
                        application_id: app.clone(),
                        shuffle_id: 0,
                        primary_ids: ids.clone(),
                        replica_ids: replica_ids.clone(),
                        map_attempts: vec![0; args.mappers],
                        epoch: 1,
                        ..Default::default()
                    },
                ),
            )
            .await?;
        let c: PbCommitFilesResponse = decode(&r)?;
        ensure!(
            c.status == 0
                && c.committed_primary_ids.len() == ids.len()
                && c.committed_replica_ids.len() == replica_ids.len(),
            "commit on {worker}: status {}, {} of {} primaries and {} of {} replicas committed",
            c.status,
            c.committed_primary_ids.len(),
            ids.len(),
            c.committed_replica_ids.len(),
            replica_ids.len()
        );
    }
    let commit_time = commit_started.elapsed();
    let write_time = started.elapsed();

    // Readers: one partition at a time.
    // Where each partition is read from: its primary, or its replica copy.
    let (owner, mode) = if args.read_replicas {
        (Arc::new(replica_owner), 1)
    } else {
        (owner, 0)
    };
    let next = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let chunk_latency = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.mappers {
        let owner = owner.clone();
        let key = shuffle_key.clone();
        let next = next.clone();
        let latency = chunk_latency.clone();
        let partitions = args.partitions;
        tasks.push(tokio::spawn(async move {
            let (mut batches, mut bytes) = (0u64, 0u64);
            loop {
                let p = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if p >= partitions {
                    return Ok::<_, anyhow::Error>((batches, bytes));
                }
                let fetch = Connection::connect(worker_addr(&owner[&p], 2)?).await?;
                let open = TransportMessage::new(
                    MessageType::OpenStream,
                    &PbOpenStream {
                        shuffle_key: key.clone(),
                        file_name: format!("{p}-0-{mode}"),
                        start_index: 0,
                        end_index: i32::MAX,
                        ..Default::default()
                    },
                );
                let reply = TransportMessage::from_bytes(fetch.data_rpc(&open).await?)?
                    .context("empty open reply")?;
                let h: PbStreamHandler = decode(&reply)?;
                for c in 0..h.num_chunks {
                    let t = Instant::now();
                    let chunk = fetch.fetch_chunk(h.stream_id, c).await?;
                    latency.lock().record(t.elapsed().as_micros() as u64).ok();
                    for (_, _, _, data) in parse_batches(&chunk)? {
                        batches += 1;
                        bytes += data.len() as u64;
                    }
                }
            }
        }));
    }
    let (mut batches, mut bytes) = (0, 0);
    for t in tasks {
        let (b, n) = t.await??;
        batches += b;
        bytes += n;
    }
    let read_time = started.elapsed();
    ensure!(
        batches == total_batches as u64 && bytes == total,
        "read {batches} batches / {bytes} bytes of {total_batches} / {total}"
    );
    if !args.keep_app {
        application_lost(&master, &app).await?;
    }

    let pl = latency.lock();
    let cl = chunk_latency.lock();
    let write = gbps(total, write_time);
    let read = gbps(total, read_time);
    println!(
        "write {write:.3} GB/s ({:.2} s push + {:.2} s commit) = {:.0}% of loopback TCP; pushData p50 {:.2} ms, p99 {:.2} ms ({} pushes)",
        push_time.as_secs_f64(),
        commit_time.as_secs_f64(),
        write / baseline * 100.0,
        pl.value_at_quantile(0.5) as f64 / 1000.0,
        pl.value_at_quantile(0.99) as f64 / 1000.0,
        pl.len()
    );
    println!(
        "read  {read:.3} GB/s ({:.2} s, {batches} batches checked) = {:.0}% of loopback TCP; chunk fetch p50 {:.2} ms, p99 {:.2} ms",
        read_time.as_secs_f64(),
        read / baseline * 100.0,
        cl.value_at_quantile(0.5) as f64 / 1000.0,
        cl.value_at_quantile(0.99) as f64 / 1000.0
    );
    report::print_server_rss(args.server_pid);
    Ok(())
}
