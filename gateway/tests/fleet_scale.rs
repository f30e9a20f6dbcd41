//! The small form of `switchyard-bench fleet-scale` (issue 43): three real
//! coordinators on 127.0.6.2-4, 100 simulated workers (fake addresses on
//! 127.0.7.x) and 1,000 simulated applications of both protocols, with
//! bounds generous enough for a loaded 2-core CI machine and a debug
//! build: placement stays fast, a dead worker leaves placement within its
//! timeout, a restarted coordinator places correctly within 30 s, and an
//! unchanging app book costs next to nothing to exchange.

use switchyard_bench::fleet_scale::drivers::Protocol;
use switchyard_bench::fleet_scale::{simulate, FleetScaleArgs};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn args() -> FleetScaleArgs {
    FleetScaleArgs {
        bin: Some(BIN.into()),
        dir: None,
        workers: 100,
        apps: 1_000,
        duration: 30,
        sizes: vec![1_000, 10_000],
        shuffle_rate: Some(5.0),
        shuffle_life: 10,
        app_life: 60,
        app_heartbeat: 5,
        heartbeat: 1,
        worker_timeout: 5,
        warmup: 3,
        idle_secs: 5,
        dead_workers: Some(5),
        json: None,
        report: None,
        plot: Vec::new(),
        svg: None,
    }
}

#[test]
fn a_fleet_of_100_workers_and_1000_apps() {
    let a = args();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let f = runtime.block_on(simulate(&a)).expect("the simulation ran");
    println!("{}", switchyard_bench::fleet_scale::report::table(&f));

    // Every coordinator heard every worker about once per interval.
    for (i, hb) in f.workers_only.heartbeats_per_s.iter().enumerate() {
        assert!(
            (50.0..=150.0).contains(hb),
            "coordinator {}: {hb} heartbeats/s from 100 workers at 1 s",
            i + 1
        );
    }
    for protocol in [Protocol::Celeborn, Protocol::Uniffle] {
        for size in [1_000, 10_000] {
            let p99 = f.p99_ms(protocol, size);
            assert!(
                p99.is_some_and(|ms| ms < 2_000.0),
                "{protocol:?} at {size} partitions: p99 {p99:?} ms"
            );
        }
    }
    assert!(
        f.latency.iter().all(|r| r.failures == 0),
        "placements failed: {:?}",
        f.latency
    );
    let bound = a.worker_timeout as f64 + 10.0;
    for (what, s) in [
        ("Celeborn", f.dead.celeborn_excluded_s),
        ("Uniffle", f.dead.uniffle_excluded_s),
    ] {
        assert!(
            s.is_some_and(|s| s <= bound),
            "{what} placement named a dead worker for {s:?} s"
        );
    }
    assert!(
        f.restart.placing_s <= 30.0,
        "restarted coordinator placed correctly after {} s",
        f.restart.placing_s
    );
    // Round-robin over every worker: no worker gets twice its share.
    assert!(
        f.celeborn_balance < 2.0,
        "Celeborn max/mean {}",
        f.celeborn_balance
    );
    // A full, unchanging book: only empty exchanges (a few hundred bytes a
    // second), where whole books of 500 applications were ~100 KB/s.
    assert!(
        f.quiet.sync_bytes_per_s < 5_000.0,
        "unchanged books cost {} bytes/s",
        f.quiet.sync_bytes_per_s
    );
    assert!(
        f.loaded.sync_bytes_per_s > f.quiet.sync_bytes_per_s,
        "changes travel: {} vs {} bytes/s",
        f.loaded.sync_bytes_per_s,
        f.quiet.sync_bytes_per_s
    );
    for rss in &f.loaded.rss_mib {
        assert!(*rss < 1024.0, "coordinator RSS {rss} MiB");
    }
}
