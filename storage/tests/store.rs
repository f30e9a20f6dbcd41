//! Behaviour of the block API across tiers.

mod common;

use std::time::Duration;

use common::*;
use switchyard_storage::{PartitionKey, RemovalReason, StorageError, Store};

#[tokio::test]
async fn appended_blocks_are_readable_from_memory_then_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 64 << 20)).await.unwrap();
    store.register_app("app-1");
    let key = PartitionKey::new("app-1", 0, 3);
    let blocks: Vec<_> = (0..10).map(|i| block(i, i % 2, 100 + i as usize)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();

    // Readable from memory at once, paged by last block id.
    let first = store.read_memory(&key, None, 250, &|_| true).unwrap();
    assert_eq!(first.blocks.len(), 3, "stops once 250 bytes are collected");
    let last = first.blocks.last().unwrap().meta.block_id;
    let rest = store
        .read_memory(&key, Some(last), u64::MAX, &|_| true)
        .unwrap();
    assert_eq!(rest.blocks.len(), 7);
    assert!(store.read_index(&key).await.unwrap().index.is_empty());

    store.flush_shuffle("app-1", 0).await.unwrap();
    assert!(store
        .read_memory(&key, None, u64::MAX, &|_| true)
        .unwrap()
        .blocks
        .is_empty());
    let index = store.read_index(&key).await.unwrap();
    assert_eq!(index.index.len(), 10 * 40);
    assert_same(&read_all(&store, &key).await, &blocks);
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!(stats.memory_bytes, 0);
    assert_eq!(
        stats.disk_bytes,
        blocks.iter().map(|b| b.len()).sum::<u64>()
    );
    assert_eq!(store.budget().used(), 0, "flushed memory is released");
}

#[tokio::test]
async fn unknown_app_is_refused_and_unknown_partition_reads_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    let key = PartitionKey::new("nope", 0, 0);
    let err = store
        .append(&key, vec![block(1, 0, 10)], None)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::UnknownApp(_)));
    store.register_app("nope");
    assert!(store.read_index(&key).await.unwrap().index.is_empty());
    assert!(store
        .read_memory(&key, None, 100, &|_| true)
        .unwrap()
        .blocks
        .is_empty());
    assert!(matches!(
        store.read_data(&key, 0, 10).await,
        Err(StorageError::UnknownPartition(_))
    ));
}

#[tokio::test]
async fn reads_past_persisted_data_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    store
        .append(&key, vec![block(1, 0, 10)], None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    assert!(matches!(
        store.read_data(&key, 5, 10).await,
        Err(StorageError::OutOfRange { size: 10, .. })
    ));
    assert!(matches!(
        store.read_data(&key, u64::MAX, 2).await,
        Err(StorageError::OutOfRange { .. })
    ));
}

#[tokio::test]
async fn memory_budget_pushes_back_and_never_grows_past_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 10_000);
    // No disk writes may free memory in this test: rate-limit the disk to
    // nearly nothing and keep flushes from being triggered by size.
    c.memory.single_buffer_threshold = bytesize::ByteSize::b(1 << 40);
    c.memory.high_watermark = 1.0;
    c.memory.low_watermark = 0.9;
    // The whole budget, not one application's share of it (tests/shares.rs).
    c.memory.fair_share_from = 1.0;
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let mut accepted = 0;
    let mut refused = 0;
    for i in 0..100 {
        match store.append(&key, vec![block(i, 0, 468)], None).await {
            Ok(()) => accepted += 1,
            Err(e) => {
                assert!(e.is_backpressure(), "{e}");
                refused += 1;
            }
        }
        assert!(store.budget().used() <= 10_000);
    }
    assert_eq!(
        accepted, 20,
        "20 blocks of 468 + 32 bytes fill 10 000 bytes"
    );
    assert_eq!(refused, 80);
    assert!(matches!(
        store.append(&key, vec![block(999, 0, 20_000)], None).await,
        Err(StorageError::TooLarge { .. })
    ));
    // Reservations share the same budget.
    assert!(store.reserve(1).unwrap_err().is_backpressure());
    store.flush_shuffle("a", 0).await.unwrap();
    let mut r = store.reserve(5_000).unwrap();
    store
        .append(&key, vec![block(500, 0, 968)], Some(&mut r))
        .await
        .unwrap();
    assert_eq!(
        store.budget().used(),
        5_000,
        "reserved room covers the block"
    );
    drop(r);
    assert_eq!(store.budget().used(), 1_000);
}

