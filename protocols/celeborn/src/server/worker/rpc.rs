//! `WorkerEndpoint`: ReserveSlots, CommitFiles and DestroyWorkerSlots from the
//! LifecycleManager.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::state::{map_note_name, KeptReply, LocationKey, ShuffleState, WorkerState};
use crate::modes::{PartitionType, SplitMode};
use crate::proto::*;
use crate::rpc::endpoint;
use crate::server::error::CelebornError;
use crate::server::rpc::{decode, Endpoint, STORAGE_TYPE_HDD};
use crate::status::StatusCode;
use crate::transport_message::TransportMessage;
use crate::ShuffleKey;
use switchyard_storage::PartitionKey;

pub struct WorkerEndpoint {
    state: Arc<WorkerState>,
}

/// The chunk offsets of a partition whose bytes are one segment of at most
/// one chunk: `[0, size]`, what its view would give, known without reading
/// its index (at a commit of many small partitions, reading each index cost
/// a read and an index-cache entry apiece).
fn single_chunk(stats: &switchyard_storage::PartitionStats, chunk_size: u64) -> Option<Vec<u64>> {
    let size = stats.disk_bytes + stats.cold_bytes;
    (stats.segments == 1 && stats.memory_bytes == 0 && size > 0 && size <= chunk_size)
        .then(|| vec![0, size])
}

impl WorkerEndpoint {
    pub fn new(state: Arc<WorkerState>) -> Arc<Self> {
        Arc::new(WorkerEndpoint { state })
    }
}

impl Endpoint for WorkerEndpoint {
    fn name(&self) -> &'static str {
        endpoint::WORKER
    }

    async fn receive(
        self: Arc<Self>,
        tm: TransportMessage,
    ) -> Result<TransportMessage, CelebornError> {
        match tm.kind() {
            Some(MessageType::ReserveSlots) => {
                let r = self.reserve(decode(&tm)?);
                Ok(TransportMessage::new(MessageType::ReserveSlotsResponse, &r))
            }
            Some(MessageType::CommitFiles) => {
                let r = self.commit(decode(&tm)?).await;
                Ok(TransportMessage::new(MessageType::CommitFilesResponse, &r))
            }
            Some(MessageType::Destroy) => {
                let r = self.destroy(decode(&tm)?);
                Ok(TransportMessage::new(MessageType::DestroyResponse, &r))
            }
            _ => Err(CelebornError::Unsupported {
                handler: "WorkerEndpoint",
                message_type: tm.message_type,
            }),
        }
    }
}

/// One location of a ReserveSlots request.
#[derive(Debug, PartialEq, Eq)]
struct Reserved {
    id: i32,
    epoch: i32,
    replica: bool,
    /// A primary's peer (its replica): `host:replicatePort`.
    peer: Option<String>,
}

/// `host:replicatePort` of a worker unique id `host:rpc:push:fetch:replicate`.
fn replicate_addr(worker_id: &str) -> Option<String> {
    let (rest, replicate) = worker_id.rsplit_once(':')?;
    let mut host = rest;
    for _ in 0..3 {
        host = host.rsplit_once(':')?.0;
    }
    replicate.parse::<u16>().ok()?;
    Some(format!("{host}:{replicate}"))
}

