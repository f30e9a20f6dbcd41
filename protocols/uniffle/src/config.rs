//! Configuration of the Uniffle roles: the coordinator and the shuffle server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use switchyard_frame::server::ConnectionLimits;
use switchyard_storage::Secret;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UniffleConfig {
    /// Serve the Uniffle roles at all.
    pub enabled: bool,
    /// The coordinator's gRPC address. 19999 is Uniffle's own default, so an
    /// existing `spark.rss.coordinator.quorum=host:19999` works unchanged.
    pub coordinator_listen: SocketAddr,
    /// Whether this node runs the coordinator (the gateway's
    /// `cluster.roles`; not a key of its own).
    #[serde(skip, default = "yes")]
    pub coordinator_role: bool,
    /// Whether this node runs the shuffle server (gRPC and Netty ports);
    /// off on a coordinator-only node (`cluster.roles`; not a key).
    #[serde(skip, default = "yes")]
    pub server_role: bool,
    /// After its start the coordinator answers assignments with
    /// INTERNAL_ERROR for this long, so that clients ask the next
    /// coordinator while this one hears from the servers (the gateway's
    /// `cluster.warmup` in a fleet; zero alone; not a key of its own).
    #[serde(skip)]
    pub warmup: Duration,
    /// The shuffle server's gRPC address, advertised through the coordinator.
    pub server_grpc_listen: SocketAddr,
    /// The shuffle server's Netty data-plane address (`GRPC_NETTY` clients);
    /// `""` (the empty string) turns it off. Default `127.0.0.1:19996`.
    #[serde(with = "address_or_off")]
    pub server_netty_listen: Option<SocketAddr>,
    /// Host or IP that clients use to reach this node. Default: the listen IP,
    /// or the first non-loopback address when listening on 0.0.0.0.
    pub advertised_host: Option<String>,
    /// Extra tags this node advertises beside `ss_v5`, `GRPC`, `GRPC_NETTY`.
    pub tags: Vec<String>,
    /// Largest gRPC message accepted or sent. Default 256 MiB (the Java
    /// client sends up to `spark.rss.client.send.size.limit`, 16 MiB).
    pub max_message_size: ByteSize,
    /// Largest Netty frame accepted. Default 256 MiB.
    pub max_frame_size: ByteSize,
    /// A `requireBuffer` ticket not used by a `sendShuffleData` within this
    /// time is dropped and its memory released. Default 60 s.
    #[serde(with = "humantime_serde")]
    pub ticket_timeout: Duration,
    /// Nodes that stop heartbeating are left out of assignments after this.
    #[serde(with = "humantime_serde")]
    pub node_timeout: Duration,
    /// Servers per shuffle when the client does not say. Default 9, as Uniffle.
    pub max_servers_per_shuffle: usize,
    /// Client configuration handed out by `fetchClientConf`. By default it
    /// sets the storage type this server serves.
    pub client_conf: BTreeMap<String, String>,
    /// The shuffle server's id (`ShuffleServerId.id`, an opaque key to
    /// clients and coordinators). Not a config key: the gateway sets it to
    /// the node id. `None`: Uniffle's own `ip-grpcPort[-nettyPort]`.
    #[serde(skip)]
    pub server_id: Option<String>,
    /// Connections of the Netty data plane and requests in flight per connection
    /// (`[uniffle.connections]`). gRPC connections are tonic's and not limited here.
    pub connections: ConnectionLimits,
    /// The secret a remote shuffle server must send (gRPC metadata
    /// `x-switchyard-cluster-secret`) for the coordinator to take its
    /// heartbeat. Unset (the default): only this node's own shuffle server is
    /// registered and remote heartbeats are refused with ACCESS_DENIED, since
    /// Uniffle's heartbeat is unauthenticated and a rogue "server" would be
    /// handed partitions.
    pub registration_secret: Option<Secret>,
    /// When a `reportShuffleResult` is answered. `durable` (the default):
    /// once the reported partitions' blocks are on a disk and recorded for
    /// restart recovery, so a restart keeps every block a reader is told of.
    /// `background`: at once, as the JVM server answers from memory; the same
    /// commit then runs in the background, and a crash (or a failed commit)
    /// before it ends loses those blocks, which the client's readers see as
    /// missing blocks (the stage is retried). Saves the commit's wait (about
    /// 5 ms per map task on a fast disk, a flush of up to the memory budget
    /// at the end of a large write).
    pub report_durability: ReportDurability,
    /// Huge partition split (Uniffle's `rss.server.huge-partition.split.limit`):
    /// once a partition has received this many bytes on this server, a
    /// `requireBuffer` for it names it in `needSplitPartitionIds`, and a 0.10+
    /// client with `spark.rss.client.reassign.enabled=true` sends its later
    /// blocks to other servers (see docs/uniffle.md, "Huge partitions").
    /// Unset (the default): never split. Clients without reassign ignore it.
    pub huge_partition_split_limit: Option<ByteSize>,
}

/// When a `reportShuffleResult` is answered (`uniffle.report_durability`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportDurability {
    /// After the reported blocks are durable and recorded.
    #[default]
    Durable,
    /// At once; the commit runs in the background.
    Background,
}

impl Default for UniffleConfig {
    fn default() -> Self {
        UniffleConfig {
            enabled: true,
            coordinator_listen: "127.0.0.1:19999".parse().unwrap(),
            server_grpc_listen: "127.0.0.1:19997".parse().unwrap(),
            server_netty_listen: Some("127.0.0.1:19996".parse().unwrap()),
            advertised_host: None,
            tags: Vec::new(),
            max_message_size: ByteSize::mib(256),
            max_frame_size: ByteSize::mib(256),
            ticket_timeout: Duration::from_secs(60),
            node_timeout: Duration::from_secs(30),
            coordinator_role: true,
            server_role: true,
            warmup: Duration::ZERO,
            max_servers_per_shuffle: 9,
            client_conf: BTreeMap::from([(
                "spark.rss.storage.type".to_string(),
                "MEMORY_LOCALFILE".to_string(),
            )]),
            server_id: None,
            connections: ConnectionLimits::default(),
            registration_secret: None,
            report_durability: ReportDurability::Durable,
            huge_partition_split_limit: None,
        }
    }
}

/// An address, or `""` for none: a key left out takes its default (on), so
/// turning a listener off needs a value of its own.
pub mod address_or_off {
    use std::net::SocketAddr;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<SocketAddr>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(addr) => s.collect_str(addr),
            None => s.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.trim()
            .parse()
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

fn yes() -> bool {
    true
}
