//! The read side of the Celeborn and Uniffle admin REST APIs (and their
//! decommission calls), answered from Switchyard's own state in each
//! vendor's JSON shapes, each on its own listener (`[admin.vendor]`).
//! docs/vendor-apis.md says what each endpoint returns here and what has no
//! meaning on Switchyard.

mod celeborn;
mod config;
mod decommission;
mod members;
mod uniffle;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use self::config::VendorApiConfig;
use super::AdminState;
use crate::fleet::NodeWorker;

/// Keys of the listeners, as `GatewayConfig::vendor_api_listeners` names them.
pub const CELEBORN_MASTER: &str = "admin.vendor.celeborn_master_listen";
pub const CELEBORN_WORKER: &str = "admin.vendor.celeborn_worker_listen";
pub const UNIFFLE_COORDINATOR: &str = "admin.vendor.uniffle_coordinator_listen";

/// What every vendor endpoint reads.
#[derive(Clone)]
pub struct VendorState {
    pub admin: AdminState,
    /// This node as a worker (its heartbeat); None on a coordinator-only node.
    pub local: Option<Arc<NodeWorker>>,
    /// This node's configuration as dotted keys and values, secrets
    /// redacted: the `conf` endpoints.
    pub conf: Arc<Vec<(String, String)>>,
    /// Where decommission requests for other nodes go (their admin port).
    pub http: reqwest::Client,
    /// The port this listener serves (Uniffle's `serverWebPort`).
    pub port: u16,
}

impl VendorState {
    pub fn new(
        admin: AdminState,
        local: Option<Arc<NodeWorker>>,
        config: &crate::config::GatewayConfig,
    ) -> anyhow::Result<Self> {
        let mut conf = Vec::new();
        flatten("", &serde_json::to_value(config)?, &mut conf);
        Ok(VendorState {
            admin,
            local,
            conf: Arc::new(conf),
            http: crate::ctl::http_client()?,
            port: 0,
        })
    }
}

/// `{"a":{"b":1}}` as `("a.b", "1")`; arrays as their JSON text.
fn flatten(prefix: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        serde_json::Value::String(s) => out.push((prefix.to_string(), s.clone())),
        serde_json::Value::Null => out.push((prefix.to_string(), String::new())),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// Binds and serves every listener `config` turns on, until `stop`. A
/// port that is taken is logged and left out, not fatal: during a
/// migration the old Celeborn or Uniffle process may still hold it on the
/// same host, and the shuffle service matters more than its admin API.
pub async fn spawn(
    listeners: Vec<(&'static str, SocketAddr)>,
    state: VendorState,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for (key, addr) in listeners {
        let listener = match TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(key, %addr, error = %e, "vendor admin API not served: cannot listen (set another address, or \"\" to turn it off)");
                metrics::counter!("switchyard_vendor_api_unbound_total").increment(1);
                continue;
            }
        };
        let bound = listener.local_addr().context("vendor admin API address")?;
        let state = VendorState {
            port: bound.port(),
            ..state.clone()
        };
        let router = match key {
            CELEBORN_MASTER => celeborn::master_routes(),
            CELEBORN_WORKER => celeborn::worker_routes(),
            _ => uniffle::coordinator_routes(),
        }
        .with_state(state);
        let mut stop = stop.clone();
        tracing::info!(%bound, key, "vendor admin API listening");
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(key, error = %e, "vendor admin API stopped");
            }
        }));
    }
    Ok(tasks)
}

/// The admin token check of the POST calls, which also takes `Basic
/// <admin.token>`: Uniffle's scripts send HTTP basic credentials, compared
/// as given with `rss.http.basic.authorizationCredentials` upstream, and
/// Celeborn's API declares basic authentication.
fn authorised(
    state: &VendorState,
    headers: &axum::http::HeaderMap,
) -> Result<(), (axum::http::StatusCode, &'static str)> {
    let basic = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "));
    match (basic, &state.admin.token) {
        (Some(sent), Some(token)) if token.matches(sent.as_bytes()) => Ok(()),
        _ => super::authorised(&state.admin, headers),
    }
}
