//! The push port (and the replicate port): PushData and PushMergedData
//! batches appended to the store, with Celeborn's reply bytes.
//!
//! A batch is kept verbatim (its 16-byte little-endian header included); the
//! reader parses it. Replies: empty (or `00` for merged pushes) = written;
//! `16` SOFT_SPLIT = written, split soon; `15` HARD_SPLIT = not written,
//! revive and resend; `0F` MAP_ENDED; errors ([`CelebornError`]) as
//! RPC_FAILURE with the status name, which the client matches by prefix.
//!
//! Map partitions (Flink) add a handshake and region start/finish RPCs, and
//! records with a big-endian header whose order within a region matters:
//! those frames are handled in arrival order ([`Handler::ordered`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchyard_frame::traffic::{self, Protocol, Request};

use crate::auth;
use switchyard_storage::{Block, BlockMeta};

use super::state::{Location, ShuffleState, WorkerState};
use crate::frame::{Message, Mode, PushData, PushMergedData};
use crate::modes::SplitMode;
use crate::proto::{
    MessageType, PbPushDataHandShake, PbRegionFinish, PbRegionStart, PbSegmentStart,
};
use crate::server::conn::{Handler, Replier};
use crate::server::error::{CelebornError, MapStage};
use crate::status::StatusCode;
use crate::transport_message::{DataPlaneBody, TransportMessage};

/// A map-partition control request, from its TransportMessage (0.3+) or
/// legacy frame form.
struct MapRequest {
    shuffle_key: String,
    unique_id: String,
    replica: bool,
    control: MapControl,
}

enum MapControl {
    HandShake {
        num_partitions: i32,
        buffer_size: i32,
    },
    RegionStart {
        index: i32,
        broadcast: bool,
    },
    RegionFinish,
    /// Hybrid shuffle: a sub-partition's next segment begins.
    SegmentStart {
        sub_partition: i32,
        segment: i32,
    },
}

impl MapControl {
    /// Its `op` in the request metrics (Celeborn's handshake, region and
    /// segment counts and times).
    fn op(&self) -> &'static str {
        match self {
            MapControl::HandShake { .. } => "handshake",
            MapControl::RegionStart { .. } => "region_start",
            MapControl::RegionFinish => "region_finish",
            MapControl::SegmentStart { .. } => "segment_start",
        }
    }
}

impl MapRequest {
    fn from_transport(tm: &TransportMessage) -> Result<MapRequest, CelebornError> {
        let request = |shuffle_key, unique_id, mode: i32, control| MapRequest {
            shuffle_key,
            unique_id,
            replica: mode == Mode::Replica as i32,
            control,
        };
        let bad = |source| CelebornError::BadPayload {
            message_type: tm.message_type,
            source,
        };
        Ok(match tm.kind() {
            Some(MessageType::PushDataHandShake) => {
                let r: PbPushDataHandShake = tm.decode_payload().map_err(bad)?;
                let control = MapControl::HandShake {
                    num_partitions: r.num_partitions,
                    buffer_size: r.buffer_size,
                };
                request(r.shuffle_key, r.partition_unique_id, r.mode, control)
            }
            Some(MessageType::RegionStart) => {
                let r: PbRegionStart = tm.decode_payload().map_err(bad)?;
                let control = MapControl::RegionStart {
                    index: r.current_region_index,
                    broadcast: r.is_broadcast,
                };
                request(r.shuffle_key, r.partition_unique_id, r.mode, control)
            }
            Some(MessageType::RegionFinish) => {
                let r: PbRegionFinish = tm.decode_payload().map_err(bad)?;
                request(
                    r.shuffle_key,
                    r.partition_unique_id,
                    r.mode,
                    MapControl::RegionFinish,
                )
            }
            Some(MessageType::SegmentStart) => {
                let r: PbSegmentStart = tm.decode_payload().map_err(bad)?;
                let control = MapControl::SegmentStart {
                    sub_partition: r.sub_partition_id,
                    segment: r.segment_id,
                };
                request(r.shuffle_key, r.partition_unique_id, r.mode, control)
            }
            _ => {
                return Err(CelebornError::Unsupported {
                    handler: "the push port",
                    message_type: tm.message_type,
                })
            }
        })
    }

