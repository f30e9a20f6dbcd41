//! Three `switchyard serve` processes as one fleet (nodes 1 and 2
//! coordinate, node 3 is only a worker): both protocols' benches, through
//! one coordinator, spread their partitions over every node and read every
//! byte back (Celeborn with replication too, from the replica copies); the
//! end of a Celeborn application, told to one master,
//! removes its data on every worker; a killed worker leaves placement; a
//! heartbeat without the cluster secret is refused.

mod common;

use std::process::Command;
use std::time::Duration;

use common::cluster::{Cluster, ClusterOptions, Node, FLEET_SECRET};
use common::wait_for;
use serde_json::Value;
use switchyard_cluster::proto::cluster_client::ClusterClient;
use switchyard_cluster::proto::WorkerHeartbeat;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn get_json(node: &Node, path: &str) -> Value {
    let (code, body) = node.get(path).unwrap();
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The workers node `coordinator` lists, by state.
fn workers(node: &Node) -> Vec<(String, String)> {
    get_json(node, "/api/v1/cluster")["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["node_id"].as_str().unwrap().to_string(),
                w["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until coordinator `node` ended its warm-up.
fn wait_warm(node: &Node) {
    wait_for("the coordinator's warm-up", || {
        get_json(node, "/api/v1/cluster")["warming"] == false
    });
}

/// Runs a `switchyard-bench` command line in process.
fn bench(args: &[&str]) {
    if let Err(e) = switchyard_bench::run_args(args) {
        panic!("bench {args:?} failed: {e}");
    }
}

/// Bytes node `node` says it stored for `app` of `protocol` (from the
/// migration report, which keeps removed applications).
fn written(node: &Node, protocol: &str, app: &str) -> u64 {
    get_json(node, "/api/v1/migration")["applications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["protocol"] == protocol && a["id"] == app)
        .map(|a| a["written_bytes"].as_u64().unwrap())
        .sum()
}

/// [`written`] summed over the three nodes.
fn written_on_all(cluster: &Cluster, protocol: &str, app: &str) -> u64 {
    (1..=3)
        .map(|i| written(cluster.node(i), protocol, app))
        .sum()
}

/// Whether the node still holds `stored_id` (`<protocol>/<id>`).
fn holds(node: &Node, stored_id: &str) -> bool {
    node.status()["storage"]["applications"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["id"] == stored_id)
}

#[test]
fn three_nodes_serve_as_one_fleet() {
    let mut cluster = Cluster::start_with(
        3,
        ClusterOptions {
            memory: "128MiB".into(),
            coordinators: vec![1, 2],
            // Nodes 1 and 2 share a rack, node 3 is alone on another.
            racks: vec!["/dc/r1".into(), "/dc/r1".into(), "/dc/r2".into()],
            ..ClusterOptions::default()
        },
    );
    let ids: Vec<String> = (1..=3)
        .map(|i| {
            cluster.node(i).status()["node"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();

    // Node 3 is only a worker: no coordinator or master port, no registry.
    let status3 = cluster.node(3).status();
    assert!(
        status3["node"]["uniffle"]["coordinator"].is_null(),
        "{status3}"
    );
    assert!(status3["node"]["celeborn"]["master"].is_null(), "{status3}");
    assert_eq!(cluster.node(3).get("/api/v1/cluster").unwrap().0, 404);

    // Both coordinators hear every worker.
    for c in [1, 2] {
        wait_for("three active workers", || {
            let w = workers(cluster.node(c));
            w.len() == 3 && w.iter().all(|(_, s)| s == "active")
        });
        wait_warm(cluster.node(c));
        let mut listed: Vec<String> = workers(cluster.node(c)).into_iter().map(|w| w.0).collect();
        let mut expected = ids.clone();
        listed.sort();
        expected.sort();
        assert_eq!(listed, expected);
    }

    // Celeborn through node 1's master: every node stores part of it, and
    // the bench reads every byte back.
    let master = cluster.node(1).celeborn_master().to_string();
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "fleet-celeborn-1",
        "--size",
        "48MiB",
        "--mappers",
        "3",
        "--partitions",
        "12",
    ]);
    for i in 1..=3 {
        let bytes = written(cluster.node(i), "celeborn", "fleet-celeborn-1");
        assert!(
            bytes > 1 << 20,
            "node {i} stored {bytes} B of the Celeborn app"
        );
    }
    // The bench ended its application on node 1's master; the other
    // workers learn it from their heartbeats to node 1.
    wait_for("the Celeborn app removed everywhere", || {
        (1..=3).all(|i| !holds(cluster.node(i), "celeborn/fleet-celeborn-1"))
    });

    // Replication: every partition also on a second node, forwarded by its
    // primary; every byte read back from the replica copies.
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "fleet-celeborn-r",
        "--size",
        "24MiB",
        "--mappers",
        "3",
        "--partitions",
        "12",
        "--replicate",
        "--read-replicas",
    ]);
    let stored = written_on_all(&cluster, "celeborn", "fleet-celeborn-r");
    assert!(
        stored >= 2 * (24 << 20),
        "replicated 24 MiB but the nodes stored {stored} B"
    );

    // Rack-aware replicas: every partition has one copy on the other rack,
    // so node 3, alone on /dc/r2, holds a copy of each (the bench checks
    // the racks of the reply too).
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "fleet-celeborn-rack",
        "--size",
        "24MiB",
        "--mappers",
        "3",
        "--partitions",
        "12",
        "--replicate",
        "--rack-aware",
    ]);
    let on_3 = written(cluster.node(3), "celeborn", "fleet-celeborn-rack");
    let on_1_2 = written(cluster.node(1), "celeborn", "fleet-celeborn-rack")
        + written(cluster.node(2), "celeborn", "fleet-celeborn-rack");
    assert!(
        on_3 >= 24 << 20 && on_1_2 >= 24 << 20,
        "rack-aware: node 3 stored {on_3} B, nodes 1 and 2 {on_1_2} B of 24 MiB"
    );

    // A shuffle with fewer partitions than workers: the reply lists the
    // others as spares (no locations), which a driver revives onto.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use switchyard_celeborn::proto::{MessageType, PbRequestSlots, PbRequestSlotsResponse};
        use switchyard_celeborn::rpc::endpoint;
        use switchyard_celeborn::TransportMessage;
        use switchyard_clients::celeborn::Connection;
        let conn = Connection::connect(cluster.node(1).celeborn_master())
            .await
            .unwrap();
        let request_slots = |r: PbRequestSlots| {
            let conn = &conn;
            async move {
                let reply = conn
                    .ask(
                        endpoint::MASTER,
                        TransportMessage::new(MessageType::RequestSlots, &r),
                    )
                    .await
                    .unwrap();
                let slots: PbRequestSlotsResponse = reply.decode_payload().unwrap();
                slots
            }
        };
        let slots = request_slots(PbRequestSlots {
            application_id: "fleet-spares".into(),
            partition_id_list: vec![0],
            should_replicate: true,
            ..Default::default()
        })
        .await;
        assert_eq!(slots.status, 0);
        assert_eq!(slots.worker_resource.len(), 3, "{slots:?}");
        let spares: Vec<_> = slots
            .worker_resource
            .values()
            .filter(|r| r.primary_partitions.is_empty() && r.replica_partitions.is_empty())
            .collect();
        assert_eq!(
            spares.len(),
            1,
            "one primary, one replica, one spare: {slots:?}"
        );
        let racks: std::collections::BTreeSet<_> = slots
            .worker_resource
            .values()
            .map(|r| r.network_location.as_str())
            .collect();
        assert_eq!(racks.into_iter().collect::<Vec<_>>(), ["/dc/r1", "/dc/r2"]);

        // Worker tags travel in the heartbeats: a tags expression naming
        // node 3's tag gets node 3's worker alone.
        let slots = request_slots(PbRequestSlots {
            application_id: "fleet-tags".into(),
            partition_id_list: vec![0, 1, 2],
            tags_expr: "/dc/r2".into(),
            ..Default::default()
        })
        .await;
        assert_eq!(slots.status, 0);
        let hosts: Vec<_> = slots.worker_resource.keys().collect();
        assert_eq!(hosts.len(), 1, "{slots:?}");
        assert!(hosts[0].starts_with("127.0.0.4:"), "{hosts:?}");
    });

    // Uniffle through node 2's coordinator, both transports.
    let coordinator = cluster.node(2).uniffle_coordinator().to_string();
    for (app, transport) in [
        ("fleet-uniffle-1", "GRPC"),
        ("fleet-uniffle-2", "GRPC_NETTY"),
    ] {
        bench(&[
            "uniffle",
            "--coordinator",
            &coordinator,
            "--app",
            app,
            "--size",
            "48MiB",
            "--mappers",
            "3",
            "--partitions",
            "12",
            "--transport",
            transport,
        ]);
        for i in 1..=3 {
            let bytes = written(cluster.node(i), "uniffle", app);
            assert!(
                bytes > 1 << 20,
                "node {i} stored {bytes} B of {app} ({transport})"
            );
        }
    }
    // Two replicas per partition on distinct servers, every block read back
    // from the second one.
    bench(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--app",
        "fleet-uniffle-r",
        "--size",
        "24MiB",
        "--mappers",
        "3",
        "--partitions",
        "12",
        "--transport",
        "GRPC_NETTY",
        "--replicas",
        "2",
        "--read-replica",
        "1",
    ]);
    let stored = written_on_all(&cluster, "uniffle", "fleet-uniffle-r");
    assert!(
        stored >= 2 * (24 << 20),
        "two replicas of 24 MiB but the nodes stored {stored} B"
    );

    // A heartbeat without the secret, or with a wrong one, is refused.
    rt.block_on(async {
        let mut client = ClusterClient::connect("http://127.0.0.2:19980")
            .await
            .unwrap();
        let forged = WorkerHeartbeat {
            protocol_version: 1,
            node_id: "intruder".into(),
            ..Default::default()
        };
        let err = client.heartbeat(forged.clone()).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        let mut wrong = tonic::Request::new(forged.clone());
        wrong
            .metadata_mut()
            .insert(switchyard_cluster::SECRET_HEADER, "guess".parse().unwrap());
        assert_eq!(
            client.heartbeat(wrong).await.unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        // The right secret with an unknown protocol version: refused too.
        let mut future = tonic::Request::new(WorkerHeartbeat {
            protocol_version: 99,
            ..forged
        });
        future.metadata_mut().insert(
            switchyard_cluster::SECRET_HEADER,
            FLEET_SECRET.parse().unwrap(),
        );
        assert_eq!(
            client.heartbeat(future).await.unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
    });
    assert!(workers(cluster.node(1))
        .iter()
        .all(|(id, _)| id != "intruder"));

    // kill -9 node 3: both coordinators report it lost and place on the
    // other two.
    cluster.kill(3);
    for c in [1, 2] {
        wait_for("node 3 lost", || {
            workers(cluster.node(c))
                .iter()
                .any(|(id, state)| id == &ids[2] && state == "lost")
        });
    }
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "fleet-celeborn-2",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "8",
    ]);
    bench(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--app",
        "fleet-uniffle-3",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "8",
    ]);
    for i in 1..=2 {
        assert!(
            written(cluster.node(i), "celeborn", "fleet-celeborn-2") > 0,
            "node {i}"
        );
        assert!(
            written(cluster.node(i), "uniffle", "fleet-uniffle-3") > 0,
            "node {i}"
        );
    }
}

