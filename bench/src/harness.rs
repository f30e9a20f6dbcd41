//! What the benches that drive M mappers and then readers against a server
//! (uniffle, celeborn, flink) share, so each states only its protocol's
//! calls: the loopback TCP baseline, the payload pattern, latency
//! histograms, running one task per mapper or reader, handing partitions to
//! readers one at a time, and the figures of a phase against the baseline.

use std::future::Future;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::ensure;
use bytes::Bytes;
use hdrhistogram::Histogram;
use parking_lot::Mutex;

use crate::report::gbps;

/// A fresh application id for a bench run: `<prefix>-<unix millis>`.
/// `n` ports free on 127.0.0.1 now: all held open together until each is
/// known, so none repeats.
pub fn free_loopback_ports(n: usize) -> std::io::Result<Vec<u16>> {
    let held = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

pub fn app_id(prefix: &str) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{millis}")
}

/// 4 MiB of reproducible bytes that mappers cut their blocks from.
pub fn pattern() -> Bytes {
    Bytes::from(
        (0..(4usize << 20))
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// A histogram of microseconds, from 1 µs to 10 minutes.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("histogram bounds")
}

/// Request latencies, recorded by every task of a phase.
#[derive(Clone)]
pub struct Latency(Arc<Mutex<Histogram<u64>>>);

impl Default for Latency {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(histogram())))
    }
}

impl Latency {
    pub fn record(&self, elapsed: Duration) {
        self.0.lock().record(elapsed.as_micros() as u64).ok();
    }

    /// The latency at quantile `q`, in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        self.0.lock().value_at_quantile(q) as f64 / 1000.0
    }

    /// How many requests were recorded.
    pub fn count(&self) -> u64 {
        self.0.lock().len()
    }
}

/// Runs `tasks` copies of `work` at once (the i-th gets i), and waits for
/// all of them; the first error ends the phase.
pub async fn run_tasks<T, F, Fut>(tasks: usize, work: F) -> anyhow::Result<Vec<T>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = (0..tasks).map(|i| tokio::spawn(work(i))).collect();
    let mut out = Vec::with_capacity(tasks);
    for h in handles {
        out.push(h.await??);
    }
    Ok(out)
}

/// The read phase: `readers` readers share the work queue of `0..items`;
/// returns the phase's time and what they read together.
pub async fn read_phase<F, Fut>(
    readers: usize,
    items: i32,
    read: F,
) -> anyhow::Result<(Duration, Tally)>
where
    F: Fn(WorkQueue) -> Fut,
    Fut: Future<Output = anyhow::Result<Tally>> + Send + 'static,
{
    let started = Instant::now();
    let queue = WorkQueue::new(items);
    let tally = run_tasks(readers, |_| read(queue.clone()))
        .await?
        .into_iter()
        .sum();
    Ok((started.elapsed(), tally))
}

/// Partitions (or sub-partitions) handed to readers one at a time.
#[derive(Clone)]
pub struct WorkQueue {
    next: Arc<AtomicI32>,
    end: i32,
}

impl WorkQueue {
    pub fn new(end: i32) -> Self {
        Self {
            next: Arc::new(AtomicI32::new(0)),
            end,
        }
    }

    /// The next item, until all of `0..end` are taken.
    pub fn take(&self) -> Option<i32> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        (i < self.end).then_some(i)
    }
}

/// What readers read back: records (blocks, batches) and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub items: u64,
    pub bytes: u64,
}

impl std::iter::Sum for Tally {
    fn sum<I: Iterator<Item = Tally>>(iter: I) -> Tally {
        iter.fold(Tally::default(), |a, b| Tally {
            items: a.items + b.items,
            bytes: a.bytes + b.bytes,
        })
    }
}

/// One phase's figures: its time, and its throughput over `bytes` as GB/s
/// and as a percentage of the loopback baseline.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub time: Duration,
    pub gbps: f64,
    pub percent_of_baseline: f64,
}

impl Phase {
    pub fn new(bytes: u64, time: Duration, baseline: f64) -> Self {
        let gbps = gbps(bytes, time);
        Self {
            time,
            gbps,
            percent_of_baseline: gbps / baseline * 100.0,
        }
    }

    pub fn secs(&self) -> f64 {
        self.time.as_secs_f64()
    }
}

/// Measures raw loopback TCP over up to 4 GiB of `total` and prints it: the
/// baseline every mapper bench compares its throughput with.
pub async fn loopback_baseline(total: u64) -> anyhow::Result<f64> {
    let baseline = loopback_tcp_gbps(total.min(4 << 30)).await?;
    println!("baseline: raw loopback TCP {baseline:.3} GB/s (one stream)");
    Ok(baseline)
}

/// One TCP stream over loopback: what the wire can carry on this machine.
async fn loopback_tcp_gbps(bytes: u64) -> anyhow::Result<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let sink = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        loop {
            let r = s.read(&mut buf).await?;
            if r == 0 {
                return Ok::<_, std::io::Error>(n);
            }
            n += r as u64;
        }
    });
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let chunk = vec![7u8; 1 << 20];
    let started = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        s.write_all(&chunk).await?;
        sent += chunk.len() as u64;
    }
    s.shutdown().await?;
    drop(s);
    let received = tokio::time::timeout(Duration::from_secs(120), sink).await???;
    ensure!(received == sent, "loopback sink got {received} of {sent}");
    Ok(gbps(sent, started.elapsed()))
}
