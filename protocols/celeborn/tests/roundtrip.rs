//! The Celeborn roles end to end with the project's Rust client, following
//! the Spark client's sequence: master handshake, slots, reserve, pushes,
//! commit, streams and chunks; splits, map ranges and bad input.

#[path = "../../frame/tests/support/eventually.rs"]
mod wait;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::server::worker::stored_app;
use switchyard_celeborn::{CelebornConfig, CelebornNode, StatusCode, TransportMessage};
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};
use switchyard_storage::{Store, StoreConfig};

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    node: CelebornNode,
}

async fn start(memory: u64, chunk: u64) -> Env {
    start_with(memory, chunk, None).await
}

/// With a cold tier (`fs` in the temp dir) taking partitions past `huge` bytes.
async fn start_with(memory: u64, chunk: u64, huge: Option<u64>) -> Env {
    start_tuned(memory, chunk, huge, |_, _| {}).await
}

async fn start_tuned(
    memory: u64,
    chunk: u64,
    huge: Option<u64>,
    tune: impl FnOnce(&mut StoreConfig, &mut CelebornConfig),
) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut sc = StoreConfig::default();
    if let Some(huge) = huge {
        let mut cold = switchyard_storage::ColdConfig::new(switchyard_storage::ColdBackend::Fs {
            root: dir.path().join("cold"),
        });
        cold.huge_partition_threshold = ByteSize::b(huge);
        sc.cold = Some(cold);
    }
    sc.memory.capacity = ByteSize::b(memory);
    sc.memory.single_buffer_threshold = ByteSize::b(memory / 8);
    sc.memory.spill_check_interval = Duration::from_millis(20);
    sc.disks.dirs = vec![dir.path().join("d0")];
    // Independent of the free space of the machine running the tests.
    sc.disks.min_free = ByteSize::b(0);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut cc = CelebornConfig {
        master_listen: any,
        worker_rpc_listen: any,
        worker_push_listen: any,
        worker_fetch_listen: any,
        worker_replicate_listen: any,
        max_frame_size: ByteSize::mib(16),
        rpc_max_frame_size: ByteSize::mib(1),
        chunk_size: ByteSize::b(chunk),
        ..Default::default()
    };
    tune(&mut sc, &mut cc);
    let store = Store::open(sc).await.unwrap();
    let node = CelebornNode::start(cc, store.clone()).await.unwrap();
    Env {
        _dir: dir,
        store,
        node,
    }
}

fn addr(port: i32) -> SocketAddr {
    format!("127.0.0.1:{port}").parse().unwrap()
}

fn data(map: i32, batch_id: i32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (map as usize * 31 + batch_id as usize * 7 + i) as u8)
        .collect()
}

struct Lm {
    master: Connection,
    worker: Connection,
    app: String,
}

impl Lm {
    /// The LifecycleManager's start: verifier, app info, heartbeat, slots, reserve.
    async fn start(
        env: &Env,
        app: &str,
        shuffle: i32,
        partitions: i32,
        split_threshold: i64,
        split_mode: i32,
    ) -> Lm {
        Self::start_as(
            env,
            app,
            shuffle,
            partitions,
            split_threshold,
            split_mode,
            true,
        )
        .await
    }

    /// `v06`: behave as a 0.6.1+ LifecycleManager (REGISTER_APPLICATION_INFO).
    async fn start_as(
        env: &Env,
        app: &str,
        shuffle: i32,
        partitions: i32,
        split_threshold: i64,
        split_mode: i32,
        v06: bool,
    ) -> Lm {
        Self::start_typed(
            env,
            app,
            shuffle,
            partitions,
            split_threshold,
            split_mode,
            v06,
            0,
        )
        .await
    }

