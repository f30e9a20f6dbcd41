//! The web status page at `/`, in a real browser: Debian's Chromium,
//! headless, driven through WebDriver (chromedriver). A running node holds
//! a live Uniffle application and has served traffic; the page must render
//! that application's row (with its protocol), the node, the throughput
//! chart's lines, and log no console errors.
//!
//! Browser: `$SWITCHYARD_CHROMEDRIVER` and `$SWITCHYARD_CHROMIUM` (which
//! must exist), else `chromedriver` and `chromium` on PATH (Debian's
//! chromium-driver and chromium; `.ci/install-chromium`). Without them the
//! test prints SKIPPED and passes; `.ci/test` installs them and runs this
//! test in a step of its own (the workspace run sets
//! SWITCHYARD_SKIP_BROWSER=1). `SWITCHYARD_SCREENSHOT=PATH` saves the
//! page as a PNG there (docs/status-page.png is one).

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterOptions, Node};
use common::http_request;
use serde_json::{json, Value};

fn tool(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{env}={} is not a file", p.display());
        return Some(p);
    }
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then(|| PathBuf::from(name))
}

/// chromedriver on a free loopback port, and one headless session.
struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(chromedriver: &PathBuf, chromium: &PathBuf) -> Browser {
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={}", addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !http_request(addr, "GET", "/status", None).is_ok_and(|(c, _)| c == 200) {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let chromium = std::fs::canonicalize(chromium)
            .ok()
            .or_else(|| which(chromium))
            .unwrap_or_else(|| chromium.clone());
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1100",
                         format!("--user-data-dir={}", profile.path().display())],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_string();
        b
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string());
        let (code, text) = http_request(self.addr, method, path, body.as_deref())
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(code, 200, "{method} {path}: {text}");
        v["value"].clone()
    }

    fn session(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Runs a script in the page; its return value.
    fn script(&self, js: &str) -> Value {
        self.session(
            "POST",
            "/execute/sync",
            Some(json!({"script": js, "args": []})),
        )
    }

    /// No console errors (a failed fetch, a CSP refusal, a script error).
    fn assert_no_console_errors(&self) {
        let logs = self.session("POST", "/se/log", Some(json!({"type": "browser"})));
        let errors: Vec<&Value> = logs
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .collect();
        assert!(errors.is_empty(), "console errors: {errors:?}");
    }

    fn wait_for(&self, what: &str, js: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.script(js);
            if !v.is_null() && v != json!(false) {
                return v;
            }
            assert!(Instant::now() < deadline, "page never showed {what}");
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = http_request(self.addr, "DELETE", &path, None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn which(name: &PathBuf) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Decodes standard base64 (WebDriver's screenshots).
fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (u32::from(value(c)) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..group.len()]);
    }
    out
}

/// A live Uniffle application with data on the node (not unregistered).
fn live_uniffle_app(node: &Node, app: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use switchyard_clients::uniffle::ClientBlock;
        let mut server = common::uniffle::shuffle_of_four(node, app, None).await;
        for p in 0..4 {
            let data = bytes::Bytes::from(vec![p as u8; 64 << 10]);
            let block = ClientBlock::new((p as i64) << 22, 0, data);
            server.send(app, 0, vec![(p, vec![block])]).await.unwrap();
        }
    });
}

/// chromedriver and chromium, or None (with the reason printed) when the
/// browser tests are skipped here.
fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    if std::env::var("SWITCHYARD_SKIP_BROWSER").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED: SWITCHYARD_SKIP_BROWSER=1 (.ci/test runs this test in a step of its own)"
        );
        return None;
    }
    let (Some(chromedriver), Some(chromium)) = (
        tool("SWITCHYARD_CHROMEDRIVER", "chromedriver"),
        tool("SWITCHYARD_CHROMIUM", "chromium"),
    ) else {
        eprintln!("SKIPPED: no chromium and chromedriver (apt-get install chromium chromium-driver, or .ci/install-chromium)");
        return None;
    };
    Some((chromedriver, chromium))
}

