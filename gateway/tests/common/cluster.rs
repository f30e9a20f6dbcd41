//! A cluster of `switchyard serve` processes on one machine, one host per
//! loopback address: node `i` (1-based) listens on `127.0.0.(i+1)` with every
//! role's default port (admin 19990, Uniffle 19999/19997/19996, Celeborn
//! 9097 and 9100-9103), as it would on a host of its own. Each node has its
//! own directory (config, data, log) under one temporary directory.
//!
//! By default the nodes are independent processes of the built binary;
//! with [`ClusterOptions::coordinators`] they form one fleet (a `[cluster]`
//! table naming those nodes' cluster ports, a shared secret, 1 s
//! heartbeats). Nodes are signalled by their PID; dropping the [`Cluster`] kills
//! whatever still runs. One cluster runs at a time in a test process (the
//! addresses are fixed), so tests that use it wait for each other.
//!
//! ```ignore
//! let mut cluster = Cluster::start(3);
//! let id = cluster.node(2).status()["node"]["id"].clone();
//! cluster.kill(2);
//! cluster.restart(2);
//! let status = cluster.stop(1); // SIGTERM, waits, returns the exit status
//! ```

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{clear_switchyard_env, http_get};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

/// How long a node may take to answer `GET /readyz` with 200.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// Every role's default port, with the config key that sets it.
pub const DEFAULT_PORTS: [(&str, u16); 10] = [
    ("admin.listen", 19990),
    ("cluster.listen", 19980),
    ("uniffle.coordinator_listen", 19999),
    ("uniffle.server_grpc_listen", 19997),
    ("uniffle.server_netty_listen", 19996),
    ("celeborn.master_listen", 9097),
    ("celeborn.worker_rpc_listen", 9100),
    ("celeborn.worker_push_listen", 9101),
    ("celeborn.worker_fetch_listen", 9102),
    ("celeborn.worker_replicate_listen", 9103),
];

/// One cluster at a time per test process: the addresses are fixed.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What every node's config holds besides its host and data directory.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// `storage.memory.capacity`
    pub memory: String,
    /// `log.level`
    pub log_level: String,
    /// TOML appended to every node's config (whole tables, e.g. `[uniffle]`
    /// settings); it must not repeat a table the fixture writes
    /// (`[node]`, `[log]`, `[storage.memory]`, `[storage.disks]`).
    pub extra_toml: String,
    /// The nodes (1-based) that coordinate the fleet; empty: no fleet,
    /// every node alone.
    pub coordinators: Vec<usize>,
    /// `cluster.warmup` of fleet coordinators.
    pub warmup: String,
    /// `node.rack` of node i+1 (none past the end of the list), which is
    /// also its one worker tag (`node.tags`).
    pub racks: Vec<String>,
    /// Coordinators (of `coordinators`) that are not workers.
    pub coordinator_only: Vec<usize>,
}

/// The cluster secret of fixture fleets.
pub const FLEET_SECRET: &str = "fixture-fleet-secret";

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            memory: "64MiB".into(),
            log_level: "info".into(),
            extra_toml: String::new(),
            coordinators: Vec::new(),
            racks: Vec::new(),
            coordinator_only: Vec::new(),
            warmup: "2s".into(),
        }
    }
}

pub struct Node {
    index: usize,
    ip: Ipv4Addr,
    dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    starts: usize,
}

pub struct Cluster {
    nodes: Vec<Node>,
    root: tempfile::TempDir,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    /// Starts `n` nodes with [`ClusterOptions::default`] and waits until
    /// each is ready.
    pub fn start(n: usize) -> Cluster {
        Cluster::start_with(n, ClusterOptions::default())
    }