    fn from_legacy(m: Message) -> Result<MapRequest, CelebornError> {
        let (shuffle_key, unique_id, mode, control) = match m {
            Message::PushDataHandShake(h) => (
                h.shuffle_key,
                h.partition_unique_id,
                h.mode,
                MapControl::HandShake {
                    num_partitions: h.num_partitions,
                    buffer_size: h.buffer_size,
                },
            ),
            Message::RegionStart(r) => (
                r.shuffle_key,
                r.partition_unique_id,
                r.mode,
                MapControl::RegionStart {
                    index: r.current_region_index,
                    broadcast: r.is_broadcast,
                },
            ),
            Message::RegionFinish(r) => (
                r.shuffle_key,
                r.partition_unique_id,
                r.mode,
                MapControl::RegionFinish,
            ),
            other => {
                return Err(CelebornError::UnsupportedLegacy(format!(
                    "{:?}",
                    other.message_type()
                )))
            }
        };
        Ok(MapRequest {
            shuffle_key,
            unique_id,
            replica: mode == Mode::Replica,
            control,
        })
    }
}

/// Batches answered HARD_SPLIT (Celeborn's WriteDataHardSplitCount): the
/// client revives their partition and pushes them again elsewhere.
pub const HARD_SPLITS: &str = "switchyard_celeborn_hard_splits_total";

fn hard_splits(batches: u64) {
    metrics::counter!(HARD_SPLITS).increment(batches);
}

/// Above this a SOFT split becomes HARD (`celeborn.worker.shuffle.partitionSplit.max`).
const SPLIT_MAX: u64 = 2 << 30;
/// How long a push waits for memory before failing (the JVM worker stops
/// reading the socket instead; the client's push timeout is 120 s).
const MEMORY_WAIT: Duration = Duration::from_secs(60);

pub struct PushPort {
    state: Arc<WorkerState>,
    port: &'static str,
}

impl PushPort {
    pub fn new(state: Arc<WorkerState>, port: &'static str) -> Arc<Self> {
        Arc::new(PushPort { state, port })
    }
}

/// What to do with one batch.
enum Verdict {
    Write(Arc<Location>, bool /* soft split */),
    Reply(StatusCode),
    Fail(CelebornError),
}

/// mapId and batchId from a batch header (little-endian i32s).
fn header(batch: &[u8]) -> Option<(i32, i32)> {
    if batch.len() < 16 {
        return None;
    }
    let map_id = i32::from_le_bytes(batch[0..4].try_into().ok()?);
    let batch_id = i32::from_le_bytes(batch[8..12].try_into().ok()?);
    Some((map_id, batch_id))
}

fn judge(
    state: &WorkerState,
    shuffle_key: &str,
    shuffle: Option<&Arc<ShuffleState>>,
    uid: &str,
    replica: bool,
    batch: &[u8],
) -> Verdict {
    let Some(shuffle) = shuffle else {
        return Verdict::Fail(CelebornError::PartitionNotFound(format!(
            "unknown shuffle {shuffle_key}"
        )));
    };
    let map_id = header(batch).map(|h| h.0).unwrap_or(-1);
    match shuffle.location(uid, replica) {
        Some(loc) if !loc.committed.load(Ordering::Acquire) => {
            // A stopping worker takes no more batches, as primary or as
            // replica: its clients move to other workers before it closes.
            if state.stopping.load(Ordering::Acquire) {
                return Verdict::Reply(StatusCode::HardSplit);
            }
            if replica {
                return Verdict::Write(loc, false);
            }
            let size = loc.bytes.load(Ordering::Relaxed);
            if size > shuffle.split_threshold.load(Ordering::Relaxed) {
                let soft = shuffle.split_mode() == SplitMode::Soft && size < SPLIT_MAX;
                if soft {
                    Verdict::Write(loc, true)
                } else {
                    Verdict::Reply(StatusCode::HardSplit)
                }
            } else {
                Verdict::Write(loc, false)
            }
        }
        // Committed (or never reserved here): the map ended, or the client
        // must move to a new epoch.
        _ if shuffle.map_ended(map_id) => Verdict::Reply(StatusCode::MapEnded),
        _ => Verdict::Reply(StatusCode::HardSplit),
    }
}

