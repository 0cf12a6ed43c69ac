//! Charts in basho_bench's layout (plotters, bitmap backend): `summary.png` per run, and a
//! side-by-side comparison of several runs with a markdown table of ratios.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use plotters::prelude::*;

pub const WIDTH: u32 = 1200;
pub const PANEL_HEIGHT: u32 = 300;

/// One CSV as rows of numbers (header dropped). A field that is not a number, or a row with
/// another count of fields than the header, is an error naming the file and line: a chart drawn
/// from a damaged or foreign CSV would show made-up zeros.
fn read_csv(p: &Path) -> Result<Vec<Vec<f64>>> {
    let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
    parse_csv(&text).with_context(|| format!("reading {}", p.display()))
}

pub(crate) fn parse_csv(text: &str) -> Result<Vec<Vec<f64>>> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        bail!("empty file, no header");
    };
    let width = header.split(',').count();
    lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let row = l
                .split(',')
                .enumerate()
                .map(|(f, v)| {
                    let v = v.trim();
                    v.parse::<f64>().with_context(|| {
                        format!("line {}, field {}: {v:?} is not a number", i + 1, f + 1)
                    })
                })
                .collect::<Result<Vec<f64>>>()?;
            if row.len() != width {
                bail!(
                    "line {}: {} fields where the header has {width}",
                    i + 1,
                    row.len()
                );
            }
            Ok(row)
        })
        .collect()
}

/// A run directory's data: throughput per window and latency rows per op.
pub struct RunData {
    pub name: String,
    pub summary: Vec<Vec<f64>>,
    /// Latency rows by basho_bench label (the file name's `<label>_latencies.csv`).
    pub latencies: BTreeMap<String, Vec<Vec<f64>>>,
    pub meta: BTreeMap<String, String>,
}

impl RunData {
    pub fn load(dir: &Path) -> Result<RunData> {
        let summary = read_csv(&dir.join("summary.csv"))?;
        let mut latencies = BTreeMap::new();
        for e in std::fs::read_dir(dir)? {
            let name = e?.file_name().to_string_lossy().into_owned();
            if let Some(op) = name.strip_suffix("_latencies.csv") {
                latencies.insert(op.to_string(), read_csv(&dir.join(&name))?);
            }
        }
        let meta = std::fs::read_to_string(dir.join("meta.txt"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect();
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(RunData {
            name,
            summary,
            latencies,
            meta,
        })
    }

    pub fn ops_per_sec(&self) -> f64 {
        let ok: f64 = self.summary.iter().map(|r| r[3]).sum();
        let secs: f64 = self.summary.iter().map(|r| r[1]).sum();
        ok / secs.max(1e-9)
    }

    /// Throughput over the windows that end in the second half of the run: closer to steady
    /// state than the whole-run figure, which the first windows (everything cached, no merge
    /// backlog yet) can flatter.
    pub fn second_half_ops_per_sec(&self) -> f64 {
        let end = self.summary.iter().map(|r| r[0]).fold(0.0, f64::max);
        let late: Vec<&Vec<f64>> = self
            .summary
            .iter()
            .filter(|r| r[0] - r[1] >= end / 2.0 - 1e-9)
            .collect();
        let ok: f64 = late.iter().map(|r| r[3]).sum();
        let secs: f64 = late.iter().map(|r| r[1]).sum();
        ok / secs.max(1e-9)
    }

    /// Mean over windows of the per-window max latency (µs) of `op`.
    pub fn mean_window_max(&self, op: &str) -> Option<f64> {
        let rows: Vec<&Vec<f64>> = self
            .latencies
            .get(op)?
            .iter()
            .filter(|r| r[2] > 0.0)
            .collect();
        (!rows.is_empty()).then(|| rows.iter().map(|r| r[9]).sum::<f64>() / rows.len() as f64)
    }

    pub fn write_amplification(&self) -> Option<f64> {
        let user: f64 = self.meta.get("user_bytes_written")?.parse().ok()?;
        let dev: f64 = self.meta.get("device_bytes_written")?.parse().ok()?;
        (user > 0.0).then_some(dev / user)
    }
}

/// Fonts tried in order when `LEVEE_BENCH_FONT` is unset (`make bench-deps` installs the first).
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// plotters draws text with ab_glyph from a TTF file registered here (no fontconfig needed).
pub(crate) fn ensure_font() -> Result<()> {
    static ONCE: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let candidates: Vec<String> = match std::env::var("LEVEE_BENCH_FONT") {
            Ok(p) => vec![p],
            Err(_) => FONT_CANDIDATES.iter().map(|s| s.to_string()).collect(),
        };
        let (path, bytes) = candidates
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (p.clone(), b)))
            .ok_or_else(|| {
                format!("no TTF font found (tried {}): run `make bench-deps` (fonts-dejavu-core) or set LEVEE_BENCH_FONT", candidates.join(", "))
            })?;
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into_boxed_slice()))
            .map_err(|_| format!("{path} is not a usable font"))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A line: its legend name, its points, its colour group (one run, or one op of a single run)
