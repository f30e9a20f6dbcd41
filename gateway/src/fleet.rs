//! Many nodes as one service: maps the cluster protocol
//! (`switchyard-cluster`) onto the Uniffle and Celeborn roles.
//!
//! A coordinator's [`Directory`] of worker heartbeats feeds the Uniffle
//! coordinator's server list ([`UniffleFeed`]) and the Celeborn master's
//! placement ([`CelebornFleet`]); what Celeborn drivers tell the master goes
//! into its [`AppBook`] and back to the workers in heartbeat replies. On the
//! worker side, [`NodeWorker`] reports this node and applies the replies.

use std::sync::{Arc, OnceLock};

use switchyard_celeborn::server::fleet::{Candidate, Fleet};
use switchyard_celeborn::server::worker::{stored_app, WorkerAddr, WorkerState};
use switchyard_cluster::proto::{
    CelebornEndpoint, HeartbeatReply, Load, UniffleEndpoint, WorkerHeartbeat, WorkerState as Wire,
};
use switchyard_cluster::{AppBook, Directory, LocalWorker, WorkerListener, PROTOCOL_VERSION};
use switchyard_ident::FrontEnd;
use switchyard_storage::Store;
use switchyard_uniffle::coordinator::NodeRegistry;
use switchyard_uniffle::proto::ShuffleServerId;
use switchyard_uniffle::UniffleAddrs;

/// A coordinator's shared state.
pub struct Coordination {
    /// The workers that heartbeat this coordinator.
    pub directory: Arc<Directory>,
    /// What Celeborn drivers told the coordinators (exchanged with peers).
    pub apps: Arc<AppBook>,
    /// The end of the warm-up's fixed part (`cluster.warmup` after start).
    pub warm_at: std::time::Instant,
    /// Set once the app book was exchanged with every peer coordinator.
    pub synced: Arc<std::sync::atomic::AtomicBool>,
}

