//! Celeborn authentication (`auth_enabled`) end to end on a node's real
//! ports, with the client's side of the handshake (registration on the
//! master, DIGEST-MD5 elsewhere): an authenticated application writes,
//! commits and reads back; a connection that did not authenticate, one with
//! a wrong secret, and one authenticated as another application can neither
//! read nor change it.

use std::net::SocketAddr;
use std::time::Duration;

use bytesize::ByteSize;
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::{CelebornConfig, CelebornNode, TransportMessage};
use switchyard_clients::celeborn::{batch, decode, parse_batches, Connection};
use switchyard_storage::{Store, StoreConfig};

struct Env {
    _dir: tempfile::TempDir,
    node: CelebornNode,
}

async fn start() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let mut sc = StoreConfig::default();
    sc.memory.capacity = ByteSize::mib(64);
    sc.disks.dirs = vec![dir.path().join("d0")];
    sc.disks.min_free = ByteSize::b(0);
    sc.memory.spill_check_interval = Duration::from_millis(20);
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let cc = CelebornConfig {
        master_listen: any,
        worker_rpc_listen: any,
        worker_push_listen: any,
        worker_fetch_listen: any,
        worker_replicate_listen: any,
        auth_enabled: true,
        ..Default::default()
    };
    let store = Store::open(sc).await.unwrap();
    let node = CelebornNode::start(cc, store).await.unwrap();
    Env { _dir: dir, node }
}

fn port(p: i32) -> SocketAddr {
    format!("127.0.0.1:{p}").parse().unwrap()
}

async fn ask<M: prost::Message + Default>(
    c: &Connection,
    to: &str,
    kind: MessageType,
    m: &impl prost::Message,
) -> Result<M, String> {
    c.ask(to, TransportMessage::new(kind, m))
        .await
        .map_err(|e| e.to_string())
        .map(|r| decode(&r).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_apps_are_served_and_others_refused() {
    let env = start().await;
    let w = env.node.addrs.worker.clone().unwrap();
    let (app, secret) = ("local-1700000000000", "s3cr3t\u{fffd}");
    let key = format!("{app}-0");

    // Without the handshake the master answers nothing but a refusal.
    let plain = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    let err = plain
        .verify(endpoint::MASTER)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not authenticated"), "{err}");

    // The driver's first master connection registers the secret.
    let master = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    master.register_application(app, secret).await.unwrap();
    assert!(master.verify(endpoint::MASTER).await.unwrap());
    let hb: PbHeartbeatFromApplicationResponse = ask(
        &master,
        endpoint::MASTER,
        MessageType::HeartbeatFromApplication,
        &PbHeartbeatFromApplication {
            app_id: app.into(),
            should_response: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(hb.status, 0);
    // It acts for its application only.
    let err = ask::<PbApplicationLostResponse>(
        &master,
        endpoint::MASTER,
        MessageType::ApplicationLost,
        &PbApplicationLost {
            app_id: "someone-else".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("not authorized for application someone-else"),
        "{err}"
    );
    // Nobody registers the same application with another secret.
    let thief = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    assert!(thief.register_application(app, "guess").await.is_err());
    // A later master connection authenticates with DIGEST-MD5.
    let again = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    again.authenticate(app, secret).await.unwrap();
    assert!(again.verify(endpoint::MASTER).await.unwrap());

    // Worker rpc: DIGEST, then ReserveSlots and (later) CommitFiles.
    let rpc = Connection::connect(port(w.rpc_port)).await.unwrap();
    let wrong = Connection::connect(port(w.rpc_port)).await.unwrap();
    let err = wrong
        .authenticate(app, "wrong")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Mismatched response"), "{err}");
    rpc.authenticate(app, secret).await.unwrap();
    let reserved: PbReserveSlotsResponse = ask(
        &rpc,
        endpoint::WORKER,
        MessageType::ReserveSlots,
        &PbReserveSlots {
            application_id: app.into(),
            shuffle_id: 0,
            primary_locations: vec![PbPartitionLocation {
                id: 0,
                epoch: 0,
                ..Default::default()
            }],
            split_threshold: 1 << 30,
            partition_split_enabled: true,
            available_storage_types: 2,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(reserved.status, 0, "{}", reserved.reason);

    // Push: refused before the handshake, written after it.
    let data = batch(0, 0, 1, b"only for local-1700000000000");
    let push = Connection::connect(port(w.push_port)).await.unwrap();
    let err = push
        .push(&key, "0-0", data.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not authenticated"), "{err}");
    let push = Connection::connect(port(w.push_port)).await.unwrap();
    push.authenticate(app, secret).await.unwrap();
    assert!(push
        .push(&key, "0-0", data.clone())
        .await
        .unwrap()
        .is_empty());

    // Another registered application cannot push into this one.
    let other = Connection::connect(env.node.addrs.master.unwrap())
        .await
        .unwrap();
    other.register_application("app-other", "k2").await.unwrap();
    let intruder = Connection::connect(port(w.push_port)).await.unwrap();
    intruder.authenticate("app-other", "k2").await.unwrap();
    let err = intruder
        .push(&key, "0-0", batch(9, 0, 1, b"forged"))
        .await
        .unwrap_err()
        .to_string();
    // A Spark push failure carries the bare status name.
    assert!(err.contains("REQUEST_FAILED"), "{err}");

    let committed: PbCommitFilesResponse = ask(
        &rpc,
        endpoint::WORKER,
        MessageType::CommitFiles,
        &PbCommitFiles {
            application_id: app.into(),
            shuffle_id: 0,
            primary_ids: vec!["0-0".into()],
            map_attempts: vec![0],
            epoch: 1,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(committed.status, 0);

    // Fetch: the owner reads its batch back; the other application can
    // neither open the stream nor fetch its chunks by stream id.
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
    let unauth = Connection::connect(port(w.fetch_port)).await.unwrap();
    assert!(unauth.data_rpc(&open).await.is_err());
    let fetch = Connection::connect(port(w.fetch_port)).await.unwrap();
    fetch.authenticate(app, secret).await.unwrap();
    let reply = TransportMessage::from_bytes(fetch.data_rpc(&open).await.unwrap())
        .unwrap()
        .unwrap();
    let h: PbStreamHandler = decode(&reply).unwrap();
    assert_eq!(h.num_chunks, 1);
    let chunk = fetch.fetch_chunk(h.stream_id, 0).await.unwrap();
    let batches = parse_batches(&chunk).unwrap();
    assert_eq!(batches.len(), 1, "the forged push was not stored");
    assert_eq!(&batches[0].3[..], b"only for local-1700000000000");

    let spy = Connection::connect(port(w.fetch_port)).await.unwrap();
    spy.authenticate("app-other", "k2").await.unwrap();
    let err = spy.data_rpc(&open).await.unwrap_err().to_string();
    assert!(err.contains("not authorized"), "{err}");
    let err = spy
        .fetch_chunk(h.stream_id, 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not authorized"), "{err}");
    // Unauthenticated chunk fetches are refused too.
    let err = unauth
        .fetch_chunk(h.stream_id, 0)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not authenticated"), "{err}");

    // ApplicationLost forgets the secret: no new connection authenticates.
    let lost: PbApplicationLostResponse = ask(
        &master,
        endpoint::MASTER,
        MessageType::ApplicationLost,
        &PbApplicationLost {
            app_id: app.into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(lost.status, 0);
    let late = Connection::connect(port(w.fetch_port)).await.unwrap();
    let err = late
        .authenticate(app, secret)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("Registration information not found"), "{err}");
}
