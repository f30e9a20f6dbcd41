//! Failure injection: no acknowledged block is lost when disks fail or fill.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytesize::ByteSize;
use common::*;
use switchyard_storage::fault::{DiskFaults, DiskOp};
use switchyard_storage::{DiskHealth, PartitionKey, StorageError, Store};

/// Fails writes on one directory: the next `count` writes, or all while `always`.
struct FailingDisk {
    dir: PathBuf,
    count: AtomicU64,
    always: AtomicBool,
    kind: io::ErrorKind,
    failed: AtomicU64,
}

impl FailingDisk {
    fn new(dir: PathBuf, count: u64, always: bool, kind: io::ErrorKind) -> Arc<Self> {
        Arc::new(FailingDisk {
            dir,
            count: AtomicU64::new(count),
            always: AtomicBool::new(always),
            kind,
            failed: AtomicU64::new(0),
        })
    }
}

impl DiskFaults for FailingDisk {
    fn before_write(&self, dir: &Path, _bytes: u64) -> Option<io::Error> {
        if !dir.starts_with(&self.dir) {
            return None;
        }
        let fail = self.always.load(Ordering::SeqCst)
            || self
                .count
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
                .is_ok();
        if fail {
            self.failed.fetch_add(1, Ordering::SeqCst);
            Some(io::Error::new(self.kind, "injected fault"))
        } else {
            None
        }
    }
}

fn disk_health(store: &Store, i: usize) -> DiskHealth {
    store.status().disks[i].health
}

#[tokio::test]
async fn write_error_mid_flush_moves_blocks_to_another_disk() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FailingDisk::new(dir.path().join("disk0"), 3, false, io::ErrorKind::Other);
    let mut c = config(dir.path(), 2, 1 << 20);
    c.disks.error_cooldown = Duration::from_secs(3600);
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("a");
    let mut written = Vec::new();
    for p in 0..8 {
        let key = PartitionKey::new("a", 0, p);
        let blocks: Vec<_> = (0..20)
            .map(|i| block(p as i64 * 100 + i, i % 4, 1000 + i as usize))
            .collect();
        store.append(&key, blocks.clone(), None).await.unwrap();
        written.push((key, blocks));
    }
    store.flush_shuffle("a", 0).await.unwrap();
    assert!(
        faults.failed.load(Ordering::SeqCst) >= 1,
        "some partition was placed on disk0"
    );
    assert_eq!(disk_health(&store, 0), DiskHealth::Faulted);
    assert_eq!(disk_health(&store, 1), DiskHealth::Healthy);
    for (key, blocks) in &written {
        assert_same(&read_all(&store, key).await, blocks);
        assert_eq!(store.partition_stats(key).unwrap().memory_bytes, 0);
    }
    assert!(store.status().operations.spill_failures >= 1);
    assert_eq!(store.budget().used(), 0);
}

