//! NUMA placement (`[runtime] numa = true`): one tokio runtime per NUMA node,
//! its worker and blocking threads bound to that node's CPUs. Connections of
//! the frame ports (Celeborn's and Uniffle's Netty data plane) are spread
//! over the node runtimes, and each disk's blocking I/O runs on the runtime
//! of the node its block device hangs off, so a flush or read touches memory
//! and a PCIe root of one node. The gRPC servers, admin HTTP and the cluster
//! protocol stay on the main runtime.
//!
//! The topology comes from sysfs: `/sys/devices/system/node/node<N>/cpulist`
//! for the nodes, `/sys/dev/block/<maj>:<min>/device/numa_node` (or its
//! parent's, for a partition) for a disk. A host with one node (or none in
//! sysfs) gets no extra runtime: the switch is then harmless.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `[runtime]`: the process's threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Worker threads of the main runtime; 0 (default): one per CPU the
    /// process may run on.
    pub worker_threads: usize,
    /// One runtime per NUMA node, bound to its CPUs and its local disks (see
    /// docs/operations.md). Off by default.
    pub numa: bool,
}

/// One NUMA node: its id and CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    pub id: usize,
    pub cpus: Vec<usize>,
}

/// The NUMA nodes with CPUs, from sysfs (empty when sysfs says nothing).
pub fn nodes() -> Vec<NumaNode> {
    nodes_under(Path::new("/sys/devices/system/node"))
}

fn nodes_under(root: &Path) -> Vec<NumaNode> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut nodes: Vec<NumaNode> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let id: usize = name.strip_prefix("node")?.parse().ok()?;
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            let cpus = parse_cpulist(list.trim())?;
            (!cpus.is_empty()).then_some(NumaNode { id, cpus })
        })
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

/// `0-3,8-11,16` → [0, 1, 2, 3, 8, 9, 10, 11, 16].
pub fn parse_cpulist(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    if list.is_empty() {
        return Some(cpus);
    }
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 4096 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The NUMA node of the block device holding `dir`, when sysfs tells.
pub fn node_of_dir(dir: &Path) -> Option<usize> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let block = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition's device is its parent's.
    for candidate in [
        block.join("device/numa_node"),
        block.join("../device/numa_node"),
    ] {
        if let Ok(s) = std::fs::read_to_string(&candidate) {
            if let Ok(n) = s.trim().parse::<i64>() {
                // -1: the device has no affinity (a virtual or single-node host).
                return usize::try_from(n).ok();
            }
        }
    }
    None
}

/// The node runtimes, when `numa` is on and the host has several nodes.
pub struct NodeRuntimes {
    pub nodes: Vec<(NumaNode, tokio::runtime::Runtime)>,
}

impl NodeRuntimes {
    /// None on a host with fewer than two nodes: nothing to bind.
    pub fn start(nodes: Vec<NumaNode>) -> std::io::Result<Option<NodeRuntimes>> {
        if nodes.len() < 2 {
            return Ok(None);
        }
        let mut out = Vec::new();
        for node in nodes {
            let cpus = node.cpus.clone();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .worker_threads(node.cpus.len().max(1))
                .thread_name(format!("switchyard-numa{}", node.id))
                .on_thread_start(move || bind_current_thread(&cpus))
                .build()?;
            out.push((node, runtime));
        }
        Ok(Some(NodeRuntimes { nodes: out }))
    }

    /// The runtime of a disk's node, when known and one of ours.
    pub fn for_dir(&self, dir: &Path) -> Option<tokio::runtime::Handle> {
        let node = node_of_dir(dir)?;
        self.nodes
            .iter()
            .find(|(n, _)| n.id == node)
            .map(|(_, r)| r.handle().clone())
    }

    pub fn handles(&self) -> Vec<tokio::runtime::Handle> {
        self.nodes.iter().map(|(_, r)| r.handle().clone()).collect()
    }
}

/// Binds the calling thread to `cpus` (best effort: a failure is logged).
fn bind_current_thread(cpus: &[usize]) {
    let mut set = nix::sched::CpuSet::new();
    for &c in cpus {
        if set.set(c).is_err() {
            return;
        }
    }
    if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
        tracing::warn!(error = %e, "cannot bind a thread to its NUMA node's CPUs");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(
            parse_cpulist("0-3,8-9,16"),
            Some(vec![0, 1, 2, 3, 8, 9, 16])
        );
        assert_eq!(parse_cpulist("5"), Some(vec![5]));
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
    }

    #[test]
    fn nodes_are_read_from_sysfs_layout() {
        let root = tempfile::tempdir().unwrap();
        for (n, list) in [(0, "0-1\n"), (1, "2-3\n"), (2, "\n")] {
            let d = root.path().join(format!("node{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cpulist"), list).unwrap();
        }
        std::fs::create_dir_all(root.path().join("power")).unwrap();
        let nodes = nodes_under(root.path());
        assert_eq!(
            nodes,
            vec![
                NumaNode {
                    id: 0,
                    cpus: vec![0, 1]
                },
                NumaNode {
                    id: 1,
                    cpus: vec![2, 3]
                },
            ],
            "node2 has no CPUs (memory only) and is left out"
        );
        assert!(nodes_under(&root.path().join("missing")).is_empty());
    }

    /// This machine's topology: whatever it is, starting is harmless, and a
    /// single node starts no runtime of its own.
    #[test]
    fn the_switch_is_harmless_on_this_host() {
        let nodes = nodes();
        let started = NodeRuntimes::start(nodes.clone()).unwrap();
        match &started {
            None => assert!(nodes.len() < 2),
            Some(r) => {
                assert_eq!(r.nodes.len(), nodes.len());
                let got = r.handles()[0].block_on(async { 1 + 1 });
                assert_eq!(got, 2);
            }
        }
        // A data dir's node is a node of the host, or unknown.
        let dir = tempfile::tempdir().unwrap();
        if let Some(n) = node_of_dir(dir.path()) {
            assert!(nodes.iter().any(|x| x.id == n) || nodes.is_empty());
        }
        drop(started);
    }
}
