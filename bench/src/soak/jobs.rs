//! Real Spark and Flink jobs beside the soak's load (`--jobs`): every
//! `--jobs-every` seconds a round of `integration/soak-jobs.sh` runs stock
//! client jars against the fleet (a Spark job through the Uniffle client, one
//! through the Celeborn client, a Flink job through the Celeborn Flink
//! client), each compared inside the script with the same job on the
//! engine's own shuffle. The Rust clients prove every record; these prove
//! that the clients people deploy get the same answers under the same faults.
//!
//! A result that differs from the engine's own shuffle is data loss and
//! fails the soak. A job that fails is tolerated only when a fault was in
//! force (injected, or settling) at some time while it ran: the stock
//! clients then fail a job as they should; a failure with no fault near it
//! is a bug (or a hang) and fails the soak.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context};
use parking_lot::Mutex;

use super::fleet::{Fleet, Role};
use super::probe::Probe;
use super::tally::Tally;

#[derive(Debug, Clone, clap::Args)]
pub struct JobsArgs {
    /// Run real Spark and Flink jobs beside the load: this script
    /// (integration/soak-jobs.sh) runs one round of them against the fleet
    /// and writes a result line per job. Off when absent.
    #[arg(long)]
    pub jobs: Option<PathBuf>,
    /// Seconds from one round's start to the next (a round that takes
    /// longer is followed at once; rounds never overlap).
    #[arg(long, default_value_t = 120)]
    pub jobs_every: u64,
}

/// The first round waits this long: past the coordinators' warm-up and the
/// load's first applications, so that it meets the fleet as it runs.
const FIRST_ROUND_AFTER: Duration = Duration::from_secs(30);
/// What a round is assumed to take before one was timed: a round is only
/// started if it can end before the load does.
const ROUND_GUESS: Duration = Duration::from_secs(90);

/// Builds what the script needs (Maven, once) before the fleet starts, so
/// that the first round meets no build and a missing client jar stops the
/// soak at once.
pub async fn build(args: &JobsArgs) -> anyhow::Result<()> {
    let Some(script) = &args.jobs else {
        return Ok(());
    };
    println!(
        "soak: building the real jobs ({} --build)",
        script.display()
    );
    build_script(script).await
}

