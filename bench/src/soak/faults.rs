//! The faults the soak injects into its fleet, one at a time: each is
//! injected, held, repaired, and the fleet is given a quiet spell before
//! the next. Process faults signal a node by PID; a network cut drops the
//! node's loopback address with iptables rules tagged with a comment, which
//! [`Cut`] removes again (also when dropped, so a failed run leaves none).

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use nix::sys::signal::Signal;

use super::fleet::{Fleet, Role, ADMIN_TOKEN};
use super::spec::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum FaultKind {
    /// kill -9 of a worker-only node, restarted after the hold.
    KillWorker,
    /// kill -9 of the coordinator-only node, restarted after the hold.
    KillCoordinator,
    /// kill -9 of the node that coordinates and is a worker.
    KillBoth,
    /// SIGTERM (graceful stop) of any node, started again at once.
    Restart,
    /// Decommission of a worker mid-write: it exits once no application
    /// holds data on it, and is started again.
    Decommission,
    /// A worker cut off the network (iptables on its address), let back
    /// after the hold.
    Cut,
    /// One of a worker's disks fails every write and probe (the disk
    /// fault layer, over admin HTTP), then works again.
    DiskError,
    /// One of a worker's disks hangs: every call blocks until released.
    DiskHang,
    /// A worker's small disk (a tmpfs) filled to its last MiBs by another
    /// file, then emptied.
    DiskFull,
    /// The cold tier's S3 server killed, started again after the hold.
    ColdStop,
}

impl FaultKind {
    pub const ALL: [FaultKind; 10] = [
        FaultKind::KillWorker,
        FaultKind::KillCoordinator,
        FaultKind::KillBoth,
        FaultKind::Restart,
        FaultKind::Decommission,
        FaultKind::Cut,
        FaultKind::DiskError,
        FaultKind::DiskHang,
        FaultKind::DiskFull,
        FaultKind::ColdStop,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillWorker => "kill -9 worker",
            FaultKind::KillCoordinator => "kill -9 coordinator",
            FaultKind::KillBoth => "kill -9 coordinator+worker",
            FaultKind::Restart => "SIGTERM + restart",
            FaultKind::Decommission => "decommission mid-write",
            FaultKind::Cut => "network cut (iptables)",
            FaultKind::DiskError => "disk returns errors",
            FaultKind::DiskHang => "disk hangs",
            FaultKind::DiskFull => "disk fills up",
            FaultKind::ColdStop => "S3 server stopped",
        }
    }

    /// Why this fault cannot be injected into `fleet` here, if it cannot.
    pub fn unavailable(self, fleet: &Fleet) -> Option<&'static str> {
        match self {
            FaultKind::Cut if !iptables_usable() => {
                Some("needs iptables as root (apt-get install iptables)")
            }
            FaultKind::DiskFull if !fleet.small_disks => Some("needs tmpfs mounts (root)"),
            FaultKind::ColdStop if fleet.s3.is_none() => Some("needs the cold tier (--s3-server)"),
            _ => None,
        }
    }
}

/// The file the disk-full fault fills a small disk with (a leading dot: no
/// application directory is named so, and the node leaves it alone).
pub const BALLAST: &str = ".soak-ballast";

/// The comment that tags the soak's iptables rules.
const TAG: &str = "switchyard-soak";

/// How long a graceful stop or a decommission may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
const DECOMMISSION_TIMEOUT: Duration = Duration::from_secs(240);

/// Injects `kind`, holds it for `hold`, and repairs it; returns which node
/// it hit (0: none, the S3 server).
pub async fn inject(
    kind: FaultKind,
    fleet: &mut Fleet,
    rng: &mut Rng,
    hold: Duration,
) -> anyhow::Result<usize> {
    let node = target(kind, fleet, rng);
    match kind {
        FaultKind::KillWorker | FaultKind::KillCoordinator | FaultKind::KillBoth => {
            fleet
                .signal(node, Signal::SIGKILL, Duration::from_secs(10))
                .await?;
            tokio::time::sleep(hold).await;
            fleet.launch(node).await?;
        }
        FaultKind::Restart => {
            fleet.signal(node, Signal::SIGTERM, STOP_TIMEOUT).await?;
            fleet.launch(node).await?;
        }
        FaultKind::Decommission => {
            decommission(fleet, node).await?;
            fleet
                .wait_exit(node, DECOMMISSION_TIMEOUT)
                .await
                .context("decommissioned node did not exit")?;
            fleet.launch(node).await?;
        }
        FaultKind::Cut => {
            let cut = Cut::new(fleet.node(node).ip.to_string())?;
            tokio::time::sleep(hold).await;
            cut.heal()?;
        }
        FaultKind::DiskError | FaultKind::DiskHang => {
            let n = fleet.node(node);
            let dir = if rng.range(0, 1) == 0 {
                n.data_dir()
            } else {
                n.small_dir()
            };
            let mode = if kind == FaultKind::DiskError {
                "error"
            } else {
                "hang"
            };
            switch_disk(n.admin(), &dir, mode).await?;
            tokio::time::sleep(hold).await;
            switch_disk(n.admin(), &dir, "off").await?;
        }
        FaultKind::DiskFull => {
            let ballast = fleet.node(node).small_dir().join(BALLAST);
            fill(&ballast)?;
            tokio::time::sleep(hold).await;
            std::fs::remove_file(&ballast).context("remove the ballast")?;
        }
        FaultKind::ColdStop => {
            let s3 = fleet.s3.as_mut().context("no cold tier")?;
            s3.kill()?;
            tokio::time::sleep(hold).await;
            s3.launch()?;
        }
    }
    Ok(node)
}

