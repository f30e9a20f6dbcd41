//! `switchyard-bench memory-wait`: how long a writer that found the memory
//! budget full waits after memory is released.
//!
//! Each round fills the budget with a reservation, starts `waiters` appends
//! that cannot fit, releases the reservation and times each append from the
//! release to its return. Two ways of waiting run interleaved, round by
//! round, in the same process:
//! - `notify`: [`Store::append_waiting`], woken by the release itself (what
//!   Celeborn pushes use);
//! - `poll 5 ms` (the baseline): retry the append every 5 ms, the loop
//!   Celeborn pushes ran before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use bytes::Bytes;
use bytesize::ByteSize;
use hdrhistogram::Histogram;
use switchyard_storage::{Block, BlockMeta, PartitionKey, Store, StoreConfig};

#[derive(Debug, Clone, clap::Args)]
pub struct MemoryWaitBenchArgs {
    /// Scratch directory for the store's data dir (removed afterwards).
    #[arg(long, default_value = "bench-data")]
    pub dir: std::path::PathBuf,
    /// Rounds per way of waiting.
    #[arg(long, default_value_t = 200)]
    pub rounds: usize,
    /// Appends waiting at once in each round.
    #[arg(long, default_value_t = 16)]
    pub waiters: usize,
    /// Size of each waiting append.
    #[arg(long, default_value = "64KiB")]
    pub block_size: ByteSize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Notify,
    Poll,
}

const POLL: Duration = Duration::from_millis(5);
const MAX_WAIT: Duration = Duration::from_secs(30);

pub async fn run(args: MemoryWaitBenchArgs) -> anyhow::Result<()> {
    ensure!(
        args.rounds > 0 && args.waiters > 0,
        "rounds and waiters must be > 0"
    );
    let block = args.block_size.as_u64().max(1);
    let data_dir = args.dir.join("memory-wait");
    let _ = std::fs::remove_dir_all(&data_dir);
    let mut config = StoreConfig::default();
    config.disks.dirs = vec![data_dir.clone()];
    config.disks.min_free = ByteSize::b(0);
    // Room for every waiter's block, with nothing spilling meanwhile.
    let capacity = (block + 64) * args.waiters as u64 * 2;
    config.memory.capacity = ByteSize::b(capacity);
    config.memory.single_buffer_threshold = ByteSize::b(capacity);
    config.memory.high_watermark = 1.0;
    config.memory.low_watermark = 0.99;
    let store = Store::open(config).await?;
    store.register_app("bench");
    println!(
        "memory-wait bench: {} rounds x {} waiters of {} each way, budget {}",
        args.rounds,
        args.waiters,
        args.block_size,
        ByteSize::b(capacity)
    );

    let mut notify = Histogram::<u64>::new(3)?;
    let mut poll = Histogram::<u64>::new(3)?;
    for round in 0..args.rounds {
        for wait in [Wait::Notify, Wait::Poll] {
            let shuffle = (round * 2 + (wait == Wait::Poll) as usize) as i32;
            let hist = if wait == Wait::Notify {
                &mut notify
            } else {
                &mut poll
            };
            one_round(&store, shuffle, args.waiters, block, wait, hist).await?;
            store.remove_shuffle("bench", shuffle).await?;
        }
    }
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64;
    println!(
        "{:<12} {:>10} {:>10} {:>10}",
        "wait", "p50 us", "p99 us", "max us"
    );
    for (name, h) in [("notify", &notify), ("poll 5 ms", &poll)] {
        println!(
            "{name:<12} {:>10.0} {:>10.0} {:>10.0}",
            us(h, 0.5),
            us(h, 0.99),
            h.max() as f64
        );
    }
    println!(
        "ratio notify/poll: p50 {:.3}, p99 {:.3}",
        us(&notify, 0.5) / us(&poll, 0.5).max(1.0),
        us(&notify, 0.99) / us(&poll, 0.99).max(1.0)
    );
    store.shutdown().await;
    let _ = std::fs::remove_dir_all(&data_dir);
    Ok(())
}

async fn one_round(
    store: &Arc<Store>,
    shuffle: i32,
    waiters: usize,
    block: u64,
    wait: Wait,
    hist: &mut Histogram<u64>,
) -> anyhow::Result<()> {
    let hold = store.reserve(store.budget().capacity() - store.budget().used())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let mut tasks = Vec::with_capacity(waiters);
    for w in 0..waiters {
        let store = store.clone();
        let tx = tx.clone();
        let key = PartitionKey::new("bench", shuffle, w as i32);
        let data = Bytes::from(vec![w as u8; block as usize]);
        tasks.push(tokio::spawn(async move {
            let blocks = vec![Block {
                meta: BlockMeta {
                    block_id: w as i64,
                    map_id: 0,
                    batch_id: None,
                    crc: 0,
                    uncompressed_len: 0,
                },
                data,
            }];
            let result = match wait {
                Wait::Notify => store.append_waiting(&key, blocks, MAX_WAIT).await,
                Wait::Poll => loop {
                    match store.append(&key, blocks.clone(), None).await {
                        Err(e) if e.is_backpressure() => tokio::time::sleep(POLL).await,
                        other => break other,
                    }
                },
            };
            let _ = tx.send(Instant::now());
            result
        }));
    }
    drop(tx);
    // Every waiter has found the budget full by now.
    tokio::time::sleep(Duration::from_millis(20)).await;
    ensure!(rx.is_empty(), "an append went through with the budget full");
    let released = Instant::now();
    drop(hold);
    while let Some(done) = rx.recv().await {
        hist.record(done.duration_since(released).as_micros() as u64)?;
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}