impl Coordination {
    /// True while a just-started coordinator hears from the workers and its
    /// peers: it refuses drivers meanwhile, so that they ask the next one.
    pub fn warming(&self) -> bool {
        std::time::Instant::now() < self.warm_at
            || !self.synced.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Feeds heartbeats into the Uniffle coordinator's server list, once that
/// coordinator runs (set after the Uniffle roles start).
#[derive(Default)]
pub struct UniffleFeed {
    pub registry: OnceLock<Arc<NodeRegistry>>,
}

impl WorkerListener for UniffleFeed {
    fn worker_seen(&self, hb: &WorkerHeartbeat) {
        let (Some(registry), Some(u)) = (self.registry.get(), &hb.uniffle) else {
            return;
        };
        let load = hb.load.unwrap_or_default();
        let id = ShuffleServerId {
            id: u.id.clone(),
            ip: u.ip.clone(),
            port: u.grpc_port,
            netty_port: u.netty_port,
            jetty_port: 0,
        };
        // Decommissioning servers stay known but take no new assignments.
        let placeable = load.healthy && hb.state == Wire::Active as i32;
        let free = load.memory_capacity.saturating_sub(load.memory_used) as i64;
        // The local server reports itself in-process; its own heartbeat
        // over the network is refused by the registry, harmlessly.
        let _ = registry.upsert_remote(id, u.tags.clone(), free, placeable);
    }
}

/// What a coordinator's cluster service is told and asks: heartbeats feed
/// the Uniffle coordinator; secret lookups read this node's Celeborn
/// master's registered secrets.
pub struct CoordinatorListener {
    pub uniffle: Arc<UniffleFeed>,
    pub celeborn: Option<Arc<WorkerState>>,
}

impl WorkerListener for CoordinatorListener {
    fn worker_seen(&self, hb: &WorkerHeartbeat) {
        self.uniffle.worker_seen(hb);
    }

    fn celeborn_secret(&self, app: &str) -> Option<Vec<u8>> {
        self.celeborn.as_ref()?.auth()?.get(app)
    }
}

/// A worker's way to the secrets of Celeborn applications that registered
/// on another node's master: it asks the coordinators.
pub struct FleetSecrets(pub switchyard_cluster::SecretLookup);

#[tonic::async_trait]
impl switchyard_celeborn::auth::RemoteSecrets for FleetSecrets {
    async fn fetch(&self, app: &str) -> Option<Vec<u8>> {
        self.0.fetch(app).await
    }
}

/// The Celeborn master's view of the fleet.
pub struct CelebornFleet(pub Arc<Coordination>);

fn celeborn_addr(c: &CelebornEndpoint) -> WorkerAddr {
    WorkerAddr {
        host: c.host.clone(),
        rpc_port: c.rpc_port,
        push_port: c.push_port,
        fetch_port: c.fetch_port,
        replicate_port: c.replicate_port,
    }
}

impl Fleet for CelebornFleet {
    fn workers(&self) -> Vec<Candidate> {
        self.0.directory.placeable_map(|w| {
            let load = w.load.unwrap_or_default();
            Some(Candidate {
                addr: celeborn_addr(w.celeborn.as_ref()?),
                free_memory: load.memory_capacity.saturating_sub(load.memory_used),
                partitions: load.partitions,
                rack: if w.rack.is_empty() {
                    switchyard_celeborn::server::fleet::DEFAULT_RACK.to_string()
                } else {
                    w.rack.clone()
                },
                tags: w.celeborn.as_ref()?.tags.clone(),
            })
        })
    }

    fn warming(&self) -> bool {
        self.0.warming()
    }

    fn knows(&self, worker: &WorkerAddr) -> bool {
        // Field by field: a driver's heartbeat may ask about many workers,
        // each compared with every live one.
        self.0.directory.any_live(|w| {
            w.celeborn.as_ref().is_some_and(|c| {
                c.host == worker.host
                    && c.rpc_port == worker.rpc_port
                    && c.push_port == worker.push_port
                    && c.fetch_port == worker.fetch_port
                    && c.replicate_port == worker.replicate_port
            })
        })
    }

    fn shutting(&self) -> Vec<WorkerAddr> {
        self.0
            .directory
            .decommissioning()
            .iter()
            .filter_map(|w| w.celeborn.as_ref().map(celeborn_addr))
            .collect()
    }

    fn app_seen(&self, app: &str) {
        self.0.apps.seen(app);
    }

    fn shuffle_registered(&self, app: &str, shuffle: i32) {
        self.0.apps.shuffle_registered(app, shuffle);
    }

    fn shuffle_removed(&self, app: &str, shuffle: i32) {
        self.0.apps.shuffle_removed(app, shuffle);
    }

    fn app_lost(&self, app: &str) {
        self.0.apps.app_lost(app);
    }

    fn app_info(
        &self,
        app: &str,
        tenant: &str,
        user: &str,
        extra: std::collections::BTreeMap<String, String>,
    ) {
        self.0.apps.app_info(app, tenant, user, extra);
    }

    fn registered_shuffles(&self, app: &str) -> Vec<i32> {
        self.0.apps.registered_shuffles(app)
    }
}

/// This node as a worker: what it reports to every coordinator.
pub struct NodeWorker {
    pub node_id: String,
    pub admin: String,
    /// `node.rack`, empty when unset.
    pub rack: String,
    pub store: Arc<Store>,
    pub uniffle: Option<(UniffleAddrs, Vec<String>)>,
    pub celeborn: Option<Arc<WorkerState>>,
    pub decommission: Arc<crate::decommission::Decommission>,
}

impl LocalWorker for NodeWorker {
    fn report(&self) -> WorkerHeartbeat {
        // Counters only: a full status walks every partition, once per
        // coordinator per interval.
        let load = self.store.node_load();
        let celeborn_apps = load
            .applications
            .iter()
            .filter_map(|a| FrontEnd::Celeborn.own_id(a).map(str::to_string))
            .collect();
        WorkerHeartbeat {
            protocol_version: PROTOCOL_VERSION,
            node_id: self.node_id.clone(),
            state: if self.decommission.is_active() {
                Wire::Decommissioning as i32
            } else {
                Wire::Active as i32
            },
            uniffle: self.uniffle.as_ref().map(|(a, tags)| UniffleEndpoint {
                id: a.server_id.id.clone(),
                ip: a.server_id.ip.clone(),
                grpc_port: a.server_id.port,
                netty_port: a.server_id.netty_port,
                tags: tags.clone(),
            }),
            celeborn: self.celeborn.as_ref().map(|w| {
                let a = w.addr();
                CelebornEndpoint {
                    host: a.host.clone(),
                    rpc_port: a.rpc_port,
                    push_port: a.push_port,
                    fetch_port: a.fetch_port,
                    replicate_port: a.replicate_port,
                    tags: w.tags().to_vec(),
                }
            }),
            load: Some(Load {
                memory_capacity: load.memory_capacity,
                memory_used: load.memory_used,
                disk_free: load.disk_free,
                partitions: load.partitions,
                healthy: load.ready,
            }),
            celeborn_apps,
            admin: self.admin.clone(),
            rack: self.rack.clone(),
        }
    }

    async fn apply(&self, reply: HeartbeatReply) {
        let Some(worker) = &self.celeborn else {
            return;
        };
        // Any coordinator that saw the driver keeps the application alive
        // here; none that did not can make it go.
        for app in &reply.alive_apps {
            self.store.heartbeat(&stored_app(app));
        }
        let shuffles: Vec<_> = reply
            .removed_shuffles
            .into_iter()
            .filter(|r| worker.has_shuffle(&r.app, r.shuffle_id))
            .collect();
        let apps: Vec<_> = reply
            .removed_apps
            .into_iter()
            .filter(|app| self.store.has_app(&stored_app(app)))
            .collect();
        if shuffles.is_empty() && apps.is_empty() {
            return;
        }
        // Their files and cold objects go in a task of their own: the next
        // heartbeat must not wait for them. Deletes against a slow or
        // stopped S3 took minutes, in which the coordinators declared this
        // node lost (found by the soak). A later reply naming the same ones
        // finds them gone already: the store forgets a removed application
        // or shuffle before it deletes its data.
        let (worker, coordinator) = (worker.clone(), reply.coordinator_id);
        tokio::spawn(async move {
            for r in shuffles {
                tracing::info!(app = %r.app, shuffle = r.shuffle_id, %coordinator, "shuffle unregistered by its driver: removing it");
                worker.remove_shuffle(&r.app, r.shuffle_id).await;
            }
            for app in apps {
                tracing::info!(%app, %coordinator, "application ended: removing its data");
                worker.remove_app(&app).await;
            }
        });
    }
}
