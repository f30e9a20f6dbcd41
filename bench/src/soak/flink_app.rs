//! One soak application through Celeborn's map partitions, as Flink's
//! client drives them: a MAP slot per map task, a handshake, regions of
//! buffers in sub-partition order, each map task's own commit (Celeborn's
//! MapPartitionCommitHandler), then every sub-partition read from every
//! map partition through a credit stream. Celeborn keeps no replica of a
//! map partition: a worker lost mid-job fails the attempt, and Flink's
//! answer, rerunning it, is what the soak does.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use anyhow::{ensure, Context};
use bytes::{Bytes, BytesMut};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use switchyard_celeborn::frame::Message;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::Connection;
use tokio::sync::mpsc::UnboundedReceiver;

use super::ledger::{Acked, Verdict};
use super::probe::Probe;
use super::record;
use super::spec::AppSpec;
use super::step;
use crate::flink::{buffer, control};
use crate::lifecycle::{self, worker_addr, SlotRequest};

/// Soak records one Flink buffer packs at most.
const RECORDS_PER_BUFFER: usize = 4;
/// Regions each map task writes (each in sub-partition order).
const REGIONS: usize = 2;
/// Pushes in flight on one connection, as the client pipelines them.
const IN_FLIGHT: usize = 8;
/// Credit a reader opens a stream with (more comes from backlogs).
const INITIAL_CREDIT: i32 = 2;
/// Flink's network buffer size, announced in the handshake.
const FLINK_BUFFER: i32 = 32 * 1024;

/// Runs one attempt of `spec` as application `app`: its writers are the
/// map tasks, its partitions the sub-partitions. An error is what the
/// client saw (the caller reruns the application).
pub async fn run(
    app: &str,
    spec: &AppSpec,
    masters: &[String],
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let (master, owner) = slots(app, spec, masters).await?;
    let result = write_and_read(app, spec, &owner, probe).await;
    let _ = step(String::new, lifecycle::application_lost(&master, app)).await;
    result
}

/// One MAP location per map task from whichever master answers; per map
/// task, the worker holding it.
async fn slots(
    app: &str,
    spec: &AppSpec,
    masters: &[String],
) -> anyhow::Result<(Connection, Vec<String>)> {
    let request = SlotRequest {
        partitions: (0..spec.writers as i32).collect(),
        replicate: false,
        rack_aware: false,
        map_partitions: true,
    };
    let mut last = None;
    for address in masters {
        let attempt = async {
            let master = lifecycle::connect_master(address).await?;
            lifecycle::heartbeat(&master, app).await?;
            let slots = lifecycle::request_slots(&master, app, &request).await?;
            let owners = lifecycle::reserve_owners(app, &slots, &request).await?;
            let owner: Option<Vec<String>> = (0..spec.writers as i32)
                .map(|m| owners.primary.get(&m).cloned())
                .collect();
            let owner = owner.context("slots must cover every map task")?;
            anyhow::Ok((master, owner))
        };
        match step(|| format!("master {address}"), attempt).await {
            Ok(found) => return Ok(found),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("no master"))
        .context("celeborn RequestSlots/ReserveSlots of map partitions"))
}

async fn write_and_read(
    app: &str,
    spec: &AppSpec,
    owner: &[String],
    probe: &Probe,
) -> anyhow::Result<Verdict> {
    let key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let maps = (0..spec.writers).map(|m| map_task(app, &key, spec, &owner[m], m, probe));
    let mut acked = Acked::default();
    for ids in futures::future::try_join_all(maps).await? {
        for (sub, ids) in ids {
            acked.add(sub, ids);
        }
    }
    let mut readers = HashMap::new();
    let mut verdict = Verdict::default();
    for sub in 0..spec.partitions() {
        let mut got = record::Decoded::default();
        for (m, worker) in owner.iter().enumerate() {
            let read = read_stream(&mut readers, &key, m, sub, worker, probe).await?;
            got.records.extend(read.records);
            got.corrupt += read.corrupt;
        }
        verdict += acked.check(sub, &got);
    }
    Ok(verdict)
}

