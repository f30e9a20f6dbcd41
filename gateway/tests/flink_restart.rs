//! Flink map partitions committed before a kill -9 are read back after the
//! restart, every sub-partition of them, the empty ones included.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::cluster::Cluster;
use switchyard_bench::lifecycle::{self, worker_addr, SlotRequest};
use switchyard_celeborn::proto::*;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::Connection;

const SUBS: i32 = 4;

/// A Flink buffer of sub-partition `sub`: header, then the payload.
fn buffer(sub: i32, batch: i32, payload: &[u8]) -> Bytes {
    let mut v = Vec::new();
    for word in [sub, 0, batch, payload.len() as i32] {
        v.extend_from_slice(&word.to_be_bytes());
    }
    v.extend_from_slice(payload);
    Bytes::from(v)
}

async fn control(push: &Connection, tm: TransportMessage) {
    let r = push.data_rpc(&tm).await.unwrap();
    assert!(r.is_empty(), "type {} answered {r:?}", tm.message_type);
}

/// One map partition whose sub-partitions 1 and 3 stay empty, committed.
async fn write(master: &str, app: &str) -> String {
    let m = lifecycle::connect_master(master).await.unwrap();
    lifecycle::heartbeat(&m, app).await.unwrap();
    let request = SlotRequest {
        partitions: vec![0],
        replicate: false,
        rack_aware: false,
        map_partitions: true,
    };
    let slots = lifecycle::request_slots(&m, app, &request).await.unwrap();
    let owners = lifecycle::reserve_owners(app, &slots, &request)
        .await
        .unwrap();
    let worker = owners.primary[&0].clone();
    let key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let push = Connection::connect(worker_addr(&worker, 1).unwrap())
        .await
        .unwrap();
    let hs = PbPushDataHandShake {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        num_partitions: SUBS,
        buffer_size: 32 << 10,
    };
    control(
        &push,
        TransportMessage::new(MessageType::PushDataHandShake, &hs),
    )
    .await;
    let start = PbRegionStart {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
        current_region_index: 0,
        is_broadcast: false,
    };
    control(
        &push,
        TransportMessage::new(MessageType::RegionStart, &start),
    )
    .await;
    for (batch, sub) in [0, 2].into_iter().enumerate() {
        let body = buffer(sub, batch as i32, &vec![sub as u8; 1000]);
        let reply = push.push(&key, "0-0", body).await.unwrap();
        assert!(reply.is_empty());
    }
    let finish = PbRegionFinish {
        mode: 0,
        shuffle_key: key.clone(),
        partition_unique_id: "0-0".into(),
        attempt_id: 0,
    };
    control(
        &push,
        TransportMessage::new(MessageType::RegionFinish, &finish),
    )
    .await;
    let commit = PbCommitFiles {
        application_id: app.into(),
        shuffle_id: 0,
        primary_ids: vec!["0-0".into()],
        epoch: 1,
        ..Default::default()
    };
    let c = lifecycle::commit_files(&worker, commit).await.unwrap();
    assert_eq!(c.committed_primary_ids, ["0-0"]);
    worker
}

/// Buffers of every sub-partition, each read as one credit stream.
async fn read_all(worker: &str, app: &str) -> Vec<usize> {
    let key = switchyard_celeborn::ShuffleKey::new(app, 0).to_string();
    let conn = Connection::connect(worker_addr(worker, 2).unwrap())
        .await
        .unwrap();
    let mut events = conn.subscribe();
    let mut out = Vec::new();
    for sub in 0..SUBS {
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            conn.read_credit_stream(&mut events, &key, "0-0-0", (sub, sub), 2),
        )
        .await
        .unwrap_or_else(|_| panic!("sub-partition {sub}: no stream end within 10 s"))
        .unwrap();
        out.push(read.records.len());
    }
    out
}

#[test]
fn map_partitions_are_read_back_after_a_kill_and_restart() {
    let mut cluster = Cluster::start(1);
    let master = cluster.node(1).celeborn_master().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = "flink-restart-1";
    let worker = rt.block_on(write(&master, app));
    assert_eq!(rt.block_on(read_all(&worker, app)), [1, 0, 1, 0]);
    cluster.kill(1);
    cluster.restart(1);
    rt.block_on(async {
        // The application is alive again once its driver heartbeats.
        let m = lifecycle::connect_master(&master).await.unwrap();
        lifecycle::heartbeat(&m, app).await.unwrap();
    });
    assert_eq!(rt.block_on(read_all(&worker, app)), [1, 0, 1, 0]);
}