impl PushPort {
    /// Appends one Spark batch, waiting while memory is full.
    async fn append(&self, loc: &Location, batch: Bytes) -> Result<(), CelebornError> {
        let (map_id, batch_id) = header(&batch).ok_or(CelebornError::BadBatch("header"))?;
        self.append_block(loc, batch, map_id as i64, batch_id, Protocol::Celeborn)
            .await
    }

    /// Appends one block, waiting while memory is full.
    async fn append_block(
        &self,
        loc: &Location,
        batch: Bytes,
        map_id: i64,
        batch_id: i32,
        protocol: Protocol,
    ) -> Result<(), CelebornError> {
        let len = batch.len() as u64;
        let block = Block {
            meta: BlockMeta {
                block_id: loc.next_block_id(),
                map_id,
                batch_id: Some(batch_id),
                crc: 0,
                uncompressed_len: 0,
            },
            data: batch,
        };
        match self
            .state
            .store
            .append_waiting(&loc.key, vec![block], MEMORY_WAIT)
            .await
        {
            Ok(()) => {
                loc.bytes.fetch_add(len, Ordering::Relaxed);
                traffic::pushed(protocol, len);
                Ok(())
            }
            // Sealed: HARD_SPLIT; its application expired or was lost: the
            // location is gone (PARTITION_NOT_FOUND); anything else: a write
            // failure of this copy.
            Err(e) => {
                let e = CelebornError::write(e, loc.key.replica);
                if matches!(e, CelebornError::Write { .. }) {
                    tracing::warn!(partition = %loc.key, error = %e, "push failed");
                }
                Err(e)
            }
        }
    }
}

impl Handler<Message> for PushPort {
    fn port(&self) -> &'static str {
        self.port
    }

    fn ordered(&self, message: &Message) -> bool {
        match message {
            Message::PushData(p) => self
                .state
                .shuffle(&p.shuffle_key)
                .is_some_and(|s| s.is_map()),
            // Flink's handshake and regions (Spark sends no RPCs here).
            Message::RpcRequest { .. }
            | Message::RegionStart(_)
            | Message::RegionFinish(_)
            | Message::PushDataHandShake(_) => true,
            _ => false,
        }
    }

    async fn handle(self: Arc<Self>, message: Message, replier: Replier) {
        // Replicas come from other workers, which carry no application secret.
        if self.port != "replicate"
            && super::gate::unauthenticated(&self.state, self.port, &message, &replier).await
        {
            return;
        }
        match message {
            Message::PushData(p) => self.push_data(p, &replier).await,
            Message::PushMergedData(p) => self.push_merged_data(p, &replier).await,
            Message::RpcRequest { request_id, body } => {
                self.map_rpc(request_id, body, &replier).await
            }
            other => {
                tracing::warn!(port = self.port, kind = ?other.message_type(), "unexpected frame on the push port");
            }
        }
    }
}

impl PushPort {
    /// One PushData: a Spark batch, or a Flink record of a map partition.
    async fn push_data(&self, p: PushData, replier: &Replier) {
        if let Err(e) = auth::check_shuffle_key(replier.session(), &p.shuffle_key) {
            let request = Request::start(Protocol::Celeborn, "push_data");
            self.send(replier, p.request_id, Err(e), request).await;
            return;
        }
        let replica = p.mode == Mode::Replica;
        let shuffle = self.state.shuffle(&p.shuffle_key);
        if let Some(map_shuffle) = shuffle.as_ref().filter(|s| s.is_map()) {
            let request = Request::start(Protocol::Flink, "push_data");
            let request_id = p.request_id;
            let reply = self.push_map(map_shuffle, p).await.map(|()| Vec::new());
            self.send_map(replier, request_id, reply, request).await;
            return;
        }
        let request = Request::start(Protocol::Celeborn, "push_data");
        self.state.push_arrived();
        let verdict = judge(
            &self.state,
            &p.shuffle_key,
            shuffle.as_ref(),
            &p.partition_unique_id,
            replica,
            &p.body,
        );
        let reply = match verdict {
            Verdict::Write(loc, soft) => self.write_batch(&loc, soft, &p).await,
            Verdict::Reply(code) => {
                if code == StatusCode::HardSplit {
                    hard_splits(1);
                }
                Ok(vec![code.value()])
            }
            Verdict::Fail(e) => Err(e),
        };
        self.send(replier, p.request_id, reply, request).await;
    }

