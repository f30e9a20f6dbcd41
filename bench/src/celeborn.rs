//! `switchyard-bench celeborn --master HOST:PORT`: M mappers push N bytes
//! over P partitions through the Celeborn protocol to any Celeborn
//! deployment (its master and workers), the files are committed, and readers
//! fetch every chunk back and check every batch. The baseline is raw loopback
//! TCP throughput measured in the same run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};

use crate::harness::{self, Latency, Phase, Tally, WorkQueue};
use crate::lifecycle::{self, worker_addr, Owners, SlotRequest};
use crate::report;

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

/// What every mapper and reader of one run shares.
struct Job {
    shuffle_key: String,
    batch_size: usize,
    total_batches: usize,
    owners: Owners,
    pattern: Bytes,
    args: CelebornBenchArgs,
    push_latency: Latency,
}

pub async fn run(args: CelebornBenchArgs) -> anyhow::Result<()> {
    let batch_size = args.batch_size.as_u64() as usize;
    let total_batches = (args.size.as_u64() as usize).div_ceil(batch_size);
    let total = (total_batches * batch_size) as u64;
    let app = args.app.clone().unwrap_or_else(|| harness::app_id("bench"));
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
    let baseline = harness::loopback_baseline(total).await?;
    let master = lifecycle::connect_master(&args.master).await?;
    lifecycle::heartbeat(&master, &app).await?;
    let owners = reserve(&master, &app, &args).await?;
    let job = Arc::new(Job {
        shuffle_key: switchyard_celeborn::ShuffleKey::new(&app, 0).to_string(),
        batch_size,
        total_batches,
        owners,
        pattern: harness::pattern(),
        args,
        push_latency: Latency::default(),
    });

    let started = Instant::now();
    harness::run_tasks(job.args.mappers, |m| push(job.clone(), m)).await?;
    let push_time = started.elapsed();
    let commit_time = commit(&job, &app).await?;
    let write_time = started.elapsed();

    let chunk_latency = Latency::default();
    let (read_time, read) = harness::read_phase(job.args.mappers, job.args.partitions, |queue| {
        fetch(job.clone(), queue, chunk_latency.clone())
    })
    .await?;
    ensure!(
        read.items == total_batches as u64 && read.bytes == total,
        "read {} batches / {} bytes of {total_batches} / {total}",
        read.items,
        read.bytes
    );
    if !job.args.keep_app {
        lifecycle::application_lost(&master, &app).await?;
    }

    let (write, pl) = (Phase::new(total, write_time, baseline), &job.push_latency);
    println!(
        "write {:.3} GB/s ({:.2} s push + {:.2} s commit) = {:.0}% of loopback TCP; pushData p50 {:.2} ms, p99 {:.2} ms ({} pushes)",
        write.gbps,
        push_time.as_secs_f64(),
        commit_time.as_secs_f64(),
        write.percent_of_baseline,
        pl.ms(0.5),
        pl.ms(0.99),
        pl.count()
    );
    let read_phase = Phase::new(total, read_time, baseline);
    println!(
        "read  {:.3} GB/s ({:.2} s, {} batches checked) = {:.0}% of loopback TCP; chunk fetch p50 {:.2} ms, p99 {:.2} ms",
        read_phase.gbps,
        read_phase.secs(),
        read.items,
        read_phase.percent_of_baseline,
        chunk_latency.ms(0.5),
        chunk_latency.ms(0.99)
    );
    report::print_server_rss(job.args.server_pid);
    Ok(())
}

/// The LifecycleManager's part: slots from the master, reserved on the
/// workers; checks that replicas (when asked) sit on other workers, and on
/// other racks when rack-aware.
async fn reserve(
    master: &Connection,
    app: &str,
    args: &CelebornBenchArgs,
) -> anyhow::Result<Owners> {
    let request = SlotRequest {
        partitions: (0..args.partitions).collect(),
        replicate: args.replicate,
        rack_aware: args.rack_aware,
        map_partitions: false,
    };
    let slots = lifecycle::request_slots(master, app, &request).await?;
    let owners = lifecycle::reserve_owners(app, &slots, &request).await?;
    let (owner, replica_owner) = (&owners.primary, &owners.replica);
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
        let rack_of: HashMap<&String, &str> = slots
            .worker_resource
            .iter()
            .map(|(w, res)| (w, res.network_location.as_str()))
            .collect();
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
    Ok(owners)
}

/// Mapper `m` pushes every `mappers`-th batch with PushData to its
/// partition's primary.
async fn push(job: Arc<Job>, m: usize) -> anyhow::Result<()> {
    let mut conns: HashMap<String, Connection> = HashMap::new();
    let batch_size = job.batch_size;
    let mut batch_id = 0;
    for i in (m..job.total_batches).step_by(job.args.mappers) {
        let p = (i % job.args.partitions as usize) as i32;
        batch_id += 1;
        let start = (i * 7919) % (job.pattern.len() - batch_size);
        let b = batch(
            m as i32,
            0,
            batch_id,
            &job.pattern[start..start + batch_size],
        );
        let worker = &job.owners.primary[&p];
        if !conns.contains_key(worker) {
            conns.insert(
                worker.clone(),
                Connection::connect(worker_addr(worker, 1)?).await?,
            );
        }
        let t = Instant::now();
        let r = conns[worker]
            .push(&job.shuffle_key, &format!("{p}-0"), b)
            .await?;
        job.push_latency.record(t.elapsed());
        ensure!(r.is_empty(), "push answered {r:?}");
    }
    Ok(())
}

/// StageEnd: CommitFiles on every worker, of its primaries and replicas.
async fn commit(job: &Job, app: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    // Per worker: (primary ids, replica ids).
    let mut by_worker: HashMap<&String, (Vec<String>, Vec<String>)> = HashMap::new();
    for (p, w) in &job.owners.primary {
        by_worker.entry(w).or_default().0.push(format!("{p}-0"));
    }
    for (p, w) in &job.owners.replica {
        by_worker.entry(w).or_default().1.push(format!("{p}-0"));
    }
    for (worker, (ids, replica_ids)) in by_worker {
        let commit = PbCommitFiles {
            application_id: app.to_string(),
            shuffle_id: 0,
            primary_ids: ids.clone(),
            replica_ids: replica_ids.clone(),
            map_attempts: vec![0; job.args.mappers],
            epoch: 1,
            ..Default::default()
        };
        let c = lifecycle::commit_files(worker, commit).await?;
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
    Ok(started.elapsed())
}

/// A reader: partitions from `queue`, each opened as a stream on its
/// primary (or, with `--read-replicas`, its replica) and fetched chunk by
/// chunk, every batch parsed.
async fn fetch(job: Arc<Job>, queue: WorkQueue, latency: Latency) -> anyhow::Result<Tally> {
    let (owners, mode) = if job.args.read_replicas {
        (&job.owners.replica, 1)
    } else {
        (&job.owners.primary, 0)
    };
    let mut tally = Tally::default();
    while let Some(p) = queue.take() {
        let fetch = Connection::connect(worker_addr(&owners[&p], 2)?).await?;
        let open = TransportMessage::new(
            MessageType::OpenStream,
            &PbOpenStream {
                shuffle_key: job.shuffle_key.clone(),
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
            latency.record(t.elapsed());
            for (_, _, _, data) in parse_batches(&chunk)? {
                tally.items += 1;
                tally.bytes += data.len() as u64;
            }
        }
    }
    Ok(tally)
}
