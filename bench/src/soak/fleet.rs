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

/// What every node of a fleet is given.
pub struct FleetOptions {
    pub bin: PathBuf,
    pub nodes: usize,
    /// `storage.memory.capacity`
    pub memory: String,
    /// Node 1's address; node i is the i-th address from it.
    pub first_ip: Ipv4Addr,
    /// Where the nodes' directories go (a temporary directory when none).
    pub root: Option<PathBuf>,
    /// The S3 test server for a cold tier on S3, when given.
    pub s3_server: Option<PathBuf>,
    /// Workers' second data directory is a tmpfs of this many MiB, which
    /// the disk-full fault fills (0: a plain directory, no such fault).
    pub small_disk_mib: u64,
}

impl Node {
    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 19990))
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The second data directory of a worker (the small disk).
    pub fn small_dir(&self) -> PathBuf {
        self.dir.join("data2")
    }

    pub fn is_worker(&self) -> bool {
        self.role != Role::Coordinator
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.dir, lines)
    }
}

/// The last `lines` lines of `dir/switchyard.log`, where [`serve`] logs.
pub(crate) fn log_tail(dir: &Path, lines: usize) -> String {
    tail_of(&dir.join("switchyard.log"), lines)
}

/// The last `lines` lines of a file (empty when it cannot be read).
pub(crate) fn tail_of(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts `bin serve --config config` in `dir` (its output appended to
/// `dir/switchyard.log`) and waits until `admin` answers `/readyz`. A node
/// that exits first, or is not ready in 90 s, is an error naming `name`
/// with the end of its log; one that is not ready is killed first, so no
/// caller is left with a process it does not know of.
pub(crate) async fn serve(
    bin: &Path,
    config: &Path,
    dir: &Path,
    admin: SocketAddr,
    name: &str,
) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("switchyard.log"))?;
    let mut child = Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .current_dir(dir)
        .env_remove("SWITCHYARD_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {name}"))?;
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!(
                "{name} exited ({status}) before it was ready:\n{}",
                log_tail(dir, 30)
            );
        }
        if admin_get(admin, "/readyz").await.is_ok() {
            return Ok(child);
        }
        if started.elapsed() >= READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{name} not ready in {READY_TIMEOUT:?}:\n{}",
                log_tail(dir, 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub struct Fleet {
    bin: PathBuf,
    pub nodes: Vec<Node>,
    /// The cold tier's S3 server, when the fleet has one.
    pub s3: Option<super::s3::S3Server>,
    /// Workers' small disks are tmpfs mounts (the disk-full fault works).
    pub small_disks: bool,
    _root: Option<tempfile::TempDir>,
}

/// `[cluster]`, memory, disk and lease settings of node `node`; `cold` is
/// the `[storage.cold]` table, if any. Disk checks are quick (1 s health
/// checks, 5 s I/O timeout and cool-down) so that disk faults are seen
/// and recovered from within a fault's hold.
fn config_text(node: &Node, first_ip: Ipv4Addr, memory: &str, cold: &str) -> String {
    let [a, b, c, d] = first_ip.octets();
    let coordinators = format!("\"{a}.{b}.{c}.{d}:19980\", \"{a}.{b}.{c}.{}:19980\"", d + 1);
    let roles = match node.role {
        Role::Coordinator => "[\"coordinator\"]",
        Role::Both => "[\"coordinator\", \"worker\"]",
        Role::Worker => "[\"worker\"]",
    };
    let dirs = if node.is_worker() {
        format!(
            "\"{}\", \"{}\"",
            node.data_dir().display(),
            node.small_dir().display()
        )
    } else {
        format!("\"{}\"", node.data_dir().display())
    };
    format!(
        "[node]\nhost = \"{ip}\"\n\n[admin]\ntoken = \"{ADMIN_TOKEN}\"\nfault_injection = true\n\n[log]\nlevel = \"info\"\n\n\
         [storage.memory]\ncapacity = \"{memory}\"\nread_capacity = \"64MiB\"\n\n\
         [storage.disks]\ndirs = [{dirs}]\nmin_free = \"16MiB\"\nresume_margin = \"16MiB\"\n\
         io_timeout = \"5s\"\nerror_cooldown = \"5s\"\nhealth_check_interval = \"1s\"\n\n\
         {cold}[storage.apps]\nexpiry = \"30s\"\nexpiry_check_interval = \"2s\"\n\n\
         [celeborn]\napp_timeout = \"30s\"\n\n\
         [cluster]\ncoordinators = [{coordinators}]\nroles = {roles}\nsecret = \"{SECRET}\"\n\
         heartbeat_interval = \"1s\"\nworker_timeout = \"6s\"\nrequest_timeout = \"2s\"\n\
         decommission_check_interval = \"1s\"\nwarmup = \"2s\"\n",
        ip = node.ip,
    )
}

/// Mounts a tmpfs of `mib` MiB on `dir` (root only); false when it cannot.
fn mount_tmpfs(dir: &Path, mib: u64) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Fleet {
    /// Writes every node's config and starts the nodes one after the
    /// other (and first the S3 server, when the fleet has a cold tier).
    pub async fn start(o: FleetOptions) -> anyhow::Result<Fleet> {
        ensure!(
            (3..=20).contains(&o.nodes),
            "--nodes: 3 to 20, not {}",
            o.nodes
        );
        ensure!(
            o.bin.is_file(),
            "no switchyard binary at {}",
            o.bin.display()
        );
        // Nodes run in their own directories.
        let bin = std::fs::canonicalize(&o.bin)?;
        let (root, tmp) = match &o.root {
            Some(r) => (r.clone(), None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("switchyard-soak-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let s3 = match &o.s3_server {
            Some(s3_bin) => {
                let addr = SocketAddr::from((o.first_ip, 19900));
                Some(super::s3::S3Server::start(s3_bin, root.join("s3"), addr)?)
            }
            None => None,
        };
        let cold = s3.as_ref().map_or(String::new(), |s| s.cold_toml());
        let mut fleet = Fleet {
            bin,
            nodes: Vec::new(),
            s3,
            small_disks: o.small_disk_mib > 0,
            _root: tmp,
        };
        let [a, b, c, d] = o.first_ip.octets();
        for index in 1..=o.nodes {
            let dir = root.join(format!("node{index}"));
            let role = match index {
                1 => Role::Coordinator,
                2 => Role::Both,
                _ => Role::Worker,
            };
            let node = Node {
                index,
                ip: Ipv4Addr::new(a, b, c, d + index as u8 - 1),
                role,
                config: dir.join("switchyard.toml"),
                dir,
                child: None,
            };
            std::fs::create_dir_all(node.data_dir())?;
            if node.is_worker() {
                std::fs::create_dir_all(node.small_dir())?;
                if o.small_disk_mib > 0 && !mount_tmpfs(&node.small_dir(), o.small_disk_mib) {
                    fleet.small_disks = false;
                }
            }
            std::fs::write(
                &node.config,
                config_text(&node, o.first_ip, &o.memory, &cold),
            )?;
            fleet.nodes.push(node);
        }
        for i in 1..=o.nodes {
            fleet.launch(i).await?;
        }
        Ok(fleet)
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i - 1]
    }

    /// Starts node `i` and waits until it answers `/readyz`.
    pub async fn launch(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i - 1];
        ensure!(node.child.is_none(), "node {i} already runs");
        let name = format!("node {i}");
        let child = serve(&self.bin, &node.config, &node.dir, node.admin(), &name).await?;
        node.child = Some(child);
        Ok(())
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
            walk_files(&node.small_dir(), &mut out);
        }
        out
    }
}

/// Every file under `dir` but node state, depth first.
pub(crate) fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if name == switchyard_storage::data_dir::NODE_ID_FILE
            || name == switchyard_storage::data_dir::STATE_DIR
            || name == super::faults::BALLAST
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
            if node.is_worker() {
                // Lazily: a tmpfs mount, or nothing mounted there.
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(node.small_dir())
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}
