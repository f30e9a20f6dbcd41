//! `switchyard-bench flink --master HOST:PORT`: Flink's map-partition shuffle
//! through the Celeborn protocol, against any Celeborn deployment. M map
//! tasks each write one map partition in regions (records of `--record-size`,
//! sub-partitions ascending, as Flink's client packs its network buffers);
//! each mapper's partition is committed as it ends (Celeborn's
//! MapPartitionCommitHandler); then readers open one credit stream per map
//! partition and sub-partition, grant credit from each backlog announcement
//! and check every record. The baseline is raw loopback TCP throughput
//! measured in the same run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use anyhow::ensure;
use bytes::Bytes;
use bytesize::ByteSize;
use futures::stream::FuturesOrdered;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::Connection;

use crate::harness::{self, Latency, Phase, Tally, WorkQueue};
use crate::lifecycle::{self, worker_addr, SlotRequest};
use crate::report;

#[derive(Debug, Clone, clap::Args)]
pub struct FlinkBenchArgs {
    /// Master address (ours, or a Celeborn master).
    #[arg(long)]
    pub master: String,
    /// Bytes to write in total.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,
    /// Map tasks (one map partition each), also the number of readers.
    #[arg(long, default_value_t = 8)]
    pub mappers: usize,
    /// Sub-partitions (downstream tasks).
    #[arg(long, default_value_t = 32)]
    pub sub_partitions: i32,
    /// Regions per map task.
    #[arg(long, default_value_t = 4)]
    pub regions: i32,
    /// Record size, header included (Flink's network buffer is 32 KiB).
    #[arg(long, default_value = "32KiB")]
    pub record_size: ByteSize,
    /// Credit a reader opens a stream with (more comes from backlogs).
    #[arg(long, default_value_t = 2)]
    pub initial_credit: i32,
    /// PID of the server, to report its peak RSS (when it runs on this machine).
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// One record: Flink's big-endian header (sub-partition, attempt, batch,
/// length) and a payload cut from `pattern` at a place the record's identity
/// fixes, so a reader can check it.
fn record(pattern: &[u8], map: usize, region: i32, sub: i32, n: usize, size: usize) -> Bytes {
    let len = size - 16;
    let at = (map * 7919 + region as usize * 104_729 + sub as usize * 15_485_863 + n * 31)
        % (pattern.len() - len);
    buffer(sub, n as i32, &pattern[at..at + len])
}

/// One Flink network buffer as the map partition's pushes carry it:
/// Flink's big-endian header (sub-partition, attempt 0, batch, length),
/// then the payload.
pub(crate) fn buffer(sub: i32, batch: i32, payload: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(16 + payload.len());
    for word in [sub, 0, batch, payload.len() as i32] {
        v.extend_from_slice(&word.to_be_bytes());
    }
    v.extend_from_slice(payload);
    Bytes::from(v)
}

/// What every map task and reader of one run shares.
struct Job {
    shuffle_key: String,
    app: String,
    /// Record size, header included.
    size: usize,
    /// Records per map task, region and sub-partition.
    per_cell: usize,
    /// Per map task, the worker holding its map partition.
    owner: Vec<String>,
    pattern: Bytes,
    args: FlinkBenchArgs,
    push_latency: Latency,
}

pub async fn run(args: FlinkBenchArgs) -> anyhow::Result<()> {
    let size = args.record_size.as_u64() as usize;
    ensure!(
        size > 16,
        "records must be larger than their 16-byte header"
    );
    ensure!(
        args.mappers > 0 && args.sub_partitions > 0 && args.regions > 0,
        "counts must be > 0"
    );
    let cells = args.mappers * args.regions as usize * args.sub_partitions as usize;
    let per_cell = ((args.size.as_u64() as usize).div_ceil(size))
        .div_ceil(cells)
        .max(1);
    let total_records = per_cell * cells;
    let total = (total_records * size) as u64;
    let app = harness::app_id("bench-flink");
    println!(
        "flink bench: {} in {total_records} records of {}, {} map tasks x {} regions x {} sub-partitions, initial credit {}, master {}",
        ByteSize::b(total),
        args.record_size,
        args.mappers,
        args.regions,
        args.sub_partitions,
        args.initial_credit,
        args.master
    );
    let baseline = harness::loopback_baseline(total).await?;
    let master = lifecycle::connect_master(&args.master).await?;
    let owner = reserve(&master, &app, args.mappers).await?;
    let job = Arc::new(Job {
        shuffle_key: switchyard_celeborn::ShuffleKey::new(&app, 0).to_string(),
        app: app.clone(),
        size,
        per_cell,
        owner,
        pattern: harness::pattern(),
        args,
        push_latency: Latency::default(),
    });

    let started = Instant::now();
    harness::run_tasks(job.args.mappers, |m| map_task(job.clone(), m)).await?;
    let write_time = started.elapsed();

    // Readers: each takes sub-partitions in turn and reads that one from
    // every map partition (one credit stream each), checking every record.
    let stream_latency = Latency::default();
    let (read_time, read) =
        harness::read_phase(job.args.mappers, job.args.sub_partitions, |queue| {
            read(job.clone(), queue, stream_latency.clone())
        })
        .await?;
    ensure!(
        read.items == total_records as u64 && read.bytes == total,
        "read {} records / {} bytes of {total_records} / {total}",
        read.items,
        read.bytes
    );
    lifecycle::application_lost(&master, &app).await?;

    let (write, pl) = (Phase::new(total, write_time, baseline), &job.push_latency);
    println!(
        "write {:.3} GB/s ({:.2} s, regions + pushes + per-map commits) = {:.0}% of loopback TCP; pushData p50 {:.2} ms, p99 {:.2} ms ({} pushes)",
        write.gbps,
        write.secs(),
        write.percent_of_baseline,
        pl.ms(0.5),
        pl.ms(0.99),
        pl.count()
    );
    let (read_phase, sl) = (Phase::new(total, read_time, baseline), &stream_latency);
    println!(
        "read  {:.3} GB/s ({:.2} s, {} records checked, {} credit streams) = {:.0}% of loopback TCP; stream p50 {:.2} ms, p99 {:.2} ms",
        read_phase.gbps,
        read_phase.secs(),
        read.items,
        sl.count(),
        read_phase.percent_of_baseline,
        sl.ms(0.5),
        sl.ms(0.99)
    );
    report::print_server_rss(job.args.server_pid);
    Ok(())
}

/// The LifecycleManager's part: one MAP location per map task; per map
/// task, its worker.
async fn reserve(master: &Connection, app: &str, mappers: usize) -> anyhow::Result<Vec<String>> {
    let request = SlotRequest {
        partitions: (0..mappers as i32).collect(),
        replicate: false,
        rack_aware: false,
        map_partitions: true,
    };
    let slots = lifecycle::request_slots(master, app, &request).await?;
    let mut owner = vec![String::new(); mappers];
    for (worker, res) in lifecycle::reserve_slots(app, &slots, &request).await? {
        for l in &res.primary_partitions {
            owner[l.id as usize] = worker.clone();
        }
    }
    ensure!(
        owner.iter().all(|w| !w.is_empty()),
        "slots must cover every map task"
    );
    Ok(owner)
}

/// Map task `m`: handshake, regions of records in sub-partition order, then
/// the mapper's own commit (MapperEnd: the LifecycleManager commits this
/// map partition).
async fn map_task(job: Arc<Job>, m: usize) -> anyhow::Result<()> {
    let uid = format!("{m}-0");
    let push = Connection::connect(worker_addr(&job.owner[m], 1)?).await?;
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: job.shuffle_key.clone(),
        partition_unique_id: uid.clone(),
        attempt_id: 0,
        num_partitions: job.args.sub_partitions,
        buffer_size: job.size as i32,
    };
    control(
        &push,
        TransportMessage::new(MessageType::PushDataHandShake, &hs),
    )
    .await?;
    for region in 0..job.args.regions {
        write_region(&job, &push, m, &uid, region).await?;
    }
    let commit = PbCommitFiles {
        application_id: job.app.clone(),
        shuffle_id: 0,
        primary_ids: vec![uid.clone()],
        epoch: m as i64 + 1,
        ..Default::default()
    };
    let c = lifecycle::commit_files(&job.owner[m], commit).await?;
    ensure!(
        c.committed_primary_ids == vec![uid],
        "commit of map {m}: status {}",
        c.status
    );
    Ok(())
}

