//! `switchyard ctl status|apps|migration|shuffles|nodes`: ask a running node
//! over its admin HTTP (`GET /api/v1/status`, `/api/v1/migration`,
//! `/api/v1/shuffles`, `/api/v1/cluster`) and print tables, or the raw JSON
//! with `--json`; `ctl decommission` POSTs `/api/v1/decommission` (and
//! `--cancel` DELETEs it).
//!
//! The JSON is read as untyped `serde_json::Value`, so a field the node adds
//! or this build does not know never breaks the table.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context};
use bytesize::ByteSize;
use serde_json::Value;

use crate::admin::migration::protocol_of;
use crate::cli::{CtlArgs, CtlCommand};

/// One request, connect included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn run(command: CtlCommand) -> anyhow::Result<()> {
    type Render = fn(&Value) -> String;
    if let CtlCommand::Decommission(args) = command {
        return decommission(args);
    }
    let (args, path, render): (CtlArgs, String, Render) = match command {
        CtlCommand::Status(args) => (args, "/api/v1/status".into(), render_status),
        CtlCommand::Apps(args) => (args, "/api/v1/status".into(), render_apps),
        CtlCommand::Migration(args) => (args, "/api/v1/migration".into(), render_migration),
        CtlCommand::Shuffles(args) => (
            args.ctl,
            format!("/api/v1/shuffles?app={}", query_escape(&args.app)),
            render_shuffles,
        ),
        CtlCommand::Nodes(args) => (args, "/api/v1/cluster".into(), render_nodes),
        CtlCommand::Decommission(_) => unreachable!("handled above"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let (url, body) = runtime.block_on(admin_get(&args.admin, &path))?;
    if args.json {
        println!("{}", body.trim_end());
        return Ok(());
    }
    let status: Value = serde_json::from_str(&body)
        .with_context(|| format!("{url} did not answer with JSON: {}", snippet(&body)))?;
    print!("{}", render(&status));
    Ok(())
}

/// `ctl decommission [NODE]`: finds the node's admin address in the
/// coordinator's worker list (or takes `--admin` itself), then POSTs there.
fn decommission(args: crate::cli::DecommissionArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    runtime.block_on(async {
        let target = match &args.node {
            None => args.ctl.admin.clone(),
            Some(id) => {
                let (url, body) = admin_get(&args.ctl.admin, "/api/v1/cluster").await?;
                let cluster: Value = serde_json::from_str(&body)
                    .with_context(|| format!("{url} did not answer with JSON: {}", snippet(&body)))?;
                let worker = cluster["workers"]
                    .as_array()
                    .and_then(|w| w.iter().find(|w| w["node_id"] == id.as_str()))
                    .with_context(|| {
                        format!("the coordinator at {} knows no node {id:?} (see `switchyard ctl nodes`)", args.ctl.admin)
                    })?;
                worker["admin"]
                    .as_str()
                    .filter(|a| !a.is_empty())
                    .with_context(|| format!("node {id:?} reports no admin address"))?
                    .to_string()
            }
        };
        let url = admin_url(&target, "/api/v1/decommission")?;
        let client = http_client()?;
        let (method, request) = if args.cancel {
            ("DELETE", client.delete(&url))
        } else {
            ("POST", client.post(&url))
        };
        let response = request
            .bearer_auth(&args.token)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("node at {target} is unreachable: {method} {url}: {}", chain(&e)))?;
        let code = response.status();
        let body = response.text().await.unwrap_or_default();
        let name = args.node.as_deref().unwrap_or(&target);
        if args.cancel && code == reqwest::StatusCode::CONFLICT {
            bail!("{name} is not decommissioning");
        }
        if !code.is_success() {
            bail!("{method} {url} answered {code}: {}", snippet(&body));
        }
        if args.ctl.json {
            println!("{}", body.trim_end());
        } else if args.cancel {
            println!("{name}: decommission cancelled; it takes new partitions again");
        } else {
            println!("{name}: decommissioning; it exits once no application holds data on it");
        }
        Ok(())
    })
}

