//! What the Master knows of the workers beyond its own process, and what it
//! passes on of the drivers' calls. The gateway implements [`Fleet`] over
//! the cluster's directory; a node alone is its own only worker
//! ([`Alone`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dashmap::DashMap;

use super::worker::{WorkerAddr, WorkerState};

/// A worker the Master may place partitions on, with its load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub addr: WorkerAddr,
    /// Memory budget not in use (bytes).
    pub free_memory: u64,
    /// Partitions it already holds.
    pub partitions: u64,
    /// Its rack (Celeborn's network location), `/default-rack` unless set.
    pub rack: String,
    /// Its worker tags (`node.tags`), which a client's tags expression
    /// selects on.
    pub tags: Vec<String>,
}

pub trait Fleet: Send + Sync + 'static {
    /// Workers that take new partitions: alive, active, healthy.
    fn workers(&self) -> Vec<Candidate>;
    /// Whether a worker heartbeats any coordinator; a driver asking about
    /// one that does not is told it is unknown.
    fn knows(&self, worker: &WorkerAddr) -> bool;
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
    fn app_seen(&self, app: &str);
    /// The master gave a shuffle slots (RequestSlots, ReviseLostShuffles).
    fn shuffle_registered(&self, app: &str, shuffle: i32);
    /// The driver unregistered a shuffle.
    fn shuffle_removed(&self, app: &str, shuffle: i32);
    /// The driver said the application ended.
    fn app_lost(&self, app: &str);
    /// RegisterApplicationInfo: the application's user and extra info.
    fn app_info(&self, _app: &str, _tenant: &str, _user: &str, _extra: BTreeMap<String, String>) {}
    /// The shuffles of `app` that got slots and were not unregistered (a
    /// driver heartbeat's `registeredShuffles`: a 0.6+ driver revises the
    /// ones missing here), from what every coordinator heard.
    fn registered_shuffles(&self, app: &str) -> Vec<i32>;
}

/// One process alone: its own worker, when its store can take writes.
pub struct Alone {
    worker: Arc<WorkerState>,
    /// Shuffles given slots by this master and not unregistered, per app.
    registered: DashMap<String, BTreeSet<i32>>,
}

impl Alone {
    pub fn new(worker: Arc<WorkerState>) -> Self {
        Alone {
            worker,
            registered: DashMap::new(),
        }
    }
}

impl Fleet for Alone {
    fn app_seen(&self, _app: &str) {}

    fn shuffle_registered(&self, app: &str, shuffle: i32) {
        self.registered
            .entry(app.to_string())
            .or_default()
            .insert(shuffle);
    }

    fn shuffle_removed(&self, app: &str, shuffle: i32) {
        if let Some(mut s) = self.registered.get_mut(app) {
            s.remove(&shuffle);
        }
    }

    fn app_lost(&self, app: &str) {
        self.registered.remove(app);
    }

    fn registered_shuffles(&self, app: &str) -> Vec<i32> {
        self.registered
            .get(app)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    fn workers(&self) -> Vec<Candidate> {
        let w = &self.worker;
        if !w.store.is_ready() || w.draining.load(std::sync::atomic::Ordering::Relaxed) {
            return Vec::new();
        }
        let b = w.store.budget();
        vec![Candidate {
            addr: w.addr.clone(),
            free_memory: b.capacity().saturating_sub(b.used()),
            partitions: 0,
            rack: DEFAULT_RACK.into(),
            tags: w.config.worker_tags.clone(),
        }]
    }

    fn knows(&self, worker: &WorkerAddr) -> bool {
        self.worker.addr == *worker
    }
}

/// Slots for one request: per worker (by unique id), the partition ids it
/// holds as primary and as replica.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    pub primaries: Vec<i32>,
    pub replicas: Vec<i32>,
}

/// The rack of a worker that names none, as Celeborn calls it.
pub const DEFAULT_RACK: &str = "/default-rack";