#[tokio::test]
async fn failure_after_earlier_flushes_keeps_both_segments_readable() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FailingDisk::new(dir.path().join("disk0"), 0, false, io::ErrorKind::Other);
    let c = config(dir.path(), 2, 1 << 20);
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("a");
    // Find a partition placed on disk0 by flushing one batch first.
    let mut key = None;
    for p in 0..32 {
        let k = PartitionKey::new("a", 0, p);
        store
            .append(&k, vec![block(p as i64, 0, 500)], None)
            .await
            .unwrap();
        store.flush_shuffle("a", 0).await.unwrap();
        if walk_has(&dir.path().join("disk0"), &format!("{p}-0-p.")) {
            key = Some(k);
            break;
        }
    }
    let key = key.expect("some partition lands on disk0");
    let first = read_all(&store, &key).await;
    // Now disk0 fails; the next flush of the same partition must go elsewhere.
    faults.count.store(1, Ordering::SeqCst);
    let more: Vec<_> = (1000..1010).map(|i| block(i, 1, 700)).collect();
    store.append(&key, more.clone(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    let mut expected = first.clone();
    expected.extend(more);
    let got = read_all(&store, &key).await;
    assert_same(&got, &expected);
    // Logical order is kept across the two segments.
    assert_eq!(got[0].meta.block_id, first[0].meta.block_id);
    assert!(store.partition_stats(&key).unwrap().disk_bytes == 500 + 7000);
}

#[tokio::test]
async fn faulted_disk_recovers_after_a_successful_probe() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FailingDisk::new(dir.path().join("disk0"), 0, true, io::ErrorKind::Other);
    let c = config(dir.path(), 1, 1 << 20);
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 300)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();
    let flush = {
        let store = store.clone();
        tokio::spawn(async move { store.flush_shuffle("a", 0).await })
    };
    wait_until("disk faulted", || {
        disk_health(&store, 0) == DiskHealth::Faulted
    })
    .await;
    // The only disk is down and there is no cold tier: blocks wait in memory,
    // still readable.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(store.partition_stats(&key).unwrap().memory_bytes, 3000);
    // The device comes back: the probe re-enables it and the flush completes.
    faults.always.store(false, Ordering::SeqCst);
    flush.await.unwrap().unwrap();
    assert_eq!(disk_health(&store, 0), DiskHealth::Healthy);
    assert_eq!(store.partition_stats(&key).unwrap().disk_bytes, 3000);
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(store.budget().used(), 0);
}

#[tokio::test]
async fn enospc_on_every_disk_pushes_back_without_losing_acknowledged_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FailingDisk::new(
        dir.path().to_path_buf(),
        0,
        true,
        io::ErrorKind::StorageFull,
    );
    let mut c = config(dir.path(), 2, 50_000);
    c.memory.single_buffer_threshold = bytesize::ByteSize::b(5_000);
    // The whole budget, first come first served: a lone application's fair
    // share would keep a fifth of it for others (tests/shares.rs).
    c.memory.fair_share_from = 1.0;
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0..200 {
        let b = block(i, 0, 968);
        match store.append(&key, vec![b.clone()], None).await {
            Ok(()) => acked.push(b),
            Err(e) if e.is_backpressure() => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "a full budget refuses new blocks");
    assert_eq!(acked.len(), 50, "the budget holds 50 blocks of 1000 bytes");
    assert_same(&read_all(&store, &key).await, &acked);
    faults.always.store(false, Ordering::SeqCst);
    wait_until("flushed after recovery", || store.budget().used() == 0).await;
    assert_same(&read_all(&store, &key).await, &acked);
}

#[tokio::test]
async fn full_disks_send_spills_to_the_cold_tier() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = with_cold(config(dir.path(), 2, 1 << 20), dir.path(), 1 << 40);
    // No filesystem has this much free: both disks start Full.
    c.disks.min_free = ByteSize::b(u64::MAX);
    let store = Store::open(c).await.unwrap();
    assert!(store
        .status()
        .disks
        .iter()
        .all(|d| d.health == DiskHealth::Full));
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 1000)).collect();
    store
        .append(&key, blocks[..5].to_vec(), None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    store
        .append(&key, blocks[5..].to_vec(), None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (0, 10_000));
    assert_same(&read_all(&store, &key).await, &blocks);
    let objects = store.cold_objects("a").await.unwrap();
    assert_eq!(
        objects.len(),
        4,
        "two flushes, data + index each: {objects:?}"
    );
    store.remove_app("a").await.unwrap();
    assert!(walk_files(&dir.path().join("cold")).is_empty());
}

