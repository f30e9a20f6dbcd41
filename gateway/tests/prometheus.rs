//! A real Prometheus scrapes a running `switchyard serve` while both
//! protocols' clients (and Flink's) push and read through it. Asserted
//! through Prometheus' own HTTP API: the traffic counters rose by exactly
//! what the workload sent, and every PromQL expression of the Grafana
//! dashboard (`deploy/grafana/switchyard.json`) is valid and names only
//! metrics that exist. Prometheus also loads the recording rules for the
//! upstream dashboards (`deploy/prometheus/upstream-dashboards.rules.yml`),
//! and every mapped upstream panel query
//! (`tests/fixtures/upstream-panel-queries.json`) must return data, under
//! both protocols' traffic, a Flink job and spills to a cold tier on S3 (an
//! s3s-fs server in this process, on 127.0.0.1).
//!
//! Prometheus: `$SWITCHYARD_PROMETHEUS` (which must exist), else
//! `prometheus` on PATH (Debian's package; `.ci/install-prometheus`).
//! Without it the test prints SKIPPED and passes; `.ci/test` installs it and
//! runs this test in a step of its own (the workspace run sets
//! SWITCHYARD_SKIP_PROMETHEUS=1).

mod common;

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, ClusterOptions, Node};
use common::http_get;
use serde_json::Value;

fn find_prometheus() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SWITCHYARD_PROMETHEUS").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "SWITCHYARD_PROMETHEUS={} is not a file",
            p.display()
        );
        return Some(p);
    }
    Command::new("prometheus")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then(|| PathBuf::from("prometheus"))
}

const S3_ACCESS_KEY: &str = "switchyard-test";
const S3_SECRET_KEY: &str = "switchyard-test-secret";
const S3_BUCKET: &str = "shuffle";

/// An S3 server (s3s-fs: each object a file below `root`) on a free
/// loopback port, served by a runtime of its own until dropped.
struct S3Server {
    addr: SocketAddr,
    puts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _root: tempfile::TempDir,
    _runtime: tokio::runtime::Runtime,
}

impl S3Server {
    fn start() -> S3Server {
        use hyper_util::rt::{TokioExecutor, TokioIo};
        use hyper_util::server::conn::auto::Builder;
        let root = tempfile::tempdir().unwrap();
        // s3s-fs keeps a bucket as a directory below its root.
        std::fs::create_dir_all(root.path().join(S3_BUCKET)).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let service = {
            let fs = s3s_fs::FileSystem::new(root.path()).unwrap();
            let mut b = s3s::service::S3ServiceBuilder::new(fs);
            b.set_auth(s3s::auth::SimpleAuth::from_single(
                S3_ACCESS_KEY,
                S3_SECRET_KEY,
            ));
            b.build()
        };
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let puts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = puts.clone();
        runtime.spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    continue;
                };
                let (service, puts) = (service.clone(), counted.clone());
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        if req.method() == hyper::Method::PUT {
                            puts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        let service = service.clone();
                        async move { hyper::service::Service::call(&service, req).await }
                    },
                );
                tokio::spawn(async move {
                    let _ = Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(socket), svc)
                        .await;
                });
            }
        });
        S3Server {
            addr,
            puts,
            _root: root,
            _runtime: runtime,
        }
    }

    /// The node's `[storage.cold]`: this bucket, partitions past
    /// `huge_partition_threshold` go there.
    fn cold_toml(&self, huge_partition_threshold: &str) -> String {
        format!(
            "[storage.cold]\nservice = \"s3\"\nbucket = \"{S3_BUCKET}\"\n\
             endpoint = \"http://{}\"\naccess_key_id = \"{S3_ACCESS_KEY}\"\n\
             secret_access_key = \"{S3_SECRET_KEY}\"\n\
             huge_partition_threshold = \"{huge_partition_threshold}\"\n",
            self.addr
        )
    }

    /// PUT requests (objects and multipart parts) the server answered.
    fn puts(&self) -> usize {
        self.puts.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The recording rules for the upstream Celeborn and Uniffle dashboards.
fn upstream_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/upstream-dashboards.rules.yml")
}

