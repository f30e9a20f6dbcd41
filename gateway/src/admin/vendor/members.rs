//! The nodes both vendor APIs describe: in a fleet, every worker the
//! coordinator's directory remembers (lost ones too); alone, this node.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard_cluster::proto::{Load, WorkerHeartbeat, WorkerState};
use switchyard_cluster::LocalWorker;

use super::VendorState;

/// One node as its last heartbeat described it.
pub struct Member {
    pub heartbeat: WorkerHeartbeat,
    /// When that heartbeat arrived (Unix milliseconds).
    pub last_heartbeat_unix_ms: u64,
    /// Silent past `cluster.worker_timeout`.
    pub lost: bool,
    /// This node itself.
    pub local: bool,
}

impl Member {
    pub fn decommissioning(&self) -> bool {
        self.heartbeat.state == WorkerState::Decommissioning as i32
    }

    pub fn load(&self) -> Load {
        self.heartbeat.load.unwrap_or_default()
    }

    pub fn node_id(&self) -> &str {
        &self.heartbeat.node_id
    }
}

pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The nodes this API's answers are about.
pub fn members(state: &VendorState) -> Vec<Member> {
    let now = SystemTime::now();
    let local_id = state.admin.node.id.as_str();
    let ago = |age: Duration| unix_ms(now.checked_sub(age).unwrap_or(UNIX_EPOCH));
    match (&state.admin.coordination, &state.local) {
        (Some(c), _) => c
            .directory
            .entries()
            .into_iter()
            .map(|(heartbeat, age, lost)| Member {
                local: heartbeat.node_id == local_id,
                heartbeat,
                last_heartbeat_unix_ms: ago(age),
                lost,
            })
            .collect(),
        (None, Some(worker)) => vec![Member {
            heartbeat: worker.report(),
            last_heartbeat_unix_ms: unix_ms(now),
            lost: false,
            local: true,
        }],
        (None, None) => Vec::new(),
    }
}
