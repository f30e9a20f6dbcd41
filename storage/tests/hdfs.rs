//! The cold tier on HDFS through OpenDAL's `hdfs-native` service (pure Rust,
//! no JVM). Needs a running namenode: set `SWITCHYARD_TEST_HDFS` to its
//! address, e.g. `SWITCHYARD_TEST_HDFS=hdfs://127.0.0.1:9000`; without it the
//! test passes after printing that it was skipped.
mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use bytesize::ByteSize;
use common::*;
use switchyard_storage::{ColdBackend, ColdConfig, PartitionKey, Store};

fn namenode() -> Option<String> {
    match std::env::var("SWITCHYARD_TEST_HDFS") {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!(
                "SKIPPED: set SWITCHYARD_TEST_HDFS=hdfs://HOST:PORT (a running namenode) \
                 to run the cold tier against HDFS"
            );
            None
        }
    }
}

fn hdfs_cold(name_node: String, huge: u64) -> ColdConfig {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut c = ColdConfig::new(ColdBackend::Hdfs {
        name_node,
        root: format!("/switchyard-test-{}-{nanos}", std::process::id()),
    });
    c.prefix = "sy".into();
    c.huge_partition_threshold = ByteSize::b(huge);
    c.retries = 1;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_partitions_and_spills_from_full_disks_go_to_hdfs() {
    let Some(nn) = namenode() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 1, 64 << 20);
    c.memory.single_buffer_threshold = ByteSize::mib(60);
    c.cold = Some(hdfs_cold(nn.clone(), 5_000));
    let store = Store::open(c).await.unwrap();
    store.register_app("a");
    let key = PartitionKey::new("a", 0, 0);
    let mut blocks: Vec<_> = (0..12).map(|i| block(i, 0, 1000)).collect();
    for chunk in blocks.chunks(3) {
        store.append(&key, chunk.to_vec(), None).await.unwrap();
        store.flush_shuffle("a", 0).await.unwrap();
    }
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (6000, 6000));
    // A segment written in several 8 MiB pieces.
    let big: Vec<_> = (12..18).map(|i| block(i, 1, 3 << 20)).collect();
    store.append(&key, big.clone(), None).await.unwrap();
    store.flush_shuffle("a", 0).await.unwrap();
    blocks.extend(big);
    let got = read_all(&store, &key).await;
    assert_same(&got, &blocks);
    let ids: Vec<i64> = got.iter().map(|b| b.meta.block_id).collect();
    assert_eq!(ids, (0..18).collect::<Vec<_>>());
    let expected: Vec<u8> = blocks.iter().flat_map(|b| b.data.to_vec()).collect();
    let span = store.read_data(&key, 5500, 5 << 20).await.unwrap();
    assert!(span[..] == expected[5500..5500 + (5 << 20)]);
    assert_eq!(store.cold_objects("a").await.unwrap().len(), 6);
    store.remove_app("a").await.unwrap();
    assert!(store.cold_objects("a").await.unwrap().is_empty());

    // Every disk full: spills go to HDFS; removal deletes them.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path(), 2, 1 << 20);
    // No filesystem has this much free: the disk starts Full.
    c.disks.min_free = ByteSize::b(u64::MAX);
    c.cold = Some(hdfs_cold(nn, 1 << 40));
    let store = Store::open(c).await.unwrap();
    store.register_app("b");
    let key = PartitionKey::new("b", 1, 0);
    let blocks: Vec<_> = (0..10).map(|i| block(i, 0, 1000)).collect();
    for half in blocks.chunks(5) {
        append_retry(&store, &key, half.to_vec()).await;
        store.flush_shuffle("b", 1).await.unwrap();
    }
    let stats = store.partition_stats(&key).unwrap();
    assert_eq!((stats.disk_bytes, stats.cold_bytes), (0, 10_000));
    assert_same(&read_all(&store, &key).await, &blocks);
    assert_eq!(store.cold_objects("b").await.unwrap().len(), 4);
    store.remove_shuffle("b", 1).await.unwrap();
    assert!(store.cold_objects("b").await.unwrap().is_empty());
}
