//! One soak application through the Celeborn protocol (reduce partitions,
//! as Spark's client): slots with replicas from whichever master answers,
//! batches pushed to each primary (which replicates before it answers),
//! CommitFiles on every worker, then every partition fetched from its
//! primary or, when that fails, its replica. Batches are deduplicated by
//! (map, attempt, batch) as the stock reader does.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use anyhow::{ensure, Context};
use bytes::BytesMut;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};

use super::ledger::{Acked, Verdict};
use super::probe::Probe;
use super::record;
use super::spec::AppSpec;
use super::step;
use crate::lifecycle::{self, worker_addr, Owners, SlotRequest};

/// Records a pushed batch holds at most.
const RECORDS_PER_BATCH: usize = 4;

/// Runs one attempt of `spec` as application `app`; an error is what the
/// client saw (the caller reruns the application).
pub async fn run(
    app: &str,
    spec: &AppSpec,
    masters: &[String],
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let (master, owners) = slots(app, spec, masters).await?;
    let result = write_and_read(app, spec, &owners, probe).await;
    // ApplicationLost on every path: the workers drop its data; a master
    // that cannot be reached leaves it to the application timeout.
    let _ = step(String::new, lifecycle::application_lost(&master, app)).await;
    result
}

async fn slots(
    app: &str,
    spec: &AppSpec,
    masters: &[String],
) -> anyhow::Result<(Connection, Owners)> {
    let request = SlotRequest {
        partitions: (0..spec.partitions()).collect(),
        replicate: true,
        rack_aware: false,
        map_partitions: false,
    };
    let mut last = None;
    for address in masters {
        let attempt = async {
            let master = lifecycle::connect_master(address).await?;
            lifecycle::heartbeat(&master, app).await?;
            let slots = lifecycle::request_slots(&master, app, &request).await?;
            let owners = lifecycle::reserve_owners(app, &slots, &request).await?;
            ensure!(
                owners.primary.len() == spec.records.len()
                    && owners.replica.len() == spec.records.len(),
                "slots cover {} primaries and {} replicas of {} partitions",
                owners.primary.len(),
                owners.replica.len(),
                spec.records.len()
            );
            anyhow::Ok((master, owners))
        };
        match step(|| format!("master {address}"), attempt).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("no master"))
        .context("celeborn RequestSlots/ReserveSlots"))
}

async fn write_and_read(
    app: &str,
    spec: &AppSpec,
    owners: &Owners,
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let shuffle_key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let mut acked = Acked::default();
    let pushes = (0..spec.writers).map(|w| push(&shuffle_key, spec, owners, w, probe));
    for ids in futures::future::try_join_all(pushes).await? {
        for (p, ids) in ids {
            acked.add(p, ids);
        }
    }
    commit(app, spec, owners).await?;
    let mut verdict = Verdict::default();
    for p in 0..spec.partitions() {
        verdict += fetch(&shuffle_key, p, owners, &acked, probe).await?;
    }
    Ok(verdict)
}

/// Map task `w`: pushes its records in batches to each partition's
/// primary; returns the records of every acknowledged batch.
async fn push(
    shuffle_key: &str,
    spec: &AppSpec,
    owners: &Owners,
    w: usize,
    probe: &Probe,
) -> anyhow::Result<HashMap<i32, Vec<u64>>> {
    let mut by_partition: HashMap<i32, Vec<u64>> = HashMap::new();
    for (p, id) in spec.records_of(w) {
        by_partition.entry(p).or_default().push(id);
    }
    let mut conns: HashMap<&String, Connection> = HashMap::new();
    let mut batch_id = 0;
    for (p, ids) in &by_partition {
        let worker = &owners.primary[p];
        for chunk in ids.chunks(RECORDS_PER_BATCH) {
            let mut data = BytesMut::new();
            for id in chunk {
                record::encode_into(&mut data, *id, *p, spec.record_len);
            }
            batch_id += 1;
            if !conns.contains_key(worker) {
                let c = step(
                    || format!("celeborn connect push port of {worker}"),
                    Connection::connect(worker_addr(worker, 1)?),
                )
                .await?;
                conns.insert(worker, c);
            }
            let t = Instant::now();
            let unique_id = format!("{p}-0");
            let push =
                conns[worker].push(shuffle_key, &unique_id, batch(w as i32, 0, batch_id, &data));
            let reply = step(|| format!("celeborn PushData to {worker}"), push).await?;
            probe.push(t.elapsed());
            // A status byte instead of an empty answer: a split (the stock
            // client revives the partition elsewhere), here a rerun.
            ensure!(
                reply.is_empty(),
                "celeborn PushData to {worker} answered status {:?} (a split: the stock client revives)",
                reply.first()
            );
        }
    }
    Ok(by_partition)
}

