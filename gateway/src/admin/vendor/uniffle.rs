//! Uniffle's coordinator REST API (coordinator/.../web/resource/*.java at
//! v0.10.0, the paths its dashboard's `src/api/api.js` calls): server nodes
//! with status and tags, applications, the coordinator's info and
//! configuration, and the decommission calls. Every answer is upstream's
//! `Response` envelope, `{"code":0,"data":…,"errMsg":"success"}`.

use std::collections::BTreeMap;
use std::time::SystemTime;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use switchyard_ident::FrontEnd;

use super::members::{members, unix_ms, Member};
use super::VendorState;

pub fn coordinator_routes() -> Router<VendorState> {
    Router::new()
        .route("/api/server/status", get(server_status))
        .route("/api/server/nodes", get(nodes))
        .route("/api/server/nodes/summary", get(nodes_summary))
        .route("/api/server/nodes/{id}", get(node))
        .route("/api/server/decommission", post(decommission_many))
        .route("/api/server/cancelDecommission", post(cancel_many))
        .route("/api/server/{id}/decommission", post(decommission_one))
        .route("/api/server/{id}/cancelDecommission", post(cancel_one))
        .route("/api/app/total", get(app_total))
        .route("/api/app/appInfos", get(app_infos))
        .route("/api/app/userTotal", get(user_total))
        .route("/api/coordinator/info", get(coordinator_info))
        .route("/api/coordinator/conf", get(coordinator_conf))
}

/// Upstream's `Response<T>`: code 0 and `success`, or -1 and the reason.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<T> {
    code: i32,
    data: Option<T>,
    err_msg: String,
}

fn success<T: Serialize>(data: T) -> Response {
    Json(Envelope {
        code: 0,
        data: Some(data),
        err_msg: "success".into(),
    })
    .into_response()
}

fn fail(msg: impl Into<String>) -> Response {
    Json(Envelope::<()> {
        code: -1,
        data: None,
        err_msg: msg.into(),
    })
    .into_response()
}

async fn server_status() -> Response {
    success("success")
}

/// `ServerNode` as Jackson writes it. Figures Switchyard has no counterpart
/// for carry upstream's defaults (0, -1, null, {}): docs/vendor-apis.md.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServerNode {
    id: String,
    ip: String,
    grpc_port: i32,
    netty_port: i32,
    jetty_port: i32,
    used_memory: i64,
    pre_allocated_memory: i64,
    available_memory: i64,
    total_memory: i64,
    event_num_in_flush: i32,
    registration_time: i64,
    timestamp: i64,
    tags: Vec<String>,
    status: &'static str,
    storage_info: BTreeMap<String, ()>,
    start_time: i64,
    version: Option<String>,
    git_commit_id: Option<String>,
    display_metrics: BTreeMap<String, String>,
}

/// Upstream's `ServerStatus` name of a node.
fn status_of(m: &Member) -> &'static str {
    if m.lost {
        "LOST"
    } else if m.decommissioning() {
        "DECOMMISSIONING"
    } else if !m.load().healthy {
        "UNHEALTHY"
    } else {
        "ACTIVE"
    }
}

fn server_node(state: &VendorState, m: &Member) -> Option<ServerNode> {
    let u = m.heartbeat.uniffle.as_ref()?;
    let load = m.load();
    let started = SystemTime::now() - state.admin.started.elapsed();
    Some(ServerNode {
        id: u.id.clone(),
        ip: u.ip.clone(),
        grpc_port: u.grpc_port,
        netty_port: u.netty_port,
        jetty_port: -1,
        used_memory: load.memory_used as i64,
        pre_allocated_memory: 0,
        available_memory: load.memory_capacity.saturating_sub(load.memory_used) as i64,
        total_memory: load.memory_capacity as i64,
        event_num_in_flush: 0,
        registration_time: 0,
        timestamp: m.last_heartbeat_unix_ms as i64,
        tags: u.tags.clone(),
        status: status_of(m),
        storage_info: BTreeMap::new(),
        start_time: if m.local { unix_ms(started) as i64 } else { -1 },
        version: m.local.then(|| super::super::VERSION.to_string()),
        git_commit_id: None,
        display_metrics: BTreeMap::new(),
    })
}

