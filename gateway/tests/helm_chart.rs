//! The Helm chart in deploy/helm/switchyard: `helm lint`, `helm template`
//! with the default values and with variants, and the switchyard.toml that
//! the ConfigMap renders must pass `switchyard check-config` (the real
//! binary), with the environment the pods get.
//!
//! helm: `$SWITCHYARD_HELM` (which must exist), else `helm` on PATH, else
//! `~/go/bin/helm`, where `.ci/install-helm` builds it. Without helm the test
//! prints SKIPPED and passes. `.ci/test` builds helm in the background while
//! the workspace tests run (with SWITCHYARD_SKIP_HELM=1), then runs this test
//! on its own with SWITCHYARD_HELM set: `cargo test -p switchyard --test helm_chart`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::clear_switchyard_env;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/switchyard")
}

fn find_helm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SWITCHYARD_HELM").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "SWITCHYARD_HELM={} is not a file", p.display());
        return Some(p);
    }
    let runs = |p: &Path| {
        Command::new(p)
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs(Path::new("helm")) {
        return Some(PathBuf::from("helm"));
    }
    let home = std::env::var_os("HOME")?;
    let cached = Path::new(&home).join("go/bin/helm");
    runs(&cached).then_some(cached)
}

fn helm(helm: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(helm)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run helm");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("helm {args:?} failed:\n{stdout}\n{stderr}"))
    }
}

/// The `switchyard.toml` key of the chart's ConfigMap in a multi-document
/// rendering: the lines of the `|` block scalar, unindented.
fn rendered_toml(manifests: &str) -> String {
    let doc = manifests
        .split("\n---")
        .find(|d| d.contains("kind: ConfigMap") && d.contains("switchyard.toml: |"))
        .unwrap_or_else(|| panic!("no ConfigMap with switchyard.toml in:\n{manifests}"));
    let mut lines = doc
        .lines()
        .skip_while(|l| l.trim() != "switchyard.toml: |")
        .skip(1);
    let mut out = String::new();
    let mut indent = None;
    for line in lines.by_ref() {
        if line.trim().is_empty() {
            out.push('\n');
            continue;
        }
        let this = line.len() - line.trim_start().len();
        let indent = *indent.get_or_insert(this);
        if this < indent {
            break;
        }
        out.push_str(&line[indent..]);
        out.push('\n');
    }
    assert!(out.contains("[storage.disks]"), "odd block:\n{out}");
    out
}

