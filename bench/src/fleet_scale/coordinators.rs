//! The three real coordinators: `switchyard serve` processes with
//! `cluster.roles = ["coordinator"]` on 127.0.6.2-4, every port the
//! default, one shared `cluster.secret`. They are the binary under test;
//! nothing of them is simulated. Each is signalled by its PID; dropping
//! [`Coordinators`] kills whatever still runs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

use crate::overload::admin_get;

/// The cluster secret of the simulation (workers send it too).
pub const SECRET: &str = "fleet-scale-secret";
/// How many coordinators the simulation runs.
pub const COUNT: usize = 3;
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// Coordinator `i` (1-based) listens on 127.0.6.(i+1).
pub fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 6, 1 + i as u8)
}

pub fn admin(i: usize) -> SocketAddr {
    SocketAddr::from((ip(i), 19990))
}

/// The cluster protocol port (workers heartbeat it).
pub fn cluster(i: usize) -> String {
    format!("{}:19980", ip(i))
}

/// The Celeborn master port.
pub fn master(i: usize) -> String {
    format!("{}:9097", ip(i))
}

/// The Uniffle coordinator's gRPC port.
pub fn uniffle(i: usize) -> String {
    format!("{}:19999", ip(i))
}

/// What the coordinators' `[cluster]` and `[celeborn]` tables set.
#[derive(Debug, Clone)]
pub struct Settings {
    pub heartbeat: Duration,
    pub worker_timeout: Duration,
    pub warmup: Duration,
    /// Celeborn's application timeout: how long the book reports an
    /// application alive after its driver's last word.
    pub app_timeout: Duration,
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn config_text(i: usize, data: &Path, s: &Settings) -> String {
    let coordinators: Vec<String> = (1..=COUNT).map(|c| format!("\"{}\"", cluster(c))).collect();
    format!(
        "[node]\nhost = \"{ip}\"\nid = \"coordinator-{i}\"\n\n[log]\nlevel = \"warn\"\n\n\
         [storage.memory]\ncapacity = \"256MiB\"\n\n\
         [storage.disks]\ndirs = [\"{data}\"]\nmin_free = \"16MiB\"\n\n\
         [celeborn]\napp_timeout = \"{app_timeout}\"\n\n\
         [cluster]\ncoordinators = [{coordinators}]\nroles = [\"coordinator\"]\n\
         secret = \"{SECRET}\"\nheartbeat_interval = \"{hb}\"\nworker_timeout = \"{timeout}\"\n\
         warmup = \"{warmup}\"\n",
        ip = ip(i),
        data = data.display(),
        app_timeout = ms(s.app_timeout),
        coordinators = coordinators.join(", "),
        hb = ms(s.heartbeat),
        timeout = ms(s.worker_timeout),
        warmup = ms(s.warmup),
    )
}

struct Node {
    dir: PathBuf,
    child: Option<Child>,
}

pub struct Coordinators {
    bin: PathBuf,
    nodes: Vec<Node>,
    _root: Option<tempfile::TempDir>,
}

impl Coordinators {
    /// Writes the configs and starts the three, one after the other; each
    /// answers `/readyz` before the next starts.
    pub async fn start(bin: &Path, root: Option<&Path>, s: &Settings) -> anyhow::Result<Self> {
        ensure!(bin.is_file(), "no switchyard binary at {}", bin.display());
        let bin = std::fs::canonicalize(bin)?;
        let (root, tmp) = match root {
            Some(r) => {
                let _ = std::fs::remove_dir_all(r);
                (r.to_path_buf(), None)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("switchyard-fleet-scale-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut nodes = Vec::new();
        for i in 1..=COUNT {
            let dir = root.join(format!("coordinator{i}"));
            std::fs::create_dir_all(dir.join("data"))?;
            std::fs::write(
                dir.join("switchyard.toml"),
                config_text(i, &dir.join("data"), s),
            )?;
            nodes.push(Node { dir, child: None });
        }
        let mut all = Coordinators {
            bin,
            nodes,
            _root: tmp,
        };
        for i in 1..=COUNT {
            all.launch(i).await?;
        }
        Ok(all)
    }

    /// Starts coordinator `i` and waits until it answers `/readyz`.
    pub async fn launch(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i - 1];
        ensure!(node.child.is_none(), "coordinator {i} already runs");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.dir.join("switchyard.log"))?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(node.dir.join("switchyard.toml"))
            .current_dir(&node.dir)
            .env_remove("SWITCHYARD_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start coordinator {i}"))?;
        node.child = Some(child);
        let started = Instant::now();
        loop {
            if let Some(status) = node.child.as_mut().expect("spawned").try_wait()? {
                node.child = None;
                bail!(
                    "coordinator {i} exited ({status}); see {}/switchyard.log",
                    node.dir.display()
                );
            }
            if admin_get(admin(i), "/readyz").await.is_ok() {
                return Ok(());
            }
            ensure!(
                started.elapsed() < READY_TIMEOUT,
                "coordinator {i} not ready in {READY_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL coordinator `i` and wait for it to be gone.
    pub fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let mut child = self.nodes[i - 1]
            .child
            .take()
            .with_context(|| format!("coordinator {i} is not running"))?;
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    pub fn pid(&self, i: usize) -> anyhow::Result<u32> {
        self.nodes[i - 1]
            .child
            .as_ref()
            .map(Child::id)
            .with_context(|| format!("coordinator {i} is not running"))
    }

    /// User + system CPU time coordinator `i` used so far.
    pub fn cpu_time(&self, i: usize) -> anyhow::Result<Duration> {
        crate::report::cpu_time_of(self.pid(i)?)
    }

    /// Its resident set size now, in bytes.
    pub fn rss(&self, i: usize) -> anyhow::Result<u64> {
        crate::report::rss_of(self.pid(i)?).context("VmRSS")
    }

    /// `/api/v1/cluster` of coordinator `i`.
    pub async fn cluster_view(&self, i: usize) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(
            &admin_get(admin(i), "/api/v1/cluster").await?,
        )?)
    }

    /// The sum of every sample of `metric` on coordinator `i`'s `/metrics`
    /// whose labels contain `labels` (e.g. `result="accepted"`; empty: all).
    pub async fn metric(&self, i: usize, metric: &str, labels: &str) -> anyhow::Result<f64> {
        let text = admin_get(admin(i), "/metrics").await?;
        Ok(sum_samples(&text, metric, labels))
    }
}

/// Sums the samples of one metric family in a Prometheus text page.
pub fn sum_samples(text: &str, metric: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| labels.is_empty() || l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

impl Drop for Coordinators {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_of_one_family_are_summed_by_label() {
        let page = "# TYPE x counter\nx{result=\"ok\"} 3\nx{result=\"failed\"} 2\nx_total 9\nx 4\n";
        assert_eq!(sum_samples(page, "x", "result=\"ok\""), 3.0);
        // `x_total` is another family; the bare `x 4` counts.
        assert_eq!(sum_samples(page, "x", ""), 9.0);
        assert_eq!(sum_samples(page, "y", ""), 0.0);
    }
}
