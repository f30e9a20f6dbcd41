//! The latency probes and the idle window of each level of the scale bench:
//! small pushes and reads while the node holds N partitions, and the node's
//! CPU while nothing but heartbeats, expiry checks, a metrics scrape and a
//! status request per interval run.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use parking_lot::Mutex;
use switchyard_clients::celeborn::{batch, Connection};
use switchyard_clients::uniffle::ClientBlock;

use super::load::{self, Clients, Endpoints, HeldApp};
use super::server::Server;
use crate::harness::Latency;

/// The applications the probes write into: shuffle 1 of each takes the
/// probe pushes (registered or reserved, never committed).
pub const PROBE_PARTITIONS: i32 = 64;

/// p50 and p99 of one kind of request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Quantiles {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

impl From<&Latency> for Quantiles {
    fn from(l: &Latency) -> Self {
        Quantiles {
            p50_ms: l.ms(0.5),
            p99_ms: l.ms(0.99),
        }
    }
}

/// What the probes measured at one level.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct ProbeFigures {
    pub uniffle_push: Quantiles,
    pub uniffle_read: Quantiles,
    pub celeborn_push: Quantiles,
    pub celeborn_read: Quantiles,
}

/// A small deterministic generator, so that reads pick partitions spread
/// over everything held.
pub struct Pick(u64);

impl Pick {
    pub fn new(seed: u64) -> Self {
        Pick(seed | 1)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// The partitions the read probes have read, over every level. Each read
/// probe reads a partition no probe read before, as a reducer reads its
/// partition once: its index is then out of the node's index cache at every
/// level alike. (Until 2026-12-07 the reads picked at random among what was
/// held, so at 0 partitions held they re-read the probes' own 64 partitions,
/// whose indexes the cache held, and at 10^6 read partitions never read: the
/// comparison was of a warm cache with a cold one, not of scale.)
#[derive(Default)]
pub struct ReadBefore(HashSet<(String, i32, i32)>);

impl ReadBefore {
    /// `n` partitions of `apps` that no probe has read, picked at random
    /// among all of them, and from now on counted as read.
    fn take(
        &mut self,
        apps: &[&HeldApp],
        n: usize,
        pick: &mut Pick,
    ) -> anyhow::Result<Vec<(HeldApp, i32, i32)>> {
        let mut unread: Vec<(usize, i32, i32)> = Vec::new();
        for (i, app) in apps.iter().enumerate() {
            for s in 0..app.shuffles {
                for p in 0..app.partitions {
                    if !self.0.contains(&(app.id.clone(), s, p)) {
                        unread.push((i, s, p));
                    }
                }
            }
        }
        ensure!(
            unread.len() >= n,
            "{} partitions not read yet, {n} read probes",
            unread.len()
        );
        // The first n of a Fisher-Yates shuffle.
        for k in 0..n {
            let j = k + pick.below(unread.len() - k);
            unread.swap(k, j);
        }
        Ok(unread[..n]
            .iter()
            .map(|&(i, s, p)| {
                self.0.insert((apps[i].id.clone(), s, p));
                (apps[i].clone(), s, p)
            })
            .collect())
    }
}

/// How many probe rounds, spread evenly over how long.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub samples: usize,
    pub over: Duration,
}

/// `samples` of each: a 64-byte Uniffle send (requireBuffer +
/// sendShuffleData), a 64-byte Celeborn push, and per protocol a read of a
/// partition held that no probe read before; one round of the four at a
/// time, the rounds started at an even pace over `pace.over`.
pub async fn probe(
    ep: &Endpoints,
    held: &[HeldApp],
    probes: (&HeldApp, &HeldApp),
    pace: Pace,
    read_before: &mut ReadBefore,
) -> anyhow::Result<ProbeFigures> {
    let samples = pace.samples;
    let mut clients = Clients::connect(ep).await?;
    let push = Connection::connect(ep.push_addr()?).await?;
    let mut pick = Pick::new(samples as u64 * 7919 + held.len() as u64);
    let of = |celeborn: bool| -> Vec<&HeldApp> {
        held.iter()
            .filter(|a| a.protocol.is_celeborn() == celeborn)
            .collect()
    };
    let reads = [
        read_before
            .take(&of(false), samples, &mut pick)
            .context("uniffle reads")?,
        read_before
            .take(&of(true), samples, &mut pick)
            .context("celeborn reads")?,
    ];
    let [up, ur, cp, cr]: [Latency; 4] = Default::default();
    let key = switchyard_celeborn::ShuffleKey::new(&probes.1.id, 1).to_string();
    let period = pace.over / samples.max(1) as u32;
    let mut rounds = tokio::time::interval(period.max(Duration::from_nanos(1)));
    // A round late behind a slow one starts at once and the pace goes on
    // from there, rather than bursting to catch up.
    rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in 0..samples {
        rounds.tick().await;
        let p = (i as i32) % PROBE_PARTITIONS;
        let data = load::payload(&probes.0.id, 1, p);
        let t = Instant::now();
        let block = ClientBlock::new(load::block_id(p) + 1 + i as i64, 1, data.clone());
        clients
            .uniffle
            .send(&probes.0.id, 1, vec![(p, vec![block])])
            .await?;
        up.record(t.elapsed());
        let t = Instant::now();
        let r = push
            .push(&key, &format!("{p}-0"), batch(1, 0, i as i32, &data))
            .await?;
        cp.record(t.elapsed());
        ensure!(r.is_empty(), "probe push answered {r:?}");
        for (reads, latency) in [(&reads[0], &ur), (&reads[1], &cr)] {
            let (app, s, p) = &reads[i];
            let t = Instant::now();
            clients.read(app, *s, *p).await?;
            latency.record(t.elapsed());
        }
    }
    Ok(ProbeFigures {
        uniffle_push: (&up).into(),
        uniffle_read: (&ur).into(),
        celeborn_push: (&cp).into(),
        celeborn_read: (&cr).into(),
    })
}

/// The node's CPU over an idle window.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct IdleFigures {
    /// CPU time over wall time, in percent of one core.
    pub cpu_percent: f64,
    pub window_s: f64,
    /// The slowest `/api/v1/status` and `/metrics` answer in the window.
    pub status_ms: f64,
    pub metrics_ms: f64,
}

