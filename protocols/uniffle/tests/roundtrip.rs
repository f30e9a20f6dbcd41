//! The Uniffle protocol end to end with the project's Rust client: every
//! request and response type over gRPC and Netty, spills to disk, large and
//! empty reads, many connections, and bad input.

#[path = "../../frame/tests/support/eventually.rs"]
mod wait;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_clients::uniffle::{
    ClientBlock, Coordinator, ReadOptions, ShuffleServer, Transport,
};
use switchyard_storage::{Store, StoreConfig};
use switchyard_uniffle::bitmap::IdBitmap;
use switchyard_uniffle::config::ReportDurability;
use switchyard_uniffle::proto::*;
use switchyard_uniffle::server::stored_app;
use switchyard_uniffle::{UniffleConfig, UniffleNode};

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    node: UniffleNode,
}

/// The coordinator's registration secret in these tests.
const SECRET: &str = "test-cluster-secret";

async fn start(memory: u64) -> Env {
    start_with(memory, |_| {}).await
}

async fn start_with(memory: u64, tune: impl FnOnce(&mut StoreConfig)) -> Env {
    start_full(memory, tune, |_| {}).await
}

async fn start_full(
    memory: u64,
    tune: impl FnOnce(&mut StoreConfig),
    tune_uniffle: impl FnOnce(&mut UniffleConfig),
) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut sc = StoreConfig::default();
    sc.memory.capacity = ByteSize::b(memory);
    sc.memory.single_buffer_threshold = ByteSize::b(memory / 8);
    sc.memory.spill_check_interval = Duration::from_millis(20);
    sc.disks.dirs = vec![dir.path().join("d0"), dir.path().join("d1")];
    // Independent of the free space of the machine running the tests.
    sc.disks.min_free = ByteSize::b(0);
    tune(&mut sc);
    let store = Store::open(sc).await.unwrap();
    let mut uc = UniffleConfig {
        coordinator_listen: "127.0.0.1:0".parse().unwrap(),
        server_grpc_listen: "127.0.0.1:0".parse().unwrap(),
        server_netty_listen: Some("127.0.0.1:0".parse().unwrap()),
        max_message_size: ByteSize::mib(64),
        max_frame_size: ByteSize::mib(64),
        registration_secret: Some(SECRET.into()),
        ..Default::default()
    };
    tune_uniffle(&mut uc);
    let node = UniffleNode::start(uc, store.clone()).await.unwrap();
    Env {
        _dir: dir,
        store,
        node,
    }
}

impl Env {
    fn coordinator(&self) -> String {
        self.node.addrs.coordinator.unwrap().to_string()
    }
    fn server(&self) -> ShuffleServerId {
        self.node.addrs.server_id.clone()
    }
}

/// Deterministic block bytes from the id.
fn data(id: i64, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| (id as usize * 131 + i * 7) as u8)
            .collect::<Vec<_>>(),
    )
}

/// Like Spark's layout: sequence << 42 | partition << 22 | task.
fn block_id(seq: i64, partition: i64, task: i64) -> i64 {
    (seq << 42) | (partition << 22) | task
}

