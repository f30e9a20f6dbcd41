//! Fair shares of the memory budget: an application pushing faster than
//! the disk drains is held at its share, while a small one is admitted at
//! once.

mod common;

use std::time::{Duration, Instant};

use common::*;
use switchyard_storage::{PartitionKey, StorageError, Store};

const MEMORY: u64 = 4 << 20;
const BLOCK: usize = 32 << 10;

/// Appends `big`'s blocks without waiting until one is refused; returns
/// the refusal.
async fn fill(store: &std::sync::Arc<Store>, app: &str, next: &mut i64) -> StorageError {
    loop {
        let key = PartitionKey::new(app, 0, (*next % 4) as i32);
        match store.append(&key, vec![block(*next, 0, BLOCK)], None).await {
            Ok(()) => *next += 1,
            Err(e) => return e,
        }
    }
}

#[tokio::test]
async fn a_big_application_is_held_at_its_share_and_a_small_one_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, MEMORY);
    // The disk drains slowly: memory stays contended for the whole test.
    c.disks.write_rate_limit = Some(bytesize::ByteSize::kib(256));
    c.memory.single_buffer_threshold = bytesize::ByteSize::mib(64);
    c.memory.fair_share_from = 0.5;
    let store = Store::open(c).await.unwrap();
    store.register_app("big");
    store.register_app("small");
    let mut next = 0;
    // Alone, the big application fills the budget up to the threshold and
    // past it until it holds half (itself and room for one more).
    let refused = fill(&store, "big", &mut next).await;
    assert!(
        matches!(refused, StorageError::OverShare { ref app, .. } if app == "big"),
        "{refused}"
    );
    let held = store.budget().used();
    assert!(
        held <= MEMORY * 6 / 10 && held >= MEMORY / 2 - BLOCK as u64 * 2,
        "held {held} of {MEMORY}: about half"
    );
    // Once both are counted, the small application is admitted at once,
    // block after block, while the big one stays refused.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    for i in 0..16 {
        let key = PartitionKey::new("small", 0, 0);
        store
            .append(&key, vec![block(10_000 + i, 0, BLOCK)], None)
            .await
            .unwrap_or_else(|e| panic!("small append {i} refused: {e}"));
        let big = PartitionKey::new("big", 0, 0);
        let e = store
            .append(&big, vec![block(next, 0, BLOCK)], None)
            .await
            .expect_err("the big application is over its share");
        assert!(e.is_backpressure(), "{e}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "no waiting");
    assert!(
        store.budget().used() > held,
        "the small one's blocks are in"
    );
}

#[tokio::test]
async fn with_shares_off_the_big_application_takes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, MEMORY);
    c.disks.write_rate_limit = Some(bytesize::ByteSize::kib(256));
    c.memory.single_buffer_threshold = bytesize::ByteSize::mib(64);
    c.memory.fair_share_from = 1.0;
    let store = Store::open(c).await.unwrap();
    store.register_app("big");
    store.register_app("small");
    let mut next = 0;
    let refused = fill(&store, "big", &mut next).await;
    assert!(
        matches!(refused, StorageError::NoBuffer { .. }),
        "{refused}"
    );
    let key = PartitionKey::new("small", 0, 0);
    let e = store
        .append(&key, vec![block(10_000, 0, BLOCK)], None)
        .await
        .expect_err("no room left for anyone");
    assert!(matches!(e, StorageError::NoBuffer { .. }), "{e}");
}
