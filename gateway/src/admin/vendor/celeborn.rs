//! Celeborn's REST API v1 (openapi/openapi-client/src/main/openapi3/
//! {master,worker}_rest_v1.yaml at v0.6.3): the master's view of the
//! workers, applications and shuffles, the worker's own view, the
//! configuration, and the decommission calls. Field names and nesting are
//! upstream's; fields that would mean nothing here are left out where the
//! schema makes them optional (docs/vendor-apis.md).

use std::time::SystemTime;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use switchyard_celeborn::ShuffleKey;
use switchyard_ident::FrontEnd;

use super::members::{members, unix_ms, Member};
use super::VendorState;

pub fn master_routes() -> Router<VendorState> {
    Router::new()
        .route("/api/v1/workers", get(master_workers))
        .route("/api/v1/applications", get(master_applications))
        .route("/api/v1/shuffles", get(master_shuffles))
        .route("/api/v1/conf", get(conf))
        .route("/api/v1/workers/events", post(send_worker_event))
        .route("/api/v1/workers/exclude", post(exclude_worker))
}

pub fn worker_routes() -> Router<VendorState> {
    Router::new()
        .route("/api/v1/workers", get(worker_info))
        .route("/api/v1/applications", get(worker_applications))
        .route("/api/v1/shuffles", get(worker_shuffles))
        .route("/api/v1/conf", get(conf))
        .route("/api/v1/workers/exit", post(worker_exit))
}

/// `WorkerData`, and the worker's `WorkerInfoResponse` (flattened into it).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkerData {
    host: String,
    rpc_port: i32,
    push_port: i32,
    fetch_port: i32,
    replicate_port: i32,
    /// -1: no internal port, as upstream writes when it is disabled.
    internal_port: i32,
    /// The partitions the node holds (Celeborn counts a slot per partition).
    slot_used: i64,
    last_heartbeat_timestamp: i64,
    heartbeat_elapsed_seconds: i64,
    /// Upstream's `PbWorkerStatus.State` names.
    worker_state: &'static str,
    /// The master's view only: the worker's `WorkerInfoResponse` has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    network_location: Option<String>,
}

fn worker_data(m: &Member) -> Option<WorkerData> {
    let c = m.heartbeat.celeborn.as_ref()?;
    let now = unix_ms(SystemTime::now());
    Some(WorkerData {
        host: c.host.clone(),
        rpc_port: c.rpc_port,
        push_port: c.push_port,
        fetch_port: c.fetch_port,
        replicate_port: c.replicate_port,
        internal_port: -1,
        slot_used: m.load().partitions as i64,
        last_heartbeat_timestamp: m.last_heartbeat_unix_ms as i64,
        heartbeat_elapsed_seconds: (now.saturating_sub(m.last_heartbeat_unix_ms) / 1000) as i64,
        worker_state: if m.decommissioning() {
            "InDecommission"
        } else {
            "Normal"
        },
        network_location: Some(if m.heartbeat.rack.is_empty() {
            switchyard_celeborn::server::fleet::DEFAULT_RACK.to_string()
        } else {
            m.heartbeat.rack.clone()
        }),
    })
}

