//! What a run measured, its table and its verdict.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use super::watch::Fill;
use crate::report::mib;
use crate::soak::jobs::{JobResult, Status};

/// The fill below which the aggressor did not hold the node at its budget
/// (then slow or fast victims prove nothing).
pub const AT_BUDGET: f64 = 0.8;

/// One victim's wall times, alone and beside the aggressor.
#[derive(Debug, Default, Clone)]
pub struct Victim {
    pub alone_ms: Vec<u64>,
    pub beside_ms: Vec<u64>,
    /// Jobs that failed or differed from the engine's own shuffle.
    pub failures: Vec<String>,
}

impl Victim {
    /// The slowdown: median beside over median alone.
    pub fn ratio(&self) -> Option<f64> {
        Some(median(&self.beside_ms)? / median(&self.alone_ms)?)
    }
}

/// Bytes acknowledged over a time.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rate {
    pub bytes: u64,
    pub time: Duration,
}

impl Rate {
    pub fn mib_s(self) -> f64 {
        mib(self.bytes) / self.time.as_secs_f64().max(1e-9)
    }
}

/// CPU used over a phase, in cores (CPU seconds per second).
#[derive(Debug, Default, Clone, Copy)]
pub struct Cpu {
    pub node: f64,
    /// The aggressor's client threads.
    pub clients: f64,
}

/// Everything one run measured.
#[derive(Debug, Default)]
pub struct Figures {
    /// By the label the job reports (`spark-uniffle-GRPC_NETTY`, ...).
    pub victims: BTreeMap<String, Victim>,
    pub aggressor_alone: Rate,
    pub aggressor_beside: Rate,
    /// Aggressor applications written, committed and read back in full.
    pub aggressor_apps: u64,
    pub fill_alone: Fill,
    pub fill_beside: Fill,
    /// CPU of the node and of the aggressor's clients in (b) and in (c).
    pub cpu_alone: Cpu,
    pub cpu_beside: Cpu,
    pub peak_rss: Option<u64>,
    /// The node's `write_rate_limit`, bytes per second.
    pub write_rate: u64,
}

/// The median (the mean of the middle two of an even count).
pub fn median(ms: &[u64]) -> Option<f64> {
    let mut v = ms.to_vec();
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2] as f64),
        _ => Some((v[n / 2 - 1] + v[n / 2]) as f64 / 2.0),
    }
}

fn secs(ms: &[u64]) -> String {
    let mut v = ms.to_vec();
    v.sort_unstable();
    match (v.first(), median(&v)) {
        (Some(best), Some(med)) => format!("{:.1} / {:.1} s", *best as f64 / 1e3, med / 1e3),
        _ => "-".into(),
    }
}

impl Figures {
    /// Adds a round's jobs, alone or beside the aggressor.
    pub(crate) fn add(&mut self, results: Vec<JobResult>, beside: bool) {
        for r in results {
            let v = self.victims.entry(r.client.clone()).or_default();
            if r.status == Status::Ok {
                if beside {
                    v.beside_ms.push(r.wall_ms)
                } else {
                    v.alone_ms.push(r.wall_ms)
                }
            } else {
                let when = if beside {
                    "beside the aggressor"
                } else {
                    "alone"
                };
                v.failures
                    .push(format!("{} {when}: {}", r.status.name(), r.detail));
            }
        }
    }

    pub fn aggressor_ratio(&self) -> f64 {
        self.aggressor_beside.mib_s() / self.aggressor_alone.mib_s().max(1e-9)
    }

