//! `switchyard serve`: binds admin HTTP, settles the node id, opens the
//! store, starts the Uniffle and Celeborn roles, serves admin HTTP, and shuts
//! down in order on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusHandle;
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
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::admin::throughput::ThroughputHistory;
use crate::admin::{self, AdminState};
use crate::config::GatewayConfig;
use crate::decommission::Decommission;
use crate::fleet::{
    CelebornFleet, Coordination, CoordinatorListener, FleetSecrets, NodeWorker, UniffleFeed,
};
use crate::node::{self, CelebornStatus, IdSource, NodeIdentity, NodeStatus, UniffleStatus};
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
///
/// The steps, in this order: bind the admin port, settle the node id,
/// install the metrics recorder, open the store, start the roles, serve
/// admin HTTP until a signal (or the end of a decommission), then shut
/// down: roles first, the store last.
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
    let identity = settle_identity(&config, config_path.as_deref(), &log_node)?;
    // Before the store opens, so that its metrics reach the recorder.
    let metrics = telemetry::install_metrics(&identity.id)?;
    config.uniffle.server_id = Some(identity.id.clone());
    node_cold_prefix(&mut config.storage, &identity);
    let upkeep = spawn_metrics_upkeep(metrics.clone());

    let disk_faults = config.admin.fault_injection.then(|| {
        warn!("admin.fault_injection is on: POST /api/v1/faults/disk can fail or hang this node's disks (tests only)");
        Arc::new(switchyard_storage::fault::SwitchedFaults::default())
    });
    let store = open_store(&config, numa, disk_faults.clone()).await?;
    let roles = Roles::start(&config, &identity, &store, admin_addr).await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let throughput = ThroughputHistory::new();
    tokio::spawn(throughput.clone().run(stop_rx.clone()));
    let admin_state = AdminState {
        store: store.clone(),
        metrics,
        started,
        node: Arc::new(roles.status(&identity, &config, admin_addr)),
        throughput,
        coordination: roles.coordination.clone(),
        decommission: roles.decommission.clone(),
        token: config.admin.token.clone(),
        disk_faults,
    };
    let local = config
        .cluster
        .has(Role::Worker)
        .then(|| roles.node_worker(&config, &identity, &store, admin_addr));
    let vendor = admin::vendor::VendorState::new(admin_state.clone(), local, &config)?;
    admin::vendor::spawn(config.vendor_api_listeners(), vendor, stop_rx.clone()).await?;
    let app = admin::router(admin_state);
    let admin_server = spawn_admin(listener, app, stop_rx);
    info!(%admin_addr, "admin HTTP listening (/ /healthz /readyz /metrics /api/v1/status /api/v1/cluster /api/v1/throughput)");

    let decommissioned = roles.decommission.finished(
        &store,
        config.cluster.decommission_check_interval,
        config.cluster.decommission_timeout,
    );
    let result = run_until_stopped(&mut signals, decommissioned, admin_server, stop_tx).await;
    exit_on_second_signal(signals);

    roles.shutdown().await;
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

/// Decides the node id (`node::resolve`), hands it to the log formatter and
/// logs where the configuration and the id came from.
fn settle_identity(
    config: &GatewayConfig,
    config_path: Option<&Path>,
    log_node: &NodeField,
) -> anyhow::Result<NodeIdentity> {
    let identity = node::resolve(config.node.id.as_deref(), &config.storage.disks.dirs)
        .context("cannot establish the node id")?;
    log_node.set(&identity.id);
    match config_path {
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
    Ok(identity)
}

/// Puts this node's cold objects under `<cold.prefix>/<node id>/`: the
/// nodes of a fleet share one bucket, and a node's own cleanup (a removed
/// shuffle's or application's prefix, the orphan sweep after a restart)
/// must only ever see its own objects. A sweep over a shared prefix once
/// deleted other nodes' live segments (found by the soak).
fn node_cold_prefix(storage: &mut switchyard_storage::StoreConfig, identity: &NodeIdentity) {
    if let Some(cold) = storage.cold.as_mut() {
        let base = cold.prefix.trim_matches('/');
        cold.prefix = if base.is_empty() {
            identity.id.clone()
        } else {
            format!("{base}/{}", identity.id)
        };
        info!(prefix = %cold.prefix, "cold tier objects of this node");
        if identity.source == IdSource::Ephemeral {
            warn!("the node id is not persisted: after a restart this node cannot find or clean its earlier cold objects; set node.id");
        }
    }
}

/// The Prometheus recorder's periodic upkeep (histogram decay), until aborted.
fn spawn_metrics_upkeep(metrics: PrometheusHandle) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(telemetry::UPKEEP_INTERVAL);
        loop {
            tick.tick().await;
            metrics.run_upkeep();
        }
    })
}