/// Map task `m`: its records by sub-partition, acknowledged once its map
/// partition is committed.
async fn map_task(
    app: &str,
    key: &str,
    spec: &AppSpec,
    worker: &str,
    m: usize,
    probe: &Probe,
) -> anyhow::Result<BTreeMap<i32, Vec<u64>>> {
    let mut by_sub: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for (sub, id) in spec.records_of(m) {
        by_sub.entry(sub).or_default().push(id);
    }
    let uid = format!("{m}-0");
    let push = step(
        || format!("celeborn connect push port of {worker}"),
        Connection::connect(worker_addr(worker, 1)?),
    )
    .await?;
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.to_string(),
        partition_unique_id: uid.clone(),
        attempt_id: 0,
        num_partitions: spec.partitions(),
        buffer_size: FLINK_BUFFER,
    };
    let tm = TransportMessage::new(MessageType::PushDataHandShake, &hs);
    step(
        || format!("celeborn PushDataHandShake on {worker}"),
        control(&push, tm),
    )
    .await?;
    for region in 0..REGIONS {
        let w = Region {
            key,
            uid: &uid,
            worker,
            push: &push,
            probe,
        };
        step(
            || format!("celeborn region {region} of map {m} on {worker}"),
            w.write(region, &by_sub, spec.record_len),
        )
        .await?;
    }
    commit(app, worker, m, &uid).await?;
    Ok(by_sub)
}

/// One map task's region writer.
struct Region<'a> {
    key: &'a str,
    uid: &'a str,
    worker: &'a str,
    push: &'a Connection,
    probe: &'a Probe,
}

impl Region<'_> {
    /// RegionStart, this region's share of every sub-partition's records
    /// (the records cut in [`REGIONS`] runs), RegionFinish.
    async fn write(
        &self,
        region: usize,
        by_sub: &BTreeMap<i32, Vec<u64>>,
        record_len: usize,
    ) -> anyhow::Result<()> {
        let start = PbRegionStart {
            mode: 0,
            shuffle_key: self.key.to_string(),
            partition_unique_id: self.uid.to_string(),
            attempt_id: 0,
            current_region_index: region as i32,
            is_broadcast: false,
        };
        control(
            self.push,
            TransportMessage::new(MessageType::RegionStart, &start),
        )
        .await?;
        let mut inflight = FuturesOrdered::new();
        let mut batch = 0;
        for (sub, ids) in by_sub {
            let run = ids.len().div_ceil(REGIONS).max(1);
            let Some(mine) = ids.chunks(run).nth(region) else {
                continue;
            };
            for chunk in mine.chunks(RECORDS_PER_BUFFER) {
                let mut data = BytesMut::new();
                for id in chunk {
                    record::encode_into(&mut data, *id, *sub, record_len);
                }
                batch += 1;
                let t = Instant::now();
                let reply = self
                    .push
                    .push_queued(self.key, self.uid, buffer(*sub, batch, &data))
                    .await?;
                inflight.push_back(async move { (t.elapsed(), reply.await) });
                if inflight.len() >= IN_FLIGHT {
                    self.settle(&mut inflight).await?;
                }
            }
        }
        while !inflight.is_empty() {
            self.settle(&mut inflight).await?;
        }
        let finish = PbRegionFinish {
            mode: 0,
            shuffle_key: self.key.to_string(),
            partition_unique_id: self.uid.to_string(),
            attempt_id: 0,
        };
        control(
            self.push,
            TransportMessage::new(MessageType::RegionFinish, &finish),
        )
        .await
    }

    /// Waits for the oldest push in flight: acknowledged with an empty body.
    async fn settle<F>(&self, inflight: &mut FuturesOrdered<F>) -> anyhow::Result<()>
    where
        F: std::future::Future<
            Output = (
                std::time::Duration,
                switchyard_clients::celeborn::Result<Bytes>,
            ),
        >,
    {
        if let Some((elapsed, reply)) = inflight.next().await {
            let reply = reply.with_context(|| format!("celeborn PushData to {}", self.worker))?;
            ensure!(
                reply.is_empty(),
                "celeborn PushData of a map partition to {} answered {reply:?}",
                self.worker
            );
            self.probe.push(elapsed);
        }
        Ok(())
    }
}

