//! The node's identity: a stable id that logs, metrics, the status page and
//! Uniffle's shuffle-server id carry.
//!
//! The id is `node.id` (or `SWITCHYARD_NODE_ID`) when set; otherwise the one
//! persisted in the first data directory's `node-id` file; otherwise a new
//! `sy-<12 hex digits>`, written there on first start. A configured id that
//! differs from the persisted one wins: the file is rewritten (and a warning
//! logged), so the next start without `node.id` keeps it. With no data
//! directory (a cold-tier-only node) nothing is persisted: without `node.id`
//! each start has a new id.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use switchyard_celeborn::server::worker::WorkerAddr;
use switchyard_celeborn::CelebornAddrs;
use switchyard_storage::data_dir;
use switchyard_uniffle::UniffleAddrs;

use crate::config::check_node_id;

/// Where the id in use came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdSource {
    /// `node.id` / `SWITCHYARD_NODE_ID`.
    Config,
    /// The `node-id` file of an earlier start.
    Persisted,
    /// New on this start, and written to the `node-id` file.
    Generated,
    /// New on this start and not persisted (no data directory).
    Ephemeral,
}

impl IdSource {
    pub fn as_str(self) -> &'static str {
        match self {
            IdSource::Config => "config",
            IdSource::Persisted => "persisted",
            IdSource::Generated => "generated",
            IdSource::Ephemeral => "ephemeral",
        }
    }
}

#[derive(Clone, Debug)]
pub struct NodeIdentity {
    pub id: String,
    pub source: IdSource,
    /// The file holding the id, when there is a data directory.
    pub file: Option<PathBuf>,
    /// A different id that the file held before a configured id replaced it.
    pub replaced: Option<String>,
}