/// Every location in a ReserveSlots request: the plain lists (≤0.4
/// clients) or the packed pair (0.5+).
fn reserved_locations(r: &PbReserveSlots) -> Result<Vec<Reserved>, CelebornError> {
    let plain_peer = |l: &PbPartitionLocation| {
        l.peer
            .as_ref()
            .map(|p| format!("{}:{}", p.host, p.replicate_port))
    };
    let mut out: Vec<Reserved> = r
        .primary_locations
        .iter()
        .map(|l| Reserved {
            id: l.id,
            epoch: l.epoch,
            replica: false,
            peer: plain_peer(l),
        })
        .chain(r.replica_locations.iter().map(|l| Reserved {
            id: l.id,
            epoch: l.epoch,
            replica: true,
            peer: None,
        }))
        .collect();
    if out.is_empty() {
        if let Some(pair) = &r.partition_locations_pair {
            let locs = pair.locations.clone().unwrap_or_default();
            let n = usize::try_from(pair.input_location_size)
                .map_err(|_| CelebornError::Invalid("negative inputLocationSize".into()))?;
            if n > locs.ids.len() || locs.epoches.len() < n || locs.modes.len() < n {
                return Err(CelebornError::Invalid(format!(
                    "packed locations: inputLocationSize {n} but {} ids, {} epochs, {} modes",
                    locs.ids.len(),
                    locs.epoches.len(),
                    locs.modes.len()
                )));
            }
            for i in 0..n {
                let replica = locs.modes[i] == 1;
                // A primary's peer entry names the replica's worker.
                let peer = (!replica)
                    .then(|| pair.peer_indexes.get(i).copied())
                    .flatten()
                    .and_then(|p| usize::try_from(p).ok())
                    .and_then(|p| locs.worker_ids.get(p))
                    .and_then(|&w| usize::try_from(w).ok())
                    .and_then(|w| locs.worker_ids_set.get(w))
                    .and_then(|w| replicate_addr(w));
                out.push(Reserved {
                    id: locs.ids[i],
                    epoch: locs.epoches[i],
                    replica,
                    peer,
                });
            }
        }
    }
    Ok(out)
}

/// The split mode and partition type a ReserveSlots asks for. MAPGROUP is
/// reserved upstream and sent by no stock client: refused, not guessed.
fn modes(r: &PbReserveSlots) -> Result<(SplitMode, PartitionType), CelebornError> {
    let split = SplitMode::from_i32(r.split_mode)
        .ok_or_else(|| CelebornError::Invalid(format!("unknown split mode {}", r.split_mode)))?;
    match PartitionType::from_i32(r.partition_type) {
        Some(t @ (PartitionType::Reduce | PartitionType::Map)) => Ok((split, t)),
        Some(PartitionType::MapGroup) => Err(CelebornError::Invalid(
            "partition type MAPGROUP is not supported".into(),
        )),
        None => Err(CelebornError::Invalid(format!(
            "unknown partition type {}",
            r.partition_type
        ))),
    }
}

/// What CommitFiles answers for a committed location: a local file (read
/// through this worker's fetch port), final, with its size and chunk offsets
/// (fields 6 and 7, read by 0.6+ clients; 0.5 clients skip them).
fn committed_storage_info(size: u64, offsets: &[u64]) -> PbStorageInfo {
    PbStorageInfo {
        r#type: STORAGE_TYPE_HDD,
        mount_point: String::new(),
        final_result: true,
        file_path: String::new(),
        available_storage_types: 0,
        file_size: size as i64,
        chunk_offsets: offsets.iter().map(|&o| o as i64).collect(),
    }
}

/// Partition locations reserved (primaries and replicas), as Celeborn's
/// SlotsAllocated counts them.
pub const SLOTS_ALLOCATED: &str = "switchyard_celeborn_slots_allocated_total";
/// Locations a CommitFiles could not commit (failed primary and replica ids).
pub const COMMIT_FAILURES: &str = "switchyard_celeborn_commit_failures_total";

