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
    /// RequestSlots the aggressor's applications were refused (no slots now).
    pub aggressor_slot_waits: u64,
    /// The highest memory fill of (b) and of (c); `None` where the server
    /// has no such figure to read (the JVM servers).
    pub fill_alone: Option<Fill>,
    pub fill_beside: Option<Fill>,
    /// CPU of the node and of the aggressor's clients in (b) and in (c).
    pub cpu_alone: Cpu,
    pub cpu_beside: Cpu,
    pub peak_rss: Option<u64>,
    /// The disk's write rate the "of the disk" shares are of (the node's
    /// `write_rate_limit`, or the throttled device's), bytes per second.
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

fn fill(f: Option<Fill>) -> String {
    f.map_or("not readable".into(), |f| {
        format!("{:.2} / {:.2}", f.store, f.node)
    })
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
             | node memory, highest fill: store's share / whole number | {} | {} | |\n\
             | CPU, cores: node / aggressor's clients | {:.2} / {:.2} | {:.2} / {:.2} | |",
            a / limit,
            b / limit,
            self.aggressor_ratio(),
            fill(self.fill_alone),
            fill(self.fill_beside),
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
            "\nAggressor applications written, committed and read back in full: {}; RequestSlots refused for lack of slots (retried after 1 s): {}. Peak RSS of the server's processes: {rss}.",
            self.aggressor_apps,
            self.aggressor_slot_waits
        );
        for (client, v) in &self.victims {
            for f in &v.failures {
                let _ = writeln!(t, "- {client}: {}", f.replace('|', "/"));
            }
        }
        t
    }

    /// Switchyard beside the JVM servers, one line per figure, in Markdown.
    pub fn compare(&self, jvm: &Figures) -> String {
        let mut t = String::from(
            "| | Switchyard: alone / beside (medians) | slowdown | JVM servers: alone / beside | slowdown |\n|---|---|---|---|---|\n",
        );
        let s = |v: Option<&Victim>, beside: bool| {
            v.and_then(|v| median(if beside { &v.beside_ms } else { &v.alone_ms }))
                .map_or("-".into(), |m| format!("{:.1} s", m / 1e3))
        };
        let r = |v: Option<&Victim>| {
            v.and_then(Victim::ratio)
                .map_or("-".into(), |r| format!("{r:.2}×"))
        };
        let clients: std::collections::BTreeSet<&String> =
            self.victims.keys().chain(jvm.victims.keys()).collect();
        for c in clients {
            let (a, b) = (self.victims.get(c), jvm.victims.get(c));
            let _ = writeln!(
                t,
                "| {c} | {} / {} | {} | {} / {} | {} |",
                s(a, false),
                s(a, true),
                r(a),
                s(b, false),
                s(b, true),
                r(b)
            );
        }
        let agg = |f: &Figures| {
            format!(
                "{:.1} / {:.1} MiB/s | {:.2} kept",
                f.aggressor_alone.mib_s(),
                f.aggressor_beside.mib_s(),
                f.aggressor_ratio()
            )
        };
        let cpu = |f: &Figures| format!("{:.2} / {:.2} | ", f.cpu_alone.node, f.cpu_beside.node);
        let rss = |f: &Figures| {
            f.peak_rss
                .map_or("-".into(), |r| format!("{:.0} MiB", mib(r)))
        };
        let _ = writeln!(
            t,
            "| aggressor's writes acknowledged | {} | {} |",
            agg(self),
            agg(jvm)
        );
        let _ = writeln!(t, "| server CPU, cores | {}{}|", cpu(self), cpu(jvm));
        let _ = writeln!(t, "| server peak RSS | {} | | {} | |", rss(self), rss(jvm));
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
        match self.fill_beside {
            None => p.push("the node's memory fill was not read".into()),
            Some(f) if f.store < AT_BUDGET => p.push(format!(
                "the node was never at {AT_BUDGET} of its memory budget beside the victims (at most {:.2}): the aggressor did not saturate it",
                f.store
            )),
            Some(_) => {}
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
            fill_beside: Some(Fill {
                store: 0.97,
                node: 0.9,
            }),
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
    fn compare_puts_both_servers_on_one_line_per_victim() {
        let f = figures();
        let mut jvm = figures();
        jvm.add(vec![line("a", "ok", 9000), line("c", "ok", 100)], true);
        let t = f.compare(&jvm);
        assert!(
            t.contains("| a | 2.0 s / 2.4 s | 1.20× | 2.0 s / 5.7 s | 2.85× |"),
            "{t}"
        );
        assert!(t.contains("| c | - / - | - | - / 0.1 s | - |"), "{t}");
        assert!(t.contains("| aggressor's writes acknowledged | 64.0 / 60.0 MiB/s | 0.94 kept | 64.0 / 60.0 MiB/s | 0.94 kept |"), "{t}");
    }

    #[test]
    fn every_check_can_fail() {
        let f = figures();
        assert!(f.problems(Some(1.3), Some(0.9)).is_empty());
        assert_eq!(f.problems(Some(1.15), None).len(), 1, "a is 1.2x");
        assert_eq!(f.problems(None, Some(0.95)).len(), 1, "aggressor kept 0.94");
        let mut g = figures();
        g.fill_beside = Some(Fill {
            store: 0.5,
            node: 0.5,
        });
        assert_eq!(g.problems(None, None).len(), 1, "not at its budget");
        g.fill_beside = None;
        assert_eq!(g.problems(None, None).len(), 1, "fill not read");
        let mut h = figures();
        h.add(vec![line("b", "mismatch", 10)], true);
        assert_eq!(h.problems(None, None).len(), 1, "a mismatch fails");
        h.add(vec![line("c", "ok", 10)], true);
        assert_eq!(h.problems(None, None).len(), 2, "c never ran alone");
        assert_eq!(Figures::default().problems(None, None).len(), 2);
    }
}