/// `POST /api/v1/decommission` with an optional bearer token: the status code.
fn post_decommission(node: &Node, token: Option<&str>) -> u16 {
    decommission_request(node, "POST", token)
}

/// `METHOD /api/v1/decommission` with an optional bearer token: the status code.
fn decommission_request(node: &Node, method: &str, token: Option<&str>) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(node.admin()).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} /api/v1/decommission HTTP/1.0\r\nHost: x\r\n{auth}Content-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn ctl(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(BIN);
    common::clear_switchyard_env(&mut cmd);
    let out = cmd.arg("ctl").args(args).output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_cancelled_decommission_takes_new_partitions_again() {
    const TOKEN: &str = "cancel-admin-token";
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            extra_toml: format!(
                "[admin]\ntoken = \"{TOKEN}\"\n\n[cluster]\ndecommission_check_interval = \"1s\"\n"
            ),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let master = node.celeborn_master().to_string();
    let admin = node.admin().to_string();
    let run = |app: &str| {
        switchyard_bench::run_args([
            "celeborn",
            "--master",
            &master,
            "--app",
            app,
            "--size",
            "4MiB",
            "--mappers",
            "1",
            "--partitions",
            "2",
            "--keep-app",
        ])
        .is_ok()
    };
    // Data that keeps the node from exiting once decommissioning.
    assert!(run("held"), "a first run");
    // Nothing to cancel yet.
    let (ok, out) = ctl(&[
        "decommission",
        "--cancel",
        "--admin",
        &admin,
        "--token",
        TOKEN,
    ]);
    assert!(!ok && out.contains("not decommissioning"), "{out}");

    assert_eq!(post_decommission(node, Some(TOKEN)), 202);
    assert_eq!(node.status()["decommission"]["state"], "decommissioning");
    assert!(
        !run("while-decommissioning"),
        "its own master places nothing on it"
    );
    // Cancelling needs the token too.
    assert_eq!(decommission_request(node, "DELETE", None), 401);
    assert_eq!(decommission_request(node, "DELETE", Some("guess")), 401);
    let (ok, out) = ctl(&[
        "decommission",
        "--cancel",
        "--admin",
        &admin,
        "--token",
        TOKEN,
    ]);
    assert!(ok && out.contains("cancelled"), "{out}");
    assert_eq!(node.status()["decommission"]["state"], "active");
    assert!(run("after-cancel"), "placed on it again");
    assert!(holds(node, "celeborn/after-cancel"));
    // Several decommission checks later it is still up.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(node.status()["decommission"]["state"], "active");
}

#[test]
fn a_decommissioned_node_takes_nothing_new_and_exits_once_released() {
    const TOKEN: &str = "fleet-admin-token";
    let mut cluster = Cluster::start_with(
        3,
        ClusterOptions {
            memory: "128MiB".into(),
            coordinators: vec![1, 2],
            // Celeborn apps that stop talking expire after 30 s: kept-1
            // must outlive the steps below (two benches among them) on a
            // slow machine too, or node 3 exits before it is checked.
            extra_toml: format!(
                "[admin]\ntoken = \"{TOKEN}\"\n\n[celeborn]\napp_timeout = \"30s\"\n"
            ),
            ..ClusterOptions::default()
        },
    );
    let id3 = cluster.node(3).status()["node"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("three active workers", || {
        workers(cluster.node(1))
            .iter()
            .filter(|w| w.1 == "active")
            .count()
            == 3
    });
    wait_warm(cluster.node(1));
    wait_warm(cluster.node(2));

    // Without the token, or with a wrong one: refused, nothing changes.
    assert_eq!(post_decommission(cluster.node(3), None), 401);
    assert_eq!(post_decommission(cluster.node(3), Some("guess")), 401);
    assert_eq!(cluster.node(3).status()["decommission"]["state"], "active");

    // A Celeborn application that keeps its data on every node.
    let master = cluster.node(1).celeborn_master().to_string();
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "kept-1",
        "--size",
        "24MiB",
        "--mappers",
        "3",
        "--partitions",
        "12",
        "--keep-app",
    ]);
    assert!(holds(cluster.node(3), "celeborn/kept-1"));

    // Decommission node 3 by id through the coordinator on node 1.
    let admin1 = cluster.node(1).admin().to_string();
    let (ok, out) = ctl(&["decommission", &id3, "--admin", &admin1, "--token", TOKEN]);
    assert!(ok, "{out}");
    assert!(out.contains("decommissioning"), "{out}");
    assert_eq!(
        cluster.node(3).status()["decommission"]["state"],
        "decommissioning"
    );
    for c in [1, 2] {
        wait_for("node 3 decommissioning", || {
            workers(cluster.node(c))
                .iter()
                .any(|(id, s)| id == &id3 && s == "decommissioning")
        });
    }
    let (ok, nodes) = ctl(&["nodes", "--admin", &admin1]);
    assert!(
        ok && nodes.contains("decommissioning") && nodes.contains(&id3),
        "{nodes}"
    );

    // New work goes to nodes 1 and 2 only.
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--app",
        "after-1",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "8",
    ]);
    let coordinator = cluster.node(2).uniffle_coordinator().to_string();
    bench(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--app",
        "after-2",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "8",
    ]);
    assert_eq!(written(cluster.node(3), "celeborn", "after-1"), 0);
    assert_eq!(written(cluster.node(3), "uniffle", "after-2"), 0);
    for i in [1, 2] {
        assert!(
            written(cluster.node(i), "celeborn", "after-1") > 0,
            "node {i}"
        );
        assert!(
            written(cluster.node(i), "uniffle", "after-2") > 0,
            "node {i}"
        );
    }

    // Node 3 stays while kept-1 holds data there, and exits 0 once that
    // application expires.
    assert!(cluster.node(3).is_running());
    let status = cluster
        .wait_exit(3, Duration::from_secs(120))
        .unwrap_or_else(|| panic!("node 3 did not exit\n{}", cluster.node(3).log_tail(30)));
    assert!(status.success(), "node 3 exited with {status}");
    let log = cluster.node(3).log_tail(60);
    assert!(log.contains("decommissioned"), "{log}");
}

