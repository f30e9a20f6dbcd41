//! Coordinator to coordinator: every coordinator exchanges its app book
//! with every other one (`SyncApps`), each round sending its whole book and
//! merging the peer's. Books are joins (see [`crate::apps`]), so rounds may
//! be lost, repeated or reordered and the books still converge; no peer is
//! a leader and any may die.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;

use crate::apps::AppBook;
use crate::config::ClusterConfig;
use crate::heartbeat::{endpoint, secret_header};
use crate::proto::cluster_client::ClusterClient;
use crate::proto::AppSync;
use crate::{PROTOCOL_VERSION, SECRET_HEADER};

/// How long a coordinator keeps what drivers told it after the application
/// was last seen or lost: past every worker's lease. Records older than
/// this are not taken back from a peer either.
pub const APP_BOOK_RETENTION: Duration = Duration::from_secs(3600);

pub struct AppSyncer {
    /// Set once a first round reached (or failed to reach) every peer: a
    /// coordinator warms up until then, so that it does not answer a driver
    /// that moved to it before it knows what the driver's shuffles are.
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

struct Peer {
    address: String,
    endpoint: Endpoint,
    client: Option<ClusterClient<tonic::transport::Channel>>,
    /// This coordinator itself (its own id came back): skipped.
    is_self: bool,
    failing: bool,
}

impl AppSyncer {
    /// Starts the rounds over `config.coordinators`, every
    /// `heartbeat_interval`. Fails only on an address that is not a URI.
    pub fn start(
        config: &ClusterConfig,
        coordinator_id: String,
        book: Arc<AppBook>,
        cancel: CancellationToken,
    ) -> Result<AppSyncer, tonic::transport::Error> {
        let peers = config
            .coordinators
            .iter()
            .map(|address| {
                Ok(Mutex::new(Peer {
                    address: address.clone(),
                    endpoint: endpoint(config, address)?,
                    client: None,
                    is_self: false,
                    failing: false,
                }))
            })
            .collect::<Result<Vec<_>, tonic::transport::Error>>()?;
        let synced = Arc::new(AtomicBool::new(false));
        let secret = secret_header(config);
        let interval = config.heartbeat_interval;
        let task = tokio::spawn({
            let synced = synced.clone();
            async move {
                let peers: Vec<Arc<Mutex<Peer>>> = peers.into_iter().map(Arc::new).collect();
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tick.tick() => {}
                    }
                    let rounds = peers
                        .iter()
                        .map(|peer| exchange(peer.clone(), &coordinator_id, &book, secret.clone()));
                    // Concurrently: one silent peer delays a round by the request
                    // timeout at most.
                    futures::future::join_all(rounds).await;
                    synced.store(true, Ordering::Release);
                }
            }
        });
        Ok(AppSyncer { synced, task })
    }

    /// Whether a first round is done (each peer answered or failed).
    pub fn synced(&self) -> Arc<AtomicBool> {
        self.synced.clone()
    }

    pub async fn stop(self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

async fn exchange(
    peer: Arc<Mutex<Peer>>,
    coordinator_id: &str,
    book: &AppBook,
    secret: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
) {
    let (address, mut client) = {
        let mut p = peer.lock();
        if p.is_self {
            return;
        }
        let endpoint = p.endpoint.clone();
        let client = p
            .client
            .get_or_insert_with(|| ClusterClient::new(endpoint.connect_lazy()))
            .clone();
        (p.address.clone(), client)
    };
    let mut request = tonic::Request::new(AppSync {
        protocol_version: PROTOCOL_VERSION,
        coordinator_id: coordinator_id.to_string(),
        apps: book.snapshot(),
    });
    request.metadata_mut().insert(SECRET_HEADER, secret);
    let result = client.sync_apps(request).await;
    let mut p = peer.lock();
    match result {
        Ok(reply) => {
            let reply = reply.into_inner();
            if reply.coordinator_id == coordinator_id {
                tracing::debug!(%address, "cluster.coordinators entry is this coordinator");
                p.is_self = true;
                return;
            }
            let added = book.merge(&reply.apps, APP_BOOK_RETENTION);
            metrics::counter!("switchyard_cluster_app_syncs_total", "result" => "ok").increment(1);
            if p.failing {
                tracing::info!(%address, peer = %reply.coordinator_id, "coordinator peer reachable again");
                p.failing = false;
            }
            if added > 0 {
                tracing::info!(peer = %reply.coordinator_id, added, "applications learnt from a coordinator peer");
            }
        }
        Err(status) => {
            metrics::counter!("switchyard_cluster_app_syncs_total", "result" => "failed")
                .increment(1);
            // As with heartbeats: a silent peer's connection would hold
            // every later round until it times out.
            p.client = None;
            if !p.failing {
                tracing::warn!(%address, code = ?status.code(), error = status.message(), "app book exchange with a coordinator failed");
                p.failing = true;
            }
        }
    }
}