#[tokio::test]
async fn a_disk_at_its_capacity_sends_spills_cold_until_data_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = with_cold(config(dir.path(), 1, 1 << 20), dir.path(), 1 << 40);
    c.disks.capacity = Some(ByteSize::b(4_000));
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    store.register_app("b");
    let (ka, kb) = (PartitionKey::new("a", 0, 0), PartitionKey::new("b", 0, 0));
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 1000)).collect();
    // The first flush may run past capacity (it was under when placed)...
    store.append(&ka, blocks[..5].to_vec(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    assert_eq!(store.status().disks[0].health, DiskHealth::Full);
    // ...the next goes to the cold tier.
    store.append(&ka, blocks[5..].to_vec(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    let stats = store.partition_stats(&ka).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (5_000, 5_000));
    assert_same(&read_all(&store, &ka).await, &blocks);
    // Removing the app frees the disk; the health check lets it write again.
    store.remove_app("a").await.unwrap();
    wait_until("disk healthy after removal", || {
        store.status().disks[0].health == DiskHealth::Healthy
    })
    .await;
    store.append(&kb, blocks[..2].to_vec(), None).await.unwrap();
    store.flush_shuffle("b", 0).await.unwrap();
    let stats = store.partition_stats(&kb).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (2_000, 0));
}

#[tokio::test]
async fn huge_partitions_continue_in_the_cold_tier() {
    let dir = tempfile::tempdir().unwrap();
    let c = with_cold(config(dir.path(), 1, 1 << 20), dir.path(), 5_000);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..12).map(|i| block(i, 0, 1000)).collect();
    for chunk in blocks.chunks(3) {
        store.append(&key, chunk.to_vec(), None).await.unwrap();
        store.flush_shuffle("a", 0).await.unwrap();
    }
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!(
        stats.disk_bytes, 6000,
        "first flushes go to disk until 5000 bytes"
    );
    assert_eq!(stats.cold_bytes, 6000);
    let got = read_all(&store, &key).await;
    assert_same(&got, &blocks);
    let ids: Vec<i64> = got.iter().map(|b| b.meta.block_id).collect();
    assert_eq!(ids, (0..12).collect::<Vec<_>>(), "order across tiers");
    // A read spanning the disk/cold boundary.
    let span = store.read_data(&key, 5500, 1000).await.unwrap();
    let expected: Vec<u8> = blocks.iter().flat_map(|b| b.data.to_vec()).collect();
    assert_eq!(&span[..], &expected[5500..6500]);
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .flatten()
        .flat_map(|e| {
            let p = e.path();
            if p.is_dir() {
                walk_files(&p)
            } else {
                vec![p]
            }
        })
        .collect()
}

fn walk_has(dir: &Path, prefix: &str) -> bool {
    walk_files(dir).iter().any(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(prefix))
    })
}

/// Hangs every call of one kind on one directory, as a device in D state
/// does, until released. Released on drop too, so a failing test does not
/// leave threads blocked (the runtime waits for them at exit).
struct HangingDisk {
    dir: PathBuf,
    op: DiskOp,
    armed: AtomicBool,
    /// Calls blocked right now.
    blocked: AtomicU64,
    released: Mutex<bool>,
    wake: Condvar,
}

impl HangingDisk {
    fn new(dir: PathBuf, op: DiskOp) -> Arc<Self> {
        Arc::new(HangingDisk {
            dir,
            op,
            armed: AtomicBool::new(false),
            blocked: AtomicU64::new(0),
            released: Mutex::new(false),
            wake: Condvar::new(),
        })
    }

    fn release(&self) {
        self.armed.store(false, Ordering::SeqCst);
        *self.released.lock().unwrap() = true;
        self.wake.notify_all();
    }
}