#[test]
fn status_page_renders_the_node_and_its_applications_in_chromium() {
    let Some((chromedriver, chromium)) = browser_tools() else {
        return;
    };
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "64MiB".into(),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    // Traffic for the chart (the bench's own application ends with it), then
    // an application that stays.
    let master = node.celeborn_master().to_string();
    if let Err(e) = switchyard_bench::run_args(["celeborn", "--master", &master, "--size", "64MiB"])
    {
        panic!("{e}");
    }
    let app = "status-page-app-1";
    live_uniffle_app(node, app);

    let browser = Browser::start(&chromedriver, &chromium);
    let url = format!("http://{}/", node.admin());
    browser.session("POST", "/url", Some(json!({ "url": url })));
    assert_eq!(browser.script("return document.title"), json!("Switchyard"));

    // The application's row, with its protocol and partitions.
    let row = browser.wait_for(
        "the application's row",
        &format!(
            "const r = document.querySelector('tr[data-app=\"{app}\"]'); \
             return r && Array.from(r.cells).map(c => c.textContent)"
        ),
    );
    let cells: Vec<&str> = row
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(cells[0], "uniffle", "{cells:?}");
    assert_eq!(cells[1], app, "{cells:?}");
    assert_eq!(cells[3], "256.0 KiB", "written: {cells:?}");
    assert_eq!(cells[5], "1", "one shuffle: {cells:?}");
    assert_eq!(cells[6], "4", "four partitions: {cells:?}");
    assert_eq!(cells[7], "256.0 KiB", "in memory: {cells:?}");

    // The node and its disk.
    let node_id = node.status()["node"]["id"].as_str().unwrap().to_string();
    let shown = browser.wait_for(
        "the node",
        "const r = document.querySelector('#nodes tr[data-node]'); return r && r.dataset.node",
    );
    assert_eq!(shown, json!(node_id));
    assert_eq!(
        browser.script("return document.querySelectorAll('#disks tbody tr').length"),
        json!(1)
    );
    assert_eq!(
        browser.script("return document.getElementById('ready').textContent"),
        json!("ready")
    );
    // A node that coordinates no fleet has no Fleet table.
    assert_eq!(
        browser.script("return document.getElementById('fleet-section').hidden"),
        json!(true)
    );

    // The throughput chart: the sampler runs every 5 s; after the bench the
    // Celeborn lines have risen above zero.
    browser.wait_for(
        "Celeborn throughput in the chart",
        "const l = document.querySelector('polyline[data-series=\"celeborn-pushed\"]'); \
         return l && l.getAttribute('points').split(' ').some(p => Number(p.split(',')[1]) < 190)",
    );

    if let Some(path) = std::env::var_os("SWITCHYARD_SCREENSHOT") {
        let png = browser.session("GET", "/screenshot", None);
        let png = base64(png.as_str().unwrap());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::write(&path, png).unwrap();
    }

    browser.assert_no_console_errors();
}