/// and its variant within the group (mean, median, 95th share a colour and differ in style).
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub group: usize,
    pub variant: usize,
}

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    panel_over(area, title, "elapsed (s)", y_label, series)
}

/// One chart of `series` against an x axis named `x_label`.
pub(crate) fn panel_over(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<()> {
    let x_end = series
        .iter()
        .flat_map(|s| s.points.iter().map(|x| x.0))
        .fold(1.0, f64::max);
    // Room on the right for the legend, so it does not cover the last windows.
    let x_max = x_end * 1.22;
    let y_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.1;
    // Enough decimals that neighbouring ticks differ: 120000 → 0, 4.4 → 1, 0.035 → 3.
    let decimals = (1.0 - y_max.log10().floor()).clamp(0.0, 6.0) as usize;
    let y_fmt = move |v: &f64| format!("{v:.decimals$}");
    // The x axis likewise: seconds need none, millions of operations may.
    let x_decimals = (1.0 - x_max.log10().floor()).clamp(0.0, 6.0) as usize;
    let x_fmt = move |v: &f64| format!("{v:.x_decimals$}");
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .label_style(("sans-serif", 12))
        .draw()?;
    for s in series {
        let base = COLORS[s.group % COLORS.len()];
        // Variant 0 solid and thick, 1 lighter, 2 thin; markers differ too.
        let (style, width) = match s.variant {
            0 => (base.to_rgba(), 3),
            1 => (base.mix(0.45), 2),
            _ => (base.mix(0.9), 1),
        };
        let line = ShapeStyle::from(style).stroke_width(width);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), line))?
            .label(s.name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], line));
        // Markers too, so a run with a single window still shows its value.
        match s.variant {
            0 => chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 3, style.filled())))?,
            1 => chart.draw_series(s.points.iter().map(|p| Circle::new(*p, 3, style)))?,
            _ => chart.draw_series(
                s.points
                    .iter()
                    .map(|p| TriangleMarker::new(*p, 4, style.filled())),
            )?,
        };
    }
    if series.len() > 1 || series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()?;
    }
    Ok(())
}

/// basho_bench's panels: throughput; mean/median/95th; 99th; 99.9th; max (ms). `runs` of one run:
/// one line per op; several runs: one line per run for `op`.
fn draw(out: &Path, title: &str, runs: &[RunData], op: Option<&str>) -> Result<()> {
    ensure_font()?;
    let root = BitMapBackend::new(out, (WIDTH, PANEL_HEIGHT * 5)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let panels = root.split_evenly((5, 1));
    let throughput: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: if runs.len() > 1 {
                r.name.clone()
            } else {
                "successful".into()
            },
            points: r
                .summary
                .iter()
                .map(|row| (row[0], row[3] / row[1].max(1e-9)))
                .collect(),
            group: i,
            variant: 0,
        })
        .collect();
    panel(&panels[0], "Throughput", "ops/s", &throughput)?;
    let lines = |cols: &[(usize, &str)]| -> Vec<Series> {
        let mut out = Vec::new();
        for (run_index, r) in runs.iter().enumerate() {
            for (op_index, (op_name, rows)) in r.latencies.iter().enumerate() {
                if op.is_some_and(|o| o != op_name) {
                    continue;
                }
                let group = if runs.len() > 1 { run_index } else { op_index };
                for (variant, (col, label)) in cols.iter().enumerate() {
                    let name = match (runs.len() > 1, cols.len() > 1) {
                        (true, true) => format!("{} {label}", r.name),
                        (true, false) => r.name.clone(),
                        (false, true) => format!("{op_name} {label}"),
                        (false, false) => op_name.clone(),
                    };
                    out.push(Series {
                        name,
                        points: rows
                            .iter()
                            .filter(|x| x[2] > 0.0)
                            .map(|x| (x[0], x[*col] / 1000.0))
                            .collect(),
                        group,
                        variant,
                    });
                }
            }
        }
        out
    };
    panel(
        &panels[1],
        "Latency: mean, median, 95th",
        "ms",
        &lines(&[(4, "mean"), (5, "median"), (6, "95th")]),
    )?;
    panel(
        &panels[2],
        "Latency: 99th percentile",
        "ms",
        &lines(&[(7, "99th")]),
    )?;
    panel(
        &panels[3],
        "Latency: 99.9th percentile",
        "ms",
        &lines(&[(8, "99.9th")]),
    )?;
    panel(&panels[4], "Latency: max", "ms", &lines(&[(9, "max")]))?;
    root.present()?;
    Ok(())
}

