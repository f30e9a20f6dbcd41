//! Starts the Celeborn roles of one process: the Master on its RPC port and
//! the Worker on its RPC, push, fetch and replicate ports.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use switchyard_frame::server::tls::TlsAcceptor;
use switchyard_frame::server::{serve, serve_tls, ConnectionLimits, TransportBudget};
use switchyard_storage::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fleet::{Alone, Fleet};
use super::master::MasterEndpoint;
use super::rpc::RpcPort;
use super::worker::{FetchPort, PushPort, WorkerAddr, WorkerState};
use crate::config::CelebornConfig;

/// Makes a node's [`Fleet`] once its worker exists.
pub type FleetFactory = Box<dyn FnOnce(Arc<WorkerState>) -> Arc<dyn Fleet> + Send>;

/// A read stream unused this long is closed (the client's fetch timeout is
/// 600 s by default).
const STREAM_IDLE: Duration = Duration::from_secs(900);

#[derive(Debug, Clone)]
pub struct CelebornAddrs {
    /// The host this node advertises (`celeborn.advertised_host`, else the
    /// bound IP).
    pub host: String,
    /// None on a node without the master role.
    pub master: Option<SocketAddr>,
    /// None on a coordinator-only node (no worker ports).
    pub worker: Option<WorkerAddr>,
}

/// The Worker's four listeners, with the addresses they bound.
struct WorkerPorts {
    rpc: (TcpListener, SocketAddr),
    push: (TcpListener, SocketAddr),
    fetch: (TcpListener, SocketAddr),
    replicate: (TcpListener, SocketAddr),
}

pub struct CelebornNode {
    pub addrs: CelebornAddrs,
    pub worker: Arc<WorkerState>,
    tasks: Vec<JoinHandle<()>>,
    cancel: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr} for the Celeborn {role}: {source}")]
    Bind {
        role: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("celeborn.tls: {0}")]
    Tls(#[from] switchyard_frame::server::tls::TlsError),
}

async fn bind(
    role: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { role, addr, source })?;
    let a = l
        .local_addr()
        .map_err(|source| StartError::Bind { role, addr, source })?;
    Ok((l, a))
}

impl CelebornNode {
    /// A node alone: its master places partitions on its own worker.
    pub async fn start(
        config: CelebornConfig,
        store: Arc<Store>,
    ) -> Result<CelebornNode, StartError> {
        Self::start_in(config, store, None).await
    }

    /// A node of a fleet: `fleet` (made from this node's worker) is what
    /// its master places on; `None` is [`Alone`]. With `master_role` off
    /// (`config.master_role`), no master port is bound.
    pub async fn start_in(
        config: CelebornConfig,
        store: Arc<Store>,
        fleet: Option<FleetFactory>,
    ) -> Result<CelebornNode, StartError> {
        let tls = config.tls.as_ref().map(|t| t.acceptor()).transpose()?;
        let master = match config.master_role {
            true => Some(bind("master", config.master_listen).await?),
            false => None,
        };
        let ports = match config.worker_role {
            true => Some(WorkerPorts {
                rpc: bind("worker rpc", config.worker_rpc_listen).await?,
                push: bind("worker push", config.worker_push_listen).await?,
                fetch: bind("worker fetch", config.worker_fetch_listen).await?,
                replicate: bind("worker replicate", config.worker_replicate_listen).await?,
            }),
            false => None,
        };
        let host = advertised_host(&config, master.as_ref().map(|m| m.1), ports.as_ref());
        let addr = worker_addr(host, ports.as_ref());
        let node_memory = store.node_memory();
        let worker = WorkerState::new(store, config.clone(), addr.clone());
        let fleet: Arc<dyn Fleet> = match fleet {
            Some(make) => make(worker.clone()),
            None => Arc::new(Alone::new(worker.clone())),
        };
        let limits = config.connections;
        let spawner = PortSpawner {
            worker: worker.clone(),
            max: config.max_frame_size.as_u64() as usize,
            rpc_max: config.rpc_max_frame_size.as_u64() as usize,
            limits,
            // One pool of frame and reply bytes for the five ports, inside
            // the node's network share.
            budget: TransportBudget::new(&limits, node_memory),
            tls,
            cancel: CancellationToken::new(),
        };
        let mut tasks = Vec::new();
        let mut master_addr = None;
        if let Some((master, addr)) = master {
            master_addr = Some(addr);
            tasks.push(spawner.master(master, fleet));
        }
        if let Some(ports) = ports {
            tasks.extend(spawner.worker_ports(ports));
        }
        tasks.push(spawner.stream_expiry());
        let worker_addr = config.worker_role.then_some(addr);
        tracing::info!(master = ?master_addr, worker = ?worker_addr.as_ref().map(WorkerAddr::unique_id), "celeborn roles listening");
        Ok(CelebornNode {
            addrs: CelebornAddrs {
                host: worker.addr.host.clone(),
                master: master_addr,
                worker: worker_addr,
            },
            worker,
            tasks,
            cancel: spawner.cancel,
        })
    }

