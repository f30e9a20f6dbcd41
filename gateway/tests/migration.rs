//! `switchyard ctl apps` and `ctl migration` (and `/api/v1/migration`)
//! against the real binary with real traffic: a Celeborn application that
//! came and went, and a live Uniffle application whose client told its
//! version. Each row must name its protocol and client and carry the bytes
//! the clients actually wrote and read.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, Node};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn switchyard(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    common::clear_switchyard_env(&mut cmd);
    let out = cmd.args(args).output().unwrap();
    assert!(
        out.status.success(),
        "switchyard {args:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A live Uniffle application: its client says it is 0.10.0, writes four
/// 64 KiB blocks and reads one partition back.
fn uniffle_app(node: &Node, app: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use switchyard_clients::uniffle::{ClientBlock, ReadOptions};
        let mut server = common::uniffle::shuffle_of_four(node, app, Some("0.10.0")).await;
        let mut ids = std::collections::HashMap::new();
        for p in 0..4 {
            let id = (p as i64) << 22;
            let block = ClientBlock::new(id, 0, bytes::Bytes::from(vec![p as u8; 64 << 10]));
            server.send(app, 0, vec![(p, vec![block])]).await.unwrap();
            ids.insert(p, vec![id]);
        }
        server.report(app, 0, 0, ids).await.unwrap();
        let bitmap = server.shuffle_result(app, 0, vec![0]).await.unwrap();
        let got = server
            .read_partition(app, 0, 0, &bitmap, ReadOptions::default())
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
    });
}

fn row<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["applications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {report}"))
}

#[test]
fn ctl_apps_and_migration_show_protocols_clients_and_bytes() {
    let cluster = Cluster::start(1);
    let node = cluster.node(1);
    let admin = node.admin().to_string();
    let master = node.celeborn_master().to_string();
    // 8 MiB in 64 KiB batches behind 16-byte headers, read back whole; the
    // bench ends its application (ApplicationLost).
    let bench = switchyard_bench::run_args([
        "celeborn",
        "--master",
        &master,
        "--app",
        "mig-celeborn-1",
        "--size",
        "8MiB",
        "--partitions",
        "4",
    ]);
    if let Err(e) = bench {
        panic!("switchyard-bench celeborn: {e}");
    }
    let celeborn_bytes = (8u64 << 20) + 16 * 128;
    uniffle_app(node, "mig-uniffle-1");

    let apps = String::from_utf8(switchyard(&["ctl", "apps", "--admin", &admin]).stdout).unwrap();
    let line = apps
        .lines()
        .find(|l| l.contains("mig-uniffle-1"))
        .unwrap_or_else(|| panic!("{apps}"));
    assert!(line.starts_with("uniffle "), "{line}");
    assert!(line.contains("client 0.10.0"), "{line}");
    // Written 4 x 64 KiB; read back: partition 0's block (from memory).
    assert!(
        line.contains("256.0 KiB") && line.contains("64.0 KiB"),
        "{line}"
    );
    assert!(
        !apps.contains("mig-celeborn-1"),
        "removed apps are not in apps:\n{apps}"
    );

    // The hourly figures come from a sampler that runs every 5 s.
    let deadline = Instant::now() + common::PATIENCE;
    let report = loop {
        let out = switchyard(&["ctl", "migration", "--json", "--admin", &admin]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let pushed: u64 = report["hours"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|h| h["protocols"]["celeborn"]["pushed_bytes"].as_u64())
            .sum();
        if pushed >= celeborn_bytes {
            assert_eq!(pushed, celeborn_bytes, "{report}");
            break report;
        }
        assert!(
            Instant::now() < deadline,
            "hours never counted the push: {report}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let c = row(&report, "mig-celeborn-1");
    assert_eq!(c["protocol"], "celeborn");
    assert_eq!(c["client"], "spark client 0.5.x-0.6.0");
    assert_eq!(c["written_bytes"], celeborn_bytes);
    assert_eq!(c["read_bytes"], celeborn_bytes);
    assert_eq!(c["removed"]["reason"], "unregistered");
    let u = row(&report, "mig-uniffle-1");
    assert_eq!(u["protocol"], "uniffle");
    assert_eq!(u["client"], "client 0.10.0");
    assert_eq!(u["written_bytes"], 4 * 65536);
    assert_eq!(u["read_bytes"], 65536);
    assert!(u["removed"].is_null());
    assert_eq!(report["protocols"]["celeborn"]["applications"], 1);
    assert_eq!(report["protocols"]["celeborn"]["live"], 0);
    assert_eq!(report["protocols"]["uniffle"]["live"], 1);
    assert_eq!(report["protocols"]["uniffle"]["written_bytes"], 4 * 65536);

    // ctl shuffles: the live Uniffle application's one shuffle, 4 partitions
    // of 64 KiB each in memory.
    let shuffles = String::from_utf8(
        switchyard(&["ctl", "shuffles", "mig-uniffle-1", "--admin", &admin]).stdout,
    )
    .unwrap();
    assert!(
        shuffles.starts_with("uniffle/mig-uniffle-1 (uniffle)"),
        "{shuffles}"
    );
    let row = shuffles.lines().nth(2).unwrap_or_default();
    assert!(row.starts_with("0 "), "{shuffles}");
    assert!(
        row.contains(" 4 ") && row.contains("256.0 KiB"),
        "{shuffles}"
    );
    let mut cmd = Command::new(BIN);
    common::clear_switchyard_env(&mut cmd);
    let out = cmd
        .args(["ctl", "shuffles", "nobody", "--admin", &admin])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("404"), "{stderr}");

    let text =
        String::from_utf8(switchyard(&["ctl", "migration", "--admin", &admin]).stdout).unwrap();
    for want in [
        "PROTOCOL",
        "bytes per hour",
        "CELEBORN PUSHED",
        "mig-uniffle-1",
        "live",
        "unregistered",
    ] {
        assert!(text.contains(want), "{want:?} missing in:\n{text}");
    }
}
