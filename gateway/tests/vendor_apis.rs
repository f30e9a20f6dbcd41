//! The Celeborn and Uniffle admin APIs (`[admin.vendor]`) of a running
//! node with live applications of both protocols, each answer checked
//! against the upstream schema:
//! - Celeborn: `vendor_schemas/celeborn-v0.6.3.json`, the component schemas
//!   of apache/celeborn v0.6.3's openapi/openapi-client/src/main/openapi3/
//!   {master,worker}_rest_v1.yaml (no upstream client jar is served here);
//! - Uniffle: `vendor_schemas/uniffle-v0.10.0.json`, written from the
//!   classes apache/uniffle v0.10.0's coordinator serializes (it has no
//!   OpenAPI file; the file names them).
//!
//! The validator is strict: a property the schema does not name fails, as
//! do a missing required one, a wrong type and an int32 out of range.

mod common;

use std::net::SocketAddr;

use common::cluster::{Cluster, ClusterOptions, Node};
use serde_json::Value;

const TOKEN: &str = "vendor-api-token";
const BEARER: &str = "Bearer vendor-api-token";

fn schemas(file: &str, role: &str) -> Value {
    let path = format!("{}/tests/vendor_schemas/{file}", env!("CARGO_MANIFEST_DIR"));
    let all: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    all[role].clone()
}

/// Checks `value` against an OpenAPI 3.0 schema object: the subset the
/// upstream files use (type, format, properties, required,
/// additionalProperties, items, enum, nullable, `$ref`).
fn check(root: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        let target = &root["components"]["schemas"][name];
        assert!(!target.is_null(), "no schema {name}");
        return check(root, target, value, at, errors);
    }
    if value.is_null() {
        if schema["nullable"] != true {
            errors.push(format!("{at}: null"));
        }
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} not in {allowed:?}"));
        }
    }
    let ty = schema["type"].as_str().unwrap_or("object");
    let fits = match ty {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => match (value.as_i64(), schema["format"].as_str()) {
            (Some(n), Some("int32")) => i32::try_from(n).is_ok(),
            (Some(_), _) => true,
            (None, _) => false,
        },
        other => panic!("schema type {other} at {at}"),
    };
    if !fits {
        errors.push(format!("{at}: {value} is no {ty} {}", schema["format"]));
        return;
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            check(root, &schema["items"], item, &format!("{at}[{i}]"), errors);
        }
    }
    let Some(object) = value.as_object() else {
        return;
    };
    for required in schema["required"].as_array().into_iter().flatten() {
        if !object.contains_key(required.as_str().unwrap()) {
            errors.push(format!("{at}: lacks required {required}"));
        }
    }
    for (key, v) in object {
        let path = format!("{at}.{key}");
        match (&schema["properties"][key], &schema["additionalProperties"]) {
            (Value::Null, Value::Null) => errors.push(format!("{path}: not in the schema")),
            (Value::Null, extra) => check(root, extra, v, &path, errors),
            (property, _) => check(root, property, v, &path, errors),
        }
    }
}

/// GETs `path` and checks its JSON against the schema `name`; returns it.
fn get_checked(addr: SocketAddr, path: &str, root: &Value, name: &str) -> Value {
    let (code, body) = common::http_get(addr, path).unwrap();
    assert_eq!(code, 200, "GET {addr}{path}: {body}");
    let value: Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    let mut errors = Vec::new();
    let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    check(root, &schema, &value, name, &mut errors);
    assert!(
        errors.is_empty(),
        "GET {path} against {name}: {errors:#?}\n{value:#}"
    );
    value
}

/// POSTs `body` with `auth` as the `Authorization` header.
fn post(addr: SocketAddr, path: &str, body: &str, auth: Option<&str>) -> (u16, Value) {
    let auth = auth.map(|a| format!("Authorization: {a}\r\n"));
    let (code, text) = request_with(addr, path, body, auth.as_deref().unwrap_or(""));
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `common::http_request` with an extra header line.
fn request_with(addr: SocketAddr, path: &str, body: &str, header: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{header}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, rest) = out.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, rest.to_string())
}

/// A live Uniffle application with one shuffle of 4 partitions, 64 KiB in
/// partition 0; its client says it is 0.10.0.
async fn uniffle_app(node: &Node, app: &str) {
    use switchyard_clients::uniffle::ClientBlock;
    let mut server = common::uniffle::shuffle_of_four(node, app, Some("0.10.0")).await;
    let block = ClientBlock::new(1, 0, bytes::Bytes::from(vec![7u8; 64 << 10]));
    server.send(app, 0, vec![(0, vec![block])]).await.unwrap();
}

