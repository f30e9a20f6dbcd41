//! `switchyard-bench cold`: P huge partitions are written straight to the
//! cold tier (threshold 0), then read back two ways in the same run, each
//! after dropping the page cache:
//! - directly: every data object read sequentially through an OpenDAL
//!   operator with the tier's own layers, `--read-size` bytes per request;
//! - through the gateway: the store's chunked views (what the Celeborn fetch
//!   port serves; Uniffle's reads use the same ranged reads), which go
//!   through the cold read cache and its read-ahead.
//!
//! Both runs read the same bytes with one reader per partition; the gateway
//! run checks every partition's bytes against a CRC taken while writing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bytes::Bytes;
use bytesize::ByteSize;
use hdrhistogram::Histogram;
use switchyard_storage::{
    cold_operator, Block, BlockMeta, ColdBackend, ColdConfig, PartitionKey, Store, StoreConfig,
};

use crate::harness::{self, histogram};
use crate::report::{self, gbps, mib};

#[derive(Debug, Clone, clap::Args)]
pub struct ColdBenchArgs {
    /// Working directory: the store's local dir, and the `fs` cold root when
    /// no config is given.
    #[arg(long, default_value = "bench-cold")]
    pub dir: PathBuf,
    /// A switchyard TOML whose `[storage.cold]` names the cold tier to test
    /// (S3, HDFS); default: `fs` below `--dir`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Bytes to write in total.
    #[arg(long, default_value = "2GiB")]
    pub size: ByteSize,
    /// Huge partitions (one reader each).
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Block size.
    #[arg(long, default_value = "256KiB")]
    pub block_size: ByteSize,
    /// Bytes per read request (Celeborn's chunk size is 8 MiB).
    #[arg(long, default_value = "8MiB")]
    pub read_size: ByteSize,
    /// The store's memory budget.
    #[arg(long, default_value = "512MiB")]
    pub memory: ByteSize,
}

fn cold_config(args: &ColdBenchArgs) -> anyhow::Result<ColdConfig> {
    Ok(match &args.config {
        Some(path) => storage_section(path)?
            .cold
            .with_context(|| format!("{} has no [storage.cold]", path.display()))?,
        None => {
            let root = args.dir.join("cold");
            let _ = std::fs::remove_dir_all(&root);
            ColdConfig::new(ColdBackend::Fs { root })
        }
    })
}

/// The `[storage]` table of a switchyard TOML, read by the storage crate's
/// own types; the other tables are the gateway's and are left unread.
fn storage_section(path: &std::path::Path) -> anyhow::Result<StoreConfig> {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        storage: StoreConfig,
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    let file: File =
        toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))?;
    Ok(file.storage)
}

pub async fn run(args: ColdBenchArgs) -> anyhow::Result<()> {
    ensure!(args.partitions > 0, "partitions must be > 0");
    let block_size = args.block_size.as_u64() as usize;
    let read_size = args.read_size.as_u64();
    ensure!(block_size > 0 && read_size > 0, "sizes must be > 0");
    let per_partition =
        (args.size.as_u64() as usize / args.partitions as usize).div_ceil(block_size);
    let total = (per_partition * block_size * args.partitions as usize) as u64;
    let mut cold = cold_config(&args)?;
    cold.huge_partition_threshold = ByteSize::b(0);
    let service = cold.backend.service();
    std::fs::create_dir_all(&args.dir)?;
    let local = args.dir.join("store");
    let _ = std::fs::remove_dir_all(&local);
    println!(
        "cold bench: {} in {} partitions of {} blocks of {}, service {service}, read size {}, read cache {}, readahead {}",
        ByteSize::b(total),
        args.partitions,
        per_partition,
        args.block_size,
        args.read_size,
        cold.read_cache,
        cold.readahead
    );

    let mut config = StoreConfig::default();
    config.memory.capacity = args.memory;
    config.memory.single_buffer_threshold = ByteSize::mib(64);
    config.disks.dirs = vec![local];
    config.cold = Some(cold.clone());
    let store = Store::open(config).await?;
    let app = format!(
        "bench-cold-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis()
    );
    store.register_app(&app);

    // Write: one writer per partition, so each partition's stream is its
    // blocks in order and its CRC can be taken here.
    let pattern: Arc<Vec<u8>> = Arc::new(
        (0..block_size + 4096)
            .map(|i| (i * 31 % 251) as u8)
            .collect(),
    );
    let started = Instant::now();
    let crcs = harness::run_tasks(args.partitions as usize, |p| {
        let key = PartitionKey::new(app.as_str(), 0, p as i32);
        write_partition(
            store.clone(),
            key,
            pattern.clone(),
            per_partition,
            block_size,
        )
    })
    .await?;
    store.flush_shuffle(&app, 0).await?;
    let write_time = started.elapsed();
    let tiers = store.status().tiers;
    println!(
        "written: {:.3} GB/s to the cold tier ({} MiB cold, {} MiB on local disk, {} MiB in memory)",
        gbps(total, write_time),
        mib(tiers.cold) as u64,
        mib(tiers.disk) as u64,
        mib(tiers.memory) as u64
    );
    ensure!(tiers.cold == total, "every byte must be cold: {tiers:?}");

    let op = cold_operator(&cold)?;
    let mut objects = Vec::new();
    for path in store.cold_objects(&app).await? {
        if path.ends_with(".data") {
            let len = op.stat(&path).await?.content_length();
            objects.push((path, len));
        }
    }
    ensure!(
        objects.iter().map(|o| o.1).sum::<u64>() == total,
        "the data objects must hold every byte"
    );

    let mut ratios = Vec::new();
    for round in 1..=2 {
        let dropped = report::drop_page_cache();
        let (direct_time, direct_hist) =
            read_direct(&op, &objects, read_size, args.partitions as usize).await?;
        report::drop_page_cache();
        store.clear_cold_read_cache();
        let (gateway_time, gateway_hist) =
            read_gateway(&store, &app, args.partitions, read_size, &crcs).await?;
        let (direct, gateway) = (gbps(total, direct_time), gbps(total, gateway_time));
        ratios.push(gateway / direct);
        println!(
            "round {round}: direct OpenDAL read {direct:.3} GB/s (p99 request {:.1} ms), through the gateway {gateway:.3} GB/s (p99 chunk {:.1} ms), ratio {:.2} (page cache dropped: {dropped})",
            direct_hist.value_at_quantile(0.99) as f64 / 1000.0,
            gateway_hist.value_at_quantile(0.99) as f64 / 1000.0,
            gateway / direct
        );
    }
    let s = store.status();
    if let Some(c) = &s.cold {
        println!(
            "gateway cold reads: {} requests, {} cache hits, {} read-aheads skipped for the read budget, {} MiB cached now",
            c.read_requests,
            c.read_cache_hits,
            c.readahead_skipped,
            mib(c.read_cache_bytes) as u64
        );
    }
    println!(
        "result: cold read through the gateway at {:.2}x a direct OpenDAL read (mean of {} rounds); peak RSS {} MiB",
        ratios.iter().sum::<f64>() / ratios.len() as f64,
        ratios.len(),
        report::peak_rss().map(|b| mib(b) as u64).unwrap_or(0)
    );
    store.remove_app(&app).await?;
    ensure!(
        store.cold_objects(&app).await?.is_empty(),
        "cold objects left after removal"
    );
    Ok(())
}