/// M map tasks write blocks for P partitions, report them, then every
/// partition is read back and compared.
async fn write_and_read(
    env: &Env,
    transport: Transport,
    app: &str,
    maps: i64,
    partitions: i32,
    block_len: usize,
    blocks_per: i64,
) {
    let mut coordinator = Coordinator::connect(&env.coordinator()).await.unwrap();
    let conf = coordinator.client_conf().await.unwrap();
    assert!(conf.contains(&("spark.rss.storage.type".into(), "MEMORY_LOCALFILE".into())));
    let assignments = coordinator
        .assignments(app, 0, partitions, transport)
        .await
        .unwrap();
    let covered: i32 = assignments
        .iter()
        .map(|a| a.end_partition - a.start_partition + 1)
        .sum();
    assert_eq!(covered, partitions, "every partition assigned");
    let server = assignments[0].server[0].clone();
    assert_eq!(server, env.server());
    let mut admin = ShuffleServer::connect(&server, transport).await.unwrap();
    admin
        .register_shuffle(app, 0, &[(0, partitions - 1)])
        .await
        .unwrap();

    let mut expected: HashMap<i32, Vec<ClientBlock>> = HashMap::new();
    let mut tasks = Vec::new();
    for task in 0..maps {
        let server = server.clone();
        let app = app.to_string();
        tasks.push(tokio::spawn(async move {
            let mut client = ShuffleServer::connect(&server, transport).await.unwrap();
            let mut written: HashMap<i32, Vec<ClientBlock>> = HashMap::new();
            for seq in 0..blocks_per {
                let batch: Vec<(i32, Vec<ClientBlock>)> = (0..partitions)
                    .map(|p| {
                        let id = block_id(seq, p as i64, task);
                        (p, vec![ClientBlock::new(id, task, data(id, block_len))])
                    })
                    .collect();
                for (p, b) in &batch {
                    written.entry(*p).or_default().extend(b.iter().cloned());
                }
                client.send(&app, 0, batch).await.unwrap();
            }
            let ids = written
                .iter()
                .map(|(p, b)| (*p, b.iter().map(|b| b.block_id).collect()))
                .collect();
            client.report(&app, 0, task, ids).await.unwrap();
            written
        }));
    }
    for t in tasks {
        for (p, b) in t.await.unwrap() {
            expected.entry(p).or_default().extend(b);
        }
    }
    let mut reader = ShuffleServer::connect(&server, transport).await.unwrap();
    for p in 0..partitions {
        let bitmap = reader.shuffle_result(app, 0, vec![p]).await.unwrap();
        assert_eq!(bitmap.len(), (maps * blocks_per) as u64);
        let got = reader
            .read_partition(
                app,
                0,
                p,
                &bitmap,
                ReadOptions {
                    read_buffer_size: 256 << 10,
                },
            )
            .await
            .unwrap();
        let mut got_ids: Vec<i64> = got.iter().map(|b| b.block_id).collect();
        let mut want = expected[&p].clone();
        want.sort_by_key(|b| b.block_id);
        got_ids.sort();
        assert_eq!(got_ids, want.iter().map(|b| b.block_id).collect::<Vec<_>>());
        let by_id: HashMap<i64, &ClientBlock> = got.iter().map(|b| (b.block_id, b)).collect();
        for w in &want {
            assert_eq!(by_id[&w.block_id], w, "block {} differs", w.block_id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_write_spill_and_read_back() {
    // 4 MiB of memory for ~12 MiB of data: most of it is read from disk.
    let env = start(4 << 20).await;
    write_and_read(&env, Transport::Grpc, "app-grpc", 6, 8, 32 << 10, 8).await;
    let status = env.store.status();
    assert!(status.operations.spills > 0, "data spilled");
    assert!(status.tiers.disk > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netty_write_spill_and_read_back() {
    let env = start(4 << 20).await;
    write_and_read(&env, Transport::GrpcNetty, "app-netty", 6, 8, 32 << 10, 8).await;
    assert!(env.store.status().tiers.disk > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_blocks_and_empty_partitions() {
    let env = start(64 << 20).await;
    for transport in [Transport::Grpc, Transport::GrpcNetty] {
        let app = format!("app-large-{transport:?}");
        let mut s = ShuffleServer::connect(&env.server(), transport)
            .await
            .unwrap();
        s.register_shuffle(&app, 0, &[(0, 2)]).await.unwrap();
        // One 8 MiB block: bigger than a read buffer, in one send.
        let big = ClientBlock::new(block_id(0, 1, 0), 0, data(7, 8 << 20));
        s.send(&app, 0, vec![(1, vec![big.clone()])]).await.unwrap();
        s.report(&app, 0, 0, HashMap::from([(1, vec![big.block_id])]))
            .await
            .unwrap();
        env.store.flush_shuffle(&stored_app(&app), 0).await.unwrap();
        let bitmap = s.shuffle_result(&app, 0, vec![1]).await.unwrap();
        let got = s
            .read_partition(&app, 0, 1, &bitmap, ReadOptions::default())
            .await
            .unwrap();
        assert_eq!(got, vec![big]);
        // An empty partition: empty memory read, empty index, empty result.
        let empty = s.shuffle_result(&app, 0, vec![2]).await.unwrap();
        assert!(empty.is_empty());
        let (index, len) = s.index(&app, 0, 2).await.unwrap();
        assert!(index.is_empty());
        assert_eq!(len, 0);
        assert!(s
            .read_partition(&app, 0, 2, &empty, ReadOptions::default())
            .await
            .unwrap()
            .is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_reads_page_by_last_block_and_filter_by_task() {
    let env = start(64 << 20).await;
    let app = "app-pages";
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle(app, 0, &[(0, 0)]).await.unwrap();
    let blocks: Vec<ClientBlock> = (0..10)
        .map(|i| ClientBlock::new(block_id(i, 0, i % 2), i % 2, data(i, 1000)))
        .collect();
    s.send(app, 0, vec![(0, blocks.clone())]).await.unwrap();
    let page = |last: i64, filter: Option<&IdBitmap>| GetMemoryShuffleDataRequest {
        app_id: app.into(),
        shuffle_id: 0,
        partition_id: 0,
        last_block_id: last,
        read_buffer_size: 2500,
        timestamp: 0,
        serialized_expected_task_ids_bitmap: Some(
            filter
                .map(|f| Bytes::from(f.to_java_bytes()))
                .unwrap_or_default(),
        ),
    };
    let r = s
        .grpc()
        .get_memory_shuffle_data(page(-1, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::Success as i32);
    assert_eq!(
        r.shuffle_data_block_segments.len(),
        3,
        "stops once 2500 bytes are reached"
    );
    assert_eq!(r.shuffle_data_block_segments[1].offset, 1000);
    assert_eq!(&r.data[1000..2000], &blocks[1].data[..]);
    let last = r.shuffle_data_block_segments[2].block_id;
    let r = s
        .grpc()
        .get_memory_shuffle_data(page(last, None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.shuffle_data_block_segments[0].block_id,
        blocks[3].block_id
    );
    let mut odd = IdBitmap::new();
    odd.insert_i64(1);
    let r = s
        .grpc()
        .get_memory_shuffle_data(page(-1, Some(&odd)))
        .await
        .unwrap()
        .into_inner();
    assert!(r
        .shuffle_data_block_segments
        .iter()
        .all(|seg| seg.task_attempt_id == 1));
    assert_eq!(r.shuffle_data_block_segments.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_errors_get_status_codes_and_harm_no_one() {
    let env = start(1 << 20).await;
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    // A healthy app that must be unaffected by everything below.
    let good = "app-good";
    s.register_shuffle(good, 0, &[(0, 0)]).await.unwrap();
    let b = ClientBlock::new(1, 0, data(1, 100));
    s.send(good, 0, vec![(0, vec![b.clone()])]).await.unwrap();
    s.report(good, 0, 0, HashMap::from([(0, vec![1])]))
        .await
        .unwrap();

    // Unknown app: NO_REGISTER everywhere.
    let r = s
        .grpc()
        .app_heartbeat(AppHeartBeatRequest {
            app_id: "nope".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);
    let r = s
        .grpc()
        .require_buffer(RequireBufferRequest {
            require_size: 10,
            app_id: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.status, r.require_buffer_id),
        (StatusCode::NoRegister as i32, -1)
    );
    let r = s
        .grpc()
        .send_shuffle_data(SendShuffleDataRequest {
            app_id: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);
    // Unknown or reused ticket: INTERNAL_ERROR (the client re-requires).
    let send = |ticket: i64| SendShuffleDataRequest {
        app_id: good.into(),
        shuffle_id: 0,
        require_buffer_id: ticket,
        shuffle_data: vec![ShuffleData {
            partition_id: 0,
            block: vec![ShuffleBlock {
                block_id: 2,
                length: 3,
                data: Bytes::from_static(b"abc"),
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let r = s
        .grpc()
        .send_shuffle_data(send(424242))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InternalError as i32);
    assert!(r.ret_msg.contains("requireBufferId"), "{}", r.ret_msg);
    // A legacy (app-less) ticket of nothing is refused, not kept for 60 s.
    let r = s
        .grpc()
        .require_buffer(RequireBufferRequest {
            require_size: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InvalidRequest as i32);
    // Another application cannot spend this one's ticket, and the owner
    // still can.
    s.register_shuffle("app-thief", 0, &[(0, 0)]).await.unwrap();
    let ticket = s.require_buffer(good, 0, 100, vec![0]).await.unwrap();
    let mut stolen = send(ticket);
    stolen.app_id = "app-thief".into();
    let r = s
        .grpc()
        .send_shuffle_data(stolen)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InternalError as i32);
    assert!(r.ret_msg.contains("requireBufferId"), "{}", r.ret_msg);
    let owned = ClientBlock::new(4, 0, Bytes::from_static(b"abc"));
    let mut own = send(ticket);
    own.shuffle_data[0].block[0].block_id = owned.block_id;
    own.shuffle_data[0].block[0].crc = owned.crc;
    own.shuffle_data[0].block[0].uncompress_length = owned.uncompress_length;
    let r = s.grpc().send_shuffle_data(own).await.unwrap().into_inner();
    assert_eq!(r.status, StatusCode::Success as i32, "{}", r.ret_msg);
    s.report(good, 0, 0, HashMap::from([(0, vec![4])]))
        .await
        .unwrap();
    // A block whose length field lies about its data.
    let ticket = s.require_buffer(good, 0, 100, vec![0]).await.unwrap();
    let mut lying = send(ticket);
    lying.shuffle_data[0].block[0].length = 99;
    let r = s
        .grpc()
        .send_shuffle_data(lying)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InvalidRequest as i32);
    // More memory than the whole budget: NO_BUFFER, not a crash.
    let r = s
        .grpc()
        .require_buffer(RequireBufferRequest {
            require_size: 2 << 20,
            app_id: good.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_ne!(r.status, StatusCode::Success as i32);
    // An unregistered partition of a registered shuffle.
    let ticket = s.require_buffer(good, 0, 100, vec![5]).await.unwrap();
    let mut other = send(ticket);
    other.shuffle_data[0].partition_id = 5;
    let r = s
        .grpc()
        .send_shuffle_data(other)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);
    // Reads past the data.
    env.store.flush_shuffle(&stored_app(good), 0).await.unwrap();
    let err = s.data(good, 0, 0, 50, 100).await.unwrap_err();
    assert!(
        err.to_string().contains("INTERNAL_ERROR") || err.to_string().contains("InternalError"),
        "{err}"
    );
    // A malformed bitmap filter.
    let r = s
        .grpc()
        .get_memory_shuffle_data(GetMemoryShuffleDataRequest {
            app_id: good.into(),
            serialized_expected_task_ids_bitmap: Some(Bytes::from_static(&[7, 7, 7])),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InvalidRequest as i32);
    // An oversized gRPC message is refused by the transport.
    let huge = ShuffleBlock {
        block_id: 3,
        length: 65 << 20,
        data: Bytes::from(vec![0u8; 65 << 20]),
        ..Default::default()
    };
    let r = s
        .grpc()
        .send_shuffle_data(SendShuffleDataRequest {
            app_id: good.into(),
            shuffle_data: vec![ShuffleData {
                partition_id: 0,
                block: vec![huge],
            }],
            ..Default::default()
        })
        .await;
    assert!(r.is_err(), "a 65 MiB message is over the 64 MiB limit");

    // Garbage on the Netty port closes that connection only.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(env.node.addrs.server_netty.unwrap())
            .await
            .unwrap();
        raw.write_all(&[0xff, 0xff, 0xff, 0xff, 99, 0, 0, 0, 1, 1, 2, 3])
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), raw.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0, "the server closes a connection that sent a bad frame");
    }

    // The good app is intact and readable.
    let bitmap = s.shuffle_result(good, 0, vec![0]).await.unwrap();
    let got = s
        .read_partition(good, 0, 0, &bitmap, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(got.len(), 2, "the good app's two blocks");
    assert!(got.contains(&b));
    assert!(got
        .iter()
        .any(|g| g.block_id == owned.block_id && g.data == owned.data));
    assert!(env.store.budget().used() <= 1 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_netty_connections() {
    let env = start(32 << 20).await;
    let app = "app-conns";
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle(app, 0, &[(0, 63)]).await.unwrap();
    let mut tasks = Vec::new();
    for c in 0..64i64 {
        let server = env.server();
        tasks.push(tokio::spawn(async move {
            let mut client = ShuffleServer::connect(&server, Transport::GrpcNetty)
                .await
                .unwrap();
            let b = ClientBlock::new(block_id(0, c, c), c, data(c, 4096));
            client
                .send(app, 0, vec![(c as i32, vec![b.clone()])])
                .await
                .unwrap();
            client
                .report(app, 0, c, HashMap::from([(c as i32, vec![b.block_id])]))
                .await
                .unwrap();
            let bitmap = client.shuffle_result(app, 0, vec![c as i32]).await.unwrap();
            let got = client
                .read_partition(app, 0, c as i32, &bitmap, ReadOptions::default())
                .await
                .unwrap();
            assert_eq!(got, vec![b]);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_finish_unregister_and_heartbeat() {
    let env = start(16 << 20).await;
    let app = "app-life";
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap();
    s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap(); // idempotent
    s.send(
        app,
        0,
        vec![(0, vec![ClientBlock::new(1, 0, data(1, 5000))])],
    )
    .await
    .unwrap();
    for expected in 1..=3 {
        let r = s
            .grpc()
            .commit_shuffle_task(ShuffleCommitRequest {
                app_id: app.into(),
                shuffle_id: 0,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.commit_count, expected);
    }
    let r = s
        .grpc()
        .finish_shuffle(FinishShuffleRequest {
            app_id: app.into(),
            shuffle_id: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::Success as i32);
    assert_eq!(
        env.store.status().tiers.disk,
        5000,
        "finishShuffle made the data durable"
    );
    let r = s
        .grpc()
        .app_heartbeat(AppHeartBeatRequest { app_id: app.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::Success as i32);
    s.unregister_app(app).await.unwrap();
    // The files go with the removal, behind the application itself.
    wait::eventually("the app removed with its files", || {
        !env.store.has_app(&stored_app(app)) && env.store.status().tiers.disk == 0
    })
    .await;
    assert!(!env.store.has_app(&stored_app(app)));
    assert_eq!(env.store.status().tiers.disk, 0, "files removed");
    let r = s
        .grpc()
        .app_heartbeat(AppHeartBeatRequest { app_id: app.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_matches_tags_and_takes_only_authenticated_heartbeats() {
    let env = start(16 << 20).await;
    let mut c = Coordinator::connect(&env.coordinator()).await.unwrap();
    let mut raw =
        switchyard_uniffle::proto::coordinator_server_client::CoordinatorServerClient::connect(
            format!("http://{}", env.coordinator()),
        )
        .await
        .unwrap();
    // A client asking for a tag nobody has gets the upstream error text.
    let r = raw
        .get_shuffle_assignments(GetShuffleServerRequest {
            partition_num: 4,
            data_replica: 1,
            require_tags: vec!["ss_v5".into(), "GRPC".into(), "gpu".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::InternalError as i32);
    assert!(r.ret_msg.contains("There isn't enough shuffle servers"));
    // Another node heartbeats in; assignments now spread over both.
    let other = ShuffleServerId {
        id: "10.0.0.9-20000".into(),
        ip: "10.0.0.9".into(),
        port: 20000,
        netty_port: -1,
        jetty_port: 0,
    };
    let beat = |id: ShuffleServerId, secret: Option<&str>| {
        let mut request = tonic::Request::new(ShuffleServerHeartBeatRequest {
            server_id: Some(id),
            available_memory: 1 << 40,
            tags: vec!["ss_v5".into(), "GRPC".into()],
            is_healthy: Some(false),
            ..Default::default()
        });
        if let Some(secret) = secret {
            request.metadata_mut().insert(
                switchyard_uniffle::coordinator::SECRET_HEADER,
                secret.parse().unwrap(),
            );
        }
        request
    };
    // Without the secret, or with a wrong one, a "server" is not registered
    // (a rogue one would be handed partitions).
    for secret in [None, Some("guess")] {
        let r = raw
            .heartbeat(beat(other.clone(), secret))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, StatusCode::AccessDenied as i32);
    }
    // Nor can anyone report this node unhealthy in its name.
    let r = raw
        .heartbeat(beat(env.server(), Some(SECRET)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::AccessDenied as i32);
    assert!(r.ret_msg.contains("own shuffle server"), "{}", r.ret_msg);
    let n = raw.get_shuffle_server_num(()).await.unwrap().into_inner();
    assert_eq!(n.num, 1);
    let mut healthy = beat(other.clone(), Some(SECRET));
    healthy.get_mut().is_healthy = Some(true);
    let r = raw.heartbeat(healthy).await.unwrap().into_inner();
    assert_eq!(r.status, StatusCode::Success as i32);
    let a = c.assignments("x", 0, 10, Transport::Grpc).await.unwrap();
    let servers: std::collections::HashSet<String> = a
        .iter()
        .flat_map(|r| r.server.iter().map(|s| s.id.clone()))
        .collect();
    assert_eq!(servers.len(), 2);
    // A 0.10 driver reassigning a partition asks for one server without the
    // one that refused it (faultyServerIds): it gets the other.
    for (faulty, left) in [(&other, env.server()), (&env.server(), other.clone())] {
        let r = raw
            .get_shuffle_assignments(GetShuffleServerRequest {
                application_id: "x".into(),
                partition_num: 1,
                partition_num_per_range: 1,
                data_replica: 1,
                require_tags: vec!["ss_v5".into(), "GRPC".into()],
                assignment_shuffle_server_number: 1,
                faulty_server_ids: vec![faulty.id.clone()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status, StatusCode::Success as i32, "{}", r.ret_msg);
        assert_eq!(r.assignments.len(), 1);
        assert_eq!(r.assignments[0].server, vec![left]);
    }
    // GRPC_NETTY clients only get nodes with a Netty port.
    let a = c
        .assignments("x", 0, 10, Transport::GrpcNetty)
        .await
        .unwrap();
    assert!(a.iter().all(|r| r.server[0] == env.server()));
    let n = raw.get_shuffle_server_num(()).await.unwrap().into_inner();
    assert_eq!(n.num, 2);
}

/// An application that stops heartbeating is gone from the store and from
/// the adapter's state within its expiry, with its files; the shuffle it had
/// stays dead when the application comes back, so a reader gets an error,
/// never a partial (or empty) block-id set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_app_is_forgotten_and_its_shuffle_stays_dead() {
    let env = start_with(16 << 20, |sc| {
        // Long enough for the requests before the silence and after the
        // return to run within one lease on a slow machine.
        sc.apps.expiry = Duration::from_secs(2);
        sc.apps.expiry_check_interval = Duration::from_millis(50);
    })
    .await;
    let app = "app-expiring";
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap();
    let blocks = vec![ClientBlock::new(block_id(0, 0, 0), 0, data(1, 4000))];
    s.send(app, 0, vec![(0, blocks)]).await.unwrap();
    s.report(app, 0, 0, HashMap::from([(0, vec![block_id(0, 0, 0)])]))
        .await
        .unwrap();
    let r = s
        .grpc()
        .finish_shuffle(FinishShuffleRequest {
            app_id: app.into(),
            shuffle_id: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::Success as i32);
    assert!(env.node.core.has_app(app));
    assert!(env.store.status().tiers.disk > 0);

    // Silence: within the expiry (plus a check interval) it is gone
    // everywhere: store, adapter, status, files (removed behind the expiry).
    wait::eventually("the app expired and its files removed", || {
        !env.store.has_app(&stored_app(app))
            && !env.node.core.has_app(app)
            && env.store.status().tiers.disk == 0
    })
    .await;
    let status = env.store.status();
    assert!(status
        .applications
        .iter()
        .all(|a| *a.id != *stored_app(app)));
    assert_eq!(status.tiers.disk, 0, "files removed");
    let r = s
        .grpc()
        .app_heartbeat(AppHeartBeatRequest { app_id: app.into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);

    // The application comes back with a new shuffle: that one works...
    s.register_shuffle(app, 1, &[(0, 1)]).await.unwrap();
    // ...but the dead one is neither registered again nor reported empty.
    let err = s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap_err();
    assert!(err.to_string().contains("removed"), "{err}");
    let err = s.shuffle_result(app, 0, vec![0]).await.unwrap_err();
    assert!(err.to_string().contains("removed"), "{err}");
    let r = s
        .grpc()
        .get_local_shuffle_index(GetLocalShuffleIndexRequest {
            app_id: app.into(),
            shuffle_id: 0,
            partition_id: 0,
            partition_num_per_range: 1,
            partition_num: 2,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::NoRegister as i32);
}

/// With no writable tier, finishShuffle answers an error status after the
/// store's commit_timeout instead of waiting forever; the blocks stay
/// readable from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_shuffle_fails_in_bounded_time_with_no_writable_tier() {
    let env = start_with(16 << 20, |sc| {
        sc.commit_timeout = Duration::from_millis(300);
        // No filesystem has this much free: every disk is full, and there
        // is no cold tier.
        sc.disks.min_free = ByteSize::b(u64::MAX);
    })
    .await;
    let app = "app-stuck";
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap();
    s.send(
        app,
        0,
        vec![(0, vec![ClientBlock::new(1, 0, data(1, 5000))])],
    )
    .await
    .unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        s.grpc().finish_shuffle(FinishShuffleRequest {
            app_id: app.into(),
            shuffle_id: 0,
        }),
    )
    .await
    .expect("finishShuffle answered in bounded time")
    .unwrap()
    .into_inner();
    assert_eq!(r.status, StatusCode::InternalError as i32, "{r:?}");
    assert!(r.ret_msg.contains("not durable"), "{}", r.ret_msg);
    let key = switchyard_storage::PartitionKey::new(stored_app(app), 0, 0);
    let stats = env.store.partition_stats(&key).unwrap();
    assert_eq!(
        (stats.memory_bytes, stats.disk_bytes),
        (5000, 0),
        "still in memory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_report_is_answered_before_its_commit() {
    // No tier can take the data, so no commit can end: a durable report
    // fails, a background one is answered and its blocks read from memory.
    for durability in [ReportDurability::Durable, ReportDurability::Background] {
        let env = start_full(
            16 << 20,
            |sc| {
                sc.commit_timeout = Duration::from_millis(300);
                sc.disks.min_free = ByteSize::b(u64::MAX);
            },
            |uc| uc.report_durability = durability,
        )
        .await;
        let app = "app-report";
        let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
            .await
            .unwrap();
        s.register_shuffle(app, 0, &[(0, 1)]).await.unwrap();
        let id = block_id(0, 0, 3);
        let block = ClientBlock::new(id, 3, data(id, 5000));
        s.send(app, 0, vec![(0, vec![block.clone()])])
            .await
            .unwrap();
        let reported = s.report(app, 0, 3, HashMap::from([(0, vec![id])])).await;
        let bitmap = s.shuffle_result(app, 0, vec![0]).await.unwrap();
        if durability == ReportDurability::Durable {
            assert!(reported.is_err(), "a durable report waits for its commit");
            assert_eq!(bitmap.len(), 0, "nothing reported");
            continue;
        }
        reported.expect("a background report is answered at once");
        assert_eq!(bitmap.len(), 1);
        let got = s
            .read_partition(app, 0, 0, &bitmap, ReadOptions::default())
            .await
            .unwrap();
        assert_eq!(got, vec![block]);
        let key = switchyard_storage::PartitionKey::new(stored_app(app), 0, 0);
        let stats = env.store.partition_stats(&key).unwrap();
        assert_eq!((stats.memory_bytes, stats.disk_bytes), (5000, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_at_its_quota_is_refused_with_access_denied() {
    let env = start_with(64 << 20, |c| {
        c.apps.max_app_bytes = Some(ByteSize::kib(100));
    })
    .await;
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    s.register_shuffle("quota-app", 0, &[(0, 1)]).await.unwrap();
    s.register_shuffle("other-app", 0, &[(0, 1)]).await.unwrap();
    let blocks = |seq: i64, len: usize| {
        vec![(
            0,
            vec![ClientBlock::new(block_id(seq, 0, 1), 1, data(seq, len))],
        )]
    };
    s.send("quota-app", 0, blocks(0, 90 << 10)).await.unwrap();
    let denied = |e: switchyard_clients::uniffle::ClientError| {
        let text = e.to_string();
        assert!(
            text.contains("ACCESS_DENIED") || text.contains("AccessDenied"),
            "{text}"
        );
        assert!(text.contains("quota"), "{text}");
    };
    // 90 + 20 KiB passes the 100 KiB quota: the send is refused.
    denied(
        s.send("quota-app", 0, blocks(1, 20 << 10))
            .await
            .unwrap_err(),
    );
    // Another application is not held back.
    s.send("other-app", 0, blocks(2, 90 << 10)).await.unwrap();
    // At the quota, requireBuffer and new shuffles are refused too.
    s.send("quota-app", 0, blocks(3, 10 << 10)).await.unwrap();
    denied(s.send("quota-app", 0, blocks(4, 1)).await.unwrap_err());
    denied(
        s.register_shuffle("quota-app", 1, &[(0, 1)])
            .await
            .unwrap_err(),
    );
    // Unregistering the shuffle gives the bytes back.
    s.unregister_app("other-app").await.unwrap();
    let mut admin = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    admin.unregister_app("quota-app").await.unwrap();
}

/// registerShuffle as a 0.10 driver sends it: its SparkConf in `properties`.
async fn register_with_conf(s: &mut ShuffleServer, app: &str, conf: &[(&str, &str)]) {
    let r = s
        .grpc()
        .register_shuffle(ShuffleRegisterRequest {
            app_id: app.into(),
            shuffle_id: 0,
            partition_ranges: vec![ShufflePartitionRange { start: 0, end: 3 }],
            properties: conf
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, StatusCode::Success as i32, "{}", r.ret_msg);
}

/// A 0.10 requireBuffer: partition ids with their sizes.
async fn require(
    s: &mut ShuffleServer,
    app: &str,
    partitions: &[i32],
    sizes: &[i32],
) -> RequireBufferResponse {
    s.grpc()
        .require_buffer(RequireBufferRequest {
            require_size: sizes.iter().sum::<i32>().max(1),
            app_id: app.into(),
            shuffle_id: 0,
            partition_ids: partitions.to_vec(),
            partition_require_sizes: sizes.to_vec(),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_past_the_split_limit_is_named_for_splitting() {
    let env = start_full(
        64 << 20,
        |_| {},
        |u| {
            u.huge_partition_split_limit = Some(ByteSize::kib(64));
            u.server_id = Some("sy-node-id".into());
        },
    )
    .await;
    // The 0.10 client parses the id of a server that asks for a split:
    // Uniffle's own form, not the node id.
    let id = env.server();
    assert_eq!(id.id, format!("{}-{}-{}", id.ip, id.port, id.netty_port));
    let mut s = ShuffleServer::connect(&env.server(), Transport::GrpcNetty)
        .await
        .unwrap();
    register_with_conf(&mut s, "split-app", &[]).await;
    let block = |seq: i64, p: i32, len: usize| {
        let id = block_id(seq, p as i64, 1);
        (p, vec![ClientBlock::new(id, 1, data(id, len))])
    };
    // 60 KiB on partition 0 (over Netty), 1 KiB on partition 1.
    s.send(
        "split-app",
        0,
        vec![block(0, 0, 60 << 10), block(0, 1, 1 << 10)],
    )
    .await
    .unwrap();
    let r = require(&mut s, "split-app", &[0, 1], &[2 << 10, 2 << 10]).await;
    assert_eq!(
        r.status,
        StatusCode::Success as i32,
        "a split still grants the buffer"
    );
    assert!(r.require_buffer_id > 0);
    assert!(
        r.need_split_partition_ids.is_empty(),
        "62 KiB stays under 64 KiB"
    );
    let r = require(&mut s, "split-app", &[0, 1], &[5 << 10, 5 << 10]).await;
    assert_eq!(r.status, StatusCode::Success as i32);
    assert_eq!(r.need_split_partition_ids, vec![0], "65 KiB passes 64 KiB");
    // Named once: the 0.10.0 writer fails a task told twice (Uniffle #2622).
    let r = require(&mut s, "split-app", &[0, 1], &[5 << 10, 5 << 10]).await;
    assert_eq!(r.status, StatusCode::Success as i32);
    assert!(
        r.need_split_partition_ids.is_empty(),
        "{:?}",
        r.need_split_partition_ids
    );
    // A 0.9 client sends no sizes: never split.
    let r = require(&mut s, "split-app", &[0, 1], &[]).await;
    assert!(r.need_split_partition_ids.is_empty());

    // Without the limit, nothing is split.
    let plain = start(64 << 20).await;
    let mut s = ShuffleServer::connect(&plain.server(), Transport::Grpc)
        .await
        .unwrap();
    register_with_conf(&mut s, "plain-app", &[]).await;
    s.send("plain-app", 0, vec![block(0, 0, 200 << 10)])
        .await
        .unwrap();
    let r = require(&mut s, "plain-app", &[0], &[100 << 10]).await;
    assert!(r.need_split_partition_ids.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_server_refuses_writes_of_reassigning_apps_only() {
    let env = start(64 << 20).await;
    let mut s = ShuffleServer::connect(&env.server(), Transport::Grpc)
        .await
        .unwrap();
    let reassign = [("spark.rss.client.reassign.enabled", "true")];
    register_with_conf(&mut s, "moves", &reassign).await;
    register_with_conf(
        &mut s,
        "stays",
        &[("spark.rss.client.reassign.enabled", "false")],
    )
    .await;
    register_with_conf(&mut s, "old-client", &[]).await;
    for app in ["moves", "stays", "old-client"] {
        assert_eq!(
            require(&mut s, app, &[0], &[10]).await.status,
            StatusCode::Success as i32
        );
    }

    env.node
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let r = require(&mut s, "moves", &[0], &[10]).await;
    assert_eq!(
        (r.status, r.require_buffer_id),
        (StatusCode::InternalNotRetryError as i32, -1),
        "the 0.10 client reassigns on it at once: {}",
        r.ret_msg
    );
    assert!(r.ret_msg.contains("decommissioning"), "{}", r.ret_msg);
    // Clients that would fail their tasks keep being served.
    for app in ["stays", "old-client"] {
        assert_eq!(
            require(&mut s, app, &[0], &[10]).await.status,
            StatusCode::Success as i32
        );
    }

    env.node
        .draining
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        require(&mut s, "moves", &[0], &[10]).await.status,
        StatusCode::Success as i32
    );
}
