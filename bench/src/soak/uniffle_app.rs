//! One soak application through the Uniffle protocol: assignments with two
//! replicas from whichever coordinator answers, every block sent to both,
//! block ids reported, then every partition read back from the first
//! replica that returns all of its reported blocks, as the stock client
//! does (it checks the read block ids against the reported ones and moves
//! to the next replica on a shortfall).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use anyhow::ensure;
use bytes::BytesMut;
use switchyard_clients::uniffle::{
    ClientBlock, Coordinator, ReadOptions, ShuffleServer, Transport,
};
use switchyard_uniffle::bitmap::IdBitmap;
use switchyard_uniffle::proto::ShuffleServerId;

use super::ledger::{Acked, Verdict};
use super::probe::Probe;
use super::record;
use super::spec::AppSpec;
use super::step;

/// Records a block holds at most.
const RECORDS_PER_BLOCK: usize = 4;
/// Blocks per sendShuffleData.
const BLOCKS_PER_SEND: usize = 8;

struct Job<'a> {
    app: &'a str,
    spec: &'a AppSpec,
    transport: Transport,
    owners: HashMap<i32, Vec<ShuffleServerId>>,
    probe: &'a Probe,
}

/// Runs one attempt of `spec` as application `app`; an error is what the
/// client saw (the caller reruns the application).
pub async fn run(
    app: &str,
    spec: &AppSpec,
    transport: Transport,
    coordinators: &[String],
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let owners = assign(app, spec, transport, coordinators).await?;
    let servers = servers_of(&owners);
    let job = Job {
        app,
        spec,
        transport,
        owners,
        probe,
    };
    let result = write_and_read(&job, &servers).await;
    // Unregister on every path, on every server that answers; one that
    // does not expires the application by itself.
    for s in &servers {
        let unregister = async {
            let mut c = ShuffleServer::connect(s, transport).await?;
            c.unregister_app(app).await
        };
        let _ = step(String::new, unregister).await;
    }
    result
}

async fn write_and_read(job: &Job<'_>, servers: &[ShuffleServerId]) -> anyhow::Result<Verdict> {
    for s in servers {
        let ranges: Vec<(i32, i32)> = job
            .owners
            .iter()
            .filter(|(_, owners)| owners.contains(s))
            .map(|(p, _)| (*p, *p))
            .collect();
        let mut c = step(
            || format!("uniffle connect {}", s.id),
            ShuffleServer::connect(s, job.transport),
        )
        .await?;
        step(
            || format!("uniffle registerShuffle on {}", s.id),
            c.register_shuffle(job.app, 0, &ranges),
        )
        .await?;
    }
    let mut acked = Acked::default();
    let writes = (0..job.spec.writers).map(|w| write(job, w));
    for ids in futures::future::try_join_all(writes).await? {
        for (p, ids) in ids {
            acked.add(p, ids);
        }
    }
    let mut verdict = Verdict::default();
    for p in 0..job.spec.partitions() {
        verdict += read(job, p, &acked).await?;
    }
    Ok(verdict)
}

