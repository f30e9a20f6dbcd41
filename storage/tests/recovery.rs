//! Restart recovery: committed partitions come back byte-exact after a
//! graceful shutdown and after kill -9 at random points; nothing
//! uncommitted is served; no file is left that no partition owns.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{append_retry, block, config, read_all, wait_until, with_cold};
use rand::{Rng, SeedableRng};
use switchyard_storage::{PartitionKey, Store, StoreConfig};

fn recovering(mut c: StoreConfig, grace: Duration) -> StoreConfig {
    c.recovery.orphan_grace = grace;
    c
}

/// Every segment file and cold object below `root`; skips the manifest.
fn stored_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.file_name()
                .is_some_and(|n| n == ".switchyard" || n == "meta")
            {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn committed_partitions_come_back_with_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let c = recovering(
        with_cold(config(dir.path(), 2, 64 << 20), dir.path(), 200_000),
        Duration::ZERO,
    );
    let store = Store::open(c.clone()).await.unwrap();
    store.register_app("a");
    store.register_app("b");
    store.set_app_client("a", "test client");
    let sealed = PartitionKey::new("a", 0, 1).with_epoch(2);
    let huge = PartitionKey::new("a", 0, 2);
    let reported = PartitionKey::new("a", 1, 0);
    let finished = PartitionKey::new("b", 0, 0);
    let uncommitted = PartitionKey::new("b", 1, 0);
    let mut id = 0;
    let mut written: HashMap<PartitionKey, Vec<switchyard_storage::Block>> = HashMap::new();
    for key in [&sealed, &huge, &reported, &finished, &uncommitted] {
        for map in 0..4 {
            // The huge partition passes the cold threshold: its later blocks go cold.
            let len = if key == &huge { 90_000 } else { 3_000 };
            let b = block(id, map, len);
            id += 1;
            append_retry(&store, key, vec![b.clone()]).await;
            written.entry(key.clone()).or_default().push(b);
            if key == &huge {
                // Flushed block by block, so that it grows past the threshold.
                store.commit_partitions("a", 0, &[2], vec![]).await.unwrap();
            }
        }
    }
    store.seal(&sealed).await.unwrap();
    store
        .commit_partitions("a", 1, &[0, 5], vec![("report/1".into(), b"ids".to_vec())])
        .await
        .unwrap();
    store.flush_shuffle("b", 0).await.unwrap();
    // Flushed but never committed: on disk, yet not to be served.
    store.flush_shuffle("b", 1).await.unwrap();
    store.remove_shuffle("b", 1).await.unwrap();
    store.register_app("b");
    append_retry(&store, &uncommitted, vec![block(999, 0, 500)]).await;
    assert!(
        store.partition_stats(&huge).unwrap().cold_bytes > 0,
        "a cold segment"
    );
    let mut before = HashMap::new();
    for key in [&sealed, &huge, &reported, &finished] {
        let index = store.read_index(key).await.unwrap();
        let view = store.open_view(key, None, 8_000).await.unwrap();
        before.insert(
            key.clone(),
            (index.index, index.data_len, view.chunk_offsets()),
        );
    }
    store.shutdown().await;
    drop(store);
    // A file no partition owns, as a crash before its first commit leaves
    // one: named like a segment created before this start, beside b/1's.
    let sibling = stored_files(dir.path())
        .into_iter()
        .find(|f| f.to_string_lossy().contains("/b/1/"))
        .expect("b/1 has files");
    let orphan = sibling.with_file_name("7-0-p.1.data");
    std::fs::write(&orphan, b"never committed").unwrap();

    let store = Store::open(c).await.unwrap();
    let status = store.recovery_status();
    assert!(status.enabled);
    // The uncommitted partition too: a graceful stop records everything.
    assert_eq!(status.partitions, 5, "{status:?}");
    assert_eq!(status.apps, 2, "{status:?}");
    assert_eq!(status.notes, 1);
    assert_eq!(status.discarded_partitions, 0);
    assert!(status.manifest_bytes > 0);
    for (key, (index, len, offsets)) in &before {
        let now = store.read_index(key).await.unwrap();
        assert_eq!(&now.index, index, "index of {key}");
        assert_eq!(now.data_len, *len);
        let view = store.open_view(key, None, 8_000).await.unwrap();
        assert_eq!(&view.chunk_offsets(), offsets, "chunk offsets of {key}");
        common::assert_same(&read_all(&store, key).await, &written[key]);
    }
    assert!(
        store.is_sealed(&sealed).unwrap(),
        "a sealed partition stays sealed"
    );
    assert!(!store.is_sealed(&reported).unwrap());
    // Appends to a recovered, unsealed partition go on after its blocks.
    let extra = block(5000, 9, 700);
    append_retry(&store, &reported, vec![extra.clone()]).await;
    store.commit_partitions("a", 1, &[0], vec![]).await.unwrap();
    let mut with_extra = written[&reported].clone();
    with_extra.push(extra);
    common::assert_same(&read_all(&store, &reported).await, &with_extra);
    // A partition never committed, recorded at the graceful stop, is served
    // (a Celeborn commit or Uniffle report after the restart finds it); only
    // what its shuffle held before the removal is gone.
    common::assert_same(&read_all(&store, &uncommitted).await, &[block(999, 0, 500)]);
    let notes = store.take_recovered_notes(switchyard_ident::FrontEnd::Uniffle);
    assert!(notes.is_empty(), "notes are taken per namespace: {notes:?}");
    let history = store.app_history();
    let a = history.iter().find(|r| r.id == "a").unwrap();
    assert_eq!(a.client.as_deref(), Some("test client"));
    // The sweep removes the unowned file and keeps the recorded ones.
    wait_until("sweep", || store.recovery_status().swept).await;
    let status = store.recovery_status();
    assert_eq!(status.orphan_files, 1, "{status:?}");
    assert!(!orphan.exists(), "{} left behind", orphan.display());
    assert!(sibling.exists(), "{} was swept", sibling.display());
    common::assert_same(&read_all(&store, &uncommitted).await, &[block(999, 0, 500)]);
    store.shutdown().await;
}

