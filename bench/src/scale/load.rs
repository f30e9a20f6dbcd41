//! What the scale bench asks of the node through the two protocols' real
//! RPCs: applications registered, their partitions written (one small
//! block or batch each) and committed, kept alive by heartbeats, read back
//! and checked, and unregistered.

use std::collections::HashMap;
use std::net::SocketAddr;

use anyhow::{ensure, Context};
use bytes::Bytes;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};
use switchyard_clients::uniffle::{ClientBlock, ShuffleServer, Transport};
use switchyard_uniffle::proto::{AppHeartBeatRequest, ShuffleServerId};

use crate::lifecycle::{self, SlotRequest};

/// Partitions per sendShuffleData or PushMergedData request when loading.
const PER_REQUEST: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Uniffle,
    Celeborn,
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

/// Heartbeat, then per shuffle: RequestSlots, ReserveSlots, one merged push
/// per few hundred partitions, CommitFiles.
pub async fn load_celeborn(ep: &Endpoints, app: &HeldApp) -> anyhow::Result<()> {
    let master = ep.master().await?;
    lifecycle::heartbeat(&master, &app.id).await?;
    let push = Connection::connect(ep.push_addr()?).await?;
    for shuffle in 0..app.shuffles {
        reserve(&master, &app.id, shuffle, app.partitions).await?;
        let key = switchyard_celeborn::ShuffleKey::new(&app.id, shuffle).to_string();
        let all: Vec<i32> = (0..app.partitions).collect();
        for chunk in all.chunks(PER_REQUEST) {
            let batches: Vec<(String, Bytes)> = chunk
                .iter()
                .map(|&p| (unique_id(p), batch(0, 0, p, &payload(&app.id, shuffle, p))))
                .collect();
            let r = push.push_merged(&key, &batches).await?;
            // Empty, or one status byte per merged push: 0 is SUCCESS.
            ensure!(r.iter().all(|&b| b == 0), "PushMergedData answered {r:?}");
        }
        commit(ep, &app.id, shuffle, &all).await?;
    }
    Ok(())
}

/// RequestSlots and ReserveSlots for `partitions` partitions of one shuffle.
pub async fn reserve(
    master: &Connection,
    app: &str,
    shuffle: i32,
    partitions: i32,
) -> anyhow::Result<String> {
    let request = SlotRequest {
        partitions: (0..partitions).collect(),
        replicate: false,
        rack_aware: false,
        map_partitions: false,
    };
    let slots = lifecycle::request_shuffle_slots(master, app, shuffle, &request).await?;
    let reserved = lifecycle::reserve_shuffle_slots(app, shuffle, &slots, &request).await?;
    ensure!(
        reserved.len() == 1,
        "slots on {} workers, one expected",
        reserved.len()
    );
    Ok(reserved[0].0.clone())
}

async fn commit(ep: &Endpoints, app: &str, shuffle: i32, partitions: &[i32]) -> anyhow::Result<()> {
    let ids: Vec<String> = partitions.iter().map(|&p| unique_id(p)).collect();
    let c = lifecycle::commit_files(
        &ep.celeborn_worker,
        PbCommitFiles {
            application_id: app.to_string(),
            shuffle_id: shuffle,
            primary_ids: ids.clone(),
            map_attempts: vec![0],
            epoch: 1,
            ..Default::default()
        },
    )
    .await?;
    ensure!(
        c.status == 0 && c.committed_primary_ids.len() == ids.len(),
        "CommitFiles: status {}, {} of {} committed",
        c.status,
        c.committed_primary_ids.len(),
        ids.len()
    );
    Ok(())
}

/// One connection of each protocol, for reads, heartbeats and removals.
pub struct Clients {
    pub uniffle: ShuffleServer,
    pub master: Connection,
    pub fetch: Connection,
}

impl Clients {
    pub async fn connect(ep: &Endpoints) -> anyhow::Result<Clients> {
        Ok(Clients {
            uniffle: ep.uniffle().await?,
            master: ep.master().await?,
            fetch: Connection::connect(ep.fetch_addr()?).await?,
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
            Protocol::Celeborn => lifecycle::heartbeat(&self.master, &app.id).await,
        }
    }

    /// Reads one partition back and checks its bytes.
    pub async fn read(&mut self, app: &HeldApp, shuffle: i32, p: i32) -> anyhow::Result<()> {
        let want = payload(&app.id, shuffle, p);
        let got = match app.protocol {
            Protocol::Uniffle => self.read_uniffle(&app.id, shuffle, p).await?,
            Protocol::Celeborn => self.read_celeborn(&app.id, shuffle, p).await?,
        };
        ensure!(
            got == want,
            "{} shuffle {shuffle} partition {p}: bytes differ",
            app.id
        );
        Ok(())
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
    async fn read_celeborn(&mut self, app: &str, shuffle: i32, p: i32) -> anyhow::Result<Bytes> {
        let open = TransportMessage::new(
            MessageType::OpenStream,
            &PbOpenStream {
                shuffle_key: switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string(),
                file_name: format!("{p}-0-0"),
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
            Protocol::Celeborn => lifecycle::application_lost(&self.master, &app.id).await,
        }
    }
}