#[test]
fn a_restarted_coordinator_warms_up_and_deletes_nothing() {
    use switchyard_celeborn::proto::{MessageType, PbRequestSlots};
    use switchyard_celeborn::rpc::endpoint;
    use switchyard_celeborn::TransportMessage;
    use switchyard_clients::celeborn::Connection;
    use switchyard_clients::uniffle::{Coordinator, Transport};

    let mut cluster = Cluster::start_with(
        3,
        ClusterOptions {
            memory: "128MiB".into(),
            coordinators: vec![1, 2],
            // Long enough that the restarted node is still warming up
            // when the test has seen it ready and asks it, however slowly.
            warmup: "8s".into(),
            ..ClusterOptions::default()
        },
    );
    for c in [1, 2] {
        wait_warm(cluster.node(c));
    }
    wait_for("three active workers", || {
        workers(cluster.node(2))
            .iter()
            .filter(|w| w.1 == "active")
            .count()
            == 3
    });
    let master1 = cluster.node(1).celeborn_master().to_string();
    bench(&[
        "celeborn",
        "--master",
        &master1,
        "--app",
        "live-1",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "9",
        "--keep-app",
    ]);
    for i in [1, 3] {
        assert!(holds(cluster.node(i), "celeborn/live-1"), "node {i}");
    }

    // Node 2 restarts: while it warms up it refuses drivers of both
    // protocols (so they move on to node 1), and what it never heard of is
    // not deleted anywhere.
    cluster.restart(2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let master2 = cluster.node(2).celeborn_master();
    let coordinator2 = cluster.node(2).uniffle_coordinator().to_string();
    rt.block_on(async {
        let warming = get_json(cluster.node(2), "/api/v1/cluster")["warming"].clone();
        assert_eq!(warming, true, "just restarted");
        let master = Connection::connect(master2).await.unwrap();
        let err = master
            .ask(
                endpoint::MASTER,
                TransportMessage::new(
                    MessageType::RequestSlots,
                    &PbRequestSlots {
                        application_id: "during-warmup".into(),
                        partition_id_list: vec![0, 1],
                        ..Default::default()
                    },
                ),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("warming up"), "{err}");
        let mut coordinator = Coordinator::connect(&coordinator2).await.unwrap();
        let err = coordinator
            .assignments("during-warmup", 0, 4, Transport::Grpc)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("warming up"), "{err}");
    });
    wait_warm(cluster.node(2));
    // Several heartbeats of every worker to the fresh coordinator later,
    // the application it never saw still has its data on nodes 1 and 3.
    std::thread::sleep(Duration::from_secs(3));
    for i in [1, 3] {
        assert!(
            holds(cluster.node(i), "celeborn/live-1"),
            "node {i} deleted live-1"
        );
    }
    // Warm, node 2 places on every worker again.
    let coordinator = cluster.node(2).uniffle_coordinator().to_string();
    bench(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--app",
        "after-warmup",
        "--size",
        "16MiB",
        "--mappers",
        "2",
        "--partitions",
        "9",
    ]);
    for i in 1..=3 {
        assert!(
            written(cluster.node(i), "uniffle", "after-warmup") > 0,
            "node {i}"
        );
    }
}