#[tokio::test]
async fn recovered_apps_expire_without_heartbeats_and_their_files_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = recovering(config(dir.path(), 1, 64 << 20), Duration::from_secs(3600));
    c.apps.expiry_check_interval = Duration::from_millis(50);
    // The default place: inside the first data dir, beside the app dirs.
    c.recovery.path = None;
    let store = Store::open(c.clone()).await.unwrap();
    store.register_app_leased("gone", Duration::from_millis(300));
    let key = PartitionKey::new("gone", 0, 0);
    append_retry(&store, &key, vec![block(1, 0, 1000)]).await;
    store.seal(&key).await.unwrap();
    store.shutdown().await;
    drop(store);
    let store = Store::open(c.clone()).await.unwrap();
    assert_eq!(store.recovery_status().partitions, 1);
    assert!(dir.path().join("disk0/.switchyard/manifest.redb").exists());
    assert!(store.has_app("gone"));
    wait_until("expiry", || !store.has_app("gone")).await;
    store.shutdown().await;
    drop(store);
    let store = Store::open(c).await.unwrap();
    assert_eq!(
        store.recovery_status().partitions,
        0,
        "removed from the manifest too"
    );
    assert!(stored_files(&dir.path().join("disk0")).is_empty());
    store.shutdown().await;
}

#[tokio::test]
async fn with_recovery_off_a_restart_starts_empty_and_sweeps() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = recovering(config(dir.path(), 1, 64 << 20), Duration::ZERO);
    c.recovery.enabled = false;
    let store = Store::open(c.clone()).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    append_retry(&store, &key, vec![block(1, 0, 1000)]).await;
    store.seal(&key).await.unwrap();
    store.shutdown().await;
    drop(store);
    assert_eq!(stored_files(&dir.path().join("disk0")).len(), 2);
    let store = Store::open(c).await.unwrap();
    assert!(!store.recovery_status().enabled);
    assert!(!store.has_app("a"));
    wait_until("sweep", || store.recovery_status().swept).await;
    assert_eq!(store.recovery_status().orphan_files, 2);
    assert!(stored_files(&dir.path().join("disk0")).is_empty());
    store.shutdown().await;
}

