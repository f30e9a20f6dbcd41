//! Simulated workers: each is the cluster crate's own [`Heartbeater`] (one
//! task per coordinator, as a real node runs it) reporting a made-up node.
//! A worker has a fake address on 127.0.7.x that nothing listens on:
//! placement never contacts workers, so the coordinators cannot tell. Its
//! load is skewed from the start (some workers hold many more partitions
//! and much less free memory than others) and follows what the simulated
//! drivers place on it, as a real worker's would; the Celeborn applications
//! it reports are those with a live shuffle on it, dropped when a
//! coordinator's reply says the application ended.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use switchyard_cluster::proto::{
    CelebornEndpoint, HeartbeatReply, Load, UniffleEndpoint, WorkerHeartbeat, WorkerState,
};
use switchyard_cluster::{ClusterConfig, Heartbeater, LocalWorker, PROTOCOL_VERSION};
use tokio_util::sync::CancellationToken;

const GIB: u64 = 1 << 30;
/// Each worker's memory budget.
const MEMORY: u64 = 64 * GIB;

pub struct SimWorker {
    pub index: usize,
    pub node_id: String,
    host: Ipv4Addr,
    /// Its Celeborn rpc port; push, fetch, replicate, Uniffle gRPC and
    /// Netty follow.
    port: u16,
    /// Partitions held before the simulation placed any (the skew).
    base_partitions: u64,
    memory_used: u64,
    /// Partitions the drivers placed here and have not unregistered.
    placed: AtomicU64,
    /// Celeborn applications with a live shuffle here, by shuffles.
    apps: Mutex<HashMap<String, u32>>,
    /// Heartbeat replies taken.
    pub replies: AtomicU64,
}

/// Deterministic skew: a quarter of the workers are hot (up to 20x the
/// partitions and most of their memory in use), the rest spread evenly.
fn skew(index: usize) -> (u64, u64) {
    let h = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    let r = h % 100;
    if r < 25 {
        (2_000 + r * 1_500, MEMORY / 2 + (r * MEMORY) / 60)
    } else {
        (1_000 + r * 10, GIB * (1 + r % 16))
    }
}

impl SimWorker {
    fn new(index: usize) -> SimWorker {
        let (base_partitions, memory_used) = skew(index);
        SimWorker {
            index,
            node_id: format!("sim-worker-{index:04}"),
            host: Ipv4Addr::new(127, 0, 7, 1 + (index % 250) as u8),
            port: 20_000 + (index / 250) as u16 * 10,
            base_partitions,
            memory_used: memory_used.min(MEMORY),
            placed: AtomicU64::new(0),
            apps: Mutex::new(HashMap::new()),
            replies: AtomicU64::new(0),
        }
    }

    /// `host:rpc:push:fetch:replicate`, as a Celeborn slot reply names it.
    pub fn celeborn_id(&self) -> String {
        let p = self.port;
        format!("{}:{}:{}:{}:{}", self.host, p, p + 1, p + 2, p + 3)
    }

    /// A driver placed `partitions` of a shuffle here (`app`: Celeborn's).
    pub fn place(&self, app: Option<&str>, partitions: u64) {
        self.placed.fetch_add(partitions, Ordering::Relaxed);
        if let Some(app) = app {
            *self.apps.lock().entry(app.to_string()).or_default() += 1;
        }
    }

    /// The shuffle was unregistered: its partitions leave.
    pub fn release(&self, app: Option<&str>, partitions: u64) {
        let _ = self
            .placed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(p.saturating_sub(partitions))
            });
        if let Some(app) = app {
            let mut apps = self.apps.lock();
            if let Some(n) = apps.get_mut(app) {
                *n -= 1;
                if *n == 0 {
                    apps.remove(app);
                }
            }
        }
    }
}

impl LocalWorker for SimWorker {
    fn report(&self) -> WorkerHeartbeat {
        let p = self.port as i32;
        WorkerHeartbeat {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.node_id.clone(),
            state: WorkerState::Active as i32,
            uniffle: Some(UniffleEndpoint {
                id: self.node_id.clone(),
                ip: self.host.to_string(),
                grpc_port: p + 4,
                netty_port: p + 5,
                tags: vec!["ss_v5".into(), "GRPC".into(), "GRPC_NETTY".into()],
            }),
            celeborn: Some(CelebornEndpoint {
                host: self.host.to_string(),
                rpc_port: p,
                push_port: p + 1,
                fetch_port: p + 2,
                replicate_port: p + 3,
                tags: Vec::new(),
            }),
            load: Some(Load {
                memory_capacity: MEMORY,
                memory_used: self.memory_used,
                disk_free: 2 << 40,
                partitions: self.base_partitions + self.placed.load(Ordering::Relaxed),
                healthy: true,
            }),
            celeborn_apps: self.apps.lock().keys().cloned().collect(),
            admin: format!("{}:{}", self.host, p + 6),
            rack: String::new(),
        }
    }