#[test]
fn a_celeborn_secret_registered_on_one_master_authenticates_on_every_worker() {
    use switchyard_celeborn::rpc::endpoint;
    use switchyard_clients::celeborn::Connection;
    let cluster = Cluster::start_with(
        3,
        ClusterOptions {
            coordinators: vec![1, 2],
            extra_toml: "[celeborn]\nauth_enabled = true\n".into(),
            ..ClusterOptions::default()
        },
    );
    for c in [1, 2] {
        wait_warm(cluster.node(c));
    }
    let (app, secret) = ("local-fleet-auth", "fleet-s3cret");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // The driver registers its secret on node 1's master only.
        let master = Connection::connect(cluster.node(1).celeborn_master())
            .await
            .unwrap();
        master.register_application(app, secret).await.unwrap();
        // Its executors authenticate on every worker: node 2 (the other
        // coordinator) and node 3 (a worker only) fetch the secret from the
        // coordinators.
        for i in 1..=3 {
            for port in [9100, 9101, 9102] {
                let conn = Connection::connect(cluster.node(i).addr(port))
                    .await
                    .unwrap();
                conn.authenticate(app, secret).await.unwrap_or_else(|e| {
                    panic!(
                        "node {i} port {port}: {e}\n{}",
                        cluster.node(i).log_tail(30)
                    )
                });
            }
            let rpc = Connection::connect(cluster.node(i).addr(9100))
                .await
                .unwrap();
            rpc.authenticate(app, secret).await.unwrap();
            assert!(rpc.verify(endpoint::WORKER).await.unwrap(), "node {i}");
        }
        // A wrong secret, or an application no master knows, is refused.
        let wrong = Connection::connect(cluster.node(3).addr(9101))
            .await
            .unwrap();
        assert!(wrong.authenticate(app, "guess").await.is_err());
        let unknown = Connection::connect(cluster.node(3).addr(9101))
            .await
            .unwrap();
        assert!(unknown.authenticate("never-registered", "x").await.is_err());
        // Unauthenticated, nothing is served.
        let plain = Connection::connect(cluster.node(3).addr(9100))
            .await
            .unwrap();
        assert!(plain.verify(endpoint::WORKER).await.is_err());
    });
    let metrics = cluster.node(1).get("/metrics").unwrap().1;
    assert!(
        metrics.contains("switchyard_cluster_secret_lookups_total"),
        "the coordinators answered lookups"
    );
}

