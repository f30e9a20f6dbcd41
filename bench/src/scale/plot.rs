//! The scale bench's figures as one SVG: four panels against partitions
//! held (log scale): metadata RSS, push p99, read p99 and idle CPU, one
//! line per run (e.g. before and after a change). Hand-written: a few
//! polylines need no plotting crate.

use std::fmt::Write;

use super::Figures;

const W: f64 = 260.0;
const H: f64 = 200.0;
const PAD: f64 = 40.0;
const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

struct Panel {
    title: &'static str,
    value: fn(&Figures, usize) -> f64,
}

fn max2(a: f64, b: f64) -> f64 {
    a.max(b)
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "RSS over baseline (MiB)",
        value: |f, i| f.levels[i].rss_bytes.saturating_sub(f.baseline_rss_bytes) as f64 / 1048576.0,
    },
    Panel {
        title: "push p99 (ms, worse protocol)",
        value: |f, i| {
            let p = &f.levels[i].probes;
            max2(p.uniffle_push.p99_ms, p.celeborn_push.p99_ms)
        },
    },
    Panel {
        title: "read p99 (ms, worse protocol)",
        value: |f, i| {
            let p = &f.levels[i].probes;
            max2(p.uniffle_read.p99_ms, p.celeborn_read.p99_ms)
        },
    },
    Panel {
        title: "idle CPU (% of a core)",
        value: |f, i| f.levels[i].idle.cpu_percent,
    },
];

/// x position of a partition count: log10, with 0 drawn at 10^3.
fn x_of(partitions: usize) -> f64 {
    let decade = (partitions.max(1000) as f64).log10();
    PAD + (decade - 3.0) / 3.0 * (W - 2.0 * PAD)
}

/// The SVG of `runs`, each a label and its figures.
pub fn svg(runs: &[(&str, &Figures)]) -> String {
    let total_w = W * PANELS.len() as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{}" font-family="sans-serif" font-size="10">"#,
        H + 20.0 * runs.len() as f64
    );
    for (k, panel) in PANELS.iter().enumerate() {
        draw_panel(&mut s, k as f64 * W, panel, runs);
    }
    for (r, (label, _)) in runs.iter().enumerate() {
        let y = H + 14.0 + 20.0 * r as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{PAD}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{label}</text>"#,
            PAD + 20.0,
            COLORS[r % COLORS.len()],
            PAD + 26.0,
            y + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn draw_panel(s: &mut String, left: f64, panel: &Panel, runs: &[(&str, &Figures)]) {
    let top = runs
        .iter()
        .flat_map(|(_, f)| (0..f.levels.len()).map(|i| (panel.value)(f, i)))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let y_of = |v: f64| H - PAD + -(v / top) * (H - 2.0 * PAD);
    let _ = writeln!(s, r#"<g transform="translate({left},0)">"#);
    let _ = writeln!(
        s,
        r#"<text x="{PAD}" y="16" font-weight="bold">{}</text>"#,
        panel.title
    );
    let _ = writeln!(
        s,
        r##"<path d="M{PAD},{PAD} V{} H{}" fill="none" stroke="#444"/>"##,
        H - PAD,
        W - PAD
    );
    let _ = writeln!(s, r#"<text x="2" y="{}">{:.3}</text>"#, PAD + 4.0, top);
    let _ = writeln!(s, r#"<text x="2" y="{}">0</text>"#, H - PAD);
    for (n, label) in [
        (1000, "≤1e3"),
        (10_000, "1e4"),
        (100_000, "1e5"),
        (1_000_000, "1e6"),
    ] {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
            x_of(n),
            H - PAD + 14.0
        );
    }
    for (r, (_, f)) in runs.iter().enumerate() {
        let points: Vec<String> = (0..f.levels.len())
            .map(|i| {
                format!(
                    "{:.1},{:.1}",
                    x_of(f.levels[i].partitions),
                    y_of((panel.value)(f, i))
                )
            })
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            points.join(" "),
            COLORS[r % COLORS.len()]
        );
    }
    s.push_str("</g>\n");
}