#[tokio::test]
async fn watermark_spill_flushes_largest_partitions_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 100_000);
    c.memory.single_buffer_threshold = bytesize::ByteSize::b(1 << 40);
    c.memory.high_watermark = 0.5;
    c.memory.low_watermark = 0.3;
    // Keep the timer from spilling between our appends.
    c.memory.spill_check_interval = Duration::from_secs(3600);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let big = PartitionKey::new("a", 0, 0);
    let small = PartitionKey::new("a", 0, 1);
    store
        .append(&small, vec![block(1, 0, 5_000)], None)
        .await
        .unwrap();
    for i in 0..9 {
        store
            .append(&big, vec![block(10 + i, 0, 5_000)], None)
            .await
            .unwrap();
    }
    // 10 blocks of ~5 KB = 50 % + overhead: past the high watermark.
    wait_until("big partition spilled", || {
        store.partition_stats(&big).unwrap().disk_bytes == 45_000
    })
    .await;
    assert_eq!(
        store.partition_stats(&small).unwrap().disk_bytes,
        0,
        "small one stays"
    );
    assert_eq!(store.partition_stats(&small).unwrap().memory_bytes, 5_000);
}

#[tokio::test]
async fn single_buffer_threshold_spills_one_partition_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 2, 1 << 30);
    c.memory.single_buffer_threshold = bytesize::ByteSize::b(10_000);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 1, 1);
    let blocks: Vec<_> = (0..5).map(|i| block(i, 0, 2_500)).collect();
    store
        .append(&key, blocks[..3].to_vec(), None)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.partition_stats(&key).unwrap().disk_bytes, 0);
    store
        .append(&key, blocks[3..].to_vec(), None)
        .await
        .unwrap();
    wait_until("threshold spill", || {
        store.partition_stats(&key).unwrap().disk_bytes == 12_500
    })
    .await;
    assert_same(&read_all(&store, &key).await, &blocks);
}

#[tokio::test]
async fn sealed_partitions_refuse_appends_and_keep_their_data() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0).with_epoch(2);
    store
        .append(&key, vec![block(1, 0, 100)], None)
        .await
        .unwrap();
    let stats = store.seal(&key).await.unwrap();
    assert_eq!(stats.disk_bytes, 100);
    assert_eq!(stats.memory_bytes, 0);
    assert!(store.is_sealed(&key).unwrap());
    assert!(matches!(
        store.append(&key, vec![block(2, 0, 100)], None).await,
        Err(StorageError::Sealed(_))
    ));
    store.seal(&key).await.unwrap();
    // Another epoch of the same partition is a separate location.
    let next = PartitionKey::new("a", 0, 0).with_epoch(3);
    store
        .append(&next, vec![block(3, 0, 10)], None)
        .await
        .unwrap();
}