#[derive(Serialize)]
struct WorkerTimestampData {
    worker: WorkerData,
    timestamp: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkersResponse {
    workers: Vec<WorkerData>,
    lost_workers: Vec<WorkerTimestampData>,
    excluded_workers: Vec<WorkerData>,
    manual_excluded_workers: Vec<WorkerData>,
    shutdown_workers: Vec<WorkerData>,
    decommissioning_workers: Vec<WorkerData>,
}

/// Live workers (decommissioning ones too, as upstream lists them), lost
/// ones with their last heartbeat, and the decommissioning ones again.
async fn master_workers(State(state): State<VendorState>) -> Json<WorkersResponse> {
    let mut out = WorkersResponse {
        workers: Vec::new(),
        lost_workers: Vec::new(),
        excluded_workers: Vec::new(),
        manual_excluded_workers: Vec::new(),
        shutdown_workers: Vec::new(),
        decommissioning_workers: Vec::new(),
    };
    for m in members(&state) {
        if m.lost {
            if let Some(worker) = worker_data(&m) {
                out.lost_workers.push(WorkerTimestampData {
                    worker,
                    timestamp: m.last_heartbeat_unix_ms as i64,
                });
            }
            continue;
        }
        if m.decommissioning() {
            out.decommissioning_workers.extend(worker_data(&m));
        }
        out.workers.extend(worker_data(&m));
    }
    Json(out)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ApplicationHeartbeatData {
    app_id: String,
    last_heartbeat_timestamp: i64,
}

#[derive(Serialize)]
struct ApplicationsHeartbeatResponse {
    applications: Vec<ApplicationHeartbeatData>,
}

/// A live Celeborn application: its client's id, last heartbeat (Unix ms)
/// and shuffle ids.
struct CelebornApp {
    id: String,
    last_heartbeat_unix_ms: u64,
    shuffles: Vec<i32>,
}

/// In a fleet, what the drivers told the coordinators (the app book);
/// alone, the Celeborn applications in this node's store.
fn master_apps(state: &VendorState) -> Vec<CelebornApp> {
    let Some(c) = &state.admin.coordination else {
        return stored_apps(state);
    };
    let now = SystemTime::now();
    c.apps
        .view()
        .into_iter()
        .filter(|a| a.state == "alive")
        .map(|a| CelebornApp {
            last_heartbeat_unix_ms: a.last_seen_ms_ago.map_or(0, |ago| {
                unix_ms(now - std::time::Duration::from_millis(ago))
            }),
            id: a.app,
            shuffles: a.shuffles,
        })
        .collect()
}

/// The Celeborn (Spark and Flink) applications in this node's store.
fn stored_apps(state: &VendorState) -> Vec<CelebornApp> {
    let store = &state.admin.store;
    store
        .app_history()
        .into_iter()
        .filter(|r| r.removed.is_none())
        .filter_map(|r| {
            let id = FrontEnd::Celeborn.own_id(&r.id)?.to_string();
            let shuffles = store
                .shuffle_status(&r.id)?
                .into_iter()
                .map(|s| s.id)
                .collect();
            Some(CelebornApp {
                id,
                last_heartbeat_unix_ms: r.last_seen_unix_ms,
                shuffles,
            })
        })
        .collect()
}

async fn master_applications(
    State(state): State<VendorState>,
) -> Json<ApplicationsHeartbeatResponse> {
    Json(ApplicationsHeartbeatResponse {
        applications: master_apps(&state)
            .into_iter()
            .map(|a| ApplicationHeartbeatData {
                app_id: a.id,
                last_heartbeat_timestamp: a.last_heartbeat_unix_ms as i64,
            })
            .collect(),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ShufflesResponse {
    shuffle_ids: Vec<String>,
}

fn shuffle_keys(apps: Vec<CelebornApp>) -> Json<ShufflesResponse> {
    let mut shuffle_ids: Vec<String> = apps
        .iter()
        .flat_map(|a| {
            a.shuffles
                .iter()
                .map(|s| ShuffleKey::new(&a.id, *s).to_string())
        })
        .collect();
    shuffle_ids.sort();
    Json(ShufflesResponse { shuffle_ids })
}

async fn master_shuffles(State(state): State<VendorState>) -> Json<ShufflesResponse> {
    shuffle_keys(master_apps(&state))
}

async fn worker_shuffles(State(state): State<VendorState>) -> Json<ShufflesResponse> {
    shuffle_keys(stored_apps(&state))
}

#[derive(Serialize)]
struct ApplicationsResponse {
    applications: Vec<String>,
}

async fn worker_applications(State(state): State<VendorState>) -> Json<ApplicationsResponse> {
    let mut applications: Vec<String> = stored_apps(&state).into_iter().map(|a| a.id).collect();
    applications.sort();
    Json(ApplicationsResponse { applications })
}

#[derive(Serialize)]
struct ConfigData {
    name: String,
    value: String,
}

#[derive(Serialize)]
struct ConfResponse {
    configs: Vec<ConfigData>,
}

/// Switchyard's own configuration keys (secrets redacted): Celeborn's keys
/// have no meaning here.
async fn conf(State(state): State<VendorState>) -> Json<ConfResponse> {
    Json(ConfResponse {
        configs: state
            .conf
            .iter()
            .map(|(name, value)| ConfigData {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkerInfoResponse {
    #[serde(flatten)]
    data: WorkerData,
    is_registered: bool,
    is_shutdown: bool,
    is_decommissioning: bool,
}

/// This worker's own view; 503 on a node without the worker role.
async fn worker_info(State(state): State<VendorState>) -> Response {
    let Some(local) = &state.local else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no worker runs here\n").into_response();
    };
    let m = Member {
        heartbeat: switchyard_cluster::LocalWorker::report(local.as_ref()),
        last_heartbeat_unix_ms: unix_ms(SystemTime::now()),
        lost: false,
        local: true,
    };
    let Some(data) = worker_data(&m).map(|d| WorkerData {
        network_location: None,
        ..d
    }) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no Celeborn worker runs here\n",
        )
            .into_response();
    };
    let decommissioning = m.decommissioning();
    Json(WorkerInfoResponse {
        data,
        is_registered: true,
        // Upstream sets it while the worker shuts down for a decommission,
        // which here is the whole decommission.
        is_shutdown: decommissioning,
        is_decommissioning: decommissioning,
    })
    .into_response()
}

#[derive(Serialize)]
struct HandleResponse {
    success: bool,
    message: String,
}

fn handled(success: bool, message: impl Into<String>) -> Response {
    Json(HandleResponse {
        success,
        message: message.into(),
    })
    .into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkerId {
    host: String,
    rpc_port: i32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SendWorkerEventRequest {
    event_type: String,
    #[serde(default)]
    workers: Vec<WorkerId>,
}

/// `DECOMMISSION` (and `DECOMMISSIONTHENIDLE`) begin Switchyard's
/// decommission of each worker, `RECOMMISSION` and `NONE` cancel it; the
/// graceful and immediate exits are a node's SIGTERM and SIGKILL here.
async fn send_worker_event(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Json(req): Json<SendWorkerEventRequest>,
) -> Response {
    if let Err(refusal) = super::authorised(&state, &headers) {
        return refusal.into_response();
    }
    let begin = match req.event_type.as_str() {
        "DECOMMISSION" | "DECOMMISSIONTHENIDLE" => true,
        "RECOMMISSION" | "NONE" => false,
        other => {
            return handled(
                false,
                format!("{other} is not supported: stop a Switchyard node with SIGTERM (graceful) or SIGKILL"),
            )
        }
    };
    let all = members(&state);
    let mut failed = Vec::new();
    for w in &req.workers {
        let found = all.iter().find(|m| {
            m.heartbeat
                .celeborn
                .as_ref()
                .is_some_and(|c| c.host == w.host && c.rpc_port == w.rpc_port)
        });
        match found {
            Some(m) => {
                if let Err(e) = super::decommission::apply(&state, m, begin).await {
                    failed.push(e.to_string());
                }
            }
            None => failed.push(format!("unknown worker {}:{}", w.host, w.rpc_port)),
        }
    }
    if failed.is_empty() {
        handled(
            true,
            format!("{} sent to {} workers", req.event_type, req.workers.len()),
        )
    } else {
        handled(false, failed.join("; "))
    }
}

/// Switchyard has no manual exclusion list; a worker leaves placement by
/// its decommission (`/api/v1/workers/events`).
async fn exclude_worker(State(state): State<VendorState>, headers: HeaderMap) -> Response {
    if let Err(refusal) = super::authorised(&state, &headers) {
        return refusal.into_response();
    }
    handled(
        false,
        "Switchyard keeps no excluded-worker list: send a DECOMMISSION event (POST /api/v1/workers/events) to take a worker out of placement",
    )
}

#[derive(Deserialize)]
struct WorkerExitRequest {
    #[serde(rename = "type", default)]
    kind: String,
}

/// `DECOMMISSION` begins this node's decommission (it exits once no
/// application holds data here); other exit types are not supported.
async fn worker_exit(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Json(req): Json<WorkerExitRequest>,
) -> Response {
    if let Err(refusal) = super::authorised(&state, &headers) {
        return refusal.into_response();
    }
    if req.kind != "DECOMMISSION" {
        return handled(
            false,
            format!(
                "exit type {:?} is not supported: use DECOMMISSION, or stop the node with SIGTERM",
                req.kind
            ),
        );
    }
    let begun = state.admin.decommission.begin();
    tracing::info!(begun, "decommission requested over Celeborn's worker API");
    handled(
        true,
        "decommissioning: the node exits once no application holds data on it",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_info_flattens_the_worker_data() {
        let body = serde_json::to_value(WorkerInfoResponse {
            data: WorkerData {
                host: "h".into(),
                rpc_port: 1,
                push_port: 2,
                fetch_port: 3,
                replicate_port: 4,
                internal_port: -1,
                slot_used: 5,
                last_heartbeat_timestamp: 6,
                heartbeat_elapsed_seconds: 0,
                worker_state: "Normal",
                network_location: None,
            },
            is_registered: true,
            is_shutdown: false,
            is_decommissioning: false,
        })
        .unwrap();
        assert_eq!(body["rpcPort"], 1);
        assert_eq!(body["internalPort"], -1);
        assert_eq!(body["isRegistered"], true);
        assert!(body.get("networkLocation").is_none());
    }
}
