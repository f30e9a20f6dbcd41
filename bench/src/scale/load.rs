//! What the scale bench asks of the node through the two protocols' real
//! RPCs: applications registered, their partitions written (one small
//! block or batch each) and committed, kept alive by heartbeats, read back
//! and checked, and unregistered.

use std::collections::HashMap;
use std::net::SocketAddr;

use anyhow::{ensure, Context};
use bytes::Bytes;
use switchyard_celeborn::frame::Mode;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};
use switchyard_clients::uniffle::{ClientBlock, ShuffleServer, Transport};
use switchyard_uniffle::proto::{AppHeartBeatRequest, ShuffleServerId};

use crate::flink::{buffer, control};
use crate::lifecycle::{self, SlotRequest};

/// Partitions per sendShuffleData or PushMergedData request when loading.
const PER_REQUEST: usize = 500;

/// How an application holds its partitions: the protocol, and for
/// Celeborn the kind of location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Uniffle,
    /// Reduce partitions (Spark): merged pushes, CommitFiles.
    Celeborn,
    /// Map partitions (Flink): one per map task, written in a region
    /// (handshake, RegionStart, PushData, RegionFinish), read through a
    /// credit stream.
    CelebornMap,
    /// Replicas the node holds for a primary on another worker: reserved
    /// as replica locations and pushed on the replicate port, as that
    /// worker forwards them.
    CelebornReplica,
}

impl Protocol {
    /// Whether its applications live on the Celeborn side (heartbeats,
    /// removal, read probes).
    pub fn is_celeborn(self) -> bool {
        self != Protocol::Uniffle
    }
}

/// One application the bench holds on the node.
#[derive(Debug, Clone)]
pub struct HeldApp {
    pub id: String,
    pub protocol: Protocol,
    pub shuffles: i32,
    pub partitions: i32,
}

/// Where the node's two protocols answer.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub uniffle: ShuffleServerId,
    pub celeborn_master: SocketAddr,
    /// The worker's unique id `host:rpc:push:fetch:replicate`.
    pub celeborn_worker: String,
}

impl Endpoints {
    pub fn push_addr(&self) -> anyhow::Result<SocketAddr> {
        lifecycle::worker_addr(&self.celeborn_worker, 1)
    }

    pub fn fetch_addr(&self) -> anyhow::Result<SocketAddr> {
        lifecycle::worker_addr(&self.celeborn_worker, 2)
    }

    pub fn replicate_addr(&self) -> anyhow::Result<SocketAddr> {
        lifecycle::worker_addr(&self.celeborn_worker, 3)
    }

    pub async fn uniffle(&self) -> anyhow::Result<ShuffleServer> {
        Ok(ShuffleServer::connect(&self.uniffle, Transport::Grpc).await?)
    }

    pub async fn master(&self) -> anyhow::Result<Connection> {
        lifecycle::connect_master(&self.celeborn_master.to_string()).await
    }
}

