//! Starts the Uniffle roles of one process: the coordinator, the shuffle
//! server's gRPC service and its Netty data plane. The local shuffle server
//! registers itself with the local coordinator directly (no loopback RPC).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use switchyard_frame::server::{serve, TransportBudget};
use switchyard_storage::Store;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::config::UniffleConfig;
use crate::coordinator::{CoordinatorService, NodeRegistry, VERSION_TAG};
use crate::grpc_memory::GrpcMemoryLayer;
use crate::proto::coordinator_server_server::CoordinatorServerServer;
use crate::proto::shuffle_server_server::ShuffleServerServer;
use crate::proto::ShuffleServerId;
use crate::rpc_timing::RpcTimingLayer;
use crate::server::grpc::ShuffleServerService;
use crate::server::netty::NettyPort;
use crate::server::ShuffleServerCore;
use switchyard_memory::NodeMemory;

/// Addresses the roles actually bound (ports may have been 0).
#[derive(Debug, Clone)]
pub struct UniffleAddrs {
    /// None on a node without the coordinator role.
    pub coordinator: Option<SocketAddr>,
    /// None on a coordinator-only node (no shuffle server).
    pub server_grpc: Option<SocketAddr>,
    pub server_netty: Option<SocketAddr>,
    pub server_id: ShuffleServerId,
}

pub struct UniffleNode {
    pub addrs: UniffleAddrs,
    /// The tags this node's shuffle server advertises.
    pub tags: Vec<String>,
    /// Set while the node decommissions: its own coordinator assigns it
    /// nothing new (it keeps serving what it holds).
    pub draining: Arc<AtomicBool>,
    pub core: Arc<ShuffleServerCore>,
    pub nodes: Arc<NodeRegistry>,
    tasks: Vec<JoinHandle<()>>,
    cancel: CancellationToken,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr} for the Uniffle {role}: {source}")]
    Bind {
        role: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// HTTP/2 flow-control windows. The 64 KiB protocol default makes a 16 MiB
/// sendShuffleData wait for hundreds of window updates; the Java client
/// (grpc-java) starts at 1 MiB and grows with its BDP probe.
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 64 << 20;

/// Concurrent calls (HTTP/2 streams) one gRPC connection may open, sent to the
/// client as SETTINGS_MAX_CONCURRENT_STREAMS. The Java client runs about as many calls
/// per server as its send and read threads (tens).
const MAX_CONCURRENT_STREAMS: u32 = 256;
/// A call not answered within this is cancelled (its client retries as after any
/// failure): nothing a client sends can hold a handler for ever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// HTTP/2 pings find dead peers whose connections would otherwise stay open.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

fn grpc_server() -> Server {
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(1 << 20)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .concurrency_limit_per_connection(MAX_CONCURRENT_STREAMS as usize)
        .timeout(REQUEST_TIMEOUT)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(KEEPALIVE_INTERVAL))
}

async fn bind(role: &'static str, addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { role, addr, source })
}

impl UniffleNode {
    pub async fn start(
        config: UniffleConfig,
        store: Arc<Store>,
    ) -> Result<UniffleNode, StartError> {
        let cancel = CancellationToken::new();
        let coordinator = match config.coordinator_role {
            true => Some(bind("coordinator", config.coordinator_listen).await?),
            false => None,
        };
        let grpc = match config.server_role {
            true => Some(bind("shuffle server", config.server_grpc_listen).await?),
            false => None,
        };
        let netty_listener = match (config.server_role, config.server_netty_listen) {
            (true, Some(addr)) => Some(bind("netty data plane", addr).await?),
            _ => None,
        };
        let coordinator_addr = coordinator.as_ref().map(|c| c.local_addr().expect("bound"));
        let grpc_addr = grpc.as_ref().map(|g| g.local_addr().expect("bound"));
        let netty_addr = netty_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound"));
        let server_id = server_id(&config, coordinator_addr, grpc_addr, netty_addr);
        let mut tags = vec![VERSION_TAG.to_string(), "GRPC".to_string()];
        if netty_addr.is_some() {
            tags.push("GRPC_NETTY".to_string());
        }
        tags.extend(config.tags.iter().cloned());

        let nodes = Arc::new(NodeRegistry::new(config.node_timeout));
        let node_memory = store.node_memory();
        let core = ShuffleServerCore::new(store.clone(), config.clone());
        let draining = core.draining_flag();
        let max = config.max_message_size.as_u64() as usize;
        // What one message may decode into (protobuf amplifies): the same.
        crate::bounded::set_limit(max as u64);
        let mut tasks = Vec::new();

        if grpc.is_some() {
            let local = LocalServer {
                id: server_id.clone(),
                tags: tags.clone(),
                store: store.clone(),
                draining: draining.clone(),
            };
            tasks.push(local.heartbeat(nodes.clone(), config.node_timeout, cancel.clone()));
        }
        if let Some(coordinator) = coordinator {
            let service = CoordinatorService::new(nodes.clone(), config.clone(), Some(store));
            tasks.push(spawn_coordinator(coordinator, service, max, cancel.clone()));
        }
        if let Some(grpc) = grpc {
            tasks.push(spawn_shuffle_server(
                grpc,
                core.clone(),
                max,
                node_memory.clone(),
                cancel.clone(),
            ));
        }
        if let Some(listener) = netty_listener {
            tasks.push(tokio::spawn(serve(
                listener,
                NettyPort::new(core.clone()),
                config.max_frame_size.as_u64() as usize,
                config.connections,
                TransportBudget::new(&config.connections, node_memory),
                cancel.clone(),
            )));
        }
        tasks.push(tokio::spawn(core.clone().run_housekeeping(cancel.clone())));

        tracing::info!(
            coordinator = ?coordinator_addr,
            grpc = ?grpc_addr,
            netty = ?netty_addr,
            id = %server_id.id,
            "uniffle roles listening"
        );
        Ok(UniffleNode {
            addrs: UniffleAddrs {
                coordinator: coordinator_addr,
                server_grpc: grpc_addr,
                server_netty: netty_addr,
                server_id,
            },
            tags,
            draining,
            core,
            nodes,
            tasks,
            cancel,
        })
    }

