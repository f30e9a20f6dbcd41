//! The cluster fixture (`tests/common/cluster.rs`) and node identity: three
//! `switchyard serve` processes on 127.0.0.2-4 with the default ports, each
//! with its own node id; one killed and restarted keeps its id, one stopped
//! with SIGTERM exits 0.

mod common;

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Node, DEFAULT_PORTS};
use switchyard_clients::uniffle::{Coordinator, Transport};

/// Checks what node `node` reports about itself; returns its id.
fn check_identity(node: &Node) -> String {
    let ip = node.ip().to_string();
    let status = node.status();
    let n = &status["node"];
    let id = n["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no node.id in {status}"));
    assert!(
        id.starts_with("sy-") && id.len() == 15,
        "generated id {id:?}"
    );
    assert_eq!(n["host"], ip.as_str(), "{status}");
    assert_eq!(n["admin"], format!("{ip}:19990"), "{status}");
    let u = &n["uniffle"];
    assert_eq!(
        u["server_id"], id,
        "Uniffle's server id is the node id: {status}"
    );
    assert_eq!(u["coordinator"], format!("{ip}:19999"), "{status}");
    assert_eq!(u["server_grpc"], format!("{ip}:19997"), "{status}");
    assert_eq!(u["server_netty"], format!("{ip}:19996"), "{status}");
    let c = &n["celeborn"];
    assert_eq!(c["master"], format!("{ip}:9097"), "{status}");
    assert_eq!(
        c["worker_id"],
        format!("{ip}:9100:9101:9102:9103"),
        "{status}"
    );
    assert_eq!(c["worker_replicate"], format!("{ip}:9103"), "{status}");

    let file = std::fs::read_to_string(node.data_dir().join("node-id")).expect("node-id file");
    assert_eq!(file.trim(), id, "persisted id");

    // Every sample on /metrics carries this node's label.
    let (code, metrics) = node.get("/metrics").unwrap();
    assert_eq!(code, 200);
    let label = format!("node=\"{id}\"");
    let samples: Vec<&str> = metrics
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        samples
            .iter()
            .any(|l| l.starts_with("switchyard_memory_capacity_bytes{")),
        "{metrics}"
    );
    for sample in samples {
        assert!(sample.contains(&label), "sample without {label}: {sample}");
    }
    id.to_string()
}

/// Every log line the node wrote since its last start ends with `node=<id>`.
fn check_log_lines(node: &Node, id: &str) {
    let log = node.log();
    let run = log.rsplit("#### cluster fixture: start").next().unwrap();
    let lines: Vec<&str> = run.lines().skip(1).collect();
    assert!(lines.len() >= 5, "few log lines:\n{run}");
    let suffix = format!(" node={id}");
    for line in lines {
        assert!(line.ends_with(&suffix), "log line without{suffix}: {line}");
    }
}

fn refused(node: &Node, port: u16) -> bool {
    match TcpStream::connect_timeout(&node.addr(port), Duration::from_secs(2)) {
        Ok(_) => false,
        Err(e) => e.kind() == ErrorKind::ConnectionRefused,
    }
}

fn ready(node: &Node) -> bool {
    matches!(node.get("/readyz"), Ok((200, _)))
}

#[test]
fn three_nodes_with_their_own_ids_survive_kill_and_restart() {
    let t0 = Instant::now();
    let mut cluster = Cluster::start(3);
    eprintln!("3 nodes ready after {:?}", t0.elapsed());

    let ids: Vec<String> = (1..=3).map(|i| check_identity(cluster.node(i))).collect();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            cluster.node(i + 1).status()["node"]["id_source"],
            "generated"
        );
        check_log_lines(cluster.node(i + 1), id);
    }
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "ids not distinct: {ids:?}"
    );

    // On the wire: each node's coordinator assigns its own shuffle server,
    // under the node id, at the node's address.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for i in 1..=3 {
        let node = cluster.node(i);
        let assignments = runtime.block_on(async {
            let mut coordinator = Coordinator::connect(&node.uniffle_coordinator().to_string())
                .await
                .expect("connect to the coordinator");
            coordinator
                .assignments("cluster-fixture-app", 0, 2, Transport::GrpcNetty)
                .await
                .expect("getShuffleAssignments")
        });
        assert!(!assignments.is_empty());
        for a in &assignments {
            for s in &a.server {
                assert_eq!(s.id, ids[i - 1], "node {i}: {assignments:?}");
                assert_eq!(s.ip, node.ip().to_string());
                assert_eq!((s.port, s.netty_port), (19997, 19996));
            }
        }
    }

    // kill -9 node 2: every one of its ports refuses, 1 and 3 stay ready.
    let status = cluster.kill(2);
    assert_eq!(status.signal(), Some(9), "{status}");
    assert!(!cluster.node(2).is_running());
    for (key, port) in DEFAULT_PORTS {
        assert!(
            refused(cluster.node(2), port),
            "node 2's {key} ({port}) still accepts after SIGKILL"
        );
    }
    assert!(ready(cluster.node(1)) && ready(cluster.node(3)));

    // Restarted on the same data dir and addresses: the same id, from the file.
    let t1 = Instant::now();
    cluster.restart(2);
    eprintln!("node 2 ready again after {:?}", t1.elapsed());
    assert_eq!(check_identity(cluster.node(2)), ids[1]);
    assert_eq!(cluster.node(2).status()["node"]["id_source"], "persisted");
    check_log_lines(cluster.node(2), &ids[1]);

    // SIGTERM: a clean exit with status 0; the others keep running.
    let status = cluster.stop(1);
    assert_eq!(
        status.code(),
        Some(0),
        "{status}\n{}",
        cluster.node(1).log_tail(20)
    );
    assert!(refused(cluster.node(1), 19990));
    assert!(cluster.node(1).log().contains("switchyard stopped"));
    assert!(ready(cluster.node(2)) && ready(cluster.node(3)));

    // A default port taken on a node's address: a clear failure, naming it.
    let squatter = TcpListener::bind(cluster.node(1).addr(9101)).unwrap();
    let message = cluster
        .try_restart(1)
        .expect_err("restart with a port taken");
    assert!(
        message.contains("127.0.0.2:9101") && message.contains("celeborn.worker_push_listen"),
        "{message}"
    );
    assert!(!cluster.node(1).is_running());
    drop(squatter);
    cluster.restart(1);
    assert_eq!(check_identity(cluster.node(1)), ids[0]);
    eprintln!("whole test {:?}", t0.elapsed());
}
