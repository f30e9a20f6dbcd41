//! `switchyard-bench restart`: what durable metadata costs and buys.
//!
//! 1. Time to ready: a child process commits N partitions (one block each,
//!    committed as Uniffle's reportShuffleResult commits them: a map task's
//!    partitions at a time, several tasks at once), prints `committed`, and
//!    is killed with SIGKILL. The store is then opened on the same dir: the
//!    open (manifest read, partitions rebuilt) is the time to ready, then
//!    every partition's index is read and its block checked. Prints the
//!    manifest's bytes per partition.
//! 2. Write path: map tasks append to their partitions and commit them, with
//!    recovery on and off, interleaved, same run; prints throughput and the
//!    ratio.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_storage::{Block, BlockMeta, PartitionKey, Store, StoreConfig};

use crate::report::{gbps, mib};

#[derive(Debug, Clone, clap::Args)]
pub struct RestartBenchArgs {
    /// Directory for the stores (removed and recreated per run).
    #[arg(long, default_value = "bench-restart")]
    pub dir: PathBuf,
    /// Committed partition counts to restart with, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub partitions: Vec<usize>,
    /// Partitions one commit (one map task's report) covers.
    #[arg(long, default_value_t = 64)]
    pub per_commit: usize,
    /// Commits in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Bytes written per run of the write-path comparison.
    #[arg(long, default_value = "1GiB")]
    pub write_size: ByteSize,
    /// Block size in the write-path comparison.
    #[arg(long, default_value = "64KiB")]
    pub block_size: ByteSize,
    /// Interleaved pairs (on, off) of the write-path comparison.
    #[arg(long, default_value_t = 3)]
    pub pairs: usize,
    /// Internal: run as the child that commits and waits to be killed.
    #[arg(long, hide = true)]
    pub child_commit: Option<usize>,
}

fn config(dir: &Path, recovery: bool) -> StoreConfig {
    let mut c = StoreConfig::default();
    c.disks.dirs = vec![dir.join("data")];
    c.disks.min_free = ByteSize::mib(64);
    c.memory.capacity = ByteSize::mib(512);
    c.recovery.enabled = recovery;
    // The bench's own dirs start empty; nothing to sweep while it runs.
    c.recovery.orphan_grace = Duration::from_secs(3600);
    c
}

fn block(id: i64, len: usize) -> Block {
    let data: Vec<u8> = (0..len).map(|i| (id as usize * 31 + i * 7) as u8).collect();
    Block {
        meta: BlockMeta {
            block_id: id,
            map_id: id,
            batch_id: None,
            crc: crc32fast::hash(&data) as i64,
            uncompressed_len: len as i32,
        },
        data: Bytes::from(data),
    }
}

