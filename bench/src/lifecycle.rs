//! The Celeborn LifecycleManager's part, as the celeborn and flink benches
//! (and a Spark or Flink driver) play it: heartbeat, slots from the master,
//! reserved on the workers, CommitFiles, ApplicationLost at the end.

use std::net::SocketAddr;

use anyhow::{ensure, Context};
use switchyard_celeborn::proto::*;
use switchyard_celeborn::rpc::endpoint;
use switchyard_celeborn::TransportMessage;
use switchyard_clients::celeborn::{decode, Connection};

/// Who the bench is, as a stock LifecycleManager names its user in RequestSlots
/// and ReserveSlots (a JVM master refuses a request without one).
fn bench_user() -> Option<PbUserIdentifier> {
    Some(PbUserIdentifier {
        tenant_id: "default".into(),
        name: "switchyard-bench".into(),
    })
}

/// Port `which` of a worker (0 rpc, 1 push, 2 fetch, 3 replicate) from its
/// unique id `host:rpc:push:fetch:replicate`.
pub fn worker_addr(unique_id: &str, which: usize) -> anyhow::Result<SocketAddr> {
    // The host may itself contain ':'.
    let parts: Vec<&str> = unique_id.rsplitn(5, ':').collect();
    ensure!(parts.len() == 5, "bad worker id {unique_id}");
    let host = parts[4];
    let port = parts[3 - which];
    Ok(format!("{host}:{port}").parse()?)
}

/// Connects to a master and checks that it is one.
pub async fn connect_master(master: &str) -> anyhow::Result<Connection> {
    let connection = Connection::connect(master.parse().context("master address")?).await?;
    ensure!(
        connection.verify(endpoint::MASTER).await?,
        "no MasterEndpoint at {master}"
    );
    Ok(connection)
}

/// The application's heartbeat, which registers it with the master.
pub async fn heartbeat(master: &Connection, app: &str) -> anyhow::Result<()> {
    let heartbeat = PbHeartbeatFromApplication {
        app_id: app.to_string(),
        should_response: true,
        ..Default::default()
    };
    master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(MessageType::HeartbeatFromApplication, &heartbeat),
        )
        .await?;
    Ok(())
}

/// What a shuffle asks the master for.
pub struct SlotRequest {
    /// Partition ids (map partitions for Flink, reduce partitions for Spark).
    pub partitions: Vec<i32>,
    pub replicate: bool,
    pub rack_aware: bool,
    /// Flink's MAP partition type rather than Spark's REDUCE.
    pub map_partitions: bool,
}

/// RequestSlots for shuffle 0 of `app`.
pub async fn request_slots(
    master: &Connection,
    app: &str,
    request: &SlotRequest,
) -> anyhow::Result<PbRequestSlotsResponse> {
    request_shuffle_slots(master, app, 0, request).await
}

/// RequestSlots for one shuffle of `app`; an error unless it succeeded.
pub async fn request_shuffle_slots(
    master: &Connection,
    app: &str,
    shuffle: i32,
    request: &SlotRequest,
) -> anyhow::Result<PbRequestSlotsResponse> {
    let slots = ask_shuffle_slots(master, app, shuffle, request).await?;
    ensure!(slots.status == 0, "RequestSlots status {}", slots.status);
    Ok(slots)
}

/// RequestSlots for one shuffle of `app`, whatever its status.
pub async fn ask_shuffle_slots(
    master: &Connection,
    app: &str,
    shuffle: i32,
    request: &SlotRequest,
) -> anyhow::Result<PbRequestSlotsResponse> {
    let ask = PbRequestSlots {
        application_id: app.to_string(),
        shuffle_id: shuffle,
        partition_id_list: request.partitions.clone(),
        should_replicate: request.replicate,
        should_rack_aware: request.rack_aware,
        packed: false,
        available_storage_types: 2,
        max_workers: 10_000,
        user_identifier: bench_user(),
        hostname: "127.0.0.1".into(),
        request_id: format!("{app}#{}", shuffle + 1),
        ..Default::default()
    };
    let r = master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(MessageType::RequestSlots, &ask),
        )
        .await?;
    Ok(decode(&r)?)
}

