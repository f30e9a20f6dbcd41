//! A coordinator's view of the workers: the last heartbeat of each, and
//! when it came. Placement for both protocols reads [`Directory::live`].

use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde::Serialize;

use crate::proto::{WorkerHeartbeat, WorkerState};

/// A worker silent for this many worker timeouts is forgotten (it was
/// reported lost in between), so made-up node ids do not pile up.
const FORGET_AFTER_TIMEOUTS: u32 = 10;

struct Entry {
    heartbeat: WorkerHeartbeat,
    last_seen: Instant,
}

pub struct Directory {
    workers: DashMap<String, Entry>,
    timeout: Duration,
    /// When forgotten workers were last dropped: once per worker timeout,
    /// not on every heartbeat (a walk of every worker per heartbeat made
    /// an interval's heartbeats cost workers squared).
    pruned: parking_lot::Mutex<Instant>,
}

/// One worker as `/api/v1/cluster` and `ctl nodes` show it.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerView {
    pub node_id: String,
    /// `active`, `decommissioning` or `lost`.
    pub state: &'static str,
    pub admin: String,
    /// `node.rack`; empty for the default rack.
    pub rack: String,
    pub uniffle: Option<String>,
    pub celeborn: Option<String>,
    pub memory_capacity: u64,
    pub memory_used: u64,
    pub disk_free: u64,
    pub partitions: u64,
    pub healthy: bool,
    pub last_heartbeat_ms_ago: u64,
}

/// Takes new partitions: active and healthy.
fn placeable(w: &WorkerHeartbeat) -> bool {
    w.state == WorkerState::Active as i32 && w.load.as_ref().is_some_and(|l| l.healthy)
}

impl Directory {
    pub fn new(timeout: Duration) -> Self {
        Directory {
            workers: DashMap::new(),
            timeout,
            pruned: parking_lot::Mutex::new(Instant::now()),
        }
    }

    /// Records a heartbeat (replacing the worker's last one).
    pub fn record(&self, heartbeat: WorkerHeartbeat) {
        self.prune();
        self.workers.insert(
            heartbeat.node_id.clone(),
            Entry {
                heartbeat,
                last_seen: Instant::now(),
            },
        );
    }

    /// Forgets workers silent for [`FORGET_AFTER_TIMEOUTS`] timeouts, at
    /// most once per timeout.
    fn prune(&self) {
        {
            let mut last = self.pruned.lock();
            if last.elapsed() < self.timeout {
                return;
            }
            *last = Instant::now();
        }
        let forget = self.timeout * FORGET_AFTER_TIMEOUTS;
        self.workers.retain(|_, e| e.last_seen.elapsed() < forget);
    }

    /// `f` of every placeable worker (live, active, healthy), by node id,
    /// without copying their heartbeats (which list every application a
    /// worker holds): placement reads only endpoints and load.
    pub fn placeable_map<T>(&self, f: impl Fn(&WorkerHeartbeat) -> Option<T>) -> Vec<T> {
        let mut out: Vec<(String, T)> = self
            .workers
            .iter()
            .filter(|e| e.last_seen.elapsed() < self.timeout && placeable(&e.heartbeat))
            .filter_map(|e| Some((e.heartbeat.node_id.clone(), f(&e.heartbeat)?)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, t)| t).collect()
    }

    /// Whether any live worker satisfies `f`.
    pub fn any_live(&self, f: impl Fn(&WorkerHeartbeat) -> bool) -> bool {
        self.workers
            .iter()
            .any(|e| e.last_seen.elapsed() < self.timeout && f(&e.heartbeat))
    }

    /// Workers heard from within the worker timeout, by node id.
    pub fn live(&self) -> Vec<WorkerHeartbeat> {
        let mut out: Vec<_> = self
            .workers
            .iter()
            .filter(|e| e.last_seen.elapsed() < self.timeout)
            .map(|e| e.heartbeat.clone())
            .collect();
        out.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        out
    }

    /// Live workers that take new partitions: active and healthy.
    pub fn placeable(&self) -> Vec<WorkerHeartbeat> {
        self.live().into_iter().filter(placeable).collect()
    }

    /// Live workers that are decommissioning, by node id. Only those are
    /// copied: a Celeborn driver's heartbeat asks for them, and copying
    /// every worker's heartbeat for each was most of a busy master's work.
    pub fn decommissioning(&self) -> Vec<WorkerHeartbeat> {
        let mut out: Vec<_> = self
            .workers
            .iter()
            .filter(|e| {
                e.last_seen.elapsed() < self.timeout
                    && e.heartbeat.state == WorkerState::Decommissioning as i32
            })
            .map(|e| e.heartbeat.clone())
            .collect();
        out.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        out
    }

