//! Gateway configuration: built-in defaults, then an optional TOML file, then
//! a few `SWITCHYARD_*` environment variables. `config/switchyard.toml`
//! documents every key with its default (a test keeps the two equal).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use switchyard_celeborn::CelebornConfig;
use switchyard_cluster::{ClusterConfig, Role};
use switchyard_storage::{Secret, StoreConfig};
use switchyard_uniffle::UniffleConfig;
use tracing_subscriber::EnvFilter;

/// Default admin HTTP address: loopback only, so a node started with no
/// config exposes nothing to the network.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:19990";

/// `node.id`
pub const ENV_NODE_ID: &str = "SWITCHYARD_NODE_ID";
/// `node.host`: the IP of every listen address left at its default
pub const ENV_HOST: &str = "SWITCHYARD_HOST";
/// `admin.listen`
pub const ENV_ADMIN_LISTEN: &str = "SWITCHYARD_ADMIN_LISTEN";
/// `admin.token`
pub const ENV_ADMIN_TOKEN: &str = "SWITCHYARD_ADMIN_TOKEN";
/// `cluster.roles`, comma separated: `coordinator,worker` or `worker`
pub const ENV_ROLES: &str = "SWITCHYARD_ROLES";
/// `cluster.secret`
pub const ENV_CLUSTER_SECRET: &str = "SWITCHYARD_CLUSTER_SECRET";
/// `storage.memory.capacity`, e.g. `2GiB`
pub const ENV_MEMORY_CAPACITY: &str = "SWITCHYARD_MEMORY_CAPACITY";

/// What the process needs beyond its configured memory: code, the runtime's
/// threads and stacks, sockets' user-space buffers, allocator slack.
pub const PROCESS_OVERHEAD: u64 = 64 << 20;
/// `storage.disks.dirs`, comma separated
pub const ENV_DATA_DIRS: &str = "SWITCHYARD_DATA_DIRS";
/// `storage.disks.min_free`, e.g. `512MiB`
pub const ENV_DISK_MIN_FREE: &str = "SWITCHYARD_DISK_MIN_FREE";
/// `log.level` (a tracing filter); wins over `RUST_LOG`
pub const ENV_LOG: &str = "SWITCHYARD_LOG";
/// `log.level` when `SWITCHYARD_LOG` is not set
pub const ENV_RUST_LOG: &str = "RUST_LOG";
/// `log.format`: `text` or `json`
pub const ENV_LOG_FORMAT: &str = "SWITCHYARD_LOG_FORMAT";

/// Every variable that [`GatewayConfig::apply_env`] reads.
pub const ENV_OVERRIDES: &[&str] = &[
    ENV_NODE_ID,
    ENV_HOST,
    ENV_ADMIN_LISTEN,
    ENV_ADMIN_TOKEN,
    ENV_ROLES,
    ENV_CLUSTER_SECRET,
    ENV_MEMORY_CAPACITY,
    ENV_DATA_DIRS,
    ENV_DISK_MIN_FREE,
    ENV_LOG,
    ENV_RUST_LOG,
    ENV_LOG_FORMAT,
];

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// This node's identity and host.
    pub node: NodeConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    pub storage: StoreConfig,
    /// The Uniffle coordinator and shuffle-server roles.
    pub uniffle: UniffleConfig,
    /// The Celeborn master and worker roles.
    pub celeborn: CelebornConfig,
    /// This node's roles and its fleet's coordinators.
    pub cluster: ClusterConfig,
    /// The process's threads: worker threads, NUMA placement.
    pub runtime: crate::numa::RuntimeConfig,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's id. Default: the id persisted in the first data directory
    /// (`node-id`), or a new random one written there on first start
    /// (`crate::node`).
    pub id: Option<String>,
    /// This node's IP: every listen address still at its built-in default
    /// (`127.0.0.1` with the role's default port) listens on this IP instead,
    /// so the advertised hosts follow. Listen addresses set to anything else
    /// are used as given.
    pub host: Option<IpAddr>,
    /// This node's rack (Celeborn's network location, e.g. `/dc1/rack7`):
    /// a driver that asks for rack-aware replicas
    /// (`spark.celeborn.client.reserveSlots.rackaware.enabled`) gets each
    /// replica on a rack other than its primary's. Default: none, which
    /// Celeborn calls `/default-rack`.
    pub rack: Option<String>,
    /// This node's worker tags (Celeborn 0.6's worker tags, e.g. `ssd`,
    /// `env=prod`): a Celeborn client whose `celeborn.tags.tagsExpr` names
    /// tags gets only workers carrying all of them (`celeborn.tags_enabled`).
    /// Each 1 to 128 printable ASCII characters without spaces or commas.
    /// Default: none.
    pub tags: Vec<String>,
}

/// Why a node id or rack is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("node.rack {0:?} must be 1 to 128 printable ASCII characters without spaces")]
    Rack(String),
    #[error("node.tags entry {0:?} must be 1 to 128 printable ASCII characters without spaces or commas")]
    Tag(String),
    #[error("node id {0:?} must have 1 to {MAX_NODE_ID_LEN} characters")]
    IdLength(String),
    #[error("node id {0:?} has {1:?}: use only letters, digits, '.', '_' and '-'")]
    IdCharacter(String, char),
}