    /// A Flink LifecycleManager: one MAP partition location per map task.
    async fn start_map(env: &Env, app: &str, shuffle: i32, maps: i32) -> Lm {
        Self::start_typed(env, app, shuffle, maps, 1 << 40, 0, true, 1).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_typed(
        env: &Env,
        app: &str,
        shuffle: i32,
        partitions: i32,
        split_threshold: i64,
        split_mode: i32,
        v06: bool,
        partition_type: i32,
    ) -> Lm {
        let master = Connection::connect(env.node.addrs.master.unwrap())
            .await
            .unwrap();
        assert!(master.verify(endpoint::MASTER).await.unwrap());
        assert!(!master.verify("NoSuchEndpoint").await.unwrap());
        if v06 {
            let r = master
                .ask(
                    endpoint::MASTER,
                    TransportMessage::new(
                        MessageType::RegisterApplicationInfo,
                        &PbRegisterApplicationInfo {
                            app_id: app.into(),
                            ..Default::default()
                        },
                    ),
                )
                .await
                .unwrap();
            assert_eq!(r.message_type, MessageType::OneWayMessageResponse as i32);
            assert!(r.payload.is_none());
        }
        assert_eq!(heartbeat(&master, app).await.status, 0);
        let r = master
            .ask(
                endpoint::MASTER,
                TransportMessage::new(
                    MessageType::CheckWorkersAvailable,
                    &PbCheckWorkersAvailable {},
                ),
            )
            .await
            .unwrap();
        assert!(
            decode::<PbCheckWorkersAvailableResponse>(&r)
                .unwrap()
                .available
        );
        let r = master
            .ask(
                endpoint::MASTER,
                TransportMessage::new(
                    MessageType::RequestSlots,
                    &PbRequestSlots {
                        application_id: app.into(),
                        shuffle_id: shuffle,
                        partition_id_list: (0..partitions).collect(),
                        packed: true,
                        available_storage_types: 2,
                        ..Default::default()
                    },
                ),
            )
            .await
            .unwrap();
        let slots: PbRequestSlotsResponse = decode(&r).unwrap();
        assert_eq!(slots.status, 0);
        // Asked packed, as 0.5+ clients ask, the reply is packed only.
        assert!(slots.worker_resource.is_empty());
        assert_eq!(slots.packed_worker_resource.len(), 1);
        let (worker_id, res) = slots.packed_worker_resource.iter().next().unwrap();
        assert_eq!(
            *worker_id,
            env.node.addrs.worker.as_ref().unwrap().unique_id()
        );
        let pair = res.location_pairs.as_ref().unwrap();
        let locations = pair.locations.as_ref().unwrap();
        assert_eq!(pair.input_location_size, partitions);
        assert_eq!(locations.ids, (0..partitions).collect::<Vec<_>>());
        assert!(locations.modes.iter().all(|&m| m == 0), "all primaries");
        assert_eq!(locations.worker_ids_set, std::slice::from_ref(worker_id));
        let rpc_port: i32 = worker_id.split(':').nth(1).unwrap().parse().unwrap();
        let worker = Connection::connect(addr(rpc_port)).await.unwrap();
        assert!(worker.verify(endpoint::WORKER).await.unwrap());
        // ReserveSlots in the packed form 0.5+ clients send.
        let n = partitions as usize;
        let r = worker
            .ask(
                endpoint::WORKER,
                TransportMessage::new(
                    MessageType::ReserveSlots,
                    &PbReserveSlots {
                        application_id: app.into(),
                        shuffle_id: shuffle,
                        split_threshold,
                        split_mode,
                        partition_type,
                        partition_split_enabled: true,
                        partition_locations_pair: Some(PbPackedPartitionLocationsPair {
                            locations: Some(PbPackedPartitionLocations {
                                ids: (0..partitions).collect(),
                                epoches: vec![0; n],
                                modes: vec![0; n],
                                ..Default::default()
                            }),
                            peer_indexes: vec![i32::MAX; n],
                            input_location_size: partitions,
                        }),
                        ..Default::default()
                    },
                ),
            )
            .await
            .unwrap();
        assert_eq!(decode::<PbReserveSlotsResponse>(&r).unwrap().status, 0);
        Lm {
            master,
            worker,
            app: app.into(),
        }
    }

    async fn unregister_shuffle(&self, shuffle: i32) {
        let r = self
            .master
            .ask(
                endpoint::MASTER,
                TransportMessage::new(
                    MessageType::UnregisterShuffle,
                    &PbUnregisterShuffle {
                        app_id: self.app.clone(),
                        shuffle_id: shuffle,
                        ..Default::default()
                    },
                ),
            )
            .await
            .unwrap();
        assert_eq!(decode::<PbUnregisterShuffleResponse>(&r).unwrap().status, 0);
    }

    async fn commit(
        &self,
        shuffle: i32,
        ids: Vec<String>,
        maps: i32,
        epoch: i64,
    ) -> PbCommitFilesResponse {
        let r = self
            .worker
            .ask(
                endpoint::WORKER,
                TransportMessage::new(
                    MessageType::CommitFiles,
                    &PbCommitFiles {
                        application_id: self.app.clone(),
                        shuffle_id: shuffle,
                        primary_ids: ids,
                        map_attempts: vec![0; maps as usize],
                        epoch,
                        ..Default::default()
                    },
                ),
            )
            .await
            .unwrap();
        decode(&r).unwrap()
    }
}

/// A driver's heartbeat that asks for a reply.
async fn heartbeat(master: &Connection, app: &str) -> PbHeartbeatFromApplicationResponse {
    let r = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::HeartbeatFromApplication,
                &PbHeartbeatFromApplication {
                    app_id: app.into(),
                    should_response: true,
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    decode(&r).unwrap()
}

/// Opens every file with one BATCH_OPEN_STREAM and reads all chunks.
async fn read_all(
    fetch: &Connection,
    shuffle_key: &str,
    files: &[String],
    start: i32,
    end: i32,
) -> Vec<Vec<(i32, i32, i32, Bytes)>> {
    let request = TransportMessage::new(
        MessageType::BatchOpenStream,
        &PbOpenStreamList {
            shuffle_key: shuffle_key.into(),
            file_name: files.to_vec(),
            start_index: vec![start; files.len()],
            end_index: vec![end; files.len()],
            initial_credit: vec![0; files.len()],
            read_local_shuffle: vec![false; files.len()],
        },
    );
    let body = fetch.data_rpc(&request).await.unwrap();
    let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
    assert_eq!(tm.message_type, MessageType::BatchOpenStreamResponse as i32);
    let list: PbOpenStreamListResponse = decode(&tm).unwrap();
    assert_eq!(
        list.stream_handler_opt.len(),
        files.len(),
        "one entry per file"
    );
    let mut out = Vec::new();
    for opt in list.stream_handler_opt {
        assert_eq!(opt.status, 0, "{}", opt.error_msg);
        let h = opt.stream_handler.unwrap();
        let mut batches = Vec::new();
        for c in 0..h.num_chunks {
            let chunk = fetch.fetch_chunk(h.stream_id, c).await.unwrap();
            // Chunks end on batch boundaries: each parses on its own.
            batches.extend(parse_batches(&chunk).unwrap());
        }
        let end = TransportMessage::new(
            MessageType::BufferStreamEnd,
            &PbBufferStreamEnd {
                stream_type: 0,
                stream_id: h.stream_id,
            },
        );
        let id = 1_000_000 + out.len() as i64;
        fetch
            .send(switchyard_celeborn::frame::Message::RpcRequest {
                request_id: id,
                body: end.to_bytes(),
            })
            .await
            .unwrap();
        out.push(batches);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_sequence_push_commit_read() {
    // 2 MiB of memory and 64 KiB chunks: the data spills and reads span chunks.
    let env = start(2 << 20, 64 << 10).await;
    let (app, shuffle, partitions, maps) = ("local-1700000000000", 0, 4, 6);
    let lm = Lm::start(&env, app, shuffle, partitions, 1 << 30, 0).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    let mut expected: HashMap<i32, Vec<(i32, i32)>> = HashMap::new();
    for map in 0..maps {
        let mut batch_id = 0;
        for round in 0..10 {
            // Alternate plain pushes and merged pushes, as both writers do.
            if round % 2 == 0 {
                for p in 0..partitions {
                    batch_id += 1;
                    let r = push
                        .push(
                            &key,
                            &format!("{p}-0"),
                            batch(map, 0, batch_id, &data(map, batch_id, 3000)),
                        )
                        .await
                        .unwrap();
                    assert!(r.is_empty(), "written: {r:?}");
                    expected.entry(p).or_default().push((map, batch_id));
                }
            } else {
                let mut merged = Vec::new();
                for p in 0..partitions {
                    batch_id += 1;
                    merged.push((
                        format!("{p}-0"),
                        batch(map, 0, batch_id, &data(map, batch_id, 1000)),
                    ));
                    expected.entry(p).or_default().push((map, batch_id));
                }
                let r = push.push_merged(&key, &merged).await.unwrap();
                assert_eq!(&r[..], &[0], "merged push written");
            }
        }
    }
    let ids: Vec<String> = (0..partitions).map(|p| format!("{p}-0")).collect();
    let committed = lm.commit(shuffle, ids.clone(), maps, 1).await;
    assert_eq!(committed.status, 0);
    assert_eq!(committed.committed_primary_ids.len(), partitions as usize);
    for uid in &ids {
        let info = &committed.committed_primary_storage_infos[uid];
        assert_eq!(info.r#type, 1, "HDD: read through the fetch port");
        assert!(info.final_result);
        let offsets = &info.chunk_offsets;
        assert_eq!(offsets[0], 0);
        assert_eq!(*offsets.last().unwrap(), info.file_size);
        assert!(offsets.len() > 2, "several chunks: {offsets:?}");
    }
    // The same commit epoch again: the same answer.
    let again = lm.commit(shuffle, ids.clone(), maps, 1).await;
    assert_eq!(again, committed);
    assert!(env.store.status().tiers.disk > 0);

    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let files: Vec<String> = ids.iter().map(|u| format!("{u}-0")).collect();
    let all = read_all(&fetch, &key, &files, 0, i32::MAX).await;
    for (p, batches) in all.iter().enumerate() {
        let got: Vec<(i32, i32)> = batches.iter().map(|b| (b.0, b.2)).collect();
        let mut want = expected[&(p as i32)].clone();
        let mut got_sorted = got.clone();
        want.sort();
        got_sorted.sort();
        assert_eq!(got_sorted, want, "partition {p}");
        for (map, _, batch_id, bytes) in batches {
            assert_eq!(&bytes[..], &data(*map, *batch_id, bytes.len())[..]);
        }
    }
    // A map range [2, 4): only maps 2 and 3, map 2 first, arrival order within.
    let ranged = read_all(&fetch, &key, &files[..1], 2, 4).await;
    let maps_seen: Vec<i32> = ranged[0].iter().map(|b| b.0).collect();
    assert!(!maps_seen.is_empty());
    assert!(
        maps_seen.windows(2).all(|w| w[0] <= w[1]),
        "map order: {maps_seen:?}"
    );
    assert!(maps_seen.iter().all(|m| (2..4).contains(m)));
    let per_map: Vec<i32> = ranged[0].iter().filter(|b| b.0 == 2).map(|b| b.2).collect();
    assert!(
        per_map.windows(2).all(|w| w[0] < w[1]),
        "arrival order within a map"
    );

    // After commit, pushes to committed locations get MAP_ENDED.
    let r = push
        .push(&key, "0-0", batch(1, 0, 99, b"late"))
        .await
        .unwrap();
    assert_eq!(&r[..], &[StatusCode::MapEnded.value()]);

    // Unregister: the data is gone.
    lm.unregister_shuffle(shuffle).await;
    assert_eq!(env.store.status().tiers.disk, 0);
}

/// A committed reduce location is forgotten by the worker (its bytes stay in
/// the store): small partitions get their one chunk without an index read,
/// a later commit of another epoch reports them again with the same sizes,
/// pushes to them are refused as before and reads still find every byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_locations_are_dropped_and_committed_again_by_a_new_epoch() {
    let env = start(16 << 20, 64 << 10).await;
    let (app, shuffle) = ("app-dropped", 0);
    let lm = Lm::start(&env, app, shuffle, 3, 1 << 30, 0).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let worker = env.node.addrs.worker.as_ref().unwrap();
    let push = Connection::connect(addr(worker.push_port)).await.unwrap();
    // Partition 0: one small batch; partition 1: 300 KiB, several chunks;
    // partition 2: nothing.
    let r = push
        .push(&key, "0-0", batch(0, 0, 1, &data(0, 1, 100)))
        .await;
    assert!(r.unwrap().is_empty());
    for b in 0..10 {
        let r = push.push(&key, "1-0", batch(0, 0, 10 + b, &data(0, 10 + b, 30 << 10)));
        assert!(r.await.unwrap().is_empty());
    }
    let ids: Vec<String> = (0..3).map(|p| format!("{p}-0")).collect();
    assert_eq!(env.node.worker.live_locations(), 3);
    let first = lm.commit(shuffle, ids.clone(), 1, 1).await;
    assert_eq!(first.status, 0);
    assert_eq!(env.node.worker.live_locations(), 0, "committed: dropped");
    assert_eq!(first.committed_primary_ids, vec!["0-0", "1-0"]);
    let small = &first.committed_primary_storage_infos["0-0"];
    assert_eq!(small.chunk_offsets, vec![0, small.file_size]);
    assert_eq!(small.file_size, 16 + 100, "header and body");
    let large = &first.committed_primary_storage_infos["1-0"];
    assert!(large.chunk_offsets.len() > 2, "{:?}", large.chunk_offsets);
    assert_eq!(*large.chunk_offsets.last().unwrap(), large.file_size);

    // Another epoch names the same ids: the same files, committed again.
    let second = lm.commit(shuffle, ids.clone(), 1, 2).await;
    assert_eq!(second.committed_primary_ids, first.committed_primary_ids);
    assert_eq!(
        second.committed_primary_storage_infos,
        first.committed_primary_storage_infos
    );
    assert_eq!(second.total_written, first.total_written);
    // A retry of the first epoch once its reply is no longer kept (many
    // commits later) commits again: the same answer.
    for epoch in 3..40 {
        lm.commit(shuffle, Vec::new(), 1, epoch).await;
    }
    let retried = lm.commit(shuffle, ids.clone(), 1, 1).await;
    assert_eq!(retried.committed_primary_ids, first.committed_primary_ids);
    assert_eq!(
        retried.committed_primary_storage_infos,
        first.committed_primary_storage_infos
    );

    // A late push: the map ended (as for any committed location).
    let r = push
        .push(&key, "0-0", batch(0, 0, 99, b"late"))
        .await
        .unwrap();
    assert_eq!(&r[..], &[StatusCode::MapEnded.value()]);
    let fetch = Connection::connect(addr(worker.fetch_port)).await.unwrap();
    let files = vec!["0-0-0".to_string(), "1-0-0".to_string()];
    let all = read_all(&fetch, &key, &files, 0, i32::MAX).await;
    assert_eq!(all[0].len(), 1);
    assert_eq!(&all[0][0].3[..], &data(0, 1, 100)[..]);
    let batch_ids: Vec<i32> = all[1].iter().map(|b| b.2).collect();
    assert_eq!(batch_ids, (10..20).collect::<Vec<_>>());
    for (map, _, batch_id, bytes) in &all[1] {
        assert_eq!(&bytes[..], &data(*map, *batch_id, bytes.len())[..]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_thresholds_answer_soft_and_hard_split() {
    let env = start(16 << 20, 1 << 20).await;
    let push_addr = addr(env.node.addrs.worker.as_ref().unwrap().push_port);
    // SOFT: written, then the client is told to split.
    let _lm = Lm::start(&env, "app-soft", 0, 1, 1000, 0).await;
    let push = Connection::connect(push_addr).await.unwrap();
    let r = push
        .push("app-soft-0", "0-0", batch(0, 0, 1, &[1; 1500]))
        .await
        .unwrap();
    assert!(r.is_empty());
    let r = push
        .push("app-soft-0", "0-0", batch(0, 0, 2, &[2; 10]))
        .await
        .unwrap();
    assert_eq!(
        &r[..],
        &[StatusCode::SoftSplit.value()],
        "past the threshold: soft split, still written"
    );
    assert_eq!(env.store.status().operations.appended_bytes, 1516 + 26);
    // HARD, 0.5 client: not written; a merged push is sent back whole.
    let _lm = Lm::start_as(&env, "app-hard05", 0, 2, 1000, 1, false).await;
    push.push("app-hard05-0", "0-0", batch(0, 0, 1, &[1; 1500]))
        .await
        .unwrap();
    let before = env.store.status().operations.appended_bytes;
    let r = push
        .push("app-hard05-0", "0-0", batch(0, 0, 2, &[2; 10]))
        .await
        .unwrap();
    assert_eq!(&r[..], &[StatusCode::HardSplit.value()]);
    let r = push
        .push_merged(
            "app-hard05-0",
            &[
                ("1-0".into(), batch(0, 0, 3, b"a")),
                ("0-0".into(), batch(0, 0, 4, b"b")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(&r[..], &[StatusCode::HardSplit.value()]);
    assert_eq!(
        env.store.status().operations.appended_bytes,
        before,
        "nothing written on hard split"
    );
    // HARD, 0.6.1+ client: the batch for the healthy location is written,
    // and the reply names the split index.
    let _lm = Lm::start(&env, "app-hard", 0, 2, 1000, 1).await;
    push.push("app-hard-0", "0-0", batch(0, 0, 1, &[1; 1500]))
        .await
        .unwrap();
    let before = env.store.status().operations.appended_bytes;
    let r = push
        .push_merged(
            "app-hard-0",
            &[
                ("1-0".into(), batch(0, 0, 3, b"a")),
                ("0-0".into(), batch(0, 0, 4, b"b")),
            ],
        )
        .await
        .unwrap();
    assert_eq!(r[0], StatusCode::HardSplit.value());
    let info = TransportMessage::from_bytes(r.slice(1..)).unwrap().unwrap();
    assert_eq!(
        info.message_type,
        MessageType::PushMergedDataSplitPartitionInfo as i32
    );
    let info: PbPushMergedDataSplitPartitionInfo = decode(&info).unwrap();
    assert_eq!(info.split_partition_indexes, vec![1]);
    assert_eq!(info.status_codes, vec![StatusCode::HardSplit.as_i32()]);
    assert_eq!(
        env.store.status().operations.appended_bytes,
        before + 17,
        "index 0 written"
    );
    // A new epoch of the split partition takes the data.
    let worker = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().rpc_port))
        .await
        .unwrap();
    let r = worker
        .ask(
            endpoint::WORKER,
            TransportMessage::new(
                MessageType::ReserveSlots,
                &PbReserveSlots {
                    application_id: "app-hard".into(),
                    shuffle_id: 0,
                    primary_locations: vec![PbPartitionLocation {
                        id: 0,
                        epoch: 1,
                        ..Default::default()
                    }],
                    split_threshold: 1000,
                    split_mode: 1,
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(decode::<PbReserveSlotsResponse>(&r).unwrap().status, 0);
    let r = push
        .push("app-hard-0", "0-1", batch(0, 0, 2, &[2; 10]))
        .await
        .unwrap();
    assert!(r.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_errors_and_harms_no_one() {
    let env = start(16 << 20, 1 << 20).await;
    let lm = Lm::start(&env, "app-good", 0, 1, 1 << 30, 0).await;
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    push.push("app-good-0", "0-0", batch(0, 0, 1, b"good data"))
        .await
        .unwrap();
    // Unknown shuffle: the failure text starts with the status name.
    let err = push
        .push("nope-0", "0-0", batch(0, 0, 1, b"x"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"),
        "{err}"
    );
    // Unknown message types on the RPC ports fail the ask.
    let err = lm
        .master
        .ask(
            endpoint::MASTER,
            TransportMessage::without_payload(MessageType::StageEnd),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("does not handle"), "{err}");
    // A commit of an unknown shuffle.
    let r = lm
        .worker
        .ask(
            endpoint::WORKER,
            TransportMessage::new(
                MessageType::CommitFiles,
                &PbCommitFiles {
                    application_id: "nope".into(),
                    primary_ids: vec!["0-0".into()],
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    let c: PbCommitFilesResponse = decode(&r).unwrap();
    assert_eq!(c.status, StatusCode::ShuffleUnregistered.as_i32());
    assert_eq!(c.failed_primary_ids, vec!["0-0".to_string()]);
    // A partition type no stock client sends (MAPGROUP) is refused, not
    // guessed, and the shuffle is not set up.
    let r = lm
        .worker
        .ask(
            endpoint::WORKER,
            TransportMessage::new(
                MessageType::ReserveSlots,
                &PbReserveSlots {
                    application_id: "app-mapgroup".into(),
                    shuffle_id: 0,
                    partition_type: 2,
                    primary_locations: vec![PbPartitionLocation {
                        id: 0,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    let reserve: PbReserveSlotsResponse = decode(&r).unwrap();
    assert_eq!(reserve.status, StatusCode::ReserveSlotsFailed.as_i32());
    assert!(reserve.reason.contains("MAPGROUP"), "{}", reserve.reason);
    let err = push
        .push("app-mapgroup-0", "0-0", batch(0, 0, 1, b"x"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"),
        "a Spark push failure is the bare status name: {err}"
    );
    // Opening a stream of something never written.
    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let request = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: "nope-0".into(),
            file_name: "0-0-0".into(),
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    assert!(fetch.data_rpc(&request).await.is_err());
    // Garbage frames close only their own connection, on every port.
    for port in [
        env.node.addrs.master.unwrap(),
        addr(env.node.addrs.worker.as_ref().unwrap().push_port),
        addr(env.node.addrs.worker.as_ref().unwrap().fetch_port),
    ] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(port).await.unwrap();
        raw.write_all(&[0x7f, 0xff, 0xff, 0xff, 0x63, 0, 0, 0, 0, 1, 2, 3])
            .await
            .unwrap();
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0, "closed after a bad frame");
    }
    // A 2 MiB RpcRequest header: past the RPC ports' 1 MiB limit, so the
    // connection closes at once; a data port (16 MiB) waits for the body.
    for (port, closed) in [
        (env.node.addrs.master.unwrap(), true),
        (addr(env.node.addrs.worker.as_ref().unwrap().rpc_port), true),
        (
            addr(env.node.addrs.worker.as_ref().unwrap().push_port),
            false,
        ),
    ] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(port).await.unwrap();
        let mut header = (2i32 << 20).to_be_bytes().to_vec();
        header.extend([0x03, 0, 0, 0, 0]);
        raw.write_all(&header).await.unwrap();
        let mut buf = [0u8; 8];
        // Closing must come, however late; waiting must last a while.
        let within = if closed {
            wait::PATIENCE
        } else {
            Duration::from_millis(500)
        };
        let read = tokio::time::timeout(within, raw.read(&mut buf)).await;
        if closed {
            assert_eq!(read.unwrap().unwrap(), 0, "{port}: closed");
        } else {
            assert!(read.is_err(), "{port}: still waiting for the frame");
        }
    }
    // The good app is intact.
    let committed = lm.commit(0, vec!["0-0".into()], 1, 1).await;
    assert_eq!(committed.committed_primary_ids, vec!["0-0".to_string()]);
    let got = read_all(&fetch, "app-good-0", &["0-0-0".to_string()], 0, i32::MAX).await;
    assert_eq!(&got[0][0].3[..], b"good data");
    // Stream ids cannot be guessed: the neighbours of an open stream's id are
    // no streams at all.
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: "app-good-0".into(),
            file_name: "0-0-0".into(),
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    let body = fetch.data_rpc(&open).await.unwrap();
    let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
    let h: PbStreamHandler = decode(&tm).unwrap();
    assert!(h.stream_id > 0);
    assert!(fetch.fetch_chunk(h.stream_id, 0).await.is_ok());
    for guess in [h.stream_id.wrapping_add(1), h.stream_id - 1, 1] {
        let err = fetch.fetch_chunk(guess, 0).await.unwrap_err();
        assert!(err.to_string().contains("unknown stream"), "{err}");
    }
    // Application lost: everything of it goes.
    let r = lm
        .master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::ApplicationLost,
                &PbApplicationLost {
                    app_id: "app-good".into(),
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(decode::<PbApplicationLostResponse>(&r).unwrap().status, 0);
    assert!(!env.store.has_app(&stored_app("app-good")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_streams_are_closed() {
    let env = start(16 << 20, 1 << 20).await;
    let lm = Lm::start(&env, "app-idle", 0, 1, 1 << 30, 0).await;
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    push.push("app-idle-0", "0-0", batch(0, 0, 1, b"x"))
        .await
        .unwrap();
    lm.commit(0, vec!["0-0".into()], 1, 1).await;
    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: "app-idle-0".into(),
            file_name: "0-0-0".into(),
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    fetch.data_rpc(&open).await.unwrap();
    assert_eq!(env.node.worker.open_streams(), 1);
    assert_eq!(
        env.node.worker.expire_streams(Duration::from_secs(60)),
        0,
        "fresh stream kept"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.node.worker.expire_streams(Duration::from_millis(10)), 1);
    assert_eq!(env.node.worker.open_streams(), 0);
}

// ---- Flink: map partitions and credit-based reads -----------------------

/// One Flink record: the big-endian header the Flink client writes
/// (sub-partition, attempt, batch, length) and its data.
fn flink_record(sub: i32, batch: i32, payload: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(16 + payload.len());
    for word in [sub, 0, batch, payload.len() as i32] {
        v.extend_from_slice(&word.to_be_bytes());
    }
    v.extend_from_slice(payload);
    Bytes::from(v)
}

fn flink_payload(map: i32, region: i32, sub: i32, n: i32) -> Vec<u8> {
    let len = 200 + ((map * 7919 + region * 131 + sub * 17 + n * 3) % 5000) as usize;
    (0..len)
        .map(|i| (i as i32 * 13 + map * 5 + region * 3 + sub + n) as u8)
        .collect()
}

async fn map_rpc(
    push: &Connection,
    kind: MessageType,
    payload: &impl prost::Message,
) -> Result<Bytes, String> {
    push.data_rpc(&TransportMessage::new(kind, payload))
        .await
        .map_err(|e| e.to_string())
}

/// One region of a map task as the Flink client writes it: start, records
/// in ascending sub-partition order, finish. Returns the records.
async fn write_region(
    push: &Connection,
    key: &str,
    uid: &str,
    map: i32,
    region: i32,
    broadcast: bool,
    subs: &[(i32, i32)],
) -> Vec<(i32, Bytes)> {
    let start = PbRegionStart {
        mode: 0,
        shuffle_key: key.into(),
        partition_unique_id: uid.into(),
        attempt_id: 0,
        current_region_index: region,
        is_broadcast: broadcast,
    };
    assert!(map_rpc(push, MessageType::RegionStart, &start)
        .await
        .unwrap()
        .is_empty());
    let mut written = Vec::new();
    let mut replies = Vec::new();
    let mut batch = region * 1000;
    for &(sub, count) in subs {
        for n in 0..count {
            batch += 1;
            let record = flink_record(sub, batch, &flink_payload(map, region, sub, n));
            // All of the region's pushes in flight at once, as the client
            // pipelines them (the region finish waits for none): the worker
            // must keep their order.
            replies.push(push.push_queued(key, uid, record.clone()).await.unwrap());
            written.push((sub, record));
        }
    }
    let finish = PbRegionFinish {
        mode: 0,
        shuffle_key: key.into(),
        partition_unique_id: uid.into(),
        attempt_id: 0,
    };
    assert!(map_rpc(push, MessageType::RegionFinish, &finish)
        .await
        .unwrap()
        .is_empty());
    for r in futures::future::join_all(replies).await {
        assert!(r.unwrap().is_empty());
    }
    written
}

/// What a reader of `[start, end]` must get, in order: a broadcast region
/// once per sub-partition of the range, as Celeborn serves it.
fn expected_reads(regions: &[(bool, Vec<(i32, Bytes)>)], start: i32, end: i32) -> Vec<Bytes> {
    let mut out = Vec::new();
    for (broadcast, records) in regions {
        if *broadcast {
            for _ in start..=end {
                out.extend(
                    records
                        .iter()
                        .filter(|(sub, _)| *sub == 0)
                        .map(|(_, r)| r.clone()),
                );
            }
        } else {
            out.extend(
                records
                    .iter()
                    .filter(|(sub, _)| (start..=end).contains(sub))
                    .map(|(_, r)| r.clone()),
            );
        }
    }
    out
}

struct CreditRead {
    records: Vec<Bytes>,
    /// Backlog announcements, in order.
    backlogs: Vec<i32>,
    ended: bool,
    error: Option<String>,
}

/// A map task's regions as written: (broadcast, [(sub-partition, record)]).
type Regions = Vec<(bool, Vec<(i32, Bytes)>)>;

/// Waits until the worker holds no credit stream; fails with `what` if it
/// still does after [`wait::PATIENCE`].
async fn no_credit_streams_left(env: &Env, what: &str) {
    wait::eventually(what, || env.node.worker.credit_stream_ids().is_empty()).await;
}

/// Opens a credit stream and reads it without granting any credit beyond
/// `initial_credit` (a stalled reader), until its end, an error, or `quiet`
/// without any frame. Readers that grant credit use the client's
/// `read_credit_stream`.
async fn stalled_read(
    fetch: &Connection,
    events: &mut tokio::sync::mpsc::UnboundedReceiver<switchyard_celeborn::frame::Message>,
    key: &str,
    file: &str,
    (start, end): (i32, i32),
    initial_credit: i32,
    quiet: Duration,
) -> Result<CreditRead, String> {
    use switchyard_celeborn::frame::Message as M;
    let open = PbOpenStream {
        shuffle_key: key.into(),
        file_name: file.into(),
        start_index: start,
        end_index: end,
        initial_credit,
        read_local_shuffle: false,
    };
    let body = fetch
        .data_rpc(&TransportMessage::new(MessageType::OpenStream, &open))
        .await
        .map_err(|e| e.to_string())?;
    let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
    let handler: PbStreamHandler = decode(&tm).unwrap();
    let stream = handler.stream_id;
    let mut out = CreditRead {
        records: Vec::new(),
        backlogs: Vec::new(),
        ended: false,
        error: None,
    };
    let mut credit = initial_credit as i64;
    while let Ok(Some(m)) = tokio::time::timeout(quiet, events.recv()).await {
        match m {
            M::ReadData { stream_id, body } => {
                assert_eq!(stream_id, stream);
                credit -= 1;
                assert!(credit >= 0, "data beyond the granted credit");
                out.records.push(body);
            }
            M::BacklogAnnouncement { stream_id, backlog } => {
                assert_eq!(stream_id, stream);
                assert!(backlog > 0);
                out.backlogs.push(backlog);
            }
            M::RpcRequest { body, .. } => {
                let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
                assert_eq!(tm.message_type, MessageType::BufferStreamEnd as i32);
                let end: PbBufferStreamEnd = decode(&tm).unwrap();
                assert_eq!(
                    (end.stream_type, end.stream_id),
                    (1, stream),
                    "CreditStream end"
                );
                out.ended = true;
                break;
            }
            M::TransportableError { stream_id, message } => {
                assert_eq!(stream_id, stream);
                out.error = Some(message);
                break;
            }
            other => panic!("unexpected frame {other:?}"),
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_map_partitions_regions_broadcast_and_credit_reads() {
    // 1 MiB of memory: the map partitions spill to disk while being written.
    let env = start(1 << 20, 64 << 10).await;
    let (app, shuffle, maps, subs) = ("flink-app-1", 3, 3, 6);
    let lm = Lm::start_map(&env, app, shuffle, maps).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();

    // Data before a handshake is refused.
    let early = PbRegionStart {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        current_region_index: 0,
        is_broadcast: false,
    };
    let err = map_rpc(&push, MessageType::RegionStart, &early)
        .await
        .unwrap_err();
    assert!(err.contains("handshake"), "{err}");

    // More sub-partitions than Flink's max parallelism: an RPC failure, and
    // the location keeps no handshake.
    let huge = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        num_partitions: i32::MAX,
        buffer_size: 32 * 1024,
    };
    let err = map_rpc(&push, MessageType::PushDataHandShake, &huge)
        .await
        .unwrap_err();
    assert!(err.contains("2147483647 sub-partitions"), "{err}");
    let err = map_rpc(&push, MessageType::RegionStart, &early)
        .await
        .unwrap_err();
    assert!(err.contains("handshake"), "{err}");

    let mut written: Vec<Regions> = Vec::new();
    for map in 0..maps {
        let uid = format!("{map}-0");
        let hs = PbPushDataHandShake {
            mode: 0,
            shuffle_key: key.clone(),
            partition_unique_id: uid.clone(),
            attempt_id: 0,
            num_partitions: subs,
            buffer_size: 32 * 1024,
        };
        assert!(map_rpc(&push, MessageType::PushDataHandShake, &hs)
            .await
            .unwrap()
            .is_empty());
        let mut regions = Vec::new();
        let plan: [(bool, Vec<(i32, i32)>); 4] = [
            (false, vec![(0, 3), (1, 40), (4, 2), (5, 30)]),
            (true, vec![(0, 5)]),
            (false, vec![]),
            (false, vec![(2, 25), (3, 1), (5, 60)]),
        ];
        for (region, (broadcast, layout)) in plan.iter().enumerate() {
            let records =
                write_region(&push, &key, &uid, map, region as i32, *broadcast, layout).await;
            regions.push((*broadcast, records));
        }
        written.push(regions);
    }
    // Out of order within a region, and outside the sub-partitions: refused.
    let start = PbRegionStart {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        current_region_index: 9,
        is_broadcast: false,
    };
    map_rpc(&push, MessageType::RegionStart, &start)
        .await
        .unwrap();
    push.push(&key, "0-0", flink_record(3, 1, b"x"))
        .await
        .unwrap();
    let err = push
        .push(&key, "0-0", flink_record(2, 2, b"x"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("reduce partition index order"),
        "{err}"
    );
    let err = push
        .push(&key, "0-0", flink_record(subs, 3, b"x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outside"), "{err}");
    // (Region 9 never finishes: its record is not readable.)

    // Each mapper's end commits its own location (MapPartitionCommitHandler).
    for map in 0..maps {
        let c = lm
            .commit(shuffle, vec![format!("{map}-0")], 0, 10 + map as i64)
            .await;
        assert_eq!(c.status, 0);
        assert_eq!(c.committed_primary_ids, vec![format!("{map}-0")]);
    }
    // Committed map partitions are held sealed (their regions only), still
    // counted as held, and take nothing more.
    assert_eq!(env.node.worker.live_locations(), maps as usize);
    let late = PbRegionStart {
        current_region_index: 10,
        ..start.clone()
    };
    let err = map_rpc(&push, MessageType::RegionStart, &late)
        .await
        .unwrap_err();
    assert!(err.contains("0-0"), "{err}");
    let err = push
        .push(&key, "1-0", flink_record(0, 99, b"late"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("1-0"), "{err}");
    // A later commit naming them reports them again.
    let again = lm.commit(shuffle, vec!["2-0".to_string()], 0, 20).await;
    assert_eq!(again.committed_primary_ids, vec!["2-0".to_string()]);
    assert!(
        env.store.status().tiers.disk > 0,
        "spilled and committed to disk"
    );

    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let mut events = fetch.subscribe();
    for map in 0..maps {
        let file = format!("{map}-0-0");
        for range in [(0, subs - 1), (1, 1), (2, 4), (5, 5), (3, 3)] {
            let read = fetch
                .read_credit_stream(&mut events, &key, &file, range, 2)
                .await
                .expect("the stream reaches its end");
            let want = expected_reads(&written[map as usize], range.0, range.1);
            assert_eq!(read.records.len(), want.len(), "map {map} {range:?}");
            assert!(read.records == want, "map {map} {range:?}: records differ");
        }
    }

    // Flink opens every input channel at once, with no credit: such a stream
    // hears its first backlog (from the index), and nothing is read for it
    // until its reader grants credit.
    {
        let idle = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
            .await
            .unwrap();
        let mut ev = idle.subscribe();
        let before = env.store.status().operations.read_bytes;
        let read = stalled_read(
            &idle,
            &mut ev,
            &key,
            "0-0-0",
            (0, subs - 1),
            0,
            Duration::from_millis(1500),
        )
        .await
        .unwrap();
        assert!(read.records.is_empty() && !read.ended && read.error.is_none());
        assert_eq!(read.backlogs.len(), 1, "one batch announced");
        assert_eq!(
            env.store.status().operations.read_bytes,
            before,
            "nothing read before any credit"
        );
    }
    no_credit_streams_left(&env, "idle stream kept").await;

    // Back-pressure: one credit, never more: exactly one record, then silence.
    let read = stalled_read(
        &fetch,
        &mut events,
        &key,
        "1-0-0",
        (0, subs - 1),
        1,
        Duration::from_millis(1500),
    )
    .await
    .unwrap();
    assert_eq!(read.records.len(), 1);
    assert!(!read.ended);
    // That stalled stream is still open; the server closes it when the reader
    // says so, and it leaves the worker healthy for the next reader.
    let open = env.node.worker.credit_stream_ids();
    assert_eq!(open.len(), 1);
    let stalled = open[0];
    fetch
        .send(switchyard_celeborn::frame::Message::RpcRequest {
            request_id: 77,
            body: TransportMessage::new(
                MessageType::BufferStreamEnd,
                &PbBufferStreamEnd {
                    stream_type: 1,
                    stream_id: stalled,
                },
            )
            .to_bytes(),
        })
        .await
        .unwrap();
    no_credit_streams_left(&env, "a stream its reader ended kept").await;

    // A reader that disconnects mid-stream: its stream goes away with it.
    {
        let gone = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
            .await
            .unwrap();
        let mut ev = gone.subscribe();
        let read = stalled_read(
            &gone,
            &mut ev,
            &key,
            "2-0-0",
            (0, subs - 1),
            3,
            Duration::from_millis(1500),
        )
        .await
        .unwrap();
        assert_eq!(read.records.len(), 3);
    }
    no_credit_streams_left(&env, "stream of a closed connection kept").await;
    let again = fetch
        .read_credit_stream(&mut events, &key, "2-0-0", (0, subs - 1), 2)
        .await
        .expect("the stream reaches its end");
    assert!(again.records == expected_reads(&written[2], 0, subs - 1));

    // Bad opens get an RPC failure: unknown file, bad range.
    for (file, range) in [("9-0-0", (0, 0)), ("0-0-0", (4, 2)), ("0-0-0", (0, subs))] {
        let open = PbOpenStream {
            shuffle_key: key.clone(),
            file_name: file.into(),
            start_index: range.0,
            end_index: range.1,
            initial_credit: 1,
            read_local_shuffle: false,
        };
        let r = fetch
            .data_rpc(&TransportMessage::new(MessageType::OpenStream, &open))
            .await;
        assert!(r.is_err(), "{file} {range:?} opened");
    }

    // Unregistering the shuffle removes its data.
    lm.unregister_shuffle(shuffle).await;
    assert_eq!(env.store.status().tiers.disk, 0);
}

/// SEGMENT_START of a hybrid producer on location "0-0".
async fn start_segment(
    push: &Connection,
    key: &str,
    sub: i32,
    segment: i32,
) -> Result<Bytes, String> {
    let s = PbSegmentStart {
        mode: 0,
        shuffle_key: key.into(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        sub_partition_id: sub,
        segment_id: segment,
    };
    map_rpc(push, MessageType::SegmentStart, &s).await
}

/// A hybrid producer's handshake on location "0-0", then segment 0 of each
/// of its `subs` sub-partitions.
async fn hybrid_handshake(push: &Connection, key: &str, subs: i32) {
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.into(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        num_partitions: subs,
        buffer_size: 32 * 1024,
    };
    map_rpc(push, MessageType::PushDataHandShake, &hs)
        .await
        .unwrap();
    for sub in 0..subs {
        assert!(start_segment(push, key, sub, 0).await.unwrap().is_empty());
    }
}

/// Hybrid pushes count against `hybrid_memory`: past it a push flushes its
/// shuffle to disk; under it the same pushes stay in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_hybrid_pushes_past_their_budget_go_to_disk() {
    for (budget, spilled) in [(1024, true), (1 << 30, false)] {
        let env = start_tuned(64 << 20, 64 << 10, None, |_, cc| {
            cc.hybrid_memory = ByteSize::b(budget);
        })
        .await;
        let (app, shuffle) = ("flink-hybrid-budget", 5);
        let _lm = Lm::start_map(&env, app, shuffle, 1).await;
        let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
        let worker = env.node.addrs.worker.as_ref().unwrap();
        let push = Connection::connect(addr(worker.push_port)).await.unwrap();
        hybrid_handshake(&push, &key, 1).await;
        write_region(&push, &key, "0-0", 0, 0, false, &[(0, 10)]).await;
        let disk = env.store.status().tiers.disk;
        assert_eq!(disk > 0, spilled, "budget {budget}: {disk} bytes on disk");
    }
}

/// Hybrid shuffle (Flink 1.20 with Celeborn as its remote tier): SEGMENT_START
/// before each segment's records, a reader that opens while the partition is
/// still written, gets nothing before NOTIFY_REQUIRED_SEGMENT and never a
/// record of a segment beyond the one it asked for, each as
/// SUBPARTITION_READ_DATA against credit it granted for an announced backlog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_hybrid_segments_gate_reads_of_a_partition_being_written() {
    use switchyard_celeborn::frame::Message as M;
    let env = start(1 << 20, 64 << 10).await;
    let (app, shuffle) = ("flink-hybrid", 4);
    let lm = Lm::start_map(&env, app, shuffle, 1).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let worker = env.node.addrs.worker.as_ref().unwrap();
    let push = Connection::connect(addr(worker.push_port)).await.unwrap();
    hybrid_handshake(&push, &key, 2).await;
    let err = start_segment(&push, &key, 2, 0).await.unwrap_err();
    assert!(err.contains("sub-partition 2 is outside"), "{err}");
    // Segment 0 of both sub-partitions, then segment 1 of sub-partition 0.
    let r0 = write_region(&push, &key, "0-0", 0, 0, false, &[(0, 3), (1, 2)]).await;
    start_segment(&push, &key, 0, 1).await.unwrap();
    let r1 = write_region(&push, &key, "0-0", 0, 1, false, &[(0, 2)]).await;
    let sub0 = |r: &[(i32, Bytes)]| -> Vec<Bytes> {
        r.iter()
            .filter(|(s, _)| *s == 0)
            .map(|(_, b)| b.clone())
            .collect()
    };

    let fetch = Connection::connect(addr(worker.fetch_port)).await.unwrap();
    let mut events = fetch.subscribe();
    let open = PbOpenStream {
        shuffle_key: key.clone(),
        file_name: "0-0-0".into(),
        start_index: 0,
        end_index: 0,
        initial_credit: 0,
        read_local_shuffle: false,
    };
    let tm = TransportMessage::from_bytes(
        fetch
            .data_rpc(&TransportMessage::new(MessageType::OpenStream, &open))
            .await
            .expect("a hybrid partition opens before its commit"),
    )
    .unwrap()
    .unwrap();
    let stream = decode::<PbStreamHandler>(&tm).unwrap().stream_id;
    let quiet = Duration::from_millis(300);
    let nothing = |events: &mut tokio::sync::mpsc::UnboundedReceiver<M>| {
        let got = events.try_recv();
        assert!(got.is_err(), "unexpected {got:?}");
    };
    tokio::time::sleep(quiet).await;
    nothing(&mut events);

    // Asks for a segment, then reads what the worker announces for it.
    let require = |segment: i32| PbNotifyRequiredSegment {
        stream_id: stream,
        required_segment_id: segment,
        sub_partition_id: 0,
    };
    async fn read_segment(
        fetch: &Connection,
        events: &mut tokio::sync::mpsc::UnboundedReceiver<M>,
        stream: i64,
        require: PbNotifyRequiredSegment,
    ) -> Vec<Bytes> {
        let tm = TransportMessage::new(MessageType::NotifyRequiredSegment, &require);
        fetch.data_rpc(&tm).await.unwrap();
        async fn next(events: &mut tokio::sync::mpsc::UnboundedReceiver<M>) -> M {
            let recv = tokio::time::timeout(Duration::from_secs(10), events.recv());
            recv.await.expect("a frame within 10 s").unwrap()
        }
        let backlog = match next(events).await {
            M::BacklogAnnouncement { stream_id, backlog } if stream_id == stream => backlog,
            other => panic!("expected a backlog, got {other:?}"),
        };
        let grant = PbReadAddCredit {
            stream_id: stream,
            credit: backlog,
        };
        fetch
            .data_rpc(&TransportMessage::new(MessageType::ReadAddCredit, &grant))
            .await
            .unwrap();
        let mut got = Vec::new();
        for _ in 0..backlog {
            match next(events).await {
                M::SubPartitionReadData {
                    stream_id,
                    sub_partition_id,
                    body,
                } if stream_id == stream => {
                    assert_eq!(sub_partition_id, 0);
                    got.push(body);
                }
                other => panic!("expected data, got {other:?}"),
            }
        }
        got
    }
    let seg0 = read_segment(&fetch, &mut events, stream, require(0)).await;
    assert!(seg0 == sub0(&r0), "segment 0: {} records", seg0.len());
    tokio::time::sleep(quiet).await;
    nothing(&mut events);

    // Written while the reader waits: segment 2, in a region of its own.
    start_segment(&push, &key, 0, 2).await.unwrap();
    let r2 = write_region(&push, &key, "0-0", 0, 2, false, &[(0, 1)]).await;
    let seg1 = read_segment(&fetch, &mut events, stream, require(1)).await;
    assert!(seg1 == sub0(&r1), "segment 1: {} records", seg1.len());
    tokio::time::sleep(quiet).await;
    nothing(&mut events);
    let seg2 = read_segment(&fetch, &mut events, stream, require(2)).await;
    assert!(seg2 == sub0(&r2), "segment 2: {} records", seg2.len());

    // The commit ends the stream.
    let c = lm.commit(shuffle, vec!["0-0".into()], 1, 1).await;
    assert_eq!(c.committed_primary_ids, vec!["0-0".to_string()]);
    match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
        Ok(Some(M::RpcRequest { body, .. })) => {
            let tm = TransportMessage::from_bytes(body).unwrap().unwrap();
            assert_eq!(tm.message_type, MessageType::BufferStreamEnd as i32);
        }
        other => panic!("expected the stream's end, got {other:?}"),
    }
    no_credit_streams_left(&env, "the hybrid stream is forgotten").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_map_partition_past_the_huge_threshold_is_read_back_from_the_cold_tier() {
    // 1 MiB of memory, partitions past 256 KiB are huge: the map task's data
    // spills, mostly to the cold tier, and the reader gets it back from there.
    let env = start_with(1 << 20, 64 << 10, Some(256 << 10)).await;
    let (app, shuffle, subs) = ("flink-cold-1", 0, 4);
    let lm = Lm::start_map(&env, app, shuffle, 1).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        num_partitions: subs,
        buffer_size: 32 * 1024,
    };
    map_rpc(&push, MessageType::PushDataHandShake, &hs)
        .await
        .unwrap();
    let mut regions = Vec::new();
    for region in 0..20 {
        let layout = [(0, 20), (1, 30), (2, 10), (3, 40)];
        regions.push((
            false,
            write_region(&push, &key, "0-0", 0, region, false, &layout).await,
        ));
    }
    let c = lm.commit(shuffle, vec!["0-0".into()], 0, 1).await;
    assert_eq!(c.committed_primary_ids, vec!["0-0".to_string()]);
    let tiers = env.store.status().tiers;
    assert!(tiers.cold > tiers.disk, "mostly cold: {tiers:?}");

    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let mut events = fetch.subscribe();
    for range in [(0, subs - 1), (1, 2), (3, 3)] {
        let read = fetch
            .read_credit_stream(&mut events, &key, "0-0-0", range, 2)
            .await
            .expect("the stream reaches its end");
        assert!(
            read.records == expected_reads(&regions, range.0, range.1),
            "{range:?}"
        );
    }
    assert!(
        env.store.status().cold.unwrap().read_bytes > 0,
        "read from the cold tier"
    );
    lm.unregister_shuffle(shuffle).await;
    assert_eq!(env.store.status().tiers.cold, 0);
}

/// The review's live probe, as a test: reserve, push batch A (acked), stay
/// silent past the application timeout, heartbeat once (which registers the
/// application again), push batch B. Before, B was acked, CommitFiles
/// succeeded and the reader got only B. Now the expiry reaches the worker's
/// state too, and everything after it fails with Celeborn's own statuses:
/// the client revives or fails, it never reads short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_app_gets_errors_never_a_short_read() {
    let env = start_tuned(16 << 20, 1 << 20, None, |sc, cc| {
        sc.apps.expiry_check_interval = Duration::from_millis(50);
        // Long enough for the requests before the silence and after the
        // heartbeat to run within one lease on a slow machine.
        cc.app_timeout = Duration::from_secs(2);
    })
    .await;
    let (app, shuffle) = ("app-silent", 0);
    let lm = Lm::start(&env, app, shuffle, 1, 1 << 30, 0).await;
    let key = switchyard_celeborn::ShuffleKey::new(app, shuffle).to_string();
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    let r = push
        .push(&key, "0-0", batch(0, 0, 1, &data(0, 1, 500)))
        .await
        .unwrap();
    assert!(r.is_empty(), "batch A acked");
    assert!(env.node.worker.has_shuffle(app, shuffle));

    // Silence past the application timeout: the app leaves the store, the
    // worker's state and the status; its bytes go with the removal, which
    // runs behind the expiry.
    wait::eventually("the app expired and its data removed", || {
        let status = env.store.status();
        !env.store.has_app(&stored_app(app))
            && !env.node.worker.has_shuffle(app, shuffle)
            && status.tiers.disk == 0
            && status.tiers.memory == 0
    })
    .await;
    assert!(env
        .store
        .status()
        .applications
        .iter()
        .all(|a| *a.id != *stored_app(app)));
    assert_eq!(env.store.status().tiers.disk, 0);
    assert_eq!(env.store.status().tiers.memory, 0);

    // One heartbeat registers the application again...
    assert_eq!(heartbeat(&lm.master, app).await.status, 0);
    assert!(env.store.has_app(&stored_app(app)));

    // ...but batch B is refused with the status the client revives on,
    let err = push
        .push(&key, "0-0", batch(0, 0, 2, &data(0, 2, 500)))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"),
        "{err}"
    );
    // the revive's ReserveSlots (a new epoch) is refused,
    let r = lm
        .worker
        .ask(
            endpoint::WORKER,
            TransportMessage::new(
                MessageType::ReserveSlots,
                &PbReserveSlots {
                    application_id: app.into(),
                    shuffle_id: shuffle,
                    primary_locations: vec![PbPartitionLocation {
                        id: 0,
                        epoch: 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    let reserved: PbReserveSlotsResponse = decode(&r).unwrap();
    assert_eq!(
        reserved.status,
        StatusCode::ReserveSlotsFailed.as_i32(),
        "{}",
        reserved.reason
    );
    let err = push
        .push(&key, "0-1", batch(0, 0, 2, &data(0, 2, 500)))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("PUSH_DATA_FAIL_PARTITION_NOT_FOUND"),
        "{err}"
    );
    // the commit fails every location,
    let committed = lm.commit(shuffle, vec!["0-0".into()], 1, 1).await;
    assert_eq!(committed.status, StatusCode::ShuffleUnregistered.as_i32());
    assert_eq!(committed.failed_primary_ids, vec!["0-0".to_string()]);
    assert!(committed.committed_primary_ids.is_empty());
    // and a reader gets an error instead of the stream.
    let fetch = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().fetch_port))
        .await
        .unwrap();
    let open = TransportMessage::new(
        MessageType::OpenStream,
        &PbOpenStream {
            shuffle_key: key.clone(),
            file_name: "0-0-0".into(),
            start_index: 0,
            end_index: i32::MAX,
            ..Default::default()
        },
    );
    assert!(
        fetch.data_rpc(&open).await.is_err(),
        "no stream of a dead shuffle"
    );
}

/// With no writable tier, CommitFiles answers in bounded time (the store's
/// commit_timeout) with the stuck ids failed, and so does a retry of the
/// same epoch (which commits afresh: a failed answer is not kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_fails_in_bounded_time_with_no_writable_tier() {
    let env = start_tuned(16 << 20, 1 << 20, None, |sc, _| {
        sc.commit_timeout = Duration::from_millis(300);
        // The first flush fills the only disk (flushes already placed
        // complete); after it nothing is writable.
        sc.disks.capacity = Some(ByteSize::b(1));
    })
    .await;
    let lm = Lm::start(&env, "app-stuck", 0, 2, 1 << 30, 0).await;
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    for id in ["0-0", "1-0"] {
        let r = push
            .push("app-stuck-0", id, batch(0, 0, 1, &[7; 1000]))
            .await
            .unwrap();
        assert!(r.is_empty());
    }
    let c = lm.commit(0, vec!["0-0".into()], 1, 0).await;
    assert_eq!(c.committed_primary_ids, vec!["0-0".to_string()]);
    assert_eq!(
        env.store.status().disks[0].health,
        switchyard_storage::DiskHealth::Full
    );
    for _ in 0..2 {
        let c = tokio::time::timeout(
            Duration::from_secs(20),
            lm.commit(0, vec!["1-0".into()], 1, 1),
        )
        .await
        .expect("CommitFiles answered in bounded time");
        assert_eq!(c.failed_primary_ids, vec!["1-0".to_string()], "{c:?}");
        assert!(c.committed_primary_ids.is_empty());
        assert_ne!(c.status, StatusCode::Success.as_i32());
    }
    // Acknowledged, not lost: the batch waits in memory.
    let key = switchyard_storage::PartitionKey::new(stored_app("app-stuck"), 0, 1);
    assert_eq!(env.store.partition_stats(&key).unwrap().disk_bytes, 0);
    assert!(env.store.partition_stats(&key).unwrap().memory_bytes > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_at_its_quota_gets_check_quota_false_and_no_slots() {
    let env = start_tuned(64 << 20, 1 << 20, None, |sc, _| {
        sc.apps.max_user_bytes = Some(ByteSize::kib(4));
    })
    .await;
    let master = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    let user = PbUserIdentifier {
        tenant_id: "t1".into(),
        name: "alice".into(),
    };
    let check = || async {
        let r = master
            .ask(
                endpoint::MASTER,
                TransportMessage::new(
                    MessageType::CheckQuota,
                    &PbCheckQuota {
                        user_identifier: Some(user.clone()),
                    },
                ),
            )
            .await
            .unwrap();
        decode::<PbCheckQuotaResponse>(&r).unwrap()
    };
    let slots = |shuffle: i32| {
        let master = &master;
        let user = user.clone();
        async move {
            let r = master
                .ask(
                    endpoint::MASTER,
                    TransportMessage::new(
                        MessageType::RequestSlots,
                        &PbRequestSlots {
                            application_id: "quota-app".into(),
                            shuffle_id: shuffle,
                            partition_id_list: vec![0],
                            user_identifier: Some(user),
                            ..Default::default()
                        },
                    ),
                )
                .await
                .unwrap();
            decode::<PbRequestSlotsResponse>(&r).unwrap().status
        }
    };
    let lm = Lm::start(&env, "quota-app", 0, 1, 1 << 30, 0).await;
    assert!(check().await.available);
    assert_eq!(slots(0).await, 0);
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    let r = push
        .push("quota-app-0", "0-0", batch(0, 0, 1, &data(0, 1, 5000)))
        .await
        .unwrap();
    assert!(r.is_empty());
    let over = check().await;
    assert!(!over.available);
    assert!(over.reason.contains("user t1.alice"), "{}", over.reason);
    assert_eq!(slots(1).await, StatusCode::SlotNotAvailable.as_i32());
    // The driver's heartbeat says so too: a 0.6 driver with
    // celeborn.quota.interruptShuffle.enabled cancels its running stages.
    let quota = heartbeat(&master, "quota-app")
        .await
        .check_quota_response
        .unwrap();
    assert!(!quota.available);
    assert!(quota.reason.contains("user t1.alice"), "{}", quota.reason);
    drop(lm);
}

/// RequestSlots with a tags expression: the status it gets from a master
/// whose only worker carries `ssd` and `env=it`.
async fn slots_for_tags(env: &Env, tags_expr: &str) -> i32 {
    let master = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    let r = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(
                MessageType::RequestSlots,
                &PbRequestSlots {
                    application_id: "tags-app".into(),
                    shuffle_id: 0,
                    partition_id_list: vec![0, 1],
                    tags_expr: tags_expr.into(),
                    ..Default::default()
                },
            ),
        )
        .await
        .unwrap();
    decode::<PbRequestSlotsResponse>(&r).unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_expression_selects_workers_carrying_every_tag() {
    let tagged = |enabled: bool| {
        move |_: &mut StoreConfig, cc: &mut CelebornConfig| {
            cc.worker_tags = vec!["ssd".into(), "env=it".into()];
            cc.tags_enabled = enabled;
        }
    };
    let env = start_tuned(64 << 20, 1 << 20, None, tagged(true)).await;
    for matching in ["", "ssd", " env=it , ssd "] {
        assert_eq!(slots_for_tags(&env, matching).await, 0, "{matching:?}");
    }
    for other in ["hdd", "ssd,hdd", "env=prod"] {
        assert_eq!(
            slots_for_tags(&env, other).await,
            StatusCode::WorkerExcluded.as_i32(),
            "{other:?}"
        );
    }
    // With tags off the expression is ignored.
    let env = start_tuned(64 << 20, 1 << 20, None, tagged(false)).await;
    assert_eq!(slots_for_tags(&env, "hdd").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_congested_worker_answers_pushes_congested_and_keeps_them() {
    let env = start_tuned(64 << 20, 1 << 20, None, |_, cc| {
        cc.congestion.enabled = true;
        cc.congestion.high_watermark = 0.0001;
        cc.congestion.low_watermark = 0.0;
    })
    .await;
    let _lm = Lm::start(&env, "busy-app", 0, 2, 1 << 30, 0).await;
    let push = Connection::connect(addr(env.node.addrs.worker.as_ref().unwrap().push_port))
        .await
        .unwrap();
    let congested = vec![StatusCode::PushDataSuccessPrimaryCongested.value()];
    // The first push finds the budget empty; from then on it is past the
    // high watermark (6.4 KiB of 64 MiB) and stays so.
    let first = push
        .push("busy-app-0", "0-0", batch(0, 0, 1, &data(0, 1, 5000)))
        .await
        .unwrap();
    assert!(first.is_empty(), "{first:?}");
    let second = push
        .push("busy-app-0", "0-0", batch(0, 0, 2, &data(0, 2, 5000)))
        .await
        .unwrap();
    assert_eq!(second.as_ref(), congested.as_slice());
    let key = switchyard_storage::PartitionKey::new(stored_app("busy-app"), 0, 0);
    let held = env.store.partition_stats(&key).unwrap().memory_bytes;
    assert!(held >= 2 * 5000, "both pushes were kept: {held}");
}