/// A Celeborn master call; panics on an RPC failure.
async fn master_ask(
    master: &switchyard_clients::celeborn::Connection,
    message: switchyard_celeborn::TransportMessage,
) -> switchyard_celeborn::TransportMessage {
    use switchyard_celeborn::rpc::endpoint;
    master.ask(endpoint::MASTER, message).await.unwrap()
}

/// The shuffles master `master` lists in a driver heartbeat reply of `app`.
async fn registered_shuffles(master: std::net::SocketAddr, app: &str) -> Vec<i32> {
    use switchyard_celeborn::proto::{
        MessageType, PbHeartbeatFromApplication, PbHeartbeatFromApplicationResponse,
    };
    use switchyard_celeborn::TransportMessage;
    use switchyard_clients::celeborn::{decode, Connection};
    let conn = Connection::connect(master).await.unwrap();
    let reply = master_ask(
        &conn,
        TransportMessage::new(
            MessageType::HeartbeatFromApplication,
            &PbHeartbeatFromApplication {
                app_id: app.into(),
                should_response: true,
                ..Default::default()
            },
        ),
    )
    .await;
    let r: PbHeartbeatFromApplicationResponse = decode(&reply).unwrap();
    let mut v = r.registered_shuffles;
    v.sort();
    v
}

/// What a Celeborn driver tells one master, the other coordinators know
/// too (they exchange their app books): shuffles with slots, unregistered
/// shuffles, the application's user; a coordinator restarted with kill -9
/// learns them from its peer during its warm-up, before it answers drivers.
#[test]
fn coordinators_share_what_drivers_told_them() {
    use switchyard_celeborn::proto::{
        MessageType, PbRegisterApplicationInfo, PbRequestSlots, PbUnregisterShuffle,
        PbUserIdentifier,
    };
    use switchyard_celeborn::TransportMessage;
    use switchyard_clients::celeborn::Connection;

    let mut cluster = Cluster::start_with(
        3,
        ClusterOptions {
            coordinators: vec![1, 2],
            ..ClusterOptions::default()
        },
    );
    for c in [1, 2] {
        wait_warm(cluster.node(c));
    }
    wait_for("three active workers", || {
        workers(cluster.node(1)).len() == 3
    });
    let app = "local-shared-book";
    let (master1, master2) = (
        cluster.node(1).celeborn_master(),
        cluster.node(2).celeborn_master(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let m1 = Connection::connect(master1).await.unwrap();
        master_ask(
            &m1,
            TransportMessage::new(
                MessageType::RegisterApplicationInfo,
                &PbRegisterApplicationInfo {
                    app_id: app.into(),
                    user_identifier: Some(PbUserIdentifier {
                        tenant_id: "t1".into(),
                        name: "alice".into(),
                    }),
                    ..Default::default()
                },
            ),
        )
        .await;
        for shuffle_id in [7, 8] {
            let reply = master_ask(
                &m1,
                TransportMessage::new(
                    MessageType::RequestSlots,
                    &PbRequestSlots {
                        application_id: app.into(),
                        shuffle_id,
                        partition_id_list: vec![0, 1, 2],
                        ..Default::default()
                    },
                ),
            )
            .await;
            assert_eq!(reply.kind(), Some(MessageType::RequestSlotsResponse));
        }
        assert_eq!(registered_shuffles(master1, app).await, [7, 8]);
    });
    // Node 2's master never heard of the application; it lists its
    // shuffles once the books were exchanged (every heartbeat interval).
    wait_for("node 2 to know shuffles 7 and 8", || {
        rt.block_on(registered_shuffles(master2, app)) == [7, 8]
    });
    let book2 = get_json(cluster.node(2), "/api/v1/cluster")["apps"].clone();
    let entry = book2
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["app"] == app)
        .unwrap_or_else(|| panic!("{book2}"));
    assert_eq!(entry["user"], "t1.alice", "{entry}");
    assert_eq!(entry["state"], "alive", "{entry}");

    // The driver moves to node 2 and unregisters shuffle 7 there: node 1
    // drops it too (a tombstone wins everywhere).
    rt.block_on(async {
        let m2 = Connection::connect(master2).await.unwrap();
        master_ask(
            &m2,
            TransportMessage::new(
                MessageType::UnregisterShuffle,
                &PbUnregisterShuffle {
                    app_id: app.into(),
                    shuffle_id: 7,
                    ..Default::default()
                },
            ),
        )
        .await;
        assert_eq!(registered_shuffles(master2, app).await, [8]);
    });
    wait_for("node 1 to drop shuffle 7", || {
        rt.block_on(registered_shuffles(master1, app)) == [8]
    });

    // Node 2 is killed and restarted: it warms up until it has pulled node
    // 1's book, so its first answer to a driver already lists shuffle 8.
    cluster.kill(2);
    cluster.restart(2);
    wait_warm(cluster.node(2));
    assert_eq!(rt.block_on(registered_shuffles(master2, app)), [8]);
    let metrics = cluster.node(2).get("/metrics").unwrap().1;
    assert!(
        metrics.contains("switchyard_cluster_app_syncs_total"),
        "node 2 counts its exchanges"
    );
}

