//! Coordinator to coordinator: every coordinator exchanges its app book
//! with every other one (`SyncApps`), each round sending what changed in
//! its book since the peer last took it and merging what changed in the
//! peer's. Books are joins (see [`crate::apps`]), so rounds may be lost,
//! repeated or reordered and the books still converge; no peer is a leader
//! and any may die.
//!
//! Change numbers belong to one incarnation of a book (its epoch): a peer
//! that restarted answers with a new epoch, and then gets the whole book
//! in the next round, as it sends its whole book (it acknowledges nothing
//! of ours) and gets ours whole in its first reply. A failed round
//! acknowledges nothing, so its changes go again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prost::Message;
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

/// App-book exchange bytes (protobuf-encoded `AppSync` messages) that this
/// coordinator sent and received as the asking side of `SyncApps`.
pub const SYNC_BYTES: &str = "switchyard_cluster_app_sync_bytes_total";

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
    /// The peer's book incarnation and the change number of it merged
    /// here (0, 0: nothing yet).
    their_epoch: u64,
    their_seq: u64,
    /// Our change number the peer has everything up to, in its
    /// incarnation `sent_epoch` (our changes went to that one).
    sent_seq: u64,
    sent_epoch: u64,
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
                    their_epoch: 0,
                    their_seq: 0,
                    sent_seq: 0,
                    sent_epoch: 0,
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
    let (address, mut client, since, ack) = {
        let mut p = peer.lock();
        if p.is_self {
            return;
        }
        let endpoint = p.endpoint.clone();
        let client = p
            .client
            .get_or_insert_with(|| ClusterClient::new(endpoint.connect_lazy()))
            .clone();
        // Our changes since what this incarnation of the peer has.
        let since = if p.their_epoch != 0 && p.sent_epoch == p.their_epoch {
            p.sent_seq
        } else {
            0
        };
        (
            p.address.clone(),
            client,
            since,
            (p.their_epoch, p.their_seq),
        )
    };
    let changes = book.changes_since(since);
    let sync = AppSync {
        protocol_version: PROTOCOL_VERSION,
        coordinator_id: coordinator_id.to_string(),
        apps: changes.records,
        epoch: book.epoch(),
        seq: changes.seq,
        ack_epoch: ack.0,
        ack_seq: ack.1,
    };
    // Counted by the asking side only, so that the fleet's sum is what
    // crossed the network once.
    metrics::counter!(SYNC_BYTES, "direction" => "sent").increment(sync.encoded_len() as u64);
    let mut request = tonic::Request::new(sync);
    request.metadata_mut().insert(SECRET_HEADER, secret);
    let result = client.sync_apps(request).await;
    let mut p = peer.lock();
    match result {
        Ok(reply) => {
            let reply = reply.into_inner();
            metrics::counter!(SYNC_BYTES, "direction" => "received")
                .increment(reply.encoded_len() as u64);
            if reply.coordinator_id == coordinator_id {
                tracing::debug!(%address, "cluster.coordinators entry is this coordinator");
                p.is_self = true;
                return;
            }
            let added = book.merge(&reply.apps, APP_BOOK_RETENTION);
            acknowledge(&mut p, &reply, since, changes.seq);
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

/// After an answered round: what each side now has of the other. The reply
/// held the peer's changes after what we acknowledged (everything, when its
/// epoch is new to us); the peer merged our changes since `since`, which
/// completes its copy only if it is the incarnation that had the rest.
fn acknowledge(p: &mut Peer, reply: &AppSync, since: u64, our_seq: u64) {
    if reply.epoch == 0 {
        // A peer that sends whole books: nothing to track.
        (p.their_epoch, p.their_seq, p.sent_seq, p.sent_epoch) = (0, 0, 0, 0);
        return;
    }
    let same_peer = reply.epoch == p.their_epoch;
    p.sent_seq = if since == 0 || same_peer { our_seq } else { 0 };
    p.sent_epoch = reply.epoch;
    p.their_epoch = reply.epoch;
    p.their_seq = reply.seq;
}