    /// Every worker remembered, by node id, with the time since its last
    /// heartbeat and whether that makes it lost.
    pub fn entries(&self) -> Vec<(WorkerHeartbeat, Duration, bool)> {
        let mut out: Vec<_> = self
            .workers
            .iter()
            .map(|e| {
                let age = e.last_seen.elapsed();
                (e.heartbeat.clone(), age, age >= self.timeout)
            })
            .collect();
        out.sort_by(|a, b| a.0.node_id.cmp(&b.0.node_id));
        out
    }

    /// Every worker remembered, the lost ones too.
    pub fn views(&self) -> Vec<WorkerView> {
        let mut out: Vec<_> = self
            .workers
            .iter()
            .map(|e| {
                let h = &e.heartbeat;
                let age = e.last_seen.elapsed();
                let load = h.load.unwrap_or_default();
                WorkerView {
                    node_id: h.node_id.clone(),
                    state: if age >= self.timeout {
                        "lost"
                    } else if h.state == WorkerState::Decommissioning as i32 {
                        "decommissioning"
                    } else {
                        "active"
                    },
                    admin: h.admin.clone(),
                    rack: h.rack.clone(),
                    uniffle: h
                        .uniffle
                        .as_ref()
                        .map(|u| format!("{}:{}", u.ip, u.grpc_port)),
                    celeborn: h.celeborn.as_ref().map(|c| {
                        format!(
                            "{}:{}:{}:{}:{}",
                            c.host, c.rpc_port, c.push_port, c.fetch_port, c.replicate_port
                        )
                    }),
                    memory_capacity: load.memory_capacity,
                    memory_used: load.memory_used,
                    disk_free: load.disk_free,
                    partitions: load.partitions,
                    healthy: load.healthy,
                    last_heartbeat_ms_ago: age.as_millis() as u64,
                }
            })
            .collect();
        out.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Load;

    fn beat(id: &str, state: WorkerState, healthy: bool) -> WorkerHeartbeat {
        WorkerHeartbeat {
            node_id: id.into(),
            state: state as i32,
            load: Some(Load {
                healthy,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn silent_workers_leave_placement_and_show_as_lost() {
        // A timeout of 1 s: the first checks must run before it passes even
        // on a loaded machine; the sleep below outlasts it.
        let d = Directory::new(Duration::from_secs(1));
        d.record(beat("b", WorkerState::Active, true));
        d.record(beat("a", WorkerState::Active, true));
        d.record(beat("c", WorkerState::Decommissioning, true));
        d.record(beat("d", WorkerState::Active, false));
        let ids = |v: Vec<WorkerHeartbeat>| v.into_iter().map(|w| w.node_id).collect::<Vec<_>>();
        assert_eq!(ids(d.live()), ["a", "b", "c", "d"]);
        assert_eq!(ids(d.placeable()), ["a", "b"]);
        assert_eq!(ids(d.decommissioning()), ["c"]);
        std::thread::sleep(Duration::from_millis(1_050));
        d.record(beat("a", WorkerState::Active, true));
        assert_eq!(ids(d.placeable()), ["a"]);
        let views = d.views();
        let state = |id: &str| views.iter().find(|v| v.node_id == id).unwrap().state;
        assert_eq!(
            (state("a"), state("b"), state("c")),
            ("active", "lost", "lost")
        );
    }

    #[test]
    fn forgotten_workers_are_dropped_without_a_walk_per_heartbeat() {
        let d = Directory::new(Duration::from_millis(20));
        d.record(beat("x", WorkerState::Active, true));
        // Ten timeouts of silence, then a heartbeat of another worker.
        std::thread::sleep(Duration::from_millis(250));
        d.record(beat("y", WorkerState::Active, true));
        let ids: Vec<_> = d.views().into_iter().map(|v| v.node_id).collect();
        assert_eq!(ids, ["y"]);
        // Within a timeout of the last walk, heartbeats do not walk again:
        // z stays known though silent, as lost.
        let d = Directory::new(Duration::from_secs(3600));
        d.record(beat("z", WorkerState::Active, true));
        d.record(beat("w", WorkerState::Active, true));
        assert_eq!(d.views().len(), 2);
        assert_eq!(
            d.placeable_map(|h| Some(h.node_id.clone())),
            ["w", "z"],
            "by node id"
        );
        assert!(d.any_live(|h| h.node_id == "z"));
        assert!(!d.any_live(|h| h.node_id == "q"));
    }
}
