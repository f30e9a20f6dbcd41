//! The JVM servers in the same run: an upstream Celeborn master and worker
//! and an upstream Uniffle coordinator and shuffle server, started from
//! their own jars (`JVM_CELEBORN_CLASSPATH`, `JVM_UNIFFLE_CLASSPATH`, built
//! outside this repository as `integration/bench-spark.sh` says). The
//! victims and the aggressor then run against them as against the
//! Switchyard node. The JVM servers have no disk throttle of their own, so
//! their data goes to the directory given, on a device that is itself
//! throttled (`bench/throttled-disk.sh`). Each server gets the node's whole
//! memory budget: the worker as direct memory, the shuffle server as its
//! buffer. Ports are free ones on 127.0.0.1; stopped by PID.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::overload::admin_get;
use crate::soak::fleet::tail_of as tail;

/// How long a server may take to open its port and register.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// What the JVM servers are given.
pub struct JvmOptions {
    pub celeborn_classpath: String,
    pub uniffle_classpath: String,
    /// Bytes: the Celeborn worker's direct memory and the Uniffle server's buffer.
    pub memory: u64,
    /// Their data and logs (on the throttled device).
    pub dir: PathBuf,
    /// Bytes each server leaves free on the disk.
    pub min_free: u64,
}

impl JvmOptions {
    /// The classpaths from the environment: `None` when neither is set, an
    /// error when only one is (every victim round needs both servers).
    pub fn classpaths() -> anyhow::Result<Option<(String, String)>> {
        let get = |v: &str| std::env::var(v).ok().filter(|s| !s.trim().is_empty());
        match (get("JVM_CELEBORN_CLASSPATH"), get("JVM_UNIFFLE_CLASSPATH")) {
            (None, None) => Ok(None),
            (Some(c), Some(u)) => Ok(Some((c, u))),
            _ => bail!(
                "the JVM comparison needs both JVM_CELEBORN_CLASSPATH and JVM_UNIFFLE_CLASSPATH \
                 (each victim round runs a Celeborn and a Uniffle client)"
            ),
        }
    }
}

/// Every port the four processes listen on.
#[derive(Debug, Clone, Copy)]
struct Ports {
    master: u16,
    master_http: u16,
    push: u16,
    fetch: u16,
    replicate: u16,
    worker_http: u16,
    coordinator: u16,
    coordinator_http: u16,
    server: u16,
    server_http: u16,
    server_netty: u16,
}

impl Ports {
    /// Ports free on 127.0.0.1 now: all held open together, so none repeats.
    fn free() -> anyhow::Result<Ports> {
        let p = crate::harness::free_loopback_ports(11)?;
        Ok(Ports {
            master: p[0],
            master_http: p[1],
            push: p[2],
            fetch: p[3],
            replicate: p[4],
            worker_http: p[5],
            coordinator: p[6],
            coordinator_http: p[7],
            server: p[8],
            server_http: p[9],
            server_netty: p[10],
        })
    }
}

/// The Celeborn master's and worker's `celeborn-defaults.conf`. HA and
/// metrics off; the disk reserve is the node's `min_free` (the default 5
/// GiB would leave a small device no room).
fn celeborn_conf(p: &Ports, data: &Path, min_free: u64) -> String {
    [
        "celeborn.master.host 127.0.0.1".to_string(),
        format!("celeborn.master.port {}", p.master),
        format!("celeborn.master.endpoints 127.0.0.1:{}", p.master),
        format!("celeborn.master.http.port {}", p.master_http),
        "celeborn.master.http.host 127.0.0.1".into(),
        format!("celeborn.worker.http.port {}", p.worker_http),
        "celeborn.worker.http.host 127.0.0.1".into(),
        format!("celeborn.worker.push.port {}", p.push),
        format!("celeborn.worker.fetch.port {}", p.fetch),
        format!("celeborn.worker.replicate.port {}", p.replicate),
        "celeborn.master.ha.enabled false".into(),
        "celeborn.metrics.enabled false".into(),
        format!("celeborn.worker.storage.dirs {}", data.display()),
        format!("celeborn.worker.storage.disk.reserve.size {min_free}"),
    ]
    .join("\n")
        + "\n"
}