impl WorkerEndpoint {
    fn reserve(&self, r: PbReserveSlots) -> PbReserveSlotsResponse {
        let fail = |status: StatusCode, reason: String| {
            tracing::warn!(app = %r.application_id, shuffle = r.shuffle_id, %reason, "reserve slots refused");
            PbReserveSlotsResponse {
                status: status.as_i32(),
                reason,
            }
        };
        if self.state.stopping.load(Ordering::Acquire) {
            // The LifecycleManager takes WORKER_SHUTDOWN as "shutting down"
            // (not a failure) and reserves on another worker.
            return fail(StatusCode::WorkerShutdown, "the worker is stopping".into());
        }
        if !self.state.store.is_ready() {
            return fail(
                StatusCode::NoAvailableWorkingDir,
                "no writable disk or cold tier".into(),
            );
        }
        let locations = match reserved_locations(&r) {
            Ok(l) => l,
            Err(e) => return fail(StatusCode::ReserveSlotsFailed, e.client_text()),
        };
        let (split_mode, partition_type) = match modes(&r) {
            Ok(m) => m,
            Err(e) => return fail(StatusCode::ReserveSlotsFailed, e.client_text()),
        };
        // A shuffle that died with its application (expired, lost) is not
        // set up again: a revive after the expiry must fail, not write the
        // rest of a partition whose first part is gone.
        if let Err(e) = self
            .state
            .store
            .check_shuffle_alive(&super::state::stored_app(&r.application_id), r.shuffle_id)
        {
            return fail(
                StatusCode::ReserveSlotsFailed,
                CelebornError::from(e).client_text(),
            );
        }
        let key = ShuffleKey::new(&r.application_id, r.shuffle_id).to_string();
        let Some(shuffle) = self.state.shuffle_or_create(&key) else {
            return fail(
                StatusCode::ReserveSlotsFailed,
                format!("bad application id {:?}", r.application_id),
            );
        };
        self.state.register_app(&r.application_id);
        let threshold = if r.split_threshold > 0 {
            r.split_threshold as u64
        } else {
            u64::MAX
        };
        shuffle.split_threshold.store(threshold, Ordering::Relaxed);
        shuffle.set_modes(split_mode, partition_type);
        self.state
            .describe_client(&r.application_id, partition_type);
        let count = locations.len();
        for l in locations {
            shuffle.add_location(l.id, l.epoch, l.replica, l.peer);
        }
        metrics::counter!(SLOTS_ALLOCATED).increment(count as u64);
        self.state.publish_location_gauge();
        tracing::debug!(shuffle = %key, locations = count, "slots reserved");
        PbReserveSlotsResponse {
            status: StatusCode::Success.as_i32(),
            reason: String::new(),
        }
    }

    /// A CommitFiles; its failed locations are counted (Celeborn's
    /// CommitFilesFailCount).
    async fn commit(&self, r: PbCommitFiles) -> PbCommitFilesResponse {
        let reply = self.commit_files(r).await;
        let failed = reply.failed_primary_ids.len() + reply.failed_replica_ids.len();
        metrics::counter!(COMMIT_FAILURES).increment(failed as u64);
        reply
    }

    async fn commit_files(&self, r: PbCommitFiles) -> PbCommitFilesResponse {
        let key = ShuffleKey::new(&r.application_id, r.shuffle_id).to_string();
        let Some(shuffle) = self.state.shuffle(&key) else {
            return PbCommitFilesResponse {
                status: StatusCode::ShuffleUnregistered.as_i32(),
                failed_primary_ids: r.primary_ids,
                failed_replica_ids: r.replica_ids,
                ..Default::default()
            };
        };
        // The same (shuffle, epoch) always gets the same answer; a duplicate
        // arriving while the first runs waits for it. Bounded by the store's
        // commit_timeout (celeborn.worker.commitFiles.timeout): then every id
        // fails. Failures are not kept, so a retry commits afresh.
        let cell = shuffle.commits.lock().entry(r.epoch).or_default().clone();
        let timeout = self.state.store.config().commit_timeout;
        let commit =
            cell.get_or_init(|| async { KeptReply::keep(&self.do_commit(&shuffle, &r).await) });
        let Ok(kept) = tokio::time::timeout(timeout, commit).await else {
            return PbCommitFilesResponse {
                status: StatusCode::CommitFileException.as_i32(),
                failed_primary_ids: r.primary_ids.clone(),
                failed_replica_ids: r.replica_ids.clone(),
                ..Default::default()
            };
        };
        let reply = kept.reply();
        if !reply.failed_primary_ids.is_empty() || !reply.failed_replica_ids.is_empty() {
            shuffle.commits.lock().remove(&r.epoch);
        }
        shuffle.trim_commits();
        reply
    }