/// Writes partition `key`'s blocks in order; returns the CRC of its bytes.
async fn write_partition(
    store: Arc<Store>,
    key: PartitionKey,
    pattern: Arc<Vec<u8>>,
    per_partition: usize,
    block_size: usize,
) -> anyhow::Result<u32> {
    let p = key.partition;
    let mut crc = crc32fast::Hasher::new();
    for i in 0..per_partition {
        let shift = (i * 7 + p as usize * 13) % 4096;
        let data = Bytes::copy_from_slice(&pattern[shift..shift + block_size]);
        crc.update(&data);
        let block = Block {
            meta: BlockMeta {
                block_id: i as i64,
                map_id: 0,
                batch_id: None,
                crc: 0,
                uncompressed_len: block_size as i32,
            },
            data,
        };
        loop {
            match store.append(&key, vec![block.clone()], None).await {
                Ok(()) => break,
                Err(e) if e.is_backpressure() => tokio::time::sleep(Duration::from_millis(1)).await,
                Err(e) => return Err(anyhow::anyhow!(e)),
            }
        }
    }
    Ok(crc.finalize())
}

/// Each data object read sequentially, one reader per object at a time,
/// `partitions` readers at once.
async fn read_direct(
    op: &opendal::Operator,
    objects: &[(String, u64)],
    read_size: u64,
    readers: usize,
) -> anyhow::Result<(Duration, Histogram<u64>)> {
    let started = Instant::now();
    let queue = Arc::new(parking_lot::Mutex::new(objects.to_vec()));
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let (op, queue) = (op.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let mut bytes = 0u64;
            loop {
                let Some((path, len)) = queue.lock().pop() else {
                    break;
                };
                let mut at = 0;
                while at < len {
                    let n = read_size.min(len - at);
                    let t = Instant::now();
                    let buf = op.read_with(&path).range(at..at + n).await?;
                    hist.record(t.elapsed().as_micros() as u64)?;
                    ensure!(buf.len() as u64 == n, "short read of {path}");
                    // The same per-byte work as the gateway run's check.
                    let mut crc = crc32fast::Hasher::new();
                    for chunk in buf {
                        crc.update(&chunk);
                    }
                    std::hint::black_box(crc.finalize());
                    bytes += n;
                    at += n;
                }
            }
            Ok::<_, anyhow::Error>((bytes, hist))
        }));
    }
    let mut hist = histogram();
    for t in tasks {
        hist.add(t.await??.1)?;
    }
    Ok((started.elapsed(), hist))
}

/// Every partition through a chunked view, one reader per partition, its
/// bytes checked against the writer's CRC.
async fn read_gateway(
    store: &Arc<Store>,
    app: &str,
    partitions: i32,
    read_size: u64,
    crcs: &[u32],
) -> anyhow::Result<(Duration, Histogram<u64>)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for p in 0..partitions {
        let store = store.clone();
        let key = PartitionKey::new(app, 0, p);
        let want = crcs[p as usize];
        tasks.push(tokio::spawn(async move {
            let mut hist = histogram();
            let view = store.open_view(&key, None, read_size).await?;
            let mut crc = crc32fast::Hasher::new();
            for i in 0..view.chunks.len() {
                let t = Instant::now();
                let chunk = store.read_chunk(&view, i).await?;
                hist.record(t.elapsed().as_micros() as u64)?;
                crc.update(&chunk);
            }
            ensure!(crc.finalize() == want, "partition {p} read back differs");
            Ok::<_, anyhow::Error>(hist)
        }));
    }
    let mut hist = histogram();
    for t in tasks {
        hist.add(t.await??)?;
    }
    Ok((started.elapsed(), hist))
}