/// The Uniffle coordinator's and shuffle server's conf files.
/// The server takes both transports (GRPC_NETTY serves gRPC too), as
/// Switchyard does, whichever the victims and the aggressor use.
fn uniffle_confs(p: &Ports, data: &Path, memory: u64) -> (String, String) {
    let coordinator = [
        format!("rss.rpc.server.port {}", p.coordinator),
        format!("rss.jetty.http.port {}", p.coordinator_http),
        "rss.coordinator.server.heartbeat.timeout 30000".into(),
        "rss.coordinator.app.expired 60000".into(),
    ];
    let server = [
        format!("rss.rpc.server.port {}", p.server),
        format!("rss.jetty.http.port {}", p.server_http),
        format!("rss.server.netty.port {}", p.server_netty),
        "rss.rpc.server.type GRPC_NETTY".into(),
        format!("rss.coordinator.quorum 127.0.0.1:{}", p.coordinator),
        "rss.storage.type MEMORY_LOCALFILE".into(),
        format!("rss.storage.basePath {}", data.display()),
        format!("rss.server.buffer.capacity {}mb", (memory >> 20).max(1)),
        "rss.server.read.buffer.capacity 128mb".into(),
        "rss.server.heartbeat.interval 2000".into(),
    ];
    (coordinator.join("\n") + "\n", server.join("\n") + "\n")
}

/// Their log4j2 configuration: INFO to the console, which goes to the log
/// file (the jars carry none, and log nothing without one).
const LOG4J2: &str = "rootLogger.level = info\n\
rootLogger.appenderRef.stdout.ref = console\n\
appender.console.type = Console\n\
appender.console.name = console\n\
appender.console.layout.type = PatternLayout\n\
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n\n";

/// Each process's environment: the address it registers under. Both
/// would take the machine's hostname otherwise, off loopback.
const CELEBORN_ENV: (&str, &str) = ("CELEBORN_LOCAL_HOSTNAME", "127.0.0.1");
const UNIFFLE_ENV: (&str, &str) = ("RSS_IP", "127.0.0.1");

/// The JVM options every server needs on Java 17 (Netty's direct buffers).
const OPENS: [&str; 6] = [
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
];

/// How one JVM is started.
struct Java<'a> {
    classpath: &'a str,
    heap: &'a str,
    opts: &'a [String],
    env: (&'a str, &'a str),
}

struct Process {
    name: &'static str,
    child: Child,
}

/// The four running servers.
pub struct JvmServers {
    pub dir: PathBuf,
    ports: Ports,
    procs: Vec<Process>,
}

impl JvmServers {
    /// Starts the Celeborn pair, then the Uniffle pair; returns once both
    /// workers have registered with their master and coordinator.
    pub async fn start(o: &JvmOptions) -> anyhow::Result<JvmServers> {
        let dir = o.dir.clone();
        std::fs::create_dir_all(dir.join("celeborn-data"))?;
        std::fs::create_dir_all(dir.join("uniffle-data"))?;
        std::fs::write(dir.join("log4j2.properties"), LOG4J2)?;
        let ports = Ports::free()?;
        let mut s = JvmServers {
            dir,
            ports,
            procs: Vec::new(),
        };
        s.start_celeborn(o).await?;
        s.start_uniffle(o).await?;
        Ok(s)
    }