    /// Writes a Spark batch the verdict let through; a primary with a peer
    /// answers once both copies are held.
    async fn write_batch(
        &self,
        loc: &Location,
        soft: bool,
        p: &PushData,
    ) -> Result<Vec<u8>, CelebornError> {
        let replica = p.mode == Mode::Replica;
        let local = self.append(loc, p.body.clone());
        let written = match (!replica).then(|| loc.peer.read().clone()).flatten() {
            Some(peer) => {
                let (local, remote) = tokio::join!(local, self.state.replicator.push(&peer, p));
                local.and(remote)
            }
            None => local.await,
        };
        match written {
            Ok(()) if soft => Ok(vec![StatusCode::SoftSplit.value()]),
            // The primary answers for both copies (replicas' replies are
            // read only for HARD_SPLIT).
            Ok(()) if !replica && self.state.congested() => {
                Ok(vec![StatusCode::PushDataSuccessPrimaryCongested.value()])
            }
            Ok(()) => Ok(Vec::new()),
            Err(e) if e.is_split() => {
                hard_splits(1);
                Ok(vec![StatusCode::HardSplit.value()])
            }
            Err(e) => Err(e),
        }
    }

    /// One PushMergedData: batches of several partitions of a shuffle, for
    /// one worker (and its replica worker).
    async fn push_merged_data(&self, p: PushMergedData, replier: &Replier) {
        // A malformed push returns before a reply marks it ok: an error.
        let request = Request::start(Protocol::Celeborn, "push_merged_data");
        if let Err(e) = auth::check_shuffle_key(replier.session(), &p.shuffle_key) {
            self.send(replier, p.request_id, Err(e), request).await;
            return;
        }
        let batches = match p.batches() {
            Ok(b) if b.len() == p.partition_unique_ids.len() => b,
            _ => {
                let e = CelebornError::BadBatch("offsets");
                e.count(self.port);
                replier
                    .send(Message::RpcFailure {
                        request_id: p.request_id,
                        error: e.client_text(),
                    })
                    .await;
                return;
            }
        };
        self.state.push_arrived();
        let replica = p.mode == Mode::Replica;
        let shuffle = self.state.shuffle(&p.shuffle_key);
        let verdicts: Vec<Verdict> = p
            .partition_unique_ids
            .iter()
            .zip(&batches)
            .map(|(uid, b)| {
                judge(
                    &self.state,
                    &p.shuffle_key,
                    shuffle.as_ref(),
                    uid,
                    replica,
                    b,
                )
            })
            .collect();
        let split_info = shuffle
            .as_ref()
            .is_some_and(|s| self.state.split_info_apps.contains(&s.app));
        let reply = self.write_merged(&p, verdicts, batches, split_info).await;
        self.send(replier, p.request_id, reply, request).await;
    }

    /// Writes a merged push here and, when its locations have a replica, on
    /// the replica's worker (a merged push goes to one primary worker and
    /// one replica worker).
    async fn write_merged(
        &self,
        p: &PushMergedData,
        verdicts: Vec<Verdict>,
        batches: Vec<Bytes>,
        split_info: bool,
    ) -> Result<Vec<u8>, CelebornError> {
        let failed = verdicts.iter().any(|v| matches!(v, Verdict::Fail(_)));
        let peer = if p.mode == Mode::Replica || failed {
            None
        } else {
            verdicts.iter().find_map(|v| match v {
                Verdict::Write(loc, _) => loc.peer.read().clone(),
                _ => None,
            })
        };
        let local = self.write_merged_here(verdicts, batches, split_info);
        let Some(peer) = peer else {
            return local.await;
        };
        let (local, remote) = tokio::join!(local, self.state.replicator.push_merged(&peer, p));
        match (local, remote) {
            // The replica refused (split or stopping): every batch revives;
            // those the primary wrote are read once (readers skip repeated
            // batch ids).
            (Ok(_), Err(e)) if e.is_split() => Ok(if split_info {
                hard_splits(p.partition_unique_ids.len() as u64);
                let all: Vec<(i32, StatusCode)> = (0..p.partition_unique_ids.len())
                    .map(|i| (i as i32, StatusCode::HardSplit))
                    .collect();
                merged_split_reply(&all)
            } else {
                hard_splits(p.partition_unique_ids.len() as u64);
                vec![StatusCode::HardSplit.value()]
            }),
            (Ok(_), Err(e)) => Err(e),
            (local, _) => local,
        }
    }