pub(crate) fn http_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        // The admin port is inside the cluster network; never via a proxy.
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")
}

fn render_nodes(c: &Value) -> String {
    let mut rows = Vec::new();
    for w in c["workers"].as_array().into_iter().flatten() {
        let age = w["last_heartbeat_ms_ago"]
            .as_u64()
            .map_or("-".into(), |ms| duration_secs(ms / 1000));
        let memory = format!(
            "{} / {}",
            bytes(&w["memory_used"]),
            bytes(&w["memory_capacity"])
        );
        rows.push(vec![
            text(&w["node_id"]),
            text(&w["state"]),
            match w["rack"].as_str() {
                Some(r) if !r.is_empty() => r.to_string(),
                _ => "-".into(),
            },
            if w["healthy"].as_bool() == Some(false) {
                "NO".into()
            } else {
                "yes".into()
            },
            text(&w["admin"]),
            text(&w["uniffle"]),
            text(&w["celeborn"]),
            memory,
            bytes(&w["disk_free"]),
            text(&w["partitions"]),
            age,
        ]);
    }
    let mut out = format!(
        "coordinator {}: {} workers\n",
        text(&c["coordinator"]),
        rows.len()
    );
    out.push_str(&table(
        &[
            "NODE",
            "STATE",
            "RACK",
            "HEALTHY",
            "ADMIN",
            "UNIFFLE",
            "CELEBORN",
            "MEMORY",
            "DISK FREE",
            "PARTITIONS",
            "HEARTBEAT",
        ],
        &rows,
    ));
    out
}

/// `path` on the admin HTTP of `admin` (`http://HOST:PORT` or `HOST:PORT`).
pub(crate) fn admin_url(admin: &str, path: &str) -> anyhow::Result<String> {
    let admin = admin.trim().trim_end_matches('/');
    if admin.is_empty() {
        bail!("--admin is empty: give the node's admin address, such as http://127.0.0.1:19990");
    }
    let base = if admin.contains("://") {
        if !admin.starts_with("http://") && !admin.starts_with("https://") {
            bail!("--admin {admin:?}: only http:// addresses are served by the admin port");
        }
        admin.to_string()
    } else {
        format!("http://{admin}")
    };
    Ok(format!("{base}{path}"))
}

/// GET `path` on a node's admin HTTP: (the URL, the body), or an error that
/// names the node when it is unreachable or answers with an error.
pub async fn admin_get(admin: &str, path: &str) -> anyhow::Result<(String, String)> {
    let url = admin_url(admin, path)?;
    let client = http_client()?;
    let response = client.get(&url).send().await.map_err(|e| {
        let why = if e.is_connect() {
            "cannot connect (is `switchyard serve` running there, and is that its admin.listen?)"
        } else if e.is_timeout() {
            "no answer in time"
        } else {
            "request failed"
        };
        anyhow::anyhow!(
            "node at {admin} is unreachable: GET {url}: {why}: {}",
            chain(&e)
        )
    })?;
    let code = response.status();
    let body = response
        .text()
        .await
        .with_context(|| format!("GET {url}: cannot read the answer"))?;
    if !code.is_success() {
        bail!("GET {url} answered {code}: {}", snippet(&body));
    }
    Ok((url, body))
}

/// The error and its sources on one line ("connection refused" is a source).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            let _ = write!(out, ": {s_text}");
        }
        source = s.source();
    }
    out
}

fn snippet(body: &str) -> String {
    let body = body.trim();
    match body.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &body[..i]),
        None => body.to_string(),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn bytes(v: &Value) -> String {
    match v.as_u64() {
        Some(n) => ByteSize::b(n).to_string(),
        None => text(v),
    }
}

