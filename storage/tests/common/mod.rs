//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_storage::{
    Block, BlockMeta, ColdBackend, ColdConfig, IndexRecord, PartitionKey, Store, StoreConfig,
};

/// A block whose bytes are derived from its id, so any read can be checked.
pub fn block(id: i64, map_id: i64, len: usize) -> Block {
    let data: Vec<u8> = (0..len)
        .map(|i| (id as u64).wrapping_mul(31).wrapping_add(i as u64 * 7) as u8)
        .collect();
    let crc = crc32fast::hash(&data) as i64;
    Block {
        meta: BlockMeta {
            block_id: id,
            map_id,
            batch_id: None,
            crc,
            uncompressed_len: len as i32 * 2,
        },
        data: Bytes::from(data),
    }
}

pub fn config(root: &Path, disks: usize, memory: u64) -> StoreConfig {
    let mut c = StoreConfig::default();
    c.disks.dirs = (0..disks).map(|i| root.join(format!("disk{i}"))).collect();
    c.memory.capacity = ByteSize::b(memory);
    c.memory.single_buffer_threshold = ByteSize::b(memory / 4);
    c.memory.spill_check_interval = Duration::from_millis(20);
    c.disks.health_check_interval = Duration::from_millis(50);
    c.disks.error_cooldown = Duration::from_millis(100);
    // Tests must not depend on the free space of the machine they run on: a
    // truly full disk shows up as ENOSPC, which the fault tests cover.
    c.disks.min_free = ByteSize::b(0);
    c.disks.resume_margin = ByteSize::b(0);
    // Beside the data dirs, so that tests counting their files count data only.
    c.recovery.path = Some(root.join("meta").join("manifest.redb"));
    c
}

pub fn with_cold(mut c: StoreConfig, root: &Path, huge: u64) -> StoreConfig {
    let mut cold = ColdConfig::new(ColdBackend::Fs {
        root: root.join("cold"),
    });
    cold.prefix = "sy".into();
    cold.huge_partition_threshold = ByteSize::b(huge);
    cold.write_concurrency = 2;
    c.cold = Some(cold);
    c
}

/// Reads a partition the way a Uniffle reducer does: memory first, then the
/// persisted index and data; returns blocks in persisted-then-memory order,
/// deduplicated by block id.
pub async fn read_all(store: &Arc<Store>, key: &PartitionKey) -> Vec<Block> {
    let memory = store
        .read_memory(key, None, u64::MAX, &|_| true)
        .unwrap()
        .blocks;
    let index = store.read_index(key).await.unwrap();
    let records = index.records();
    check_contiguous(&records, index.data_len);
    let mut out: Vec<Block> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    if index.data_len > 0 {
        let data = store.read_data(key, 0, index.data_len).await.unwrap();
        for r in &records {
            let bytes = data.slice(r.offset as usize..r.end() as usize);
            assert_eq!(
                crc32fast::hash(&bytes) as i64,
                r.crc,
                "crc of block {}",
                r.block_id
            );
            if seen.insert(r.block_id) {
                out.push(Block {
                    meta: BlockMeta {
                        block_id: r.block_id,
                        map_id: r.map_id,
                        batch_id: None,
                        crc: r.crc,
                        uncompressed_len: r.uncompressed_len,
                    },
                    data: bytes,
                });
            }
        }
    }
    for b in memory {
        if seen.insert(b.meta.block_id) {
            out.push(b);
        }
    }
    out
}

/// Uniffle's invariant: records are contiguous from 0 and end at data_len.
pub fn check_contiguous(records: &[IndexRecord], data_len: u64) {
    let mut expected = 0;
    for r in records {
        assert_eq!(r.offset, expected, "index records must be contiguous");
        expected = r.end();
    }
    assert_eq!(expected, data_len, "index must end at the data length");
}

/// Compares what was read with what was appended (ids, metadata, bytes).
pub fn assert_same(read: &[Block], written: &[Block]) {
    let by_id: HashMap<i64, &Block> = read.iter().map(|b| (b.meta.block_id, b)).collect();
    assert_eq!(read.len(), written.len(), "block count");
    for w in written {
        let r = by_id
            .get(&w.meta.block_id)
            .unwrap_or_else(|| panic!("block {} lost", w.meta.block_id));
        assert_eq!(r.data, w.data, "bytes of block {}", w.meta.block_id);
        assert_eq!(r.meta.crc, w.meta.crc);
        assert_eq!(r.meta.map_id, w.meta.map_id);
        assert_eq!(r.meta.uncompressed_len, w.meta.uncompressed_len);
    }
}

/// Appends, retrying while the store pushes back.
pub async fn append_retry(store: &Arc<Store>, key: &PartitionKey, blocks: Vec<Block>) {
    for _ in 0..2000 {
        match store.append(key, blocks.clone(), None).await {
            Ok(()) => return,
            Err(e) if e.is_backpressure() => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(e) => panic!("append failed: {e}"),
        }
    }
    panic!("append kept getting no-buffer for 10 s");
}

pub async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}
