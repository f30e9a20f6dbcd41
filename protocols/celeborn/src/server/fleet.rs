//! What the Master knows of the workers beyond its own process, and what it
//! passes on of the drivers' calls. The gateway implements [`Fleet`] over
//! the cluster's directory; a node alone is its own only worker
//! ([`Alone`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::worker::{WorkerAddr, WorkerState};

/// A worker the Master may place partitions on, with its load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub addr: WorkerAddr,
    /// Memory budget not in use (bytes).
    pub free_memory: u64,
    /// Partitions it already holds.
    pub partitions: u64,
}

pub trait Fleet: Send + Sync + 'static {
    /// Workers that take new partitions: alive, active, healthy.
    fn workers(&self) -> Vec<Candidate>;
    /// Whether a worker (`host:rpc:push:fetch:replicate`) heartbeats any
    /// coordinator; a driver asking about one that does not is told it is
    /// unknown.
    fn knows(&self, unique_id: &str) -> bool;
    /// True while a just-started coordinator waits for the workers'
    /// heartbeats: it then refuses drivers (RPC failure), so that they move
    /// to the next master instead of hearing "no workers".
    fn warming(&self) -> bool {
        false
    }
    /// Workers that are decommissioning (the driver's `shuttingWorkers`).
    fn shutting(&self) -> Vec<WorkerAddr> {
        Vec::new()
    }
    /// A driver heartbeat, registration or slot request for `app`.
    fn app_seen(&self, _app: &str) {}
    /// The driver unregistered a shuffle.
    fn shuffle_removed(&self, _app: &str, _shuffle: i32) {}
    /// The driver said the application ended.
    fn app_lost(&self, _app: &str) {}
}

/// One process alone: its own worker, when its store can take writes.
pub struct Alone(pub Arc<WorkerState>);

impl Fleet for Alone {
    fn workers(&self) -> Vec<Candidate> {
        if !self.0.store.is_ready() || self.0.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        let b = self.0.store.budget();
        vec![Candidate {
            addr: self.0.addr.clone(),
            free_memory: b.capacity().saturating_sub(b.used()),
            partitions: 0,
        }]
    }

    fn knows(&self, unique_id: &str) -> bool {
        self.0.addr.unique_id() == unique_id
    }
}

/// Slots for one request: per worker (by unique id), the partition ids it
/// holds as primary and as replica.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Slots {
    pub primaries: Vec<i32>,
    pub replicas: Vec<i32>,
}

/// Spreads `partitions` over `workers`, least loaded first (fewest
/// partitions held, then most free memory), round-robin so every worker
/// gets its share. With `replicate` and two or more workers, each
/// partition's replica goes to the next worker in that order, never to its
/// primary's. Returns the workers with their slots, in placement order.
pub fn place(
    partitions: &[i32],
    mut workers: Vec<Candidate>,
    replicate: bool,
) -> Vec<(WorkerAddr, Slots)> {
    if workers.is_empty() {
        return Vec::new();
    }
    workers.sort_by(|a, b| {
        (
            a.partitions,
            std::cmp::Reverse(a.free_memory),
            a.addr.unique_id(),
        )
            .cmp(&(
                b.partitions,
                std::cmp::Reverse(b.free_memory),
                b.addr.unique_id(),
            ))
    });
    let n = workers.len();
    let mut slots: BTreeMap<usize, Slots> = BTreeMap::new();
    for (i, &p) in partitions.iter().enumerate() {
        slots.entry(i % n).or_default().primaries.push(p);
        if replicate && n > 1 {
            slots.entry((i + 1) % n).or_default().replicas.push(p);
        }
    }
    slots
        .into_iter()
        .map(|(i, s)| (workers[i].addr.clone(), s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(host: &str, free: u64, partitions: u64) -> Candidate {
        Candidate {
            addr: WorkerAddr {
                host: host.into(),
                rpc_port: 9100,
                push_port: 9101,
                fetch_port: 9102,
                replicate_port: 9103,
            },
            free_memory: free,
            partitions,
        }
    }

    #[test]
    fn spreads_evenly_starting_with_the_least_loaded() {
        let ids: Vec<i32> = (0..7).collect();
        let placed = place(
            &ids,
            vec![w("a", 10, 5), w("b", 10, 0), w("c", 99, 0)],
            false,
        );
        let hosts: Vec<_> = placed.iter().map(|(a, _)| a.host.as_str()).collect();
        assert_eq!(hosts, ["c", "b", "a"]);
        assert_eq!(placed[0].1.primaries, [0, 3, 6]);
        assert_eq!(placed[1].1.primaries, [1, 4]);
        assert_eq!(placed[2].1.primaries, [2, 5]);
        assert!(placed.iter().all(|(_, s)| s.replicas.is_empty()));
        let all: usize = placed.iter().map(|(_, s)| s.primaries.len()).sum();
        assert_eq!(all, 7);
    }

    #[test]
    fn replicas_never_share_a_worker_with_their_primary() {
        let ids: Vec<i32> = (0..10).collect();
        let placed = place(&ids, vec![w("a", 1, 0), w("b", 1, 0)], true);
        for p in &ids {
            let primary = placed
                .iter()
                .find(|(_, s)| s.primaries.contains(p))
                .unwrap();
            let replica = placed.iter().find(|(_, s)| s.replicas.contains(p)).unwrap();
            assert_ne!(primary.0, replica.0, "partition {p}");
        }
        // One worker: no replicas at all.
        let alone = place(&ids, vec![w("a", 1, 0)], true);
        assert!(alone[0].1.replicas.is_empty());
        assert!(place(&ids, Vec::new(), false).is_empty());
    }
}