/// Switches a disk's injected fault over the node's admin HTTP.
async fn switch_disk(
    admin: std::net::SocketAddr,
    dir: &std::path::Path,
    mode: &str,
) -> anyhow::Result<()> {
    let body = serde_json::json!({ "dir": dir, "mode": mode }).to_string();
    let status = admin_post(admin, "/api/v1/faults/disk", Some(body)).await?;
    ensure!(
        status.is_success(),
        "disk fault {mode} on {}: {status}",
        dir.display()
    );
    Ok(())
}

/// A POST with the fleet's admin token (and a JSON body, if any): the
/// answer's status.
async fn admin_post(
    admin: std::net::SocketAddr,
    path: &str,
    json: Option<String>,
) -> anyhow::Result<reqwest::StatusCode> {
    let url = format!("http://{admin}{path}");
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()?
        .post(&url)
        .bearer_auth(ADMIN_TOKEN);
    if let Some(body) = json {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    Ok(response.status())
}

/// Fills the filesystem of `ballast` until 4 MiB are left (below the
/// nodes' 16 MiB min_free).
fn fill(ballast: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = ballast.parent().context("ballast dir")?;
    let stat = nix::sys::statvfs::statvfs(dir)?;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let size = free.saturating_sub(4 << 20);
    let mut f = std::fs::File::create(ballast)?;
    let chunk = vec![0x5Au8; 1 << 20];
    let mut written = 0u64;
    while written < size {
        let n = (size - written).min(chunk.len() as u64) as usize;
        match f.write_all(&chunk[..n]) {
            Ok(()) => written += n as u64,
            // The node's own flushes took the rest first: full is full.
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn target(kind: FaultKind, fleet: &Fleet, rng: &mut Rng) -> usize {
    let of = |role: Role| -> Vec<usize> {
        fleet
            .nodes
            .iter()
            .filter(|n| n.role == role)
            .map(|n| n.index)
            .collect()
    };
    let pick = |list: Vec<usize>, rng: &mut Rng| list[rng.range(0, list.len() as u64 - 1) as usize];
    match kind {
        FaultKind::KillCoordinator => pick(of(Role::Coordinator), rng),
        FaultKind::KillBoth => pick(of(Role::Both), rng),
        FaultKind::Restart => rng.range(1, fleet.nodes.len() as u64) as usize,
        FaultKind::KillWorker
        | FaultKind::Decommission
        | FaultKind::Cut
        | FaultKind::DiskError
        | FaultKind::DiskHang
        | FaultKind::DiskFull => pick(of(Role::Worker), rng),
        // Not a node's: the fleet's S3 server.
        FaultKind::ColdStop => 0,
    }
}

async fn decommission(fleet: &Fleet, node: usize) -> anyhow::Result<()> {
    let status = admin_post(fleet.node(node).admin(), "/api/v1/decommission", None).await?;
    ensure!(
        status.as_u16() == 202,
        "decommission of node {node}: {status}"
    );
    Ok(())
}

/// iptables rules that drop every packet to or from one loopback address.
pub struct Cut {
    ip: String,
    healed: bool,
}

impl Cut {
    pub fn new(ip: String) -> anyhow::Result<Cut> {
        let cut = Cut { ip, healed: false };
        for rule in cut.rules() {
            iptables("-I", &rule)?;
        }
        Ok(cut)
    }

    fn rules(&self) -> [Vec<String>; 2] {
        let rule = |dir: &str| {
            [
                "INPUT",
                dir,
                &self.ip,
                "-m",
                "comment",
                "--comment",
                TAG,
                "-j",
                "DROP",
            ]
            .map(String::from)
            .to_vec()
        };
        [rule("-s"), rule("-d")]
    }

    pub fn heal(mut self) -> anyhow::Result<()> {
        self.healed = true;
        for rule in self.rules() {
            iptables("-D", &rule)?;
        }
        Ok(())
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        if !self.healed {
            for rule in self.rules() {
                let _ = iptables("-D", &rule);
            }
        }
    }
}

fn iptables(op: &str, rule: &[String]) -> anyhow::Result<()> {
    let out = Command::new("iptables")
        .arg("-w")
        .arg(op)
        .args(rule)
        .output()
        .context("iptables (Debian's iptables package; the soak runs as root)")?;
    if !out.status.success() {
        bail!(
            "iptables {op} {}: {}",
            rule.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Whether iptables can be used here (root, the command present).
pub fn iptables_usable() -> bool {
    Command::new("iptables")
        .args(["-w", "-S", "INPUT"])
        .output()
        .is_ok_and(|o| o.status.success())
}
