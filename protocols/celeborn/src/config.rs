//! Configuration of the Celeborn roles: the Master and one Worker.

use std::net::SocketAddr;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use switchyard_frame::server::ConnectionLimits;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CelebornConfig {
    /// Serve the Celeborn roles at all.
    pub enabled: bool,
    /// The Master's RPC address. 9097 is Celeborn's own default, so an
    /// existing `spark.celeborn.master.endpoints=host:9097` works unchanged.
    pub master_listen: SocketAddr,
    /// Whether this node runs the Master (the gateway's `cluster.roles`;
    /// not a key of its own).
    #[serde(skip, default = "yes")]
    pub master_role: bool,
    /// Whether this node runs the Worker (its four ports); off on a
    /// coordinator-only node (`cluster.roles`; not a key of its own).
    #[serde(skip, default = "yes")]
    pub worker_role: bool,
    /// The Worker's ports, advertised through the Master.
    pub worker_rpc_listen: SocketAddr,
    pub worker_push_listen: SocketAddr,
    pub worker_fetch_listen: SocketAddr,
    pub worker_replicate_listen: SocketAddr,
    /// Host or IP that clients use to reach this node. Default: the listen IP.
    pub advertised_host: Option<String>,
    /// The address connections to replica workers leave from (`node.host`,
    /// set by the gateway). `None`: the kernel picks.
    #[serde(skip)]
    pub source_address: Option<std::net::IpAddr>,
    /// Largest frame accepted on the data ports (push, fetch, replicate).
    /// Default 256 MiB (pushes are at most 64 KiB to a few MiB).
    pub max_frame_size: ByteSize,
    /// Largest frame accepted on the RPC ports (master, worker rpc). Their
    /// control messages are KiBs; the large ones grow with a shuffle's
    /// partitions: ReserveSlots' packed locations take ~20 bytes per
    /// location, CommitFiles ~10 per partition id and 5 per map. Default
    /// 64 MiB: room for over a million locations, a quarter of the data
    /// ports' limit, so a client cannot make an RPC port buffer 256 MiB.
    pub rpc_max_frame_size: ByteSize,
    /// Chunk size of partition reads (`celeborn.shuffle.chunk.size`). Default 8 MiB.
    pub chunk_size: ByteSize,
    /// Most bytes of Flink hybrid-shuffle pushes (Celeborn as Flink 1.20's
    /// remote tier) held in memory, inside the node's memory budget (at most
    /// `storage.memory.capacity`): a push past it flushes its shuffle to
    /// disk before it is answered. Default 64 MiB.
    pub hybrid_memory: ByteSize,
    /// An application whose LifecycleManager sends no heartbeat or request
    /// for this long is removed with its data, and its shuffles stay dead.
    /// Default 300 s, Celeborn's `celeborn.master.heartbeat.application.timeout`
    /// (the client heartbeats every 10 s).
    #[serde(with = "humantime_serde")]
    pub app_timeout: Duration,
    /// At a graceful stop (SIGTERM), the worker first answers every push
    /// HARD_SPLIT and every ReserveSlots WORKER_SHUTDOWN, as Celeborn's
    /// graceful shutdown does, until no push has come for this long; only
    /// then do its ports close. Clients thereby move their partitions to
    /// other workers instead of failing to connect, which would make their
    /// LifecycleManager exclude the worker for minutes (a rolling restart
    /// would soon leave no worker to revive on). Acknowledged data and the
    /// live locations are recorded and served again after the restart.
    /// Default 1 s; 0 closes at once.
    #[serde(with = "humantime_serde")]
    pub stop_quiet: Duration,
    /// The longest the stop waits for pushes to go quiet. Default 30 s.
    #[serde(with = "humantime_serde")]
    pub stop_drain_timeout: Duration,
    /// Celeborn's authentication, as the stock clients speak it with
    /// `spark.celeborn.auth.enabled=true`: a driver registers its
    /// application's secret on the master port, and every connection to the
    /// master, worker rpc, push and fetch ports authenticates with SASL
    /// DIGEST-MD5 and may then act only for its own application. Clients
    /// without it are refused. The replicate port does not authenticate.
    /// Default false.
    pub auth_enabled: bool,
    /// Connections per port and requests in flight per connection, for each of the
    /// master's and worker's ports (`[celeborn.connections]`).
    pub connections: ConnectionLimits,
    /// TLS on the master, worker rpc, push and fetch ports (`[celeborn.tls]`:
    /// `cert` and `key`, PEM files). Clients then need
    /// `spark.celeborn.ssl.rpc_service.enabled=true` (with auth; without it,
    /// `rpc_app`) and `spark.celeborn.ssl.data.enabled=true`. The replicate
    /// port stays plain. Default: off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<switchyard_frame::server::tls::TlsFiles>,
    /// Worker tags (Celeborn 0.6's CIP-11): when true, a RequestSlots whose
    /// `tagsExpr` (the client's `celeborn.tags.tagsExpr`, a comma-separated
    /// list of tags that must all match) is not empty places partitions
    /// only on workers carrying every tag, and answers `WORKER_EXCLUDED`
    /// when none does, as upstream's master does. Default true, upstream's
    /// `celeborn.tags.enabled`.
    pub tags_enabled: bool,
    /// This node's worker tags: the gateway's `node.tags` (not a key of its
    /// own).
    #[serde(skip)]
    pub worker_tags: Vec<String>,
    /// Congestion control (`[celeborn.congestion]`): pushes answered with
    /// Celeborn's `PUSH_DATA_SUCCESS_PRIMARY_CONGESTED` while memory is
    /// nearly full, which a `SLOWSTART` client slows down on.
    pub congestion: CongestionConfig,
}

