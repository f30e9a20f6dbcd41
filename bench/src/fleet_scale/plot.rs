//! Fleet-scale runs as one SVG (`--plot a.json,b.json --svg out.svg`): three
//! panels against the number of workers (log scale): RequestSlots p99 and
//! getShuffleAssignments p99 (one line per shuffle size) and coordinator
//! 1's CPU with drivers. Reads the runs' `--json` files as plain JSON, so a
//! plot can be drawn from runs of older builds. Hand-written, as the scale
//! bench's plot: a few polylines need no plotting crate.

use std::fmt::Write;

use anyhow::Context;
use serde_json::Value;

const W: f64 = 300.0;
const H: f64 = 220.0;
const PAD: f64 = 44.0;
const COLORS: [&str; 4] = ["#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"];
const SIZES: [i64; 4] = [1000, 10_000, 100_000, 200_000];

/// One run: its fleet size and the figures the panels need.
struct Run {
    workers: f64,
    json: Value,
}

impl Run {
    fn p99(&self, protocol: &str, partitions: i64) -> Option<f64> {
        self.json["latency"].as_array()?.iter().find(|r| {
            r["protocol"] == protocol
                && r["partitions"] == partitions
                && r["count"].as_u64() > Some(0)
        })?["p99_ms"]
            .as_f64()
    }

    fn cpu(&self) -> Option<f64> {
        self.json["loaded"]["cpu_pct"][0].as_f64()
    }
}

/// A line's value for a run, if the run measured it.
type Measure = Box<dyn Fn(&Run) -> Option<f64>>;
/// A panel's line: its label and its value.
type Line = (String, Measure);

fn panels() -> Vec<(&'static str, Vec<Line>)> {
    let by_size = |protocol: &'static str| -> Vec<Line> {
        SIZES
            .iter()
            .map(|&n| {
                let f: Measure = Box::new(move |r| r.p99(protocol, n));
                (format!("{}k partitions", n / 1000), f)
            })
            .collect()
    };
    vec![
        ("RequestSlots p99 (ms)", by_size("Celeborn")),
        ("getShuffleAssignments p99 (ms)", by_size("Uniffle")),
        (
            "coordinator 1 CPU (% of a core)",
            vec![("with drivers".to_string(), Box::new(|r: &Run| r.cpu()))],
        ),
    ]
}

/// The SVG of the runs in `paths` (each a fleet-scale `--json` file).
pub fn svg(paths: &[std::path::PathBuf]) -> anyhow::Result<String> {
    let mut runs = Vec::new();
    for p in paths {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let json: Value = serde_json::from_str(&text)?;
        let workers = json["workers"]
            .as_f64()
            .context("no `workers` in the run")?;
        runs.push(Run { workers, json });
    }
    runs.sort_by(|a, b| a.workers.total_cmp(&b.workers));
    let panels = panels();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="10">"#,
        W * panels.len() as f64,
        H + 20.0 * SIZES.len() as f64
    );
    for (k, (title, lines)) in panels.iter().enumerate() {
        draw_panel(&mut s, k as f64 * W, title, lines, &runs);
    }
    for (i, (label, _)) in panels[0].1.iter().enumerate() {
        let y = H + 14.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{PAD}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{label}</text>"#,
            PAD + 20.0,
            COLORS[i % COLORS.len()],
            PAD + 26.0,
            y + 4.0
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
}

/// x of a fleet size: log10 between 10^2 and 10^3 workers.
fn x_of(workers: f64) -> f64 {
    let decade = workers.max(1.0).log10().clamp(2.0, 3.0);
    PAD + (decade - 2.0) * (W - 2.0 * PAD)
}

fn draw_panel(s: &mut String, left: f64, title: &str, lines: &[Line], runs: &[Run]) {
    let top = lines
        .iter()
        .flat_map(|(_, f)| runs.iter().filter_map(f))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let y_of = |v: f64| H - PAD - v / top * (H - 2.0 * PAD);
    let _ = writeln!(s, r#"<g transform="translate({left},0)">"#);
    let _ = writeln!(
        s,
        r#"<text x="{PAD}" y="16" font-weight="bold">{title}</text>"#
    );
    let _ = writeln!(
        s,
        r##"<path d="M{PAD},{PAD} V{} H{}" fill="none" stroke="#444"/>"##,
        H - PAD,
        W - PAD
    );
    let _ = writeln!(s, r#"<text x="2" y="{}">{top:.0}</text>"#, PAD + 4.0);
    let _ = writeln!(s, r#"<text x="2" y="{}">0</text>"#, H - PAD);
    for r in runs {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x_of(r.workers),
            H - PAD + 14.0,
            r.workers
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">workers</text>"#,
        W / 2.0,
        H - PAD + 28.0
    );
    for (i, (_, f)) in lines.iter().enumerate() {
        let points: Vec<String> = runs
            .iter()
            .filter_map(|r| Some(format!("{:.1},{:.1}", x_of(r.workers), y_of(f(r)?))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            points.join(" "),
            COLORS[i % COLORS.len()]
        );
    }
    s.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_missing_a_size_draws_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let run = |workers: u64, p99: f64| {
            serde_json::json!({
                "workers": workers,
                "loaded": {"cpu_pct": [40.0, 10.0, 10.0]},
                "latency": [
                    {"protocol": "Celeborn", "partitions": 1000, "count": 5, "p99_ms": p99},
                    {"protocol": "Uniffle", "partitions": 1000, "count": 0, "p99_ms": 0.0},
                ],
            })
        };
        let paths: Vec<_> = [(1000, 80.0), (100, 5.0)]
            .iter()
            .enumerate()
            .map(|(i, &(w, p))| {
                let path = dir.path().join(format!("{i}.json"));
                std::fs::write(&path, run(w, p).to_string()).unwrap();
                path
            })
            .collect();
        let svg = svg(&paths).unwrap();
        // The RequestSlots 1k line has both runs, ordered by fleet size;
        // the Uniffle run with no calls draws no point.
        assert!(svg.contains(&format!(
            "{:.1},{:.1}",
            x_of(100.0),
            H - PAD - 5.0 / 88.0 * (H - 2.0 * PAD)
        )));
        assert!(svg.contains(">1000<"));
        assert_eq!(svg.matches("<polyline points=\"\"").count(), 7, "{svg}");
    }
}
