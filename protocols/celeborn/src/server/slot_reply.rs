//! A RequestSlots reply's workers, in Celeborn's two forms. A 0.5+
//! LifecycleManager asks with `packed = true` and reads the column-oriented
//! `packedWorkerResource` (field 3); older clients read `workerResource`
//! (field 2), one full `PbPartitionLocation` per partition with its peer
//! inline. For a shuffle of 10^5 partitions the packed form is a few bytes a
//! partition where the plain one repeats every host name, so the master
//! answers in the form the client asked for, as the JVM master does.
//!
//! In both forms every location is offered as HDD storage with the storage
//! types the client asked for, and a primary's peer is its replica and a
//! replica's its primary.

use std::collections::HashMap;

use prost::Message;
use rustc_hash::FxHashMap;

use super::fleet::{Candidate, Slots};
use super::packed_wire::{PackedWorker, ReplyWriter};
use super::rpc::STORAGE_TYPE_HDD;
use super::worker::WorkerAddr;
use crate::proto::*;

/// `peerIndexes`' "no peer", Java's `Integer.MAX_VALUE`.
const NO_PEER: i32 = i32::MAX;
const PRIMARY: i32 = pb_partition_location::Mode::Primary as i32;
const REPLICA: i32 = pb_partition_location::Mode::Replica as i32;

/// Where each partition's primary and replica went, as indexes into the
/// placement; empty without replication (no location has a peer then).
/// Hashed with Fx: 2×10^5 integer keys per reply of a big shuffle, where
/// SipHash's cost was a third of the reply's.
struct Peers {
    primary_at: FxHashMap<i32, usize>,
    replica_at: FxHashMap<i32, usize>,
}

impl Peers {
    fn of(placed: &[(Candidate, Slots)]) -> Peers {
        let mut peers = Peers {
            primary_at: FxHashMap::default(),
            replica_at: FxHashMap::default(),
        };
        if placed.iter().all(|(_, s)| s.replicas.is_empty()) {
            return peers;
        }
        let partitions = placed.iter().map(|(_, s)| s.primaries.len()).sum();
        peers.primary_at.reserve(partitions);
        peers.replica_at.reserve(partitions);
        for (w, (_, slots)) in placed.iter().enumerate() {
            peers
                .primary_at
                .extend(slots.primaries.iter().map(|&id| (id, w)));
            peers
                .replica_at
                .extend(slots.replicas.iter().map(|&id| (id, w)));
        }
        peers
    }

    /// The worker holding the other copy of partition `id`, whose copy here
    /// is in `mode`.
    fn of_copy(&self, id: i32, mode: i32) -> Option<usize> {
        let other = if mode == PRIMARY {
            &self.replica_at
        } else {
            &self.primary_at
        };
        other.get(&id).copied()
    }
}

fn storage(types: i32) -> PbStorageInfo {
    PbStorageInfo {
        r#type: STORAGE_TYPE_HDD,
        available_storage_types: types,
        ..Default::default()
    }
}

/// The plain form (`workerResource`): by worker unique id, each location in
/// full with its peer inline.
pub fn worker_resources(
    placed: Vec<(Candidate, Slots)>,
    types: i32,
) -> HashMap<String, PbWorkerResource> {
    let peers = Peers::of(&placed);
    let location = |a: &WorkerAddr, id: i32, mode: i32| PbPartitionLocation {
        mode,
        id,
        host: a.host.clone(),
        rpc_port: a.rpc_port,
        push_port: a.push_port,
        fetch_port: a.fetch_port,
        replicate_port: a.replicate_port,
        storage_info: Some(storage(types)),
        ..Default::default()
    };
    let linked = |a: &WorkerAddr, id: i32, mode: i32| {
        let mut loc = location(a, id, mode);
        let other_mode = if mode == PRIMARY { REPLICA } else { PRIMARY };
        loc.peer = peers
            .of_copy(id, mode)
            .map(|w| Box::new(location(&placed[w].0.addr, id, other_mode)));
        loc
    };
    placed
        .iter()
        .map(|(w, slots)| {
            let a = &w.addr;
            let resource = PbWorkerResource {
                primary_partitions: slots
                    .primaries
                    .iter()
                    .map(|&id| linked(a, id, PRIMARY))
                    .collect(),
                replica_partitions: slots
                    .replicas
                    .iter()
                    .map(|&id| linked(a, id, REPLICA))
                    .collect(),
                // A driver's revive keeps replicas rack-aware with it.
                network_location: w.rack.clone(),
            };
            (a.unique_id(), resource)
        })
        .collect()
}

/// The reply's payload, a `PbRequestSlotsResponse` with status SUCCESS (0,
/// absent on the wire), in the form the client asked for.
pub fn encode(placed: Vec<(Candidate, Slots)>, types: i32, packed: bool) -> Vec<u8> {
    if !packed {
        let reply = PbRequestSlotsResponse {
            worker_resource: worker_resources(placed, types),
            ..Default::default()
        };
        return reply.encode_to_vec();
    }
    let mut writer = ReplyWriter::new(types);
    for_each_packed(&placed, |worker| writer.push(&worker));
    writer.finish()
}

