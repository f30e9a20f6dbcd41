//! One owner of an application's life: removal events, dead shuffles after an
//! expiry, per-application leases, and waits woken by the event they wait for.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use switchyard_storage::fault::DiskFaults;
use switchyard_storage::{
    AppListener, AppRemoved, PartitionKey, RemovalReason, StorageError, Store,
};

#[derive(Default)]
struct Recorder(Mutex<Vec<(String, RemovalReason, Vec<i32>)>>);

impl AppListener for Recorder {
    fn app_removed(&self, e: &AppRemoved) {
        self.0
            .lock()
            .unwrap()
            .push((e.app.to_string(), e.reason, e.shuffles.clone()));
    }
}

fn files_under(dir: &std::path::Path) -> usize {
    walk(dir).len()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn an_expired_apps_shuffles_stay_dead_after_it_registers_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.apps.expiry = Duration::from_millis(200);
    c.apps.expiry_check_interval = Duration::from_millis(50);
    let store = Store::open(c).await.unwrap();
    let recorder = Arc::new(Recorder::default());
    let listener: Arc<dyn AppListener> = recorder.clone();
    store.subscribe(Arc::downgrade(&listener));

    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    store
        .append(&key, vec![block(1, 0, 1000)], None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    assert!(files_under(&dir.path().join("disk0")) > 0);

    // The expiry runs in the background: the application leaves the store
    // first, then listeners hear of it, then its files go (the contract of
    // `remove_app_because`: memory at once, files before the removal ends).
    // Wait for the last of these, not for the first.
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.has_app("a") || files_under(&dir.path().join("disk0")) > 0 {
        assert!(
            Instant::now() < deadline,
            "never expired, or its files stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *recorder.0.lock().unwrap(),
        vec![("a".to_string(), RemovalReason::Expired, vec![0])],
        "listeners hear the expiry once, with the shuffles that died"
    );
    assert_eq!(files_under(&dir.path().join("disk0")), 0, "files removed");

    // One heartbeat-like registration later, the old shuffle is still dead:
    // neither appends nor reads pretend it is a fresh, empty one. (A lease
    // long enough that a slow machine does not expire it again mid-test.)
    store.register_app_leased("a", Duration::from_secs(60));
    let err = store
        .append(&key, vec![block(2, 0, 100)], None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StorageError::ShuffleRemoved { shuffle: 0, .. }),
        "{err}"
    );
    assert!(matches!(
        store.read_index(&key).await,
        Err(StorageError::ShuffleRemoved { .. })
    ));
    assert!(matches!(
        store.read_memory(&key, None, 100, &|_| true),
        Err(StorageError::ShuffleRemoved { .. })
    ));
    assert!(matches!(
        store.open_view(&key, None, 1 << 20).await,
        Err(StorageError::ShuffleRemoved { .. })
    ));
    assert!(store.check_shuffle_alive("a", 0).is_err());
    // A new shuffle of the same application works.
    let fresh = PartitionKey::new("a", 1, 0);
    store
        .append(&fresh, vec![block(3, 0, 100)], None)
        .await
        .unwrap();
    assert!(store.check_shuffle_alive("a", 1).is_ok());
    assert_eq!(store.status().operations.apps_expired, 1);
    assert_eq!(store.status().operations.removed_apps_remembered, 1);
}

#[tokio::test]
async fn explicit_removal_is_an_event_too_and_tombstones_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.apps.expiry_check_interval = Duration::from_millis(50);
    c.apps.tombstone_retention = Duration::from_millis(300);
    let store = Store::open(c).await.unwrap();
    let recorder = Arc::new(Recorder::default());
    let listener: Arc<dyn AppListener> = recorder.clone();
    store.subscribe(Arc::downgrade(&listener));
    store.register_app("b");
    store
        .append(&PartitionKey::new("b", 7, 0), vec![block(1, 0, 10)], None)
        .await
        .unwrap();
    store.remove_app("b").await.unwrap();
    assert_eq!(
        *recorder.0.lock().unwrap(),
        vec![("b".to_string(), RemovalReason::Unregistered, vec![7])]
    );
    assert!(store.check_shuffle_alive("b", 7).is_err());
    // Removing an unknown application says nothing.
    store.remove_app("never").await.unwrap();
    assert_eq!(recorder.0.lock().unwrap().len(), 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.check_shuffle_alive("b", 7).is_err() {
        assert!(Instant::now() < deadline, "tombstone never pruned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_application_keeps_its_own_lease() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.apps.expiry = Duration::from_millis(150);
    c.apps.expiry_check_interval = Duration::from_millis(25);
    let store = Store::open(c).await.unwrap();
    store.register_app("short");
    store.register_app_leased("long", Duration::from_secs(30));
    // Bounded well inside the long lease, so the check below still means
    // "the long lease outlived the short one".
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.has_app("short") {
        assert!(Instant::now() < deadline, "the default lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.has_app("long"), "a longer lease outlives the default");
}

#[tokio::test]
async fn a_waiting_append_is_woken_by_the_release_itself() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 64 << 10)).await.unwrap();
    store.register_app("w");
    let key = PartitionKey::new("w", 0, 0);
    // Hold the whole budget, so the append cannot go through.
    let hold = store.reserve(64 << 10).unwrap();

    // Without a release it gives up at its deadline with "no buffer".
    let started = Instant::now();
    let err = store
        .append_waiting(&key, vec![block(1, 0, 1000)], Duration::from_millis(150))
        .await
        .unwrap_err();
    assert!(err.is_backpressure(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(store.status().operations.memory_wait_timeouts, 1);
    let refused = store.status().operations.no_buffer_replies;

    let woken = Arc::new(AtomicUsize::new(0));
    let waiter = {
        let store = store.clone();
        let key = key.clone();
        let woken = woken.clone();
        tokio::spawn(async move {
            let r = store
                .append_waiting(&key, vec![block(2, 0, 1000)], Duration::from_secs(30))
                .await;
            woken.fetch_add(1, Ordering::SeqCst);
            r
        })
    };
    // It waits once its append was refused (on a slow machine the task may
    // start late: releasing before that would test nothing).
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.status().operations.no_buffer_replies == refused {
        assert!(Instant::now() < deadline, "the waiting append never tried");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        woken.load(Ordering::SeqCst),
        0,
        "waits while memory is full"
    );
    let released = Instant::now();
    drop(hold);
    waiter.await.unwrap().unwrap();
    let latency = released.elapsed();
    assert!(
        latency < Duration::from_secs(2),
        "woken {latency:?} after the release"
    );
    assert_eq!(store.status().operations.memory_waits, 1);
    let read = store.read_memory(&key, None, u64::MAX, &|_| true).unwrap();
    assert_eq!(
        read.blocks.len(),
        1,
        "the waited-for block was appended once"
    );
}

/// Every disk write fails while `broken` is set.
struct Breakable(std::sync::atomic::AtomicBool);

impl DiskFaults for Breakable {
    fn before_write(&self, _: &std::path::Path, _: u64) -> Option<std::io::Error> {
        self.0
            .load(Ordering::SeqCst)
            .then(|| std::io::Error::other("injected: device gone"))
    }
}

#[tokio::test]
async fn a_flush_with_nowhere_to_write_resumes_when_a_disk_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.disks.error_cooldown = Duration::from_millis(100);
    c.disks.health_check_interval = Duration::from_millis(50);
    let faults = Arc::new(Breakable(true.into()));
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("f");
    let key = PartitionKey::new("f", 0, 0);
    let blocks = vec![block(1, 0, 4096), block(2, 1, 100)];
    store.append(&key, blocks.clone(), None).await.unwrap();
    let flush = {
        let store = store.clone();
        tokio::spawn(async move { store.flush_shuffle("f", 0).await })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.status().operations.spill_failures == 0 {
        assert!(Instant::now() < deadline, "the flush never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !flush.is_finished(),
        "the only disk is faulted: the flush waits"
    );
    assert!(store.status().operations.spill_failures >= 1);
    // The waiting flush is not retrying in a loop: probes fail, writes wait.
    let failures = store.status().operations.spill_failures;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.status().operations.spill_failures, failures);

    faults.0.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(5), flush)
        .await
        .expect("the flush resumed once the disk's probe succeeded")
        .unwrap()
        .unwrap();
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(store.budget().used(), 0);
}

#[tokio::test]
async fn a_flush_waiting_for_a_tier_stops_when_its_shuffle_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    // Full from the start (no disk can keep this much free), and never
    // checked again during the test.
    c.disks.min_free = bytesize::ByteSize::b(u64::MAX / 2);
    c.disks.health_check_interval = Duration::from_secs(3600);
    let store = Store::open(c).await.unwrap();
    assert!(!store.is_ready());
    store.register_app("f");
    store
        .append(&PartitionKey::new("f", 0, 0), vec![block(1, 0, 4096)], None)
        .await
        .unwrap();
    let flush = {
        let store = store.clone();
        tokio::spawn(async move { store.flush_shuffle("f", 0).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!flush.is_finished(), "no tier: the flush waits");
    tokio::time::timeout(Duration::from_secs(5), store.remove_shuffle("f", 0))
        .await
        .expect("removal does not wait for a disk to come back")
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), flush)
        .await
        .expect("the waiting flush noticed the removal")
        .unwrap();
    assert!(
        matches!(result, Err(StorageError::ShuffleRemoved { .. })),
        "{result:?}"
    );
    assert_eq!(store.budget().used(), 0);
}

/// Ids that differ only in characters a path cannot hold as they are get
/// directories and cold prefixes of their own: removing one application
/// leaves every block of the others readable, on disk and cold.
#[tokio::test]
async fn removing_an_app_never_touches_one_whose_id_differs_only_in_escaped_characters() {
    let dir = tempfile::tempdir().unwrap();
    // The second flush of each partition goes cold (past 2000 bytes).
    let c = with_cold(config(dir.path(), 2, 1 << 20), dir.path(), 2_000);
    let store = Store::open(c).await.unwrap();
    let apps = ["a b", "a/b", "a_b", "a\\b", "a_5Fb"];
    let mut written = Vec::new();
    for (n, app) in apps.iter().enumerate() {
        store.register_app(app);
        let key = PartitionKey::new(*app, 0, 0);
        let blocks: Vec<_> = (0..6).map(|i| block(n as i64 * 100 + i, 0, 1000)).collect();
        for half in blocks.chunks(3) {
            store.append(&key, half.to_vec(), None).await.unwrap();
            store.flush_shuffle(app, 0).await.unwrap();
        }
        let stats = store.partition_stats(&key).unwrap();
        assert_eq!(
            (stats.disk_bytes, stats.cold_bytes),
            (3_000, 3_000),
            "{app}"
        );
        written.push((key, blocks));
    }
    let objects: Vec<_> = {
        let mut v = Vec::new();
        for app in &apps {
            v.push(store.cold_objects(app).await.unwrap());
        }
        v
    };
    for (app, objs) in apps.iter().zip(&objects) {
        assert_eq!(objs.len(), 2, "{app}: one cold data and index object");
    }
    store.remove_app("a_b").await.unwrap();
    assert!(store.cold_objects("a_b").await.unwrap().is_empty());
    for (n, (key, blocks)) in written.iter().enumerate() {
        if &*key.app == "a_b" {
            continue;
        }
        assert_same(&read_all(&store, key).await, blocks);
        assert_eq!(
            store.cold_objects(apps[n]).await.unwrap(),
            objects[n],
            "{} kept its cold objects",
            apps[n]
        );
    }
    // Files of the other four stay: two per app on disk (data and index).
    let disk_files =
        files_under(&dir.path().join("disk0")) + files_under(&dir.path().join("disk1"));
    assert_eq!(disk_files, 4 * 2);
}

/// The history of a removed application: its peak memory (counted where
/// blocks enter and leave memory, so a flush lowers what it holds, not its
/// peak) and how it ended, in its protocol's words: a lease registered as
/// lapsing into `Lost` ends lost, the default one expired.
#[tokio::test]
async fn removed_apps_keep_their_peak_memory_and_how_they_ended() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.apps.expiry = Duration::from_millis(300);
    c.apps.expiry_check_interval = Duration::from_millis(50);
    let store = Store::open(c).await.unwrap();
    store.register_app_lapsing("lost", Duration::from_millis(300), RemovalReason::Lost);
    store.register_app("expired");
    store.register_app("gone");
    for app in ["lost", "expired", "gone"] {
        let key = PartitionKey::new(app, 0, 0);
        store
            .append(&key, vec![block(1, 0, 1000), block(2, 0, 500)], None)
            .await
            .unwrap();
    }
    // Flushed, "gone" holds nothing in memory, but its peak stays.
    store.flush_shuffle("gone", 0).await.unwrap();
    let key = PartitionKey::new("gone", 0, 0);
    store
        .append(&key, vec![block(3, 0, 100)], None)
        .await
        .unwrap();
    store.remove_app("gone").await.unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    while store.has_app("lost") || store.has_app("expired") {
        assert!(Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let history = store.app_history();
    let ended = |id: &str| {
        let r = history.iter().find(|r| r.id == id).unwrap();
        (
            r.removed.as_ref().unwrap().reason,
            r.peak_memory_bytes,
            r.written_bytes,
        )
    };
    assert_eq!(ended("lost"), ("lost", 1500, 1500));
    assert_eq!(ended("expired"), ("expired", 1500, 1500));
    assert_eq!(ended("gone"), ("unregistered", 1500, 1600));
}
