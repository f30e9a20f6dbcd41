//! Quotas (`storage.apps.max_app_bytes`, `max_app_partitions`,
//! `max_user_bytes`): an application or user at its quota gets its writes
//! and new partitions refused, others go on, and removing a shuffle gives
//! its bytes back.

mod common;

use bytesize::ByteSize;
use common::*;
use switchyard_storage::{PartitionKey, StorageError, Store};

fn quota(e: StorageError) -> (String, &'static str) {
    match e {
        StorageError::QuotaExceeded { who, what, .. } => (who, what),
        other => panic!("not a quota refusal: {other}"),
    }
}

#[tokio::test]
async fn application_quotas_refuse_writes_and_partitions_and_free_on_removal() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 64 << 20);
    c.apps.max_app_bytes = Some(ByteSize::kib(10));
    c.apps.max_app_partitions = Some(3);
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    store.register_app("b");
    let key = |app: &str, shuffle, p| PartitionKey::new(app, shuffle, p);
    // 8 KiB fits, 4 KiB more does not; nothing of the refused append is kept.
    store
        .append(&key("a", 0, 0), vec![block(1, 0, 8 << 10)], None)
        .await
        .unwrap();
    let e = store
        .append(&key("a", 0, 0), vec![block(2, 0, 4 << 10)], None)
        .await
        .unwrap_err();
    assert_eq!(quota(e), ("application a".into(), "bytes"));
    assert_eq!(
        store
            .partition_stats(&key("a", 0, 0))
            .unwrap()
            .received_blocks,
        1
    );
    assert!(store.check_quota("a").is_ok(), "8 of 10 KiB held");
    // Another application is not held back by a's quota.
    store
        .append(&key("b", 0, 0), vec![block(3, 0, 8 << 10)], None)
        .await
        .unwrap();
    // Partitions: three, not four.
    for p in 1..3 {
        store
            .append(&key("a", 0, p), vec![block(10 + p as i64, 0, 100)], None)
            .await
            .unwrap();
    }
    let e = store
        .append(&key("a", 0, 3), vec![block(20, 0, 100)], None)
        .await
        .unwrap_err();
    assert_eq!(quota(e), ("application a".into(), "partitions"));
    // Removing the shuffle gives bytes and partitions back.
    store.remove_shuffle("a", 0).await.unwrap();
    store
        .append(&key("a", 1, 0), vec![block(30, 0, 9 << 10)], None)
        .await
        .unwrap();
    store
        .append(&key("a", 1, 1), vec![block(31, 0, 100)], None)
        .await
        .unwrap();
    let e = store
        .append(&key("a", 1, 2), vec![block(32, 0, 2 << 10)], None)
        .await
        .unwrap_err();
    assert_eq!(quota(e).1, "bytes");
    // At its byte quota, it may not set up more.
    store
        .append(&key("a", 1, 2), vec![block(33, 0, 924)], None)
        .await
        .unwrap();
    assert_eq!(quota(store.check_quota("a").unwrap_err()).1, "bytes");
}

#[tokio::test]
async fn a_users_applications_share_its_quota() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 64 << 20);
    c.apps.max_user_bytes = Some(ByteSize::kib(16));
    let store = Store::open(c).await.unwrap();
    for (app, user) in [("a1", "alice"), ("a2", "alice"), ("b1", "bob")] {
        store.register_app(app);
        store.set_app_user(app, user);
    }
    store
        .append(
            &PartitionKey::new("a1", 0, 0),
            vec![block(1, 0, 10 << 10)],
            None,
        )
        .await
        .unwrap();
    assert!(store.check_quota("a2").is_ok());
    store
        .append(
            &PartitionKey::new("a2", 0, 0),
            vec![block(2, 0, 6 << 10)],
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        quota(store.check_quota("a2").unwrap_err()),
        ("user alice".into(), "bytes")
    );
    assert_eq!(quota(store.check_quota("a1").unwrap_err()).0, "user alice");
    assert!(store.check_quota("b1").is_ok(), "bob has his own quota");
    store.remove_app("a1").await.unwrap();
    assert!(store.check_quota("a2").is_ok(), "a1's bytes left with it");
}
