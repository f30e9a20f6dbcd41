//! The operator's commands, run as the built binary: `switchyard check-config`
//! on the reference config and on broken ones, and `switchyard ctl` against a
//! running `switchyard serve` (and against nothing).

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{clear_switchyard_env, http_get};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn reference_config() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/switchyard.toml")
}

fn switchyard(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run switchyard")
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// `check-config PATH` in a fresh working directory, which must stay empty.
fn check(path: &Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("check-config")
        .arg(path)
        .current_dir(cwd.path())
        .stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run switchyard");
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().collect();
    assert!(left.is_empty(), "check-config wrote {left:?}");
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn check_config_passes_the_reference_file_and_prints_it() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = check(&reference_config(), &[]);
    assert!(ok, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("is valid"), "{stderr}");
    for line in [
        "[admin]",
        "listen = \"127.0.0.1:19990\"",
        "[storage.memory]",
        "coordinator_listen = \"127.0.0.1:19999\"",
        "master_listen = \"127.0.0.1:9097\"",
        "no SWITCHYARD_* overrides set",
    ] {
        assert!(stdout.contains(line), "{line:?} missing in:\n{stdout}");
    }
    // The output is itself a config that passes.
    let printed = dir.path().join("printed.toml");
    std::fs::write(&printed, &stdout).unwrap();
    let (ok, again, stderr) = check(&printed, &[]);
    assert!(ok, "{stderr}");
    assert_eq!(
        again.lines().skip(2).collect::<Vec<_>>(),
        stdout.lines().skip(2).collect::<Vec<_>>()
    );
}

/// The container image's own config (deploy/docker/switchyard.toml), as the
/// image runs it: SWITCHYARD_HOST set to the container's IP.
#[test]
fn check_config_passes_the_image_config() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/docker/switchyard.toml");
    let (ok, stdout, stderr) = check(&path, &[("SWITCHYARD_HOST", "172.17.0.2")]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("listen = \"0.0.0.0:19990\""), "{stdout}");
    assert!(stdout.contains("\"172.17.0.2:9097\""), "{stdout}");
    assert!(stdout.contains("/var/lib/switchyard/data"), "{stdout}");
}

#[test]
fn check_config_applies_env_overrides_and_redacts_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s3.toml");
    std::fs::write(
        &path,
        "[storage.cold]\nservice = \"s3\"\nbucket = \"shuffle\"\naccess_key_id = \"AKIAEXAMPLE\"\nsecret_access_key = \"hunter2-very-secret\"\n",
    )
    .unwrap();
    let data = dir.path().join("never-created");
    let (ok, stdout, stderr) = check(
        &path,
        &[
            ("SWITCHYARD_HOST", "127.0.0.9"),
            ("SWITCHYARD_MEMORY_CAPACITY", "3GiB"),
            ("SWITCHYARD_DATA_DIRS", data.to_str().unwrap()),
        ],
    );
    assert!(ok, "{stderr}");
    assert!(!stdout.contains("hunter2"), "secret printed:\n{stdout}");
    assert!(
        stdout.contains("secret_access_key = \"<redacted>\""),
        "{stdout}"
    );
    assert!(stdout.contains("AKIAEXAMPLE"), "{stdout}");
    assert!(stdout.contains("capacity = \"3.0 GiB\""), "{stdout}");
    assert!(stdout.contains("\"127.0.0.9:19999\""), "{stdout}");
    assert!(stdout.contains("SWITCHYARD_HOST"), "{stdout}");
    assert!(!data.exists(), "check-config created the data directory");
}

/// check-config prints what a container running the node needs: the one
/// memory number (the store's share and the network's inside it) plus the
/// read budget, the caches and the process.
#[test]
fn check_config_prints_the_container_memory_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.toml");
    let memory = "[storage.memory]\ncapacity = \"2GiB\"\nread_capacity = \"512MiB\"\nindex_cache = \"32MiB\"\n";
    std::fs::write(&path, memory).unwrap();
    let (ok, stdout, stderr) = check(&path, &[]);
    assert!(ok, "{stderr}");
    // 2048 + 512 + 32 + 64 MiB; the network share is a quarter of the number.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("# container memory >= "))
        .unwrap_or_else(|| panic!("no container memory line in:\n{stdout}"));
    for part in [
        ">= 2.6 GiB",
        "memory.capacity 2.0 GiB: store 1.5 GiB + network 512.0 MiB",
        "read_capacity 512.0 MiB",
        "index_cache 32.0 MiB",
        "64.0 MiB process overhead",
    ] {
        assert!(line.contains(part), "{part:?} missing in {line}");
    }
    assert!(stdout.contains("network = \"512.0 MiB\""), "{stdout}");

    // A network share given in the file, and one that leaves the store nothing.
    std::fs::write(&path, format!("{memory}network = \"128MiB\"\n")).unwrap();
    let (ok, stdout, stderr) = check(&path, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("store 1.9 GiB + network 128.0 MiB"),
        "{stdout}"
    );
    std::fs::write(&path, format!("{memory}network = \"2GiB\"\n")).unwrap();
    let (ok, _, stderr) = check(&path, &[]);
    assert!(!ok);
    assert!(stderr.contains("memory.network"), "{stderr}");
}

