//! Clients of the two protocols that pick the same application id (by
//! chance, or a hostile one on purpose) never see, change or remove each
//! other's data: each protocol names its applications in a namespace of its
//! own in the one store. Both benches push and read back every byte, under
//! memory pressure, with one application id, against the real binary.

mod common;

use common::cluster::{Cluster, ClusterOptions};

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
    // Both benches at once, each on a thread of its own (a bench runs on a
    // runtime of its own).
    let bench = |args: Vec<String>| {
        let common = ["--app", app, "--size", "96MiB", "--partitions", "8"];
        let args: Vec<String> = args
            .into_iter()
            .chain(common.iter().map(|a| a.to_string()))
            .collect();
        std::thread::spawn(move || switchyard_bench::run_args(args))
    };
    let master = node.celeborn_master().to_string();
    let coordinator = node.uniffle_coordinator().to_string();
    let strings = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let celeborn = bench(strings(&[
        "celeborn",
        "--master",
        &master,
        "--mappers",
        "4",
    ]));
    let uniffle = bench(strings(&[
        "uniffle",
        "--coordinator",
        &coordinator,
        "--mappers",
        "4",
        "--block-size",
        "256KiB",
        "--transport",
        "GRPC_NETTY",
    ]));
    for (name, run) in [("celeborn", celeborn), ("uniffle", uniffle)] {
        if let Err(e) = run.join().expect("the bench thread") {
            panic!(
                "{name} bench with app id {app} failed: {e}\nserver log:\n{}",
                node.log_tail(40)
            );
        }
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