    async fn do_commit(&self, shuffle: &ShuffleState, r: &PbCommitFiles) -> PbCommitFilesResponse {
        if !r.map_attempts.is_empty() {
            *shuffle.map_attempts.write() = Some(r.map_attempts.clone());
        }
        let mut reply = PbCommitFilesResponse::default();
        let chunk_size = self.state.config.chunk_size.as_u64();
        // Every location at once: their flushes share the flush slots and
        // their manifest records one fsync, so a commit of N partitions costs
        // about one of them, not N in a row.
        let mut commits = Vec::new();
        for (ids, replica) in [(&r.primary_ids, false), (&r.replica_ids, true)] {
            for uid in ids {
                let (key, notes) = match shuffle.location(uid, replica) {
                    Some(loc) => {
                        loc.committed.store(true, Ordering::Release);
                        loc.notify_grown();
                        // The commit flushes the shuffle's hybrid bytes.
                        shuffle.hybrid.flushed(shuffle.hybrid.take());
                        // A map partition's regions go into the manifest with it.
                        let notes = if shuffle.is_map() {
                            vec![(
                                map_note_name(uid, replica),
                                loc.map().regions.lock().to_note(),
                            )]
                        } else {
                            Vec::new()
                        };
                        (loc.key.clone(), notes)
                    }
                    None => match self.committed_before(shuffle, uid, replica) {
                        Some(key) => (key, Vec::new()),
                        // An id this worker never reserved is neither
                        // committed nor failed, as in Celeborn.
                        None => {
                            tracing::warn!(shuffle = %shuffle.key(), uid, "commit of an unknown location");
                            continue;
                        }
                    },
                };
                commits.push(async move {
                    let result = async {
                        let stats = self.state.store.seal_with_notes(&key, notes).await?;
                        if stats.received_bytes == 0 {
                            return Ok(None);
                        }
                        if let Some(offsets) = single_chunk(&stats, chunk_size) {
                            return Ok(Some((stats, offsets)));
                        }
                        let view = self.state.store.open_view(&key, None, chunk_size).await?;
                        Ok::<_, switchyard_storage::StorageError>(Some((
                            stats,
                            view.chunk_offsets().unwrap_or_default(),
                        )))
                    }
                    .await;
                    (uid, replica, result)
                });
            }
        }
        let results = futures::future::join_all(commits).await;
        let committed = results.iter().filter(|r| r.2.is_ok()).map(|r| (r.0, r.1));
        if shuffle.is_map() {
            shuffle.seal_maps(committed);
        } else {
            shuffle.drop_committed(committed);
            self.state.publish_location_gauge();
        }
        for (uid, replica, result) in results {
            match result {
                Ok(None) => {} // an empty file: neither committed nor failed
                Ok(Some((stats, offsets))) => {
                    let size = stats.disk_bytes + stats.cold_bytes;
                    let info = committed_storage_info(size, &offsets);
                    reply.total_written += size as i64;
                    reply.file_count += 1;
                    if replica {
                        reply.committed_replica_ids.push(uid.clone());
                        reply
                            .committed_replica_storage_infos
                            .insert(uid.clone(), info);
                    } else {
                        reply.committed_primary_ids.push(uid.clone());
                        reply
                            .committed_primary_storage_infos
                            .insert(uid.clone(), info);
                    }
                }
                Err(e) => {
                    tracing::error!(uid, replica, error = %e, "commit failed");
                    if replica {
                        reply.failed_replica_ids.push(uid.clone());
                    } else {
                        reply.failed_primary_ids.push(uid.clone());
                    }
                }
            }
        }
        let failed = !reply.failed_primary_ids.is_empty() || !reply.failed_replica_ids.is_empty();
        reply.status = if failed {
            StatusCode::PartialSuccess
        } else {
            StatusCode::Success
        }
        .as_i32();
        tracing::info!(
            shuffle = %shuffle.key(),
            epoch = r.epoch,
            committed = reply.committed_primary_ids.len() + reply.committed_replica_ids.len(),
            bytes = reply.total_written,
            "files committed"
        );
        reply
    }

    /// The key of a reduce location this worker committed (and dropped, see
    /// [`ShuffleState::drop_committed`]) or recovered committed: its bytes
    /// are in the store. A later commit that names it reports it again.
    fn committed_before(
        &self,
        shuffle: &ShuffleState,
        uid: &str,
        replica: bool,
    ) -> Option<PartitionKey> {
        let location = LocationKey::parse(uid, replica)?;
        if shuffle.is_map() {
            // Its regions' note is in the store already.
            return shuffle
                .is_sealed(location)
                .then(|| shuffle.partition_key(location));
        }
        let key = shuffle.partition_key(location);
        let stats = self.state.store.partition_stats(&key).ok()?;
        (stats.received_bytes > 0).then_some(key)
    }

