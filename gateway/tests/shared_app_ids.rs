//! Clients of the two protocols that pick the same application id (by
//! chance, or a hostile one on purpose) never see, change or remove each
//! other's data: each protocol names its applications in a namespace of its
//! own in the one store. Both benches push and read back every byte, under
//! memory pressure, with one application id, against the real binary.

mod common;

use std::process::{Command, Stdio};

use common::cluster::{Cluster, ClusterOptions};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

#[test]
fn one_app_id_in_both_protocols_stays_two_apps() {
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "32MiB".into(),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let app = "shared-app-1";
    let bench = |args: &[&str]| {
        let mut cmd = Command::new(BIN);
        common::clear_switchyard_env(&mut cmd);
        cmd.arg("bench")
            .args(args)
            .args(["--app", app, "--size", "96MiB", "--partitions", "8"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().expect("switchyard bench")
    };
    let master = node.celeborn_master().to_string();
    let coordinator = node.uniffle_coordinator().to_string();
    let celeborn = bench(&["celeborn", "--master", &master, "--mappers", "4"]);
    let uniffle = bench(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--mappers",
        "4",
        "--block-size",
        "256KiB",
        "--transport",
        "GRPC_NETTY",
    ]);
    for (name, child) in [("celeborn", celeborn), ("uniffle", uniffle)] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{name} bench with app id {app} failed:\n{}\n{}\nserver log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            node.log_tail(40)
        );
    }
    // Each protocol removed its own application at its end, and only that.
    let status = node.status();
    let apps: Vec<&str> = status["storage"]["applications"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["id"].as_str())
        .collect();
    assert!(
        !apps.iter().any(|a| a.ends_with(app)),
        "left behind: {apps:?}"
    );
}
