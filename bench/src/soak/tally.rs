//! What a soak run counted, and its report: one Markdown table per part
//! (load per protocol, faults, clear errors, memory per node, latency in
//! and out of faults, leftovers) and the verdict.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::faults::FaultKind;
use super::fleet::{Fleet, Role};
use super::ledger::Verdict;
use super::probe::Probe;
use super::spec::AppSpec;
use crate::report::mib;

/// The soak's loads, each run by `--clients` concurrent applications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Load {
    UniffleGrpc,
    UniffleNetty,
    Celeborn,
    /// Flink's map partitions through the Celeborn protocol.
    Flink,
}

impl Load {
    pub const ALL: [Load; 4] = [
        Load::UniffleGrpc,
        Load::UniffleNetty,
        Load::Celeborn,
        Load::Flink,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Load::UniffleGrpc => "Uniffle GRPC",
            Load::UniffleNetty => "Uniffle GRPC_NETTY",
            Load::Celeborn => "Celeborn reduce",
            Load::Flink => "Celeborn Flink map",
        }
    }

    pub fn slug(self) -> &'static str {
        match self {
            Load::UniffleGrpc => "ug",
            Load::UniffleNetty => "un",
            Load::Celeborn => "cr",
            Load::Flink => "cf",
        }
    }
}

#[derive(Debug, Default, Clone)]
struct PerLoad {
    verified: u64,
    skewed: u64,
    first_try: u64,
    attempts_failed: u64,
    failed: u64,
    records: u64,
    bytes: u64,
    verdict: Verdict,
}

#[derive(Debug, Default, Clone)]
struct PerFault {
    injected: u64,
    failed: u64,
    longest: Duration,
}

#[derive(Debug, Default)]
pub struct Tally {
    loads: BTreeMap<Load, PerLoad>,
    faults: BTreeMap<FaultKind, PerFault>,
    /// What clients saw when an attempt failed, digits blanked so that
    /// addresses and ids group.
    errors: BTreeMap<String, u64>,
    /// Every fault as it happened.
    timeline: Vec<String>,
    /// The real Spark and Flink jobs beside the load (`--jobs`).
    pub jobs: super::jobs::JobsTally,
}

impl Tally {
    pub fn verified(&mut self, load: Load, spec: &AppSpec, verdict: Verdict, attempt: u32) {
        let l = self.loads.entry(load).or_default();
        l.verified += 1;
        l.skewed += u64::from(spec.skew > 1);
        l.first_try += u64::from(attempt == 1);
        l.records += verdict.exact;
        l.bytes += spec.bytes();
        l.verdict += verdict;
    }

    pub fn attempt_failed(&mut self, load: Load, e: &anyhow::Error) {
        self.loads.entry(load).or_default().attempts_failed += 1;
        *self.errors.entry(error_kind(load, e)).or_default() += 1;
    }

    pub fn application_failed(&mut self, load: Load) {
        self.loads.entry(load).or_default().failed += 1;
    }

    pub fn fault(
        &mut self,
        kind: FaultKind,
        line: String,
        took: Duration,
        error: Option<&anyhow::Error>,
    ) {
        self.timeline.push(line);
        let f = self.faults.entry(kind).or_default();
        f.injected += 1;
        f.failed += u64::from(error.is_some());
        f.longest = f.longest.max(took);
    }

    fn verdict(&self) -> Verdict {
        let mut v = Verdict::default();
        for l in self.loads.values() {
            v += l.verdict;
        }
        v
    }

    /// Nothing lost, duplicated, corrupt or misplaced; every application
    /// verified in the end; every fault injected and repaired; memory
    /// within each node's number; no files left behind.
    /// Whether the run passed: nothing lost, duplicated, corrupt or
    /// misplaced; every application verified in the end; every fault kind
    /// injected at least `min_each` times, each injected and repaired;
    /// memory within; nothing left behind.
    pub fn passed(
        &self,
        memory: &NodeMemory,
        leftovers: &[PathBuf],
        kinds: &[FaultKind],
        min_each: u64,
    ) -> bool {
        self.verdict().clean()
            && self.loads.values().all(|l| l.failed == 0 && l.verified > 0)
            && kinds.iter().all(|k| {
                self.faults
                    .get(k)
                    .is_some_and(|f| f.injected >= min_each.max(1))
            })
            && self.faults.values().all(|f| f.failed == 0)
            && memory.within()
            && leftovers.is_empty()
            && self.jobs.passed()
    }
}

/// An error as the report groups it: the client's step and the root cause,
/// digits blanked.
fn error_kind(load: Load, e: &anyhow::Error) -> String {
    let blank = |s: String| -> String {
        let s: String = s
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        s.chars().take(110).collect()
    };
    let step = blank(e.to_string());
    let root = blank(e.root_cause().to_string());
    if step == root {
        format!("{}: {step}", load.name())
    } else {
        format!("{}: {step}: {root}", load.name())
    }
}

/// Each node's peak RSS against its memory number, and when in the run
/// (seconds from the start) the peak was first seen.
#[derive(Debug)]
pub struct NodeMemory {
    started: std::time::Instant,
    nodes: Vec<(usize, Role, u64, u64, u64)>,
}

impl NodeMemory {
    pub fn new(fleet: &Fleet, bounds: Vec<u64>) -> Self {
        NodeMemory {
            started: std::time::Instant::now(),
            nodes: fleet
                .nodes
                .iter()
                .zip(bounds)
                .map(|(n, b)| (n.index, n.role, 0, b, 0))
                .collect(),
        }
    }