/// `check-config` on `toml` with a pod's environment: (success, stdout, stderr).
fn check_config(
    dir: &Path,
    name: &str,
    toml: &str,
    env: &[(&str, &str)],
) -> (bool, String, String) {
    let path = dir.join(name);
    std::fs::write(&path, toml).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("check-config").arg(&path).stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run switchyard");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What SWITCHYARD_* a worker pod and a coordinator pod get (helpers.tpl).
const WORKER_ENV: &[(&str, &str)] = &[
    ("SWITCHYARD_NODE_ID", "sy-switchyard-worker-0"),
    ("SWITCHYARD_HOST", "10.1.2.3"),
    ("SWITCHYARD_ROLES", "worker"),
    ("SWITCHYARD_CLUSTER_SECRET", "from-the-secret"),
    ("SWITCHYARD_ADMIN_TOKEN", "from-the-secret-too"),
];
const COORDINATOR_ENV: &[(&str, &str)] = &[
    ("SWITCHYARD_NODE_ID", "sy-switchyard-coordinator-1"),
    ("SWITCHYARD_HOST", "10.1.2.4"),
    ("SWITCHYARD_ROLES", "coordinator,worker"),
    ("SWITCHYARD_CLUSTER_SECRET", "from-the-secret"),
    ("SWITCHYARD_ADMIN_TOKEN", "from-the-secret-too"),
    ("SWITCHYARD_DATA_DIRS", "/var/lib/switchyard/data"),
];

fn kinds(manifests: &str) -> Vec<String> {
    manifests
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .map(|k| k.trim().to_string())
        .collect()
}

#[test]
fn chart_lints_renders_and_its_config_passes_check_config() {
    if std::env::var("SWITCHYARD_SKIP_HELM").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: SWITCHYARD_SKIP_HELM=1 (.ci/test runs this test in a step of its own)");
        return;
    }
    let Some(helm_bin) = find_helm() else {
        eprintln!("SKIPPED: no helm (run .ci/install-helm to build it into ~/go/bin)");
        return;
    };
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();

    helm(&helm_bin, &["lint", chart]).unwrap();

    // The default values.
    let manifests = helm(&helm_bin, &["template", "sy", chart]).unwrap();
    let k = kinds(&manifests);
    for want in [
        "ConfigMap",
        "StatefulSet",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ] {
        assert!(k.iter().any(|x| x == want), "no {want} in {k:?}");
    }
    assert_eq!(k.iter().filter(|x| *x == "StatefulSet").count(), 2, "{k:?}");
    assert!(!k.iter().any(|x| x == "ServiceMonitor"), "{k:?}");
    for want in [
        "replicas: 2",
        "volumeClaimTemplates:",
        "podAntiAffinity:",
        "preStop:",
        "path: /readyz",
        "name: uniffle-coord, port: 19999",
        "name: celeborn-master, port: 9097",
    ] {
        assert!(manifests.contains(want), "{want:?} not rendered");
    }
    let toml = rendered_toml(&manifests);
    for (role, env) in [("worker", WORKER_ENV), ("coordinator", COORDINATOR_ENV)] {
        let (ok, stdout, stderr) = check_config(dir.path(), "default.toml", &toml, env);
        assert!(ok, "{role}: the rendered config fails:\n{toml}\n{stderr}");
        assert!(
            stdout.contains("\"10.1.2."),
            "{role}: listeners not on the pod IP:\n{stdout}"
        );
        assert!(stdout.contains("listen = \"0.0.0.0:19990\""), "{stdout}");
        assert!(
            stdout.contains(
                "sy-switchyard-coordinator-1.sy-switchyard-coordinator-headless.default.svc:19980"
            ),
            "{role}: no coordinator list:\n{stdout}"
        );
        let roles = if role == "worker" {
            "roles = [\"worker\"]"
        } else {
            "roles = [\n    \"coordinator\","
        };
        assert!(
            stdout.contains(roles) || stdout.contains(&roles.replace("\n    ", "")),
            "{role}: roles:\n{stdout}"
        );
        assert!(
            stdout.contains("secret = \"<redacted>\""),
            "{role}: {stdout}"
        );
    }
    // Without the Secret's value, the rendered config is refused by name.
    let (ok, _, stderr) = check_config(dir.path(), "nosecret.toml", &toml, &WORKER_ENV[..3]);
    assert!(!ok && stderr.contains("cluster.secret"), "{stderr}");
    for want in [
        "kind: Secret",
        "switchyard ctl decommission",
        "name: SWITCHYARD_ROLES",
    ] {
        assert!(manifests.contains(want), "{want:?} not rendered");
    }

    // Variants: two disks, a cold tier from extraToml, the ServiceMonitor,
    // hard anti-affinity, Celeborn off.
    let values = dir.path().join("variant.yaml");
    std::fs::write(
        &values,
        r#"
config:
  log: {level: "info,switchyard_storage=debug", format: text}
  storage:
    memory: {capacity: "6 GiB", high_watermark: 0.8, low_watermark: 0.3}
    disks: {capacity: "500 GiB"}
  uniffle: {tags: [ssd, rack-1]}
  celeborn: {enabled: false}
  extraToml: |
    [storage.cold]
    service = "fs"
    root = "/mnt/cold"
worker:
  replicas: 5
  podAntiAffinity: hard
  dataDirs:
    - {name: data0, mountPath: /data/0, size: 1Ti}
    - {name: data1, mountPath: /data/1, size: 1Ti, storageClassName: local-ssd}
serviceMonitor: {enabled: true}
"#,
    )
    .unwrap();
    let values = values.to_str().unwrap();
    helm(&helm_bin, &["lint", chart, "-f", values]).unwrap();
    let manifests = helm(&helm_bin, &["template", "sy", chart, "-f", values]).unwrap();
    assert!(kinds(&manifests).iter().any(|x| x == "ServiceMonitor"));
    assert!(manifests.contains("requiredDuringSchedulingIgnoredDuringExecution"));
    assert!(manifests.contains("storageClassName: \"local-ssd\""));
    assert!(
        !manifests.contains("celeborn-master"),
        "Celeborn ports while off"
    );
    let toml = rendered_toml(&manifests);
    assert!(toml.contains("dirs = [\"/data/0\", \"/data/1\"]"), "{toml}");
    let (ok, stdout, stderr) = check_config(dir.path(), "variant.toml", &toml, WORKER_ENV);
    assert!(ok, "the rendered config fails:\n{toml}\n{stderr}");
    for want in [
        "[storage.cold]",
        "root = \"/mnt/cold\"",
        "capacity = \"6.0 GiB\"",
        "high_watermark = 0.8",
        "\"ssd\",\n    \"rack-1\",",
    ] {
        assert!(
            stdout.contains(want),
            "{want:?} not in the effective config:\n{stdout}"
        );
    }

    // A bad value renders, and check-config names its key.
    let manifests = helm(
        &helm_bin,
        &[
            "template",
            "sy",
            chart,
            "--set",
            "config.storage.memory.capacity=lots",
        ],
    )
    .unwrap();
    let (ok, _, stderr) = check_config(
        dir.path(),
        "bad.toml",
        &rendered_toml(&manifests),
        WORKER_ENV,
    );
    assert!(!ok);
    assert!(stderr.contains("storage.memory.capacity"), "{stderr}");

    // The dashboard ConfigMap carries the repository's dashboard, as is.
    let manifests = helm(
        &helm_bin,
        &["template", "sy", chart, "--set", "dashboard.enabled=true"],
    )
    .unwrap();
    let doc = manifests
        .split("\n---")
        .find(|d| d.contains("name: sy-switchyard-dashboard"))
        .expect("a dashboard ConfigMap");
    assert!(doc.contains("grafana_dashboard: \"1\""), "{doc}");
    let json: String = doc
        .split_once("switchyard.json: |\n")
        .expect("the dashboard's key")
        .1
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    let rendered: serde_json::Value = serde_json::from_str(&json).unwrap();
    let repo: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/switchyard.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(rendered, repo);
}