    /// Starts `n` nodes (one after the other) and waits until each is ready.
    /// Panics, naming the address, if a default port on a node's address is
    /// taken.
    pub fn start_with(n: usize, options: ClusterOptions) -> Cluster {
        assert!(
            (1..=250).contains(&n),
            "a cluster has 1 to 250 nodes, not {n}"
        );
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let root = tempfile::Builder::new()
            .prefix("switchyard-cluster-")
            .tempdir()
            .expect("temporary directory");
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            root,
            _turn: turn,
        };
        for index in 1..=n {
            let ip = Ipv4Addr::new(127, 0, 0, index as u8 + 1);
            let dir = cluster.root.path().join(format!("node{index}"));
            std::fs::create_dir_all(dir.join("data")).unwrap();
            let config = dir.join("switchyard.toml");
            std::fs::write(&config, config_text(ip, &dir.join("data"), &options)).unwrap();
            cluster.nodes.push(Node {
                index,
                ip,
                log: dir.join("switchyard.log"),
                config,
                dir,
                child: None,
                starts: 0,
            });
        }
        for index in 1..=n {
            cluster.launch(index).unwrap_or_else(|e| panic!("{e}"));
        }
        cluster
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The cluster's temporary directory (node `i` is in `node<i>/`).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Node `i`, 1-based.
    pub fn node(&self, i: usize) -> &Node {
        assert!(
            (1..=self.nodes.len()).contains(&i),
            "no node {i} in a cluster of {} (nodes count from 1)",
            self.nodes.len()
        );
        &self.nodes[i - 1]
    }

    fn node_mut(&mut self, i: usize) -> &mut Node {
        self.node(i);
        &mut self.nodes[i - 1]
    }

    /// SIGTERM to node `i`'s PID; waits for it to exit and returns its exit
    /// status. Panics (with the log tail) if it is not running or does not
    /// exit within [`STOP_TIMEOUT`].
    pub fn stop(&mut self, i: usize) -> ExitStatus {
        let node = self.node_mut(i);
        let pid = node.running_pid("stop");
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let status = node.wait_exit(STOP_TIMEOUT).unwrap_or_else(|| {
            panic!(
                "node {i} still running {STOP_TIMEOUT:?} after SIGTERM\n{}",
                node.log_tail(40)
            )
        });
        node.child = None;
        status
    }

    /// Waits up to `timeout` for node `i` to exit on its own (a
    /// decommissioned node): its exit status, or `None` while it still runs.
    pub fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let node = self.node_mut(i);
        let status = node.wait_exit(timeout)?;
        node.child = None;
        Some(status)
    }

    /// SIGKILL to node `i`'s PID; waits until it is gone.
    pub fn kill(&mut self, i: usize) -> ExitStatus {
        let node = self.node_mut(i);
        let pid = node.running_pid("kill");
        kill(pid, Signal::SIGKILL).expect("SIGKILL");
        node.child.take().unwrap().wait().expect("wait")
    }

    /// Starts node `i` again, with the same config, data directory and
    /// addresses, and waits until it is ready. A node still running is
    /// stopped first (SIGTERM).
    pub fn restart(&mut self, i: usize) {
        self.try_restart(i).unwrap_or_else(|e| panic!("{e}"));
    }

    /// As [`Cluster::restart`], but a default port that is taken on the
    /// node's address is an `Err` with the message `restart` panics with
    /// (the node is then not running).
    pub fn try_restart(&mut self, i: usize) -> Result<(), String> {
        if self.node(i).is_running() {
            let status = self.stop(i);
            assert!(status.success(), "node {i} exited with {status} on stop");
        }
        self.launch(i)
    }

    fn launch(&mut self, i: usize) -> Result<(), String> {
        let node = self.node_mut(i);
        check_ports_free(node.index, node.ip)?;
        node.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        writeln!(
            log,
            "#### cluster fixture: start {} of node {} on {}",
            node.starts, node.index, node.ip
        )
        .unwrap();
        let err = log.try_clone().unwrap();
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg("--config")
            .arg(&node.config)
            .current_dir(&node.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        // The config file is what runs, not a developer's own overrides.
        clear_switchyard_env(&mut cmd);
        node.child = Some(cmd.spawn().expect("start switchyard"));
        node.wait_ready();
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                if let Ok(None) = child.try_wait() {
                    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                }
                let _ = child.wait();
            }
        }
    }
}

impl Node {
    /// 1-based.
    pub fn index(&self) -> usize {
        self.index
    }