#[test]
fn check_config_names_the_key_of_a_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body, key) in [
        (
            "listen.toml",
            "[admin]\nlisten = \"everywhere\"\n",
            "admin.listen",
        ),
        (
            "size.toml",
            "[storage.memory]\ncapacity = \"lots\"\n",
            "storage.memory.capacity",
        ),
        (
            "watermark.toml",
            "[storage.memory]\nhigh_watermark = 0.2\nlow_watermark = 0.5\n",
            "low_watermark",
        ),
        (
            "clash.toml",
            "[celeborn]\nmaster_listen = \"127.0.0.1:19999\"\n",
            "celeborn.master_listen",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let (ok, stdout, stderr) = check(&path, &[]);
        assert!(!ok, "{name} passed:\n{stdout}");
        assert!(stdout.is_empty(), "{name} printed a config:\n{stdout}");
        assert!(stderr.contains("switchyard: error:"), "{stderr}");
        assert!(stderr.contains(key), "{name}: {key} not named in\n{stderr}");
        assert!(stderr.contains(name), "{name}: file not named in\n{stderr}");
    }
    // A bad environment override names the variable.
    let (ok, _, stderr) = check(&reference_config(), &[("SWITCHYARD_HOST", "node-2")]);
    assert!(!ok);
    assert!(stderr.contains("SWITCHYARD_HOST"), "{stderr}");
}

#[test]
fn check_config_rejects_unknown_keys_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (body, key) in [
        ("[storage.disks]\ndirz = [\"/x\"]\n", "storage.disks.dirz"),
        ("[uniffle]\nport = 1\n", "uniffle.port"),
        ("[celebron]\nenabled = true\n", "celebron"),
    ] {
        let path = dir.path().join("unknown.toml");
        std::fs::write(&path, body).unwrap();
        let (ok, _, stderr) = check(&path, &[]);
        assert!(!ok, "{body:?} passed");
        assert!(stderr.contains("unknown field"), "{stderr}");
        assert!(stderr.contains(key), "{key} not named in\n{stderr}");
    }
    let (ok, _, stderr) = check(&dir.path().join("missing.toml"), &[]);
    assert!(!ok);
    assert!(stderr.contains("missing.toml"), "{stderr}");
}

/// Kills the server if the test fails before it exits.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn ctl_status_and_apps_against_a_running_node() {
    let dir = tempfile::tempdir().unwrap();
    let admin = free_addr();
    // Every protocol port on port 0, so this test never clashes with the
    // other test binaries' default ports.
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[node]
id = "ctl-test-1"
[admin]
listen = "{admin}"
[storage.disks]
dirs = ["{data}"]
min_free = "16MiB"
[uniffle]
coordinator_listen = "127.0.0.1:0"
server_grpc_listen = "127.0.0.1:0"
server_netty_listen = "127.0.0.1:0"
[celeborn]
master_listen = "127.0.0.1:0"
worker_rpc_listen = "127.0.0.1:0"
worker_push_listen = "127.0.0.1:0"
worker_fetch_listen = "127.0.0.1:0"
worker_replicate_listen = "127.0.0.1:0"
"#,
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let (ok, _, stderr) = check(&config, &[]);
    assert!(ok, "{stderr}");

    let log = dir.path().join("serve.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    clear_switchyard_env(&mut cmd);
    let mut server = Server(cmd.spawn().expect("start switchyard"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(http_get(admin, "/readyz"), Ok((200, _))) {
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!(
                "serve exited ({status}):\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = format!("http://{admin}");

    let out = switchyard(&["ctl", "status", "--admin", &url], &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for want in [
        "ctl-test-1 (config)",
        "ready",
        "yes",
        "coordinator 127.0.0.1:",
        "DISK",
        "healthy",
    ] {
        assert!(stdout.contains(want), "{want:?} missing in:\n{stdout}");
    }

    let out = switchyard(&["ctl", "status", "--json", "--admin", &url], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("raw JSON");
    assert_eq!(json["node"]["id"], "ctl-test-1");

    // A bare HOST:PORT works too, and SWITCHYARD_ADMIN stands for --admin.
    let out = switchyard(
        &["ctl", "apps"],
        &[("SWITCHYARD_ADMIN", &admin.to_string())],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no applications on node ctl-test-1"),
        "{}",
        text(&out.stdout)
    );
    let out = switchyard(&["ctl", "apps", "--json", "--admin", &url], &[]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("raw JSON");
    assert!(json["storage"]["applications"].is_array(), "{json}");
}

#[test]
fn ctl_names_an_unreachable_node() {
    let nobody = free_addr(); // closed again: nothing listens there
    let url = format!("http://{nobody}");
    for sub in ["status", "apps", "migration"] {
        let out = switchyard(&["ctl", sub, "--admin", &url], &[]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        assert!(stderr.contains(&nobody.to_string()), "{stderr}");
        assert!(stderr.contains("unreachable"), "{stderr}");
    }
}
