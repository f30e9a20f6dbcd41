//! The coordinator side of the cluster protocol.

use std::sync::Arc;

use switchyard_storage::Secret;
use tonic::{Request, Response, Status};

use crate::apps::AppBook;
use crate::directory::Directory;
use crate::proto::cluster_server::Cluster;
use crate::proto::{
    AppSync, CelebornSecretReply, CelebornSecretRequest, HeartbeatReply, WorkerHeartbeat,
};
use crate::sync::APP_BOOK_RETENTION;
use crate::{PROTOCOL_VERSION, SECRET_HEADER};

/// Told of every accepted heartbeat (the gateway feeds the Uniffle
/// coordinator's server list from it).
pub trait WorkerListener: Send + Sync + 'static {
    fn worker_seen(&self, heartbeat: &WorkerHeartbeat);
    /// The secret a Celeborn application registered on this node's master;
    /// None when it knows none (or authentication is off).
    fn celeborn_secret(&self, _app: &str) -> Option<Vec<u8>> {
        None
    }
}

pub struct ClusterService {
    pub coordinator_id: String,
    pub directory: Arc<Directory>,
    pub apps: Arc<AppBook>,
    secret: Secret,
    listener: Arc<dyn WorkerListener>,
}

impl ClusterService {
    pub fn new(
        coordinator_id: String,
        directory: Arc<Directory>,
        apps: Arc<AppBook>,
        secret: Secret,
        listener: Arc<dyn WorkerListener>,
    ) -> Self {
        ClusterService {
            coordinator_id,
            directory,
            apps,
            secret,
            listener,
        }
    }

    /// Constant-time comparison with the configured secret.
    fn authorised(&self, metadata: &tonic::metadata::MetadataMap) -> bool {
        let Some(sent) = metadata.get(SECRET_HEADER) else {
            return false;
        };
        self.secret.matches(sent.as_bytes())
    }
}

/// A version this build does not speak.
fn version_refused(version: u32) -> Option<Status> {
    (version == 0 || version > PROTOCOL_VERSION).then(|| {
        Status::failed_precondition(format!(
            "cluster protocol version {version} is not spoken here (1..={PROTOCOL_VERSION})"
        ))
    })
}

fn refused(reason: &'static str) {
    metrics::counter!("switchyard_cluster_heartbeats_received_total", "result" => reason)
        .increment(1);
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn heartbeat(
        &self,
        request: Request<WorkerHeartbeat>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        if !self.authorised(request.metadata()) {
            refused("unauthenticated");
            return Err(Status::unauthenticated(
                "cluster heartbeats need the cluster secret (cluster.secret)",
            ));
        }
        let hb = request.into_inner();
        if let Some(status) = version_refused(hb.protocol_version) {
            refused("version");
            return Err(status);
        }
        if hb.node_id.is_empty() || hb.node_id.len() > 128 {
            refused("invalid");
            return Err(Status::invalid_argument(
                "heartbeat without a valid node_id",
            ));
        }
        if hb.celeborn_apps.len() > 100_000 {
            refused("invalid");
            return Err(Status::invalid_argument(
                "too many applications in one heartbeat",
            ));
        }
        refused("accepted");
        let news = self.apps.news_for(&hb.celeborn_apps);
        self.listener.worker_seen(&hb);
        self.directory.record(hb);
        Ok(Response::new(HeartbeatReply {
            protocol_version: PROTOCOL_VERSION,
            coordinator_id: self.coordinator_id.clone(),
            alive_apps: news.alive,
            removed_shuffles: news.removed_shuffles,
            removed_apps: news.removed_apps,
        }))
    }

    async fn celeborn_secret(
        &self,
        request: Request<CelebornSecretRequest>,
    ) -> Result<Response<CelebornSecretReply>, Status> {
        let outcome = |result: &'static str| {
            metrics::counter!("switchyard_cluster_secret_lookups_total", "result" => result)
                .increment(1)
        };
        if !self.authorised(request.metadata()) {
            outcome("unauthenticated");
            return Err(Status::unauthenticated(
                "secret lookups need the cluster secret (cluster.secret)",
            ));
        }
        let r = request.into_inner();
        if let Some(status) = version_refused(r.protocol_version) {
            outcome("version");
            return Err(status);
        }
        let secret = self.listener.celeborn_secret(&r.app);
        outcome(if secret.is_some() { "found" } else { "unknown" });
        tracing::debug!(app = %r.app, worker = %r.node_id, found = secret.is_some(), "celeborn secret lookup");
        Ok(Response::new(CelebornSecretReply {
            protocol_version: PROTOCOL_VERSION,
            found: secret.is_some(),
            secret: secret.unwrap_or_default(),
        }))
    }

    async fn sync_apps(&self, request: Request<AppSync>) -> Result<Response<AppSync>, Status> {
        if !self.authorised(request.metadata()) {
            return Err(Status::unauthenticated(
                "app book exchanges need the cluster secret (cluster.secret)",
            ));
        }
        let sync = request.into_inner();
        if let Some(status) = version_refused(sync.protocol_version) {
            return Err(status);
        }
        if sync.coordinator_id != self.coordinator_id {
            let added = self.apps.merge(&sync.apps, APP_BOOK_RETENTION);
            if added > 0 {
                tracing::info!(peer = %sync.coordinator_id, added, "applications learnt from a coordinator peer");
            }
        }
        // Only what the asker has not merged yet, when it says what it has
        // of this incarnation of the book.
        let since = if sync.ack_epoch == self.apps.epoch() {
            sync.ack_seq
        } else {
            0
        };
        let changes = self.apps.changes_since(since);
        Ok(Response::new(AppSync {
            protocol_version: PROTOCOL_VERSION,
            coordinator_id: self.coordinator_id.clone(),
            apps: changes.records,
            epoch: self.apps.epoch(),
            seq: changes.seq,
            ack_epoch: 0,
            ack_seq: 0,
        }))
    }
}