/// ReserveSlots on every worker the master gave locations on; returns
/// those workers with their locations. Spares (no locations) are for
/// revive: a driver reserves nothing there.
pub async fn reserve_slots<'a>(
    app: &str,
    slots: &'a PbRequestSlotsResponse,
    request: &SlotRequest,
) -> anyhow::Result<Vec<(&'a String, &'a PbWorkerResource)>> {
    reserve_shuffle_slots(app, 0, slots, request).await
}

/// As [`reserve_slots`], for one shuffle of `app`.
pub async fn reserve_shuffle_slots<'a>(
    app: &str,
    shuffle: i32,
    slots: &'a PbRequestSlotsResponse,
    request: &SlotRequest,
) -> anyhow::Result<Vec<(&'a String, &'a PbWorkerResource)>> {
    let mut reserved_on = Vec::new();
    for (worker, res) in &slots.worker_resource {
        if res.primary_partitions.is_empty() && res.replica_partitions.is_empty() {
            continue;
        }
        let rpc = Connection::connect(worker_addr(worker, 0)?).await?;
        ensure!(
            rpc.verify(endpoint::WORKER).await?,
            "no WorkerEndpoint at {worker}"
        );
        let reserve = PbReserveSlots {
            application_id: app.to_string(),
            shuffle_id: shuffle,
            primary_locations: res.primary_partitions.clone(),
            replica_locations: res.replica_partitions.clone(),
            split_threshold: 1 << 40,
            partition_type: request.map_partitions as i32,
            partition_split_enabled: true,
            available_storage_types: 2,
            user_identifier: bench_user(),
            ..Default::default()
        };
        let r = rpc
            .ask(
                endpoint::WORKER,
                TransportMessage::new(MessageType::ReserveSlots, &reserve),
            )
            .await?;
        let reserved: PbReserveSlotsResponse = decode(&r)?;
        ensure!(
            reserved.status == 0,
            "ReserveSlots on {worker}: {} {}",
            reserved.status,
            reserved.reason
        );
        reserved_on.push((worker, res));
    }
    Ok(reserved_on)
}

/// Which worker holds each partition's primary and replica.
pub struct Owners {
    pub primary: std::collections::HashMap<i32, String>,
    pub replica: std::collections::HashMap<i32, String>,
}

/// ReserveSlots on every worker of `slots` (as [`reserve_slots`]), and
/// where each partition's copies went.
pub async fn reserve_owners(
    app: &str,
    slots: &PbRequestSlotsResponse,
    request: &SlotRequest,
) -> anyhow::Result<Owners> {
    let mut owners = Owners {
        primary: Default::default(),
        replica: Default::default(),
    };
    for (worker, res) in reserve_slots(app, slots, request).await? {
        for l in &res.primary_partitions {
            owners.primary.insert(l.id, worker.clone());
        }
        for l in &res.replica_partitions {
            owners.replica.insert(l.id, worker.clone());
        }
    }
    Ok(owners)
}

/// CommitFiles on `worker` (its unique id).
pub async fn commit_files(
    worker: &str,
    commit: PbCommitFiles,
) -> anyhow::Result<PbCommitFilesResponse> {
    let rpc = Connection::connect(worker_addr(worker, 0)?).await?;
    let r = rpc
        .ask(
            endpoint::WORKER,
            TransportMessage::new(MessageType::CommitFiles, &commit),
        )
        .await?;
    Ok(decode(&r)?)
}

/// Ends the benchmark's application on the master, which removes its data.
pub async fn application_lost(master: &Connection, app: &str) -> anyhow::Result<()> {
    let lost = PbApplicationLost {
        app_id: app.to_string(),
        ..Default::default()
    };
    master
        .ask(
            endpoint::MASTER,
            TransportMessage::new(MessageType::ApplicationLost, &lost),
        )
        .await?;
    Ok(())
}