async fn commit(app: &str, spec: &AppSpec, owners: &Owners) -> anyhow::Result<()> {
    let mut by_worker: HashMap<&String, (Vec<String>, Vec<String>)> = HashMap::new();
    for (p, w) in &owners.primary {
        by_worker.entry(w).or_default().0.push(format!("{p}-0"));
    }
    for (p, w) in &owners.replica {
        by_worker.entry(w).or_default().1.push(format!("{p}-0"));
    }
    for (worker, (primary_ids, replica_ids)) in by_worker {
        let c = step(
            || format!("celeborn CommitFiles on {worker}"),
            lifecycle::commit_files(
                worker,
                PbCommitFiles {
                    application_id: app.to_string(),
                    shuffle_id: 0,
                    primary_ids: primary_ids.clone(),
                    replica_ids: replica_ids.clone(),
                    map_attempts: vec![0; spec.writers],
                    epoch: 1,
                    ..Default::default()
                },
            ),
        )
        .await?;
        ensure!(
            c.status == 0
                && c.committed_primary_ids.len() == primary_ids.len()
                && c.committed_replica_ids.len() == replica_ids.len(),
            "celeborn CommitFiles on {worker}: status {}, {}/{} primaries, {}/{} replicas",
            c.status,
            c.committed_primary_ids.len(),
            primary_ids.len(),
            c.committed_replica_ids.len(),
            replica_ids.len()
        );
    }
    Ok(())
}

/// Partition `p` from its primary, else from its replica.
async fn fetch(
    shuffle_key: &str,
    p: i32,
    owners: &Owners,
    acked: &Acked,
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let mut last = None;
    for (mode, worker) in [(0, &owners.primary[&p]), (1, &owners.replica[&p])] {
        let t = Instant::now();
        let what = || format!("celeborn fetch of partition {p} from {worker}");
        match step(what, fetch_from(shuffle_key, p, mode, worker)).await {
            Ok(decoded) => {
                probe.fetch(t.elapsed());
                return Ok(acked.check(p, &decoded));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("two copies"))
}

async fn fetch_from(
    shuffle_key: &str,
    p: i32,
    mode: i32,
    worker: &str,
) -> anyhow::Result<record::Decoded> {
    let conn = Connection::connect(worker_addr(worker, 2)?).await?;
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: shuffle_key.to_string(),
            file_name: format!("{p}-0-{mode}"),
            start_index: 0,
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    let reply = TransportMessage::from_bytes(conn.data_rpc(&open).await?)?
        .context("empty OpenStream reply")?;
    let handle: PbStreamHandler = decode(&reply)?;
    let mut seen = HashSet::new();
    let mut out = record::Decoded::default();
    for c in 0..handle.num_chunks {
        let chunk = conn.fetch_chunk(handle.stream_id, c).await?;
        for (map, attempt, batch_id, data) in parse_batches(&chunk)? {
            if !seen.insert((map, attempt, batch_id)) {
                continue;
            }
            let d = record::decode(&data);
            out.records.extend(d.records);
            out.corrupt += d.corrupt;
        }
    }
    Ok(out)
}