/// When the worker tells pushers it is congested. Upstream's worker does
/// this from its disk buffer's pending bytes
/// (`celeborn.worker.congestionControl.*`); here the same role falls to the
/// store's memory budget, which is what a push waits on otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CongestionConfig {
    /// Answer pushes `..._CONGESTED` at all. Default false, as upstream
    /// (`celeborn.worker.congestionControl.enabled`).
    pub enabled: bool,
    /// Congested from this share of the memory budget in use (0-1).
    /// Default 0.8.
    pub high_watermark: f64,
    /// ... until the share in use falls to this (0-1, at most
    /// `high_watermark`). Default 0.6.
    pub low_watermark: f64,
}

impl Default for CongestionConfig {
    fn default() -> Self {
        CongestionConfig {
            enabled: false,
            high_watermark: 0.8,
            low_watermark: 0.6,
        }
    }
}

impl Default for CelebornConfig {
    fn default() -> Self {
        CelebornConfig {
            enabled: true,
            master_listen: "127.0.0.1:9097".parse().unwrap(),
            master_role: true,
            worker_role: true,
            worker_rpc_listen: "127.0.0.1:9100".parse().unwrap(),
            worker_push_listen: "127.0.0.1:9101".parse().unwrap(),
            worker_fetch_listen: "127.0.0.1:9102".parse().unwrap(),
            worker_replicate_listen: "127.0.0.1:9103".parse().unwrap(),
            advertised_host: None,
            source_address: None,
            max_frame_size: ByteSize::mib(256),
            rpc_max_frame_size: ByteSize::mib(64),
            chunk_size: ByteSize::mib(8),
            hybrid_memory: ByteSize::mib(64),
            app_timeout: Duration::from_secs(300),
            stop_quiet: Duration::from_secs(1),
            stop_drain_timeout: Duration::from_secs(30),
            connections: ConnectionLimits::default(),
            auth_enabled: false,
            tls: None,
            tags_enabled: true,
            worker_tags: Vec::new(),
            congestion: CongestionConfig::default(),
        }
    }
}

impl CongestionConfig {
    /// Both watermarks are shares of the budget, low at most high.
    pub fn validate(&self) -> Result<(), String> {
        let share = |v: f64| (0.0..=1.0).contains(&v);
        if !share(self.high_watermark) || !share(self.low_watermark) {
            return Err("high_watermark and low_watermark must be between 0 and 1".into());
        }
        if self.low_watermark > self.high_watermark {
            return Err("low_watermark must not exceed high_watermark".into());
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}
