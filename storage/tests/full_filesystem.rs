//! Real filesystems filling up: each test mounts a small tmpfs as its data dir
//! and writes several times its size. The disk stops taking writes by its own
//! free space (`min_free`), or fails with a real ENOSPC, and the spills go on in
//! the cold tier with nothing lost. The fault tests inject these errors; here the
//! kernel raises them.
//!
//! Mounting needs root. Without it each test prints `SKIPPED` and returns;
//! `SWITCHYARD_REQUIRE_TMPFS=1` makes that a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use bytesize::ByteSize;
use common::*;
use switchyard_storage::{Block, DiskHealth, PartitionKey, Store, StoreConfig};

/// A tmpfs of `size` mounted at a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: ByteSize) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={}", size.as_u64()))
            .arg("tmpfs")
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs(dir.to_path_buf())),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var("SWITCHYARD_REQUIRE_TMPFS").as_deref() != Ok("1"),
                    "cannot mount a tmpfs: {why}"
                );
                eprintln!("SKIPPED: cannot mount a tmpfs here (needs root): {why}");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

const DISK: ByteSize = ByteSize::mib(24);
const PARTITIONS: i32 = 4;
/// 64 MiB in all: well past what the tmpfs holds.
const BLOCKS_PER_PARTITION: i64 = 256;
const BLOCK_LEN: usize = 64 << 10;

/// One data dir on the tmpfs, a cold tier (a plain directory) beside it, and a
/// 4 MiB budget, so that spills of at most ~3 MiB (two at a time) go out while
/// the data arrives.
fn store_config(root: &Path, disk: &Path) -> StoreConfig {
    let mut c = with_cold(config(root, 1, 4 << 20), root, 1 << 40);
    c.disks.dirs = vec![disk.to_path_buf()];
    c
}

/// Writes every partition, flushes, and returns what was written.
async fn write_all(store: &Arc<Store>) -> Vec<(PartitionKey, Vec<Block>)> {
    store.register_app("a");
    let mut written: Vec<_> = (0..PARTITIONS)
        .map(|p| (PartitionKey::new("a", 0, p), Vec::new()))
        .collect();
    for i in 0..BLOCKS_PER_PARTITION {
        for (p, (key, blocks)) in written.iter_mut().enumerate() {
            let b = block(i * PARTITIONS as i64 + p as i64, p as i64, BLOCK_LEN);
            append_retry(store, key, vec![b.clone()]).await;
            blocks.push(b);
        }
    }
    store.flush_shuffle("a", 0).await.unwrap();
    written
}

/// Every block reads back, and the partitions are split between the disk and
/// the cold tier, with no byte kept in memory.
async fn assert_all_readable_across_tiers(
    store: &Arc<Store>,
    written: &[(PartitionKey, Vec<Block>)],
) {
    let (mut disk, mut cold) = (0, 0);
    for (key, blocks) in written {
        assert_same(&read_all(store, key).await, blocks);
        let s = store.partition_stats(key).unwrap();
        assert_eq!(s.memory_bytes, 0, "{key}: flushed");
        assert_eq!(
            s.disk_bytes + s.cold_bytes,
            (blocks.len() * BLOCK_LEN) as u64,
            "{key}: every byte on a tier"
        );
        disk += s.disk_bytes;
        cold += s.cold_bytes;
    }
    assert!(disk > 0, "the tmpfs took data first");
    assert!(cold > 0, "the rest went cold");
    assert!(disk < DISK.as_u64(), "the tmpfs holds at most its size");
}

/// Removing the app frees the tmpfs: the health check (or, after a fault, the
/// probe) lets the disk take writes again.
async fn recovers_after_removal(store: &Arc<Store>) {
    store.remove_app("a").await.unwrap();
    wait_until("disk healthy after removal", || {
        store.status().disks[0].health == DiskHealth::Healthy
    })
    .await;
    store.shutdown().await;
}

#[tokio::test]
async fn a_disk_short_of_min_free_takes_no_writes_and_spills_go_cold() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("tmpfs");
    let Some(_fs) = Tmpfs::mount(&disk, DISK) else {
        return;
    };
    let mut c = store_config(dir.path(), &disk);
    c.disks.min_free = ByteSize::mib(8);
    c.disks.resume_margin = ByteSize::mib(1);
    let store = Store::open(c).await.unwrap();
    let written = write_all(&store).await;

    let status = &store.status().disks[0];
    assert_eq!(status.health, DiskHealth::Full, "{status:?}");
    assert!(
        status.available_bytes < ByteSize::mib(9).as_u64(),
        "{status:?}"
    );
    // The reserve stopped writes before the filesystem ran out.
    assert_eq!(status.write_errors, 0, "{status:?}");
    assert_all_readable_across_tiers(&store, &written).await;

    recovers_after_removal(&store).await;
}

#[tokio::test]
async fn a_real_enospc_faults_the_disk_and_its_batch_goes_cold() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("tmpfs");
    let Some(_fs) = Tmpfs::mount(&disk, DISK) else {
        return;
    };
    // No reserve: the kernel's ENOSPC is what stops the disk, mid-write.
    let store = Store::open(store_config(dir.path(), &disk)).await.unwrap();
    let written = write_all(&store).await;

    let status = &store.status().disks[0];
    assert!(status.write_errors >= 1, "ENOSPC was hit: {status:?}");
    assert_ne!(status.health, DiskHealth::Healthy, "{status:?}");
    // Bytes a failed write left past a segment's committed length are never
    // read: every block still reads back exactly.
    assert_all_readable_across_tiers(&store, &written).await;

    recovers_after_removal(&store).await;
}