/// Prometheus on a free loopback port, scraping `target` every second and
/// evaluating the upstream dashboards' recording rules.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(bin: &Path, target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files: ['{}']\n\
                 scrape_configs:\n  - job_name: switchyard\n    static_configs:\n      - targets: ['{target}']\n",
                upstream_rules().display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http_get(addr, "/-/ready").is_ok_and(|(code, _)| code == 200) {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready in 60 s:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    fn api(&self, path: &str) -> Value {
        let (code, body) = http_get(self.addr, path).unwrap();
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e} in {body:?}"));
        assert_eq!(code, 200, "{path}: {body}");
        assert_eq!(v["status"], "success", "{path}: {body}");
        v["data"].clone()
    }

    /// An instant query's vector: (labels, value) per series.
    fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(promql)));
        data["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                let v = r["value"][1].as_str().unwrap().parse().unwrap();
                (r["metric"].clone(), v)
            })
            .collect()
    }

    /// Value of `sum by (protocol) (metric)` for one protocol (0 if absent).
    fn by_protocol(&self, metric: &str, protocol: &str) -> f64 {
        self.query(&format!("sum by (protocol) ({metric})"))
            .into_iter()
            .find(|(m, _)| m["protocol"] == protocol)
            .map_or(0.0, |(_, v)| v)
    }

    /// Waits until Prometheus has scraped everything the node has now: two
    /// scrapes after this call.
    fn settle(&self) {
        let first = self.scrapes();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.scrapes() < first + 2.0 {
            assert!(Instant::now() < deadline, "no scrapes:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn scrapes(&self) -> f64 {
        self.query("sum(count_over_time(up{job=\"switchyard\"}[10m]))")
            .first()
            .map_or(0.0, |(_, v)| *v)
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs a `switchyard-bench` command line in process.
fn bench(args: &[&str]) {
    if let Err(e) = switchyard_bench::run_args(args) {
        panic!("switchyard-bench {args:?} failed: {e}");
    }
}

/// Requests that fail, one per protocol: counted as errors by status.
fn provoke_errors(node: &Node) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use switchyard_clients::uniffle::{ClientBlock, Coordinator, ShuffleServer, Transport};
        let mut coordinator = Coordinator::connect(&node.uniffle_coordinator().to_string())
            .await
            .unwrap();
        let assigned = coordinator
            .assignments("no-such-app", 0, 4, Transport::Grpc)
            .await
            .unwrap();
        let mut server = ShuffleServer::connect(&assigned[0].server[0], Transport::Grpc)
            .await
            .unwrap();
        let block = ClientBlock::new(1, 0, bytes::Bytes::from_static(b"nobody's"));
        assert!(server
            .send("no-such-app", 0, vec![(0, vec![block])])
            .await
            .is_err());
        let fetch = switchyard_clients::celeborn::Connection::connect(node.addr(9102))
            .await
            .unwrap();
        let open = switchyard_celeborn::TransportMessage::new(
            switchyard_celeborn::proto::MessageType::OpenStream,
            &switchyard_celeborn::proto::PbOpenStream {
                shuffle_key: "no-such-app-0".into(),
                file_name: "0-0-0".into(),
                start_index: 0,
                end_index: i32::MAX,
                ..Default::default()
            },
        );
        assert!(fetch.data_rpc(&open).await.is_err());
    });
}