/// A live Celeborn application: registered by its heartbeat, with shuffle
/// 0's slots reserved on the worker and 1 KiB pushed to each partition.
async fn celeborn_app(node: &Node, app: &str) {
    use switchyard_bench::lifecycle::{
        connect_master, heartbeat, request_slots, reserve_slots, worker_addr, SlotRequest,
    };
    use switchyard_clients::celeborn::{batch, Connection};
    let master = connect_master(&node.celeborn_master().to_string())
        .await
        .unwrap();
    heartbeat(&master, app).await.unwrap();
    let request = SlotRequest {
        partitions: vec![0, 1],
        replicate: false,
        rack_aware: false,
        map_partitions: false,
    };
    let slots = request_slots(&master, app, &request).await.unwrap();
    for (worker, _) in reserve_slots(app, &slots, &request).await.unwrap() {
        let push = Connection::connect(worker_addr(worker, 1).unwrap())
            .await
            .unwrap();
        for p in [0, 1] {
            let reply = push
                .push(
                    &format!("{app}-0"),
                    &format!("{p}-0"),
                    batch(0, 0, p, &[1; 1024]),
                )
                .await
                .unwrap();
            assert!(reply.is_empty(), "push answered {reply:?}");
        }
    }
}

fn start() -> Cluster {
    Cluster::start_with(
        1,
        ClusterOptions {
            extra_toml: format!("[admin]\ntoken = \"{TOKEN}\"\n"),
            ..Default::default()
        },
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn find<'a>(list: &'a Value, key: &str, want: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|v| v[key] == want)
}

#[test]
fn celeborn_master_and_worker_apis_answer_in_the_v0_6_3_schemas() {
    let cluster = start();
    let node = cluster.node(1);
    let (master, worker) = (node.addr(9098), node.addr(9096));
    let (m, w) = (
        schemas("celeborn-v0.6.3.json", "master"),
        schemas("celeborn-v0.6.3.json", "worker"),
    );
    let app = "vendor-celeborn-1";
    runtime().block_on(celeborn_app(node, app));
    let ip = node.ip().to_string();

    let workers = get_checked(master, "/api/v1/workers", &m, "WorkersResponse");
    let one = &workers["workers"][0];
    assert_eq!(workers["workers"].as_array().unwrap().len(), 1, "{workers}");
    assert_eq!(
        (one["host"].as_str(), one["rpcPort"].as_i64()),
        (Some(ip.as_str()), Some(9100))
    );
    assert_eq!(one["workerState"], "Normal");
    assert!(one["slotUsed"].as_i64().unwrap() >= 2, "{one}");
    let apps = get_checked(
        master,
        "/api/v1/applications",
        &m,
        "ApplicationsHeartbeatResponse",
    );
    let seen = find(&apps["applications"], "appId", app).unwrap_or_else(|| panic!("{apps}"));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!((now_ms - seen["lastHeartbeatTimestamp"].as_i64().unwrap()).abs() < 60_000);
    let key = format!("{app}-0");
    for (addr, root) in [(master, &m), (worker, &w)] {
        let shuffles = get_checked(addr, "/api/v1/shuffles", root, "ShufflesResponse");
        assert!(
            shuffles["shuffleIds"]
                .as_array()
                .unwrap()
                .contains(&key.clone().into()),
            "{shuffles}"
        );
        let conf = get_checked(addr, "/api/v1/conf", root, "ConfResponse");
        let listen = find(
            &conf["configs"],
            "name",
            "admin.vendor.celeborn_master_listen",
        );
        assert_eq!(listen.unwrap()["value"], format!("{ip}:9098"));
        assert!(!conf.to_string().contains(TOKEN), "the token is redacted");
    }
    let apps = get_checked(worker, "/api/v1/applications", &w, "ApplicationsResponse");
    assert!(
        apps["applications"]
            .as_array()
            .unwrap()
            .contains(&app.into()),
        "{apps}"
    );
    let me = get_checked(worker, "/api/v1/workers", &w, "WorkerInfoResponse");
    assert_eq!(
        (me["host"].as_str(), me["isDecommissioning"].as_bool()),
        (Some(ip.as_str()), Some(false))
    );

    decommission_over_celeborn(node, &m, &w, one);
}

/// POSTs a worker event with the token; it must succeed.
fn sent(master: SocketAddr, event: &str) {
    let (code, answer) = post(master, "/api/v1/workers/events", event, Some(BEARER));
    assert_eq!(
        (code, &answer["success"]),
        (200, &Value::Bool(true)),
        "{answer}"
    );
}