/// `script --build`: what a round needs (Maven, redone only on a change).
pub(crate) async fn build_script(script: &Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(script)
        .arg("--build")
        .output()
        .await
        .with_context(|| format!("run {}", script.display()))?;
    ensure!(
        out.status.success(),
        "{} --build failed ({}): {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Rounds one after the other until the load's deadline; `None` without `--jobs`.
pub fn spawn(
    args: &JobsArgs,
    fleet: &Fleet,
    started: Instant,
    deadline: Instant,
    tally: &Arc<Mutex<Tally>>,
    probe: &Probe,
) -> Option<tokio::task::JoinHandle<()>> {
    let script = args.jobs.clone()?;
    let coordinators: Vec<String> = fleet
        .nodes
        .iter()
        .filter(|n| n.role != Role::Worker)
        .map(|n| n.ip.to_string())
        .collect();
    let endpoints = |port: u16| {
        coordinators
            .iter()
            .map(|ip| format!("{ip}:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let round = Round {
        script,
        uniffle: endpoints(19999),
        celeborn: endpoints(9097),
        env: Vec::new(),
    };
    let every = Duration::from_secs(args.jobs_every.max(1));
    tally.lock().jobs.enable();
    let (tally, probe) = (tally.clone(), probe.clone());
    // The soak's start in wall-clock time: jobs report when they ran as epoch times.
    let origin = SystemTime::now() - started.elapsed();
    Some(tokio::spawn(async move {
        let mut next = started + FIRST_ROUND_AFTER;
        let mut took = ROUND_GUESS;
        for n in 1.. {
            tokio::time::sleep_until(next.into()).await;
            if Instant::now() + took > deadline {
                return;
            }
            let began = Instant::now();
            let results = round.run(n).await;
            took = began.elapsed();
            let mut t = tally.lock();
            for r in results {
                let during_fault = probe.faulted_between(r.from, r.until);
                // When the job began, in seconds from the soak's start (as the faults' timeline).
                let at = r.from.duration_since(origin).map_or(0, |d| d.as_secs());
                println!(
                    "jobs round {n}: {at} s: {} {} in {} ms{}: {}",
                    r.client,
                    r.status.name(),
                    r.wall_ms,
                    if during_fault {
                        " (during a fault)"
                    } else {
                        ""
                    },
                    r.detail
                );
                t.jobs.add(at, r, during_fault);
            }
            next = began + every;
        }
    }))
}

/// How to run one round against this fleet.
pub(crate) struct Round {
    pub(crate) script: PathBuf,
    /// The Uniffle coordinator quorum and the Celeborn masters.
    pub(crate) uniffle: String,
    pub(crate) celeborn: String,
    /// The script's settings (`SOAK_JOBS_RECORDS` ...) beyond this process's environment.
    pub(crate) env: Vec<(String, String)>,
}

impl Round {
    /// The round's results; a round that did not produce them is one failed
    /// result of the script itself, over the round's whole time.
    pub(crate) async fn run(&self, n: u32) -> Vec<JobResult> {
        let from = SystemTime::now();
        let out = std::env::temp_dir().join(format!(
            "switchyard-soak-jobs-{}-{n}.txt",
            std::process::id()
        ));
        let status = tokio::process::Command::new(&self.script)
            .args(["--uniffle", &self.uniffle, "--celeborn", &self.celeborn])
            .arg("--out")
            .arg(&out)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        let failed = |detail: String| JobResult {
            client: script_name(&self.script),
            status: Status::Failed,
            wall_ms: from.elapsed().map_or(0, |d| d.as_millis() as u64),
            from,
            until: SystemTime::now(),
            detail,
        };
        match status {
            Err(e) => vec![failed(format!("could not run: {e}"))],
            Ok(o) if !o.status.success() => {
                let err = String::from_utf8_lossy(&o.stderr);
                let last = err.lines().last().unwrap_or("").to_string();
                vec![failed(format!("exited {}: {last}", o.status))]
            }
            Ok(_) if text.trim().is_empty() => vec![failed("wrote no result".into())],
            Ok(_) => text.lines().map(parse).collect(),
        }
    }
}

fn script_name(script: &Path) -> String {
    script
        .file_name()
        .map_or("soak-jobs".into(), |f| f.to_string_lossy().into_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    Mismatch,
    Failed,
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Mismatch => "MISMATCH",
            Status::Failed => "failed",
        }
    }
}

/// One job's line: `client, ok|mismatch|failed, wall ms, start epoch ms,
/// detail`, tab-separated.
#[derive(Debug)]
pub(crate) struct JobResult {
    pub(crate) client: String,
    pub(crate) status: Status,
    pub(crate) wall_ms: u64,
    /// When the job ran through the fleet (its start to its end).
    pub(crate) from: SystemTime,
    pub(crate) until: SystemTime,
    pub(crate) detail: String,
}

/// A line that does not parse is a failed result: the harness broke, and
/// nothing says a fault did it.
pub(crate) fn parse(line: &str) -> JobResult {
    let f: Vec<&str> = line.splitn(5, '\t').collect();
    let num = |i: usize| f.get(i).and_then(|s| s.trim().parse::<u64>().ok());
    let status = match f.get(1).map(|s| s.trim()) {
        Some("ok") => Some(Status::Ok),
        Some("mismatch") => Some(Status::Mismatch),
        Some("failed") => Some(Status::Failed),
        _ => None,
    };
    match (status, num(2), num(3)) {
        (Some(status), Some(wall_ms), Some(start_ms)) => {
            let from = UNIX_EPOCH + Duration::from_millis(start_ms);
            JobResult {
                client: f[0].trim().to_string(),
                status,
                wall_ms,
                from,
                until: from + Duration::from_millis(wall_ms),
                detail: f.get(4).unwrap_or(&"").trim().to_string(),
            }
        }
        _ => JobResult {
            client: f.first().map_or("?", |s| s.trim()).to_string(),
            status: Status::Failed,
            wall_ms: 0,
            from: SystemTime::now(),
            until: SystemTime::now(),
            detail: format!("a result line that does not parse: {line:?}"),
        },
    }
}

#[derive(Debug, Default, Clone)]
struct PerClient {
    rounds: u64,
    equal: u64,
    mismatches: u64,
    failed_in_fault: u64,
    failed_no_fault: u64,
    wall_ms: Vec<u64>,
}

/// What the real jobs did, per client; part of the soak's [`Tally`].
#[derive(Debug, Default)]
pub struct JobsTally {
    enabled: bool,
    clients: BTreeMap<String, PerClient>,
    /// Every result other than equal, as it happened.
    notes: Vec<String>,
}

impl JobsTally {
    /// `--jobs` was given: the report has the table, and no round at all fails.
    pub fn enable(&mut self) {
        self.enabled = true;
    }

    fn add(&mut self, at: u64, r: JobResult, during_fault: bool) {
        let c = self.clients.entry(r.client.clone()).or_default();
        c.rounds += 1;
        c.wall_ms.push(r.wall_ms);
        let what = match r.status {
            Status::Ok => {
                c.equal += 1;
                return;
            }
            Status::Mismatch => {
                c.mismatches += 1;
                "MISMATCH with the engine's own shuffle"
            }
            Status::Failed if during_fault => {
                c.failed_in_fault += 1;
                "failed during a fault"
            }
            Status::Failed => {
                c.failed_no_fault += 1;
                "FAILED with no fault in force"
            }
        };
        self.notes
            .push(format!("{at} s: {} {what}: {}", r.client, r.detail));
    }

    /// No result that differs from the engine's own shuffle, no failure
    /// outside a fault, and at least one round when rounds were asked for.
    pub fn passed(&self) -> bool {
        !self.enabled
            || (!self.clients.is_empty()
                && self
                    .clients
                    .values()
                    .all(|c| c.mismatches == 0 && c.failed_no_fault == 0))
    }

    /// The table (nothing without `--jobs`).
    pub fn table(&self, r: &mut String) {
        if !self.enabled {
            return;
        }
        let _ = writeln!(r, "| real job (stock client) | rounds | equal to the engine's own shuffle | mismatches | failed during a fault | failed with no fault | median wall time |\n|---|---|---|---|---|---|---|");
        if self.clients.is_empty() {
            let _ = writeln!(
                r,
                "| (no round ran: the run was shorter than a round) | 0 | 0 | 0 | 0 | 0 | |"
            );
        }
        for (client, c) in &self.clients {
            let mut walls = c.wall_ms.clone();
            walls.sort_unstable();
            let median = walls.get(walls.len() / 2).copied().unwrap_or(0);
            let _ = writeln!(
                r,
                "| {client} | {} | {} | {} | {} | {} | {:.1} s |",
                c.rounds,
                c.equal,
                c.mismatches,
                c.failed_in_fault,
                c.failed_no_fault,
                median as f64 / 1000.0
            );
        }
        r.push('\n');
        for note in &self.notes {
            let _ = writeln!(r, "- {}", note.replace('|', "/"));
        }
        if !self.notes.is_empty() {
            r.push('\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_bad_ones_are_failures() {
        let r = parse("spark-uniffle-GRPC\tok\t5665\t1796495394028\t200000 records equal");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.client, "spark-uniffle-GRPC");
        assert_eq!(
            r.until.duration_since(r.from).unwrap(),
            Duration::from_millis(5665)
        );
        assert_eq!(parse("flink\tmismatch\t1\t2\tx").status, Status::Mismatch);
        let bad = parse("spark-celeborn-HASH\tmaybe\t1\t2\tx");
        assert_eq!(bad.status, Status::Failed);
        assert!(bad.detail.contains("does not parse"));
    }

    #[test]
    fn failures_pass_only_during_faults_and_mismatches_never() {
        let line = |status: &str| parse(&format!("spark-celeborn-HASH\t{status}\t10\t0\td"));
        let mut t = JobsTally::default();
        assert!(t.passed(), "off: nothing to judge");
        t.enable();
        assert!(!t.passed(), "asked for, but no round ran");
        t.add(30, line("ok"), false);
        t.add(120, line("failed"), true);
        assert!(t.passed(), "a failure during a fault is tolerated");
        t.add(210, line("failed"), false);
        assert!(!t.passed(), "a failure with no fault is not");
        let mut t = JobsTally::default();
        t.enable();
        t.add(30, line("mismatch"), true);
        assert!(!t.passed(), "a mismatch is data loss, fault or not");
        let mut r = String::new();
        t.table(&mut r);
        assert!(
            r.contains("| spark-celeborn-HASH | 1 | 0 | 1 | 0 | 0 |"),
            "{r}"
        );
    }

    #[test]
    fn fault_windows_overlap_a_job_that_ran_through_them() {
        let p = Probe::default();
        let before = SystemTime::now();
        p.set_faulting(true);
        std::thread::sleep(Duration::from_millis(5));
        p.set_faulting(false);
        let after = SystemTime::now();
        std::thread::sleep(Duration::from_millis(5));
        assert!(p.faulted_between(before - Duration::from_secs(1), after));
        assert!(!p.faulted_between(after + Duration::from_millis(2), SystemTime::now()));
        assert!(!p.faulted_between(UNIX_EPOCH, before - Duration::from_secs(1)));
    }
}