#[tokio::test]
async fn views_chunk_on_block_boundaries_and_sort_map_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    // Maps interleaved as pushes arrive: 2, 0, 1, 0, 2, 1 ...
    let blocks: Vec<_> = (0..30)
        .map(|i| block(i, [2, 0, 1][i as usize % 3], 100))
        .collect();
    store
        .append(&key, blocks[..10].to_vec(), None)
        .await
        .unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    store
        .append(&key, blocks[10..].to_vec(), None)
        .await
        .unwrap();
    store.seal(&key).await.unwrap();

    let view = store.open_view(&key, None, 250).await.unwrap();
    assert_eq!(view.blocks, 30);
    assert_eq!(
        view.chunks.len(),
        10,
        "each chunk closes after 3 blocks of 100 bytes"
    );
    let offsets = view.chunk_offsets().unwrap();
    assert_eq!(offsets.first(), Some(&0));
    assert_eq!(offsets.last(), Some(&3000));
    let mut all = Vec::new();
    for i in 0..view.chunks.len() {
        all.extend_from_slice(&store.read_chunk(&view, i).await.unwrap());
    }
    let expected: Vec<u8> = blocks.iter().flat_map(|b| b.data.to_vec()).collect();
    assert_eq!(all, expected);
    assert!(matches!(
        store.read_chunk(&view, 10).await,
        Err(StorageError::NoSuchChunk { .. })
    ));

    // Maps [0, 2): only maps 0 and 1, map 0 first, arrival order within a map.
    let view = store.open_view(&key, Some(0..2), 1 << 20).await.unwrap();
    assert_eq!(view.blocks, 20);
    assert!(view.chunk_offsets().is_none());
    let data = store.read_chunk(&view, 0).await.unwrap();
    let expected: Vec<u8> = blocks
        .iter()
        .filter(|b| b.meta.map_id == 0)
        .chain(blocks.iter().filter(|b| b.meta.map_id == 1))
        .flat_map(|b| b.data.to_vec())
        .collect();
    assert_eq!(data.to_vec(), expected);
}

#[tokio::test]
async fn removing_shuffles_and_apps_deletes_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let c = with_cold(config(dir.path(), 2, 1 << 20), dir.path(), 1 << 40);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    for s in 0..2 {
        for p in 0..4 {
            let key = PartitionKey::new("a", s, p);
            store
                .append(&key, vec![block(p as i64, 0, 1000)], None)
                .await
                .unwrap();
        }
        store.flush_shuffle("a", s).await.unwrap();
    }
    let count_files = || walk(&dir.path().join("disk0")) + walk(&dir.path().join("disk1"));
    assert_eq!(count_files(), 16, "8 partitions, data + index each");
    store.remove_shuffle("a", 0).await.unwrap();
    assert_eq!(count_files(), 8);
    assert_eq!(store.tier_bytes().disk, 4000);
    store.remove_app("a").await.unwrap();
    assert_eq!(count_files(), 0);
    assert_eq!(store.tier_bytes().disk, 0);
    assert!(!store.has_app("a"));
    assert_eq!(store.budget().used(), 0);
}