    async fn apply(&self, reply: HeartbeatReply) {
        self.replies.fetch_add(1, Ordering::Relaxed);
        if !reply.removed_apps.is_empty() {
            let mut apps = self.apps.lock();
            for app in &reply.removed_apps {
                apps.remove(app);
            }
        }
    }
}

/// Every simulated worker, by index; each one's heartbeats run until it is
/// stopped.
pub struct SimFleet {
    pub workers: Vec<Arc<SimWorker>>,
    by_celeborn: HashMap<String, usize>,
    by_uniffle: HashMap<String, usize>,
    running: Mutex<Vec<Option<(CancellationToken, Heartbeater)>>>,
}

impl SimFleet {
    pub fn new(count: usize) -> SimFleet {
        let workers: Vec<Arc<SimWorker>> =
            (0..count).map(|i| Arc::new(SimWorker::new(i))).collect();
        SimFleet {
            by_celeborn: workers.iter().map(|w| (w.celeborn_id(), w.index)).collect(),
            by_uniffle: workers
                .iter()
                .map(|w| (w.node_id.clone(), w.index))
                .collect(),
            running: Mutex::new(workers.iter().map(|_| None).collect()),
            workers,
        }
    }

    /// The worker a Celeborn unique id names.
    pub fn by_celeborn(&self, unique_id: &str) -> Option<&Arc<SimWorker>> {
        self.by_celeborn.get(unique_id).map(|&i| &self.workers[i])
    }

    /// The worker a Uniffle server id names.
    pub fn by_uniffle(&self, id: &str) -> Option<&Arc<SimWorker>> {
        self.by_uniffle.get(id).map(|&i| &self.workers[i])
    }

    /// Starts every worker's heartbeats, spread over one interval as real
    /// nodes' start times are.
    pub async fn start(&self, config: &ClusterConfig) -> anyhow::Result<()> {
        let n = self.workers.len().max(1) as u32;
        let gap = config.heartbeat_interval / n;
        for i in 0..self.workers.len() {
            let cancel = CancellationToken::new();
            let beats = Heartbeater::start(config, self.workers[i].clone(), cancel.clone())?;
            self.running.lock()[i] = Some((cancel, beats));
            tokio::time::sleep(gap).await;
        }
        Ok(())
    }

    /// Stops the heartbeats of `indices`, as if those nodes died.
    pub async fn stop(&self, indices: &[usize]) {
        let stopped: Vec<_> = {
            let mut running = self.running.lock();
            indices.iter().filter_map(|&i| running[i].take()).collect()
        };
        for (cancel, _) in &stopped {
            cancel.cancel();
        }
        for (_, beats) in stopped {
            beats.stop().await;
        }
    }

    pub async fn stop_all(&self) {
        let all: Vec<usize> = (0..self.workers.len()).collect();
        self.stop(&all).await;
    }

    /// Heartbeat replies taken by every worker so far.
    pub fn replies(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.replies.load(Ordering::Relaxed))
            .sum()
    }

    /// Partitions placed and not unregistered, per worker.
    pub fn placed(&self) -> Vec<u64> {
        self.workers
            .iter()
            .map(|w| w.placed.load(Ordering::Relaxed))
            .collect()
    }
}

/// The `[cluster]` a simulated worker runs with: every coordinator, the
/// secret, the interval.
pub fn cluster_config(coordinators: Vec<String>, heartbeat: Duration) -> ClusterConfig {
    ClusterConfig {
        coordinators,
        roles: vec![switchyard_cluster::Role::Worker],
        secret: Some(super::coordinators::SECRET.into()),
        heartbeat_interval: heartbeat,
        ..ClusterConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_distinct_and_load_follows_placement() {
        let fleet = SimFleet::new(1_000);
        assert_eq!(fleet.by_celeborn.len(), 1_000);
        let w = &fleet.workers[7];
        assert_eq!(fleet.by_celeborn(&w.celeborn_id()).unwrap().index, 7);
        let before = w.report().load.unwrap().partitions;
        w.place(Some("app-1"), 10);
        w.place(Some("app-1"), 5);
        let hb = w.report();
        assert_eq!(hb.load.unwrap().partitions, before + 15);
        assert_eq!(hb.celeborn_apps, ["app-1"]);
        w.release(Some("app-1"), 10);
        assert_eq!(w.report().celeborn_apps, ["app-1"]);
        w.release(Some("app-1"), 5);
        assert!(w.report().celeborn_apps.is_empty());
        assert_eq!(w.report().load.unwrap().partitions, before);
        // The load is skewed: the busiest hold several times the least.
        let parts: Vec<u64> = fleet.workers.iter().map(|w| w.base_partitions).collect();
        let (min, max) = (parts.iter().min().unwrap(), parts.iter().max().unwrap());
        assert!(*max >= 10 * *min, "{min}..{max}");
    }
}