    fn destroy(&self, r: PbDestroyWorkerSlots) -> PbDestroyWorkerSlotsResponse {
        let Some(shuffle) = self.state.shuffle(&r.shuffle_key) else {
            return PbDestroyWorkerSlotsResponse {
                status: StatusCode::ShuffleUnregistered.as_i32(),
                failed_primaries: r.primary_locations,
                failed_replicas: r.replica_location,
            };
        };
        // The slots are released; their (normally empty) data goes with the
        // shuffle.
        let copies = [(&r.primary_locations, false), (&r.replica_location, true)];
        for (uids, replica) in copies {
            for key in uids.iter().filter_map(|u| LocationKey::parse(u, replica)) {
                shuffle.forget(&key);
            }
        }
        self.state.publish_location_gauge();
        PbDestroyWorkerSlotsResponse {
            status: StatusCode::Success.as_i32(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn committed_storage_info_bytes() {
        // As Java's PbStorageInfo.toByteArray() writes it: type 1 (08 01),
        // finalResult true (18 01), fileSize 100 (30 64), chunkOffsets
        // [0, 100] packed (3A 02 00 64); empty strings and 0 are omitted.
        let bytes = committed_storage_info(100, &[0, 100]).encode_to_vec();
        assert_eq!(
            bytes,
            vec![0x08, 0x01, 0x18, 0x01, 0x30, 0x64, 0x3A, 0x02, 0x00, 0x64]
        );
    }

    #[test]
    fn a_primarys_peer_is_its_replica_workers_replicate_port() {
        let r = PbReserveSlots {
            partition_locations_pair: Some(PbPackedPartitionLocationsPair {
                locations: Some(PbPackedPartitionLocations {
                    ids: vec![4, 4],
                    epoches: vec![0, 0],
                    modes: vec![0, 1],
                    worker_ids: vec![0, 1],
                    worker_ids_set: vec![
                        "127.0.0.2:9100:9101:9102:9103".into(),
                        "127.0.0.3:9100:9101:9102:9203".into(),
                    ],
                    ..Default::default()
                }),
                peer_indexes: vec![1, i32::MAX],
                input_location_size: 1,
            }),
            ..Default::default()
        };
        let got = reserved_locations(&r).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].peer.as_deref(), Some("127.0.0.3:9203"));
        assert_eq!(replicate_addr("::1:1:2:3:4").as_deref(), Some("::1:4"));
        assert_eq!(replicate_addr("host:1:2:3"), None);
        // Plain lists (≤0.4 clients) carry the peer inline.
        let plain = PbReserveSlots {
            primary_locations: vec![PbPartitionLocation {
                id: 1,
                peer: Some(Box::new(PbPartitionLocation {
                    host: "h".into(),
                    replicate_port: 7,
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            reserved_locations(&plain).unwrap()[0].peer.as_deref(),
            Some("h:7")
        );
    }

    #[test]
    fn packed_locations_take_only_the_input_entries() {
        let r = PbReserveSlots {
            partition_locations_pair: Some(PbPackedPartitionLocationsPair {
                locations: Some(PbPackedPartitionLocations {
                    ids: vec![4, 5, 4],
                    epoches: vec![0, 2, 0],
                    modes: vec![0, 0, 1],
                    ..Default::default()
                }),
                peer_indexes: vec![2, i32::MAX, 0],
                // The third entry is the peer of the first, not an input.
                input_location_size: 2,
            }),
            ..Default::default()
        };
        let got: Vec<_> = reserved_locations(&r)
            .unwrap()
            .into_iter()
            .map(|l| (l.id, l.epoch, l.replica))
            .collect();
        assert_eq!(got, vec![(4, 0, false), (5, 2, false)]);
        let mut bad = r.clone();
        bad.partition_locations_pair
            .as_mut()
            .unwrap()
            .input_location_size = 9;
        assert!(reserved_locations(&bad).is_err());
    }

    #[test]
    fn reserve_modes_are_checked() {
        let r = |split_mode, partition_type| PbReserveSlots {
            split_mode,
            partition_type,
            ..Default::default()
        };
        assert_eq!(
            modes(&r(1, 1)).unwrap(),
            (SplitMode::Hard, PartitionType::Map)
        );
        assert_eq!(
            modes(&r(0, 0)).unwrap(),
            (SplitMode::Soft, PartitionType::Reduce)
        );
        assert!(modes(&r(0, 2)).is_err(), "MAPGROUP");
        assert!(modes(&r(0, 7)).is_err());
        assert!(modes(&r(3, 0)).is_err());
    }
}