/// Every `switchyard_*` name in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("switchyard_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn prometheus_sees_the_traffic_and_the_dashboard_queries_work() {
    if std::env::var("SWITCHYARD_SKIP_PROMETHEUS").is_ok_and(|v| v == "1") {
        eprintln!(
            "SKIPPED: SWITCHYARD_SKIP_PROMETHEUS=1 (.ci/test runs this test in a step of its own)"
        );
        return;
    }
    let Some(prometheus_bin) = find_prometheus() else {
        eprintln!("SKIPPED: no prometheus (apt-get install prometheus, or .ci/install-prometheus)");
        return;
    };
    let s3 = S3Server::start();
    let cluster = Cluster::start_with(
        1,
        ClusterOptions {
            memory: "32MiB".into(),
            extra_toml: s3.cold_toml("512KiB"),
            ..ClusterOptions::default()
        },
    );
    let node = cluster.node(1);
    let prometheus = Prometheus::start(&prometheus_bin, node.admin());
    prometheus.settle();
    let up = prometheus.query("up{job=\"switchyard\"}");
    assert_eq!(up.len(), 1, "{up:?}");
    assert_eq!(up[0].1, 1.0, "the node is scraped: {up:?}");
    // Every series carries the node id (the fixture's nodes have generated ids).
    let info = prometheus.query("switchyard_build_info");
    assert_eq!(info.len(), 1, "{info:?}");
    let node_id = node.status()["node"]["id"].as_str().unwrap().to_string();
    assert_eq!(info[0].0["node"], node_id.as_str(), "{info:?}");

    // The workload: 4x the budget from 16 clients of both protocols at once
    // (memory waits, spills, partitions past the huge threshold going
    // cold), then Flink's map partitions and credit reads.
    let (master, coordinator, admin) = (
        node.celeborn_master().to_string(),
        node.uniffle_coordinator().to_string(),
        node.admin().to_string(),
    );
    bench(&[
        "overload",
        "--admin",
        &admin,
        "--celeborn-master",
        &master,
        "--uniffle-coordinator",
        &coordinator,
        "--clients",
        "16",
        "--times-budget",
        "4",
    ]);
    bench(&[
        "flink",
        "--master",
        &master,
        "--size",
        "4MiB",
        "--mappers",
        "2",
        "--sub-partitions",
        "4",
        "--regions",
        "2",
    ]);
    provoke_errors(node);
    prometheus.settle();

    // What the overload bench sent: 4 x 32 MiB, half per protocol; Celeborn
    // batches of 64 KiB behind a 16-byte header each, Uniffle blocks of
    // 256 KiB.
    let per_protocol = (4 * (32u64 << 20) / 2) as f64;
    let celeborn_batches = per_protocol / 65536.0;
    let celeborn_wire = per_protocol + 16.0 * celeborn_batches;
    let pushed = |p| prometheus.by_protocol("switchyard_pushed_bytes_total", p);
    let fetched = |p| prometheus.by_protocol("switchyard_fetched_bytes_total", p);
    assert_eq!(pushed("celeborn"), celeborn_wire, "celeborn pushed");
    assert_eq!(fetched("celeborn"), celeborn_wire, "celeborn fetched");
    assert_eq!(pushed("uniffle"), per_protocol, "uniffle pushed");
    // A Uniffle reader may read a block from memory and again from disk
    // (the client drops the second copy): at least everything, not 3x.
    let u = fetched("uniffle");
    assert!(
        u >= per_protocol && u < 3.0 * per_protocol,
        "uniffle fetched {u} of {per_protocol}"
    );
    // Flink: 4 MiB of records in; every sub-partition read back once.
    let (fp, ff) = (pushed("flink"), fetched("flink"));
    assert!(fp >= (4u64 << 20) as f64, "flink pushed {fp}");
    assert_eq!(ff, fp, "flink fetched what it pushed");
    let requests = |sel: &str| {
        prometheus
            .query(&format!("sum(switchyard_requests_total{{{sel}}})"))
            .first()
            .map_or(0.0, |(_, v)| *v)
    };
    assert_eq!(
        requests("protocol=\"celeborn\",op=\"push_data\",outcome=\"ok\""),
        celeborn_batches,
        "one PushData per batch"
    );
    // The unknown application's requireBuffer, refused.
    assert!(requests("protocol=\"uniffle\",op=\"require_buffer\",outcome=\"error\"") >= 1.0);
    assert!(
        prometheus
            .query("sum(switchyard_celeborn_errors_total{port=\"fetch\"})")
            .first()
            .map_or(0.0, |(_, v)| *v)
            >= 1.0
    );

    // Partitions past 512 KiB went to the S3 cold tier, counted as such.
    let value = |promql: &str| prometheus.query(promql).first().map_or(0.0, |(_, v)| *v);
    assert!(
        value("sum(switchyard_spill_total{tier=\"cold\",service=\"s3\"})") >= 1.0,
        "no flush to the S3 cold tier was counted"
    );
    assert!(value("sum(switchyard_partitions_evicted_total{tier=\"cold\"})") >= 1.0);
    assert!(s3.puts() > 0, "the S3 server got no PUT");

    // The counts behind the upstream panels, against what the workload did.
    // Every chunk's size is in the histogram: its sum is the bytes fetched.
    assert_eq!(
        value("sum(switchyard_celeborn_chunk_bytes_sum)"),
        fetched("celeborn"),
        "chunk sizes add up to the Celeborn bytes fetched"
    );
    // The 64 reduce partitions of the overload's Celeborn job, each
    // reserved and committed once (a revive would add, never remove).
    assert!(value("sum(switchyard_celeborn_slots_allocated_total)") >= 64.0);
    assert!(value("sum(switchyard_partition_file_bytes_count)") >= 64.0);
    assert!(value("sum(switchyard_partition_file_bytes_sum)") >= celeborn_wire);
    assert!(value("sum(switchyard_celeborn_commit_failures_total)") == 0.0);
    // Streams: Celeborn's opened, the unknown application's refused, and
    // the Flink job's 8 credit streams; its 2 map tasks' handshakes.
    assert!(requests("protocol=\"celeborn\",op=\"open_stream\",outcome=\"ok\"") >= 64.0);
    assert!(requests("protocol=\"celeborn\",op=\"open_stream\",outcome=\"error\"") >= 1.0);
    assert!(requests("protocol=\"flink\",op=\"open_stream\",outcome=\"ok\"") >= 8.0);
    assert!(requests("protocol=\"flink\",op=\"handshake\",outcome=\"ok\"") >= 2.0);
    // A shuffle each: the overload's two jobs and the Flink job.
    assert!(value("sum(switchyard_shuffles_created_total)") >= 3.0);

    // The dashboard: every expression runs, every metric it names exists.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/switchyard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let top = dashboard["panels"].as_array().unwrap();
    // Rows hold no queries; a collapsed one keeps its panels inside it.
    let panels: Vec<&Value> = top
        .iter()
        .flat_map(|p| match p["type"].as_str() {
            Some("row") => p["panels"].as_array().into_iter().flatten().collect(),
            _ => vec![p],
        })
        .collect();
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut names = BTreeSet::new();
    let mut exprs = 0;
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            // Grafana's variables, as Grafana fills them in.
            let promql = expr
                .replace("$__rate_interval", "1m")
                .replace("$node", ".*");
            let data = prometheus.api(&format!("/api/v1/query?query={}", encode(&promql)));
            assert_eq!(data["resultType"], "vector", "{promql}");
            names.extend(metric_names(expr));
            exprs += 1;
        }
    }
    let mut missing = Vec::new();
    for name in &names {
        let series = prometheus.api(&format!(
            "/api/v1/series?match[]={}",
            encode(&format!("{{__name__=\"{name}\"}}"))
        ));
        // A histogram of waits exists only once an append waited, which
        // the overload may or may not cause on a given run.
        let event_only = name.starts_with("switchyard_memory_wait_seconds");
        // Only fleet coordinators hold a directory of workers.
        let fleet_only = name == "switchyard_fleet_workers";
        if !event_only && !fleet_only && series.as_array().is_none_or(|s| s.is_empty()) {
            missing.push(name.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "the dashboard names metrics Prometheus never saw: {missing:?}"
    );
    eprintln!(
        "dashboard: {exprs} expressions over {} metrics checked",
        names.len()
    );

    // The upstream panels' times are rates over the last minutes: a
    // series must change after Prometheus first saw it, as it does under
    // steady traffic. (The workload above may have pushed everything
    // before the first scrape that saw its push series, the Flink job its
    // handshakes and regions, the spills their S3 flushes.)
    // Two partitions of 10 MiB: each flushes 8 MiB (the single-buffer
    // threshold) to a disk, then, past 512 KiB, the rest to S3 at commit.
    bench(&[
        "celeborn",
        "--master",
        &master,
        "--size",
        "20MiB",
        "--partitions",
        "2",
    ]);
    bench(&[
        "flink",
        "--master",
        &master,
        "--size",
        "1MiB",
        "--mappers",
        "2",
        "--sub-partitions",
        "2",
        "--regions",
        "1",
    ]);
    prometheus.settle();
    check_promtool(&prometheus_bin);
    upstream_panels_return_data(&prometheus);
}

/// `promtool check rules` on the upstream dashboards' rules, when Debian's
/// promtool is installed beside prometheus (or on PATH).
fn check_promtool(prometheus_bin: &Path) {
    let beside = prometheus_bin.with_file_name("promtool");
    let promtool = if beside.is_file() {
        beside
    } else {
        PathBuf::from("promtool")
    };
    match Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(upstream_rules())
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "promtool check rules: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("promtool not run ({}: {e})", promtool.display()),
    }
}