/// Waits until `dir` holds `n` files (a purge running in the background);
/// fails after 10 s.
async fn files_come_to(dir: &std::path::Path, n: usize) {
    let started = std::time::Instant::now();
    while walk(dir) != n {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{} files, not {n}",
            walk(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A removal whose caller does not wait (a Celeborn ApplicationLost): the
/// application is gone for clients before the call returns, its files and
/// memory a moment later.
#[tokio::test]
async fn an_app_removed_later_is_gone_at_once_and_its_files_soon_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    for app in ["a", "kept"] {
        store.register_app(app);
        for p in 0..4 {
            let key = PartitionKey::new(app, 0, p);
            store
                .append(&key, vec![block(p as i64, 0, 1000)], None)
                .await
                .unwrap();
        }
        store.flush_shuffle(app, 0).await.unwrap();
    }
    let disk = dir.path().join("disk0");
    assert_eq!(walk(&disk), 16, "8 partitions, data + index each");
    store.remove_app_later("a", RemovalReason::Unregistered);
    assert!(
        !store.has_app("a"),
        "gone for clients before the call returns"
    );
    assert!(store.has_app("kept"));
    files_come_to(&disk, 8).await;
    assert_eq!(store.tier_bytes().disk, 4000, "only the kept app's bytes");
    let kept = store
        .open_view(&PartitionKey::new("kept", 0, 3), None, 1 << 20)
        .await
        .unwrap();
    assert_eq!(store.read_chunk(&kept, 0).await.unwrap().len(), 1000);
}

/// An application that registers again while its purge is pending (a
/// Celeborn driver back after its lease ran out) keeps what it writes after:
/// only the removed shuffles' files go.
#[tokio::test]
async fn a_purge_spares_the_new_shuffles_of_an_app_registered_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    store.register_app("back");
    let old = PartitionKey::new("back", 0, 0);
    store
        .append(&old, vec![block(1, 0, 1000)], None)
        .await
        .unwrap();
    store.flush_shuffle("back", 0).await.unwrap();
    store.remove_app_later("back", RemovalReason::Lost);
    store.register_app("back");
    let new = PartitionKey::new("back", 1, 0);
    store
        .append(&new, vec![block(2, 0, 700)], None)
        .await
        .unwrap();
    store.flush_shuffle("back", 1).await.unwrap();
    let disk = dir.path().join("disk0");
    files_come_to(&disk, 2).await;
    // Settled: a little longer, in case the purge had more to delete.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(walk(&disk), 2, "the new shuffle's data and index");
    let view = store.open_view(&new, None, 1 << 20).await.unwrap();
    assert_eq!(store.read_chunk(&view, 0).await.unwrap().len(), 700);
    assert!(store.open_view(&old, None, 1 << 20).await.is_err());
}

#[tokio::test]
async fn applications_without_heartbeats_expire() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 1 << 20);
    c.apps.expiry = Duration::from_millis(300);
    c.apps.expiry_check_interval = Duration::from_millis(50);
    let store = Store::open(c).await.unwrap();
    store.register_app("quiet");
    store.register_app("alive");
    let key = PartitionKey::new("quiet", 0, 0);
    store
        .append(&key, vec![block(1, 0, 1000)], None)
        .await
        .unwrap();
    // Heartbeats keep "alive" while the expiry, in the background, removes
    // "quiet" and then releases its memory: wait for both (bounded), not a
    // fixed time a slow machine may overrun.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut beats = 0;
    while beats < 10 || store.has_app("quiet") || store.budget().used() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "quiet never expired after 300 ms without touch, or kept its memory"
        );
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(store.heartbeat("alive"));
        beats += 1;
    }
    assert!(
        !store.has_app("quiet"),
        "expired after 300 ms without touch"
    );
    assert!(store.has_app("alive"));
    assert_eq!(store.budget().used(), 0, "its memory was released");
    assert!(!store.heartbeat("quiet"));
}

#[tokio::test]
async fn shutdown_flushes_buffered_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    store
        .append(&key, vec![block(1, 0, 1000)], None)
        .await
        .unwrap();
    store.shutdown().await;
    assert_eq!(store.partition_stats(&key).unwrap().disk_bytes, 1000);
    assert!(!store.is_ready());
    assert!(matches!(
        store.append(&key, vec![block(2, 0, 10)], None).await,
        Err(StorageError::ShuttingDown)
    ));
}

#[tokio::test]
async fn status_reports_tiers_disks_and_apps() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 2, 1 << 20)).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    store
        .append(&key, vec![block(1, 0, 1000)], None)
        .await
        .unwrap();
    let s = store.status();
    assert!(s.ready);
    assert_eq!(s.disks.len(), 2);
    assert_eq!(s.tiers.memory, 1000);
    assert_eq!(s.applications[0].id, "a");
    assert_eq!(s.applications[0].partitions, 1);
    assert!(s
        .disks
        .iter()
        .all(|d| d.health == switchyard_storage::DiskHealth::Healthy));
}

fn walk(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                walk(&p)
            } else {
                1
            }
        })
        .sum()
}

#[tokio::test]
async fn disk_rate_limits_hold_back_flushes_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 64 << 20);
    // 1 MiB/s each way; the bucket starts full with one second's worth.
    c.disks.write_rate_limit = Some(bytesize::ByteSize::mib(1));
    c.disks.read_rate_limit = Some(bytesize::ByteSize::mib(1));
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let blocks: Vec<_> = (0..3).map(|i| block(i, 0, 1 << 20)).collect();
    store.append(&key, blocks.clone(), None).await.unwrap();
    let started = std::time::Instant::now();
    store.flush_shuffle("a", 0).await.unwrap();
    let s = store.status();
    assert!(
        s.disks[0].throttled_ms >= 1500,
        "3 MiB at 1 MiB/s with 1 MiB of burst waits about 2 s, waited {} ms (flush took {:?})",
        s.disks[0].throttled_ms,
        started.elapsed()
    );
    let before = s.disks[0].throttled_ms;
    let data = store.read_data(&key, 0, 3 << 20).await.unwrap();
    assert_eq!(data.len(), 3 << 20);
    assert!(
        store.status().disks[0].throttled_ms >= before + 1500,
        "reads are limited too"
    );
}