/// The packed form (`packedWorkerResource`): for each worker of the
/// placement, its primaries then replicas, followed by their peers.
fn for_each_packed(placed: &[(Candidate, Slots)], mut f: impl FnMut(PackedWorker)) {
    let peers = Peers::of(placed);
    let ids: Vec<String> = placed.iter().map(|(w, _)| w.addr.unique_id()).collect();
    for (w, (candidate, slots)) in placed.iter().enumerate() {
        f(pack(w, slots, &candidate.rack, &peers, &ids));
    }
}

/// One worker's locations as `PbSerDeUtils.fromPbPackedPartitionLocationsPair`
/// reads them: the first `inputLocationSize` entries are the worker's own,
/// the rest their peers elsewhere, each entry's peer by index.
fn pack<'a>(
    worker: usize,
    slots: &Slots,
    rack: &'a str,
    peers: &Peers,
    unique_ids: &'a [String],
) -> PackedWorker<'a> {
    let own = slots
        .primaries
        .iter()
        .map(|&id| (id, PRIMARY))
        .chain(slots.replicas.iter().map(|&id| (id, REPLICA)));
    let mut entries: Vec<(i32, i32, usize)> = own.map(|(id, mode)| (id, mode, worker)).collect();
    let inputs = entries.len();
    let mut peer_indexes = vec![NO_PEER; inputs];
    for i in 0..inputs {
        let (id, mode, _) = entries[i];
        if let Some(at) = peers.of_copy(id, mode) {
            peer_indexes[i] = entries.len() as i32;
            peer_indexes.push(i as i32);
            let other_mode = if mode == PRIMARY { REPLICA } else { PRIMARY };
            entries.push((id, other_mode, at));
        }
    }
    // Workers named here, this one first.
    let mut worker_index: FxHashMap<usize, i32> = FxHashMap::default();
    worker_index.insert(worker, 0);
    let mut worker_ids_set = vec![unique_ids[worker].as_str()];
    let mut worker_ids = Vec::with_capacity(entries.len());
    for &(_, _, at) in &entries {
        let index = *worker_index.entry(at).or_insert_with(|| {
            worker_ids_set.push(&unique_ids[at]);
            worker_ids_set.len() as i32 - 1
        });
        worker_ids.push(index);
    }
    PackedWorker {
        id: &unique_ids[worker],
        network_location: rack,
        ids: entries.iter().map(|e| e.0).collect(),
        modes: entries.iter().map(|e| e.1).collect(),
        worker_ids,
        worker_ids_set,
        peer_indexes,
        inputs: inputs as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::fleet::tests::{on, w};
    use crate::server::fleet::{place, DEFAULT_RACK};

    fn worker(host: &str, rack: &str) -> Candidate {
        on(rack, w(host, 1, 0))
    }

    /// The packed reply as the client receives it.
    fn packed_worker_resources(
        placed: Vec<(Candidate, Slots)>,
        types: i32,
    ) -> HashMap<String, PbPackedWorkerResource> {
        let reply = PbRequestSlotsResponse::decode(&encode(placed, types, true)[..]).unwrap();
        assert_eq!(reply.status, 0, "SUCCESS");
        assert!(reply.worker_resource.is_empty());
        reply.packed_worker_resource
    }

    /// The same columns as prost structs, the oracle for the bytes
    /// `packed_wire` writes by hand.
    fn packed_by_prost(
        placed: &[(Candidate, Slots)],
        types: i32,
    ) -> HashMap<String, PbPackedWorkerResource> {
        let mut all = HashMap::new();
        for_each_packed(placed, |p| {
            let n = p.ids.len();
            let locations = PbPackedPartitionLocations {
                ids: p.ids,
                epoches: vec![0; n],
                worker_ids: p.worker_ids,
                worker_ids_set: p.worker_ids_set.iter().map(|s| s.to_string()).collect(),
                map_id_bit_map: vec![Default::default(); n],
                types: vec![STORAGE_TYPE_HDD; n],
                mount_points: vec![0; n],
                mount_points_set: vec![String::new()],
                final_result: vec![false; n],
                file_paths: vec![String::new(); n],
                available_storage_types: vec![types; n],
                modes: p.modes,
                file_sizes: Vec::new(),
                chunks_offsets: Vec::new(),
            };
            let pair = PbPackedPartitionLocationsPair {
                locations: Some(locations),
                peer_indexes: p.peer_indexes,
                input_location_size: p.inputs,
            };
            let resource = PbPackedWorkerResource {
                location_pairs: Some(pair),
                network_location: p.network_location.to_string(),
            };
            all.insert(p.id.to_string(), resource);
        });
        all
    }

    /// A location as a client sees it: (worker unique id, partition id,
    /// mode, the peer's (worker unique id, mode)).
    type Seen = (String, i32, i32, Option<(String, i32)>);

    fn unique(l: &PbPartitionLocation) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            l.host, l.rpc_port, l.push_port, l.fetch_port, l.replicate_port
        )
    }

    fn seen_plain(reply: &HashMap<String, PbWorkerResource>) -> Vec<Seen> {
        let mut seen: Vec<Seen> = reply
            .values()
            .flat_map(|r| r.primary_partitions.iter().chain(&r.replica_partitions))
            .map(|l| {
                let peer = l.peer.as_ref().map(|p| (unique(p), p.mode));
                (unique(l), l.id, l.mode, peer)
            })
            .collect();
        seen.sort();
        seen
    }

    /// Reads the packed form by the rules of the JVM client's decoder:
    /// every column indexed by entry, the inputs first, peers by index.
    fn seen_packed(reply: &HashMap<String, PbPackedWorkerResource>) -> Vec<Seen> {
        let mut seen = Vec::new();
        for (id, r) in reply {
            let pair = r.location_pairs.as_ref().unwrap();
            let l = pair.locations.as_ref().unwrap();
            let n = l.ids.len();
            for column in [
                l.epoches.len(),
                l.worker_ids.len(),
                l.map_id_bit_map.len(),
                l.types.len(),
                l.mount_points.len(),
                l.final_result.len(),
                l.file_paths.len(),
                l.available_storage_types.len(),
                l.modes.len(),
                pair.peer_indexes.len(),
            ] {
                assert_eq!(column, n, "every column as long as ids");
            }
            assert!(l
                .mount_points
                .iter()
                .all(|&m| (m as usize) < l.mount_points_set.len()));
            assert!(l.types.iter().all(|&t| t == STORAGE_TYPE_HDD));
            let worker = |i: usize| l.worker_ids_set[l.worker_ids[i] as usize].clone();
            for i in 0..pair.input_location_size as usize {
                assert_eq!(&worker(i), id, "an input location is on its worker");
                let peer = match pair.peer_indexes[i] {
                    NO_PEER => None,
                    p => {
                        let p = p as usize;
                        assert_eq!(pair.peer_indexes[p] as usize, i, "peers point back");
                        assert_eq!(l.ids[p], l.ids[i]);
                        Some((worker(p), l.modes[p]))
                    }
                };
                seen.push((worker(i), l.ids[i], l.modes[i], peer));
            }
        }
        seen.sort();
        seen
    }

    #[test]
    fn packed_and_plain_forms_name_the_same_locations_and_peers() {
        let ids: Vec<i32> = (0..50).map(|i| i * 3).collect();
        for replicate in [false, true] {
            let workers = vec![
                worker("a", DEFAULT_RACK),
                worker("b", "/r2"),
                worker("c", DEFAULT_RACK),
                worker("d", "/r2"),
            ];
            let placed = place(&ids, workers, replicate, true);
            let plain = seen_plain(&worker_resources(placed.clone(), 2));
            let packed = seen_packed(&packed_worker_resources(placed, 2));
            assert_eq!(plain.len(), ids.len() * if replicate { 2 } else { 1 });
            assert_eq!(plain, packed, "replicate {replicate}");
            assert_eq!(plain.iter().any(|s| s.3.is_some()), replicate);
        }
    }

    #[test]
    fn hand_written_packed_bytes_decode_to_the_prost_built_reply() {
        let ids: Vec<i32> = (0..300).chain([70_000, i32::MAX - 1]).collect();
        for replicate in [false, true] {
            for types in [0, 1, 2, 7, -1] {
                let workers = (0..9)
                    .map(|i| {
                        worker(
                            &format!("host-{i}"),
                            if i % 2 == 0 { "/r1" } else { DEFAULT_RACK },
                        )
                    })
                    .collect();
                let placed = place(&ids, workers, replicate, true);
                let oracle = packed_by_prost(&placed, types);
                assert_eq!(
                    packed_worker_resources(placed, types),
                    oracle,
                    "replicate {replicate} types {types}"
                );
            }
        }
    }

    #[test]
    fn spares_are_listed_with_no_locations() {
        let workers = (0..5)
            .map(|i| worker(&format!("w{i}"), DEFAULT_RACK))
            .collect();
        let placed = place(&[7], workers, false, false);
        let packed = packed_worker_resources(placed.clone(), 2);
        assert_eq!(packed, packed_by_prost(&placed, 2));
        assert_eq!(packed.len(), 5, "the chosen worker and its spares");
        let sizes: Vec<i32> = packed
            .values()
            .map(|r| r.location_pairs.as_ref().unwrap().input_location_size)
            .collect();
        assert_eq!(sizes.iter().sum::<i32>(), 1);
    }
}