    /// The tables, in Markdown.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "| victim (stock client) | alone: best / median | beside the aggressor: best / median | slowdown (median) |\n|---|---|---|---|");
        for (client, v) in &self.victims {
            let ratio = v.ratio().map_or("-".into(), |r| format!("{r:.2}×"));
            let failed = if v.failures.is_empty() {
                String::new()
            } else {
                format!(" ({} failed)", v.failures.len())
            };
            let _ = writeln!(
                t,
                "| {client}{failed} | {} | {} | {ratio} |",
                secs(&v.alone_ms),
                secs(&v.beside_ms)
            );
        }
        let limit = mib(self.write_rate);
        let (a, b) = (self.aggressor_alone.mib_s(), self.aggressor_beside.mib_s());
        let _ = writeln!(
            t,
            "\n| aggressor | alone | beside the victims | ratio |\n|---|---|---|---|\n\
             | writes acknowledged | {a:.1} MiB/s ({:.2} of the disk's {limit:.0} MiB/s) | {b:.1} MiB/s ({:.2}) | {:.2} |\n\
             | node memory, highest fill: store's share / whole number | {:.2} / {:.2} | {:.2} / {:.2} | |\n\
             | CPU, cores: node / aggressor's clients | {:.2} / {:.2} | {:.2} / {:.2} | |",
            a / limit,
            b / limit,
            self.aggressor_ratio(),
            self.fill_alone.store,
            self.fill_alone.node,
            self.fill_beside.store,
            self.fill_beside.node,
            self.cpu_alone.node,
            self.cpu_alone.clients,
            self.cpu_beside.node,
            self.cpu_beside.clients,
        );
        let rss = self
            .peak_rss
            .map_or("not readable".into(), |r| format!("{:.0} MiB", mib(r)));
        let _ = writeln!(
            t,
            "\nAggressor applications written, committed and read back in full: {}. Node peak RSS: {rss}.",
            self.aggressor_apps
        );
        for (client, v) in &self.victims {
            for f in &v.failures {
                let _ = writeln!(t, "- {client}: {}", f.replace('|', "/"));
            }
        }
        t
    }

    /// What fails the run; empty when it passed.
    pub fn problems(&self, max_slowdown: Option<f64>, min_aggressor: Option<f64>) -> Vec<String> {
        let mut p = Vec::new();
        if self.victims.is_empty() {
            p.push("no victim job reported".into());
        }
        for (client, v) in &self.victims {
            if !v.failures.is_empty() {
                p.push(format!("{client}: {}", v.failures.join("; ")));
            }
            match (v.ratio(), max_slowdown) {
                (None, _) => p.push(format!("{client}: no successful run alone and beside")),
                (Some(r), Some(max)) if r > max => p.push(format!(
                    "{client}: {r:.2}× slower beside the aggressor (at most {max})"
                )),
                _ => {}
            }
        }
        if self.fill_beside.store < AT_BUDGET {
            p.push(format!(
                "the node was never at {AT_BUDGET} of its memory budget beside the victims (at most {:.2}): the aggressor did not saturate it",
                self.fill_beside.store
            ));
        }
        if let Some(min) = min_aggressor {
            let r = self.aggressor_ratio();
            if r < min {
                p.push(format!(
                    "the aggressor kept {r:.2} of its throughput beside the victims (at least {min})"
                ));
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::jobs::parse;

    fn line(client: &str, status: &str, ms: u64) -> JobResult {
        parse(&format!("{client}\t{status}\t{ms}\t0\tdetail"))
    }

    fn figures() -> Figures {
        let mut f = Figures {
            aggressor_alone: Rate {
                bytes: 640 << 20,
                time: Duration::from_secs(10),
            },
            aggressor_beside: Rate {
                bytes: 600 << 20,
                time: Duration::from_secs(10),
            },
            fill_beside: Fill {
                store: 0.97,
                node: 0.9,
            },
            write_rate: 64 << 20,
            ..Default::default()
        };
        f.add(vec![line("a", "ok", 1000), line("b", "ok", 2000)], false);
        f.add(vec![line("a", "ok", 3000), line("b", "ok", 2000)], false);
        f.add(vec![line("a", "ok", 2400), line("b", "ok", 2200)], true);
        f
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3, 1, 2]), Some(2.0));
        assert_eq!(median(&[4, 1]), Some(2.5));
        let f = figures();
        assert_eq!(f.victims["a"].ratio(), Some(1.2));
        assert!((f.aggressor_ratio() - 0.9375).abs() < 1e-9);
        assert!(
            f.table()
                .contains("| a | 1.0 / 2.0 s | 2.4 / 2.4 s | 1.20× |"),
            "{}",
            f.table()
        );
    }

    #[test]
    fn every_check_can_fail() {
        let f = figures();
        assert!(f.problems(Some(1.3), Some(0.9)).is_empty());
        assert_eq!(f.problems(Some(1.15), None).len(), 1, "a is 1.2x");
        assert_eq!(f.problems(None, Some(0.95)).len(), 1, "aggressor kept 0.94");
        let mut g = figures();
        g.fill_beside.store = 0.5;
        assert_eq!(g.problems(None, None).len(), 1, "not at its budget");
        let mut h = figures();
        h.add(vec![line("b", "mismatch", 10)], true);
        assert_eq!(h.problems(None, None).len(), 1, "a mismatch fails");
        h.add(vec![line("c", "ok", 10)], true);
        assert_eq!(h.problems(None, None).len(), 2, "c never ran alone");
        assert_eq!(Figures::default().problems(None, None).len(), 2);
    }
}
