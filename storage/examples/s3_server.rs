//! A small S3-compatible server for tests: s3s-fs (each object a file under
//! `<root>/<bucket>/`) on a loopback address, with fixed test credentials.
//! The Spark integration tests (`integration/`, `ColdTierSkewedShuffleTest`)
//! start it as a child process to give Switchyard's cold tier a real S3
//! endpoint.
//!
//! ```text
//! cargo build -p switchyard-storage --example s3_server
//! target/debug/examples/s3_server --root DIR [--listen 127.0.0.1:0]
//!     [--bucket NAME]... [--address-file FILE] [--exit-on-stdin-eof]
//! ```
//!
//! Buckets named with `--bucket` are created (as directories) before the
//! server starts. Once it listens it prints `s3_server listening on
//! http://ADDR` and, with `--address-file`, writes `ADDR` (`127.0.0.1:PORT`)
//! to that file (written to a temporary name, then renamed, so a reader never
//! sees half of it). It stops on SIGTERM or SIGINT, and with
//! `--exit-on-stdin-eof` also when its standard input closes (so a parent that
//! dies without stopping it does not leave it behind). Credentials:
//! `SWITCHYARD_S3_ACCESS_KEY` / `SWITCHYARD_S3_SECRET_KEY`, default
//! `switchyard-test` / `switchyard-test-secret`. Every request is signed and
//! checked; path-style requests only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use switchyard_storage::data_dir::write_atomic;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinSet;

const DEFAULT_ACCESS_KEY: &str = "switchyard-test";
const DEFAULT_SECRET_KEY: &str = "switchyard-test-secret";

struct Args {
    root: PathBuf,
    listen: SocketAddr,
    buckets: Vec<String>,
    address_file: Option<PathBuf>,
    exit_on_stdin_eof: bool,
}

const USAGE: &str = "usage: s3_server --root DIR [--listen 127.0.0.1:0] [--bucket NAME]... \
                     [--address-file FILE] [--exit-on-stdin-eof]";

/// A command line the server does not take; exit status 2.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("{USAGE}")]
    Help,
    #[error("{0} needs a value")]
    NoValue(String),
    #[error("--listen {0:?}: {1} (want IP:PORT)")]
    Listen(String, std::net::AddrParseError),
    #[error("unknown argument {0:?}\n{USAGE}")]
    Unknown(String),
    #[error("--root is required\n{USAGE}")]
    NoRoot,
    #[error("bad bucket name {0:?}")]
    Bucket(String),
}

/// Why the server could not start; exit status 1.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("create {0}: {1}")]
    Bucket(String, std::io::Error),
    #[error("s3s-fs over {0}: {1:?}")]
    Fs(String, s3s_fs::Error),
    #[error("bind {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("write {0}: {1}")]
    AddressFile(String, std::io::Error),
    /// The bound address or a signal handler.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn parse_args() -> Result<Args, ArgsError> {
    let mut root = None;
    let mut listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut buckets = Vec::new();
    let mut address_file = None;
    let mut exit_on_stdin_eof = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| ArgsError::NoValue(name.into()));
        match arg.as_str() {
            "--root" => root = Some(PathBuf::from(value("--root")?)),
            "--listen" => {
                let v = value("--listen")?;
                listen = v.parse().map_err(|e| ArgsError::Listen(v, e))?;
            }
            "--bucket" => buckets.push(value("--bucket")?),
            "--address-file" => address_file = Some(PathBuf::from(value("--address-file")?)),
            "--exit-on-stdin-eof" => exit_on_stdin_eof = true,
            "-h" | "--help" => return Err(ArgsError::Help),
            other => return Err(ArgsError::Unknown(other.into())),
        }
    }
    let root = root.ok_or(ArgsError::NoRoot)?;
    for b in &buckets {
        if b.is_empty() || b.contains('/') || b.starts_with('.') {
            return Err(ArgsError::Bucket(b.clone()));
        }
    }
    Ok(Args {
        root,
        listen,
        buckets,
        address_file,
        exit_on_stdin_eof,
    })
}

fn credential(var: &str, default: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => default.to_string(),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("s3_server: {e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("s3_server: error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), StartError> {
    for b in &args.buckets {
        // s3s-fs keeps a bucket as a directory below its root.
        let dir = args.root.join(b);
        std::fs::create_dir_all(&dir)
            .map_err(|e| StartError::Bucket(dir.display().to_string(), e))?;
    }
    let fs = s3s_fs::FileSystem::new(&args.root)
        .map_err(|e| StartError::Fs(args.root.display().to_string(), e))?;
    let service = {
        let mut b = S3ServiceBuilder::new(fs);
        b.set_auth(SimpleAuth::from_single(
            credential("SWITCHYARD_S3_ACCESS_KEY", DEFAULT_ACCESS_KEY),
            credential("SWITCHYARD_S3_SECRET_KEY", DEFAULT_SECRET_KEY),
        ));
        b.build()
    };
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| StartError::Bind(args.listen, e))?;
    let addr = listener.local_addr()?;
    if let Some(file) = &args.address_file {
        write_atomic(file, format!("{addr}\n").as_bytes())
            .map_err(|e| StartError::AddressFile(file.display().to_string(), e))?;
    }
    println!(
        "s3_server listening on http://{addr}, root {}, buckets {:?}",
        args.root.display(),
        args.buckets
    );

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (eof_tx, mut eof) = tokio::sync::oneshot::channel::<()>();
    if args.exit_on_stdin_eof {
        tokio::spawn(async move {
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 256];
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
            let _ = eof_tx.send(());
        });
    } else {
        // Never fires: keep the sender alive for the life of the process.
        std::mem::forget(eof_tx);
    }

    let http = Builder::new(TokioExecutor::new());
    let mut connections = JoinSet::new();
    let why = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        eprintln!("s3_server: accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let conn = http
                    .serve_connection(TokioIo::new(socket), service.clone())
                    .into_owned();
                connections.spawn(async move {
                    let _ = conn.await;
                });
                // Reap finished connections so the set does not grow without bound.
                while connections.try_join_next().is_some() {}
            }
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            _ = &mut eof => break "standard input closed",
        }
    };
    println!("s3_server stopping ({why})");
    connections.shutdown().await;
    Ok(())
}
