//! Runs the built `switchyard` binary: `serve` with built-in defaults in a
//! temporary working directory, admin HTTP checks, then SIGTERM.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod common;
use common::{clear_switchyard_env, http_get as get};

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// Kills the child if the test fails before it exits.
struct Server {
    child: Child,
    log: std::path::PathBuf,
}

impl Server {
    fn start(workdir: &Path, addr: SocketAddr) -> Server {
        let log = workdir.join("switchyard.log");
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .current_dir(workdir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        clear_switchyard_env(&mut cmd);
        // The default disk reserve (2 GiB) may exceed what a CI machine has
        // free; readiness here is about wiring, not the host's disk.
        cmd.env("SWITCHYARD_ADMIN_LISTEN", addr.to_string())
            .env("SWITCHYARD_DISK_MIN_FREE", "16MiB")
            .env("SWITCHYARD_LOG", "info");
        Server {
            child: cmd.spawn().expect("start switchyard"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn serve_with_defaults_then_sigterm() {
    let workdir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let mut server = Server::start(workdir.path(), addr);

    // Up: /healthz answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!("switchyard exited early ({status}):\n{}", server.log());
        }
        match get(addr, "/healthz") {
            Ok((200, body)) => {
                assert_eq!(body, "ok");
                break;
            }
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("/healthz never answered: {other:?}\n{}", server.log()),
        }
    }

    let (code, body) = get(addr, "/readyz").unwrap();
    assert_eq!(code, 200, "/readyz: {body}\n{}", server.log());

    // The default data directory, relative to the working directory.
    assert!(
        workdir.path().join("data/switchyard").is_dir(),
        "data/switchyard not created"
    );

    // The store's own metrics reach the exporter (some may appear only once
    // a background task has run, so poll).
    let deadline = Instant::now() + common::PATIENCE;
    loop {
        let (code, body) = get(addr, "/metrics").unwrap();
        assert_eq!(code, 200);
        let complete = [
            "switchyard_memory_capacity_bytes",
            "switchyard_tier_bytes",
            "switchyard_process_resident_bytes",
        ]
        .iter()
        .all(|name| body.contains(name));
        if complete {
            let gauge = |name: &str| {
                body.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().last())
                    .and_then(|v| v.parse::<f64>().ok())
            };
            assert_eq!(
                gauge("switchyard_memory_node_capacity_bytes"),
                Some((1u64 << 30) as f64),
                "the node's default memory number is 1 GiB"
            );
            assert_eq!(
                gauge("switchyard_memory_capacity_bytes"),
                Some((768u64 << 20) as f64),
                "the store keeps 3/4 of it by default (the network share is the rest)"
            );
            break;
        }
        assert!(Instant::now() < deadline, "metrics incomplete:\n{body}");
        std::thread::sleep(Duration::from_millis(200));
    }

    let (code, body) = get(addr, "/api/v1/status").unwrap();
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).expect("status is JSON");
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert!(status["uptime_seconds"].is_u64(), "{status}");
    assert_eq!(status["storage"]["ready"], true, "{status}");
    for key in ["memory", "tiers", "disks", "applications"] {
        assert!(
            !status["storage"][key].is_null(),
            "storage.{key} missing in {status}"
        );
    }

    // The node's identity: generated on this first start, persisted in the
    // first data directory, used as Uniffle's server id.
    let node = &status["node"];
    let id = node["id"].as_str().expect("node.id");
    assert_eq!(node["id_source"], "generated", "{status}");
    let persisted =
        std::fs::read_to_string(workdir.path().join("data/switchyard/node-id")).unwrap();
    assert_eq!(persisted.trim(), id);
    assert_eq!(node["uniffle"]["server_id"], id, "{status}");
    assert_eq!(
        node["uniffle"]["coordinator"], "127.0.0.1:19999",
        "{status}"
    );
    assert_eq!(
        node["celeborn"]["worker_id"], "127.0.0.1:9100:9101:9102:9103",
        "{status}"
    );

    let (code, _) = get(addr, "/no-such-page").unwrap();
    assert_eq!(code, 404);

    // The Uniffle coordinator and the Celeborn master answer on their upstream
    // default ports (19999, 9097); the shuffle server and worker on theirs.
    for port in [19999, 19997, 19996, 9097, 9100, 9101, 9102, 9103] {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("nothing listens on {port}: {e}\n{}", server.log()));
    }