/// A rack is 1 to 128 printable ASCII characters without spaces.
pub fn check_rack(rack: &str) -> Result<(), NameError> {
    if rack.is_empty() || rack.len() > 128 || !rack.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(NameError::Rack(rack.to_string()));
    }
    Ok(())
}

/// A worker tag is a rack-like name without commas, which separate the
/// tags of a client's expression.
pub fn check_tag(tag: &str) -> Result<(), NameError> {
    if check_rack(tag).is_err() || tag.contains(',') {
        return Err(NameError::Tag(tag.to_string()));
    }
    Ok(())
}

/// Longest node id accepted.
pub const MAX_NODE_ID_LEN: usize = 64;

/// A node id is 1 to 64 of `A-Z a-z 0-9 . _ -`: it goes into log lines,
/// metric labels, Uniffle's server id and a file, unquoted.
pub fn check_node_id(id: &str) -> Result<(), NameError> {
    if id.is_empty() || id.len() > MAX_NODE_ID_LEN {
        return Err(NameError::IdLength(id.to_string()));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(NameError::IdCharacter(id.to_string(), c));
    }
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Address of the admin HTTP server (health, readiness, metrics, status).
    pub listen: SocketAddr,
    /// The bearer token that mutating endpoints (`POST
    /// /api/v1/decommission`) require (`Authorization: Bearer <token>`).
    /// None (default): those endpoints answer 403.
    pub token: Option<Secret>,
    /// The Celeborn and Uniffle admin APIs, on their own ports.
    pub vendor: crate::admin::vendor::VendorApiConfig,
    /// For soak and chaos tests only: `POST /api/v1/faults/disk` (with the
    /// token) makes a data directory fail or hang. Off by default, and then
    /// the store runs without the fault layer at all.
    pub fault_injection: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: DEFAULT_ADMIN_LISTEN.parse().expect("valid default address"),
            token: None,
            vendor: Default::default(),
            fault_injection: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A `tracing` filter: a level (`info`) or directives
    /// (`info,switchyard_storage=debug`).
    pub level: String,
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl GatewayConfig {
    /// Defaults, then `path` if given, then the process environment; validated.
    pub fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        Self::load_with_env(path, |name| std::env::var(name).ok())
    }

    /// As [`GatewayConfig::load`], reading variables through `env`.
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Self> {
        let config = match path {
            Some(path) => Self::from_file(path)?,
            None => Self::default(),
        };
        config.finish(env)
    }

    /// What follows the file, for `serve`, `check-config` and the check of
    /// `import-config`'s output alike: the environment overrides (read
    /// through `env`), `node.host`, then every check.
    pub fn finish(mut self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        self.apply_env(env)?;
        self.apply_network_share();
        self.apply_host();
        self.apply_roles();
        self.celeborn.worker_tags = self.node.tags.clone();
        self.validate()?;
        Ok(self)
    }

    /// `storage.memory.network`, when not given: a quarter of the node's
    /// number, so frames and replies of every protocol are inside it (at
    /// least the 1 MiB a frame port needs, so a small node still loads).
    fn apply_network_share(&mut self) {
        let m = &mut self.storage.memory;
        if m.network.is_none() {
            let quarter = m.capacity.as_u64() / 4;
            m.network = Some(bytesize::ByteSize::b(quarter.max(1 << 20)));
        }
    }

    /// The memory a container running this node needs, and what it is made
    /// of: the one number (stored blocks, frames in flight and replies), the
    /// reads of persisted data, the caches, and the process itself.
    pub fn container_memory(&self) -> String {
        let m = &self.storage.memory;
        let network = m.network.map_or(0, |n| n.as_u64());
        let cold_cache = self
            .storage
            .cold
            .as_ref()
            .map_or(0, |c| c.read_cache.as_u64());
        let total = m.capacity.as_u64()
            + m.read_capacity.as_u64()
            + m.index_cache.as_u64()
            + cold_cache
            + self.storage.recovery.cache_size.as_u64()
            + PROCESS_OVERHEAD;
        let b = bytesize::ByteSize::b;
        format!(
            "container memory >= {} (memory.capacity {}: store {} + network {}; + read_capacity {} + index_cache {} + cold read_cache {} + recovery.cache_size {} + {} process overhead)",
            b(total),
            m.capacity,
            b(m.capacity.as_u64() - network),
            b(network),
            m.read_capacity,
            m.index_cache,
            b(cold_cache),
            self.storage.recovery.cache_size,
            b(PROCESS_OVERHEAD),
        )
    }

    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("invalid config file {}", path.display()))
    }

    /// Parses TOML; keys left out keep their defaults, unknown keys are errors.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        // toml's error message carries the line, column and offending key;
        // the full dotted key goes in front of it.
        toml::from_str(text).map_err(|e| {
            let key = e.span().and_then(|span| key_at(text, span.start));
            let e = anyhow::Error::new(e);
            match key {
                Some(key) => e.context(format!("key {key}")),
                None => e,
            }
        })
    }

    /// The configuration as TOML, every key written out (defaults too),
    /// with secrets (such as `storage.cold.secret_access_key`) shown as
    /// `"<redacted>"`: a `Secret` serializes so. Sizes are shown as
    /// `bytesize` prints them: rounded to one decimal of their largest unit.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        let value =
            toml::Value::try_from(self).context("cannot render the configuration as TOML")?;
        Ok(toml::to_string_pretty(&value)?)
    }

    /// Applies the `SWITCHYARD_*` overrides (and `RUST_LOG`). Variables that
    /// are unset or empty are ignored.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        let get = |name: &str| env(name).filter(|v| !v.trim().is_empty());

        if let Some(v) = get(ENV_NODE_ID) {
            self.node.id = Some(v.trim().to_string());
        }
        if let Some(v) = get(ENV_HOST) {
            self.node.host = Some(v.trim().parse().with_context(|| {
                format!("{ENV_HOST}={v:?} is not an IP address such as 127.0.0.2")
            })?);
        }
        if let Some(v) = get(ENV_ADMIN_LISTEN) {
            self.admin.listen = v.trim().parse().with_context(|| {
                format!("{ENV_ADMIN_LISTEN}={v:?} is not a socket address such as 127.0.0.1:19990")
            })?;
        }
        if let Some(v) = get(ENV_ADMIN_TOKEN) {
            self.admin.token = Some(Secret::new(v.trim()));
        }
        if let Some(v) = get(ENV_ROLES) {
            self.cluster.roles = v
                .split(',')
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(|r| match r {
                    "coordinator" => Ok(Role::Coordinator),
                    "worker" => Ok(Role::Worker),
                    other => Err(anyhow::anyhow!(
                        "{ENV_ROLES}={v:?}: {other:?} is not a role (coordinator, worker)"
                    )),
                })
                .collect::<anyhow::Result<_>>()?;
        }
        if let Some(v) = get(ENV_CLUSTER_SECRET) {
            self.cluster.secret = Some(Secret::new(v.trim()));
        }
        if let Some(v) = get(ENV_MEMORY_CAPACITY) {
            self.storage.memory.capacity = parse_size(ENV_MEMORY_CAPACITY, &v)?;
        }
        if let Some(v) = get(ENV_DATA_DIRS) {
            self.storage.disks.dirs = v
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .collect();
        }
        if let Some(v) = get(ENV_DISK_MIN_FREE) {
            self.storage.disks.min_free = parse_size(ENV_DISK_MIN_FREE, &v)?;
        }
        if let Some(v) = get(ENV_LOG).or_else(|| get(ENV_RUST_LOG)) {
            self.log.level = v.trim().to_string();
        }
        if let Some(v) = get(ENV_LOG_FORMAT) {
            self.log.format = match v.trim().to_ascii_lowercase().as_str() {
                "text" => LogFormat::Text,
                "json" => LogFormat::Json,
                _ => bail!("{ENV_LOG_FORMAT}={v:?}: expected \"text\" or \"json\""),
            };
        }
        Ok(())
    }

    /// With `node.host` set, moves every listen address still at its
    /// built-in default to that IP, keeping the port. Run after the file and
    /// the environment, so only addresses nobody changed move.
    pub fn apply_host(&mut self) {
        let Some(host) = self.node.host else {
            return;
        };
        // Node-to-node connections leave from the node's own address too,
        // so that the address is the node's whole identity on the network.
        if !host.is_unspecified() {
            self.cluster.source_address = Some(host);
            self.celeborn.source_address = Some(host);
        }
        fn follow(addr: &mut SocketAddr, default: SocketAddr, host: IpAddr) {
            if *addr == default {
                *addr = SocketAddr::new(host, addr.port());
            }
        }
        let admin = AdminConfig::default();
        let uniffle = UniffleConfig::default();
        let celeborn = CelebornConfig::default();
        follow(&mut self.admin.listen, admin.listen, host);
        self.admin.vendor.follow_host(host);
        let u = &mut self.uniffle;
        follow(&mut u.coordinator_listen, uniffle.coordinator_listen, host);
        follow(&mut u.server_grpc_listen, uniffle.server_grpc_listen, host);
        if let (Some(addr), Some(default)) =
            (u.server_netty_listen.as_mut(), uniffle.server_netty_listen)
        {
            follow(addr, default, host);
        }
        follow(
            &mut self.cluster.listen,
            ClusterConfig::default().listen,
            host,
        );
        let c = &mut self.celeborn;
        follow(&mut c.master_listen, celeborn.master_listen, host);
        follow(&mut c.worker_rpc_listen, celeborn.worker_rpc_listen, host);
        follow(&mut c.worker_push_listen, celeborn.worker_push_listen, host);
        follow(
            &mut c.worker_fetch_listen,
            celeborn.worker_fetch_listen,
            host,
        );
        follow(
            &mut c.worker_replicate_listen,
            celeborn.worker_replicate_listen,
            host,
        );
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(id) = &self.node.id {
            check_node_id(id)
                .map_err(|e| anyhow::anyhow!("node.id (config file or {ENV_NODE_ID}): {e}"))?;
        }
        if let Some(rack) = &self.node.rack {
            check_rack(rack)?;
        }
        for tag in &self.node.tags {
            check_tag(tag)?;
        }
        self.celeborn
            .congestion
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid [celeborn.congestion]: {e}"))?;
        EnvFilter::try_new(&self.log.level).map_err(|e| {
            anyhow::anyhow!(
                "log.level {:?} (config file, SWITCHYARD_LOG or RUST_LOG) is not a valid filter: {e}",
                self.log.level
            )
        })?;
        self.storage
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid [storage] configuration: {e}"))?;
        self.uniffle
            .connections
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid [uniffle.connections]: {e}"))?;
        self.celeborn
            .connections
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid [celeborn.connections]: {e}"))?;
        self.cluster
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid [cluster]: {e}"))?;
        self.check_listen_addresses()?;
        Ok(())
    }

    /// Gives the protocol roles this node's `cluster.roles`.
    pub fn apply_roles(&mut self) {
        let coordinator = self.cluster.has(Role::Coordinator);
        let worker = self.cluster.has(Role::Worker);
        self.uniffle.coordinator_role = coordinator;
        self.celeborn.master_role = coordinator;
        self.uniffle.server_role = worker;
        self.celeborn.worker_role = worker;
        // One liveness view for both protocols: in a fleet, a worker is lost
        // to Uniffle clients when it is lost to Celeborn's.
        if self.cluster.is_fleet() {
            self.uniffle.node_timeout = self.cluster.worker_timeout;
            self.uniffle.warmup = self.cluster.warmup;
        }
    }

    /// Every listen address of an enabled role, with its key.
    pub fn listen_addresses(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut all = vec![("admin.listen", self.admin.listen)];
        let u = &self.uniffle;
        let coordinator = self.cluster.has(Role::Coordinator);
        let worker = self.cluster.has(Role::Worker);
        if coordinator && self.cluster.is_fleet() {
            all.push(("cluster.listen", self.cluster.listen));
        }
        if u.enabled {
            if coordinator {
                all.push(("uniffle.coordinator_listen", u.coordinator_listen));
            }
            if worker {
                all.push(("uniffle.server_grpc_listen", u.server_grpc_listen));
                if let Some(addr) = u.server_netty_listen {
                    all.push(("uniffle.server_netty_listen", addr));
                }
            }
        }
        let c = &self.celeborn;
        if c.enabled && coordinator {
            all.push(("celeborn.master_listen", c.master_listen));
        }
        all.extend(self.vendor_api_listeners());
        if c.enabled && worker {
            all.push(("celeborn.worker_rpc_listen", c.worker_rpc_listen));
            all.push(("celeborn.worker_push_listen", c.worker_push_listen));
            all.push(("celeborn.worker_fetch_listen", c.worker_fetch_listen));
            all.push((
                "celeborn.worker_replicate_listen",
                c.worker_replicate_listen,
            ));
        }
        all
    }

    /// The vendor admin APIs that run here, with their keys: each when its
    /// role runs on this node and its address is set.
    pub fn vendor_api_listeners(&self) -> Vec<(&'static str, SocketAddr)> {
        let v = &self.admin.vendor;
        let coordinator = self.cluster.has(Role::Coordinator);
        let worker = self.cluster.has(Role::Worker);
        let celeborn = self.celeborn.enabled;
        [
            (
                crate::admin::vendor::CELEBORN_MASTER,
                v.celeborn_master_listen,
                celeborn && coordinator,
            ),
            (
                crate::admin::vendor::CELEBORN_WORKER,
                v.celeborn_worker_listen,
                celeborn && worker,
            ),
            (
                crate::admin::vendor::UNIFFLE_COORDINATOR,
                v.uniffle_coordinator_listen,
                self.uniffle.enabled && coordinator,
            ),
        ]
        .into_iter()
        .filter_map(|(key, addr, on)| Some((key, addr.filter(|_| on)?)))
        .collect()
    }

    /// Two listeners on one port (on the same IP, or one of them on all
    /// interfaces) would fail at bind; say so before anything starts. Port 0
    /// (any free port) never clashes.
    fn check_listen_addresses(&self) -> anyhow::Result<()> {
        let all = self.listen_addresses();
        for (i, (key_a, a)) in all.iter().enumerate() {
            for (key_b, b) in &all[i + 1..] {
                let same_ip =
                    a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
                if a.port() != 0 && a.port() == b.port() && same_ip {
                    bail!("{key_b} ({b}) clashes with {key_a} ({a}): one port per listener");
                }
            }
        }
        Ok(())
    }
}