#[tokio::test]
async fn a_refused_charge_spills_even_below_the_high_watermark() {
    // The deadlock a real 0.10 client hit: 74 % of memory unflushed (below the
    // 75 % watermark) and a request for 30 % that cannot fit. Nothing else
    // writes, so only the refusal itself can start a spill.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 100_000);
    c.memory.single_buffer_threshold = bytesize::ByteSize::b(1 << 40);
    c.memory.high_watermark = 0.75;
    c.memory.low_watermark = 0.25;
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    for i in 0..37 {
        store
            .append(&key, vec![block(i, 0, 1968)], None)
            .await
            .unwrap();
    }
    assert_eq!(store.budget().used(), 74_000);
    assert!(store.reserve(30_000).unwrap_err().is_backpressure());
    wait_until("the refused reservation fits", || {
        store.reserve(30_000).is_ok()
    })
    .await;
    assert!(store.partition_stats(&key).unwrap().disk_bytes > 0);
}

/// Frame pinning: a block cut small from a big received frame is copied out
/// (`Block::detach`), so what the budget charges is what stays in memory;
/// a block that is most of its frame stays zero-copy and is charged nearly
/// all of the frame it keeps alive.
#[tokio::test]
async fn a_small_slice_of_a_big_frame_is_charged_for_what_it_keeps() {
    use switchyard_storage::{Block, BLOCK_OVERHEAD};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 64 << 20)).await.unwrap();
    store.register_app("pin");
    let key = PartitionKey::new("pin", 0, 0);
    let frame = bytes::Bytes::from(vec![3u8; 10 << 20]);
    let inside = |b: &bytes::Bytes| {
        let base = frame.as_ptr() as usize;
        (base..base + frame.len()).contains(&(b.as_ptr() as usize))
    };

    let mut small = block(1, 0, 16);
    small.data = Block::detach(frame.slice(0..16), frame.len());
    store.append(&key, vec![small], None).await.unwrap();
    assert_eq!(store.status().memory.used, 16 + BLOCK_OVERHEAD);
    let held = store.read_memory(&key, None, u64::MAX, &|_| true).unwrap();
    assert!(
        !inside(&held.blocks[0].data),
        "the 10 MiB frame is not pinned"
    );

    let mut big = block(2, 0, 0);
    big.data = Block::detach(frame.slice(16..), frame.len());
    store.append(&key, vec![big], None).await.unwrap();
    let held = store.read_memory(&key, None, u64::MAX, &|_| true).unwrap();
    assert!(inside(&held.blocks[1].data), "most of a frame: no copy");
    // Charged: both blocks' bytes, i.e. the whole frame the second one pins.
    assert_eq!(
        store.status().memory.used,
        frame.len() as u64 + 2 * BLOCK_OVERHEAD
    );
}