    /// The local copy of a merged push, and the reply it earns.
    async fn write_merged_here(
        &self,
        mut verdicts: Vec<Verdict>,
        batches: Vec<Bytes>,
        split_info: bool,
    ) -> Result<Vec<u8>, CelebornError> {
        if let Some(i) = verdicts.iter().position(|v| matches!(v, Verdict::Fail(_))) {
            return match verdicts.swap_remove(i) {
                Verdict::Fail(e) => Err(e),
                _ => unreachable!("position() found a Fail"),
            };
        }
        if verdicts
            .iter()
            .all(|v| matches!(v, Verdict::Reply(StatusCode::MapEnded)))
        {
            return Ok(vec![StatusCode::MapEnded.value()]);
        }
        if split_info {
            return self.merged_with_split_info(verdicts, batches).await;
        }
        if verdicts
            .iter()
            .any(|v| !matches!(v, Verdict::Write(_, false)))
        {
            // 0.5 clients read only a bare HARD_SPLIT, which sends every
            // batch of the push to revive: write none of them.
            hard_splits(verdicts.len() as u64);
            return Ok(vec![StatusCode::HardSplit.value()]);
        }
        for (v, batch) in verdicts.into_iter().zip(batches) {
            if let Verdict::Write(loc, _) = v {
                if let Err(e) = self.append(&loc, batch).await {
                    return match e {
                        CelebornError::Sealed(_) => {
                            hard_splits(1);
                            Ok(vec![StatusCode::HardSplit.value()])
                        }
                        e => Err(e),
                    };
                }
            }
        }
        Ok(vec![success_or_congested(&self.state)])
    }

    /// A map partition's control RPC (handshake, region start or finish).
    async fn map_rpc(&self, request_id: i64, body: Bytes, replier: &Replier) {
        let decoded = match DataPlaneBody::decode(body) {
            Ok(DataPlaneBody::Transport(tm)) => {
                replier.label(tm.name());
                MapRequest::from_transport(&tm)
            }
            Ok(DataPlaneBody::Legacy(m)) => MapRequest::from_legacy(m),
            Err(e) => Err(CelebornError::Undecodable(e.to_string())),
        };
        // A body that does not decode names no stage.
        let op = decoded.as_ref().map_or("map_control", |r| r.control.op());
        let request = Request::start(Protocol::Flink, op);
        let reply = decoded.and_then(|r| {
            auth::check_shuffle_key(replier.session(), &r.shuffle_key)?;
            self.map_control(r)
        });
        self.send_map(replier, request_id, reply, request).await;
    }
}

impl PushPort {
    /// The 0.6+ reply to a merged push: batches whose location can take them
    /// are written; the reply lists the indexes that split (HARD: not
    /// written, resent after revive; SOFT: written).
    async fn merged_with_split_info(
        &self,
        verdicts: Vec<Verdict>,
        batches: Vec<Bytes>,
    ) -> Result<Vec<u8>, CelebornError> {
        let mut statuses: Vec<(i32, StatusCode)> = Vec::new();
        for (i, (v, batch)) in verdicts.into_iter().zip(batches).enumerate() {
            match v {
                Verdict::Write(loc, soft) => match self.append(&loc, batch).await {
                    Ok(()) if soft => statuses.push((i as i32, StatusCode::SoftSplit)),
                    Ok(()) => {}
                    Err(CelebornError::Sealed(_)) => {
                        hard_splits(1);
                        statuses.push((i as i32, StatusCode::HardSplit))
                    }
                    Err(e) => return Err(e),
                },
                Verdict::Reply(StatusCode::MapEnded) => {} // nothing to resend
                Verdict::Reply(code) => {
                    if code == StatusCode::HardSplit {
                        hard_splits(1);
                    }
                    statuses.push((i as i32, code))
                }
                Verdict::Fail(e) => return Err(e),
            }
        }
        if statuses.is_empty() {
            return Ok(vec![success_or_congested(&self.state)]);
        }
        Ok(merged_split_reply(&statuses))
    }
}

