//! The soak fleet's cold tier: the repository's S3 test server
//! (`storage/examples/s3_server.rs`, s3s-fs) as a process on a fixed
//! loopback port, so that it can be killed and started again where the
//! nodes expect it. Each object is a file under `<root>/<bucket>/`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

pub const BUCKET: &str = "soak";
const ACCESS_KEY: &str = "switchyard-test";
const SECRET_KEY: &str = "switchyard-test-secret";

pub struct S3Server {
    bin: PathBuf,
    root: PathBuf,
    pub addr: SocketAddr,
    child: Option<Child>,
}

impl S3Server {
    pub fn start(bin: &Path, root: PathBuf, addr: SocketAddr) -> anyhow::Result<S3Server> {
        ensure!(
            bin.is_file(),
            "no S3 test server at {} (cargo build --release -p switchyard-storage --example s3_server, or --s3-server)",
            bin.display()
        );
        let mut s3 = S3Server {
            bin: std::fs::canonicalize(bin)?,
            root,
            addr,
            child: None,
        };
        s3.launch()?;
        Ok(s3)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn launch(&mut self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.root)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.with_extension("log"))?;
        let child = Command::new(&self.bin)
            .args(["--root".as_ref(), self.root.as_os_str()])
            .args(["--listen", &self.addr.to_string(), "--bucket", BUCKET])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("start the S3 test server")?;
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_err()
        {
            if let Some(status) = self.child.as_mut().expect("spawned").try_wait()? {
                self.child = None;
                bail!(
                    "the S3 test server exited ({status}) before it listened on {}",
                    self.addr
                );
            }
            ensure!(
                started.elapsed() < Duration::from_secs(30),
                "S3 test server not listening in 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// kill -9, as a store that goes away without a word.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// The `[storage.cold]` table of every node.
    pub fn cold_toml(&self) -> String {
        format!(
            "[storage.cold]\nservice = \"s3\"\nbucket = \"{BUCKET}\"\nendpoint = \"http://{}\"\n\
             region = \"us-east-1\"\naccess_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{SECRET_KEY}\"\n\
             huge_partition_threshold = \"4MiB\"\nio_timeout = \"5s\"\nretries = 2\nread_cache = \"32MiB\"\n\
             error_cooldown = \"5s\"\n\n",
            self.addr
        )
    }

    /// Objects left in the bucket.
    pub fn objects(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        super::fleet::walk_files(&self.root.join(BUCKET), &mut out);
        out
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