async fn open_store(
    config: &GatewayConfig,
    numa: Option<&crate::numa::NodeRuntimes>,
    faults: Option<Arc<switchyard_storage::fault::SwitchedFaults>>,
) -> anyhow::Result<Arc<Store>> {
    info!(
        version = admin::VERSION,
        memory = %config.storage.memory.capacity,
        dirs = ?config.storage.disks.dirs,
        cold = config.storage.cold.is_some(),
        "opening the store"
    );
    // With NUMA placement, each disk's I/O runs on its node's runtime and
    // frame-port connections are spread over the node runtimes.
    let faults = faults.map(|f| f as Arc<dyn switchyard_storage::fault::DiskFaults>);
    let store = Store::open_placed_with_faults(config.storage.clone(), faults, &|dir| {
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
    Ok(store)
}

/// Everything this node runs besides the store and admin HTTP: the
/// protocol roles and, in a fleet, the cluster protocol's tasks. Protocol
/// listeners hold a clone of the store and stop before `store.shutdown()`.
struct Roles {
    uniffle: Option<UniffleNode>,
    celeborn: Option<CelebornNode>,
    /// Set on a coordinator of a fleet.
    coordination: Option<Arc<Coordination>>,
    decommission: Arc<Decommission>,
    cluster_cancel: CancellationToken,
    heartbeater: Option<Heartbeater>,
    syncer: Option<AppSyncer>,
    cluster_tasks: Vec<JoinHandle<()>>,
}

impl Roles {
    async fn start(
        config: &GatewayConfig,
        identity: &NodeIdentity,
        store: &Arc<Store>,
        admin_addr: SocketAddr,
    ) -> anyhow::Result<Roles> {
        let cluster = &config.cluster;
        let cluster_cancel = CancellationToken::new();
        let (coordination, syncer) = start_coordination(config, identity, &cluster_cancel)?;
        let cluster_listener =
            match &coordination {
                Some(_) => Some(TcpListener::bind(cluster.listen).await.with_context(|| {
                    format!("cannot listen on cluster.listen {}", cluster.listen)
                })?),
                None => None,
            };
        let uniffle = start_uniffle(config, store).await?;
        let celeborn = start_celeborn(config, store, coordination.as_ref()).await?;
        let mut cluster_tasks = Vec::new();
        if let (Some(c), Some(listener)) = (&coordination, cluster_listener) {
            cluster_tasks = serve_coordinator(
                c,
                listener,
                config,
                identity,
                (uniffle.as_ref(), celeborn.as_ref()),
                &cluster_cancel,
            )?;
        }
        let mut draining = Vec::new();
        if let Some(u) = &uniffle {
            draining.push(u.draining.clone());
        }
        if let Some(c) = &celeborn {
            draining.push(c.worker.draining.clone());
        }
        let mut roles = Roles {
            uniffle,
            celeborn,
            coordination,
            decommission: Decommission::new(draining),
            cluster_cancel,
            heartbeater: None,
            syncer,
            cluster_tasks,
        };
        roles.heartbeater = roles.start_heartbeat(config, identity, store, admin_addr)?;
        Ok(roles)
    }

    /// In a fleet, a worker heartbeats the coordinators; a coordinator-only
    /// node is no worker: it heartbeats no one.
    fn start_heartbeat(
        &self,
        config: &GatewayConfig,
        identity: &NodeIdentity,
        store: &Arc<Store>,
        admin_addr: SocketAddr,
    ) -> anyhow::Result<Option<Heartbeater>> {
        let cluster = &config.cluster;
        if !(cluster.is_fleet() && cluster.has(Role::Worker)) {
            return Ok(None);
        }
        let celeborn = &self.celeborn;
        let worker = self.node_worker(config, identity, store, admin_addr);
        // Celeborn secrets registered on another node's master are fetched
        // from the coordinators when a client authenticates here.
        if let Some(secrets) = celeborn.as_ref().and_then(|c| c.worker.auth()) {
            let lookup = switchyard_cluster::SecretLookup::new(cluster, &identity.id)
                .context("invalid cluster.coordinators")?;
            secrets.set_remote(Arc::new(FleetSecrets(lookup)));
        }
        info!(coordinators = ?cluster.coordinators, "heartbeating the fleet's coordinators");
        Ok(Some(
            Heartbeater::start(cluster, worker, self.cluster_cancel.clone())
                .context("invalid cluster.coordinators")?,
        ))
    }

    /// This node as a worker: what its heartbeat reports, and what the
    /// vendor APIs describe it by.
    fn node_worker(
        &self,
        config: &GatewayConfig,
        identity: &NodeIdentity,
        store: &Arc<Store>,
        admin_addr: SocketAddr,
    ) -> Arc<NodeWorker> {
        Arc::new(NodeWorker {
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
            uniffle: self
                .uniffle
                .as_ref()
                .map(|u| (u.addrs.clone(), u.tags.clone())),
            celeborn: self.celeborn.as_ref().map(|c| c.worker.clone()),
            decommission: self.decommission.clone(),
        })
    }

    /// The `node` object of `/api/v1/status`.
    fn status(
        &self,
        identity: &NodeIdentity,
        config: &GatewayConfig,
        admin_addr: SocketAddr,
    ) -> NodeStatus {
        NodeStatus {
            id: identity.id.clone(),
            id_source: identity.source,
            host: config.node.host,
            admin: admin_addr,
            uniffle: self.uniffle.as_ref().map(|n| UniffleStatus::new(&n.addrs)),
            celeborn: self
                .celeborn
                .as_ref()
                .map(|n| CelebornStatus::new(&n.addrs)),
        }
    }

    /// Stops the roles, store left running: Celeborn clients are told to
    /// move first, then the cluster tasks end, then the listeners close.
    async fn shutdown(self) {
        // Celeborn clients move their pushes elsewhere while every port is
        // still open (heartbeats go on meanwhile).
        if let Some(node) = &self.celeborn {
            node.drain().await;
        }
        self.cluster_cancel.cancel();
        if let Some(h) = self.heartbeater {
            h.stop().await;
        }
        if let Some(s) = self.syncer {
            s.stop().await;
        }
        for t in self.cluster_tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if let Some(node) = self.uniffle {
            info!("closing the Uniffle listeners");
            node.shutdown().await;
        }
        if let Some(node) = self.celeborn {
            info!("closing the Celeborn listeners");
            node.shutdown().await;
        }
    }
}

/// A coordinator of a fleet places on the workers that heartbeat it; a
/// node alone, on itself. Coordinators exchange their app books; a
/// coordinator warms up until it has done so once with every peer, and for
/// `cluster.warmup`.
fn start_coordination(
    config: &GatewayConfig,
    identity: &NodeIdentity,
    cluster_cancel: &CancellationToken,
) -> anyhow::Result<(Option<Arc<Coordination>>, Option<AppSyncer>)> {
    let cluster = &config.cluster;
    if !(cluster.is_fleet() && cluster.has(Role::Coordinator)) {
        return Ok((None, None));
    }
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
    Ok((Some(coordination), Some(syncer)))
}

async fn start_uniffle(
    config: &GatewayConfig,
    store: &Arc<Store>,
) -> anyhow::Result<Option<UniffleNode>> {
    if !config.uniffle.enabled {
        info!("uniffle roles disabled");
        return Ok(None);
    }
    let node = UniffleNode::start(config.uniffle.clone(), store.clone())
        .await
        .context("cannot start the Uniffle roles")?;
    Ok(Some(node))
}

async fn start_celeborn(
    config: &GatewayConfig,
    store: &Arc<Store>,
    coordination: Option<&Arc<Coordination>>,
) -> anyhow::Result<Option<CelebornNode>> {
    if !config.celeborn.enabled {
        info!("celeborn roles disabled");
        return Ok(None);
    }
    let fleet = coordination.map(|c| {
        let fleet: Arc<dyn Fleet> = Arc::new(CelebornFleet(c.clone()));
        Box::new(move |_| fleet) as FleetFactory
    });
    let node = CelebornNode::start_in(config.celeborn.clone(), store.clone(), fleet)
        .await
        .context("cannot start the Celeborn roles")?;
    Ok(Some(node))
}

/// A coordinator's cluster protocol server on `listener`, and the task that
/// prunes its app book, until `cancel`.
fn serve_coordinator(
    c: &Coordination,
    listener: TcpListener,
    config: &GatewayConfig,
    identity: &NodeIdentity,
    (uniffle, celeborn): (Option<&UniffleNode>, Option<&CelebornNode>),
    cancel: &CancellationToken,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let cluster = &config.cluster;
    let feed = Arc::new(UniffleFeed::default());
    if let Some(u) = uniffle {
        let _ = feed.registry.set(u.nodes.clone());
    }
    let secret = cluster.secret.clone().unwrap_or_default();
    let coordinator_listener = Arc::new(CoordinatorListener {
        uniffle: feed,
        celeborn: celeborn.map(|c| c.worker.clone()),
    });
    let service = ClusterService::new(
        identity.id.clone(),
        c.directory.clone(),
        c.apps.clone(),
        secret,
        coordinator_listener,
    );
    let addr = listener.local_addr()?;
    let mut tasks = Vec::new();
    let stop = cancel.clone();
    tasks.push(tokio::spawn(async move {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        if let Err(e) = tonic::transport::Server::builder()
            .timeout(Duration::from_secs(30))
            .add_service(ClusterServer::new(service))
            .serve_with_incoming_shutdown(incoming, stop.cancelled())
            .await
        {
            error!(error = %e, "cluster protocol server stopped");
        }
    }));
    let apps = c.apps.clone();
    let stop = cancel.clone();
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_secs(60)) => apps.prune(APP_BOOK_RETENTION),
            }
        }
    }));
    info!(%addr, warmup = ?cluster.warmup, "cluster coordinator listening; drivers are refused until the warm-up ends");
    Ok(tasks)
}