fn duration_secs(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// Rows of cells as left-aligned columns, two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let w = *w;
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

pub fn render_status(s: &Value) -> String {
    let node = &s["node"];
    let storage = &s["storage"];
    let mut rows: Vec<(&str, String)> = vec![
        (
            "node",
            format!("{} ({})", text(&node["id"]), text(&node["id_source"])),
        ),
        ("version", text(&s["version"])),
        (
            "uptime",
            s["uptime_seconds"]
                .as_u64()
                .map_or_else(|| text(&s["uptime_seconds"]), duration_secs),
        ),
        (
            "ready",
            match storage["ready"].as_bool() {
                Some(true) => "yes".into(),
                Some(false) => "NO: no writable storage tier".into(),
                None => "-".into(),
            },
        ),
        ("admin", text(&node["admin"])),
        ("state", text(&s["decommission"]["state"])),
    ];
    let u = &node["uniffle"];
    rows.push((
        "uniffle",
        if u.is_null() {
            "off".into()
        } else {
            format!(
                "coordinator {}, server grpc {}, netty {}",
                text(&u["coordinator"]),
                text(&u["server_grpc"]),
                text(&u["server_netty"])
            )
        },
    ));
    let c = &node["celeborn"];
    rows.push((
        "celeborn",
        if c.is_null() {
            "off".into()
        } else {
            format!(
                "master {}, worker {}",
                text(&c["master"]),
                text(&c["worker_id"])
            )
        },
    ));
    let m = &storage["memory"];
    rows.push((
        "memory",
        format!(
            "{} used of {} ({} reserved, {} flushing)",
            bytes(&m["used"]),
            bytes(&m["capacity"]),
            bytes(&m["reserved"]),
            bytes(&m["flushing"])
        ),
    ));
    let t = &storage["tiers"];
    rows.push((
        "stored",
        format!(
            "memory {}, disk {}, cold {}",
            bytes(&t["memory"]),
            bytes(&t["disk"]),
            bytes(&t["cold"])
        ),
    ));
    let cold = &storage["cold"];
    rows.push((
        "cold tier",
        if cold.is_null() {
            "none".into()
        } else {
            format!(
                "{}, {} stored",
                text(&cold["service"]),
                bytes(&cold["stored_bytes"])
            )
        },
    ));
    let apps = storage["applications"].as_array().map_or(0, Vec::len);
    rows.push(("applications", apps.to_string()));

    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in &rows {
        let _ = writeln!(out, "{k:<width$}  {v}");
    }
    let disks: Vec<Vec<String>> = storage["disks"]
        .as_array()
        .map(|d| d.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|d| {
            vec![
                text(&d["dir"]),
                text(&d["health"]),
                d["used_ratio"]
                    .as_f64()
                    .map_or_else(|| "-".into(), |r| format!("{:.0}%", r * 100.0)),
                bytes(&d["available_bytes"]),
                bytes(&d["stored_bytes"]),
                text(&d["write_errors"]),
            ]
        })
        .collect();
    out.push('\n');
    if disks.is_empty() {
        out.push_str("no disks\n");
    } else {
        out.push_str(&table(
            &["DISK", "HEALTH", "USED", "AVAILABLE", "STORED", "ERRORS"],
            &disks,
        ));
    }
    out
}

pub fn render_apps(s: &Value) -> String {
    let apps = s["storage"]["applications"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default();
    if apps.is_empty() {
        return format!("no applications on node {}\n", text(&s["node"]["id"]));
    }
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|a| {
            let b = &a["bytes"];
            let store_id = a["id"].as_str().unwrap_or_default();
            let (protocol, id) = protocol_of(store_id, a["client"].as_str());
            vec![
                protocol.to_string(),
                id.to_string(),
                a["client"].as_str().unwrap_or("-").to_string(),
                bytes(&a["written_bytes"]),
                bytes(&a["read_bytes"]),
                text(&a["shuffles"]),
                text(&a["partitions"]),
                bytes(&b["memory"]),
                bytes(&b["disk"]),
                bytes(&b["cold"]),
                a["idle_ms"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |ms| duration_secs(ms / 1000)),
            ]
        })
        .collect();
    table(
        &[
            "PROTOCOL",
            "APPLICATION",
            "CLIENT",
            "WRITTEN",
            "READ",
            "SHUFFLES",
            "PARTITIONS",
            "MEMORY",
            "DISK",
            "COLD",
            "IDLE",
        ],
        &rows,
    )
}

/// Percent-encodes a query value.
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn render_shuffles(v: &Value) -> String {
    let mut out = String::new();
    for app in v.as_array().map(|a| a.as_slice()).unwrap_or_default() {
        let _ = writeln!(out, "{} ({})", text(&app["id"]), text(&app["protocol"]));
        let rows: Vec<Vec<String>> = app["shuffles"]
            .as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let b = &s["bytes"];
                vec![
                    text(&s["id"]),
                    text(&s["partitions"]),
                    text(&s["sealed"]),
                    bytes(&s["written_bytes"]),
                    bytes(&b["memory"]),
                    bytes(&b["disk"]),
                    bytes(&b["cold"]),
                ]
            })
            .collect();
        out.push_str(&table(
            &[
                "SHUFFLE",
                "PARTITIONS",
                "COMMITTED",
                "WRITTEN",
                "MEMORY",
                "DISK",
                "COLD",
            ],
            &rows,
        ));
    }
    out
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM` UTC.
fn utc(ms: &Value) -> String {
    let Some(ms) = ms.as_u64() else {
        return text(ms);
    };
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}",
        rem / 3600,
        rem / 60 % 60
    )
}

pub fn render_migration(m: &Value) -> String {
    let mut out = String::new();
    let protocols = m["protocols"].as_object().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = protocols
        .iter()
        .map(|(p, s)| {
            vec![
                p.clone(),
                text(&s["applications"]),
                text(&s["live"]),
                bytes(&s["written_bytes"]),
                bytes(&s["read_bytes"]),
            ]
        })
        .collect();
    let retention = m["retention_seconds"]
        .as_u64()
        .map_or("-".into(), duration_secs);
    let _ = writeln!(
        out,
        "per protocol (live applications and those removed in the last {retention}):"
    );
    out.push_str(&table(
        &["PROTOCOL", "APPLICATIONS", "LIVE", "WRITTEN", "READ"],
        &rows,
    ));
    let hours = m["hours"]
        .as_array()
        .map(|h| h.as_slice())
        .unwrap_or_default();
    let names: Vec<String> = protocols.keys().cloned().collect();
    let mut header = vec!["HOUR (UTC)".to_string()];
    for p in &names {
        header.push(format!("{} PUSHED", p.to_uppercase()));
        header.push(format!("{} FETCHED", p.to_uppercase()));
    }
    let rows: Vec<Vec<String>> = hours
        .iter()
        .map(|h| {
            let mut row = vec![utc(&h["start_unix_ms"])];
            for p in &names {
                row.push(bytes(&h["protocols"][p]["pushed_bytes"]));
                row.push(bytes(&h["protocols"][p]["fetched_bytes"]));
            }
            row
        })
        .collect();
    let _ = writeln!(out, "\nbytes per hour:");
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    out.push_str(&table(&header, &rows));
    let apps = m["applications"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default();
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|a| {
            let removed = &a["removed"];
            vec![
                text(&a["protocol"]),
                text(&a["id"]),
                a["client"].as_str().unwrap_or("-").to_string(),
                bytes(&a["written_bytes"]),
                bytes(&a["read_bytes"]),
                utc(&a["registered_unix_ms"]),
                if removed.is_null() {
                    "live".into()
                } else {
                    format!("{} {}", text(&removed["reason"]), utc(&removed["unix_ms"]))
                },
            ]
        })
        .collect();
    let _ = writeln!(out, "\napplications:");
    out.push_str(&table(
        &[
            "PROTOCOL",
            "APPLICATION",
            "CLIENT",
            "WRITTEN",
            "READ",
            "REGISTERED (UTC)",
            "STATE",
        ],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_renders_protocols_hours_and_apps() {
        let m = serde_json::json!({
            "retention_seconds": 86400,
            "protocols": {"celeborn": {"applications": 1, "live": 0, "written_bytes": 2048, "read_bytes": 2048},
                          "uniffle": {"applications": 1, "live": 1, "written_bytes": 1024, "read_bytes": 0}},
            "hours": [{"start_unix_ms": 1764633600000u64,
                       "protocols": {"celeborn": {"pushed_bytes": 2048, "fetched_bytes": 2048},
                                     "uniffle": {"pushed_bytes": 1024, "fetched_bytes": 0}}}],
            "applications": [
                {"protocol": "uniffle", "id": "u-1", "client": "client 0.10.0", "written_bytes": 1024,
                 "read_bytes": 0, "registered_unix_ms": 1764633600000u64, "removed": null},
                {"protocol": "celeborn", "id": "c-1", "client": null, "written_bytes": 2048,
                 "read_bytes": 2048, "registered_unix_ms": 1764633600000u64,
                 "removed": {"reason": "unregistered", "unix_ms": 1764637200000u64}}]
        });
        let out = render_migration(&m);
        assert!(out.contains("removed in the last 1d"), "{out}");
        assert!(out.contains("2025-12-02 00:00"), "{out}");
        assert!(out.contains("unregistered 2025-12-02 01:00"), "{out}");
        let u = out
            .lines()
            .find(|l| l.starts_with("uniffle") && l.contains("u-1"))
            .unwrap();
        assert!(
            u.contains("client 0.10.0") && u.contains("1.0 KiB") && u.ends_with("live"),
            "{u}"
        );
        assert!(out.contains("CELEBORN PUSHED"), "{out}");
    }

    #[test]
    fn status_urls() {
        for (admin, url) in [
            (
                "http://127.0.0.1:19990",
                "http://127.0.0.1:19990/api/v1/status",
            ),
            (
                "http://127.0.0.1:19990/",
                "http://127.0.0.1:19990/api/v1/status",
            ),
            ("10.0.0.5:19990", "http://10.0.0.5:19990/api/v1/status"),
        ] {
            assert_eq!(admin_url(admin, "/api/v1/status").unwrap(), url);
        }
        assert!(admin_url("", "/api/v1/status").is_err());
        assert!(admin_url("ftp://x:1", "/api/v1/status").is_err());
    }

    #[test]
    fn tables_render_whatever_the_json_holds() {
        let s = serde_json::json!({
            "version": "0.1.0",
            "uptime_seconds": 3725,
            "node": {"id": "sy-1", "id_source": "config", "admin": "127.0.0.1:1",
                     "uniffle": null, "celeborn": {"master": "h:9097", "worker_id": "h:1:2:3:4"}},
            "storage": {"ready": true,
                        "memory": {"capacity": 1073741824u64, "used": 0, "reserved": 0, "flushing": 0},
                        "tiers": {"memory": 0, "disk": 2048, "cold": 0},
                        "disks": [{"dir": "/d1", "health": "healthy", "used_ratio": 0.5,
                                   "available_bytes": 10, "stored_bytes": 2048, "write_errors": 0}],
                        "cold": null,
                        "applications": [{"id": "uniffle/app-1", "client": "client 0.10.0",
                                          "written_bytes": 4096, "read_bytes": 1024,
                                          "shuffles": 2, "partitions": 8,
                                          "bytes": {"memory": 0, "disk": 2048, "cold": 0}, "idle_ms": 1500}]}
        });
        let status = render_status(&s);
        assert!(status.contains("sy-1 (config)"), "{status}");
        assert!(status.contains("1h 2m"), "{status}");
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("uniffle ") && l.ends_with(" off")),
            "{status}"
        );
        assert!(status.contains("/d1") && status.contains("50%"), "{status}");
        let apps = render_apps(&s);
        assert!(apps.starts_with("PROTOCOL  APPLICATION"), "{apps}");
        let row = apps.lines().nth(1).unwrap();
        assert!(row.starts_with("uniffle   app-1  "), "{row}");
        assert!(
            row.contains("client 0.10.0") && row.contains("4.0 KiB") && row.contains("2.0 KiB"),
            "{row}"
        );
        // An unexpected shape prints dashes, never panics.
        let odd = serde_json::json!({"storage": {"applications": "x"}});
        assert!(render_status(&odd).contains("node"));
        assert!(render_apps(&odd).contains("no applications"));
    }
}