// ---- kill -9 at random points -------------------------------------------

const CHILD_DIR: &str = "SWITCHYARD_RECOVERY_CHILD_DIR";
const CHILD_SEED: &str = "SWITCHYARD_RECOVERY_CHILD_SEED";

fn crash_config(root: &Path, grace: Duration) -> StoreConfig {
    // Small memory: spills write uncommitted segments all the time.
    let mut c = recovering(with_cold(config(root, 2, 2 << 20), root, 400_000), grace);
    c.memory.single_buffer_threshold = bytesize::ByteSize::kib(64);
    c
}

/// The child side: a random workload that prints each step it finished,
/// until it is killed. Does nothing when run as an ordinary test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_child() {
    let Ok(root) = std::env::var(CHILD_DIR) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED).unwrap().parse().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let store = Store::open(crash_config(Path::new(&root), Duration::from_secs(3600)))
        .await
        .unwrap();
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        // A marker: libtest prints "test crash_child ... " before the first line.
        writeln!(o, "@@{line}").unwrap();
        o.flush().unwrap();
    };
    for a in ["a0", "a1"] {
        store.register_app(a);
    }
    let mut sealed: HashSet<(String, i32, i32)> = HashSet::new();
    let mut removed: HashSet<(String, i32)> = HashSet::new();
    let mut next_id = 0i64;
    loop {
        let app = ["a0", "a1"][rng.random_range(0..2)].to_string();
        let shuffle = rng.random_range(0..8);
        if removed.contains(&(app.clone(), shuffle)) {
            continue;
        }
        let part = rng.random_range(0..16);
        let k = format!("{app} {shuffle} {part}");
        let key = PartitionKey::new(app.as_str(), shuffle, part);
        match rng.random_range(0..100) {
            0..80 => {
                if sealed.contains(&(app.clone(), shuffle, part)) {
                    continue;
                }
                let len = rng.random_range(1..60_000);
                append_retry(&store, &key, vec![block(next_id, part as i64, len)]).await;
                say(format!("A {k} {next_id} {len}"));
                next_id += 1;
            }
            80..85 => {
                say(format!("S {k}"));
                store.seal(&key).await.unwrap();
                sealed.insert((app.clone(), shuffle, part));
                say(format!("C {k}"));
            }
            85..93 => {
                // A Uniffle-style report: several partitions, not sealed.
                let parts: Vec<i32> = (0..16)
                    .filter(|p| !sealed.contains(&(app.clone(), shuffle, *p)))
                    .filter(|_| rng.random_bool(0.5))
                    .collect();
                for p in &parts {
                    say(format!("S {app} {shuffle} {p}"));
                }
                store
                    .commit_partitions(&app, shuffle, &parts, vec![(format!("n{next_id}"), vec![])])
                    .await
                    .unwrap();
                for p in &parts {
                    say(format!("C {app} {shuffle} {p}"));
                }
            }
            // Removals leave at least two shuffles to write to.
            _ if removed.len() < 12 => {
                say(format!("X {app} {shuffle}"));
                store.remove_shuffle(&app, shuffle).await.unwrap();
                removed.insert((app.clone(), shuffle));
                say(format!("R {app} {shuffle}"));
            }
            _ => {}
        }
    }
}

/// What the parent knows of one partition from the child's lines.
#[derive(Default, Debug)]
struct Known {
    /// (block id, len) in append order.
    blocks: Vec<(i64, usize)>,
    /// Block counts at each commit started, and at the last one finished.
    started: Vec<usize>,
    acked: Option<usize>,
}