/// A coordinator-only node (`roles = ["coordinator"]`) binds no shuffle
/// server or worker port and places both protocols' partitions on the
/// workers only; it stores nothing itself.
#[test]
fn a_coordinator_only_node_places_on_the_workers() {
    let cluster = Cluster::start_with(
        3,
        ClusterOptions {
            memory: "128MiB".into(),
            coordinators: vec![1, 2],
            coordinator_only: vec![1],
            ..ClusterOptions::default()
        },
    );
    let status1 = cluster.node(1).status();
    let node = &status1["node"];
    assert!(node["uniffle"]["coordinator"].is_string(), "{status1}");
    assert!(node["uniffle"]["server_grpc"].is_null(), "{status1}");
    assert!(node["celeborn"]["master"].is_string(), "{status1}");
    assert!(node["celeborn"]["worker_id"].is_null(), "{status1}");
    for port in [19997, 19996, 9100, 9101, 9102, 9103] {
        assert!(
            std::net::TcpStream::connect(cluster.node(1).addr(port)).is_err(),
            "node 1 listens on {port}"
        );
    }
    wait_warm(cluster.node(1));
    wait_for("two active workers", || {
        let w = workers(cluster.node(1));
        w.len() == 2 && w.iter().all(|(_, s)| s == "active")
    });
    let id1 = status1["node"]["id"].as_str().unwrap().to_string();
    assert!(
        workers(cluster.node(1)).iter().all(|(id, _)| *id != id1),
        "the coordinator-only node is no worker"
    );

    let master = cluster.node(1).celeborn_master().to_string();
    let coordinator = cluster.node(1).uniffle_coordinator().to_string();
    let common = ["--size", "16MiB", "--mappers", "2", "--partitions", "8"];
    let mut args = vec!["celeborn", "--master", &master, "--app", "co-celeborn"];
    args.extend(common);
    bench(&args);
    let mut args = vec![
        "uniffle",
        "--coordinator",
        &coordinator,
        "--app",
        "co-uniffle",
        "--transport",
        "GRPC_NETTY",
    ];
    args.extend(common);
    bench(&args);
    for (protocol, app) in [("celeborn", "co-celeborn"), ("uniffle", "co-uniffle")] {
        assert_eq!(written(cluster.node(1), protocol, app), 0, "{protocol}");
        for i in [2, 3] {
            assert!(
                written(cluster.node(i), protocol, app) > 0,
                "{protocol} node {i}"
            );
        }
    }
}