/// The one-byte reply of a merged push that wrote every batch: Celeborn's
/// client reads `00` and the congested codes alike as written.
fn success_or_congested(state: &WorkerState) -> u8 {
    if state.congested() {
        StatusCode::PushDataSuccessPrimaryCongested.value()
    } else {
        StatusCode::Success.value()
    }
}

/// The PushMergedData reply of 0.6+ clients: `00` when nothing split, else
/// `15` (any HARD_SPLIT) or `16` followed by the TransportMessage bytes of
/// `PbPushMergedDataSplitPartitionInfo` (type 91) naming each split index.
pub fn merged_split_reply(statuses: &[(i32, StatusCode)]) -> Vec<u8> {
    if statuses.is_empty() {
        return vec![StatusCode::Success.value()];
    }
    let lead = if statuses.iter().any(|(_, c)| *c == StatusCode::HardSplit) {
        StatusCode::HardSplit
    } else {
        StatusCode::SoftSplit
    };
    let info = crate::proto::PbPushMergedDataSplitPartitionInfo {
        split_partition_indexes: statuses.iter().map(|(i, _)| *i).collect(),
        status_codes: statuses.iter().map(|(_, c)| c.as_i32()).collect(),
    };
    let tm = crate::transport_message::TransportMessage::new(
        crate::proto::MessageType::PushMergedDataSplitPartitionInfo,
        &info,
    );
    let mut out = vec![lead.value()];
    out.extend_from_slice(&tm.to_bytes());
    out
}

impl PushPort {
    /// The map location a request names, or the reply for a missing one.
    fn map_location(
        &self,
        shuffle_key: &str,
        uid: &str,
        replica: bool,
    ) -> Result<Arc<Location>, CelebornError> {
        let shuffle = self.state.shuffle(shuffle_key).ok_or_else(|| {
            CelebornError::PartitionNotFound(format!("unknown shuffle {shuffle_key}"))
        })?;
        if !shuffle.is_map() {
            return Err(CelebornError::NotMapPartitions(shuffle_key.to_string()));
        }
        shuffle
            .location(uid, replica)
            .ok_or_else(|| CelebornError::PartitionNotFound(format!("{shuffle_key}/{uid}")))
    }

    /// Handshake, region start or region finish of a map partition. An empty
    /// reply means done (a map partition never splits here: huge ones go to
    /// the cold tier instead).
    fn map_control(&self, r: MapRequest) -> Result<Vec<u8>, CelebornError> {
        let (shuffle_key, uid) = (&r.shuffle_key, &r.unique_id);
        let loc = self.map_location(shuffle_key, uid, r.replica)?;
        let mut map = loc.map().regions.lock();
        let stage = match r.control {
            MapControl::HandShake { .. } => MapStage::HandShake,
            MapControl::RegionStart { .. } => MapStage::RegionStart,
            MapControl::RegionFinish => MapStage::RegionFinish,
            MapControl::SegmentStart { .. } => MapStage::SegmentStart,
        };
        match r.control {
            MapControl::HandShake {
                num_partitions,
                buffer_size,
            } => map.handshake(num_partitions, buffer_size),
            MapControl::RegionStart { index, broadcast } => {
                map.region_start(index, broadcast, loc.peek_block_id())
            }
            MapControl::RegionFinish => {
                map.region_finish(loc.peek_block_id());
                // Streams following a partition still being written read on.
                loc.notify_grown();
                Ok(())
            }
            MapControl::SegmentStart {
                sub_partition,
                segment,
            } => map.segment_start(sub_partition, segment),
        }
        .map_err(|source| CelebornError::MapPartition {
            location: format!("{shuffle_key}/{uid}"),
            stage,
            replica: r.replica,
            source,
        })?;
        Ok(Vec::new())
    }