/// Waits `window` while the client heartbeats go on, scraping `/metrics`
/// and `/api/v1/status` every `interval`; the node's CPU share.
pub async fn idle(
    server: &Server,
    window: Duration,
    interval: Duration,
) -> anyhow::Result<IdleFigures> {
    let cpu0 = server.cpu_time()?;
    let started = Instant::now();
    let (mut status_ms, mut metrics_ms) = (0f64, 0f64);
    while started.elapsed() < window {
        let t = Instant::now();
        server.get("/metrics").await?;
        metrics_ms = metrics_ms.max(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        server.get("/api/v1/status").await?;
        status_ms = status_ms.max(t.elapsed().as_secs_f64() * 1e3);
        let left = window.saturating_sub(started.elapsed());
        tokio::time::sleep(interval.min(left)).await;
    }
    let wall = started.elapsed();
    let cpu = server.cpu_time()? - cpu0;
    Ok(IdleFigures {
        cpu_percent: cpu.as_secs_f64() / wall.as_secs_f64() * 100.0,
        window_s: wall.as_secs_f64(),
        status_ms,
        metrics_ms,
    })
}

/// The applications' heartbeats, sent every `every` as their clients send
/// them, until `stop` is set; a failed round reconnects.
pub struct Heartbeats {
    pub apps: Arc<Mutex<Vec<HeldApp>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeats {
    pub fn start(ep: Endpoints, every: Duration) -> Heartbeats {
        let apps: Arc<Mutex<Vec<HeldApp>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (list, stopped) = (apps.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut clients = None;
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if clients.is_none() {
                    clients = Clients::connect(&ep).await.ok();
                }
                if let Some(c) = clients.as_mut() {
                    let round: Vec<HeldApp> = list.lock().clone();
                    for app in &round {
                        if c.heartbeat(app).await.is_err() {
                            clients = None;
                            break;
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Heartbeats { apps, stop, task }
    }

    /// Stops sending; returns once the last round is over.
    pub async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scale::load::Protocol;

    fn app(id: &str, shuffles: i32, partitions: i32) -> HeldApp {
        HeldApp {
            id: id.into(),
            protocol: Protocol::Celeborn,
            shuffles,
            partitions,
        }
    }

    #[test]
    fn read_probes_never_read_a_partition_twice() {
        let (a, b) = (app("a", 2, 5), app("b", 1, 4));
        let mut before = ReadBefore::default();
        let mut pick = Pick::new(7);
        let first = before.take(&[&a], 6, &mut pick).unwrap();
        let second = before.take(&[&a, &b], 8, &mut pick).unwrap();
        let seen: HashSet<(String, i32, i32)> = first
            .iter()
            .chain(&second)
            .map(|(app, s, p)| (app.id.clone(), *s, *p))
            .collect();
        assert_eq!(seen.len(), 14, "every read a partition of its own");
        assert!(seen
            .iter()
            .all(|(id, s, p)| (id == "a" && *s < 2 && *p < 5) || (id == "b" && *s == 0 && *p < 4)));
        let err = before.take(&[&a, &b], 1, &mut pick).unwrap_err();
        assert!(
            err.to_string().contains("0 partitions not read yet"),
            "{err}"
        );
    }
}
