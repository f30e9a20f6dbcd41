//! How full the node's memory budget is, polled from its status page: a
//! run where the aggressor never held the node at its budget shows nothing
//! about neighbours, so the bench records the highest fill of each phase.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;

use crate::overload::admin_get;

/// How often the status is read.
const EVERY: Duration = Duration::from_millis(250);

/// One reading of `/api/v1/status`'s `storage.memory`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Fill {
    /// Bytes the store's blocks hold (staged, flushing, reserved) over the
    /// store's share of the budget: what backpressure acts on.
    pub store: f64,
    /// The whole number (blocks, frames being read, replies) over
    /// `storage.memory.capacity`.
    pub node: f64,
}

impl Fill {
    fn max(self, other: Fill) -> Fill {
        Fill {
            store: self.store.max(other.store),
            node: self.node.max(other.node),
        }
    }
}

/// The fill in a status JSON; `None` when it lacks the figures.
pub fn fill_of(status: &serde_json::Value) -> Option<Fill> {
    let m = &status["storage"]["memory"];
    let capacity = m["capacity"].as_u64()?;
    let node_capacity = m["node_capacity"].as_u64()?;
    let used = m["used"].as_u64()?;
    let network = m["in_flight"].as_u64().unwrap_or(0) + m["replies"].as_u64().unwrap_or(0);
    Some(Fill {
        store: used as f64 / capacity.max(1) as f64,
        node: (used + network) as f64 / node_capacity.max(1) as f64,
    })
}

/// Polls in the background until dropped; [`Watch::take`] hands out the
/// highest fill since the last take.
pub struct Watch {
    max: Arc<Mutex<Fill>>,
    /// Readings that failed (the node did not answer within its timeout).
    misses: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    pub fn start(admin: SocketAddr) -> Watch {
        let max = Arc::new(Mutex::new(Fill::default()));
        let misses = Arc::new(Mutex::new(0));
        let (m, x) = (max.clone(), misses.clone());
        let task = tokio::spawn(async move {
            loop {
                match read(admin).await {
                    Ok(f) => {
                        let mut g = m.lock();
                        *g = g.max(f);
                    }
                    Err(_) => *x.lock() += 1,
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        Watch { max, misses, task }
    }

    /// The highest fill since the last call (or the start).
    pub fn take(&self) -> Fill {
        std::mem::take(&mut *self.max.lock())
    }

    pub fn misses(&self) -> u64 {
        *self.misses.lock()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn read(admin: SocketAddr) -> anyhow::Result<Fill> {
    let status: serde_json::Value =
        serde_json::from_str(&admin_get(admin, "/api/v1/status").await?)?;
    fill_of(&status).context("no storage.memory figures in /api/v1/status")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_counts_the_store_share_and_the_whole_number() {
        let status = serde_json::json!({"storage": {"memory": {
            "capacity": 192, "node_capacity": 256, "used": 96, "in_flight": 32, "replies": 0
        }}});
        let f = fill_of(&status).unwrap();
        assert_eq!(f.store, 0.5);
        assert_eq!(f.node, 0.5);
        assert!(fill_of(&serde_json::json!({"storage": {}})).is_none());
        let both = f.max(Fill {
            store: 0.9,
            node: 0.1,
        });
        assert_eq!((both.store, both.node), (0.9, 0.5));
    }
}