    /// `127.0.0.(index+1)`
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// This node's address with `port`.
    pub fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), port)
    }

    pub fn admin(&self) -> SocketAddr {
        self.addr(19990)
    }

    pub fn uniffle_coordinator(&self) -> SocketAddr {
        self.addr(19999)
    }

    pub fn celeborn_master(&self) -> SocketAddr {
        self.addr(9097)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The process id while the node runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `GET path` on the admin server: (status code, body).
    pub fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        http_get(self.admin(), path)
    }

    /// `GET /api/v1/status`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let (code, body) = self
            .get("/api/v1/status")
            .unwrap_or_else(|e| panic!("node {}: /api/v1/status: {e}", self.index));
        assert_eq!(code, 200, "node {}: /api/v1/status: {body}", self.index);
        serde_json::from_str(&body).expect("status is JSON")
    }

    /// The node's log (every start appended), or "" if none.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log, with a header naming the file.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        let tail = &all[all.len().saturating_sub(lines)..];
        format!(
            "---- last {} lines of {} ----\n{}\n---- end of log ----",
            tail.len(),
            self.log.display(),
            tail.join("\n")
        )
    }

    fn running_pid(&self, what: &str) -> Pid {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("cannot {what} node {}: not running", self.index));
        Pid::from_raw(child.id() as i32)
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            let child = self.child.as_mut().expect("launched");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                panic!(
                    "node {} on {} exited ({status}) before it was ready\n{}",
                    self.index,
                    self.ip,
                    self.log_tail(40)
                );
            }
            let last = match self.get("/readyz") {
                Ok((200, _)) => return,
                Ok((code, body)) => format!("HTTP {code}: {body}"),
                Err(e) => e.to_string(),
            };
            if started.elapsed() > READY_TIMEOUT {
                panic!(
                    "node {} not ready within {READY_TIMEOUT:?}: GET http://{}/readyz last gave {last}\n{}",
                    self.index,
                    self.admin(),
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The config the fixture writes for a node: its host, its data directory,
/// a small memory budget and a small disk reserve (so that the host's free
/// space does not matter).
fn config_text(ip: Ipv4Addr, data: &Path, options: &ClusterOptions) -> String {
    let data = data.display().to_string();
    assert!(
        !data.contains(['"', '\\']),
        "data path {data:?} needs TOML escaping"
    );
    let index = ip.octets()[3] as usize - 1;
    let mut fleet = String::new();
    if !options.coordinators.is_empty() {
        let list: Vec<String> = options
            .coordinators
            .iter()
            .map(|&i| format!("\"127.0.0.{}:19980\"", i + 1))
            .collect();
        let roles = if options.coordinator_only.contains(&index) {
            "[\"coordinator\"]"
        } else if options.coordinators.contains(&index) {
            "[\"coordinator\", \"worker\"]"
        } else {
            "[\"worker\"]"
        };
        fleet = format!(
            "[cluster]\ncoordinators = [{}]\nroles = {roles}\nsecret = \"{FLEET_SECRET}\"\n\
             heartbeat_interval = \"1s\"\nworker_timeout = \"6s\"\nrequest_timeout = \"2s\"\n\
             decommission_check_interval = \"1s\"\nwarmup = \"{}\"\n\n",
            list.join(", "),
            options.warmup
        );
    }
    let rack = match options.racks.get(index - 1) {
        Some(r) => format!("rack = \"{r}\"\ntags = [\"{r}\"]\n"),
        None => String::new(),
    };
    format!(
        "[node]\nhost = \"{ip}\"\n{rack}\n\
         [log]\nlevel = \"{}\"\n\n\
         [storage.memory]\ncapacity = \"{}\"\n\n\
         [storage.disks]\ndirs = [\"{data}\"]\nmin_free = \"16MiB\"\n\n{fleet}{}",
        options.log_level, options.memory, options.extra_toml
    )
}

/// A clear message if one of the default ports on `ip` is taken (a server
/// of the developer's, a node of another test run) or the address cannot be
/// bound at all.
fn check_ports_free(index: usize, ip: Ipv4Addr) -> Result<(), String> {
    for (key, port) in DEFAULT_PORTS {
        let addr = SocketAddr::new(IpAddr::V4(ip), port);
        if let Err(e) = TcpListener::bind(addr) {
            return Err(format!(
                "cluster node {index} needs {addr} ({key}) but cannot listen there: {e}. \
                 Another server (a switchyard, Uniffle or Celeborn of yours, or another \
                 test's cluster) holds that port on {ip} or on all addresses; stop it first."
            ));
        }
    }
    Ok(())
}
