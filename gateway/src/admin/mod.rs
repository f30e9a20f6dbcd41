//! Admin HTTP: health, readiness, Prometheus metrics, the JSON status and
//! throughput history, and the web status page built on them.

mod apps;
mod faults;
pub mod migration;
mod page;
pub mod throughput;
pub mod vendor;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde::Serialize;
use switchyard_storage::{Store, StoreStatus};

use self::throughput::ThroughputHistory;
use crate::node::NodeStatus;
use crate::telemetry;
use switchyard_cluster::proto::WorkerState;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone)]
pub struct AdminState {
    pub store: Arc<Store>,
    pub metrics: PrometheusHandle,
    pub started: Instant,
    pub node: Arc<NodeStatus>,
    pub throughput: Arc<ThroughputHistory>,
    /// The workers and applications this node coordinates (fleet
    /// coordinators only).
    pub coordination: Option<Arc<crate::fleet::Coordination>>,
    pub decommission: Arc<crate::decommission::Decommission>,
    /// `admin.token`: what mutating endpoints require.
    pub token: Option<switchyard_storage::Secret>,
    /// The disks' switchable faults, with `admin.fault_injection` only.
    pub disk_faults: Option<Arc<switchyard_storage::fault::SwitchedFaults>>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .route("/api/v1/status", get(status))
        .route("/api/v1/cluster", get(cluster))
        .route(
            "/api/v1/decommission",
            axum::routing::post(decommission).delete(cancel_decommission),
        )
        .route(
            "/api/v1/faults/disk",
            axum::routing::post(faults::set_disk_fault),
        )
        .route("/api/v1/throughput", get(throughput))
        .route("/api/v1/migration", get(migration))
        .route("/api/v1/apps", get(apps::apps))
        .route("/api/v1/shuffles", get(shuffles))
        .merge(page::routes())
        .with_state(state)
}

/// Liveness: the process runs and serves HTTP.
async fn healthz() -> &'static str {
    "ok"
}

/// Readiness: the store has at least one writable tier.
async fn readyz(State(state): State<AdminState>) -> (StatusCode, &'static str) {
    if state.store.is_ready() {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no writable storage tier",
        )
    }
}

async fn render_metrics(State(state): State<AdminState>) -> impl IntoResponse {
    // Fresh figures on every scrape, whatever the store's own timer does.
    state.store.publish_gauges();
    telemetry::update_process_metrics();
    publish_node_gauges(&state);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// The node's decommission state and, on a fleet coordinator, its
/// directory's workers by state (Celeborn's master counts them).
fn publish_node_gauges(state: &AdminState) {
    let decommissioning = if state.decommission.is_active() {
        1.0
    } else {
        0.0
    };
    metrics::gauge!(telemetry::DECOMMISSIONING).set(decommissioning);
    if let Some(c) = &state.coordination {
        // Placement takes the live, active, healthy ones; a live active
        // worker whose heartbeat says no tier takes writes is left out (a
        // Celeborn master's excluded workers).
        let mut counts = [
            ("active", 0u64),
            ("excluded", 0),
            ("decommissioning", 0),
            ("lost", 0),
        ];
        for (heartbeat, _, lost) in c.directory.entries() {
            let i = if lost {
                3
            } else if heartbeat.state == WorkerState::Decommissioning as i32 {
                2
            } else if heartbeat.load.is_some_and(|l| l.healthy) {
                0
            } else {
                1
            };
            counts[i].1 += 1;
        }
        for (s, n) in counts {
            metrics::gauge!(telemetry::FLEET_WORKERS, "state" => s).set(n as f64);
        }
    }
}

#[derive(Serialize)]
struct StatusBody<'a> {
    version: &'static str,
    uptime_seconds: u64,
    node: &'a NodeStatus,
    /// Whether this node coordinates a fleet (`/api/v1/cluster` answers).
    fleet_coordinator: bool,
    /// `active`, or `decommissioning` and since when.
    decommission: crate::decommission::DecommissionStatus,
    storage: StoreStatus,
}

async fn status(State(state): State<AdminState>) -> axum::response::Response {
    Json(StatusBody {
        version: VERSION,
        uptime_seconds: state.started.elapsed().as_secs(),
        node: &state.node,
        fleet_coordinator: state.coordination.is_some(),
        decommission: state.decommission.status(),
        storage: state.store.status(),
    })
    .into_response()
}

