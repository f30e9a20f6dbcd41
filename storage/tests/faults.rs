//! Failure injection: no acknowledged block is lost when disks fail or fill.

mod common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use common::*;
use switchyard_storage::fault::DiskFaults;
use switchyard_storage::{DiskHealth, PartitionKey, Store};

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