/// Releases the hang when the test ends, passed or failed.
struct ReleaseOnDrop(Arc<HangingDisk>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl DiskFaults for HangingDisk {
    fn before_write(&self, _dir: &Path, _bytes: u64) -> Option<io::Error> {
        None
    }

    fn on_io_thread(&self, dir: &Path, op: DiskOp) {
        if op != self.op || !dir.starts_with(&self.dir) || !self.armed.load(Ordering::SeqCst) {
            return;
        }
        self.blocked.fetch_add(1, Ordering::SeqCst);
        let mut released = self.released.lock().unwrap();
        while !*released {
            released = self.wake.wait(released).unwrap();
        }
        self.blocked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bounds a step of a fault test: the fault must not make it wait forever.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 20 s"))
}

// A current-thread runtime (the default): if a hung write blocked a runtime
// thread, nothing below could make progress at all.
#[tokio::test]
async fn a_hung_disk_write_marks_the_disk_hung_and_the_flush_goes_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let hang = HangingDisk::new(dir.path().join("disk0"), DiskOp::Write);
    let _release = ReleaseOnDrop(hang.clone());
    let mut c = config(dir.path(), 2, 1 << 20);
    c.disks.io_timeout = Duration::from_secs(1);
    let store = Store::open_with_faults(c, Some(hang.clone()))
        .await
        .unwrap();
    store.register_app("a");
    store.register_app("b");
    hang.armed.store(true, Ordering::SeqCst);
    let mut written = Vec::new();
    for p in 0..8 {
        let key = PartitionKey::new("a", 0, p);
        let blocks: Vec<_> = (0..10)
            .map(|i| block(p as i64 * 100 + i, i % 3, 500 + i as usize))
            .collect();
        store.append(&key, blocks.clone(), None).await.unwrap();
        written.push((key, blocks));
    }
    within("flush past a hung disk", store.flush_shuffle("a", 0))
        .await
        .unwrap();
    assert!(
        hang.blocked.load(Ordering::SeqCst) >= 1,
        "some partition was placed on disk0 and its write is stuck"
    );
    let s = store.status();
    assert_eq!(s.disks[0].health, DiskHealth::Hung, "{:?}", s.disks[0]);
    assert!(s.disks[0].io_timeouts >= 1 && s.disks[0].stuck_calls >= 1);
    assert_eq!(s.disks[1].health, DiskHealth::Healthy);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["disks"][0]["health"], "hung");
    for (key, blocks) in &written {
        let stats = store.partition_stats(key).unwrap();
        assert_eq!(stats.memory_bytes, 0, "{key} flushed");
        assert_eq!(s.disks[0].stored_bytes, 0, "nothing counted on disk0");
        assert_same(&read_all(&store, key).await, blocks);
    }
    // The stuck thread blocks nothing else: another shuffle flushes, and
    // is read back, while it is still blocked.
    let kb = PartitionKey::new("b", 0, 0);
    let more: Vec<_> = (0..5).map(|i| block(1000 + i, 0, 700)).collect();
    store.append(&kb, more.clone(), None).await.unwrap();
    within("a second flush", store.flush_shuffle("b", 0))
        .await
        .unwrap();
    assert_same(&read_all(&store, &kb).await, &more);
    assert!(hang.blocked.load(Ordering::SeqCst) >= 1, "still stuck");
    assert_eq!(store.budget().used(), 0);
    // The device comes back: once the stuck calls return, a probe
    // re-enables the disk.
    hang.release();
    within(
        "disk0 healthy again",
        wait_until("disk0 healthy", || {
            disk_health(&store, 0) == DiskHealth::Healthy
        }),
    )
    .await;
    assert_eq!(store.status().disks[0].stuck_calls, 0);
    for (key, blocks) in &written {
        assert_same(&read_all(&store, key).await, blocks);
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        if e.path().is_dir() {
            out.extend(files_under(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// A write stuck on a hung disk finishes after its application was
/// removed: the files it recreated go once it returns, while a held
/// application's late file stays until that application goes.
#[tokio::test]
async fn a_write_that_returns_after_its_app_was_removed_leaves_no_files() {
    let dir = tempfile::tempdir().unwrap();
    let disk0 = dir.path().join("disk0");
    let hang = HangingDisk::new(disk0.clone(), DiskOp::Write);
    let _release = ReleaseOnDrop(hang.clone());
    let mut c = config(dir.path(), 2, 1 << 20);
    c.disks.io_timeout = Duration::from_millis(500);
    // Room on disk0 for both applications' writes to get stuck.
    c.disks.write_concurrency = 16;
    let store = Store::open_with_faults(c, Some(hang.clone()))
        .await
        .unwrap();
    hang.armed.store(true, Ordering::SeqCst);
    for app in ["gone", "held"] {
        store.register_app(app);
        for p in 0..8 {
            let blocks: Vec<_> = (0..4).map(|i| block(p * 10 + i, 0, 600)).collect();
            let key = PartitionKey::new(app, 0, p as i32);
            store.append(&key, blocks, None).await.unwrap();
        }
    }
    // Both at once, before the first stuck write marks disk0 hung: each
    // places partitions on it.
    let (gone, held) = within(
        "flushes past a hung disk",
        futures::future::join(
            store.flush_shuffle("gone", 0),
            store.flush_shuffle("held", 0),
        ),
    )
    .await;
    gone.unwrap();
    held.unwrap();
    assert!(
        hang.blocked.load(Ordering::SeqCst) >= 2,
        "each application has a write stuck on disk0"
    );
    store.remove_app("gone").await.unwrap();
    assert!(!disk0.join("gone").exists(), "removed with its application");
    hang.release();
    within(
        "disk0 healthy again",
        wait_until("disk0 healthy", || {
            disk_health(&store, 0) == DiskHealth::Healthy
        }),
    )
    .await;
    within(
        "the late write's files go",
        wait_until("no files of the removed app", || {
            !disk0.join("gone").exists()
        }),
    )
    .await;
    let held = files_under(&disk0.join("held"));
    assert!(!held.is_empty(), "a held application's late files stay");
    store.remove_app("held").await.unwrap();
    assert_eq!(files_under(&disk0), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_hung_statvfs_marks_the_disk_hung_without_stalling_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let hang = HangingDisk::new(dir.path().join("disk0"), DiskOp::Statvfs);
    let _release = ReleaseOnDrop(hang.clone());
    let mut c = config(dir.path(), 2, 1 << 20);
    c.disks.io_timeout = Duration::from_secs(1);
    let store = Store::open_with_faults(c, Some(hang.clone()))
        .await
        .unwrap();
    store.register_app("a");
    hang.armed.store(true, Ordering::SeqCst);
    within(
        "the health check hangs on disk0",
        wait_until("disk0 hung", || disk_health(&store, 0) == DiskHealth::Hung),
    )
    .await;
    assert_eq!(
        hang.blocked.load(Ordering::SeqCst),
        1,
        "one stuck statvfs: later checks do not pile up behind it"
    );
    let mut written = Vec::new();
    for p in 0..6 {
        let key = PartitionKey::new("a", 0, p);
        let blocks: Vec<_> = (0..4).map(|i| block(p as i64 * 10 + i, 0, 900)).collect();
        store.append(&key, blocks.clone(), None).await.unwrap();
        written.push((key, blocks));
    }
    within("flushes beside a hung statvfs", store.flush_shuffle("a", 0))
        .await
        .unwrap();
    let s = store.status();
    assert_eq!(s.disks[0].stored_bytes, 0, "a hung disk takes no writes");
    assert_eq!(s.disks[1].stored_bytes, 6 * 4 * 900);
    for (key, blocks) in &written {
        assert_same(&read_all(&store, key).await, blocks);
    }
    assert_eq!(hang.blocked.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn huge_partitions_fall_back_to_a_disk_while_cold_writes_fail() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = with_cold(config(dir.path(), 1, 1 << 20), dir.path(), 5_000);
    let cold = c.cold.as_mut().unwrap();
    cold.retries = 0;
    cold.error_cooldown = Duration::from_millis(300);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..15).map(|i| block(i, 0, 1000)).collect();
    for chunk in blocks[..6].chunks(3) {
        store.append(&key, chunk.to_vec(), None).await.unwrap();
        store.flush_shuffle("a", 0).await.unwrap();
    }
    assert_eq!(store.partition_stats(&key).unwrap().disk_bytes, 6_000);
    // The cold tier breaks: its root becomes a file, so every write fails
    // (ENOTDIR, root or not).
    let root = dir.path().join("cold");
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::write(&root, b"not a directory").unwrap();
    store
        .append(&key, blocks[6..9].to_vec(), None)
        .await
        .unwrap();
    within("a huge flush while cold fails", store.flush_shuffle("a", 0))
        .await
        .unwrap();
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (9_000, 0));
    let cold = store.status().cold.unwrap();
    assert!(cold.write_errors >= 1, "the cold tier was tried: {cold:?}");
    assert!(!cold.healthy);
    assert_same(&read_all(&store, &key).await, &blocks[..9]);
    // Still failing: the next flush goes to the disk at once.
    store
        .append(&key, blocks[9..12].to_vec(), None)
        .await
        .unwrap();
    within("a second huge flush", store.flush_shuffle("a", 0))
        .await
        .unwrap();
    assert_eq!(store.partition_stats(&key).unwrap().disk_bytes, 12_000);
    // The tier comes back: after its cooldown the partition goes cold again.
    std::fs::remove_file(&root).unwrap();
    std::fs::create_dir(&root).unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    store
        .append(&key, blocks[12..].to_vec(), None)
        .await
        .unwrap();
    within("a cold flush after recovery", store.flush_shuffle("a", 0))
        .await
        .unwrap();
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (12_000, 3_000));
    assert!(store.status().cold.unwrap().healthy);
    assert_same(&read_all(&store, &key).await, &blocks);
}

/// An S3 endpoint that refuses connections (an outage): the first write
/// that has to be retried marks the cold tier failing and gives up at once,
/// so its blocks go to a disk without waiting out its tries (1000 of them
/// here, at most 2 s apart: far beyond the 20 s this test allows).
#[tokio::test]
async fn a_retried_cold_write_marks_the_tier_failing_and_gives_up() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = with_cold(config(dir.path(), 1, 1 << 20), dir.path(), 2_000);
    let cold = c.cold.as_mut().unwrap();
    cold.backend = switchyard_storage::ColdBackend::S3 {
        bucket: "b".into(),
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: "us-east-1".into(),
        access_key_id: Some("k".into()),
        secret_access_key: Some("s".into()),
        path_style: true,
    };
    cold.retries = 1000;
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let hot = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..6).map(|i| block(i, 0, 1000)).collect();
    store
        .append(&hot, blocks[..3].to_vec(), None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    assert_eq!(store.partition_stats(&hot).unwrap().disk_bytes, 3_000);
    // Past the threshold: this flush goes cold, and its tries fail.
    store
        .append(&hot, blocks[3..].to_vec(), None)
        .await
        .unwrap();
    within(
        "the cold write gives up and goes to the disk",
        store.flush_shuffle("a", 0),
    )
    .await
    .unwrap();
    let stats = store.partition_stats(&hot).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (6_000, 0));
    let cold = store.status().cold.unwrap();
    assert!(!cold.healthy, "{cold:?}");
    assert!(cold.write_errors >= 1, "{cold:?}");
    assert_same(&read_all(&store, &hot).await, &blocks);
}

#[tokio::test]
async fn commit_and_finish_fail_after_commit_timeout_with_no_writable_tier() {
    let dir = tempfile::tempdir().unwrap();
    let faults = FailingDisk::new(dir.path().join("disk0"), 0, true, io::ErrorKind::Other);
    let mut c = config(dir.path(), 1, 1 << 20);
    c.commit_timeout = Duration::from_millis(300);
    let store = Store::open_with_faults(c, Some(faults.clone()))
        .await
        .unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let other = PartitionKey::new("a", 0, 1);
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 300)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();
    store.append(&other, blocks.clone(), None).await.unwrap();
    let err = within("seal", store.seal(&key)).await.unwrap_err();
    assert!(
        matches!(err, StorageError::FlushTimeout { .. }),
        "typed timeout: {err}"
    );
    let err = within("flush_shuffle", store.flush_shuffle("a", 0))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::FlushTimeout { .. }), "{err}");
    assert!(store.status().operations.flush_timeouts >= 2);
    // Nothing acknowledged is lost: the blocks wait in memory, readable.
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(store.partition_stats(&key).unwrap().memory_bytes, 3_000);
    // The disk comes back: the flushes that went on after the timeouts
    // finish on their own, and a retried commit succeeds.
    faults.always.store(false, Ordering::SeqCst);
    within(
        "the background flushes finish",
        wait_until("flushed", || store.budget().used() == 0),
    )
    .await;
    let stats = within("a retried seal", store.seal(&key)).await.unwrap();
    assert_eq!((stats.memory_bytes, stats.disk_bytes), (0, 3_000));
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_same(&read_all(&store, &other).await, &blocks);
}
