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

impl Directory {
    pub fn new(timeout: Duration) -> Self {
        Directory {
            workers: DashMap::new(),
            timeout,
        }
    }

    /// Records a heartbeat (replacing the worker's last one).
    pub fn record(&self, heartbeat: WorkerHeartbeat) {
        let forget = self.timeout * FORGET_AFTER_TIMEOUTS;
        self.workers.retain(|_, e| e.last_seen.elapsed() < forget);
        self.workers.insert(
            heartbeat.node_id.clone(),
            Entry {
                heartbeat,
                last_seen: Instant::now(),
            },
        );
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
        self.live()
            .into_iter()
            .filter(|w| {
                w.state == WorkerState::Active as i32 && w.load.as_ref().is_some_and(|l| l.healthy)
            })
            .collect()
    }

    /// Live workers that are decommissioning.
    pub fn decommissioning(&self) -> Vec<WorkerHeartbeat> {
        self.live()
            .into_iter()
            .filter(|w| w.state == WorkerState::Decommissioning as i32)
            .collect()
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
}