/// Appends one block to each of `n` partitions of app "a" and commits them
/// `per_commit` at a time, `concurrency` commits at once.
async fn commit_partitions(
    store: &Arc<Store>,
    n: usize,
    per_commit: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    store.register_app("a");
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (store, next) = (store.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(per_commit, std::sync::atomic::Ordering::Relaxed);
                if start >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (start + per_commit).min(n);
                let mut parts = Vec::new();
                for p in start..end {
                    let key = PartitionKey::new("a", 0, p as i32);
                    store.append(&key, vec![block(p as i64, 256)], None).await?;
                    parts.push(key.partition);
                }
                store
                    .commit_partitions("a", 0, &parts, vec![(format!("r{start}"), vec![1; 64])])
                    .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

pub async fn run(args: RestartBenchArgs) -> anyhow::Result<()> {
    if let Some(n) = args.child_commit {
        return child_commit(&args, n).await;
    }
    ensure!(
        args.per_commit > 0 && args.concurrency > 0,
        "per-commit and concurrency must be > 0"
    );
    println!("restart bench: commit N partitions, kill -9, reopen; then the write path with recovery on and off");
    for &n in &args.partitions {
        time_to_ready(&args, n).await?;
    }
    write_path(&args).await
}

/// The child: commits `n` partitions, says so, and waits to be killed.
async fn child_commit(args: &RestartBenchArgs, n: usize) -> anyhow::Result<()> {
    let store = Store::open(config(&args.dir, true)).await?;
    commit_partitions(&store, n, args.per_commit, args.concurrency).await?;
    println!("committed");
    // Killed here, with nothing flushed or closed on the way out.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    Ok(())
}

/// A child commits `n` partitions and is killed; the store reopened on its
/// dir must hold every one.
async fn time_to_ready(args: &RestartBenchArgs, n: usize) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(&args.dir);
    std::fs::create_dir_all(&args.dir)?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args(["restart", "--child-commit", &n.to_string()])
        .arg("--dir")
        .arg(&args.dir)
        .args([
            "--per-commit",
            &args.per_commit.to_string(),
            "--concurrency",
            &args.concurrency.to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the committing child")?;
    let mut out = tokio::io::BufReader::new(child.stdout.take().context("child stdout")?);
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut out, &mut line).await?;
    ensure!(
        line.trim() == "committed",
        "child ended before committing: {line:?}"
    );
    let commit_time = started.elapsed();
    child.start_kill()?;
    child.wait().await?;

    let opened = Instant::now();
    let store = Store::open(config(&args.dir, true)).await?;
    let ready = opened.elapsed();
    let status = store.recovery_status();
    ensure!(
        status.partitions as usize == n,
        "recovered {} of {n} partitions: {status:?}",
        status.partitions
    );
    let reads = Instant::now();
    for p in 0..n {
        let key = PartitionKey::new("a", 0, p as i32);
        let index = store.read_index(&key).await?;
        let records = index.records();
        ensure!(
            records.len() == 1 && records[0].block_id == p as i64,
            "partition {p}: {records:?}"
        );
        let data = store.read_data(&key, 0, index.data_len).await?;
        ensure!(
            data == block(p as i64, 256).data,
            "partition {p}: bytes differ"
        );
    }
    let read_all = reads.elapsed();
    println!(
        "{n} committed partitions: committed in {:.2} s; after kill -9, ready in {} ms (manifest read and {} partitions rebuilt in {} ms), \
         every index and block read back in {:.2} s; manifest {:.1} MiB, {} bytes per partition",
        commit_time.as_secs_f64(),
        ready.as_millis(),
        status.partitions,
        status.duration_ms,
        read_all.as_secs_f64(),
        mib(status.manifest_bytes),
        status.manifest_bytes / n.max(1) as u64
    );
    store.shutdown().await;
    Ok(())
}

/// The write path: map tasks of 64 partitions each append, then commit,
/// with recovery on and off in interleaved pairs.
async fn write_path(args: &RestartBenchArgs) -> anyhow::Result<()> {
    let block_size = args.block_size.as_u64() as usize;
    ensure!(block_size > 0, "block size must be > 0");
    let blocks = (args.write_size.as_u64() as usize).div_ceil(block_size);
    let template = block(0, block_size);
    let mut on = Vec::new();
    let mut off = Vec::new();
    for pair in 0..args.pairs {
        for recovery in [true, false] {
            let elapsed = write_run(args, recovery, blocks, &template).await?;
            let bytes = (blocks * block_size) as u64;
            println!(
                "pair {pair}: write and commit {} with recovery {}: {:.3} GB/s ({:.2} s)",
                ByteSize::b(bytes),
                if recovery { "on " } else { "off" },
                gbps(bytes, elapsed),
                elapsed.as_secs_f64()
            );
            if recovery {
                on.push(gbps(bytes, elapsed))
            } else {
                off.push(gbps(bytes, elapsed))
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    println!(
        "write path, mean of {} pairs: recovery on {:.3} GB/s, off {:.3} GB/s, ratio {:.2}",
        args.pairs,
        mean(&on),
        mean(&off),
        mean(&on) / mean(&off).max(f64::MIN_POSITIVE)
    );
    let _ = std::fs::remove_dir_all(&args.dir);
    Ok(())
}

/// One run of the write path on a fresh store: `blocks` copies of
/// `template`, committed 256 blocks (a map task) at a time.
async fn write_run(
    args: &RestartBenchArgs,
    recovery: bool,
    blocks: usize,
    template: &Block,
) -> anyhow::Result<Duration> {
    let _ = std::fs::remove_dir_all(&args.dir);
    let store = Store::open(config(&args.dir, recovery)).await?;
    store.register_app("w");
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks_per_map = 256;
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (store, next, template) = (store.clone(), next.clone(), template.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(tasks_per_map, std::sync::atomic::Ordering::Relaxed);
                if start >= blocks {
                    return Ok::<_, anyhow::Error>(());
                }
                let end = (start + tasks_per_map).min(blocks);
                for i in start..end {
                    let mut b = template.clone();
                    b.meta.block_id = i as i64;
                    let key = PartitionKey::new("w", 0, (i % 64) as i32);
                    loop {
                        match store.append(&key, vec![b.clone()], None).await {
                            Ok(()) => break,
                            Err(e) if e.is_backpressure() => {
                                tokio::time::sleep(Duration::from_millis(2)).await
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                let parts: Vec<i32> = (0..64).collect();
                store
                    .commit_partitions("w", 0, &parts, vec![(format!("r{start}"), vec![0; 512])])
                    .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed();
    store.shutdown().await;
    Ok(elapsed)
}
