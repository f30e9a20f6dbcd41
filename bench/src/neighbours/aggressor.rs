//! The aggressor: several applications of one protocol, each writing as
//! fast as the node acknowledges, skewed (one partition gets 20 times the
//! bytes of each other), then committing and reading every partition back,
//! its bytes checked against what was acknowledged; then the next
//! application, until told to stop. What it measures is the bytes the node
//! acknowledged: the throughput a neighbour must not cost it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use bytes::Bytes;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::{StatusCode, TransportMessage};
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};
use switchyard_clients::uniffle::{
    ClientBlock, Coordinator, ReadOptions, ShuffleServer, Transport,
};
use switchyard_uniffle::proto::ShuffleServerId;

use crate::harness;
use crate::lifecycle::{self, worker_addr, SlotRequest};

/// The hot partition gets this many times the bytes of each other one.
pub const SKEW: usize = 20;
/// A Celeborn push (the Spark client's default buffer).
const BATCH: usize = 64 << 10;
/// A Uniffle block, and blocks per sendShuffleData.
const BLOCK: usize = 256 << 10;
const BLOCKS_PER_SEND: usize = 4;
/// How long stopping may take: the applications' cleanup, not their work.
const STOP_WITHIN: Duration = Duration::from_secs(120);
/// The wait before asking a master with no slots to offer again (the stock
/// client's `celeborn.client.registerShuffle.retryWait` is 3 s; shorter
/// here, so that the aggressor loses little time once slots are back).
const SLOT_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    Celeborn,
    Uniffle,
}

#[derive(Debug, Clone)]
pub struct AggressorOptions {
    pub protocol: Protocol,
    /// Applications at once; each has `mappers` writers.
    pub apps: usize,
    pub mappers: usize,
    pub partitions: i32,
    /// Bytes one application writes before it commits and reads back.
    pub app_size: u64,
    pub celeborn_master: String,
    pub uniffle_coordinator: String,
    pub transport: Transport,
}

/// What the applications share: the counters and the stop flag.
struct Shared {
    o: AggressorOptions,
    acked: AtomicU64,
    completed: AtomicU64,
    /// RequestSlots answered "no slots now" (retried after [`SLOT_RETRY`]).
    slot_waits: AtomicU64,
    stop: AtomicBool,
    pattern: Bytes,
}

pub struct Aggressor {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Aggressor {
    /// Starts `apps` loops of applications, one after the other in each,
    /// on `runtime`.
    pub fn start(o: AggressorOptions, runtime: &tokio::runtime::Handle) -> Aggressor {
        let shared = Arc::new(Shared {
            o,
            acked: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            slot_waits: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            pattern: harness::pattern(),
        });
        let tasks = (0..shared.o.apps)
            .map(|slot| {
                let s = shared.clone();
                runtime.spawn(async move { app_loop(s, slot).await })
            })
            .collect();
        Aggressor { shared, tasks }
    }

    /// Bytes the node has acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.shared.acked.load(Ordering::Relaxed)
    }

    /// Applications written, committed and read back in full so far.
    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }

    /// RequestSlots the master answered with no slots so far.
    pub fn slot_waits(&self) -> u64 {
        self.shared.slot_waits.load(Ordering::Relaxed)
    }

    /// Whether a loop ended early (with the error [`Aggressor::stop`] returns).
    pub fn failed(&self) -> bool {
        self.tasks.iter().any(|t| t.is_finished())
    }

    /// Stops the writers, waits for the applications to clean up, and
    /// returns the first error any of them met.
    pub async fn stop(self) -> anyhow::Result<()> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut first = Ok(());
        for t in self.tasks {
            let r = match tokio::time::timeout(STOP_WITHIN, t).await {
                Err(_) => Err(anyhow::anyhow!(
                    "an aggressor application did not stop within {STOP_WITHIN:?}"
                )),
                Ok(joined) => joined.context("an aggressor task panicked")?,
            };
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// `len` bytes of the pattern for item `i` (a batch or block).
    fn slice(&self, i: usize, len: usize) -> &[u8] {
        let start = (i * 7919) % (self.pattern.len() - len);
        &self.pattern[start..start + len]
    }
}

/// Item `i`'s partition: of every `SKEW + partitions - 1` items, the first
/// `SKEW` go to partition 0 and one to each other.
pub fn skewed_partition(i: usize, partitions: i32) -> i32 {
    let k = i % (SKEW + partitions as usize - 1);
    if k < SKEW {
        0
    } else {
        (k - SKEW + 1) as i32
    }
}