/// DECOMMISSION and RECOMMISSION through the master's worker events, and
/// the worker's own exit call, need the admin token and change this node's
/// decommission state.
fn decommission_over_celeborn(node: &Node, m: &Value, w: &Value, worker_data: &Value) {
    let (master, worker) = (node.addr(9098), node.addr(9096));
    let id = serde_json::json!({
        "host": worker_data["host"], "rpcPort": worker_data["rpcPort"],
        "pushPort": worker_data["pushPort"], "fetchPort": worker_data["fetchPort"],
        "replicatePort": worker_data["replicatePort"],
    });
    let event = |kind: &str| serde_json::json!({"eventType": kind, "workers": [id]}).to_string();
    let (code, _) = post(
        master,
        "/api/v1/workers/events",
        &event("DECOMMISSION"),
        None,
    );
    assert_eq!(code, 401, "no token");
    let (code, _) = post(
        master,
        "/api/v1/workers/events",
        &event("DECOMMISSION"),
        Some("Bearer wrong"),
    );
    assert_eq!(code, 401);
    assert_eq!(node.status()["decommission"]["state"], "active");

    sent(master, &event("DECOMMISSION"));
    assert_eq!(node.status()["decommission"]["state"], "decommissioning");
    let workers = get_checked(master, "/api/v1/workers", m, "WorkersResponse");
    assert_eq!(
        workers["decommissioningWorkers"][0]["workerState"], "InDecommission",
        "{workers}"
    );
    let me = get_checked(worker, "/api/v1/workers", w, "WorkerInfoResponse");
    assert_eq!(me["isDecommissioning"], true);

    sent(master, &event("RECOMMISSION"));
    assert_eq!(node.status()["decommission"]["state"], "active");
    let (_, answer) = post(
        master,
        "/api/v1/workers/events",
        &event("IMMEDIATELY"),
        Some(BEARER),
    );
    assert_eq!(answer["success"], false, "{answer}");
    let (_, answer) = post(
        master,
        "/api/v1/workers/exclude",
        r#"{"add":[]}"#,
        Some(BEARER),
    );
    assert_eq!(answer["success"], false, "no exclusion list: {answer}");

    let (code, answer) = post(
        worker,
        "/api/v1/workers/exit",
        r#"{"type":"DECOMMISSION"}"#,
        Some(BEARER),
    );
    assert_eq!(
        (code, &answer["success"]),
        (200, &Value::Bool(true)),
        "{answer}"
    );
    assert_eq!(node.status()["decommission"]["state"], "decommissioning");
    sent(master, &event("RECOMMISSION"));
    assert_eq!(node.status()["decommission"]["state"], "active");
}