/// The bytes stored in one partition: 64 of them, distinct per partition.
pub fn payload(app: &str, shuffle: i32, partition: i32) -> Bytes {
    let seed = crc32fast::hash(format!("{app}/{shuffle}/{partition}").as_bytes());
    Bytes::from(
        (0..64u32)
            .map(|i| (seed.wrapping_mul(2654435761).wrapping_add(i * 97) >> 7) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// A Uniffle block id as the client lays it out: partition in the middle bits.
pub fn block_id(partition: i32) -> i64 {
    (partition as i64) << 21
}

/// Registers the application's shuffles, sends one block per partition and
/// reports them (which commits them).
pub async fn load_uniffle(ep: &Endpoints, app: &HeldApp) -> anyhow::Result<()> {
    let mut server = ep.uniffle().await?;
    for shuffle in 0..app.shuffles {
        server
            .register_shuffle(&app.id, shuffle, &[(0, app.partitions - 1)])
            .await?;
        let all: Vec<i32> = (0..app.partitions).collect();
        for chunk in all.chunks(PER_REQUEST) {
            let blocks = chunk
                .iter()
                .map(|&p| {
                    let data = payload(&app.id, shuffle, p);
                    (p, vec![ClientBlock::new(block_id(p), 0, data)])
                })
                .collect();
            server.send(&app.id, shuffle, blocks).await?;
        }
        let ids: HashMap<i32, Vec<i64>> = all.iter().map(|&p| (p, vec![block_id(p)])).collect();
        server.report(&app.id, shuffle, 0, ids).await?;
    }
    Ok(())
}

fn unique_id(partition: i32) -> String {
    format!("{partition}-0")
}

/// Loads one application as its kind holds partitions.
pub async fn load(ep: &Endpoints, app: &HeldApp) -> anyhow::Result<()> {
    match app.protocol {
        Protocol::Uniffle => load_uniffle(ep, app).await,
        Protocol::Celeborn | Protocol::CelebornReplica => load_celeborn(ep, app).await,
        Protocol::CelebornMap => load_celeborn_map(ep, app).await,
    }
}

/// Heartbeat, then per shuffle: RequestSlots, ReserveSlots, one merged push
/// per few hundred partitions, CommitFiles. Replicas are pushed on the
/// replicate port and committed as replicas.
pub async fn load_celeborn(ep: &Endpoints, app: &HeldApp) -> anyhow::Result<()> {
    let master = ep.master().await?;
    lifecycle::heartbeat(&master, &app.id).await?;
    let replica = app.protocol == Protocol::CelebornReplica;
    let (mode, port) = match replica {
        true => (Mode::Replica, ep.replicate_addr()?),
        false => (Mode::Primary, ep.push_addr()?),
    };
    let push = Connection::connect(port).await?;
    for shuffle in 0..app.shuffles {
        reserve_as(&master, &app.id, shuffle, app.partitions, app.protocol).await?;
        let key = switchyard_celeborn::ShuffleKey::new(&app.id, shuffle).to_string();
        let all: Vec<i32> = (0..app.partitions).collect();
        for chunk in all.chunks(PER_REQUEST) {
            let batches: Vec<(String, Bytes)> = chunk
                .iter()
                .map(|&p| (unique_id(p), batch(0, 0, p, &payload(&app.id, shuffle, p))))
                .collect();
            let r = push.push_merged_as(mode, &key, &batches).await?;
            // Empty, or one status byte per merged push: 0 is SUCCESS.
            ensure!(r.iter().all(|&b| b == 0), "PushMergedData answered {r:?}");
        }
        commit(ep, &app.id, shuffle, &all, replica, 1).await?;
    }
    Ok(())
}

/// Sub-partitions of each map partition (its readers' parallelism).
pub const MAP_SUBPARTITIONS: i32 = 8;

/// The one record of map partition `p`: its payload in sub-partition
/// `p % MAP_SUBPARTITIONS`, behind Flink's header.
pub fn map_record(app: &str, shuffle: i32, p: i32) -> Bytes {
    buffer(p % MAP_SUBPARTITIONS, 0, &payload(app, shuffle, p))
}

/// Map partitions written at once on one connection while loading.
const MAP_IN_FLIGHT: usize = 32;
/// Map partitions committed together. Flink commits each map task's
/// partition in a CommitFiles of its own epoch as the task ends; groups
/// keep that shape (many epochs per shuffle) at a fraction of the calls.
const MAP_COMMIT_GROUP: usize = 16;

/// Heartbeat, then per shuffle: map slots reserved, every map partition
/// written as a Flink map task writes it (one region of one record), and
/// committed by groups, each group in an epoch of its own.
pub async fn load_celeborn_map(ep: &Endpoints, app: &HeldApp) -> anyhow::Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let master = ep.master().await?;
    lifecycle::heartbeat(&master, &app.id).await?;
    let push = Connection::connect(ep.push_addr()?).await?;
    for shuffle in 0..app.shuffles {
        reserve_as(&master, &app.id, shuffle, app.partitions, app.protocol).await?;
        let key = switchyard_celeborn::ShuffleKey::new(&app.id, shuffle).to_string();
        futures::stream::iter(0..app.partitions)
            .map(|p| write_map_partition(&push, &key, &app.id, shuffle, p))
            .buffer_unordered(MAP_IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        let all: Vec<i32> = (0..app.partitions).collect();
        for (i, group) in all.chunks(MAP_COMMIT_GROUP).enumerate() {
            commit(ep, &app.id, shuffle, group, false, i as i64 + 1).await?;
        }
    }
    Ok(())
}

/// PushDataHandShake, RegionStart, one PushData, RegionFinish.
async fn write_map_partition(
    push: &Connection,
    key: &str,
    app: &str,
    shuffle: i32,
    p: i32,
) -> anyhow::Result<()> {
    let uid = unique_id(p);
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.to_string(),
        partition_unique_id: uid.clone(),
        attempt_id: 0,
        num_partitions: MAP_SUBPARTITIONS,
        buffer_size: 32 << 10,
    };
    control(
        push,
        TransportMessage::new(MessageType::PushDataHandShake, &hs),
    )
    .await?;
    let start = PbRegionStart {
        mode: 0,
        shuffle_key: key.to_string(),
        partition_unique_id: uid.clone(),
        attempt_id: 0,
        current_region_index: 0,
        is_broadcast: false,
    };
    control(
        push,
        TransportMessage::new(MessageType::RegionStart, &start),
    )
    .await?;
    let r = push.push(key, &uid, map_record(app, shuffle, p)).await?;
    ensure!(r.is_empty(), "map push answered {r:?}");
    let finish = PbRegionFinish {
        mode: 0,
        shuffle_key: key.to_string(),
        partition_unique_id: uid,
        attempt_id: 0,
    };
    control(
        push,
        TransportMessage::new(MessageType::RegionFinish, &finish),
    )
    .await
}

/// RequestSlots and ReserveSlots for `partitions` partitions of one shuffle.
pub async fn reserve(
    master: &Connection,
    app: &str,
    shuffle: i32,
    partitions: i32,
) -> anyhow::Result<String> {
    reserve_as(master, app, shuffle, partitions, Protocol::Celeborn).await
}

/// RequestSlots, then ReserveSlots of those locations as `kind` holds
/// them: reduce or map primaries, or (for replicas) the same locations
/// reserved as replicas alone, as a primary worker's peer gets them.
async fn reserve_as(
    master: &Connection,
    app: &str,
    shuffle: i32,
    partitions: i32,
    kind: Protocol,
) -> anyhow::Result<String> {
    let request = SlotRequest {
        partitions: (0..partitions).collect(),
        replicate: false,
        rack_aware: false,
        map_partitions: kind == Protocol::CelebornMap,
    };
    let mut slots = lifecycle::request_shuffle_slots(master, app, shuffle, &request).await?;
    if kind == Protocol::CelebornReplica {
        for res in slots.worker_resource.values_mut() {
            let mut primaries = std::mem::take(&mut res.primary_partitions);
            for l in &mut primaries {
                l.mode = Mode::Replica as i32;
            }
            res.replica_partitions = primaries;
        }
    }
    let reserved = lifecycle::reserve_shuffle_slots(app, shuffle, &slots, &request).await?;
    ensure!(
        reserved.len() == 1,
        "slots on {} workers, one expected",
        reserved.len()
    );
    Ok(reserved[0].0.clone())
}

async fn commit(
    ep: &Endpoints,
    app: &str,
    shuffle: i32,
    partitions: &[i32],
    replica: bool,
    epoch: i64,
) -> anyhow::Result<()> {
    let ids: Vec<String> = partitions.iter().map(|&p| unique_id(p)).collect();
    let mut files = PbCommitFiles {
        application_id: app.to_string(),
        shuffle_id: shuffle,
        map_attempts: vec![0],
        epoch,
        ..Default::default()
    };
    match replica {
        true => files.replica_ids = ids.clone(),
        false => files.primary_ids = ids.clone(),
    }
    let c = lifecycle::commit_files(&ep.celeborn_worker, files).await?;
    let committed = match replica {
        true => c.committed_replica_ids.len(),
        false => c.committed_primary_ids.len(),
    };
    ensure!(
        c.status == 0 && committed == ids.len(),
        "CommitFiles: status {}, {committed} of {} committed",
        c.status,
        ids.len()
    );
    Ok(())
}

/// One connection of each protocol, for reads, heartbeats and removals.
pub struct Clients {
    pub uniffle: ShuffleServer,
    pub master: Connection,
    pub fetch: Connection,
    /// The fetch connection's unsolicited frames (credit streams' data).
    events: tokio::sync::mpsc::UnboundedReceiver<switchyard_celeborn::frame::Message>,
}

impl Clients {
    pub async fn connect(ep: &Endpoints) -> anyhow::Result<Clients> {
        let fetch = Connection::connect(ep.fetch_addr()?).await?;
        Ok(Clients {
            uniffle: ep.uniffle().await?,
            master: ep.master().await?,
            events: fetch.subscribe(),
            fetch,
        })
    }

    /// The application's heartbeat, as its client sends it.
    pub async fn heartbeat(&mut self, app: &HeldApp) -> anyhow::Result<()> {
        match app.protocol {
            Protocol::Uniffle => {
                self.uniffle
                    .grpc()
                    .app_heartbeat(AppHeartBeatRequest {
                        app_id: app.id.clone(),
                    })
                    .await?;
                Ok(())
            }
            _ => lifecycle::heartbeat(&self.master, &app.id).await,
        }
    }

    /// Reads one partition back and checks its bytes.
    pub async fn read(&mut self, app: &HeldApp, shuffle: i32, p: i32) -> anyhow::Result<()> {
        let (want, got) = match app.protocol {
            Protocol::Uniffle => (
                payload(&app.id, shuffle, p),
                self.read_uniffle(&app.id, shuffle, p).await?,
            ),
            Protocol::Celeborn | Protocol::CelebornReplica => (
                payload(&app.id, shuffle, p),
                self.read_celeborn(app, shuffle, p).await?,
            ),
            Protocol::CelebornMap => (
                map_record(&app.id, shuffle, p),
                self.read_map(&app.id, shuffle, p).await?,
            ),
        };
        ensure!(
            got == want,
            "{} shuffle {shuffle} partition {p}: bytes differ",
            app.id
        );
        Ok(())
    }

    /// A credit stream over the record's sub-partition of map partition `p`.
    async fn read_map(&mut self, app: &str, shuffle: i32, p: i32) -> anyhow::Result<Bytes> {
        let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
        let sub = p % MAP_SUBPARTITIONS;
        let file = format!("{}-0", unique_id(p));
        let mut read = self
            .fetch
            .read_credit_stream(&mut self.events, &key, &file, (sub, sub), 2)
            .await?;
        ensure!(
            read.records.len() == 1,
            "{app} {shuffle}/{p}: {} records",
            read.records.len()
        );
        Ok(read.records.remove(0))
    }

    /// getLocalShuffleIndex, then getLocalShuffleData of the whole file.
    async fn read_uniffle(&mut self, app: &str, shuffle: i32, p: i32) -> anyhow::Result<Bytes> {
        let (index, len) = self.uniffle.index(app, shuffle, p).await?;
        ensure!(
            index.len() == 40,
            "{app} {shuffle}/{p}: index of {} bytes",
            index.len()
        );
        let len = i32::try_from(len).context("data length")?;
        Ok(self.uniffle.data(app, shuffle, p, 0, len).await?)
    }

    /// OpenStream and the first chunk; the one batch's data.
    async fn read_celeborn(
        &mut self,
        held: &HeldApp,
        shuffle: i32,
        p: i32,
    ) -> anyhow::Result<Bytes> {
        let app = held.id.as_str();
        let mode = u8::from(held.protocol == Protocol::CelebornReplica);
        let open = TransportMessage::new(
            MessageType::OpenStream,
            &PbOpenStream {
                shuffle_key: switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string(),
                file_name: format!("{p}-0-{mode}"),
                start_index: 0,
                end_index: i32::MAX,
                ..Default::default()
            },
        );
        let reply = TransportMessage::from_bytes(self.fetch.data_rpc(&open).await?)?
            .context("empty OpenStream reply")?;
        let h: PbStreamHandler = decode(&reply)?;
        ensure!(
            h.num_chunks == 1,
            "{app} {shuffle}/{p}: {} chunks",
            h.num_chunks
        );
        let chunk = self.fetch.fetch_chunk(h.stream_id, 0).await?;
        // As a real reader does: the node would otherwise hold every
        // stream read back until its idle timeout.
        self.fetch.end_stream(h.stream_id).await?;
        let mut batches = parse_batches(&chunk)?;
        ensure!(
            batches.len() == 1,
            "{app} {shuffle}/{p}: {} batches",
            batches.len()
        );
        Ok(batches.remove(0).3)
    }

    /// unregisterShuffleByAppId, or ApplicationLost.
    pub async fn remove(&mut self, app: &HeldApp) -> anyhow::Result<()> {
        match app.protocol {
            Protocol::Uniffle => Ok(self.uniffle.unregister_app(&app.id).await?),
            _ => lifecycle::application_lost(&self.master, &app.id).await,
        }
    }
}
