//! `[admin.vendor]`: where the Celeborn and Uniffle admin APIs listen.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use switchyard_uniffle::config::address_or_off;

/// Each listener serves one upstream role's REST API on that role's default
/// HTTP port, so that `celeborn-cli`, Uniffle's dashboard and the scripts a
/// team already has work when pointed at this node. A listener runs only
/// when its role runs here (its protocol enabled, and the coordinator or
/// worker role); `""` turns it off. Like every listen address still at its
/// default, each follows `node.host`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VendorApiConfig {
    /// Celeborn master's REST API v1 (`celeborn.master.http.port`).
    /// Default `127.0.0.1:9098`.
    #[serde(with = "address_or_off")]
    pub celeborn_master_listen: Option<SocketAddr>,
    /// Celeborn worker's REST API v1 (`celeborn.worker.http.port`).
    /// Default `127.0.0.1:9096`.
    #[serde(with = "address_or_off")]
    pub celeborn_worker_listen: Option<SocketAddr>,
    /// Uniffle coordinator's REST API (`rss.jetty.http.port`).
    /// Default `127.0.0.1:19998`.
    #[serde(with = "address_or_off")]
    pub uniffle_coordinator_listen: Option<SocketAddr>,
}

impl Default for VendorApiConfig {
    fn default() -> Self {
        let at = |s: &str| Some(s.parse().expect("valid default address"));
        VendorApiConfig {
            celeborn_master_listen: at("127.0.0.1:9098"),
            celeborn_worker_listen: at("127.0.0.1:9096"),
            uniffle_coordinator_listen: at("127.0.0.1:19998"),
        }
    }
}

impl VendorApiConfig {
    /// Moves each address still at its default to `host` (`node.host`).
    pub fn follow_host(&mut self, host: std::net::IpAddr) {
        let defaults = VendorApiConfig::default();
        for (addr, default) in [
            (
                &mut self.celeborn_master_listen,
                defaults.celeborn_master_listen,
            ),
            (
                &mut self.celeborn_worker_listen,
                defaults.celeborn_worker_listen,
            ),
            (
                &mut self.uniffle_coordinator_listen,
                defaults.uniffle_coordinator_listen,
            ),
        ] {
            if let (Some(a), Some(d)) = (addr.as_mut(), default) {
                if *a == d {
                    *a = SocketAddr::new(host, a.port());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::GatewayConfig;

    #[test]
    fn listeners_follow_the_host_turn_off_and_clash_like_the_others() {
        let mut c = GatewayConfig::from_toml(
            "[node]\nhost = \"127.0.0.5\"\n[admin.vendor]\nceleborn_worker_listen = \"\"\nuniffle_coordinator_listen = \"0.0.0.0:8000\"\n",
        )
        .unwrap();
        c.apply_host();
        let v = &c.admin.vendor;
        assert_eq!(
            v.celeborn_master_listen,
            Some("127.0.0.5:9098".parse().unwrap())
        );
        assert_eq!(v.celeborn_worker_listen, None);
        assert_eq!(
            v.uniffle_coordinator_listen,
            Some("0.0.0.0:8000".parse().unwrap())
        );
        let keys: Vec<_> = c.vendor_api_listeners().into_iter().map(|l| l.0).collect();
        assert_eq!(
            keys,
            [
                super::super::CELEBORN_MASTER,
                super::super::UNIFFLE_COORDINATOR
            ]
        );

        let clash = GatewayConfig::from_toml(
            "[admin.vendor]\nceleborn_master_listen = \"127.0.0.1:9097\"\n",
        )
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(
            format!("{clash:#}").contains("celeborn_master_listen"),
            "{clash:#}"
        );
        // A worker-only node runs only the worker's API.
        let mut w = GatewayConfig::from_toml("[cluster]\nroles = [\"worker\"]\n").unwrap();
        w.apply_roles();
        let keys: Vec<_> = w.vendor_api_listeners().into_iter().map(|l| l.0).collect();
        assert_eq!(keys, [super::super::CELEBORN_WORKER]);
    }
}