    /// Stores one Flink record of a map partition.
    async fn push_map(&self, shuffle: &ShuffleState, p: PushData) -> Result<(), CelebornError> {
        let (key, uid) = (&p.shuffle_key, &p.partition_unique_id);
        let replica = p.mode == Mode::Replica;
        let loc = shuffle
            .location(uid, replica)
            .ok_or_else(|| CelebornError::PartitionNotFound(format!("{key}/{uid}")))?;
        if loc.committed.load(Ordering::Acquire) {
            return Err(CelebornError::PartitionNotFound(format!(
                "{key}/{uid} is already committed"
            )));
        }
        let (header, hybrid) = {
            let mut map = loc.map().regions.lock();
            (map.accept(&p.body), map.has_segments())
        };
        let header = header.map_err(|source| CelebornError::MapPartition {
            location: format!("{key}/{uid}"),
            stage: MapStage::Data,
            replica,
            source,
        })?;
        let len = p.body.len() as u64;
        self.append_block(
            &loc,
            p.body,
            header.sub_partition as i64,
            header.batch,
            Protocol::Flink,
        )
        .await?;
        if hybrid && shuffle.hybrid.add(len) {
            self.flush_hybrid(shuffle, replica).await?;
        }
        Ok(())
    }

    /// Flushes a hybrid shuffle whose push took the node's hybrid bytes past
    /// `hybrid_memory` (see [`super::hybrid_budget`]).
    async fn flush_hybrid(
        &self,
        shuffle: &ShuffleState,
        replica: bool,
    ) -> Result<(), CelebornError> {
        let taken = shuffle.hybrid.take();
        let app = super::state::stored_app(&shuffle.app);
        match self
            .state
            .store
            .flush_shuffle(&app, shuffle.shuffle_id)
            .await
        {
            Ok(()) => {
                shuffle.hybrid.flushed(taken);
                metrics::counter!("switchyard_celeborn_hybrid_flushes_total").increment(1);
                Ok(())
            }
            Err(source) => {
                shuffle.hybrid.restore(taken);
                Err(CelebornError::Write { replica, source })
            }
        }
    }

    /// The reply to a map-partition request or record: failures carry their
    /// text (the Flink client shows it), prefixed by the status where one
    /// applies.
    async fn send_map(
        &self,
        replier: &Replier,
        request_id: i64,
        reply: Result<Vec<u8>, CelebornError>,
        request: Request,
    ) {
        self.reply(replier, request_id, reply, Failure::Text, request)
            .await
    }

    /// The reply to a Spark push: a failure is the bare status name, which
    /// the client classifies by prefix.
    async fn send(
        &self,
        replier: &Replier,
        request_id: i64,
        reply: Result<Vec<u8>, CelebornError>,
        request: Request,
    ) {
        self.reply(replier, request_id, reply, Failure::StatusName, request)
            .await
    }

    async fn reply(
        &self,
        replier: &Replier,
        request_id: i64,
        reply: Result<Vec<u8>, CelebornError>,
        failure: Failure,
        mut request: Request,
    ) {
        // Split and map-ended replies are answers the client acts on, not
        // failures; they count as ok.
        if reply.is_ok() {
            request.ok();
        }
        let frame = match reply {
            Ok(body) => Message::RpcResponse {
                request_id,
                body: Bytes::from(body),
            },
            Err(e) => {
                e.count(self.port);
                tracing::debug!(status = %e.status(), error = %e, "push port request refused");
                let error = match failure {
                    Failure::Text => e.client_text(),
                    Failure::StatusName => e.status().name().to_string(),
                };
                Message::RpcFailure { request_id, error }
            }
        };
        replier.send(frame).await;
    }
}

/// What an RpcFailure of the push port says.
enum Failure {
    /// The error's client text (map-partition requests).
    Text,
    /// The bare status name (Spark pushes).
    StatusName,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_split_reply_bytes() {
        assert_eq!(merged_split_reply(&[]), vec![0x00]);
        // Index 1 soft, index 3 hard: lead byte HARD_SPLIT, then type 91,
        // length, and the protobuf (packed repeated int32s).
        let r = merged_split_reply(&[(1, StatusCode::SoftSplit), (3, StatusCode::HardSplit)]);
        assert_eq!(
            r,
            vec![
                0x15, // HARD_SPLIT
                0x00, 0x00, 0x00, 0x5B, // PUSH_MERGED_DATA_SPLIT_PARTITION_INFO = 91
                0x00, 0x00, 0x00, 0x08, // payload length
                0x0A, 0x02, 0x01, 0x03, // splitPartitionIndexes = [1, 3]
                0x12, 0x02, 0x16, 0x15, // statusCodes = [22, 21]
            ]
        );
        let soft = merged_split_reply(&[(0, StatusCode::SoftSplit)]);
        assert_eq!(soft[0], 0x16);
    }
}