fn run_child(root: &Path, seed: u64, kill_after_lines: usize) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, root)
        .env(CHILD_SEED, seed.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut lines = Vec::new();
    let mut line = String::new();
    while lines.len() < kill_after_lines {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("child ended after {} lines", lines.len());
        }
        if let Some((_, l)) = line.split_once("@@") {
            lines.push(l.trim_end().to_string());
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Lines written before the kill are still in the pipe.
    for l in reader.lines().map_while(|l| l.ok()) {
        if let Some((_, l)) = l.split_once("@@") {
            lines.push(l.to_string());
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_loses_no_committed_block() {
    if std::env::var(CHILD_DIR).is_ok() {
        return;
    }
    let rounds: u64 = std::env::var("SWITCHYARD_RECOVERY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let mut orphans = 0;
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let seed = 1000 + round;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let kill_after = rng.random_range(40..2000);
        let lines = run_child(dir.path(), seed, kill_after);
        let mut known: BTreeMap<PartitionKey, Known> = BTreeMap::new();
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            let key =
                |f: &[&str]| PartitionKey::new(f[1], f[2].parse().unwrap(), f[3].parse().unwrap());
            match f[0] {
                "A" => known
                    .entry(key(&f))
                    .or_default()
                    .blocks
                    .push((f[4].parse().unwrap(), f[5].parse().unwrap())),
                "S" => {
                    let k = known.entry(key(&f)).or_default();
                    let n = k.blocks.len();
                    k.started.push(n);
                }
                "C" => {
                    let k = known.entry(key(&f)).or_default();
                    k.acked = Some(k.blocks.len());
                }
                "X" => {
                    // Removed (or being removed): whatever comes back of it
                    // must still be a committed state, so keep the records;
                    // after R nothing may come back.
                }
                "R" => {
                    let (app, shuffle) = (f[1], f[2].parse::<i32>().unwrap());
                    for (k, v) in known.iter_mut() {
                        if &*k.app == app && k.shuffle == shuffle {
                            *v = Known::default();
                        }
                    }
                }
                _ => {}
            }
        }

        let store = Store::open(crash_config(dir.path(), Duration::ZERO))
            .await
            .unwrap();
        let status = store.recovery_status();
        assert_eq!(status.discarded_partitions, 0, "round {round}: {status:?}");
        let mut recovered = 0;
        for (key, k) in &known {
            let index = match store.read_index(key).await {
                Ok(i) => i,
                Err(switchyard_storage::StorageError::UnknownApp(_)) => Default::default(),
                Err(e) => panic!("round {round}: {key}: {e}"),
            };
            let records = index.records();
            let n = records.len();
            if n > 0 {
                recovered += 1;
            }
            if let Some(acked) = k.acked {
                assert!(
                    n >= acked,
                    "round {round}: {key} has {n} blocks, {acked} committed"
                );
            }
            assert!(
                n == 0 || k.started.contains(&n),
                "round {round}: {key} came back with {n} blocks, no commit had that many ({:?})",
                k.started
            );
            if n == 0 {
                continue;
            }
            let read = read_all(&store, key).await;
            let expected: Vec<_> = k.blocks[..n]
                .iter()
                .map(|&(id, len)| block(id, key.partition as i64, len))
                .collect();
            common::assert_same(&read, &expected);
            let order: Vec<i64> = records.iter().map(|r| r.block_id).collect();
            let want: Vec<i64> = k.blocks[..n].iter().map(|b| b.0).collect();
            assert_eq!(order, want, "round {round}: {key} block order");
        }
        assert_eq!(status.partitions, recovered, "round {round}: {status:?}");
        // Nothing but recovered partitions' files is left after the sweep.
        wait_until("sweep", || store.recovery_status().swept).await;
        let live: HashSet<String> = known
            .iter()
            .filter(|(k, _)| {
                store
                    .partition_stats(k)
                    .map(|s| s.disk_bytes + s.cold_bytes > 0)
                    .unwrap_or(false)
            })
            .map(|(k, _)| format!("/{}/{}/{}-{}-p.", k.app, k.shuffle, k.partition, k.epoch))
            .collect();
        for f in stored_files(dir.path()) {
            let s = f.to_string_lossy().into_owned();
            assert!(
                live.iter().any(|l| s.contains(l)),
                "round {round}: {s} is owned by no recovered partition"
            );
        }
        orphans += store.recovery_status().orphan_files;
        eprintln!(
            "round {round}: killed after {} lines; {} partitions recovered ({} bytes), {} orphan files removed",
            lines.len(),
            status.partitions,
            status.bytes,
            store.recovery_status().orphan_files
        );
        store.shutdown().await;
    }
    assert!(orphans > 0, "uncommitted spills left files for the sweep");
}