    // SIGTERM: admin HTTP closes, the store shuts down, exit 0.
    kill(Pid::from_raw(server.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = server
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no exit 30 s after SIGTERM:\n{}", server.log()));
    let log = server.log();
    assert!(status.success(), "exit status {status}:\n{log}");
    assert!(log.contains("SIGTERM"), "{log}");
    assert!(log.contains("store closed"), "{log}");
    assert!(
        get(addr, "/healthz").is_err(),
        "admin HTTP still up after exit"
    );
}

#[test]
fn bad_config_fails_with_a_clear_message() {
    let workdir = tempfile::tempdir().unwrap();
    let config = workdir.path().join("bad.toml");
    std::fs::write(&config, "[storage.memory]\ncapacty = \"1GiB\"\n").unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(workdir.path())
        .stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.toml") && stderr.contains("unknown field `capacty`"),
        "{stderr}"
    );
    assert!(
        !workdir.path().join("data").exists(),
        "no store opened on a bad config"
    );
}

#[test]
fn bad_env_override_fails_with_a_clear_message() {
    let workdir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .current_dir(workdir.path())
        .stdin(Stdio::null());
    clear_switchyard_env(&mut cmd);
    let out = cmd.env("SWITCHYARD_MEMORY_CAPACITY", "0").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("memory.capacity"), "{stderr}");
}

#[test]
fn no_subcommand_prints_help() {
    let out = Command::new(BIN).stdin(Stdio::null()).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("serve"), "{text}");
    assert!(text.contains("Usage"), "{text}");
}

/// `[runtime] numa = true` on this host: it serves as without (a host with
/// one NUMA node starts no runtime of its own, and says so), pushes and
/// reads of both data paths included.
#[test]
fn numa_placement_is_harmless_on_a_single_node_host() {
    let workdir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let ports: Vec<u16> = (0..7).map(|_| free_addr().port()).collect();
    let config = workdir.path().join("numa.toml");
    std::fs::write(
        &config,
        format!(
            "[admin]\nlisten = \"{addr}\"\n\
             [runtime]\nnuma = true\nworker_threads = 2\n\
             [uniffle]\ncoordinator_listen = \"127.0.0.1:{}\"\nserver_grpc_listen = \"127.0.0.1:{}\"\n\
             server_netty_listen = \"127.0.0.1:{}\"\n\
             [celeborn]\nmaster_listen = \"127.0.0.1:{}\"\nworker_rpc_listen = \"127.0.0.1:{}\"\n\
             worker_push_listen = \"127.0.0.1:{}\"\nworker_fetch_listen = \"127.0.0.1:{}\"\n\
             worker_replicate_listen = \"127.0.0.1:0\"\n\
             [storage.disks]\ndirs = [\"data\"]\nmin_free = \"16MiB\"\n",
            ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
        ),
    )
    .unwrap();
    let log = workdir.path().join("switchyard.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--config")
        .arg(&config)
        .current_dir(workdir.path())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    clear_switchyard_env(&mut cmd);
    let mut server = Server {
        child: cmd.env("SWITCHYARD_LOG", "info").spawn().unwrap(),
        log,
    };
    let started = Instant::now();
    while get(addr, "/readyz").map(|r| r.0).ok() != Some(200) {
        assert!(
            started.elapsed() < common::cluster::READY_TIMEOUT,
            "not ready: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = server.log();
    assert!(text.contains("runtime.numa: NUMA topology"), "{text}");
    assert!(
        text.contains("nothing to bind") || text.contains("connections spread"),
        "{text}"
    );
    for (kind, flag, port) in [
        ("celeborn", "--master", ports[3]),
        ("uniffle", "--coordinator", ports[0]),
    ] {
        let address = format!("127.0.0.1:{port}");
        let sizes = ["--size", "8MiB", "--mappers", "2", "--partitions", "4"];
        let args = [kind, flag, &address].into_iter().chain(sizes);
        if let Err(e) = switchyard_bench::run_args(args) {
            panic!("bench {kind}: {e}\n{}", server.log());
        }
    }
    kill(Pid::from_raw(server.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = server.wait_exit(Duration::from_secs(30)).expect("exits");
    assert!(status.success(), "{}", server.log());
}