#[derive(Deserialize)]
struct NodesQuery {
    status: Option<String>,
}

/// Without `status`, every node not lost (upstream's list of servers it
/// still hears from); with it, the nodes of that status.
async fn nodes(State(state): State<VendorState>, Query(q): Query<NodesQuery>) -> Response {
    let wanted = q.status.map(|s| s.to_ascii_uppercase());
    let mut out: Vec<ServerNode> = members(&state)
        .iter()
        .filter(|m| match &wanted {
            None => !m.lost,
            Some(s) => status_of(m) == s.as_str(),
        })
        .filter_map(|m| server_node(&state, m))
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    success(out)
}

async fn node(State(state): State<VendorState>, Path(id): Path<String>) -> Response {
    let found = members(&state)
        .iter()
        .filter_map(|m| server_node(&state, m))
        .find(|n| n.id == id);
    match found {
        Some(n) => success(n),
        None => fail(format!("no server node {id}")),
    }
}

/// Nodes by status name.
async fn nodes_summary(State(state): State<VendorState>) -> Response {
    let mut counts: BTreeMap<&'static str, i32> = BTreeMap::new();
    for m in members(&state) {
        if m.heartbeat.uniffle.is_some() {
            *counts.entry(status_of(&m)).or_default() += 1;
        }
    }
    success(counts)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerIds {
    #[serde(default)]
    server_ids: Vec<String>,
}

/// Decommissions (`begin`) or re-activates each node by its server id.
async fn change(state: &VendorState, headers: &HeaderMap, ids: &[String], begin: bool) -> Response {
    if let Err(refusal) = super::authorised(state, headers) {
        return refusal.into_response();
    }
    if ids.is_empty() {
        return fail("Parameter[serverIds] should not be empty!");
    }
    let all = members(state);
    for id in ids {
        let Some(m) = all
            .iter()
            .find(|m| m.heartbeat.uniffle.as_ref().is_some_and(|u| &u.id == id))
        else {
            return fail(format!("Server {id} is not found"));
        };
        if let Err(e) = super::decommission::apply(state, m, begin).await {
            return fail(e.to_string());
        }
    }
    success(())
}

async fn decommission_many(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Json(req): Json<ServerIds>,
) -> Response {
    change(&state, &headers, &req.server_ids, true).await
}

async fn cancel_many(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Json(req): Json<ServerIds>,
) -> Response {
    change(&state, &headers, &req.server_ids, false).await
}

async fn decommission_one(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    change(&state, &headers, &[id], true).await
}

async fn cancel_one(
    State(state): State<VendorState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    change(&state, &headers, &[id], false).await
}

/// A Uniffle application in this node's store.
struct UniffleApp {
    record: switchyard_storage::AppRecord,
    status: Option<switchyard_storage::status::AppStatus>,
}

/// The Uniffle applications this node's store remembers, live and removed.
fn uniffle_apps(state: &VendorState) -> Vec<UniffleApp> {
    let store = &state.admin.store;
    let mut live: BTreeMap<String, switchyard_storage::status::AppStatus> = store
        .status()
        .applications
        .into_iter()
        .map(|a| (a.id.clone(), a))
        .collect();
    store
        .app_history()
        .into_iter()
        .filter(|r| FrontEnd::Uniffle.own_id(&r.id).is_some())
        .map(|record| UniffleApp {
            status: live.remove(&record.id),
            record,
        })
        .collect()
}

/// The name under which every application is listed: Switchyard does not
/// keep the user a Uniffle client names.
const UNKNOWN_USER: &str = "unknown";

async fn app_total(State(state): State<VendorState>) -> Response {
    let apps = uniffle_apps(&state);
    let current = apps.iter().filter(|a| a.record.removed.is_none()).count();
    let totals = BTreeMap::from([
        ("appCurrent", current as i32),
        ("appTotality", apps.len() as i32),
    ]);
    success(totals)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AppInfoVo {
    user_name: &'static str,
    app_id: String,
    update_time: i64,
    registration_time: i64,
    version: String,
    git_commit_id: String,
    partition_num: i64,
    memory_size: i64,
    local_file_num: i64,
    local_total_size: i64,
    hadoop_file_num: i64,
    hadoop_total_size: i64,
    total_size: i64,
}

fn app_info(app: UniffleApp) -> AppInfoVo {
    let r = app.record;
    let s = app.status;
    let bytes = s.as_ref().map(|s| s.bytes.clone()).unwrap_or_default();
    AppInfoVo {
        user_name: UNKNOWN_USER,
        app_id: FrontEnd::Uniffle.own_id(&r.id).unwrap_or(&r.id).to_string(),
        update_time: r.last_seen_unix_ms as i64,
        registration_time: r.registered_unix_ms as i64,
        // The store keeps `client <version>` (docs/migration.md).
        version: r
            .client
            .as_deref()
            .map(|c| c.strip_prefix("client ").unwrap_or(c).to_string())
            .unwrap_or_default(),
        git_commit_id: String::new(),
        partition_num: s.as_ref().map_or(0, |s| s.partitions as i64),
        memory_size: bytes.memory as i64,
        local_file_num: 0,
        local_total_size: bytes.disk as i64,
        hadoop_file_num: 0,
        hadoop_total_size: bytes.cold as i64,
        total_size: (bytes.memory + bytes.disk + bytes.cold) as i64,
    }
}

/// The live applications, newest registration first.
async fn app_infos(State(state): State<VendorState>) -> Response {
    let mut out: Vec<AppInfoVo> = uniffle_apps(&state)
        .into_iter()
        .filter(|a| a.record.removed.is_none())
        .map(app_info)
        .collect();
    out.sort_by_key(|a| std::cmp::Reverse(a.registration_time));
    success(out)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UserAppNumVo {
    user_name: &'static str,
    app_num: i32,
}

async fn user_total(State(state): State<VendorState>) -> Response {
    let live = uniffle_apps(&state)
        .iter()
        .filter(|a| a.record.removed.is_none())
        .count();
    let users: Vec<UserAppNumVo> = (live > 0)
        .then_some(UserAppNumVo {
            user_name: UNKNOWN_USER,
            app_num: live as i32,
        })
        .into_iter()
        .collect();
    success(users)
}

/// Upstream's map: every value a string but `startTime`.
async fn coordinator_info(State(state): State<VendorState>) -> Response {
    let node = &state.admin.node;
    let coordinator = node.uniffle.as_ref().and_then(|u| u.coordinator.clone());
    let (ip, port) = coordinator
        .as_deref()
        .and_then(|c| c.rsplit_once(':'))
        .map_or((String::new(), String::new()), |(h, p)| {
            (h.to_string(), p.to_string())
        });
    let started = SystemTime::now() - state.admin.started.elapsed();
    success(serde_json::json!({
        "coordinatorId": node.id,
        "serverIp": ip,
        "serverPort": port,
        "serverWebPort": state.port.to_string(),
        "version": super::super::VERSION,
        "gitCommitId": "",
        "startTime": unix_ms(started),
    }))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CoordinatorConfVo {
    argument_key: String,
    argument_value: String,
}

/// Switchyard's own configuration keys (secrets redacted).
async fn coordinator_conf(State(state): State<VendorState>) -> Response {
    let conf: Vec<CoordinatorConfVo> = state
        .conf
        .iter()
        .map(|(k, v)| CoordinatorConfVo {
            argument_key: k.clone(),
            argument_value: v.clone(),
        })
        .collect();
    success(conf)
}