/// Workers a slot reply lists at least (chosen plus spares), as the JVM
/// master's `celeborn.master.slot.assign.minWorkers` (0.6.0+) does.
const MIN_WORKERS: usize = 100;
/// Spares a slot reply lists at least when there are unchosen workers
/// (`celeborn.master.slot.assign.extraSlots`).
const EXTRA_WORKERS: usize = 2;

/// Spreads `partitions` over `workers`, least loaded first (fewest
/// partitions held, then most free memory), round-robin so every worker
/// gets its share. With `replicate` and two or more workers, each
/// partition's replica goes to the next worker in that order, never to its
/// primary's; with `rack_aware` too, on another rack than the primary's
/// where one has workers (else on any other worker, as the JVM master falls
/// back). Returns the workers with their slots, in placement order,
/// followed by spares with empty slots: a Celeborn driver revives a
/// partition only onto workers of its shuffle's slot reply, so a shuffle
/// with fewer partitions than workers needs spares to survive a worker.
pub fn place(
    partitions: &[i32],
    mut workers: Vec<Candidate>,
    replicate: bool,
    rack_aware: bool,
) -> Vec<(Candidate, Slots)> {
    if workers.is_empty() {
        return Vec::new();
    }
    // The unique id breaks ties so every coordinator orders alike; it is
    // built once per worker, not per comparison.
    workers.sort_by_cached_key(|w| {
        (
            w.partitions,
            std::cmp::Reverse(w.free_memory),
            w.addr.unique_id(),
        )
    });
    let n = workers.len();
    let replica_of = replica_targets(&workers, replicate, rack_aware);
    let mut slots = vec![Slots::default(); n];
    for (i, &p) in partitions.iter().enumerate() {
        let primary = i % n;
        slots[primary].primaries.push(p);
        if let Some(replica) = replica_of[primary] {
            slots[replica].replicas.push(p);
        }
    }
    let chosen = slots.iter().filter(|s| !s.is_empty()).count();
    let spares = (n - chosen).min(EXTRA_WORKERS.max(MIN_WORKERS.saturating_sub(chosen)));
    // The chosen workers in placement order, then the first unchosen ones.
    let mut placed = Vec::with_capacity(chosen + spares);
    let mut unchosen = Vec::with_capacity(spares);
    for (w, s) in workers.into_iter().zip(slots) {
        if !s.is_empty() {
            placed.push((w, s));
        } else if unchosen.len() < spares {
            unchosen.push((w, s));
        }
    }
    placed.extend(unchosen);
    placed
}

impl Slots {
    fn is_empty(&self) -> bool {
        self.primaries.is_empty() && self.replicas.is_empty()
    }
}

