//! Nodes that share one cold tier (one bucket, one `storage.cold.prefix`:
//! what a fleet from one config gets) keep out of each other's objects.
//! The soak found a restarted node's orphan sweep deleting another node's
//! live cold segments, which were under the same prefix.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::cluster::{Cluster, ClusterOptions, Node};
use switchyard_clients::uniffle::{ClientBlock, ReadOptions};

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(files(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Four 64 KiB blocks in partition 0 of `app` on `node`, reported in two
/// rounds, each committed by its report: the first flush goes to a disk,
/// the second (the partition now past the 1-byte huge threshold) to the
/// cold tier.
fn write(node: &Node, app: &str) {
    runtime().block_on(async {
        let mut server = common::uniffle::shuffle_of_four(node, app, None).await;
        for round in 0..2i64 {
            let ids: Vec<i64> = (0..2).map(|i| (round * 2 + i) << 22).collect();
            for id in &ids {
                let data = bytes::Bytes::from(vec![*id as u8 ^ 7; 64 << 10]);
                let block = ClientBlock::new(*id, round, data);
                server.send(app, 0, vec![(0, vec![block])]).await.unwrap();
            }
            server
                .report(app, 0, round, [(0, ids)].into_iter().collect())
                .await
                .unwrap();
        }
    });
}

/// Partition 0 of `app` read back from `node`: its blocks.
fn read(node: &Node, app: &str) -> Result<usize, String> {
    runtime().block_on(async {
        let mut server = common::uniffle::shuffle_of_four(node, app, None).await;
        let bitmap = server
            .shuffle_result(app, 0, vec![0])
            .await
            .map_err(|e| e.to_string())?;
        server
            .read_partition(app, 0, 0, &bitmap, ReadOptions::default())
            .await
            .map(|b| b.len())
            .map_err(|e| e.to_string())
    })
}

#[test]
fn a_node_restarting_beside_another_leaves_its_cold_objects_alone() {
    let shared = tempfile::tempdir().unwrap();
    let cold = shared.path().join("cold");
    let options = ClusterOptions {
        extra_toml: format!(
            "[storage.cold]\nservice = \"fs\"\nroot = \"{}\"\nhuge_partition_threshold = \"1B\"\n\n\
             [storage.recovery]\norphan_grace = \"1s\"\n",
            cold.display()
        ),
        ..ClusterOptions::default()
    };
    let mut cluster = Cluster::start_with(2, options);
    write(cluster.node(1), "app-on-1");
    let before = files(&cold);
    assert!(
        !before.is_empty(),
        "node 1's partition went to the cold tier"
    );
    let id1 = cluster.node(1).status()["node"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        before
            .iter()
            .all(|f| f.components().any(|c| c.as_os_str() == id1.as_str())),
        "under node 1's own directory ({id1}): {before:?}"
    );
    // Node 2 restarts: its sweep of what it does not own runs a second
    // after it is ready.
    cluster.kill(2);
    cluster.restart(2);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(files(&cold), before, "node 1's objects are all there");
    assert_eq!(read(cluster.node(1), "app-on-1"), Ok(4));
    // Node 2 removing an application of the same id removes nothing of
    // node 1's either.
    write(cluster.node(2), "app-on-1");
    runtime().block_on(async {
        let mut server = common::uniffle::shuffle_of_four(cluster.node(2), "app-on-1", None).await;
        server.unregister_app("app-on-1").await.unwrap();
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        files(&cold).iter().filter(|f| before.contains(f)).count(),
        before.len()
    );
    assert_eq!(read(cluster.node(1), "app-on-1"), Ok(4));
}
