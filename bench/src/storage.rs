//! `switchyard-bench storage`: M writers push N bytes through the block store
//! into one data directory, then everything is read back and every block's
//! CRC checked. The same directory's raw sequential write and read bandwidth
//! is measured in the same run as the baseline.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use switchyard_storage::{Block, BlockMeta, IndexRecord, PartitionKey, Store, StoreConfig};

use crate::harness::{self, Tally, WorkQueue};
use crate::report::{self, gbps, mib};

#[derive(Debug, Clone, clap::Args)]
pub struct StorageBenchArgs {
    /// Directory to benchmark (a data dir on the disk under test).
    #[arg(long, default_value = "bench-data")]
    pub dir: PathBuf,
    /// Bytes to write in total.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Partitions the writers spread blocks over.
    #[arg(long, default_value_t = 64)]
    pub partitions: i32,
    /// Size of each block.
    #[arg(long, default_value = "256KiB")]
    pub block_size: ByteSize,
    /// The store's memory budget.
    #[arg(long, default_value = "256MiB")]
    pub memory: ByteSize,
    /// Reader request size (Uniffle's read buffer is 14 MiB).
    #[arg(long, default_value = "14MiB")]
    pub read_size: ByteSize,
}

pub async fn run(args: StorageBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.writers > 0 && args.partitions > 0,
        "writers and partitions must be > 0"
    );
    let block_size = args.block_size.as_u64() as usize;
    ensure!(block_size > 0, "block size must be > 0");
    let blocks_total = (args.size.as_u64() as usize).div_ceil(block_size);
    let total = (blocks_total * block_size) as u64;
    std::fs::create_dir_all(&args.dir)?;
    let raw_path = args.dir.join("raw-baseline.bin");
    let store_dir = args.dir.join("store");
    let _ = std::fs::remove_dir_all(&store_dir);

    println!(
        "storage bench: {} in {} blocks of {}, {} writers, {} partitions, memory budget {}, dir {}",
        ByteSize::b(total),
        blocks_total,
        args.block_size,
        args.writers,
        args.partitions,
        args.memory,
        args.dir.display()
    );

    // Baseline: one sequential writer and reader on the same directory.
    let (raw_write, raw_read, cache_dropped) = raw(&raw_path, total).await?;
    println!(
        "raw sequential write {:.3} GB/s, read {:.3} GB/s (before the store run; page cache dropped before read: {})",
        gbps(total, raw_write),
        gbps(total, raw_read),
        cache_dropped
    );
    let rss_before = report::current_rss().unwrap_or(0);

    let mut config = StoreConfig::default();
    config.memory.capacity = args.memory;
    config.memory.single_buffer_threshold =
        ByteSize::b((args.memory.as_u64() / args.partitions as u64 / 2).max(block_size as u64));
    config.disks.dirs = vec![store_dir.clone()];
    let store = Store::open(config).await?;
    let app = "bench-app";
    store.register_app(app);

    // Writers: each block is a fresh allocation, as if read off a socket,
    // copied from one of 16 prepared contents (their CRCs computed once).
    let contents = Arc::new(contents(block_size));
    let started = Instant::now();
    let backoffs: u64 = harness::run_tasks(args.writers, |w| {
        let writer = Writer {
            store: store.clone(),
            contents: contents.clone(),
            w,
            writers: args.writers,
            partitions: args.partitions,
        };
        writer.write(app, blocks_total)
    })
    .await?
    .into_iter()
    .sum();
    let append_done = started.elapsed();
    store.flush_shuffle(app, 0).await?;
    tokio::task::spawn_blocking(nix::unistd::sync).await?;
    let flush_done = started.elapsed();
    let peak_after_write = report::peak_rss().unwrap_or(0);

    // Readers: one task per partition at a time, like reducers.
    let cache_dropped_store = report::drop_page_cache();
    let read_started = Instant::now();
    let queue = WorkQueue::new(args.partitions);
    let read_size = args.read_size.as_u64();
    let read: Tally = harness::run_tasks(args.writers, |_| {
        read_partitions(store.clone(), queue.clone(), app, read_size)
    })
    .await?
    .into_iter()
    .sum();
    let (read_blocks, read_bytes) = (read.items, read.bytes);
    let read_time = read_started.elapsed();
    ensure!(
        read_blocks == blocks_total as u64 && read_bytes == total,
        "read back {read_blocks} blocks / {read_bytes} bytes, wrote {blocks_total} / {total}"
    );
    let peak = report::peak_rss().unwrap_or(0);
    store.remove_app(app).await?;
    store.shutdown().await;
    let _ = std::fs::remove_dir_all(&store_dir);

    // The device is measured again after the store's run: shared and virtual
    // disks vary by tens of percent between runs, so the store is compared
    // with the mean of both measurements.
    let (raw_write2, raw_read2, _) = raw(&raw_path, total).await?;
    println!(
        "raw sequential write {:.3} GB/s, read {:.3} GB/s (after the store run)",
        gbps(total, raw_write2),
        gbps(total, raw_read2)
    );
    let raw_write_gbps = (gbps(total, raw_write) + gbps(total, raw_write2)) / 2.0;
    let raw_read_gbps = (gbps(total, raw_read) + gbps(total, raw_read2)) / 2.0;

    let budget = args.memory.as_u64();
    let flush_ratio = gbps(total, flush_done) / raw_write_gbps;
    println!(
        "append     {:.3} GB/s ({:.2} s, {} no-buffer retries)",
        gbps(total, append_done),
        append_done.as_secs_f64(),
        backoffs
    );
    println!(
        "append+flush {:.3} GB/s ({:.2} s) = {:.0}% of mean raw write (target >= 70%)",
        gbps(total, flush_done),
        flush_done.as_secs_f64(),
        flush_ratio * 100.0
    );
    println!(
        "read+verify {:.3} GB/s ({:.2} s, {} blocks crc-checked, page cache dropped: {}) = {:.0}% of mean raw read",
        gbps(total, read_time),
        read_time.as_secs_f64(),
        read_blocks,
        cache_dropped_store,
        gbps(total, read_time) / raw_read_gbps * 100.0
    );
    println!(
        "peak RSS {:.0} MiB (after writes {:.0} MiB, before store {:.0} MiB); budget {:.0} MiB + 64 MiB = {:.0} MiB: {}",
        mib(peak),
        mib(peak_after_write),
        mib(rss_before),
        mib(budget),
        mib(budget + (64 << 20)),
        if peak <= budget + (64 << 20) { "within" } else { "OVER" }
    );
    Ok(())
}

