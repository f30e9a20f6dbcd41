//! Fair disk queues: with one flush slot and one read place on a slow
//! disk, a small application's flush and read are served next, not after a
//! big application's whole backlog.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytesize::ByteSize;
use common::*;
use switchyard_storage::{AppStatus, PartitionKey, Store};

const MEMORY: u64 = 64 << 20;

fn app<'a>(store: &Store, id: &str, out: &'a mut Vec<AppStatus>) -> &'a AppStatus {
    *out = store.status().applications;
    out.iter().find(|a| a.id == id).expect("registered")
}

#[tokio::test]
async fn a_small_applications_flush_does_not_wait_for_a_big_ones_backlog() {
    const PART: usize = 256 << 10;
    const BIG: i32 = 16;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, MEMORY);
    // One flush slot, and a disk that writes a big partition in 0.5 s.
    c.disks.write_concurrency = 1;
    c.disks.write_rate_limit = Some(ByteSize::kib(512));
    // Every big append queues a flush of its own.
    c.memory.single_buffer_threshold = ByteSize::kib(128);
    c.memory.fair_share_from = 1.0;
    let store = Store::open(c).await.unwrap();
    store.register_app("big");
    store.register_app("small");
    for p in 0..BIG {
        let key = PartitionKey::new("big", 0, p);
        store
            .append(&key, vec![block(p as i64, 0, PART)], None)
            .await
            .unwrap();
    }
    wait_until("the big application's flushes to queue", || {
        store.counts().flush_queue >= 8
    })
    .await;
    let key = PartitionKey::new("small", 0, 0);
    store
        .append(&key, vec![block(1000, 0, 16 << 10)], None)
        .await
        .unwrap();
    store.flush_shuffle("small", 0).await.unwrap();
    // Served in turn, the small flush went after at most the flush that
    // held the slot: most of the big backlog is still in memory. Served in
    // arrival order, it would have waited for all of it.
    let mut statuses = Vec::new();
    let big = app(&store, "big", &mut statuses);
    assert!(
        big.bytes.memory >= 8 * PART as u64,
        "the big application still holds {} bytes in memory: its backlog went first",
        big.bytes.memory
    );
    assert!(big.waits.flush_seconds > 0.0, "{:?}", big.waits);
    assert_eq!(
        store.read_data(&key, 0, 16 << 10).await.unwrap().len(),
        16 << 10
    );
}

#[tokio::test]
async fn a_small_applications_read_does_not_wait_for_a_big_ones_backlog() {
    const PART: usize = 128 << 10;
    const BIG: i32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, MEMORY);
    // One read place, and a disk that reads a big partition in a second
    // (writes are not throttled).
    c.disks.read_concurrency = 1;
    c.disks.read_rate_limit = Some(ByteSize::kib(128));
    c.memory.fair_share_from = 1.0;
    let store = Store::open(c).await.unwrap();
    store.register_app("big");
    store.register_app("small");
    for p in 0..BIG {
        let key = PartitionKey::new("big", 0, p);
        store
            .append(&key, vec![block(p as i64, 0, PART)], None)
            .await
            .unwrap();
    }
    let small = PartitionKey::new("small", 0, 0);
    store
        .append(&small, vec![block(1000, 0, 4 << 10)], None)
        .await
        .unwrap();
    store.flush_shuffle("big", 0).await.unwrap();
    store.flush_shuffle("small", 0).await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut big_reads = Vec::new();
    for p in 0..BIG {
        let (store, done) = (store.clone(), done.clone());
        big_reads.push(tokio::spawn(async move {
            let key = PartitionKey::new("big", 0, p);
            store.read_data(&key, 0, PART as u64).await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    wait_until("the big application's reads to queue", || {
        store.counts().read_queue >= 5
    })
    .await;
    let read = store.read_data(&small, 0, 4 << 10).await.unwrap();
    assert_eq!(read.len(), 4 << 10);
    let before = done.load(Ordering::SeqCst);
    assert!(
        before <= 3,
        "{before} of the big application's {BIG} reads went before the small one"
    );
    let mut statuses = Vec::new();
    let big = app(&store, "big", &mut statuses);
    assert!(big.waits.read_seconds > 0.0, "{:?}", big.waits);
    for r in big_reads {
        r.abort();
    }
}
