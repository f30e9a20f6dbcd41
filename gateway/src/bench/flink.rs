//! `switchyard bench flink --master HOST:PORT`: Flink's map-partition shuffle
//! through the Celeborn protocol, against any Celeborn deployment. M map
//! tasks each write one map partition in regions (records of `--record-size`,
//! sub-partitions ascending, as Flink's client packs its network buffers);
//! each mapper's partition is committed as it ends (Celeborn's
//! MapPartitionCommitHandler); then readers open one credit stream per map
//! partition and sub-partition, grant credit from each backlog announcement
//! and check every record. The baseline is raw loopback TCP throughput
//! measured in the same run.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::ensure;
use bytes::Bytes;
use bytesize::ByteSize;
use parking_lot::Mutex;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{decode, Connection};

use super::celeborn::{bench_user, histogram, worker_addr};
use super::report::{self, gbps};

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
    let mut v = Vec::with_capacity(size);
    for word in [sub, 0, n as i32, len as i32] {
        v.extend_from_slice(&word.to_be_bytes());
    }
    v.extend_from_slice(&pattern[at..at + len]);
    Bytes::from(v)
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
    let app = format!(
        "bench-flink-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    let shuffle_key = format!("{app}-0");
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
    let baseline = super::uniffle::loopback_tcp_gbps(total.min(4 << 30)).await?;
    println!("baseline: raw loopback TCP {baseline:.3} GB/s (one stream)");

    // The LifecycleManager's part: one MAP location per map task.
    let master = Connection::connect(args.master.parse()?).await?;
    ensure!(
        master.verify(endpoint::MASTER).await?,
        "no MasterEndpoint at {}",
        args.master
    );
    let r = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::RequestSlots,
                &PbRequestSlots {
                    application_id: app.clone(),
                    shuffle_id: 0,
                    partition_id_list: (0..args.mappers as i32).collect(),
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
    let mut owner = vec![String::new(); args.mappers];
    for (worker, res) in &slots.worker_resource {
        // Spares (no locations) are for revive; a driver reserves nothing there.
        if res.primary_partitions.is_empty() && res.replica_partitions.is_empty() {
            continue;
        }
        let rpc = Connection::connect(worker_addr(worker, 0)?).await?;
        let r = rpc
            .ask(
                endpoint::WORKER,
                TransportMessage::new(
                    MessageType::ReserveSlots,
                    &PbReserveSlots {
                        application_id: app.clone(),
                        shuffle_id: 0,
                        primary_locations: res.primary_partitions.clone(),
                        split_threshold: 1 << 40,
                        partition_type: 1,
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
            "ReserveSlots on {worker}: {}",
            reserved.reason
        );
        for l in &res.primary_partitions {
            owner[l.id as usize] = worker.clone();
        }
    }
    ensure!(
        owner.iter().all(|w| !w.is_empty()),
        "slots must cover every map task"
    );
    let owner = Arc::new(owner);
    let pattern: Arc<Vec<u8>> = Arc::new(
        (0..(4usize << 20))
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    );

    // Map tasks: handshake, regions of records in sub-partition order, then
    // the mapper's own commit.
    let latency = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in 0..args.mappers {
        let (owner, pattern, latency, args) = (
            owner.clone(),
            pattern.clone(),
            latency.clone(),
            args.clone(),
        );
        let (key, app) = (shuffle_key.clone(), app.clone());
        tasks.push(tokio::spawn(async move {
            let uid = format!("{m}-0");
            let push = Connection::connect(worker_addr(&owner[m], 1)?).await?;
            let control = |tm: TransportMessage| {
                let push = &push;
                async move {
                    let r = push.data_rpc(&tm).await?;
                    ensure!(r.is_empty(), "type {} answered {r:?}", tm.message_type);
                    Ok::<_, anyhow::Error>(())
                }
            };
            let hs = PbPushDataHandShake {
                mode: 0,
                shuffle_key: key.clone(),
                partition_unique_id: uid.clone(),
                attempt_id: 0,
                num_partitions: args.sub_partitions,
                buffer_size: size as i32,
            };
            control(TransportMessage::new(MessageType::PushDataHandShake, &hs)).await?;
            for region in 0..args.regions {
                let start = PbRegionStart {
                    mode: 0,
                    shuffle_key: key.clone(),
                    partition_unique_id: uid.clone(),
                    attempt_id: 0,
                    current_region_index: region,
                    is_broadcast: false,
                };
                control(TransportMessage::new(MessageType::RegionStart, &start)).await?;
                // Pushes are pipelined like the client's (up to 8 in flight
                // on one connection); the worker keeps their order.
                let mut inflight = futures::stream::FuturesOrdered::new();
                for sub in 0..args.sub_partitions {
                    for n in 0..per_cell {
                        let body = record(&pattern, m, region, sub, n, size);
                        let t = Instant::now();
                        let reply = push.push_queued(&key, &uid, body).await?;
                        inflight.push_back(async move {
                            let r = reply.await;
                            (t.elapsed(), r)
                        });
                        if inflight.len() >= 8 {
                            settle(&mut inflight, &latency).await?;
                        }
                    }
                }
                while !inflight.is_empty() {
                    settle(&mut inflight, &latency).await?;
                }
                let finish = PbRegionFinish {
                    mode: 0,
                    shuffle_key: key.clone(),
                    partition_unique_id: uid.clone(),
                    attempt_id: 0,
                };
                control(TransportMessage::new(MessageType::RegionFinish, &finish)).await?;
            }
            // MapperEnd → the LifecycleManager commits this map partition.
            let rpc = Connection::connect(worker_addr(&owner[m], 0)?).await?;
            let r = rpc
                .ask(
                    endpoint::WORKER,
                    TransportMessage::new(
                        MessageType::CommitFiles,
                        &PbCommitFiles {
                            application_id: app,
                            shuffle_id: 0,
                            primary_ids: vec![uid.clone()],
                            epoch: m as i64 + 1,
                            ..Default::default()
                        },
                    ),
                )
                .await?;
            let c: PbCommitFilesResponse = decode(&r)?;
            ensure!(
                c.committed_primary_ids == vec![uid],
                "commit of map {m}: status {}",
                c.status
            );
            Ok::<_, anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let write_time = started.elapsed();

    // Readers: each takes sub-partitions in turn and reads that one from
    // every map partition (one credit stream each), checking every record.
    let next = Arc::new(AtomicI32::new(0));
    let stream_latency = Arc::new(Mutex::new(histogram()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.mappers {
        let (owner, pattern, next, latency, args) = (
            owner.clone(),
            pattern.clone(),
            next.clone(),
            stream_latency.clone(),
            args.clone(),
        );
        let key = shuffle_key.clone();
        tasks.push(tokio::spawn(async move {
            let mut conns = std::collections::HashMap::new();
            let (mut records, mut bytes) = (0u64, 0u64);
            loop {
                let sub = next.fetch_add(1, Ordering::Relaxed);
                if sub >= args.sub_partitions {
                    return Ok::<_, anyhow::Error>((records, bytes));
                }
                for m in 0..args.mappers {
                    if !conns.contains_key(&owner[m]) {
                        let c = Connection::connect(worker_addr(&owner[m], 2)?).await?;
                        let events = c.subscribe();
                        conns.insert(owner[m].clone(), (c, events));
                    }
                    let (fetch, events) = conns.get_mut(&owner[m]).expect("connected");
                    let t = Instant::now();
                    let read = fetch
                        .read_credit_stream(
                            events,
                            &key,
                            &format!("{m}-0-0"),
                            (sub, sub),
                            args.initial_credit,
                        )
                        .await?;
                    latency.lock().record(t.elapsed().as_micros() as u64).ok();
                    ensure!(
                        read.records.len() == per_cell * args.regions as usize,
                        "map {m} sub {sub}: {} records",
                        read.records.len()
                    );
                    let mut i = 0;
                    for region in 0..args.regions {
                        for n in 0..per_cell {
                            let want = record(&pattern, m, region, sub, n, size);
                            ensure!(
                                read.records[i] == want,
                                "map {m} sub {sub} region {region} record {n} differs"
                            );
                            bytes += want.len() as u64;
                            i += 1;
                        }
                    }
                    records += read.records.len() as u64;
                }
            }
        }));
    }
    let (mut records, mut bytes) = (0, 0);
    for t in tasks {
        let (r, b) = t.await??;
        records += r;
        bytes += b;
    }
    let read_time = started.elapsed();
    ensure!(
        records == total_records as u64 && bytes == total,
        "read {records} records / {bytes} bytes of {total_records} / {total}"
    );
    super::celeborn::application_lost(&master, &app).await?;

    let pl = latency.lock();
    let sl = stream_latency.lock();
    let (write, read) = (gbps(total, write_time), gbps(total, read_time));
    println!(
        "write {write:.3} GB/s ({:.2} s, regions + pushes + per-map commits) = {:.0}% of loopback TCP; pushData p50 {:.2} ms, p99 {:.2} ms ({} pushes)",
        write_time.as_secs_f64(),
        write / baseline * 100.0,
        pl.value_at_quantile(0.5) as f64 / 1000.0,
        pl.value_at_quantile(0.99) as f64 / 1000.0,
        pl.len()
    );
    println!(
        "read  {read:.3} GB/s ({:.2} s, {records} records checked, {} credit streams) = {:.0}% of loopback TCP; stream p50 {:.2} ms, p99 {:.2} ms",
        read_time.as_secs_f64(),
        sl.len(),
        read / baseline * 100.0,
        sl.value_at_quantile(0.5) as f64 / 1000.0,
        sl.value_at_quantile(0.99) as f64 / 1000.0
    );
    report::print_server_rss(args.server_pid);
    Ok(())
}

/// Waits for the oldest push in flight and records its latency.
async fn settle<F>(
    inflight: &mut futures::stream::FuturesOrdered<F>,
    latency: &Mutex<hdrhistogram::Histogram<u64>>,
) -> anyhow::Result<()>
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
        latency.lock().record(elapsed.as_micros() as u64).ok();
    }
    Ok(())
}
