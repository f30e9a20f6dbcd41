//! The worker side: heartbeats every coordinator, concurrently, and hands
//! each reply to the node.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::metadata::MetadataValue;
use tonic::transport::Endpoint;

use crate::config::ClusterConfig;
use crate::proto::cluster_client::ClusterClient;
use crate::proto::{HeartbeatReply, WorkerHeartbeat};
use crate::{PROTOCOL_VERSION, SECRET_HEADER};

/// What the node reports and how it takes the replies.
pub trait LocalWorker: Send + Sync + 'static {
    /// The heartbeat to send now (protocol version and node id included).
    fn report(&self) -> WorkerHeartbeat;
    /// A coordinator's reply; runs on the heartbeat task.
    fn apply(&self, reply: HeartbeatReply) -> impl std::future::Future<Output = ()> + Send;
}

/// The `cluster.secret` as the metadata value every request carries.
pub(crate) fn secret_header(config: &ClusterConfig) -> MetadataValue<tonic::metadata::Ascii> {
    config
        .secret
        .as_ref()
        .map(|s| s.expose())
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|_| MetadataValue::from_static(""))
}

/// A coordinator's endpoint, with the cluster's timeouts and source address.
pub(crate) fn endpoint(
    config: &ClusterConfig,
    coordinator: &str,
) -> Result<Endpoint, tonic::transport::Error> {
    Ok(Endpoint::from_shared(format!("http://{coordinator}"))?
        .connect_timeout(config.request_timeout)
        .timeout(config.request_timeout)
        .tcp_nodelay(true)
        .local_address(config.source_address))
}

pub struct Heartbeater {
    tasks: Vec<JoinHandle<()>>,
}

impl Heartbeater {
    /// One task per coordinator. Fails only on a coordinator address that
    /// is not a valid URI (the config check rules that out).
    pub fn start<W: LocalWorker>(
        config: &ClusterConfig,
        worker: Arc<W>,
        cancel: CancellationToken,
    ) -> Result<Heartbeater, tonic::transport::Error> {
        let secret = secret_header(config);
        let mut tasks = Vec::new();
        for coordinator in &config.coordinators {
            let endpoint = endpoint(config, coordinator)?;
            tasks.push(tokio::spawn(beat(
                coordinator.clone(),
                endpoint,
                secret.clone(),
                config.heartbeat_interval,
                worker.clone(),
                cancel.clone(),
            )));
        }
        Ok(Heartbeater { tasks })
    }

    pub async fn stop(self) {
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

async fn beat<W: LocalWorker>(
    coordinator: String,
    endpoint: Endpoint,
    secret: MetadataValue<tonic::metadata::Ascii>,
    interval: Duration,
    worker: Arc<W>,
    cancel: CancellationToken,
) {
    let mut client = ClusterClient::new(endpoint.connect_lazy());
    let mut failing = false;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut request = tonic::Request::new(worker.report());
        request.metadata_mut().insert(SECRET_HEADER, secret.clone());
        match client.heartbeat(request).await {
            Ok(reply) => {
                metrics::counter!("switchyard_cluster_heartbeats_sent_total", "result" => "ok")
                    .increment(1);
                if failing {
                    tracing::info!(%coordinator, "coordinator reachable again");
                    failing = false;
                }
                worker.apply(reply.into_inner()).await;
            }
            Err(status) => {
                metrics::counter!("switchyard_cluster_heartbeats_sent_total", "result" => "failed")
                    .increment(1);
                // A connection whose peer went silent (a network cut drops
                // packets, so TCP never learns) would hold every later
                // heartbeat until it times out: start over on a fresh one.
                client = ClusterClient::new(endpoint.connect_lazy());
                // Once per outage, not once per beat.
                if !failing {
                    tracing::warn!(%coordinator, code = ?status.code(), error = status.message(), "heartbeat to coordinator failed");
                    failing = true;
                }
            }
        }
    }
}

/// Asks the coordinators, in order, for a Celeborn application's secret
/// (`CelebornSecret`); the first that knows it answers.
pub struct SecretLookup {
    node_id: String,
    coordinators: Vec<(String, Endpoint)>,
    secret: MetadataValue<tonic::metadata::Ascii>,
}

impl SecretLookup {
    pub fn new(config: &ClusterConfig, node_id: &str) -> Result<Self, tonic::transport::Error> {
        let coordinators = config
            .coordinators
            .iter()
            .map(|c| Ok((c.clone(), endpoint(config, c)?)))
            .collect::<Result<_, tonic::transport::Error>>()?;
        Ok(SecretLookup {
            node_id: node_id.to_string(),
            coordinators,
            secret: secret_header(config),
        })
    }

    pub async fn fetch(&self, app: &str) -> Option<Vec<u8>> {
        for (coordinator, endpoint) in &self.coordinators {
            let mut client = ClusterClient::new(endpoint.connect_lazy());
            let mut request = tonic::Request::new(crate::proto::CelebornSecretRequest {
                protocol_version: PROTOCOL_VERSION,
                node_id: self.node_id.clone(),
                app: app.to_string(),
            });
            request
                .metadata_mut()
                .insert(SECRET_HEADER, self.secret.clone());
            match client.celeborn_secret(request).await {
                Ok(reply) => {
                    let reply = reply.into_inner();
                    if reply.found && !reply.secret.is_empty() {
                        return Some(reply.secret);
                    }
                }
                Err(status) => {
                    tracing::debug!(%coordinator, %status, "celeborn secret lookup failed");
                }
            }
        }
        None
    }
}