    /// Stops accepting requests and waits for the listeners to close.
    /// The first step of a graceful stop, ports still open: clients move
    /// their pushes elsewhere ([`WorkerState::drain`]).
    pub async fn drain(&self) {
        let c = &self.worker.config;
        self.worker.drain(c.stop_quiet, c.stop_drain_timeout).await;
    }

    pub async fn shutdown(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        // No push is in flight any more: what the worker acknowledged is in
        // the store, which records it next; the locations go with it.
        self.worker.record_live_locations().await;
    }
}

/// `celeborn.advertised_host`, else the IP the worker rpc port (or the
/// master port) bound; 127.0.0.1 for an unspecified one.
fn advertised_host(
    config: &CelebornConfig,
    master: Option<SocketAddr>,
    ports: Option<&WorkerPorts>,
) -> String {
    config.advertised_host.clone().unwrap_or_else(|| {
        let ip = ports
            .map(|p| p.rpc.1)
            .or(master)
            .map_or(config.worker_rpc_listen.ip(), |a| a.ip());
        if ip.is_unspecified() {
            tracing::warn!("celeborn.advertised_host is not set while listening on all interfaces; advertising 127.0.0.1");
            "127.0.0.1".to_string()
        } else {
            ip.to_string()
        }
    })
}

/// The worker's identity: `host` and the ports bound. A coordinator-only
/// node's master still keeps application state in a WorkerState, whose
/// address (ports 0) no one is ever given.
fn worker_addr(host: String, ports: Option<&WorkerPorts>) -> WorkerAddr {
    let port = |p: &(TcpListener, SocketAddr)| p.1.port() as i32;
    WorkerAddr {
        host,
        rpc_port: ports.map_or(0, |p| port(&p.rpc)),
        push_port: ports.map_or(0, |p| port(&p.push)),
        fetch_port: ports.map_or(0, |p| port(&p.fetch)),
        replicate_port: ports.map_or(0, |p| port(&p.replicate)),
    }
}

/// What every port of the node is served with: one worker, one byte
/// budget, one TLS acceptor, one cancellation.
struct PortSpawner {
    worker: Arc<WorkerState>,
    max: usize,
    rpc_max: usize,
    limits: ConnectionLimits,
    budget: TransportBudget,
    tls: Option<TlsAcceptor>,
    cancel: CancellationToken,
}

impl PortSpawner {
    fn master(&self, listener: TcpListener, fleet: Arc<dyn Fleet>) -> JoinHandle<()> {
        let worker = &self.worker;
        tokio::spawn(serve_tls(
            listener,
            RpcPort::new(
                MasterEndpoint::new(worker.clone(), fleet),
                "master",
                port_auth(worker, true),
            ),
            self.rpc_max,
            self.limits,
            self.budget.clone(),
            self.tls.clone(),
            self.cancel.clone(),
        ))
    }

    fn worker_ports(&self, ports: WorkerPorts) -> [JoinHandle<()>; 4] {
        let WorkerPorts {
            rpc: (rpc, _),
            push: (push, _),
            fetch: (fetch, _),
            replicate: (replicate, _),
        } = ports;
        let (worker, max, limits) = (&self.worker, self.max, self.limits);
        [
            tokio::spawn(serve_tls(
                rpc,
                RpcPort::new(
                    super::worker::WorkerEndpoint::new(worker.clone()),
                    "worker-rpc",
                    port_auth(worker, false),
                ),
                self.rpc_max,
                limits,
                self.budget.clone(),
                self.tls.clone(),
                self.cancel.clone(),
            )),
            tokio::spawn(serve_tls(
                push,
                PushPort::new(worker.clone(), "push"),
                max,
                limits,
                self.budget.clone(),
                self.tls.clone(),
                self.cancel.clone(),
            )),
            tokio::spawn(serve_tls(
                fetch,
                FetchPort::new(worker.clone()),
                max,
                limits,
                self.budget.clone(),
                self.tls.clone(),
                self.cancel.clone(),
            )),
            tokio::spawn(serve(
                replicate,
                // Worker to worker: Celeborn's replicate port does not
                // authenticate (the replica pushes carry no application secret).
                PushPort::new(worker.clone(), "replicate"),
                max,
                limits,
                self.budget.clone(),
                self.cancel.clone(),
            )),
        ]
    }

    /// Readers that die without BUFFER_STREAM_END leave streams behind.
    fn stream_expiry(&self) -> JoinHandle<()> {
        let worker = self.worker.clone();
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                }
                worker.expire_streams(STREAM_IDLE);
            }
        })
    }
}

/// An RPC port's authentication, when `auth_enabled` is on.
fn port_auth(worker: &Arc<WorkerState>, registration: bool) -> Option<super::rpc::PortAuth> {
    worker.config.auth_enabled.then(|| super::rpc::PortAuth {
        secrets: worker.secrets.clone(),
        registration,
    })
}