#[test]
fn uniffle_coordinator_api_answers_in_the_v0_10_0_shapes() {
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            extra_toml: format!(
                "[admin]\ntoken = \"{TOKEN}\"\n[admin.vendor]\nceleborn_worker_listen = \"\"\n"
            ),
            ..Default::default()
        },
    );
    let node = cluster.node(1);
    let api = node.addr(19998);
    let u = schemas("uniffle-v0.10.0.json", "coordinator");
    assert!(
        std::net::TcpStream::connect(node.addr(9096)).is_err(),
        "\"\" turns a listener off"
    );
    let app = "vendor-uniffle-1";
    runtime().block_on(uniffle_app(node, app));
    let id = node.status()["node"]["id"].as_str().unwrap().to_string();

    let status = get_checked(api, "/api/server/status", &u, "StatusResponse");
    assert_eq!(
        (status["code"].as_i64(), status["data"].as_str()),
        (Some(0), Some("success"))
    );
    let nodes = get_checked(api, "/api/server/nodes", &u, "NodesResponse");
    let me = find(&nodes["data"], "id", &id).unwrap_or_else(|| panic!("{nodes}"));
    assert_eq!(
        (me["grpcPort"].as_i64(), me["nettyPort"].as_i64()),
        (Some(19997), Some(19996))
    );
    assert_eq!(
        (me["ip"].as_str(), me["status"].as_str()),
        (Some(node.ip().to_string().as_str()), Some("ACTIVE"))
    );
    assert!(
        me["tags"].as_array().unwrap().contains(&"ss_v5".into()),
        "{me}"
    );
    assert!(me["usedMemory"].as_i64().unwrap() >= 64 << 10, "{me}");
    let lost = get_checked(api, "/api/server/nodes?status=lost", &u, "NodesResponse");
    assert_eq!(lost["data"], serde_json::json!([]));
    get_checked(api, &format!("/api/server/nodes/{id}"), &u, "NodeResponse");
    let summary = get_checked(api, "/api/server/nodes/summary", &u, "NodesSummaryResponse");
    assert_eq!(summary["data"], serde_json::json!({"ACTIVE": 1}));

    let total = get_checked(api, "/api/app/total", &u, "AppTotalResponse");
    assert_eq!(total["data"]["appCurrent"], 1, "{total}");
    let infos = get_checked(api, "/api/app/appInfos", &u, "AppInfosResponse");
    let info = find(&infos["data"], "appId", app).unwrap_or_else(|| panic!("{infos}"));
    assert_eq!(info["version"], "0.10.0");
    assert_eq!(info["memorySize"], 64 << 10, "{info}");
    assert_eq!(info["totalSize"], 64 << 10, "{info}");
    let users = get_checked(api, "/api/app/userTotal", &u, "UserTotalResponse");
    assert_eq!(users["data"][0]["appNum"], 1, "{users}");
    let coordinator = get_checked(api, "/api/coordinator/info", &u, "CoordinatorInfoResponse");
    assert_eq!(
        (
            coordinator["data"]["coordinatorId"].as_str(),
            coordinator["data"]["serverPort"].as_str()
        ),
        (Some(id.as_str()), Some("19999"))
    );
    assert_eq!(coordinator["data"]["serverWebPort"], "19998");
    get_checked(api, "/api/coordinator/conf", &u, "CoordinatorConfResponse");

    let (code, _) = post(
        api,
        &format!("/api/server/{id}/decommission"),
        "",
        Some("Bearer wrong"),
    );
    assert_eq!(code, 401);
    // Uniffle's scripts send HTTP basic credentials: the token as given.
    let basic = format!("Basic {TOKEN}");
    let (code, answer) = post(
        api,
        &format!("/api/server/{id}/decommission"),
        "",
        Some(&basic),
    );
    assert_eq!((code, &answer["code"]), (200, &Value::from(0)), "{answer}");
    let draining = get_checked(
        api,
        "/api/server/nodes?status=decommissioning",
        &u,
        "NodesResponse",
    );
    assert_eq!(draining["data"][0]["id"], id.as_str(), "{draining}");
    let body = serde_json::json!({"serverIds": [id]}).to_string();
    let (_, answer) = post(api, "/api/server/cancelDecommission", &body, Some(BEARER));
    let mut errors = Vec::new();
    check(
        &u,
        &serde_json::json!({"$ref": "#/components/schemas/EmptyResponse"}),
        &answer,
        "cancel",
        &mut errors,
    );
    assert!(
        errors.is_empty() && answer["code"] == 0,
        "{errors:?} {answer}"
    );
    assert_eq!(node.status()["decommission"]["state"], "active");
    let (_, answer) = post(
        api,
        "/api/server/decommission",
        r#"{"serverIds":["nobody"]}"#,
        Some(BEARER),
    );
    assert_eq!(answer["code"], -1, "{answer}");
}

/// In a fleet the coordinator's APIs list every worker from its directory,
/// and a decommission of another node goes to that node's admin port.
#[test]
fn a_fleet_coordinator_lists_every_worker_and_forwards_decommissions() {
    let cluster = Cluster::start_with(
        2,
        ClusterOptions {
            extra_toml: format!("[admin]\ntoken = \"{TOKEN}\"\n"),
            coordinators: vec![1],
            ..Default::default()
        },
    );
    let (one, two) = (cluster.node(1), cluster.node(2));
    let (master, uniffle) = (one.addr(9098), one.addr(19998));
    let m = schemas("celeborn-v0.6.3.json", "master");
    common::wait_for("both workers in the master's list", || {
        let (_, body) = common::http_get(master, "/api/v1/workers").unwrap();
        serde_json::from_str::<Value>(&body).unwrap()["workers"]
            .as_array()
            .is_some_and(|w| w.len() == 2)
    });
    let workers = get_checked(master, "/api/v1/workers", &m, "WorkersResponse");
    let ip2 = two.ip().to_string();
    let w2 = find(&workers["workers"], "host", &ip2).unwrap_or_else(|| panic!("{workers}"));
    let u = schemas("uniffle-v0.10.0.json", "coordinator");
    let nodes = get_checked(uniffle, "/api/server/nodes", &u, "NodesResponse");
    assert_eq!(nodes["data"].as_array().unwrap().len(), 2, "{nodes}");

    let id = serde_json::json!({
        "host": w2["host"], "rpcPort": w2["rpcPort"], "pushPort": w2["pushPort"],
        "fetchPort": w2["fetchPort"], "replicatePort": w2["replicatePort"],
    });
    let event = |kind: &str| serde_json::json!({"eventType": kind, "workers": [id]}).to_string();
    sent(master, &event("DECOMMISSION"));
    assert_eq!(one.status()["decommission"]["state"], "active");
    // Node 2 holds no data: decommissioned, it exits at once, and cleanly.
    let mut cluster = cluster;
    let exit = cluster.wait_exit(2, common::PATIENCE);
    assert!(exit.is_some_and(|e| e.success()), "node 2: {exit:?}");
}