/// The heartbeat's partition count comes from counters; it must agree with
/// a full walk through creations, a shuffle's removal, an application's
/// removal and a restart.
#[tokio::test]
async fn node_load_counts_what_a_full_walk_counts() {
    let dir = tempfile::tempdir().unwrap();
    // The counters (node load, and each application's partitions and tier
    // bytes in the status) against a walk of every partition (per-shuffle
    // status), which must agree.
    let walked = |store: &Store| -> u64 {
        let s = store.status();
        let mut partitions = 0;
        for a in &s.applications {
            let shuffles = store.shuffle_status(&a.id).unwrap_or_default();
            let walk = |f: fn(&switchyard_storage::ShuffleStatus) -> u64| -> u64 {
                shuffles.iter().map(f).sum()
            };
            let by_walk = (
                walk(|s| s.partitions as u64),
                walk(|s| s.bytes.memory),
                walk(|s| s.bytes.disk),
                walk(|s| s.bytes.cold),
            );
            let counted = (
                a.partitions as u64,
                a.bytes.memory,
                a.bytes.disk,
                a.bytes.cold,
            );
            assert_eq!(counted, by_walk, "application {}", a.id);
            partitions += by_walk.0;
        }
        partitions
    };
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    for app in ["a", "b"] {
        store.register_app(app);
        for shuffle in 0..3 {
            for p in 0..5 {
                let key = PartitionKey::new(app, shuffle, p);
                store
                    .append(&key, vec![block(p as i64, 0, 10)], None)
                    .await
                    .unwrap();
            }
            store
                .commit_partitions(app, shuffle, &[0, 1, 2, 3, 4], vec![])
                .await
                .unwrap();
        }
    }
    // One more partition, in memory only.
    let staged = PartitionKey::new("a", 9, 0);
    store
        .append(&staged, vec![block(0, 0, 7)], None)
        .await
        .unwrap();
    assert_eq!(store.status().applications[0].bytes.memory, 7);
    let load = store.node_load();
    assert_eq!((load.partitions, walked(&store)), (31, 31));
    store.remove_shuffle("a", 9).await.unwrap();
    let mut apps = load.applications.clone();
    apps.sort();
    assert_eq!(apps, ["a", "b"]);
    store.remove_shuffle("a", 1).await.unwrap();
    assert_eq!((store.node_load().partitions, walked(&store)), (25, 25));
    store.remove_app("b").await.unwrap();
    assert_eq!((store.node_load().partitions, walked(&store)), (10, 10));
    store.shutdown().await;
    drop(store);
    let store = Store::open(config(dir.path(), 1, 1 << 20)).await.unwrap();
    assert_eq!((store.node_load().partitions, walked(&store)), (10, 10));
    assert!(store.node_load().ready && store.node_load().disk_free > 0);
}

/// The counts the upstream dashboards chart (memory-only partitions, a
/// user's files and bytes per tier) follow flushes and removals: they are
/// counted where segments are written and partitions removed, never by a
/// walk, so a removal that missed them would leave them high forever.
#[tokio::test]
async fn partition_and_user_counts_follow_flushes_and_removals() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path(), 1, 64 << 20)).await.unwrap();
    store.register_app("app-1");
    store.set_app_user("app-1", "tenant.alice");
    let (a, b) = (
        PartitionKey::new("app-1", 0, 0),
        PartitionKey::new("app-1", 0, 1),
    );
    store
        .append(&a, vec![block(0, 0, 1000)], None)
        .await
        .unwrap();
    store
        .append(&b, vec![block(1, 0, 500)], None)
        .await
        .unwrap();
    let counts = store.counts();
    assert_eq!(
        (
            counts.shuffles,
            counts.partitions,
            counts.memory_only_partitions
        ),
        (1, 2, 2)
    );
    assert!(!counts.paused);
    assert_eq!(store.user_consumption()["tenant.alice"].disk_files, 0);

    // One partition committed: its segment is on the disk, the other
    // partition still in memory alone.
    store.seal(&a).await.unwrap();
    assert_eq!(store.counts().memory_only_partitions, 1);
    let alice = store.user_consumption()["tenant.alice"];
    assert_eq!((alice.disk_files, alice.disk_bytes), (1, 1000));
    assert_eq!((alice.cold_files, alice.cold_bytes), (0, 0));

    // A second flush of the other one: two segments in all.
    store.flush_shuffle("app-1", 0).await.unwrap();
    assert_eq!(store.counts().memory_only_partitions, 0);
    assert_eq!(store.user_consumption()["tenant.alice"].disk_files, 2);

    store.remove_shuffle("app-1", 0).await.unwrap();
    let counts = store.counts();
    assert_eq!(
        (
            counts.shuffles,
            counts.partitions,
            counts.memory_only_partitions
        ),
        (0, 0, 0)
    );
    let alice = store.user_consumption()["tenant.alice"];
    assert_eq!(
        alice,
        Default::default(),
        "removed segments leave the counts"
    );
}
