//! The one node under test: `switchyard serve` on its own loopback address,
//! every role on its default port, with a small memory budget and one data
//! directory whose writes are throttled, so that the disk and not the two
//! CPUs is what the aggressor and the victims share. Stopped by PID with
//! SIGTERM at the end, and killed when dropped (an error on the way).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::soak::fleet;

/// What the node is given.
pub struct NodeOptions {
    pub bin: PathBuf,
    pub ip: Ipv4Addr,
    /// `storage.memory.capacity`, bytes.
    pub memory: u64,
    /// `storage.disks.write_rate_limit` and `read_rate_limit`, bytes per second.
    pub write_rate: u64,
    pub read_rate: u64,
    /// `storage.disks.min_free`, bytes: the default 2 GiB reserve would
    /// refuse writes on a CI machine's small scratch disk.
    pub min_free: u64,
    /// Bytes the run will hold on the disk at most (beyond `min_free`).
    pub disk_need: u64,
    /// Where its directory goes (a temporary directory when none).
    pub root: Option<PathBuf>,
}

pub struct Node {
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    child: Option<Child>,
    _tmp: Option<tempfile::TempDir>,
}

/// The node's config: the budget and the throttled disk; everything else
/// at its default (a node alone places Celeborn slots and Uniffle
/// assignments on itself). Sizes are written as plain bytes, which the
/// config reads exactly.
fn config_text(o: &NodeOptions, data: &Path) -> String {
    format!(
        "[node]\nhost = \"{ip}\"\n\n[log]\nlevel = \"info\"\n\n\
         [storage.memory]\ncapacity = {memory}\n\n\
         [storage.disks]\ndirs = [\"{data}\"]\nwrite_rate_limit = {write}\nread_rate_limit = {read}\n\
         min_free = {min_free}\n",
        ip = o.ip,
        memory = o.memory,
        data = data.display(),
        write = o.write_rate,
        read = o.read_rate,
        min_free = o.min_free,
    )
}

impl Node {
    /// Writes the config and starts the node; returns once it is ready.
    pub async fn start(o: &NodeOptions) -> anyhow::Result<Node> {
        ensure!(
            o.bin.is_file(),
            "no switchyard binary at {} (cargo build --release -p switchyard, or --bin)",
            o.bin.display()
        );
        // The node runs in its own directory: the binary's path must not be relative to ours.
        let bin = std::fs::canonicalize(&o.bin)?;
        let (dir, tmp) = match &o.root {
            Some(r) => (r.clone(), None),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("switchyard-neighbours-")
                    .tempdir()?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let data = dir.join("data");
        std::fs::create_dir_all(&data)?;
        ensure_space(&data, o.min_free + o.disk_need)?;
        let config = dir.join("switchyard.toml");
        std::fs::write(&config, config_text(o, &data))?;
        let admin = SocketAddr::from((o.ip, 19990));
        let child = fleet::serve(&bin, &config, &dir, admin, "the node").await?;
        Ok(Node {
            ip: o.ip,
            dir,
            child: Some(child),
            _tmp: tmp,
        })
    }

    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 19990))
    }

    pub fn uniffle_coordinator(&self) -> String {
        format!("{}:19999", self.ip)
    }

    pub fn celeborn_master(&self) -> String {
        format!("{}:9097", self.ip)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then up to 30 s for it to exit (Celeborn's drain waits a
    /// second after the last push); SIGKILL after that.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).context("SIGTERM the node")?;
        let started = Instant::now();
        while child.try_wait()?.is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!(
                    "the node did not stop within 30 s of SIGTERM (killed):\n{}",
                    fleet::log_tail(&self.dir, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        fleet::log_tail(&self.dir, lines)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Fails, naming the directory and the figures, when its filesystem has
/// less room than the run needs: a full disk otherwise shows up later as
/// a node that never gets ready.
pub(crate) fn ensure_space(dir: &Path, need: u64) -> anyhow::Result<()> {
    let st =
        nix::sys::statvfs::statvfs(dir).with_context(|| format!("statvfs {}", dir.display()))?;
    let available: u64 = st.blocks_available() * st.fragment_size();
    ensure!(
        available >= need,
        "{} has {} MiB free; the run needs {} MiB (the aggressor's applications plus \
         --min-free): give --dir on a larger disk",
        dir.display(),
        available >> 20,
        need >> 20
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_the_budget_and_the_throttled_disk() {
        let o = NodeOptions {
            bin: "switchyard".into(),
            ip: Ipv4Addr::new(127, 0, 4, 2),
            memory: 256 << 20,
            write_rate: 64 << 20,
            read_rate: 128 << 20,
            min_free: 64 << 20,
            disk_need: 0,
            root: None,
        };
        let text = config_text(&o, Path::new("/tmp/x/data"));
        let v: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(v["node"]["host"].as_str(), Some("127.0.4.2"));
        assert_eq!(
            v["storage"]["memory"]["capacity"].as_integer(),
            Some(256 << 20)
        );
        let disks = &v["storage"]["disks"];
        assert_eq!(disks["write_rate_limit"].as_integer(), Some(64 << 20));
        assert_eq!(disks["read_rate_limit"].as_integer(), Some(128 << 20));
        assert_eq!(disks["min_free"].as_integer(), Some(64 << 20));
        assert_eq!(disks["dirs"][0].as_str(), Some("/tmp/x/data"));
    }
}