/// The Celeborn v0.7.0 panel queries the rules must light: at least this
/// many of its 194 return data here.
const CELEBORN_MAPPED_MIN: usize = 120;

/// Every mapped upstream panel query, as Grafana sends it with every
/// instance selected, returns a number for this node; every unmapped one
/// has its reason, in the fixture and in the rules file's header.
fn upstream_panels_return_data(prometheus: &Prometheus) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream-panel-queries.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let header: String = std::fs::read_to_string(upstream_rules())
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with('#') || l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let mut queries = Vec::new();
    let (mut celeborn_total, mut celeborn_mapped, mut untested) = (0, 0, 0);
    for dashboard in ["celeborn", "celeborn_v0_6_3", "uniffle"] {
        let list = fixture[dashboard]["queries"].as_array().unwrap();
        assert!(!list.is_empty(), "{dashboard}: no queries");
        for q in list {
            let panel = q["panel"].as_str().unwrap();
            if dashboard == "celeborn" {
                celeborn_total += 1;
            }
            if let Some(why) = q.get("unmapped") {
                assert!(
                    why.as_str().is_some_and(|w| w.len() > 10),
                    "{dashboard} {panel}: unmapped without a reason"
                );
                // The header names every dark panel, by its metric's name
                // less the metrics_ prefix and the Value/Count/... suffix.
                let name = upstream_name(q["expr"].as_str().unwrap());
                assert!(
                    header.contains(&name)
                        || name.starts_with("push_")
                        || name.starts_with("fetch_")
                        || name.starts_with("replicate_"),
                    "{dashboard} {panel}: unmapped, but {name} is not in the rules file's header"
                );
                continue;
            }
            if q.get("untested").is_some() {
                untested += 1;
                continue;
            }
            if dashboard == "celeborn" {
                celeborn_mapped += 1;
            }
            let promql = q["expr"].as_str().unwrap().replace("${instance}", ".*");
            queries.push((format!("{dashboard} {panel}"), promql));
        }
    }
    assert_eq!(
        celeborn_total, 194,
        "the v0.7.0 dashboard has 194 panel queries"
    );
    // The rules run every second: the first evaluation after the last
    // scrape may still be ahead.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut empty = Vec::new();
        for (panel, promql) in &queries {
            let result = prometheus.query(promql);
            if result.is_empty() || result.iter().any(|(_, v)| !v.is_finite()) {
                empty.push(format!("{panel}: {promql} = {result:?}"));
            }
        }
        if empty.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "upstream panel queries without data:\n{}",
            empty.join("\n")
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "upstream dashboards: {celeborn_mapped} of {celeborn_total} Celeborn v0.7.0 panel queries \
         mapped and returning data ({untested} more mapped, fed by what this node does not run); \
         {} panel queries return data in all",
        queries.len()
    );
    assert!(
        celeborn_mapped >= CELEBORN_MAPPED_MIN,
        "{celeborn_mapped} of {celeborn_total} Celeborn v0.7.0 panel queries mapped"
    );
}

/// `metrics_X_Value{...}` (or a function of it): `X`.
fn upstream_name(expr: &str) -> String {
    let start = expr.find("metrics_").expect("an upstream series") + "metrics_".len();
    let name: String = expr[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    for suffix in ["_Value", "_Count", "_Mean", "_Max", "_99thPercentile"] {
        if let Some(base) = name.strip_suffix(suffix) {
            return base.to_string();
        }
    }
    name
}