    async fn start_celeborn(&mut self, o: &JvmOptions) -> anyhow::Result<()> {
        let p = self.ports;
        let conf = self.dir.join("celeborn-defaults.conf");
        let data = self.dir.join("celeborn-data");
        std::fs::write(&conf, celeborn_conf(&p, &data, o.min_free))?;
        let conf = conf.display().to_string();
        let direct = format!("-XX:MaxDirectMemorySize={}", o.memory);
        let master = [
            "org.apache.celeborn.service.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            &p.master.to_string(),
            "--properties-file",
            &conf,
        ]
        .map(String::from);
        let mut java = Java {
            classpath: &o.celeborn_classpath,
            heap: "1g",
            opts: &[],
            env: CELEBORN_ENV,
        };
        self.launch("jvm-celeborn-master", &java, &master)?;
        self.wait_port("jvm-celeborn-master", p.master).await?;
        let worker = [
            "org.apache.celeborn.service.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--properties-file",
            &conf,
        ]
        .map(String::from);
        let direct = [direct];
        java.opts = &direct;
        self.launch("jvm-celeborn-worker", &java, &worker)?;
        self.wait_port("jvm-celeborn-worker", p.push).await?;
        let url = SocketAddr::from(([127, 0, 0, 1], p.master_http));
        self.wait_listed("jvm-celeborn-worker", url, "/api/v1/workers", p.push)
            .await
    }

    async fn start_uniffle(&mut self, o: &JvmOptions) -> anyhow::Result<()> {
        let p = self.ports;
        let data = self.dir.join("uniffle-data");
        let (coordinator, server) = uniffle_confs(&p, &data, o.memory);
        let (cc, sc) = (
            self.dir.join("coordinator.conf"),
            self.dir.join("server.conf"),
        );
        std::fs::write(&cc, coordinator)?;
        std::fs::write(&sc, server)?;
        // The server's buffer is on the heap: room for it and for reads.
        let direct = "-XX:MaxDirectMemorySize=1g".to_string();
        let main = |class: &str, conf: &Path| {
            [class, "--conf", &conf.display().to_string()].map(String::from)
        };
        let coordinator = main("org.apache.uniffle.coordinator.CoordinatorServer", &cc);
        let mut java = Java {
            classpath: &o.uniffle_classpath,
            heap: "1g",
            opts: &[],
            env: UNIFFLE_ENV,
        };
        self.launch("jvm-uniffle-coordinator", &java, &coordinator)?;
        self.wait_port("jvm-uniffle-coordinator", p.coordinator)
            .await?;
        let server = main("org.apache.uniffle.server.ShuffleServer", &sc);
        let direct = [direct];
        (java.heap, java.opts) = ("2g", &direct);
        self.launch("jvm-uniffle-server", &java, &server)?;
        self.wait_port("jvm-uniffle-server", p.server).await?;
        let url = SocketAddr::from(([127, 0, 0, 1], p.coordinator_http));
        self.wait_listed("jvm-uniffle-server", url, "/api/server/nodes", p.server)
            .await
    }