/// A control message on the push port, answered with an empty body.
pub(crate) async fn control(push: &Connection, tm: TransportMessage) -> anyhow::Result<()> {
    let r = push.data_rpc(&tm).await?;
    ensure!(r.is_empty(), "type {} answered {r:?}", tm.message_type);
    Ok(())
}

/// One region: RegionStart, every sub-partition's records, RegionFinish.
async fn write_region(
    job: &Job,
    push: &Connection,
    m: usize,
    uid: &str,
    region: i32,
) -> anyhow::Result<()> {
    let key = &job.shuffle_key;
    let start = PbRegionStart {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: uid.to_string(),
        attempt_id: 0,
        current_region_index: region,
        is_broadcast: false,
    };
    control(
        push,
        TransportMessage::new(MessageType::RegionStart, &start),
    )
    .await?;
    // Pushes are pipelined like the client's (up to 8 in flight on one
    // connection); the worker keeps their order.
    let mut inflight = FuturesOrdered::new();
    for sub in 0..job.args.sub_partitions {
        for n in 0..job.per_cell {
            let body = record(&job.pattern, m, region, sub, n, job.size);
            let t = Instant::now();
            let reply = push.push_queued(key, uid, body).await?;
            inflight.push_back(async move {
                let r = reply.await;
                (t.elapsed(), r)
            });
            if inflight.len() >= 8 {
                settle(&mut inflight, &job.push_latency).await?;
            }
        }
    }
    while !inflight.is_empty() {
        settle(&mut inflight, &job.push_latency).await?;
    }
    let finish = PbRegionFinish {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: uid.to_string(),
        attempt_id: 0,
    };
    control(
        push,
        TransportMessage::new(MessageType::RegionFinish, &finish),
    )
    .await
}