/// A cold tier that never answers: it accepts connections and reads
/// nothing, as an S3 endpoint behind a black hole does.
fn silent_s3() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    addr
}

/// A worker removing an ended application whose cold objects cannot be
/// deleted (the S3 endpoint does not answer) keeps heartbeating: the
/// deletes run beside the heartbeats, not in them. They once ran in them,
/// and the coordinators declared the worker lost for as long as the
/// deletes' timeouts and retries took (found by the soak).
#[test]
fn removing_an_application_does_not_hold_up_heartbeats() {
    let s3 = silent_s3();
    let cluster = Cluster::start_with(
        2,
        ClusterOptions {
            coordinators: vec![1],
            coordinator_only: vec![1],
            extra_toml: format!(
                "[storage.cold]\nservice = \"s3\"\nbucket = \"b\"\nendpoint = \"http://{s3}\"\n\
                 region = \"us-east-1\"\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\n\
                 io_timeout = \"3s\"\nretries = 3\n\n"
            ),
            ..ClusterOptions::default()
        },
    );
    let coordinator = cluster.node(1);
    wait_for("one active worker", || {
        workers(coordinator).iter().any(|(_, s)| s == "active")
    });
    wait_warm(coordinator);
    let worker_id = cluster.node(2).status()["node"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let app = "heartbeat-beside-deletes";
    let master = coordinator.celeborn_master().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use switchyard_bench::lifecycle;
        let m = lifecycle::connect_master(&master).await.unwrap();
        lifecycle::heartbeat(&m, app).await.unwrap();
        let request = lifecycle::SlotRequest {
            partitions: vec![0, 1],
            replicate: false,
            rack_aware: false,
            map_partitions: false,
        };
        let slots = lifecycle::request_slots(&m, app, &request).await.unwrap();
        lifecycle::reserve_slots(app, &slots, &request)
            .await
            .unwrap();
        lifecycle::application_lost(&m, app).await.unwrap();
    });
    // The removal's cold deletes wait out their timeouts and retries (some
    // 10 s); meanwhile every heartbeat still arrives.
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < until {
        let cluster_view = get_json(coordinator, "/api/v1/cluster");
        let w = cluster_view["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["node_id"] == worker_id.as_str())
            .cloned()
            .expect("the worker is listed");
        assert_eq!(w["state"], "active", "{w}");
        let ago = w["last_heartbeat_ms_ago"].as_u64().unwrap();
        assert!(ago < 4_000, "last heartbeat {ago} ms ago: {w}");
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        cluster
            .node(2)
            .log()
            .contains("application ended: removing its data"),
        "the removal started"
    );
}