/// The 16 block contents writers copy from, with their CRCs.
fn contents(block_size: usize) -> Vec<(Vec<u8>, i64)> {
    let pattern = pattern_bytes(block_size + 16 * 4099);
    (0..16)
        .map(|k| {
            let data = pattern[k * 4099..k * 4099 + block_size].to_vec();
            let crc = crc32fast::hash(&data) as i64;
            (data, crc)
        })
        .collect()
}

/// One writer: every `writers`-th block, appended (retried on backpressure).
struct Writer {
    store: Arc<Store>,
    contents: Arc<Vec<(Vec<u8>, i64)>>,
    w: usize,
    writers: usize,
    partitions: i32,
}

impl Writer {
    /// Appends this writer's blocks; returns how often the store answered
    /// with backpressure.
    async fn write(self, app: &'static str, blocks_total: usize) -> anyhow::Result<u64> {
        let mut backoffs = 0u64;
        for i in (self.w..blocks_total).step_by(self.writers) {
            let (data, crc) = &self.contents[i % self.contents.len()];
            let block = make_block(i as i64, self.w as i64, data, *crc);
            let key = PartitionKey::new(app, 0, (i % self.partitions as usize) as i32);
            loop {
                match self.store.append(&key, vec![block.clone()], None).await {
                    Ok(()) => break,
                    Err(e) if e.is_backpressure() => {
                        backoffs += 1;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => return Err(anyhow::anyhow!(e)),
                }
            }
        }
        Ok(backoffs)
    }
}

/// A reader: partitions from `queue`, one at a time, like reducers.
async fn read_partitions(
    store: Arc<Store>,
    queue: WorkQueue,
    app: &'static str,
    read_size: u64,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    while let Some(p) = queue.take() {
        let key = PartitionKey::new(app, 0, p);
        let (b, n) = read_partition(&store, &key, read_size).await?;
        tally.items += b;
        tally.bytes += n;
    }
    Ok(tally)
}

/// The raw sequential write and read of `total` bytes at `path` (then
/// removed), on a blocking thread.
async fn raw(path: &Path, total: u64) -> anyhow::Result<(Duration, Duration, bool)> {
    let owned = path.to_path_buf();
    let measured = tokio::task::spawn_blocking(move || raw_baseline(&owned, total)).await??;
    let _ = std::fs::remove_file(path);
    Ok(measured)
}

/// Reads a partition as a Uniffle reducer does (index, then data in
/// `read_size` segments) and checks every block's CRC.
async fn read_partition(
    store: &Arc<Store>,
    key: &PartitionKey,
    read_size: u64,
) -> anyhow::Result<(u64, u64)> {
    let index = store.read_index(key).await?;
    let records = IndexRecord::decode_all(&index.index);
    let mut i = 0;
    let mut bytes = 0;
    while i < records.len() {
        let start = records[i].offset;
        let mut j = i;
        let mut len = 0;
        while j < records.len() && len < read_size {
            len += records[j].length as u64;
            j += 1;
        }
        let data = store.read_data(key, start, len).await?;
        for r in &records[i..j] {
            let at = (r.offset - start) as usize;
            let block = &data[at..at + r.length as usize];
            ensure!(
                crc32fast::hash(block) as i64 == r.crc,
                "crc mismatch in block {}",
                r.block_id
            );
        }
        bytes += len;
        i = j;
    }
    Ok((records.len() as u64, bytes))
}

fn pattern_bytes(len: usize) -> Vec<u8> {
    // xorshift: incompressible, cheap, reproducible.
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn make_block(id: i64, map: i64, data: &[u8], crc: i64) -> Block {
    Block {
        meta: BlockMeta {
            block_id: id,
            map_id: map,
            batch_id: None,
            crc,
            uncompressed_len: data.len() as i32,
        },
        data: Bytes::copy_from_slice(data),
    }
}

/// Sequential write (4 MiB writes, then sync(2)) and read.
fn raw_baseline(path: &Path, total: u64) -> anyhow::Result<(Duration, Duration, bool)> {
    let chunk = pattern_bytes(4 << 20);
    let started = Instant::now();
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)
        .context("raw baseline file")?;
    let mut written = 0;
    while written < total {
        let n = (total - written).min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        written += n as u64;
    }
    drop(f);
    // The same durability point as the store's run: sync(2) after the writes.
    nix::unistd::sync();
    let write = started.elapsed();
    let dropped = report::drop_page_cache();
    let started = Instant::now();
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 4 << 20];
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    ensure!(read == total, "raw read {read} of {total}");
    Ok((write, started.elapsed(), dropped))
}