/// Waits for the oldest push in flight and records its latency.
async fn settle<F>(inflight: &mut FuturesOrdered<F>, latency: &Latency) -> anyhow::Result<()>
where
    F: std::future::Future<
        Output = (
            std::time::Duration,
            switchyard_clients::celeborn::Result<Bytes>,
        ),
    >,
{
    use futures::StreamExt;
    if let Some((elapsed, r)) = inflight.next().await {
        let r = r?;
        ensure!(r.is_empty(), "push answered {r:?}");
        latency.record(elapsed);
    }
    Ok(())
}

/// A reader: sub-partitions from `queue`, each read from every map
/// partition, one connection per worker.
async fn read(job: Arc<Job>, queue: WorkQueue, latency: Latency) -> anyhow::Result<Tally> {
    let mut conns = HashMap::new();
    let mut tally = Tally::default();
    while let Some(sub) = queue.take() {
        for m in 0..job.args.mappers {
            let worker = &job.owner[m];
            if !conns.contains_key(worker) {
                let c = Connection::connect(worker_addr(worker, 2)?).await?;
                let events = c.subscribe();
                conns.insert(worker.clone(), (c, events));
            }
            let (fetch, events) = conns.get_mut(worker).expect("connected");
            let t = Instant::now();
            let read = fetch
                .read_credit_stream(
                    events,
                    &job.shuffle_key,
                    &format!("{m}-0-0"),
                    (sub, sub),
                    job.args.initial_credit,
                )
                .await?;
            latency.record(t.elapsed());
            tally.bytes += check_records(&job, m, sub, &read.records)?;
            tally.items += read.records.len() as u64;
        }
    }
    Ok(tally)
}

/// Checks that map `m`'s records of sub-partition `sub` are those it
/// wrote, in order; returns their bytes.
fn check_records(job: &Job, m: usize, sub: i32, records: &[Bytes]) -> anyhow::Result<u64> {
    ensure!(
        records.len() == job.per_cell * job.args.regions as usize,
        "map {m} sub {sub}: {} records",
        records.len()
    );
    let mut bytes = 0;
    let mut i = 0;
    for region in 0..job.args.regions {
        for n in 0..job.per_cell {
            let want = record(&job.pattern, m, region, sub, n, job.size);
            ensure!(
                records[i] == want,
                "map {m} sub {sub} region {region} record {n} differs"
            );
            bytes += want.len() as u64;
            i += 1;
        }
    }
    Ok(bytes)
}