async fn assign(
    app: &str,
    spec: &AppSpec,
    transport: Transport,
    coordinators: &[String],
) -> anyhow::Result<HashMap<i32, Vec<ShuffleServerId>>> {
    let mut last = None;
    for address in coordinators {
        let attempt = async {
            let mut c = Coordinator::connect(address).await?;
            c.assignments_replicated(app, 0, spec.partitions(), transport, 2)
                .await
        };
        match step(|| format!("coordinator {address}"), attempt).await {
            Ok(assignments) => {
                let mut owners = HashMap::new();
                for a in assignments {
                    ensure!(
                        a.server.len() == 2,
                        "asked for 2 replicas, got {}",
                        a.server.len()
                    );
                    for p in a.start_partition..=a.end_partition {
                        owners.insert(p, a.server.clone());
                    }
                }
                ensure!(
                    owners.len() == spec.records.len(),
                    "assignments miss partitions"
                );
                return Ok(owners);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("no coordinator"))
        .context("uniffle getShuffleAssignments"))
}

fn servers_of(owners: &HashMap<i32, Vec<ShuffleServerId>>) -> Vec<ShuffleServerId> {
    let mut out: Vec<ShuffleServerId> = Vec::new();
    for s in owners.values().flatten() {
        if !out.iter().any(|o| o.id == s.id) {
            out.push(s.clone());
        }
    }
    out
}

/// Map task `w`: sends its blocks to both replicas, then reports their
/// ids; returns the records of every acknowledged block by partition.
async fn write(job: &Job<'_>, w: usize) -> anyhow::Result<HashMap<i32, Vec<u64>>> {
    let mut by_partition: HashMap<i32, Vec<u64>> = HashMap::new();
    for (p, id) in job.spec.records_of(w) {
        by_partition.entry(p).or_default().push(id);
    }
    let mut clients: HashMap<String, ShuffleServer> = HashMap::new();
    let mut pending: HashMap<String, Vec<(i32, Vec<ClientBlock>)>> = HashMap::new();
    let mut reported: HashMap<String, HashMap<i32, Vec<i64>>> = HashMap::new();
    let mut block_seq = 0i64;
    for (p, ids) in &by_partition {
        for chunk in ids.chunks(RECORDS_PER_BLOCK) {
            let mut data = BytesMut::new();
            for id in chunk {
                record::encode_into(&mut data, *id, *p, job.spec.record_len);
            }
            let data = data.freeze();
            block_seq += 1;
            let block_id = (block_seq << 42) | (i64::from(*p) << 22) | w as i64;
            for owner in &job.owners[p] {
                reported
                    .entry(owner.id.clone())
                    .or_default()
                    .entry(*p)
                    .or_default()
                    .push(block_id);
                let batch = pending.entry(owner.id.clone()).or_default();
                let block = ClientBlock::new(block_id, w as i64, data.clone());
                match batch.iter_mut().find(|(q, _)| q == p) {
                    Some((_, blocks)) => blocks.push(block),
                    None => batch.push((*p, vec![block])),
                }
                if batch.iter().map(|(_, b)| b.len()).sum::<usize>() >= BLOCKS_PER_SEND {
                    let batch = pending.remove(&owner.id).expect("just added");
                    send(job, &mut clients, owner, batch).await?;
                }
            }
        }
    }
    for (server, batch) in std::mem::take(&mut pending) {
        let owner = job
            .owners
            .values()
            .flatten()
            .find(|s| s.id == server)
            .expect("owner")
            .clone();
        send(job, &mut clients, &owner, batch).await?;
    }
    for (server, ids) in reported {
        let c = clients.get_mut(&server).expect("sent to it");
        step(
            || format!("uniffle reportShuffleResult on {server}"),
            c.report(job.app, 0, w as i64, ids),
        )
        .await?;
    }
    Ok(by_partition)
}

async fn send(
    job: &Job<'_>,
    clients: &mut HashMap<String, ShuffleServer>,
    owner: &ShuffleServerId,
    batch: Vec<(i32, Vec<ClientBlock>)>,
) -> anyhow::Result<()> {
    if !clients.contains_key(&owner.id) {
        let c = step(
            || format!("uniffle connect {}", owner.id),
            ShuffleServer::connect(owner, job.transport),
        )
        .await?;
        clients.insert(owner.id.clone(), c);
    }
    let t = Instant::now();
    let c = clients.get_mut(&owner.id).expect("connected");
    step(
        || format!("uniffle sendShuffleData to {}", owner.id),
        c.send(job.app, 0, batch),
    )
    .await?;
    job.probe.push(t.elapsed());
    Ok(())
}

/// Partition `p` from the first replica that has every reported block.
async fn read(job: &Job<'_>, p: i32, acked: &Acked) -> anyhow::Result<Verdict> {
    let owners = &job.owners[&p];
    // The reported ids: the union of what the replicas that answer know.
    let mut expected = IdBitmap::new();
    for s in owners {
        let ask = async {
            let mut c = ShuffleServer::connect(s, job.transport).await?;
            c.shuffle_result(job.app, 0, vec![p]).await
        };
        if let Ok(ids) = step(String::new, ask).await {
            expected.union_with(&ids);
        }
    }
    ensure!(
        !expected.is_empty() || acked_is_empty(acked, p),
        "uniffle getShuffleResult: no replica answered for partition {p}"
    );
    let mut last = None;
    for s in owners {
        let t = Instant::now();
        let attempt = async {
            let mut c = ShuffleServer::connect(s, job.transport).await?;
            c.read_partition(job.app, 0, p, &expected, ReadOptions::default())
                .await
        };
        match step(
            || format!("uniffle read of partition {p} on {}", s.id),
            attempt,
        )
        .await
        {
            Ok(blocks) => {
                job.probe.fetch(t.elapsed());
                let got: HashSet<i64> = blocks.iter().map(|b| b.block_id).collect();
                if got.len() as u64 != expected.len() {
                    last = Some(anyhow::anyhow!(
                        "uniffle read of partition {p} on {}: {} of {} reported blocks",
                        s.id,
                        got.len(),
                        expected.len()
                    ));
                    continue;
                }
                let mut decoded = record::Decoded::default();
                for b in &blocks {
                    let d = record::decode(&b.data);
                    decoded.records.extend(d.records);
                    decoded.corrupt += d.corrupt;
                }
                return Ok(acked.check(p, &decoded));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("two replicas"))
}

fn acked_is_empty(acked: &Acked, p: i32) -> bool {
    acked.check(p, &record::Decoded::default()).lost == 0
}