/// The dotted key at byte `offset` of a TOML text: the key of a `key = value`
/// line (whether the offset is at the key or the value) under the closest
/// `[table]` header above it. A best effort for error messages.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[line_start..line_end].trim();
    if line.starts_with('[') {
        // The error is about a table header itself.
        return Some(
            line.trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string(),
        );
    }
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    if key.is_empty() {
        return None;
    }
    let table = text[..line_start].lines().rev().find_map(|l| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[[") && l.contains(']'))
            .then(|| l[1..l.find(']').unwrap()].trim().to_string())
    });
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    })
}

fn parse_size(var: &str, value: &str) -> anyhow::Result<ByteSize> {
    value
        .trim()
        .parse::<ByteSize>()
        .map_err(|e| anyhow::anyhow!("{var}={value:?} is not a size such as \"2GiB\": {e}"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    /// The documented config file, shipped with the repository.
    const DOC: &str = include_str!("../../config/switchyard.toml");

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    /// `StoreConfig` has no `PartialEq`; `Debug` shows every field exactly
    /// (sizes in bytes, durations in nanoseconds).
    fn same(a: &GatewayConfig, b: &GatewayConfig) -> bool {
        format!("{a:#?}") == format!("{b:#?}")
    }

    /// The defaults as loading leaves them: the network share, derived
    /// from the capacity when the file does not give it, filled in.
    fn loaded_defaults() -> GatewayConfig {
        let mut d = GatewayConfig::default();
        d.storage.memory.network = Some(ByteSize::mib(256));
        d
    }

    #[test]
    fn defaults() {
        let c = GatewayConfig::load_with_env(None, no_env).unwrap();
        assert_eq!(c.admin.listen, "127.0.0.1:19990".parse().unwrap());
        assert_eq!(c.log.level, "info");
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(c.storage.memory.capacity, ByteSize::gib(1));
        assert_eq!(c.storage.disks.dirs, vec![PathBuf::from("data/switchyard")]);
        assert!(c.storage.cold.is_none());
        assert!(same(&c, &loaded_defaults()));
    }

    #[test]
    fn the_netty_data_plane_turns_off_with_an_empty_address() {
        let on = GatewayConfig::from_toml("").unwrap();
        assert!(on.uniffle.server_netty_listen.is_some());
        let off = GatewayConfig::from_toml("[uniffle]\nserver_netty_listen = \"\"\n").unwrap();
        assert_eq!(off.uniffle.server_netty_listen, None);
        let moved =
            GatewayConfig::from_toml("[uniffle]\nserver_netty_listen = \"0.0.0.0:2\"\n").unwrap();
        assert_eq!(
            moved.uniffle.server_netty_listen,
            Some("0.0.0.0:2".parse().unwrap())
        );
        // What check-config prints loads back the same.
        let printed = toml::to_string(&off).unwrap();
        assert!(
            same(&GatewayConfig::from_toml(&printed).unwrap(), &off),
            "{printed}"
        );
        assert!(GatewayConfig::from_toml("[uniffle]\nserver_netty_listen = \"nope\"\n").is_err());
    }

    #[test]
    fn empty_file_is_defaults() {
        let c = GatewayConfig::from_toml("").unwrap();
        assert!(same(&c, &GatewayConfig::default()));
    }

    #[test]
    fn full_file() {
        let c = GatewayConfig::from_toml(
            r#"
            [admin]
            listen = "0.0.0.0:8080"

            [log]
            level = "debug,switchyard_storage=trace"
            format = "json"

            [storage.memory]
            capacity = "2 GiB"
            high_watermark = 0.8
            low_watermark = 0.3
            single_buffer_threshold = "32MiB"
            spill_check_interval = "1s"
            index_cache = "128 MiB"

            [storage.disks]
            dirs = ["/mnt/d1/sy", "/mnt/d2/sy"]
            write_concurrency = 4
            read_concurrency = 16
            write_rate_limit = "100 MiB"
            read_rate_limit = "200 MiB"
            min_free = "10 GiB"
            capacity = "1 TiB"
            resume_margin = "5 GiB"
            error_cooldown = "1m"
            health_check_interval = "10s"
            sync = true

            [storage.cold]
            service = "fs"
            root = "/mnt/cold"
            prefix = "rss"
            huge_partition_threshold = "10 GiB"
            write_concurrency = 8

            [storage.apps]
            expiry = "2m"
            expiry_check_interval = "15s"
            "#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.admin.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(c.log.level, "debug,switchyard_storage=trace");
        assert_eq!(c.log.format, LogFormat::Json);
        let m = &c.storage.memory;
        assert_eq!(m.capacity, ByteSize::gib(2));
        assert_eq!(m.high_watermark, 0.8);
        assert_eq!(m.low_watermark, 0.3);
        assert_eq!(m.single_buffer_threshold, ByteSize::mib(32));
        assert_eq!(m.spill_check_interval, Duration::from_secs(1));
        assert_eq!(m.index_cache, ByteSize::mib(128));
        let d = &c.storage.disks;
        assert_eq!(
            d.dirs,
            vec![PathBuf::from("/mnt/d1/sy"), PathBuf::from("/mnt/d2/sy")]
        );
        assert_eq!(d.write_concurrency, 4);
        assert_eq!(d.read_concurrency, 16);
        assert_eq!(d.write_rate_limit, Some(ByteSize::mib(100)));
        assert_eq!(d.read_rate_limit, Some(ByteSize::mib(200)));
        assert_eq!(d.min_free, ByteSize::gib(10));
        assert_eq!(d.capacity, Some(ByteSize::tib(1)));
        assert_eq!(d.resume_margin, ByteSize::gib(5));
        assert_eq!(d.error_cooldown, Duration::from_secs(60));
        assert_eq!(d.health_check_interval, Duration::from_secs(10));
        assert!(d.sync);
        let cold = c.storage.cold.as_ref().expect("cold tier");
        assert_eq!(
            serde_json::to_value(&cold.backend).unwrap(),
            serde_json::json!({"service": "fs", "root": "/mnt/cold"})
        );
        assert_eq!(cold.prefix, "rss");
        assert_eq!(cold.huge_partition_threshold, ByteSize::gib(10));
        assert_eq!(cold.write_concurrency, 8);
        assert_eq!(c.storage.apps.expiry, Duration::from_secs(120));
        assert_eq!(
            c.storage.apps.expiry_check_interval,
            Duration::from_secs(15)
        );
    }

    #[test]
    fn partial_file_keeps_other_defaults() {
        let c = GatewayConfig::from_toml("[storage.memory]\ncapacity = \"3GiB\"\n").unwrap();
        assert_eq!(c.storage.memory.capacity, ByteSize::gib(3));
        let mut expected = GatewayConfig::default();
        expected.storage.memory.capacity = ByteSize::gib(3);
        assert!(same(&c, &expected));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        for bad in [
            "bogus = 1",
            "[node]\nname = \"n1\"",
            "[admin]\nlisten = \"127.0.0.1:1\"\nport = 2",
            "[log]\nlevl = \"info\"",
            "[storage.memory]\ncapacty = \"1GiB\"",
            "[storage.disks]\ndir = [\"x\"]",
            "[storage.apps]\nexpire = \"1s\"",
            "[storage.bogus]\nx = 1",
            "[storage.cold]\nservice = \"fs\"\nroot = \"/x\"\nprefx = \"a\"",
        ] {
            let err = format!("{:#}", GatewayConfig::from_toml(bad).unwrap_err());
            assert!(err.contains("unknown field"), "{bad:?} gave {err}");
        }
    }

    #[test]
    fn bad_values_are_rejected() {
        assert!(GatewayConfig::from_toml("[log]\nformat = \"xml\"").is_err());
        assert!(GatewayConfig::from_toml("[admin]\nlisten = \"nowhere\"").is_err());
        assert!(GatewayConfig::from_toml("[storage.memory]\ncapacity = \"lots\"").is_err());
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.toml");
        let err = format!(
            "{:#}",
            GatewayConfig::load_with_env(Some(&missing), no_env).unwrap_err()
        );
        assert!(err.contains("missing.toml"), "{err}");

        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[storage.memory]\ncapacty = \"1GiB\"\n").unwrap();
        let err = format!(
            "{:#}",
            GatewayConfig::load_with_env(Some(&bad), no_env).unwrap_err()
        );
        assert!(err.contains("bad.toml") && err.contains("capacty"), "{err}");
    }

    #[test]
    fn env_overrides() {
        let env = env_of(&[
            (ENV_ADMIN_LISTEN, "0.0.0.0:9000"),
            (ENV_MEMORY_CAPACITY, "2GiB"),
            (ENV_DATA_DIRS, "/mnt/a/sy, /mnt/b/sy,"),
            (ENV_DISK_MIN_FREE, "512MiB"),
            (ENV_LOG, "warn,switchyard=debug"),
            (ENV_RUST_LOG, "trace"),
            (ENV_LOG_FORMAT, "JSON"),
        ]);
        let c = GatewayConfig::load_with_env(None, env).unwrap();
        assert_eq!(c.admin.listen, "0.0.0.0:9000".parse().unwrap());
        assert_eq!(c.storage.memory.capacity, ByteSize::gib(2));
        assert_eq!(
            c.storage.disks.dirs,
            vec![PathBuf::from("/mnt/a/sy"), PathBuf::from("/mnt/b/sy")]
        );
        assert_eq!(c.storage.disks.min_free, ByteSize::mib(512));
        assert_eq!(c.log.level, "warn,switchyard=debug");
        assert_eq!(c.log.format, LogFormat::Json);
    }

    #[test]
    fn env_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[admin]\nlisten = \"127.0.0.1:1\"\n[log]\nlevel = \"debug\"\n[storage.memory]\ncapacity = \"4GiB\"\n",
        )
        .unwrap();
        let env = env_of(&[(ENV_MEMORY_CAPACITY, "512 MiB"), (ENV_RUST_LOG, "error")]);
        let c = GatewayConfig::load_with_env(Some(&path), env).unwrap();
        assert_eq!(c.storage.memory.capacity, ByteSize::mib(512));
        assert_eq!(c.admin.listen, "127.0.0.1:1".parse().unwrap());
        assert_eq!(
            c.log.level, "error",
            "RUST_LOG applies without SWITCHYARD_LOG"
        );
    }

    #[test]
    fn empty_env_values_are_ignored() {
        let env = env_of(&[
            (ENV_DATA_DIRS, ""),
            (ENV_MEMORY_CAPACITY, " "),
            (ENV_LOG, ""),
        ]);
        let c = GatewayConfig::load_with_env(None, env).unwrap();
        assert!(same(&c, &loaded_defaults()));
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        for (var, value) in [
            (ENV_ADMIN_LISTEN, "localhost"),
            (ENV_MEMORY_CAPACITY, "2 XB"),
            (ENV_LOG_FORMAT, "xml"),
        ] {
            let err = GatewayConfig::load_with_env(None, env_of(&[(var, value)])).unwrap_err();
            let err = format!("{err:#}");
            assert!(err.contains(var), "{err}");
        }
    }

    #[test]
    fn node_host_moves_the_default_listen_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            r#"
            [node]
            host = "127.0.0.3"
            [uniffle]
            coordinator_listen = "127.0.0.1:29999"
            [celeborn]
            master_listen = "0.0.0.0:9097"
            "#,
        )
        .unwrap();
        let c = GatewayConfig::load_with_env(Some(&path), no_env).unwrap();
        let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
        assert_eq!(c.node.host, Some("127.0.0.3".parse().unwrap()));
        assert_eq!(c.admin.listen, at("127.0.0.3:19990"));
        // Outgoing node-to-node traffic leaves from it too.
        assert_eq!(c.cluster.source_address, c.node.host);
        assert_eq!(c.celeborn.source_address, c.node.host);
        assert_eq!(c.uniffle.server_grpc_listen, at("127.0.0.3:19997"));
        assert_eq!(c.uniffle.server_netty_listen, Some(at("127.0.0.3:19996")));
        assert_eq!(c.celeborn.worker_rpc_listen, at("127.0.0.3:9100"));
        assert_eq!(c.celeborn.worker_push_listen, at("127.0.0.3:9101"));
        assert_eq!(c.celeborn.worker_fetch_listen, at("127.0.0.3:9102"));
        assert_eq!(c.celeborn.worker_replicate_listen, at("127.0.0.3:9103"));
        // Set to something else than the default: used as given.
        assert_eq!(c.uniffle.coordinator_listen, at("127.0.0.1:29999"));
        assert_eq!(c.celeborn.master_listen, at("0.0.0.0:9097"));
        // The advertised hosts are left to default to the listen IP.
        assert_eq!(c.uniffle.advertised_host, None);

        // Without node.host nothing moves.
        let c = GatewayConfig::load_with_env(None, no_env).unwrap();
        assert_eq!(c.uniffle.coordinator_listen, at("127.0.0.1:19999"));
        assert_eq!(c.cluster.source_address, None);
    }

    #[test]
    fn node_host_from_env_applies_to_a_copy_of_the_reference_file() {
        // The reference file writes every listen address out at its default;
        // SWITCHYARD_HOST must still move them (an explicit override stays).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("copy.toml");
        std::fs::write(&path, DOC).unwrap();
        let env = env_of(&[
            (ENV_HOST, " 127.0.0.4 "),
            (ENV_ADMIN_LISTEN, "0.0.0.0:19990"),
        ]);
        let c = GatewayConfig::load_with_env(Some(&path), env).unwrap();
        let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
        assert_eq!(c.uniffle.coordinator_listen, at("127.0.0.4:19999"));
        assert_eq!(c.celeborn.master_listen, at("127.0.0.4:9097"));
        assert_eq!(c.admin.listen, at("0.0.0.0:19990"));

        let err = GatewayConfig::load_with_env(None, env_of(&[(ENV_HOST, "host-2")])).unwrap_err();
        assert!(format!("{err:#}").contains(ENV_HOST), "{err:#}");
        assert!(GatewayConfig::from_toml("[node]\nhost = \"host-2\"").is_err());
    }

    #[test]
    fn node_id_from_file_and_env_is_checked() {
        let c = GatewayConfig::from_toml("[node]\nid = \"shuffle-1.rack-2\"").unwrap();
        c.validate().unwrap();
        assert_eq!(c.node.id.as_deref(), Some("shuffle-1.rack-2"));

        let c = GatewayConfig::load_with_env(None, env_of(&[(ENV_NODE_ID, " sy-7 ")])).unwrap();
        assert_eq!(c.node.id.as_deref(), Some("sy-7"));

        for bad in ["a b", "node/1", "n\u{e9}", &"x".repeat(MAX_NODE_ID_LEN + 1)] {
            let err =
                GatewayConfig::load_with_env(None, env_of(&[(ENV_NODE_ID, bad)])).unwrap_err();
            assert!(format!("{err:#}").contains("node.id"), "{bad:?}: {err:#}");
        }
        assert!(check_node_id(&"x".repeat(MAX_NODE_ID_LEN)).is_ok());
        assert!(check_node_id("").is_err());
        assert!(check_rack("/dc1/rack-7").is_ok());
        assert!(check_rack("").is_err());
        assert!(check_rack("/rack 7").is_err());
    }

    #[test]
    fn node_tags_reach_the_celeborn_worker_and_are_checked() {
        let c = GatewayConfig::from_toml("[node]\ntags = [\"ssd\", \"env=prod\"]")
            .unwrap()
            .finish(|_| None)
            .unwrap();
        assert_eq!(c.celeborn.worker_tags, ["ssd", "env=prod"]);
        for bad in ["a,b", "a b", ""] {
            let toml = format!("[node]\ntags = [{bad:?}]");
            let err = GatewayConfig::from_toml(&toml)
                .unwrap()
                .finish(|_| None)
                .unwrap_err();
            assert!(format!("{err:#}").contains("node.tags"), "{bad:?}: {err:#}");
        }
        let err = GatewayConfig::from_toml(
            "[celeborn.congestion]\nhigh_watermark = 0.5\nlow_watermark = 0.7",
        )
        .unwrap()
        .finish(|_| None)
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("celeborn.congestion"),
            "{err:#}"
        );
    }

    #[test]
    fn validation_fails_clearly() {
        let err =
            GatewayConfig::load_with_env(None, env_of(&[(ENV_MEMORY_CAPACITY, "0")])).unwrap_err();
        assert!(format!("{err:#}").contains("memory.capacity"), "{err:#}");

        let err = GatewayConfig::load_with_env(None, env_of(&[(ENV_LOG, "info,=[")])).unwrap_err();
        assert!(format!("{err:#}").contains("log.level"), "{err:#}");

        let mut c = GatewayConfig::default();
        c.storage.memory.low_watermark = 0.9;
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("watermark"));
    }

    #[test]
    fn errors_name_the_dotted_key() {
        for (text, key) in [
            (
                "[storage.memory]\ncapacty = \"1GiB\"",
                "storage.memory.capacty",
            ),
            ("[admin]\nlisten = \"nowhere\"", "admin.listen"),
            (
                "[log]\nlevel = \"info\"\n\n[uniffle]\nenabled = 3",
                "uniffle.enabled",
            ),
            ("bogus = 1", "bogus"),
        ] {
            let err = format!("{:#}", GatewayConfig::from_toml(text).unwrap_err());
            assert!(
                err.starts_with(&format!("key {key}: ")),
                "{text:?} gave {err}"
            );
        }
    }

    #[test]
    fn clashing_listen_addresses_are_rejected() {
        let c = GatewayConfig::from_toml(
            "[uniffle]\nserver_grpc_listen = \"0.0.0.0:9097\"\n[celeborn]\nmaster_listen = \"127.0.0.1:9097\"",
        )
        .unwrap();
        let err = format!("{:#}", c.validate().unwrap_err());
        assert!(
            err.contains("celeborn.master_listen") && err.contains("uniffle.server_grpc_listen"),
            "{err}"
        );
        // Other IPs, port 0 and disabled roles do not clash.
        for ok in [
            "[uniffle]\nserver_grpc_listen = \"127.0.0.2:9097\"",
            "[uniffle]\ncoordinator_listen = \"127.0.0.1:0\"\nserver_grpc_listen = \"127.0.0.1:0\"",
            "[celeborn]\nenabled = false\n[uniffle]\nserver_grpc_listen = \"127.0.0.1:9097\"",
        ] {
            GatewayConfig::from_toml(ok).unwrap().validate().unwrap();
        }
    }

    #[test]
    fn redacted_toml_hides_secrets_and_parses_back() {
        let c = GatewayConfig::from_toml(
            "[storage.cold]\nservice = \"s3\"\nbucket = \"b\"\naccess_key_id = \"AKIA1\"\nsecret_access_key = \"hunter2\"",
        )
        .unwrap();
        let text = c.to_redacted_toml().unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(
            text.contains("secret_access_key = \"<redacted>\""),
            "{text}"
        );
        assert!(text.contains("AKIA1"), "{text}");
        let back = GatewayConfig::from_toml(&text).unwrap();
        back.validate().unwrap();

        let defaults = GatewayConfig::default().to_redacted_toml().unwrap();
        let back = GatewayConfig::from_toml(&defaults).unwrap();
        assert!(same(&back, &GatewayConfig::default()), "{defaults}");
    }

    /// config/switchyard.toml must describe exactly the built-in defaults.
    #[test]
    fn documented_file_equals_defaults() {
        let c = GatewayConfig::from_toml(DOC).unwrap();
        c.validate().unwrap();
        assert_eq!(
            format!("{c:#?}"),
            format!("{:#?}", GatewayConfig::default()),
            "config/switchyard.toml no longer matches the defaults"
        );
    }

    /// Every key with a default value is written out in the documented file
    /// (not merely left to its default).
    #[test]
    fn documented_file_lists_every_key() {
        fn keys(prefix: &str, value: &toml::Value, out: &mut Vec<String>) {
            if let toml::Value::Table(t) = value {
                for (k, v) in t {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    if v.is_table() {
                        keys(&path, v, out);
                    } else {
                        out.push(path);
                    }
                }
            }
        }
        let mut expected = Vec::new();
        keys(
            "",
            &toml::Value::try_from(GatewayConfig::default()).unwrap(),
            &mut expected,
        );
        let mut documented = Vec::new();
        keys(
            "",
            &toml::from_str::<toml::Value>(DOC).unwrap(),
            &mut documented,
        );
        let missing: Vec<_> = expected
            .iter()
            .filter(|k| !documented.contains(k))
            .collect();
        assert!(
            missing.is_empty(),
            "config/switchyard.toml lacks {missing:?}"
        );
        assert!(expected.len() >= 15, "too few keys: {expected:?}");
    }

    /// Optional keys (off by default) appear as commented-out examples; with
    /// the comment marks removed they must parse and set those keys.
    #[test]
    fn documented_examples_parse() {
        let uncommented: String = DOC
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest) if is_setting(rest) => rest,
                _ => line,
            })
            .map(|line| format!("{line}\n"))
            .collect();
        let c = GatewayConfig::from_toml(&uncommented).unwrap();
        c.validate().unwrap();
        assert_eq!(c.node.id.as_deref(), Some("shuffle-1"));
        assert!(c.node.host.is_some());
        assert!(c.storage.disks.write_rate_limit.is_some());
        assert!(c.storage.disks.read_rate_limit.is_some());
        assert!(c.celeborn.tls.is_some(), "the [celeborn.tls] example");
        let cold = c.storage.cold.expect("the [storage.cold] example");
        let defaults_from_serde: switchyard_storage::ColdConfig =
            toml::from_str("service = \"fs\"\nroot = \"/x\"").unwrap();
        assert_eq!(cold.prefix, defaults_from_serde.prefix);
        assert_eq!(
            cold.huge_partition_threshold,
            defaults_from_serde.huge_partition_threshold
        );
        assert_eq!(
            cold.write_concurrency,
            defaults_from_serde.write_concurrency
        );
    }

    /// `key = value`, `[storage.section]` or `[celeborn.section]`
    fn is_setting(s: &str) -> bool {
        if (s.starts_with("[storage.") || s.starts_with("[celeborn.")) && s.ends_with(']') {
            return true;
        }
        match s.split_once(" = ") {
            Some((key, _)) => {
                !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            }
            None => false,
        }
    }
}