    /// Stops accepting requests and waits for the listeners to close.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

/// The shuffle server's identity: `uniffle.server_id` (the node id), else
/// `host-grpcport[-nettyport]`, at `uniffle.advertised_host`, else the IP
/// the gRPC port (or the coordinator) bound; 127.0.0.1 for an unspecified
/// one. A node that splits huge partitions always takes Uniffle's own form:
/// the 0.10 client parses the id of a server that asks for a split
/// (`ShuffleServerInfo.from`, `host-grpcPort[-nettyPort]`, numbers after the
/// dashes) and fails the task on any other.
fn server_id(
    config: &UniffleConfig,
    coordinator_addr: Option<SocketAddr>,
    grpc_addr: Option<SocketAddr>,
    netty_addr: Option<SocketAddr>,
) -> ShuffleServerId {
    let host = config.advertised_host.clone().unwrap_or_else(|| {
        let ip = grpc_addr
            .or(coordinator_addr)
            .map_or(config.server_grpc_listen.ip(), |a| a.ip());
        if ip.is_unspecified() {
            tracing::warn!("uniffle.advertised_host is not set while listening on all interfaces; advertising 127.0.0.1");
            "127.0.0.1".to_string()
        } else {
            ip.to_string()
        }
    });
    let grpc_port = grpc_addr.map_or(0, |a| a.port());
    let splits = config.huge_partition_split_limit.is_some();
    if splits && host.contains('-') {
        tracing::warn!(%host, "uniffle.huge_partition_split_limit is set but the advertised host has a '-': 0.10 clients cannot parse this server's id when it asks for a split; advertise an IP");
    }
    let given = config.server_id.as_ref().filter(|_| !splits);
    ShuffleServerId {
        id: match (given, netty_addr) {
            (Some(id), _) => id.clone(),
            (None, Some(n)) => format!("{host}-{grpc_port}-{}", n.port()),
            (None, None) => format!("{host}-{grpc_port}"),
        },
        ip: host,
        port: grpc_port as i32,
        netty_port: netty_addr.map(|a| a.port() as i32).unwrap_or(-1),
        jetty_port: 0,
    }
}

/// This node's own shuffle server, as its coordinator's registry sees it.
struct LocalServer {
    id: ShuffleServerId,
    tags: Vec<String>,
    store: Arc<Store>,
    draining: Arc<AtomicBool>,
}

impl LocalServer {
    /// The local server's own heartbeat, straight into the registry: once
    /// now, then every third of `node_timeout` until `cancel`.
    fn heartbeat(
        self,
        nodes: Arc<NodeRegistry>,
        node_timeout: Duration,
        cancel: CancellationToken,
    ) -> JoinHandle<()> {
        let beat = (node_timeout / 3).max(Duration::from_millis(100));
        nodes.upsert_local(
            self.id.clone(),
            self.tags.clone(),
            available(&self.store),
            self.store.is_ready(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(beat) => {}
                }
                nodes.upsert_local(
                    self.id.clone(),
                    self.tags.clone(),
                    available(&self.store),
                    self.store.is_ready() && !self.draining.load(Ordering::Relaxed),
                );
            }
        })
    }
}

fn spawn_coordinator(
    listener: TcpListener,
    service: CoordinatorService,
    max: usize,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let service = CoordinatorServerServer::new(service)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    tokio::spawn(async move {
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        if let Err(e) = grpc_server()
            .layer(RpcTimingLayer {
                port: "coordinator",
            })
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, cancel.cancelled())
            .await
        {
            tracing::error!(error = %e, "uniffle coordinator stopped");
        }
    })
}

fn spawn_shuffle_server(
    listener: TcpListener,
    core: Arc<ShuffleServerCore>,
    max: usize,
    node_memory: Arc<NodeMemory>,
    cancel: CancellationToken,
) -> JoinHandle<()> {
    let service = ShuffleServerServer::new(ShuffleServerService::new(core))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    tokio::spawn(async move {
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        if let Err(e) = grpc_server()
            .layer(RpcTimingLayer { port: "grpc" })
            // Messages are charged to the node's number before tonic reads them.
            .layer(GrpcMemoryLayer { node: node_memory })
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, cancel.cancelled())
            .await
        {
            tracing::error!(error = %e, "uniffle shuffle server stopped");
        }
    })
}

fn available(store: &Store) -> i64 {
    let b = store.budget();
    b.capacity().saturating_sub(b.used()) as i64
}