/// Applications one after the other until stopped; an error ends the loop.
async fn app_loop(s: Arc<Shared>, slot: usize) -> anyhow::Result<()> {
    for n in 0.. {
        if s.stopped() {
            return Ok(());
        }
        let app = format!("{}-{slot}-{n}", harness::app_id("aggressor"));
        let complete = match s.o.protocol {
            Protocol::Celeborn => celeborn_app(&s, &app).await,
            Protocol::Uniffle => uniffle_app(&s, &app).await,
        }
        .with_context(|| format!("aggressor application {app}"))?;
        if complete {
            s.completed.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Items (batches or blocks) of `size` bytes that mapper `m` writes: every
/// `mappers`-th of the application's.
fn items_of(s: &Shared, m: usize, size: usize) -> impl Iterator<Item = usize> {
    let total = (s.o.app_size as usize).div_ceil(size);
    (m..total).step_by(s.o.mappers)
}

/// Per partition, the bytes several writers had acknowledged.
fn sum_by_partition(parts: Vec<HashMap<i32, u64>>) -> HashMap<i32, u64> {
    let mut all = HashMap::new();
    for part in parts {
        for (p, bytes) in part {
            *all.entry(p).or_insert(0) += bytes;
        }
    }
    all
}

/// One Celeborn application (as Spark's client): slots, pushes, CommitFiles,
/// every partition fetched; ApplicationLost on every path. False when
/// stopped before its commit.
async fn celeborn_app(s: &Shared, app: &str) -> anyhow::Result<bool> {
    let master = lifecycle::connect_master(&s.o.celeborn_master).await?;
    lifecycle::heartbeat(&master, app).await?;
    let request = SlotRequest {
        partitions: (0..s.o.partitions).collect(),
        replicate: false,
        rack_aware: false,
        map_partitions: false,
    };
    let Some(slots) = slots_when_offered(s, &master, app, &request).await? else {
        let _ = lifecycle::application_lost(&master, app).await;
        return Ok(false);
    };
    let owners = lifecycle::reserve_owners(app, &slots, &request).await?;
    ensure!(
        owners.primary.len() == s.o.partitions as usize,
        "slots cover {} of {} partitions",
        owners.primary.len(),
        s.o.partitions
    );
    let key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let result = async {
        let pushes = (0..s.o.mappers).map(|m| celeborn_push(s, &key, &owners.primary, m));
        let acked = sum_by_partition(futures::future::try_join_all(pushes).await?);
        if s.stopped() {
            return Ok(false);
        }
        celeborn_commit(s, app, &owners.primary).await?;
        for (p, worker) in &owners.primary {
            let read = celeborn_fetch(&key, *p, worker).await?;
            let want = acked.get(p).copied().unwrap_or(0);
            ensure!(
                read == want,
                "partition {p}: read back {read} bytes, {want} acknowledged"
            );
        }
        Ok(true)
    }
    .await;
    let _ = lifecycle::application_lost(&master, app).await;
    result
}

/// RequestSlots until the master offers them (or the aggressor stops):
/// a master that excludes a busy worker (the JVM master, while its only
/// worker has paused pushes) answers WORKER_EXCLUDED or SLOT_NOT_AVAILABLE,
/// and a big job's driver retries its registration.
async fn slots_when_offered(
    s: &Shared,
    master: &Connection,
    app: &str,
    request: &SlotRequest,
) -> anyhow::Result<Option<PbRequestSlotsResponse>> {
    let retry = [StatusCode::SlotNotAvailable, StatusCode::WorkerExcluded].map(StatusCode::as_i32);
    loop {
        let slots = lifecycle::ask_shuffle_slots(master, app, 0, request).await?;
        if !retry.contains(&slots.status) {
            ensure!(slots.status == 0, "RequestSlots status {}", slots.status);
            return Ok(Some(slots));
        }
        s.slot_waits.fetch_add(1, Ordering::Relaxed);
        if s.stopped() {
            return Ok(None);
        }
        tokio::time::sleep(SLOT_RETRY).await;
    }
}

async fn celeborn_push(
    s: &Shared,
    key: &str,
    primary: &HashMap<i32, String>,
    m: usize,
) -> anyhow::Result<HashMap<i32, u64>> {
    let mut conns: HashMap<&String, Connection> = HashMap::new();
    let mut acked = HashMap::new();
    for (batch_id, i) in items_of(s, m, BATCH).enumerate() {
        if s.stopped() {
            break;
        }
        let p = skewed_partition(i, s.o.partitions);
        let worker = &primary[&p];
        if !conns.contains_key(worker) {
            conns.insert(worker, Connection::connect(worker_addr(worker, 1)?).await?);
        }
        let data = batch(m as i32, 0, batch_id as i32 + 1, s.slice(i, BATCH));
        let reply = conns[worker].push(key, &format!("{p}-0"), data).await?;
        ensure!(reply.is_empty(), "PushData answered {reply:?}");
        *acked.entry(p).or_insert(0) += BATCH as u64;
        s.acked.fetch_add(BATCH as u64, Ordering::Relaxed);
    }
    Ok(acked)
}

async fn celeborn_commit(
    s: &Shared,
    app: &str,
    primary: &HashMap<i32, String>,
) -> anyhow::Result<()> {
    let mut by_worker: HashMap<&String, Vec<String>> = HashMap::new();
    for (p, w) in primary {
        by_worker.entry(w).or_default().push(format!("{p}-0"));
    }
    for (worker, ids) in by_worker {
        let commit = PbCommitFiles {
            application_id: app.to_string(),
            shuffle_id: 0,
            primary_ids: ids.clone(),
            map_attempts: vec![0; s.o.mappers],
            epoch: 1,
            ..Default::default()
        };
        let c = lifecycle::commit_files(worker, commit).await?;
        ensure!(
            c.status == 0 && c.committed_primary_ids.len() == ids.len(),
            "CommitFiles on {worker}: status {}, {} of {} committed",
            c.status,
            c.committed_primary_ids.len(),
            ids.len()
        );
    }
    Ok(())
}

/// Partition `p`'s data bytes, every chunk fetched and its batches parsed.
async fn celeborn_fetch(key: &str, p: i32, worker: &str) -> anyhow::Result<u64> {
    let fetch = Connection::connect(worker_addr(worker, 2)?).await?;
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: key.to_string(),
            file_name: format!("{p}-0-0"),
            start_index: 0,
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    let reply = TransportMessage::from_bytes(fetch.data_rpc(&open).await?)?
        .context("empty OpenStream reply")?;
    let h: PbStreamHandler = decode(&reply)?;
    let mut bytes = 0;
    for c in 0..h.num_chunks {
        let chunk = fetch.fetch_chunk(h.stream_id, c).await?;
        for (_, _, _, data) in parse_batches(&chunk)? {
            bytes += data.len() as u64;
        }
    }
    Ok(bytes)
}

/// One Uniffle application: assignments, sends (requireBuffer retried while
/// the node answers NO_BUFFER), reports, every partition read with its
/// blocks' CRCs checked; unregistered on every path. False when stopped
/// before it reported.
async fn uniffle_app(s: &Shared, app: &str) -> anyhow::Result<bool> {
    let mut coordinator = Coordinator::connect(&s.o.uniffle_coordinator).await?;
    let assignments = coordinator
        .assignments(app, 0, s.o.partitions, s.o.transport)
        .await
        .context("getShuffleAssignments")?;
    let mut owners: HashMap<i32, ShuffleServerId> = HashMap::new();
    let mut ranges: HashMap<String, (ShuffleServerId, Vec<(i32, i32)>)> = HashMap::new();
    for a in &assignments {
        let server = a.server.first().context("an assignment without a server")?;
        for p in a.start_partition..=a.end_partition {
            owners.insert(p, server.clone());
        }
        let entry = ranges
            .entry(server.id.clone())
            .or_insert_with(|| (server.clone(), Vec::new()));
        entry.1.push((a.start_partition, a.end_partition));
    }
    ensure!(
        owners.len() == s.o.partitions as usize,
        "assignments cover {} of {} partitions",
        owners.len(),
        s.o.partitions
    );
    for (server, r) in ranges.values() {
        let mut c = ShuffleServer::connect(server, s.o.transport).await?;
        c.register_shuffle(app, 0, r).await?;
    }
    let result = async {
        let writers = (0..s.o.mappers).map(|m| uniffle_write(s, app, &owners, m));
        let sent = sum_by_partition(futures::future::try_join_all(writers).await?);
        if s.stopped() {
            return Ok(false);
        }
        for (p, server) in &owners {
            let mut c = ShuffleServer::connect(server, s.o.transport).await?;
            let expected = c.shuffle_result(app, 0, vec![*p]).await?;
            let blocks = c
                .read_partition(app, 0, *p, &expected, ReadOptions::default())
                .await?;
            let read: u64 = blocks.iter().map(|b| b.data.len() as u64).sum();
            let want = sent.get(p).copied().unwrap_or(0);
            ensure!(
                read == want,
                "partition {p}: read back {read} bytes, {want} acknowledged"
            );
        }
        Ok(true)
    }
    .await;
    for (server, _) in ranges.values() {
        if let Ok(mut c) = ShuffleServer::connect(server, s.o.transport).await {
            let _ = c.unregister_app(app).await;
        }
    }
    result
}

/// Writer `m`: its blocks, `BLOCKS_PER_SEND` per request to their
/// partition's server, then reportShuffleResult. Stopped writers report
/// nothing.
async fn uniffle_write(
    s: &Shared,
    app: &str,
    owners: &HashMap<i32, ShuffleServerId>,
    m: usize,
) -> anyhow::Result<HashMap<i32, u64>> {
    let mut w = UniffleWriter {
        s,
        app,
        clients: HashMap::new(),
        sent: HashMap::new(),
    };
    let mut pending: HashMap<&str, Vec<(i32, ClientBlock)>> = HashMap::new();
    let mut ids: HashMap<&str, HashMap<i32, Vec<i64>>> = HashMap::new();
    for (seq, i) in items_of(s, m, BLOCK).enumerate() {
        if s.stopped() {
            return Ok(w.sent);
        }
        let p = skewed_partition(i, s.o.partitions);
        let server = &owners[&p];
        // Uniffle's layout: sequence, partition, task attempt.
        let id = ((seq as i64) << 42) | ((p as i64) << 22) | m as i64;
        let data = Bytes::copy_from_slice(s.slice(i, BLOCK));
        ids.entry(server.id.as_str())
            .or_default()
            .entry(p)
            .or_default()
            .push(id);
        let batch = pending.entry(server.id.as_str()).or_default();
        batch.push((p, ClientBlock::new(id, m as i64, data)));
        if batch.len() >= BLOCKS_PER_SEND {
            let batch = pending.remove(server.id.as_str()).expect("just added");
            w.send(server, m, batch).await?;
        }
    }
    for (server, batch) in pending {
        let server = owners.values().find(|o| o.id == server).expect("an owner");
        w.send(server, m, batch).await?;
    }
    if s.stopped() {
        return Ok(w.sent);
    }
    for (server, ids) in ids {
        let client = w
            .clients
            .get_mut(server)
            .context("reported to a server never sent to")?;
        client.report(app, 0, m as i64, ids).await?;
    }
    Ok(w.sent)
}

/// One Uniffle writer's connections and what the node acknowledged of it.
struct UniffleWriter<'a> {
    s: &'a Shared,
    app: &'a str,
    clients: HashMap<String, ShuffleServer>,
    sent: HashMap<i32, u64>,
}

impl UniffleWriter<'_> {
    /// One requireBuffer + sendShuffleData; its bytes count once answered.
    async fn send(
        &mut self,
        server: &ShuffleServerId,
        m: usize,
        batch: Vec<(i32, ClientBlock)>,
    ) -> anyhow::Result<()> {
        if !self.clients.contains_key(&server.id) {
            let c = ShuffleServer::connect(server, self.s.o.transport).await?;
            self.clients.insert(server.id.clone(), c);
        }
        let mut by_partition: Vec<(i32, Vec<ClientBlock>)> = Vec::new();
        let mut bytes: Vec<(i32, u64)> = Vec::new();
        for (p, b) in batch {
            bytes.push((p, b.data.len() as u64));
            match by_partition.iter_mut().find(|(q, _)| *q == p) {
                Some((_, v)) => v.push(b),
                None => by_partition.push((p, vec![b])),
            }
        }
        let client = self.clients.get_mut(&server.id).expect("connected");
        client
            .send(self.app, 0, by_partition)
            .await
            .with_context(|| format!("sendShuffleData of writer {m}"))?;
        for (p, n) in bytes {
            *self.sent.entry(p).or_insert(0) += n;
            self.s.acked.fetch_add(n, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_partition_gets_twenty_times_each_other() {
        let partitions = 8;
        let mut count = vec![0usize; partitions as usize];
        for i in 0..(SKEW + 7) * 100 {
            count[skewed_partition(i, partitions) as usize] += 1;
        }
        assert_eq!(count[0], SKEW * 100);
        assert!(count[1..].iter().all(|&c| c == 100), "{count:?}");
    }
}