/// For each worker (in placement order), where the replicas of its
/// primaries go: none without `replicate` or a second worker; else the next
/// worker, or with `rack_aware` the next one on another rack where there is
/// one (else the next, as the JVM master falls back). Linear in workers.
fn replica_targets(workers: &[Candidate], replicate: bool, rack_aware: bool) -> Vec<Option<usize>> {
    let n = workers.len();
    if !replicate || n < 2 {
        return vec![None; n];
    }
    let next = |i: usize| (i + 1) % n;
    if !rack_aware {
        return (0..n).map(|i| Some(next(i))).collect();
    }
    // Over the list twice round, from the end: the first later position on
    // another rack than position k's. Equal neighbours share the answer.
    let mut other_rack: Vec<Option<usize>> = vec![None; 2 * n];
    for k in (0..2 * n - 1).rev() {
        other_rack[k] = if workers[k % n].rack != workers[(k + 1) % n].rack {
            Some((k + 1) % n)
        } else {
            other_rack[k + 1]
        };
    }
    (0..n).map(|i| other_rack[i].or(Some(next(i)))).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn w(host: &str, free: u64, partitions: u64) -> Candidate {
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
            rack: DEFAULT_RACK.into(),
            tags: Vec::new(),
        }
    }

    pub(crate) fn on(rack: &str, mut c: Candidate) -> Candidate {
        c.rack = rack.into();
        c
    }

    #[test]
    fn spreads_evenly_starting_with_the_least_loaded() {
        let ids: Vec<i32> = (0..7).collect();
        let placed = place(
            &ids,
            vec![w("a", 10, 5), w("b", 10, 0), w("c", 99, 0)],
            false,
            false,
        );
        let hosts: Vec<_> = placed.iter().map(|(a, _)| a.addr.host.as_str()).collect();
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
        let placed = place(&ids, vec![w("a", 1, 0), w("b", 1, 0)], true, false);
        for p in &ids {
            let primary = placed
                .iter()
                .find(|(_, s)| s.primaries.contains(p))
                .unwrap();
            let replica = placed.iter().find(|(_, s)| s.replicas.contains(p)).unwrap();
            assert_ne!(primary.0.addr, replica.0.addr, "partition {p}");
        }
        // One worker: no replicas at all.
        let alone = place(&ids, vec![w("a", 1, 0)], true, false);
        assert!(alone[0].1.replicas.is_empty());
        assert!(place(&ids, Vec::new(), false, false).is_empty());
    }

    #[test]
    fn workers_left_without_partitions_come_back_as_spares() {
        let placed = place(
            &[7],
            vec![w("a", 1, 3), w("b", 1, 0), w("c", 1, 1)],
            true,
            false,
        );
        let hosts: Vec<_> = placed.iter().map(|(a, _)| a.addr.host.as_str()).collect();
        assert_eq!(hosts, ["b", "c", "a"]);
        assert_eq!(placed[0].1.primaries, [7]);
        assert_eq!(placed[1].1.replicas, [7]);
        assert_eq!(placed[2].1, Slots::default());
        // Past the minimum of 100 listed workers, two spares at most.
        let many: Vec<_> = (0..150).map(|i| w(&format!("h{i:03}"), 1, 0)).collect();
        let ids: Vec<i32> = (0..120).collect();
        let placed = place(&ids, many, false, false);
        assert_eq!(placed.len(), 122);
        assert_eq!(
            placed
                .iter()
                .filter(|(_, s)| s.primaries.is_empty())
                .count(),
            2
        );
    }

    #[test]
    fn rack_aware_replicas_go_to_another_rack() {
        let ids: Vec<i32> = (0..12).collect();
        let workers = || {
            vec![
                on("/r1", w("a", 1, 0)),
                on("/r1", w("b", 1, 0)),
                on("/r2", w("c", 1, 0)),
            ]
        };
        let placed = place(&ids, workers(), true, true);
        let rack = |host: &str| if host == "c" { "/r2" } else { "/r1" };
        for p in &ids {
            let primary = placed
                .iter()
                .find(|(_, s)| s.primaries.contains(p))
                .unwrap();
            let replica = placed.iter().find(|(_, s)| s.replicas.contains(p)).unwrap();
            assert_ne!(
                rack(&primary.0.addr.host),
                rack(&replica.0.addr.host),
                "partition {p}"
            );
        }
        // Every partition has one copy on the only worker of rack /r2.
        let c = placed.iter().find(|(a, _)| a.addr.host == "c").unwrap();
        assert_eq!(c.1.primaries.len() + c.1.replicas.len(), 12);
        // Without rack awareness some replicas share /r1 with their primary.
        let plain = place(&ids, workers(), true, false);
        let c = plain.iter().find(|(a, _)| a.addr.host == "c").unwrap();
        assert!(c.1.primaries.len() + c.1.replicas.len() < 12);
        // One rack only: the replica still goes to another worker.
        let one = place(&ids, vec![w("a", 1, 0), w("b", 1, 0)], true, true);
        for p in &ids {
            let primary = one.iter().find(|(_, s)| s.primaries.contains(p)).unwrap();
            let replica = one.iter().find(|(_, s)| s.replicas.contains(p)).unwrap();
            assert_ne!(primary.0.addr, replica.0.addr);
        }
    }
}
