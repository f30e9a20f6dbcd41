//! `POST /api/v1/faults/disk` on a running node: off unless
//! `admin.fault_injection` is set, behind the admin token, only for the
//! node's own data directories; a hung disk holds its calls, not the node.

mod common;

use common::cluster::{Cluster, ClusterOptions};
use common::{http_get, http_request_as, wait_for};

const TOKEN: &str = "disk-fault-token";

fn post(node: &common::cluster::Node, body: &str, token: Option<&str>) -> (u16, String) {
    http_request_as(
        node.admin(),
        "POST",
        "/api/v1/faults/disk",
        Some(body),
        token,
    )
    .unwrap()
}

#[test]
fn disk_faults_are_switched_only_where_enabled_and_authorised() {
    let mut cluster = Cluster::start_with(
        1,
        ClusterOptions {
            extra_toml: format!("[admin]\ntoken = \"{TOKEN}\"\nfault_injection = true\n"),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let dir = node.data_dir().display().to_string();
    let hang = format!("{{\"dir\": \"{dir}\", \"mode\": \"hang\"}}");

    assert_eq!(post(node, &hang, None).0, 401, "no token");
    assert_eq!(post(node, &hang, Some("wrong")).0, 401, "wrong token");
    let (code, body) = post(
        node,
        "{\"dir\": \"/not/ours\", \"mode\": \"error\"}",
        Some(TOKEN),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not a data directory"), "{body}");

    let (code, body) = post(node, &hang, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"hang\"") && body.contains(&dir), "{body}");
    // The disk's calls wait; the node's HTTP does not.
    for _ in 0..3 {
        assert_eq!(http_get(node.admin(), "/healthz").unwrap().0, 200);
        assert_eq!(http_get(node.admin(), "/api/v1/status").unwrap().0, 200);
    }
    let (code, body) = post(
        node,
        &format!("{{\"dir\": \"{dir}\", \"mode\": \"off\"}}"),
        Some(TOKEN),
    );
    assert_eq!((code, body.as_str()), (200, "[]"));
    wait_for("the node ready after the hang", || {
        http_get(cluster.node(1).admin(), "/readyz").is_ok_and(|(c, _)| c == 200)
    });
    let status = cluster.stop(1);
    assert!(
        status.success(),
        "a node whose disk hung and came back stops cleanly: {status}"
    );
}

#[test]
fn without_the_flag_there_is_no_fault_endpoint() {
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            extra_toml: format!("[admin]\ntoken = \"{TOKEN}\"\n"),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let body = format!(
        "{{\"dir\": \"{}\", \"mode\": \"error\"}}",
        node.data_dir().display()
    );
    let (code, text) = post(node, &body, Some(TOKEN));
    assert_eq!(code, 404, "{text}");
    assert!(text.contains("admin.fault_injection"), "{text}");
}