pub fn summary_png(run_dir: &Path) -> Result<PathBuf> {
    let run = RunData::load(run_dir)?;
    let out = run_dir.join("summary.png");
    let title = format!(
        "{} — {}",
        run.meta.get("driver").cloned().unwrap_or_default(),
        run.name
    );
    draw(&out, &title, std::slice::from_ref(&run), None)?;
    Ok(out)
}

/// Draw `runs` side by side for `op` and return a markdown table of each run against the first
/// (throughput, mean of per-window max latency per op, device write amplification).
pub fn compare(runs: &[PathBuf], out_png: &Path, op: &str) -> Result<String> {
    if runs.len() < 2 {
        bail!("compare needs at least two run directories");
    }
    // Runs are keyed by the label in their file names (`postcode_query` → `postcode-query`).
    let label = crate::runner::basho_label(op);
    let op = label.as_str();
    let data: Vec<RunData> = runs
        .iter()
        .map(|r| RunData::load(r))
        .collect::<Result<_>>()?;
    draw(
        out_png,
        &format!(
            "{op}: {}",
            data.iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(" vs ")
        ),
        &data,
        Some(op),
    )?;
    let base = &data[0];
    let ops: Vec<&String> = base.latencies.keys().collect();
    // Every ratio is first run ÷ this run, so with levee first: throughput ≥ 1 and latency ≤ 1
    // mean levee is ahead.
    let b = &base.name;
    let mut md = format!("| run | ops/s | ops/s {b}/run | 2nd-half ops/s | 2nd half {b}/run | ");
    for o in &ops {
        md.push_str(&format!("{o} mean window max (ms) | {o} max {b}/run | "));
    }
    md.push_str("device WA |\n|---|---:|---:|---:|---:|");
    md.push_str(&"---:|---:|".repeat(ops.len()));
    md.push_str("---:|\n");
    let ratio = |x: f64, y: f64| {
        if y > 0.0 {
            format!("{:.2}×", x / y)
        } else {
            "–".to_string()
        }
    };
    for d in &data {
        md.push_str(&format!(
            "| {} | {:.0} | {} | ",
            d.name,
            d.ops_per_sec(),
            ratio(base.ops_per_sec(), d.ops_per_sec())
        ));
        let (late, base_late) = (d.second_half_ops_per_sec(), base.second_half_ops_per_sec());
        md.push_str(&format!("{late:.0} | {} | ", ratio(base_late, late)));
        for o in &ops {
            match (d.mean_window_max(o), base.mean_window_max(o)) {
                (Some(v), Some(bv)) => {
                    md.push_str(&format!("{:.1} | {} | ", v / 1000.0, ratio(bv, v)))
                }
                (Some(v), None) => md.push_str(&format!("{:.1} | – | ", v / 1000.0)),
                _ => md.push_str("– | – | "),
            }
        }
        match d.write_amplification() {
            Some(wa) => md.push_str(&format!("{wa:.2} |\n")),
            None => md.push_str("– |\n"),
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_parse_as_numbers_and_a_bad_field_is_an_error() {
        let ok = "elapsed, window, total\n1, 1, 10\n\n2, 1, 12.5\n";
        assert_eq!(
            parse_csv(ok).unwrap(),
            vec![vec![1.0, 1.0, 10.0], vec![2.0, 1.0, 12.5]]
        );
        for (bad, why) in [
            (
                "a, b, c\n1, 2, x\n",
                "line 2, field 3: \"x\" is not a number",
            ),
            ("a, b, c\n1, 2, 3\n1, , 3\n", "line 3, field 2"),
            ("a, b, c\n1, 2\n", "line 2: 2 fields where the header has 3"),
            ("a, b, c\n1, 2, 3, 4\n", "line 2: 4 fields"),
            ("", "empty file"),
        ] {
            let err = format!("{:#}", parse_csv(bad).unwrap_err());
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_run_with_a_damaged_csv_is_not_charted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("summary.csv"),
            "elapsed, window, total, successful, failed\n1, 1, 10, 10, 0\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("get_latencies.csv"),
            "elapsed, window, n, min\n1, 1, 10, oops\n",
        )
        .unwrap();
        let err = format!("{:#}", RunData::load(dir.path()).err().unwrap());
        assert!(
            err.contains("get_latencies.csv") && err.contains("\"oops\" is not a number"),
            "{err}"
        );
    }
}
