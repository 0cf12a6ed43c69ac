//! Throughput against accumulated operations, as the seeds compare long runs: the more a store
//! holds, the harder each request gets, so runs are compared at the same operation count rather
//! than the same elapsed time. Each window is a point (operations so far, ops/s in the window);
//! a least-squares line through each run's points is its trend, and the table compares the
//! trends where the shortest run ended (the seeds' "difference in the trendlines").

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use plotters::prelude::*;

use crate::charts::{self, RunData, Series};

/// (operations completed by the end of the window, ops/s in the window) per summary row.
pub fn points(summary: &[Vec<f64>]) -> Vec<(f64, f64)> {
    let mut done = 0.0;
    summary
        .iter()
        .filter(|r| r[1] > 0.0)
        .map(|r| {
            done += r[3];
            (done, r[3] / r[1])
        })
        .collect()
}

/// The least-squares line `y = a + b·x` through `points`: `(a, b)`, or `None` with fewer than two
/// distinct x.
pub fn fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= f64::EPSILON * mx.abs().max(1.0) {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

/// The markdown table: per run, its operations, its trend at the start and at the common end
/// (the operations of the shortest run), and the first run's trend there ÷ its own.
pub fn table(runs: &[RunData]) -> Result<String> {
    let fits: Vec<(f64, (f64, f64))> = runs
        .iter()
        .map(|r| {
            let p = points(&r.summary);
            let total = p.last().map_or(0.0, |l| l.0);
            match fit(&p) {
                Some(f) => Ok((total, f)),
                None => bail!("{}: fewer than two report windows, no trend", r.name),
            }
        })
        .collect::<Result<_>>()?;
    let end = fits.iter().map(|f| f.0).fold(f64::INFINITY, f64::min);
    let at = |(a, b): (f64, f64), x: f64| a + b * x;
    let base = at(fits[0].1, end);
    let first = &runs[0].name;
    let mut md = format!(
        "| run | operations | trend at 0 (ops/s) | trend at {:.2} M ops (ops/s) | {first}/run there |\n|---|---:|---:|---:|---:|\n",
        end / 1e6
    );
    for (r, (total, f)) in runs.iter().zip(&fits) {
        let here = at(*f, end);
        let ratio = if here > 0.0 {
            format!("{:.2}×", base / here)
        } else {
            "–".into()
        };
        md.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {ratio} |\n",
            r.name, total, f.0, here
        ));
    }
    Ok(md)
}

/// Draw `runs` (each window a point, each run's trend a lighter line) into `out_png` and return
/// [`table`].
pub fn compare(runs: &[PathBuf], out_png: &Path) -> Result<String> {
    if runs.is_empty() {
        bail!("accumulated needs at least one run directory");
    }
    let data: Vec<RunData> = runs
        .iter()
        .map(|r| RunData::load(r))
        .collect::<Result<_>>()?;
    let md = table(&data)?;
    charts::ensure_font()?;
    let root =
        BitMapBackend::new(out_png, (charts::WIDTH, charts::PANEL_HEIGHT * 2)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut series = Vec::new();
    for (i, r) in data.iter().enumerate() {
        let p: Vec<(f64, f64)> = points(&r.summary)
            .into_iter()
            .map(|(x, y)| (x / 1e6, y))
            .collect();
        if let Some((a, b)) = fit(&p) {
            let end = p.last().map_or(0.0, |l| l.0);
            series.push(Series {
                name: format!("{} trend", r.name),
                points: vec![(0.0, a), (end, a + b * end)],
                group: i,
                variant: 1,
            });
        }
        series.push(Series {
            name: r.name.clone(),
            points: p,
            group: i,
            variant: 0,
        });
    }
    charts::panel_over(
        &root,
        "Throughput against accumulated operations",
        "operations so far (millions)",
        "ops/s",
        &series,
    )?;
    root.present()?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(elapsed: f64, window: f64, ok: f64) -> Vec<f64> {
        vec![elapsed, window, ok, ok, 0.0]
    }

    #[test]
    fn windows_become_points_at_the_operations_done_so_far() {
        let s = vec![
            row(10.0, 10.0, 1000.0),
            row(20.0, 10.0, 500.0),
            row(25.0, 5.0, 500.0),
        ];
        assert_eq!(
            points(&s),
            vec![(1000.0, 100.0), (1500.0, 50.0), (2000.0, 100.0)]
        );
        assert!(points(&[]).is_empty());
    }

    #[test]
    fn the_trend_is_the_least_squares_line() {
        // (points, (intercept, slope))
        type Line = Option<(f64, f64)>;
        let cases: Vec<(Vec<(f64, f64)>, Line)> = vec![
            (vec![(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)], Some((1.0, 2.0))),
            (vec![(1.0, 4.0), (3.0, 4.0)], Some((4.0, 0.0))),
            // Symmetric noise around y = 10 - x.
            (
                vec![(0.0, 11.0), (0.0, 9.0), (4.0, 7.0), (4.0, 5.0)],
                Some((10.0, -1.0)),
            ),
            (vec![(1.0, 4.0)], None),
            (vec![(2.0, 4.0), (2.0, 6.0)], None),
        ];
        for (p, want) in cases {
            let got = fit(&p);
            match (got, want) {
                (Some((a, b)), Some((wa, wb))) => {
                    assert!(
                        (a - wa).abs() < 1e-9 && (b - wb).abs() < 1e-9,
                        "{p:?}: {got:?}"
                    )
                }
                (g, w) => assert_eq!(g, w, "{p:?}"),
            }
        }
    }

    #[test]
    fn the_table_compares_trends_where_the_shortest_run_ended() {
        let run = |name: &str, s: Vec<Vec<f64>>| RunData {
            name: name.into(),
            summary: s,
            latencies: Default::default(),
            meta: Default::default(),
        };
        // a: flat at 200 ops/s over 4,000 ops; b: from 150 falling to 50 over 2,000 ops.
        let a = run(
            "a",
            (1..=4).map(|i| row(i as f64 * 5.0, 5.0, 1000.0)).collect(),
        );
        let b = run(
            "b",
            vec![
                row(5.0, 5.0, 750.0),
                row(15.0, 10.0, 1000.0),
                row(20.0, 5.0, 250.0),
            ],
        );
        let t = table(&[a, b]).unwrap();
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("trend at 0.00 M ops"), "{t}");
        assert!(
            lines[2].starts_with("| a | 4000 | 200 | 200 | 1.00× |"),
            "{t}"
        );
        // b's points (750, 150), (1750, 100), (2000, 50): the line is 207.1 - 0.0714·x, 64.3 at
        // 2,000 operations; a/b there = 3.11.
        assert!(
            lines[3].starts_with("| b | 2000 | 207 | 64 | 3.11× |"),
            "{t}"
        );
        let one = run("c", vec![row(5.0, 5.0, 10.0)]);
        assert!(table(&[one]).is_err());
    }
}