    /// `java -Xmx<heap> <opts> -cp <cp> <main...>`, its output to `<name>.log`.
    fn launch(&mut self, name: &'static str, j: &Java<'_>, main: &[String]) -> anyhow::Result<()> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))?;
        let log4j = self.dir.join("log4j2.properties");
        let child = Command::new(java())
            .env(j.env.0, j.env.1)
            .arg(format!("-Xmx{}", j.heap))
            .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
            .args(j.opts)
            .args(OPENS)
            .arg("-cp")
            .arg(j.classpath)
            .args(main)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {name} ({})", java().display()))?;
        self.procs.push(Process { name, child });
        Ok(())
    }

    async fn wait_port(&mut self, name: &str, port: u16) -> anyhow::Result<()> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            self.ensure_alive()?;
            ensure!(
                started.elapsed() < READY_TIMEOUT,
                "{name} did not open port {port} within {READY_TIMEOUT:?}:\n{}",
                self.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// Waits until the master's (coordinator's) HTTP listing names the
    /// worker's (server's) port: a job that asks before that gets no slots.
    async fn wait_listed(
        &mut self,
        name: &str,
        http: SocketAddr,
        path: &str,
        port: u16,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Ok(body) = admin_get(http, path).await {
                if body.contains(&port.to_string()) {
                    return Ok(());
                }
            }
            self.ensure_alive()?;
            ensure!(
                started.elapsed() < READY_TIMEOUT,
                "{name} was not listed at http://{http}{path} within {READY_TIMEOUT:?}:\n{}",
                self.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn ensure_alive(&mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "{} exited ({status}):\n{}",
                    p.name,
                    tail(&self.dir.join(format!("{}.log", p.name)), 20)
                );
            }
        }
        Ok(())
    }

    pub fn celeborn_master(&self) -> String {
        format!("127.0.0.1:{}", self.ports.master)
    }

    pub fn uniffle_coordinator(&self) -> String {
        format!("127.0.0.1:{}", self.ports.coordinator)
    }

    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.child.id()).collect()
    }

    /// The last lines of every server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.procs
            .iter()
            .map(|p| {
                let log = self.dir.join(format!("{}.log", p.name));
                format!("== {} ==\n{}", p.name, tail(&log, lines))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM to each, the last started first; up to 20 s each, then SIGKILL.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        while let Some(mut p) = self.procs.pop() {
            let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
            let started = Instant::now();
            while p.child.try_wait()?.is_none() {
                if started.elapsed() > Duration::from_secs(20) {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

impl Drop for JvmServers {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// `$JAVA_HOME/bin/java`, else `java` from the path.
fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|j| j.is_file())
        .unwrap_or_else(|| "java".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(text: &str) -> std::collections::HashMap<String, String> {
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ports_are_distinct() {
        let p = Ports::free().unwrap();
        let mut all = vec![
            p.master,
            p.master_http,
            p.push,
            p.fetch,
            p.replicate,
            p.worker_http,
            p.coordinator,
            p.coordinator_http,
            p.server,
            p.server_http,
            p.server_netty,
        ];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 11);
    }

    #[test]
    fn confs_name_the_ports_the_disk_and_the_memory() {
        let p = Ports::free().unwrap();
        let c = kv(&celeborn_conf(&p, Path::new("/d/c"), 256 << 20));
        assert_eq!(
            c["celeborn.master.endpoints"],
            format!("127.0.0.1:{}", p.master)
        );
        assert_eq!(c["celeborn.worker.push.port"], p.push.to_string());
        assert_eq!(c["celeborn.worker.storage.dirs"], "/d/c");
        assert_eq!(
            c["celeborn.worker.storage.disk.reserve.size"],
            (256u64 << 20).to_string()
        );
        let (coordinator, server) = uniffle_confs(&p, Path::new("/d/u"), 256 << 20);
        let (co, se) = (kv(&coordinator), kv(&server));
        assert_eq!(co["rss.rpc.server.port"], p.coordinator.to_string());
        assert_eq!(
            se["rss.coordinator.quorum"],
            format!("127.0.0.1:{}", p.coordinator)
        );
        assert_eq!(se["rss.server.buffer.capacity"], "256mb");
        assert_eq!(se["rss.rpc.server.type"], "GRPC_NETTY");
        assert_eq!(se["rss.storage.basePath"], "/d/u");
    }

    #[test]
    fn one_classpath_alone_is_an_error() {
        // The only test touching these variables.
        std::env::set_var("JVM_CELEBORN_CLASSPATH", "/x/*");
        std::env::remove_var("JVM_UNIFFLE_CLASSPATH");
        assert!(JvmOptions::classpaths().is_err());
        std::env::set_var("JVM_UNIFFLE_CLASSPATH", "/y/*");
        assert_eq!(
            JvmOptions::classpaths().unwrap(),
            Some(("/x/*".into(), "/y/*".into()))
        );
        std::env::remove_var("JVM_CELEBORN_CLASSPATH");
        std::env::remove_var("JVM_UNIFFLE_CLASSPATH");
        assert_eq!(JvmOptions::classpaths().unwrap(), None);
    }
}