    pub fn saw(&mut self, node: usize, rss: u64) {
        let at = self.started.elapsed().as_secs();
        if let Some(n) = self.nodes.iter_mut().find(|n| n.0 == node) {
            if rss > n.2 {
                n.2 = rss;
                n.4 = at;
            }
        }
    }

    pub fn within(&self) -> bool {
        self.nodes
            .iter()
            .all(|(_, _, peak, bound, _)| peak <= bound)
    }
}

pub struct Context<'a> {
    pub seed: u64,
    pub nodes: usize,
    pub load_time: Duration,
    pub probe: &'a Probe,
    pub memory: &'a NodeMemory,
    pub leftovers: &'a [PathBuf],
    pub kinds: &'a [FaultKind],
    /// Injections every kind needs (`--min-each`).
    pub min_each: u64,
}

impl Tally {
    pub fn report(&self, c: Context<'_>) -> String {
        let mut r = String::new();
        let v = self.verdict();
        let _ = writeln!(
            r,
            "## Soak: {} nodes, {:.0} min of load, seed {}\n\n**{}**: {} lost, {} duplicated, {} corrupt, {} misplaced; {} files left behind; memory {}.\n",
            c.nodes,
            c.load_time.as_secs_f64() / 60.0,
            c.seed,
            if self.passed(c.memory, c.leftovers, c.kinds, c.min_each) { "PASS" } else { "FAIL" },
            v.lost,
            v.duplicated,
            v.corrupt,
            v.misplaced,
            c.leftovers.len(),
            if c.memory.within() { "within every node's number" } else { "OVER a node's number" }
        );
        self.loads_table(&mut r);
        self.faults_table(&mut r);
        self.errors_table(&mut r);
        self.jobs.table(&mut r);
        memory_table(&mut r, c.memory);
        latency_table(&mut r, c.probe);
        let _ = writeln!(r, "Faults as they happened (seconds from the start):\n");
        for line in &self.timeline {
            let _ = writeln!(r, "- {line}");
        }
        r.push('\n');
        for path in c.leftovers.iter().take(20) {
            let _ = writeln!(r, "- left behind: {}", path.display());
        }
        r
    }

    fn loads_table(&self, r: &mut String) {
        let _ = writeln!(r, "| load | applications verified (skewed) | on the first attempt | attempts rerun | applications failed | records read exactly once | bytes | lost | duplicated | corrupt | misplaced |\n|---|---|---|---|---|---|---|---|---|---|---|");
        for (load, l) in &self.loads {
            let _ = writeln!(
                r,
                "| {} | {} ({}) | {} | {} | {} | {} | {:.0} MiB | {} | {} | {} | {} |",
                load.name(),
                l.verified,
                l.skewed,
                l.first_try,
                l.attempts_failed,
                l.failed,
                l.records,
                mib(l.bytes),
                l.verdict.lost,
                l.verdict.duplicated,
                l.verdict.corrupt,
                l.verdict.misplaced
            );
        }
        r.push('\n');
    }

    fn faults_table(&self, r: &mut String) {
        let _ = writeln!(
            r,
            "| fault | injected | failed to inject or repair | longest, s |\n|---|---|---|---|"
        );
        for (kind, f) in &self.faults {
            let _ = writeln!(
                r,
                "| {} | {} | {} | {:.1} |",
                kind.name(),
                f.injected,
                f.failed,
                f.longest.as_secs_f64()
            );
        }
        r.push('\n');
    }

    fn errors_table(&self, r: &mut String) {
        let _ = writeln!(r, "| clear error a client saw (recovered by rerunning the application) | attempts |\n|---|---|");
        for (e, n) in &self.errors {
            let _ = writeln!(r, "| {} | {n} |", e.replace('|', "/"));
        }
        r.push('\n');
    }
}

fn memory_table(r: &mut String, m: &NodeMemory) {
    let _ = writeln!(r, "| node | role | peak RSS (first seen at) | memory number (check-config's container figure) | within |\n|---|---|---|---|---|");
    for (node, role, peak, bound, at) in &m.nodes {
        let _ = writeln!(
            r,
            "| {node} | {role:?} | {:.0} MiB ({at} s) | {:.0} MiB | {} |",
            mib(*peak),
            mib(*bound),
            if peak <= bound { "yes" } else { "NO" }
        );
    }
    r.push('\n');
}

fn latency_table(r: &mut String, probe: &Probe) {
    let [push, fetch] = probe.p99s();
    let _ = writeln!(
        r,
        "| p99 latency | outside faults | during faults |\n|---|---|---|"
    );
    for (name, [out, during]) in [
        ("push (send/PushData)", push),
        ("fetch (partition read)", fetch),
    ] {
        let _ = writeln!(
            r,
            "| {name} | {:.1} ms ({} requests) | {:.1} ms ({} requests) |",
            out.0, out.1, during.0, during.1
        );
    }
    r.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_group_without_their_numbers() {
        let e = anyhow::anyhow!("connection refused (os error 111)")
            .context("uniffle sendShuffleData to 127.0.0.4-19997-19996");
        assert_eq!(
            error_kind(Load::UniffleGrpc, &e),
            "Uniffle GRPC: uniffle sendShuffleData to ###.#.#.#-#####-#####: connection refused (os error ###)"
        );
    }
}
