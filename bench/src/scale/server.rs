//! The node under test: a `switchyard serve` child process on free loopback
//! ports, a fleet of one (it heartbeats its own coordinator, as a node of a
//! fleet does), killed with SIGKILL and restarted on the same directory.
//! Its RSS and CPU time come from `/proc/<pid>`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// Every port the node listens on.
#[derive(Debug, Clone)]
pub struct Ports {
    pub admin: u16,
    pub cluster: u16,
    pub uniffle_coordinator: u16,
    pub uniffle_grpc: u16,
    pub uniffle_netty: u16,
    pub celeborn_master: u16,
    pub celeborn_rpc: u16,
    pub celeborn_push: u16,
    pub celeborn_fetch: u16,
    pub celeborn_replicate: u16,
}

impl Ports {
    /// Ten ports the kernel hands out now (all held until each is known,
    /// so they differ).
    fn free() -> anyhow::Result<Ports> {
        let p = crate::harness::free_loopback_ports(10)?;
        Ok(Ports {
            admin: p[0],
            cluster: p[1],
            uniffle_coordinator: p[2],
            uniffle_grpc: p[3],
            uniffle_netty: p[4],
            celeborn_master: p[5],
            celeborn_rpc: p[6],
            celeborn_push: p[7],
            celeborn_fetch: p[8],
            celeborn_replicate: p[9],
        })
    }

    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin))
    }
}

/// What the node's config sets beyond ports and directories.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub memory: String,
    /// Both protocols' application lease.
    pub lease: Duration,
    pub expiry_check: Duration,
    pub heartbeat: Duration,
}

pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    config: PathBuf,
    pub ports: Ports,
    child: Option<Child>,
}

fn secs(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

fn config_text(ports: &Ports, data: &Path, s: &NodeSettings) -> String {
    let p = ports;
    let listen = |port: u16| format!("\"127.0.0.1:{port}\"");
    format!(
        "[node]\nid = \"scale-bench\"\n\n[admin]\nlisten = {}\n\n[log]\nlevel = \"warn\"\n\n\
         [storage.memory]\ncapacity = \"{}\"\n\n\
         [storage.disks]\ndirs = [\"{}\"]\nmin_free = \"1GiB\"\n\n\
         [storage.apps]\nexpiry = \"{}\"\nexpiry_check_interval = \"{}\"\n\n\
         [uniffle]\ncoordinator_listen = {}\nserver_grpc_listen = {}\nserver_netty_listen = {}\n\n\
         [celeborn]\nmaster_listen = {}\nworker_rpc_listen = {}\nworker_push_listen = {}\n\
         worker_fetch_listen = {}\nworker_replicate_listen = {}\napp_timeout = \"{}\"\n\n\
         [cluster]\ncoordinators = [{}]\nlisten = {}\nsecret = \"scale-bench-secret\"\n\
         heartbeat_interval = \"{}\"\nwarmup = \"0s\"\n",
        listen(p.admin),
        s.memory,
        data.display(),
        secs(s.lease),
        secs(s.expiry_check),
        listen(p.uniffle_coordinator),
        listen(p.uniffle_grpc),
        listen(p.uniffle_netty),
        listen(p.celeborn_master),
        listen(p.celeborn_rpc),
        listen(p.celeborn_push),
        listen(p.celeborn_fetch),
        listen(p.celeborn_replicate),
        secs(s.lease),
        listen(p.cluster),
        listen(p.cluster),
        secs(s.heartbeat),
    )
}

impl Server {
    /// Writes the config into a fresh `dir` and starts the node; returns
    /// once it answers `/readyz`.
    pub async fn start(bin: &Path, dir: &Path, settings: &NodeSettings) -> anyhow::Result<Server> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("data"))?;
        let dir = dir.canonicalize()?;
        let ports = Ports::free()?;
        let config = dir.join("switchyard.toml");
        std::fs::write(&config, config_text(&ports, &dir.join("data"), settings))?;
        let mut server = Server {
            bin: bin.to_path_buf(),
            dir,
            config,
            ports,
            child: None,
        };
        server.spawn()?;
        server.wait_ready(Duration::from_secs(120)).await?;
        Ok(server)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))?;
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Polls `/readyz` until it answers 200; the time it took.
    pub async fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let client = http_client()?;
        let url = format!("http://{}/readyz", self.ports.admin_addr());
        while started.elapsed() < limit {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "the node exited with {status}; see {}/server.log",
                        self.dir.display()
                    );
                }
            }
            if let Ok(r) = client.get(&url).send().await {
                if r.status().is_success() {
                    return Ok(started.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!("the node was not ready within {limit:?}")
    }

    /// SIGKILL, then a new process on the same config and data; the time
    /// from the kill until it answers `/readyz`.
    pub async fn kill_and_restart(&mut self) -> anyhow::Result<Duration> {
        let mut child = self.child.take().context("no node running")?;
        let killed = Instant::now();
        child.kill()?;
        child.wait()?;
        self.spawn()?;
        self.wait_ready(Duration::from_secs(600)).await?;
        Ok(killed.elapsed())
    }

    /// Current resident set size, in bytes.
    pub fn rss(&self) -> anyhow::Result<u64> {
        crate::report::rss_of(self.pid()).context("VmRSS of the node")
    }

    /// User + system CPU time the node has used so far.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        crate::report::cpu_time_of(self.pid())
    }

    /// GET on the admin port; the body.
    pub async fn get(&self, path: &str) -> anyhow::Result<String> {
        let url = format!("http://{}{path}", self.ports.admin_addr());
        let r = http_client()?.get(&url).send().await?;
        ensure!(r.status().is_success(), "GET {url}: {}", r.status());
        Ok(r.text().await?)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn http_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()?)
}