#[test]
fn status_page_lists_the_fleet_on_a_coordinator() {
    let Some((chromedriver, chromium)) = browser_tools() else {
        return;
    };
    let mut cluster = Cluster::start_with(
        2,
        ClusterOptions {
            memory: "64MiB".into(),
            coordinators: vec![1],
            warmup: "1s".into(),
            ..ClusterOptions::default()
        },
    );
    let ids: Vec<String> = (1..=2)
        .map(|i| {
            cluster.node(i).status()["node"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let browser = Browser::start(&chromedriver, &chromium);
    let url = format!("http://{}/", cluster.node(1).admin());
    browser.session("POST", "/url", Some(json!({ "url": url })));
    let rows = |want: &str| {
        format!(
            "const rows = Array.from(document.querySelectorAll('#fleet tr[data-node]')); \
             const states = rows.map(r => r.dataset.node + '=' + r.dataset.state).sort(); \
             return !document.getElementById('fleet-section').hidden && states.join(',') === '{want}' && states"
        )
    };
    let mut sorted = ids.clone();
    sorted.sort();
    let active = sorted
        .iter()
        .map(|id| format!("{id}=active"))
        .collect::<Vec<_>>()
        .join(",");
    browser.wait_for("both workers active in the Fleet table", &rows(&active));
    // Node 2's admin link points at its own page.
    let link = browser.script(&format!(
        "return document.querySelector('#fleet tr[data-node=\"{}\"] a').getAttribute('href')",
        ids[1]
    ));
    assert_eq!(link, json!(format!("http://{}/", cluster.node(2).admin())));

    // Killed, node 2 turns lost once its heartbeats stop for worker_timeout.
    cluster.kill(2);
    let lost = sorted
        .iter()
        .map(|id| {
            let state = if *id == ids[1] { "lost" } else { "active" };
            format!("{id}={state}")
        })
        .collect::<Vec<_>>()
        .join(",");
    browser.wait_for("node 2 lost in the Fleet table", &rows(&lost));

    browser.assert_no_console_errors();
}

/// The cells of the finished application's row once it shows `ended`.
fn finished_row(browser: &Browser, app: &str, ended: &str) -> Vec<String> {
    let row = browser.wait_for(
        &format!("{app} finished ({ended})"),
        &format!(
            "const r = document.querySelector('#finished tr[data-app=\"{app}\"]'); \
             return r && r.dataset.ended === '{ended}' && Array.from(r.cells).map(c => c.textContent)"
        ),
    );
    row.as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn status_page_lists_finished_applications_and_how_they_ended() {
    let Some((chromedriver, chromium)) = browser_tools() else {
        return;
    };
    // Short leases, so that the applications left behind end within the
    // test: Celeborn's (lost) and the store's default, Uniffle's (expired).
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "64MiB".into(),
            extra_toml: "[storage.apps]\nexpiry = \"4s\"\nexpiry_check_interval = \"1s\"\n\n\
                         [celeborn]\napp_timeout = \"4s\"\n"
                .into(),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let (master, coordinator) = (
        node.celeborn_master().to_string(),
        node.uniffle_coordinator().to_string(),
    );
    let bench = |args: &[&str]| {
        if let Err(e) = switchyard_bench::run_args(args) {
            panic!("switchyard-bench {args:?}: {e}");
        }
    };
    // Whole jobs through the Rust clients: written, read back, ended by
    // their clients (Uniffle unregisterApp, Celeborn ApplicationLost).
    let small = ["--size", "4MiB", "--mappers", "2", "--partitions", "4"];
    bench(
        &[
            &[
                "uniffle",
                "--coordinator",
                &coordinator,
                "--app",
                "done-uniffle",
            ][..],
            &small,
        ]
        .concat(),
    );
    bench(
        &[
            &["celeborn", "--master", &master, "--app", "done-celeborn"][..],
            &small,
        ]
        .concat(),
    );
    // Left behind: the lease runs out.
    bench(
        &[
            &[
                "celeborn",
                "--master",
                &master,
                "--app",
                "left-celeborn",
                "--keep-app",
            ][..],
            &small,
        ]
        .concat(),
    );
    live_uniffle_app(node, "left-uniffle");

    let browser = Browser::start(&chromedriver, &chromium);
    let url = format!("http://{}/", node.admin());
    browser.session("POST", "/url", Some(json!({ "url": url })));

    // protocol, application, client, written, read, duration, peak memory,
    // ended, when.
    for (app, protocol, ended, read) in [
        ("done-uniffle", "uniffle", "unregistered", true),
        ("done-celeborn", "celeborn", "unregistered", true),
        ("left-celeborn", "celeborn", "lost", true),
        ("left-uniffle", "uniffle", "expired", false),
    ] {
        let cells = finished_row(&browser, app, ended);
        assert_eq!(cells[0], protocol, "{app}: {cells:?}");
        assert_eq!(cells[1], app, "{cells:?}");
        let written = if app == "left-uniffle" {
            "256.0 KiB"
        } else {
            "4.0 MiB"
        };
        assert_eq!(cells[3], written, "written: {cells:?}");
        if read {
            assert_eq!(cells[4], "4.0 MiB", "read back: {cells:?}");
        }
        assert_ne!(cells[6], "0 B", "peak memory: {cells:?}");
        assert_eq!(cells[7], ended, "{cells:?}");
    }
    // The live table forgot them; the JSON behind the page has the figures.
    assert_eq!(
        browser.script("return document.querySelectorAll('#apps tr[data-app]').length"),
        json!(0)
    );
    let (code, body) = node.get("/api/v1/apps").unwrap();
    assert_eq!(code, 200, "{body}");
    let apps: Value = serde_json::from_str(&body).unwrap();
    let left = apps["finished"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "left-uniffle")
        .unwrap_or_else(|| panic!("{apps}"));
    assert_eq!(left["peak_memory_bytes"], json!(256 << 10), "{left}");
    assert!(left["duration_ms"].as_u64().unwrap() >= 4000, "{left}");

    browser.assert_no_console_errors();
}
