//! `switchyard serve`: binds admin HTTP, settles the node id, opens the
//! store, starts the Uniffle and Celeborn roles, serves admin HTTP, and shuts
//! down in order on SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use switchyard_celeborn::server::fleet::Fleet;
use switchyard_celeborn::server::node::FleetFactory;
use switchyard_celeborn::CelebornNode;
use switchyard_cluster::proto::cluster_server::ClusterServer;
use switchyard_cluster::{
    AppBook, AppSyncer, ClusterService, Directory, Heartbeater, Role, APP_BOOK_RETENTION,
};
use switchyard_storage::Store;
use switchyard_uniffle::UniffleNode;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::admin::throughput::ThroughputHistory;
use crate::admin::{self, AdminState};
use crate::config::GatewayConfig;
use crate::decommission::Decommission;
use crate::fleet::{
    CelebornFleet, Coordination, CoordinatorListener, FleetSecrets, NodeWorker, UniffleFeed,
};
use crate::node::{self, CelebornStatus, IdSource, NodeStatus, UniffleStatus};
use crate::telemetry::{self, NodeField};

/// How long in-flight admin requests may take to finish after a shutdown
/// signal before their connections are dropped.
const ADMIN_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// SIGTERM and SIGINT, registered up front so a signal that arrives while
/// the store is still opening is not lost (nor fatal).
struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    fn register() -> anyhow::Result<Self> {
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Runs the node until a signal. `config_path` is only logged; `log_node`
/// receives the node id once it is known, for every later log line.
pub async fn serve(
    mut config: GatewayConfig,
    config_path: Option<PathBuf>,
    log_node: NodeField,
    numa: Option<&crate::numa::NodeRuntimes>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut signals = ShutdownSignals::register()?;

    // Bind first: a taken port fails before any data directory is touched.
    let listener = TcpListener::bind(config.admin.listen)
        .await
        .with_context(|| format!("cannot listen on admin.listen {}", config.admin.listen))?;
    let admin_addr = listener.local_addr()?;

    // Then the node id, so that every log line and metric from here on
    // carries it.
    let identity = node::resolve(config.node.id.as_deref(), &config.storage.disks.dirs)
        .context("cannot establish the node id")?;
    log_node.set(&identity.id);
    match &config_path {
        Some(path) => info!(config = %path.display(), "configuration loaded"),
        None => info!("no --config given: built-in defaults (and SWITCHYARD_* overrides)"),
    }
    let file = identity.file.as_ref().map(|f| f.display().to_string());
    info!(id = %identity.id, source = identity.source.as_str(), file, "node id");
    if let Some(old) = &identity.replaced {
        warn!(
            configured = %identity.id,
            persisted = %old,
            file,
            "node.id differs from the persisted node id: using node.id and rewriting the file"
        );
    }
    if identity.source == IdSource::Ephemeral {
        warn!("no data directory to persist the node id in: it changes on every start unless node.id is set");
    }
    // Before the store opens, so that its metrics reach the recorder.
    let metrics = telemetry::install_metrics(&identity.id)?;
    config.uniffle.server_id = Some(identity.id.clone());

    let upkeep = tokio::spawn({
        let metrics = metrics.clone();
        async move {
            let mut tick = tokio::time::interval(telemetry::UPKEEP_INTERVAL);
            loop {
                tick.tick().await;
                metrics.run_upkeep();
            }
        }
    });

    info!(
        version = admin::VERSION,
        memory = %config.storage.memory.capacity,
        dirs = ?config.storage.disks.dirs,
        cold = config.storage.cold.is_some(),
        "opening the store"
    );
    // With NUMA placement, each disk's I/O runs on its node's runtime and
    // frame-port connections are spread over the node runtimes.
    let store = Store::open_placed(config.storage.clone(), &|dir| {
        numa.and_then(|n| n.for_dir(dir))
    })
    .await
    .context("cannot open the store")?;
    if let Some(n) = numa {
        switchyard_frame::server::spread_connections(n.handles());
        info!(
            nodes = n.nodes.len(),
            "runtime.numa: connections spread over one runtime per NUMA node"
        );
    }
    info!(ready = store.is_ready(), "store open");

    // A coordinator of a fleet places on the workers that heartbeat it;
    // a node alone, on itself.
    let cluster = &config.cluster;
    let cluster_cancel = CancellationToken::new();
    // Coordinators exchange their app books; a coordinator warms up until
    // it has done so once with every peer, and for `cluster.warmup`.
    let (coordination, syncer) = if cluster.is_fleet() && cluster.has(Role::Coordinator) {
        let apps = Arc::new(AppBook::new(config.celeborn.app_timeout));
        let syncer = AppSyncer::start(
            cluster,
            identity.id.clone(),
            apps.clone(),
            cluster_cancel.clone(),
        )
        .context("invalid cluster.coordinators")?;
        let coordination = Arc::new(Coordination {
            directory: Arc::new(Directory::new(cluster.worker_timeout)),
            apps,
            warm_at: Instant::now() + cluster.warmup,
            synced: syncer.synced(),
        });
        (Some(coordination), Some(syncer))
    } else {
        (None, None)
    };
    let cluster_listener = match &coordination {
        Some(_) => Some(
            TcpListener::bind(cluster.listen)
                .await
                .with_context(|| format!("cannot listen on cluster.listen {}", cluster.listen))?,
        ),
        None => None,
    };

    // Protocol listeners hold a clone of `store` and stop before
    // `store.shutdown()` below.
    let uniffle = if config.uniffle.enabled {
        Some(
            UniffleNode::start(config.uniffle.clone(), store.clone())
                .await
                .context("cannot start the Uniffle roles")?,
        )
    } else {
        info!("uniffle roles disabled");
        None
    };
    let celeborn = if config.celeborn.enabled {
        let fleet = coordination.as_ref().map(|c| {
            let fleet: Arc<dyn Fleet> = Arc::new(CelebornFleet(c.clone()));
            Box::new(move |_| fleet) as FleetFactory
        });
        Some(
            CelebornNode::start_in(config.celeborn.clone(), store.clone(), fleet)
                .await
                .context("cannot start the Celeborn roles")?,
        )
    } else {
        info!("celeborn roles disabled");
        None
    };

    let mut cluster_tasks = Vec::new();
    if let (Some(c), Some(listener)) = (&coordination, cluster_listener) {
        let feed = Arc::new(UniffleFeed::default());
        if let Some(u) = &uniffle {
            let _ = feed.registry.set(u.nodes.clone());
        }
        let secret = cluster.secret.clone().unwrap_or_default();
        let coordinator_listener = Arc::new(CoordinatorListener {
            uniffle: feed,
            celeborn: celeborn.as_ref().map(|c| c.worker.clone()),
        });
        let service = ClusterService::new(
            identity.id.clone(),
            c.directory.clone(),
            c.apps.clone(),
            secret,
            coordinator_listener,
        );
        let cancel = cluster_cancel.clone();
        let addr = listener.local_addr()?;
        cluster_tasks.push(tokio::spawn(async move {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            if let Err(e) = tonic::transport::Server::builder()
                .timeout(Duration::from_secs(30))
                .add_service(ClusterServer::new(service))
                .serve_with_incoming_shutdown(incoming, cancel.cancelled())
                .await
            {
                error!(error = %e, "cluster protocol server stopped");
            }
        }));
        let apps = c.apps.clone();
        let cancel = cluster_cancel.clone();
        cluster_tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(60)) => apps.prune(APP_BOOK_RETENTION),
                }
            }
        }));
        info!(%addr, warmup = ?cluster.warmup, "cluster coordinator listening; drivers are refused until the warm-up ends");
    }
    let mut draining = Vec::new();
    if let Some(u) = &uniffle {
        draining.push(u.draining.clone());
    }
    if let Some(c) = &celeborn {
        draining.push(c.worker.draining.clone());
    }
    let decommission = Decommission::new(draining);
    // A coordinator-only node is no worker: it heartbeats no one.
    let heartbeater = if cluster.is_fleet() && cluster.has(Role::Worker) {
        let worker = Arc::new(NodeWorker {
            node_id: identity.id.clone(),
            // Where others reach this node's admin port: node.host when it
            // listens on every interface.
            admin: match (admin_addr.ip().is_unspecified(), config.node.host) {
                (true, Some(host)) => {
                    std::net::SocketAddr::new(host, admin_addr.port()).to_string()
                }
                _ => admin_addr.to_string(),
            },
            rack: config.node.rack.clone().unwrap_or_default(),
            store: store.clone(),
            uniffle: uniffle.as_ref().map(|u| (u.addrs.clone(), u.tags.clone())),
            celeborn: celeborn.as_ref().map(|c| c.worker.clone()),
            decommission: decommission.clone(),
        });
        // Celeborn secrets registered on another node's master are fetched
        // from the coordinators when a client authenticates here.
        if let Some(secrets) = celeborn.as_ref().and_then(|c| c.worker.auth()) {
            let lookup = switchyard_cluster::SecretLookup::new(cluster, &identity.id)
                .context("invalid cluster.coordinators")?;
            secrets.set_remote(Arc::new(FleetSecrets(lookup)));
        }
        info!(coordinators = ?cluster.coordinators, "heartbeating the fleet's coordinators");
        Some(
            Heartbeater::start(cluster, worker, cluster_cancel.clone())
                .context("invalid cluster.coordinators")?,
        )
    } else {
        None
    };

    let node_status = NodeStatus {
        id: identity.id.clone(),
        id_source: identity.source,
        host: config.node.host,
        admin: admin_addr,
        uniffle: uniffle.as_ref().map(|n| UniffleStatus::new(&n.addrs)),
        celeborn: celeborn.as_ref().map(|n| CelebornStatus::new(&n.addrs)),
    };
    let (stop_tx, mut stop_rx) = watch::channel(false);
    let throughput = ThroughputHistory::new();
    tokio::spawn(throughput.clone().run(stop_rx.clone()));
    let app = admin::router(AdminState {
        store: store.clone(),
        metrics,
        started,
        node: Arc::new(node_status),
        throughput,
        coordination: coordination.clone(),
        decommission: decommission.clone(),
        token: config.admin.token.clone(),
    });
    let mut admin_server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })
            .await
    });
    info!(%admin_addr, "admin HTTP listening (/ /healthz /readyz /metrics /api/v1/status /api/v1/cluster /api/v1/throughput)");

    let mut result = Ok(());
    let decommissioned = decommission.finished(
        &store,
        cluster.decommission_check_interval,
        cluster.decommission_timeout,
    );
    tokio::select! {
        reason = async {
            tokio::select! {
                signal = signals.recv() => signal,
                _ = decommissioned => "decommissioned",
            }
        } => {
            info!(reason, "shutting down: closing admin HTTP");
            let _ = stop_tx.send(true);
            match tokio::time::timeout(ADMIN_DRAIN_TIMEOUT, &mut admin_server).await {
                Ok(Ok(Ok(()))) => info!("admin HTTP closed"),
                Ok(Ok(Err(e))) => warn!(error = %e, "admin HTTP ended with an error"),
                Ok(Err(e)) => warn!(error = %e, "admin HTTP task failed"),
                Err(_) => {
                    warn!(timeout = ?ADMIN_DRAIN_TIMEOUT, "admin HTTP requests still running; dropping them");
                    admin_server.abort();
                }
            }
        }
        ended = &mut admin_server => {
            let err = match ended {
                Ok(Ok(())) => anyhow::anyhow!("admin HTTP stopped unexpectedly"),
                Ok(Err(e)) => anyhow::Error::new(e).context("admin HTTP failed"),
                Err(e) => anyhow::Error::new(e).context("admin HTTP task failed"),
            };
            error!(error = format!("{err:#}"), "shutting down");
            result = Err(err);
        }
    }

    // A second signal skips the rest of the shutdown.
    tokio::spawn(async move {
        let signal = signals.recv().await;
        warn!(
            signal,
            "second signal: exiting before the store finished shutting down"
        );
        std::process::exit(130);
    });

    // Celeborn clients move their pushes elsewhere while every port is
    // still open (heartbeats go on meanwhile).
    if let Some(node) = &celeborn {
        node.drain().await;
    }
    cluster_cancel.cancel();
    if let Some(h) = heartbeater {
        h.stop().await;
    }
    if let Some(s) = syncer {
        s.stop().await;
    }
    for t in cluster_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    if let Some(node) = uniffle {
        info!("closing the Uniffle listeners");
        node.shutdown().await;
    }
    if let Some(node) = celeborn {
        info!("closing the Celeborn listeners");
        node.shutdown().await;
    }
    info!("shutting down the store: flushing buffered data");
    let flush_started = Instant::now();
    store.shutdown().await;
    info!(took = ?flush_started.elapsed(), "store closed");
    upkeep.abort();
    if result.is_ok() {
        info!(uptime = ?started.elapsed(), "switchyard stopped");
    }
    result
}