/// Decides this node's id (see the module doc); creates the first data
/// directory if needed. Fails on an unreadable or invalid `node-id` file, or
/// when the id cannot be written.
pub fn resolve(configured: Option<&str>, dirs: &[PathBuf]) -> anyhow::Result<NodeIdentity> {
    let (Some(dir), Some(file)) = (data_dir::state_dir(dirs), data_dir::node_id_path(dirs)) else {
        return Ok(match configured {
            Some(id) => NodeIdentity {
                id: id.to_string(),
                source: IdSource::Config,
                file: None,
                replaced: None,
            },
            None => NodeIdentity {
                id: generate(),
                source: IdSource::Ephemeral,
                file: None,
                replaced: None,
            },
        });
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let persisted = read_id(&file)?;
    let (id, source, replaced) = match (configured, persisted) {
        (Some(c), Some(p)) if c == p => (p, IdSource::Config, None),
        // The configured id wins, even over a file that holds no valid id.
        (Some(c), p) => {
            write_id(&file, c)?;
            (c.to_string(), IdSource::Config, p)
        }
        (None, Some(p)) => {
            check_node_id(&p).map_err(|e| {
                anyhow::anyhow!(
                    "{} holds no valid node id ({e}); fix it, delete it for a new id, or set node.id",
                    file.display()
                )
            })?;
            (p, IdSource::Persisted, None)
        }
        (None, None) => {
            let id = generate();
            write_id(&file, &id)?;
            (id, IdSource::Generated, None)
        }
    };
    Ok(NodeIdentity {
        id,
        source,
        file: Some(file),
        replaced,
    })
}

/// `sy-` and 12 random hex digits (48 bits).
pub fn generate() -> String {
    format!("sy-{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// The file's content, trimmed (not yet checked); `None` if there is no file.
fn read_id(file: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot read {}", file.display()))),
    }
}

/// Writes `id` and a newline to `file` atomically: a crash leaves the old
/// id or the new one, never a torn file.
fn write_id(file: &Path, id: &str) -> anyhow::Result<()> {
    data_dir::write_atomic(file, format!("{id}\n").as_bytes())
        .with_context(|| format!("cannot write the node id to {}", file.display()))
}

/// The `node` object of `/api/v1/status`: the id and the address at which
/// clients reach each role (the advertised host with the bound port).
#[derive(Clone, Debug, Serialize)]
pub struct NodeStatus {
    pub id: String,
    pub id_source: IdSource,
    /// `node.host`, when set.
    pub host: Option<IpAddr>,
    /// The admin HTTP server's bound address.
    pub admin: SocketAddr,
    pub uniffle: Option<UniffleStatus>,
    pub celeborn: Option<CelebornStatus>,
}

#[derive(Clone, Debug, Serialize)]
pub struct UniffleStatus {
    /// `ShuffleServerId.id` sent to coordinators and clients: the node id.
    pub server_id: String,
    /// None without the coordinator role.
    pub coordinator: Option<String>,
    /// None on a coordinator-only node.
    pub server_grpc: Option<String>,
    pub server_netty: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CelebornStatus {
    /// None without the master role.
    pub master: Option<String>,
    /// Celeborn's worker identity, `host:rpc:push:fetch:replicate`; the wire
    /// has no field for the node id. The worker fields are None on a
    /// coordinator-only node.
    pub worker_id: Option<String>,
    pub worker_rpc: Option<String>,
    pub worker_push: Option<String>,
    pub worker_fetch: Option<String>,
    pub worker_replicate: Option<String>,
}

impl UniffleStatus {
    pub fn new(addrs: &UniffleAddrs) -> Self {
        let host = &addrs.server_id.ip;
        UniffleStatus {
            server_id: addrs.server_id.id.clone(),
            coordinator: addrs.coordinator.map(|a| host_port(host, a.port())),
            server_grpc: addrs.server_grpc.map(|a| host_port(host, a.port())),
            server_netty: addrs.server_netty.map(|a| host_port(host, a.port())),
        }
    }
}

impl CelebornStatus {
    pub fn new(addrs: &CelebornAddrs) -> Self {
        let w = addrs.worker.as_ref();
        let at = |port: fn(&WorkerAddr) -> i32| w.map(|w| host_port(&w.host, port(w) as u16));
        CelebornStatus {
            master: addrs.master.map(|a| host_port(&addrs.host, a.port())),
            worker_id: w.map(WorkerAddr::unique_id),
            worker_rpc: at(|w| w.rpc_port),
            worker_push: at(|w| w.push_port),
            worker_fetch: at(|w| w.fetch_port),
            worker_replicate: at(|w| w.replicate_port),
        }
    }
}

/// `host:port`, with brackets around an IPv6 literal.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(root: &Path) -> Vec<PathBuf> {
        vec![root.join("d1"), root.join("d2")]
    }

    #[test]
    fn generated_once_then_persisted() {
        let root = tempfile::tempdir().unwrap();
        let first = resolve(None, &dirs(root.path())).unwrap();
        assert_eq!(first.source, IdSource::Generated);
        assert!(
            first.id.starts_with("sy-") && first.id.len() == 15,
            "{}",
            first.id
        );
        check_node_id(&first.id).unwrap();
        let file = root.path().join("d1").join(data_dir::NODE_ID_FILE);
        assert_eq!(first.file.as_deref(), Some(file.as_path()));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{}\n", first.id)
        );
        assert!(
            !root.path().join("d2").exists(),
            "only the first dir is used"
        );
        assert!(
            !data_dir::temp_path(&file).exists(),
            "no temporary file left"
        );

        let again = resolve(None, &dirs(root.path())).unwrap();
        assert_eq!(again.id, first.id);
        assert_eq!(again.source, IdSource::Persisted);

        // Another data directory: another node.
        let other = tempfile::tempdir().unwrap();
        assert_ne!(resolve(None, &dirs(other.path())).unwrap().id, first.id);
    }

    #[test]
    fn configured_id_wins_and_is_persisted() {
        let root = tempfile::tempdir().unwrap();
        let generated = resolve(None, &dirs(root.path())).unwrap();

        let configured = resolve(Some("shuffle-7"), &dirs(root.path())).unwrap();
        assert_eq!(configured.id, "shuffle-7");
        assert_eq!(configured.source, IdSource::Config);
        assert_eq!(configured.replaced.as_deref(), Some(generated.id.as_str()));

        // The file now holds the configured id: a start without node.id keeps it.
        let later = resolve(None, &dirs(root.path())).unwrap();
        assert_eq!(later.id, "shuffle-7");
        assert_eq!(later.source, IdSource::Persisted);

        let same = resolve(Some("shuffle-7"), &dirs(root.path())).unwrap();
        assert_eq!(same.source, IdSource::Config);
        assert_eq!(same.replaced, None);
    }

    #[test]
    fn a_bad_file_is_an_error_not_a_new_id() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(data_dir::NODE_ID_FILE), "not an id\n").unwrap();
        let err = format!("{:#}", resolve(None, &dirs(root.path())).unwrap_err());
        assert!(
            err.contains(data_dir::NODE_ID_FILE) && err.contains("no valid node id"),
            "{err}"
        );
        // A configured id replaces even a bad file.
        assert_eq!(resolve(Some("n1"), &dirs(root.path())).unwrap().id, "n1");
        assert_eq!(
            std::fs::read_to_string(dir.join(data_dir::NODE_ID_FILE)).unwrap(),
            "n1\n"
        );
    }

    #[test]
    fn ipv6_hosts_get_brackets() {
        assert_eq!(host_port("127.0.0.2", 19999), "127.0.0.2:19999");
        assert_eq!(host_port("::1", 9097), "[::1]:9097");
        assert_eq!(
            host_port("shuffle-1.example", 9097),
            "shuffle-1.example:9097"
        );
    }

    #[test]
    fn without_data_dirs_nothing_is_persisted() {
        let a = resolve(None, &[]).unwrap();
        let b = resolve(None, &[]).unwrap();
        assert_eq!(a.source, IdSource::Ephemeral);
        assert_ne!(a.id, b.id);
        assert_eq!(a.file, None);
        let c = resolve(Some("cold-1"), &[]).unwrap();
        assert_eq!((c.id.as_str(), c.source), ("cold-1", IdSource::Config));
    }
}