type AdminServer = JoinHandle<std::io::Result<()>>;

/// Admin HTTP on `listener` until `stop` turns true.
fn spawn_admin(
    listener: TcpListener,
    app: axum::Router,
    mut stop: watch::Receiver<bool>,
) -> AdminServer {
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|stop| *stop).await;
            })
            .await
    })
}

/// Waits for a signal or the end of a decommission, then closes admin HTTP
/// (its requests get `ADMIN_DRAIN_TIMEOUT`); an admin server that stops on
/// its own is an error.
async fn run_until_stopped(
    signals: &mut ShutdownSignals,
    decommissioned: impl std::future::Future<Output = ()>,
    mut admin_server: AdminServer,
    stop_tx: watch::Sender<bool>,
) -> anyhow::Result<()> {
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
            Ok(())
        }
        ended = &mut admin_server => {
            let err = match ended {
                Ok(Ok(())) => anyhow::anyhow!("admin HTTP stopped unexpectedly"),
                Ok(Err(e)) => anyhow::Error::new(e).context("admin HTTP failed"),
                Err(e) => anyhow::Error::new(e).context("admin HTTP task failed"),
            };
            error!(error = format!("{err:#}"), "shutting down");
            Err(err)
        }
    }
}

/// A second signal skips the rest of the shutdown.
fn exit_on_second_signal(mut signals: ShutdownSignals) {
    tokio::spawn(async move {
        let signal = signals.recv().await;
        warn!(
            signal,
            "second signal: exiting before the store finished shutting down"
        );
        std::process::exit(130);
    });
}
