//! `[cluster]`: which roles this node has, where its coordinators are, and
//! the secret nodes share.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchyard_storage::config::Secret;

/// Default cluster protocol port.
pub const DEFAULT_PORT: u16 = 19980;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Uniffle coordinator and Celeborn master: places partitions on workers.
    Coordinator,
    /// Uniffle shuffle server and Celeborn worker: stores partitions.
    Worker,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The coordinators' cluster addresses (`host:port` of their
    /// `cluster.listen`), this node's own included when it is one. Empty
    /// (default): this node is a cluster of one, coordinating only itself.
    pub coordinators: Vec<String>,
    /// Where a coordinator serves the cluster protocol. Default
    /// `127.0.0.1:19980` (follows `node.host`).
    pub listen: SocketAddr,
    /// Default both. A node with only `worker` runs no Uniffle coordinator
    /// and no Celeborn master; one with only `coordinator` (a fleet's
    /// coordinator-only node) binds no shuffle server or worker port, stores
    /// no shuffle data and takes no partitions.
    pub roles: Vec<Role>,
    /// Shared by every node; required when `coordinators` is set. A
    /// heartbeat without it is refused, so nobody can register a worker.
    pub secret: Option<Secret>,
    /// How often a worker heartbeats each coordinator, and how often
    /// coordinators exchange their app books. Default 3 s.
    #[serde(with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// A worker silent this long leaves placement and is reported lost.
    /// Default 30 s (Uniffle's server timeout).
    #[serde(with = "humantime_serde")]
    pub worker_timeout: Duration,
    /// A heartbeat not answered within this counts as failed. Default 5 s.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// For this long after its start a coordinator refuses drivers (Uniffle
    /// assignments get INTERNAL_ERROR, Celeborn requests an RPC failure), so
    /// that they ask the next coordinator while this one hears from the
    /// workers. It also waits until it has exchanged app books with every
    /// other coordinator once. Default 6 s (two heartbeat intervals).
    #[serde(with = "humantime_serde")]
    pub warmup: Duration,
    /// How often a decommissioning node checks whether any application
    /// still holds data on it. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub decommission_check_interval: Duration,
    /// A decommissioning node exits after this even if data remains.
    /// Default 6 h (Celeborn's `decommission.forceExitTimeout`).
    #[serde(with = "humantime_serde")]
    pub decommission_timeout: Duration,
    /// The address outgoing heartbeats leave from: `node.host`, set by the
    /// gateway, so that a firewall rule on a node's address cuts all of its
    /// traffic. `None`: the kernel picks.
    #[serde(skip)]
    pub source_address: Option<std::net::IpAddr>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            coordinators: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            roles: vec![Role::Coordinator, Role::Worker],
            secret: None,
            heartbeat_interval: Duration::from_secs(3),
            worker_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(5),
            warmup: Duration::from_secs(6),
            decommission_check_interval: Duration::from_secs(10),
            decommission_timeout: Duration::from_secs(6 * 3600),
            source_address: None,
        }
    }
}

impl ClusterConfig {
    /// Whether this node is part of a fleet (has coordinators configured).
    pub fn is_fleet(&self) -> bool {
        !self.coordinators.is_empty()
    }

    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    /// The checks `switchyard check-config` reports by key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.roles.is_empty() {
            return Err(ConfigError::NoRole);
        }
        if !self.is_fleet() {
            if !self.has(Role::Worker) {
                return Err(ConfigError::CoordinatorAlone);
            }
            return Ok(());
        }
        if self.secret.as_ref().is_none_or(Secret::is_empty) {
            return Err(ConfigError::NoSecret);
        }
        for c in &self.coordinators {
            let ok = c
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
            if !ok {
                return Err(ConfigError::Coordinator(c.clone()));
            }
        }
        if self.heartbeat_interval.is_zero() || self.worker_timeout <= self.heartbeat_interval {
            return Err(ConfigError::Timeouts);
        }
        Ok(())
    }
}

/// Why a `[cluster]` section is refused; each text starts with its key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cluster.roles: name at least one role (coordinator, worker)")]
    NoRole,
    #[error("cluster.roles: a coordinator-only node needs workers to place on: set cluster.coordinators (a node alone is always a worker)")]
    CoordinatorAlone,
    #[error("cluster.secret: required when cluster.coordinators is set (nodes refuse heartbeats without it)")]
    NoSecret,
    #[error("cluster.coordinators: {0:?} is not host:port (such as 10.0.0.1:{DEFAULT_PORT})")]
    Coordinator(String),
    #[error("cluster.worker_timeout must be longer than cluster.heartbeat_interval (> 0)")]
    Timeouts,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_by_default_and_fleets_need_a_secret() {
        let c = ClusterConfig::default();
        assert!(!c.is_fleet());
        c.validate().unwrap();
        let mut fleet = ClusterConfig {
            coordinators: vec!["127.0.0.2:19980".into()],
            ..Default::default()
        };
        assert!(fleet
            .validate()
            .unwrap_err()
            .to_string()
            .contains("cluster.secret"));
        fleet.secret = Some("s3cret".into());
        fleet.validate().unwrap();
        fleet.coordinators.push("nohost".into());
        assert!(fleet
            .validate()
            .unwrap_err()
            .to_string()
            .contains("\"nohost\""));
        // Coordinator-only: in a fleet, not alone.
        let mut coordinator_only = ClusterConfig {
            roles: vec![Role::Coordinator],
            ..Default::default()
        };
        assert!(coordinator_only
            .validate()
            .unwrap_err()
            .to_string()
            .contains("coordinator-only"));
        coordinator_only.coordinators = vec!["127.0.0.2:19980".into()];
        coordinator_only.secret = Some("s3cret".into());
        coordinator_only.validate().unwrap();
        let none = ClusterConfig {
            roles: Vec::new(),
            ..coordinator_only
        };
        assert!(none.validate().is_err());
    }
}
