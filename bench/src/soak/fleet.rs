//! The soak's fleet: `switchyard serve` processes on 127.0.0.2.. with every
//! role's default port, as the gateway tests' cluster fixture lays them out
//! (one host per loopback address). Node 1 only coordinates, node 2
//! coordinates and is a worker, the rest are workers, so a fault can hit a
//! coordinator, a worker or a node that is both. Nodes are signalled by
//! PID; dropping the fleet kills whatever still runs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::overload::admin_get;

/// The cluster secret and admin token of soak fleets.
pub const SECRET: &str = "soak-fleet-secret";
pub const ADMIN_TOKEN: &str = "soak-admin-token";
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// What a node does in the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Coordinator,
    Both,
    Worker,
}

pub struct Node {
    pub index: usize,
    pub ip: Ipv4Addr,
    pub role: Role,
    pub dir: PathBuf,
    config: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 19990))
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("switchyard.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

pub struct Fleet {
    bin: PathBuf,
    pub nodes: Vec<Node>,
    _root: Option<tempfile::TempDir>,
}

/// `[cluster]`, memory and lease settings of every node; `extra` is
/// appended (whole tables, e.g. a cold tier).
fn config_text(node: &Node, nodes: usize, memory: &str, extra: &str) -> String {
    let coordinators = "\"127.0.0.2:19980\", \"127.0.0.3:19980\"";
    let roles = match node.role {
        Role::Coordinator => "[\"coordinator\"]",
        Role::Both => "[\"coordinator\", \"worker\"]",
        Role::Worker => "[\"worker\"]",
    };
    debug_assert!(nodes >= 3);
    format!(
        "[node]\nhost = \"{ip}\"\n\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\n\n[log]\nlevel = \"info\"\n\n\
         [storage.memory]\ncapacity = \"{memory}\"\nread_capacity = \"64MiB\"\n\n\
         [storage.disks]\ndirs = [\"{data}\"]\nmin_free = \"16MiB\"\n\n\
         [storage.apps]\nexpiry = \"30s\"\nexpiry_check_interval = \"2s\"\n\n\
         [celeborn]\napp_timeout = \"30s\"\n\n\
         [cluster]\ncoordinators = [{coordinators}]\nroles = {roles}\nsecret = \"{SECRET}\"\n\
         heartbeat_interval = \"1s\"\nworker_timeout = \"6s\"\nrequest_timeout = \"2s\"\n\
         decommission_check_interval = \"1s\"\nwarmup = \"2s\"\n\n{extra}",
        ip = node.ip,
        data = node.data_dir().display(),
    )
}

impl Fleet {
    /// Writes every node's config under `root` (a temporary directory when
    /// none) and starts the nodes one after the other.
    pub async fn start(
        bin: PathBuf,
        nodes: usize,
        memory: &str,
        extra_toml: &str,
        root: Option<PathBuf>,
    ) -> anyhow::Result<Fleet> {
        ensure!((3..=20).contains(&nodes), "--nodes: 3 to 20, not {nodes}");
        ensure!(bin.is_file(), "no switchyard binary at {}", bin.display());
        // Nodes run in their own directories.
        let bin = std::fs::canonicalize(&bin)?;
        let (root_dir, tmp) = match root {
            Some(r) => (r, None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("switchyard-soak-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut fleet = Fleet {
            bin,
            nodes: Vec::new(),
            _root: tmp,
        };
        for index in 1..=nodes {
            let dir = root_dir.join(format!("node{index}"));
            std::fs::create_dir_all(dir.join("data"))?;
            let role = match index {
                1 => Role::Coordinator,
                2 => Role::Both,
                _ => Role::Worker,
            };
            let mut node = Node {
                index,
                ip: Ipv4Addr::new(127, 0, 0, index as u8 + 1),
                role,
                config: dir.join("switchyard.toml"),
                dir,
                child: None,
            };
            std::fs::write(&node.config, config_text(&node, nodes, memory, extra_toml))?;
            node.child = None;
            fleet.nodes.push(node);
        }
        for i in 1..=nodes {
            fleet.launch(i).await?;
        }
        Ok(fleet)
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i - 1]
    }

    /// Starts node `i` and waits until it answers `/readyz`.
    pub async fn launch(&mut self, i: usize) -> anyhow::Result<()> {
        let bin = self.bin.clone();
        let node = &mut self.nodes[i - 1];
        ensure!(node.child.is_none(), "node {i} already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("switchyard.log"))?;
        let child = Command::new(&bin)
            .arg("serve")
            .arg("--config")
            .arg(&node.config)
            .current_dir(&node.dir)
            .env_remove("SWITCHYARD_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start node {i}"))?;
        node.child = Some(child);
        let started = Instant::now();
        loop {
            if let Some(status) = node.child.as_mut().expect("spawned").try_wait()? {
                node.child = None;
                bail!(
                    "node {i} exited ({status}) before it was ready:\n{}",
                    node.log_tail(30)
                );
            }
            if admin_get(node.admin(), "/readyz").await.is_ok() {
                return Ok(());
            }
            ensure!(
                started.elapsed() < READY_TIMEOUT,
                "node {i} not ready in {READY_TIMEOUT:?}:\n{}",
                node.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `signal` to node `i` and waits up to `within` for it to exit.
    pub async fn signal(
        &mut self,
        i: usize,
        signal: Signal,
        within: Duration,
    ) -> anyhow::Result<()> {
        let node = &mut self.nodes[i - 1];
        let pid = node
            .pid()
            .with_context(|| format!("node {i} is not running"))?;
        kill(Pid::from_raw(pid as i32), signal)?;
        self.wait_exit(i, within).await
    }

    /// Waits up to `within` for node `i` to exit (after a signal, or on its
    /// own once decommissioned).
    pub async fn wait_exit(&mut self, i: usize, within: Duration) -> anyhow::Result<()> {
        let node = &mut self.nodes[i - 1];
        let started = Instant::now();
        while let Some(child) = node.child.as_mut() {
            if child.try_wait()?.is_some() {
                node.child = None;
                return Ok(());
            }
            ensure!(
                started.elapsed() < within,
                "node {i} still runs {within:?} later:\n{}",
                node.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Node `i`'s memory number as `switchyard check-config` figures it for
    /// a container: every budget of its config plus the process overhead.
    pub fn memory_number(&self, i: usize) -> anyhow::Result<u64> {
        let out = Command::new(&self.bin)
            .arg("check-config")
            .arg(&self.nodes[i - 1].config)
            .env_remove("SWITCHYARD_ADMIN_TOKEN")
            .output()?;
        ensure!(
            out.status.success(),
            "check-config of node {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let figure = text
            .lines()
            .find_map(|l| l.split("container memory >= ").nth(1))
            .and_then(|rest| rest.split(" MiB").next())
            .and_then(|mib| mib.parse::<f64>().ok())
            .context("check-config printed no container memory figure")?;
        Ok((figure * 1048576.0) as u64)
    }

    /// The running nodes' PIDs, by index.
    pub fn pids(&self) -> Vec<(usize, u32)> {
        self.nodes
            .iter()
            .filter_map(|n| Some((n.index, n.pid()?)))
            .collect()
    }

    /// Files and directories left in each node's data directories besides
    /// the node's own state (`node-id`, `.switchyard`): shuffle data that
    /// outlived its application.
    pub fn leftovers(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for node in &self.nodes {
            walk_files(&node.data_dir(), &mut out);
        }
        out
    }
}

fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name == switchyard_storage::data_dir::NODE_ID_FILE
            || name == switchyard_storage::data_dir::STATE_DIR
        {
            continue;
        }
        let path = e.path();
        if path.is_dir() {
            let before = out.len();
            walk_files(&path, out);
            if out.len() == before {
                // An empty application directory is not data; say so only
                // when nothing inside it is listed already.
                continue;
            }
        } else {
            out.push(path);
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