#[derive(Serialize)]
struct ClusterBody {
    /// This node's id: the coordinator answering.
    coordinator: String,
    /// True during the coordinator's warm-up (`cluster.warmup`, and until
    /// it exchanged app books with its peers), while it refuses drivers.
    warming: bool,
    workers: Vec<switchyard_cluster::WorkerView>,
    /// What Celeborn drivers told the coordinators (this one's book, merged
    /// with its peers').
    apps: Vec<switchyard_cluster::apps::AppView>,
}

/// The workers this coordinator hears from, lost ones included; 404 on a
/// node that coordinates no fleet.
async fn cluster(State(state): State<AdminState>) -> axum::response::Response {
    match &state.coordination {
        Some(c) => Json(ClusterBody {
            coordinator: state.node.id.clone(),
            warming: c.warming(),
            workers: c.directory.views(),
            apps: c.apps.view(),
        })
        .into_response(),
        None => (
            axum::http::StatusCode::NOT_FOUND,
            "this node coordinates no fleet (cluster.coordinators is empty, or it has no coordinator role)\n",
        )
            .into_response(),
    }
}

/// Whether the request carries `Authorization: Bearer <admin.token>`
/// (compared in constant time); never without a configured token.
pub(crate) fn authorised(
    state: &AdminState,
    headers: &axum::http::HeaderMap,
) -> Result<(), (StatusCode, &'static str)> {
    let Some(token) = &state.token else {
        return Err((
            StatusCode::FORBIDDEN,
            "mutating admin endpoints are off: set admin.token (or SWITCHYARD_ADMIN_TOKEN) on this node\n",
        ));
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if token.matches(sent.as_bytes()) {
        Ok(())
    } else {
        metrics::counter!("switchyard_admin_refused_total").increment(1);
        Err((
            StatusCode::UNAUTHORIZED,
            "missing or wrong token: send Authorization: Bearer <admin.token>\n",
        ))
    }
}

/// Begins decommissioning this node (idempotent): 202 with the state.
async fn decommission(
    State(state): State<AdminState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    if let Err(refusal) = authorised(&state, &headers) {
        return refusal.into_response();
    }
    let begun = state.decommission.begin();
    tracing::info!(begun, "decommission requested over admin HTTP");
    (StatusCode::ACCEPTED, Json(state.decommission.status())).into_response()
}

/// Cancels a decommission: 200 with the state (`active`), 409 when the
/// node was not decommissioning.
async fn cancel_decommission(
    State(state): State<AdminState>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    if let Err(refusal) = authorised(&state, &headers) {
        return refusal.into_response();
    }
    let cancelled = state.decommission.cancel();
    tracing::info!(cancelled, "decommission cancel requested over admin HTTP");
    let code = if cancelled {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    (code, Json(state.decommission.status())).into_response()
}

async fn throughput(State(state): State<AdminState>) -> Json<throughput::History> {
    Json(state.throughput.history())
}

async fn migration(State(state): State<AdminState>) -> Json<migration::MigrationReport> {
    Json(migration::report(&state.store, &state.throughput))
}

#[derive(serde::Deserialize)]
struct ShufflesQuery {
    /// The client's application id (any protocol), or the store's
    /// `<protocol>/<id>`.
    app: String,
}

#[derive(Serialize)]
struct AppShuffles {
    /// The store's id.
    id: String,
    protocol: &'static str,
    shuffles: Vec<switchyard_storage::ShuffleStatus>,
}

/// `GET /api/v1/shuffles?app=ID`: the shuffles of every application of
/// that id (one per protocol that has it); 404 when none has.
async fn shuffles(
    State(state): State<AdminState>,
    axum::extract::Query(q): axum::extract::Query<ShufflesQuery>,
) -> axum::response::Response {
    let mut found = Vec::new();
    for record in state.store.app_history() {
        if record.removed.is_some() {
            continue;
        }
        let (protocol, id) = migration::protocol_of(&record.id, record.client.as_deref());
        if record.id != q.app && id != q.app {
            continue;
        }
        if let Some(shuffles) = state.store.shuffle_status(&record.id) {
            found.push(AppShuffles {
                id: record.id,
                protocol,
                shuffles,
            });
        }
    }
    if found.is_empty() {
        return (
            StatusCode::NOT_FOUND,
            format!("no application {:?} on this node", q.app),
        )
            .into_response();
    }
    Json(found).into_response()
}