/// The map task's own commit of its map partition.
async fn commit(app: &str, worker: &str, m: usize, uid: &str) -> anyhow::Result<()> {
    let commit = PbCommitFiles {
        application_id: app.to_string(),
        shuffle_id: 0,
        primary_ids: vec![uid.to_string()],
        epoch: m as i64 + 1,
        ..Default::default()
    };
    let c = step(
        || format!("celeborn CommitFiles of map {m} on {worker}"),
        lifecycle::commit_files(worker, commit),
    )
    .await?;
    ensure!(
        c.status == 0 && c.committed_primary_ids == [uid],
        "celeborn CommitFiles of map {m} on {worker}: status {}, committed {:?}",
        c.status,
        c.committed_primary_ids
    );
    Ok(())
}

/// Sub-partition `sub` of map partition `m`, as one credit stream on the
/// worker's fetch port (one connection per worker, one stream at a time).
async fn read_stream(
    readers: &mut HashMap<String, (Connection, UnboundedReceiver<Message>)>,
    key: &str,
    m: usize,
    sub: i32,
    worker: &str,
    probe: &Probe,
) -> anyhow::Result<record::Decoded> {
    if !readers.contains_key(worker) {
        let c = step(
            || format!("celeborn connect fetch port of {worker}"),
            Connection::connect(worker_addr(worker, 2)?),
        )
        .await?;
        let events = c.subscribe();
        readers.insert(worker.to_string(), (c, events));
    }
    let (conn, events) = readers.get_mut(worker).expect("connected");
    let t = Instant::now();
    let file = format!("{m}-0-0");
    let read = step(
        || format!("celeborn credit stream of map {m} sub-partition {sub} from {worker}"),
        conn.read_credit_stream(events, key, &file, (sub, sub), INITIAL_CREDIT),
    )
    .await;
    let read = match read {
        Ok(read) => read,
        Err(e) => {
            // A stream cut short leaves the connection mid-stream.
            readers.remove(worker);
            return Err(e);
        }
    };
    probe.fetch(t.elapsed());
    let mut out = record::Decoded::default();
    for buf in &read.records {
        match unframe(buf, sub) {
            Some(payload) => {
                let d = record::decode(payload);
                out.records.extend(d.records);
                out.corrupt += d.corrupt;
            }
            None => out.corrupt += 1,
        }
    }
    Ok(out)
}

/// The payload of one Flink buffer of sub-partition `sub`; None when its
/// header names another sub-partition or a length it does not have.
fn unframe(buf: &[u8], sub: i32) -> Option<&[u8]> {
    let word = |i: usize| i32::from_be_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    if buf.len() < 16 || word(0) != sub || word(12) as usize != buf.len() - 16 {
        return None;
    }
    Some(&buf[16..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_unframe_to_their_records() {
        let mut data = BytesMut::new();
        record::encode_into(&mut data, 7, 3, 100);
        let buf = buffer(3, 1, &data);
        let payload = unframe(&buf, 3).expect("its own sub-partition");
        assert_eq!(record::decode(payload).records, [(7, 3)]);
        assert!(unframe(&buf, 4).is_none(), "another sub-partition's");
        assert!(unframe(&buf[..buf.len() - 1], 3).is_none(), "cut short");
        assert!(unframe(&buf[..10], 3).is_none(), "no header");
    }
}
