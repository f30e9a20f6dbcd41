//! Admin HTTP: health, readiness, Prometheus metrics, the JSON status and
//! throughput history, and the web status page built on them.

pub mod migration;
mod page;
pub mod throughput;

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

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone)]
pub struct AdminState {
    pub store: Arc<Store>,
    pub metrics: PrometheusHandle,
    pub started: Instant,
    pub node: Arc<NodeStatus>,
    pub throughput: Arc<ThroughputHistory>,
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .route("/api/v1/status", get(status))
        .route("/api/v1/throughput", get(throughput))
        .route("/api/v1/migration", get(migration))
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
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

#[derive(Serialize)]
struct StatusBody<'a> {
    version: &'static str,
    uptime_seconds: u64,
    node: &'a NodeStatus,
    storage: StoreStatus,
}

async fn status(State(state): State<AdminState>) -> axum::response::Response {
    Json(StatusBody {
        version: VERSION,
        uptime_seconds: state.started.elapsed().as_secs(),
        node: &state.node,
        storage: state.store.status(),
    })
    .into_response()
}

async fn throughput(State(state): State<AdminState>) -> Json<throughput::History> {
    Json(state.throughput.history())
}

async fn migration(State(state): State<AdminState>) -> Json<migration::MigrationReport> {
    Json(migration::report(&state.store, &state.throughput))
}
