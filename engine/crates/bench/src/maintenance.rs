//! Explicit maintenance during a run — levee's journal compaction and AAE tree rebuilds — and
//! what it costs: the thread that runs it on a schedule and writes `maintenance.csv`, and the
//! throughput drop while it runs (`levee-bench drop`, the seeds' measure of a maintenance phase).

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::drivers::Driver;

pub const HEADER: &str = "elapsed, seconds, kind, bytes_before, bytes_after, error";

/// One kind of explicit maintenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// levee: `Store::compact_journal`.
    JournalCompaction,
    /// levee: `Store::rebuild_aae(false)`, a tree rebuilt from a fold of the ledger.
    AaeRebuild,
    /// levee: `Store::rebuild_aae(true)`, the same with each object's journal record checked.
    AaeRebuildJournalCheck,
}

impl Kind {
    pub const ALL: [Kind; 3] = [
        Kind::JournalCompaction,
        Kind::AaeRebuild,
        Kind::AaeRebuildJournalCheck,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::JournalCompaction => "journal_compaction",
            Kind::AaeRebuild => "aae_rebuild",
            Kind::AaeRebuildJournalCheck => "aae_rebuild_journal_check",
        }
    }

    pub fn parse(s: &str) -> Result<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .with_context(|| {
                format!(
                    "unknown maintenance kind {s:?} (one of {})",
                    Kind::ALL.map(Kind::name).join(", ")
                )
            })
    }
}

/// What one maintenance call did: journal bytes before and after (0, 0 for an AAE rebuild).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Which task runs next: the one due earliest (ties: the first listed), given each one's next
/// due time. `None` when there is no task.
pub fn next_task(due: &[Duration]) -> Option<usize> {
    (0..due.len()).min_by_key(|&i| (due[i], i))
}

/// Run `tasks` (kind, interval) on `driver` until `stop` or `deadline`, one at a time, each
/// `interval` after its previous call ended (the first `interval` after `start`); one row per
/// call in `out/maintenance.csv`. `None` when there is nothing to run.
pub fn spawn(
    driver: Arc<dyn Driver>,
    tasks: Vec<(Kind, Duration)>,
    out: &Path,
    start: Instant,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) -> Result<Option<JoinHandle<Result<()>>>> {
    if tasks.is_empty() {
        return Ok(None);
    }
    let path = out.join("maintenance.csv");
    let mut log =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    writeln!(log, "{HEADER}")?;
    // Named, so a profiler can pick this thread out (`perf record -t`).
    let thread = std::thread::Builder::new().name("maintenance".into());
    Ok(Some(thread.spawn(move || -> Result<()> {
        let mut due: Vec<Duration> = tasks.iter().map(|(_, every)| *every).collect();
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let Some(i) = next_task(&due).filter(|&i| due[i] != Duration::MAX) else {
                break;
            };
            if start.elapsed() < due[i] {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let (kind, every) = tasks[i];
            let t = Instant::now();
            let (outcome, error) = match driver.maintain(kind) {
                Ok(Some(o)) => (o, String::new()),
                // The engine compacts on its own: nothing of this kind to run.
                Ok(None) => {
                    due[i] = Duration::MAX;
                    continue;
                }
                Err(e) => (Outcome::default(), e.to_string().replace([',', '\n'], ";")),
            };
            writeln!(
                log,
                "{:.3}, {:.3}, {}, {}, {}, {error}",
                (t - start).as_secs_f64(),
                t.elapsed().as_secs_f64(),
                kind.name(),
                outcome.bytes_before,
                outcome.bytes_after
            )?;
            due[i] = start.elapsed() + every;
        }
        Ok(())
    })?))
}

/// A maintenance call as `maintenance.csv` records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Seconds from the run's start.
    pub start: f64,
    pub seconds: f64,
    pub kind: Kind,
    pub failed: bool,
}

/// Parse `maintenance.csv`. Runs from before the `kind` column held journal compactions only.
pub fn parse_calls(text: &str) -> Result<Vec<Call>> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        bail!("empty file, no header");
    };
    let with_kind = header.split(',').any(|f| f.trim() == "kind");
    lines
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            let need = if with_kind { 6 } else { 5 };
            if f.len() != need {
                bail!("line {}: {} fields, expected {need}", i + 1, f.len());
            }
            let num = |s: &str| -> Result<f64> {
                s.parse::<f64>()
                    .with_context(|| format!("line {}: {s:?} is not a number", i + 1))
            };
            let kind = if with_kind {
                Kind::parse(f[2]).with_context(|| format!("line {}", i + 1))?
            } else {
                Kind::JournalCompaction
            };
            Ok(Call {
                start: num(f[0])?,
                seconds: num(f[1])?,
                kind,
                failed: !f[need - 1].is_empty(),
            })
        })
        .collect()
}

/// One report window of `summary.csv`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Seconds from the run's start to the window's end.
    pub end: f64,
    pub seconds: f64,
    pub successful: f64,
}

/// Parse `summary.csv` (elapsed, window, total, successful, failed).
pub fn parse_windows(text: &str) -> Result<Vec<Window>> {
    let rows = crate::charts::parse_csv(text)?;
    rows.into_iter()
        .map(|r| {
            if r.len() < 4 {
                bail!("summary.csv rows need elapsed, window, total, successful");
            }
            Ok(Window {
                end: r[0],
                seconds: r[1],
                successful: r[3],
            })
        })
        .collect()
}

/// Throughput while maintenance ran against throughput while none did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drop {
    /// Windows at least half covered by a call of the kind asked for, and their mean ops/s.
    pub during: (usize, f64),
    /// Windows touched by no maintenance call of any kind, and their mean ops/s.
    pub quiet: (usize, f64),
}

impl Drop {
    /// The fall from quiet to during (0.25 = a quarter slower); `None` without both kinds of
    /// window.
    pub fn fraction(&self) -> Option<f64> {
        (self.during.0 > 0 && self.quiet.0 > 0 && self.quiet.1 > 0.0)
            .then(|| 1.0 - self.during.1 / self.quiet.1)
    }
}

/// Classify the windows that start at or after `from` seconds: "during" when calls of `kind`
/// cover at least half of the window, "quiet" when no call of any kind overlaps it; windows
/// in between count as neither. Failed calls count as maintenance too (they may have done
/// most of the work before failing).
pub fn drop_during(windows: &[Window], calls: &[Call], kind: Kind, from: f64) -> Drop {
    let overlap = |w: &Window, c: &Call| {
        let (ws, we) = (w.end - w.seconds, w.end);
        let (cs, ce) = (c.start, c.start + c.seconds);
        (we.min(ce) - ws.max(cs)).max(0.0)
    };
    let (mut during, mut quiet) = ((0usize, 0.0f64), (0usize, 0.0f64));
    for w in windows
        .iter()
        .filter(|w| w.seconds > 0.0 && w.end - w.seconds >= from)
    {
        let rate = w.successful / w.seconds;
        let covered: f64 = calls
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| overlap(w, c))
            .sum();
        if covered >= w.seconds / 2.0 {
            during.0 += 1;
            during.1 += rate;
        } else if calls.iter().all(|c| overlap(w, c) == 0.0) {
            quiet.0 += 1;
            quiet.1 += rate;
        }
    }
    let mean = |(n, sum): (usize, f64)| (n, if n == 0 { 0.0 } else { sum / n as f64 });
    Drop {
        during: mean(during),
        quiet: mean(quiet),
    }
}

/// `levee-bench drop <run>`: a table of the throughput drop per kind of maintenance in the run,
/// over the whole run and over its second half.
pub fn report(run: &Path) -> Result<String> {
    let read = |name: &str| {
        let p = run.join(name);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let windows = parse_windows(&read("summary.csv")?).context("in summary.csv")?;
    let calls = parse_calls(&read("maintenance.csv")?).context("in maintenance.csv")?;
    if calls.is_empty() {
        bail!("{} records no maintenance call", run.display());
    }
    let half = windows.last().map_or(0.0, |w| w.end / 2.0);
    let mut out = String::from(
        "| maintenance | calls | mean seconds | part | windows during | ops/s during | quiet windows | ops/s quiet | drop |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for kind in Kind::ALL {
        let of_kind: Vec<&Call> = calls.iter().filter(|c| c.kind == kind).collect();
        if of_kind.is_empty() {
            continue;
        }
        let mean_secs = of_kind.iter().map(|c| c.seconds).sum::<f64>() / of_kind.len() as f64;
        for (part, from) in [("run", 0.0), ("2nd half", half)] {
            let d = drop_during(&windows, &calls, kind, from);
            let fall = d
                .fraction()
                .map_or("n/a".to_string(), |f| format!("{:.1} %", f * 100.0));
            out.push_str(&format!(
                "| {} | {} | {mean_secs:.1} | {part} | {} | {:.0} | {} | {:.0} | {fall} |\n",
                kind.name(),
                of_kind.len(),
                d.during.0,
                d.during.1,
                d.quiet.0,
                d.quiet.1
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(end: f64, successful: f64) -> Window {
        Window {
            end,
            seconds: 10.0,
            successful,
        }
    }

    fn call(start: f64, seconds: f64, kind: Kind) -> Call {
        Call {
            start,
            seconds,
            kind,
            failed: false,
        }
    }

    #[test]
    fn windows_are_during_quiet_or_neither() {
        let windows = [
            w(10.0, 1000.0), // quiet: 100/s
            w(20.0, 500.0),  // 15..25 covers half: during, 50/s
            w(30.0, 900.0),  // 20..25 is half of it too: during, 90/s
            w(40.0, 3000.0), // quiet: 300/s
            w(50.0, 7000.0), // 1 s of a rebuild: neither
        ];
        let calls = [
            call(15.0, 10.0, Kind::JournalCompaction),
            call(43.0, 1.0, Kind::AaeRebuild),
        ];
        let d = drop_during(&windows, &calls, Kind::JournalCompaction, 0.0);
        assert_eq!(d.during, (2, 70.0));
        assert_eq!(d.quiet, (2, 200.0));
        assert!((d.fraction().unwrap() - 0.65).abs() < 1e-9);
        // The rebuild covers a tenth of its window: not "during", and that window is not quiet.
        let r = drop_during(&windows, &calls, Kind::AaeRebuild, 0.0);
        assert_eq!(r.during.0, 0);
        assert_eq!(r.quiet, (2, 200.0));
        assert_eq!(r.fraction(), None);
        // Only windows starting at or after `from`.
        let late = drop_during(&windows, &calls, Kind::JournalCompaction, 20.0);
        assert_eq!(late.during, (1, 90.0));
        assert_eq!(late.quiet, (1, 300.0));
    }

    #[test]
    fn a_window_covered_by_several_short_calls_is_during() {
        let windows = [w(10.0, 100.0), w(20.0, 400.0)];
        let calls = [
            call(0.0, 3.0, Kind::JournalCompaction),
            call(4.0, 3.0, Kind::JournalCompaction),
        ];
        let d = drop_during(&windows, &calls, Kind::JournalCompaction, 0.0);
        assert_eq!(d.during, (1, 10.0));
        assert_eq!(d.quiet, (1, 40.0));
    }

    #[test]
    fn maintenance_csv_parses_with_and_without_kind() {
        let new = format!(
            "{HEADER}\n12.000, 3.500, aae_rebuild_journal_check, 0, 0, \n40.1, 2.0, journal_compaction, 10, 4, Busy: running\n"
        );
        let calls = parse_calls(&new).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].kind, Kind::AaeRebuildJournalCheck);
        assert_eq!((calls[0].start, calls[0].seconds), (12.0, 3.5));
        assert!(!calls[0].failed);
        assert!(calls[1].failed);
        let old = "elapsed, seconds, bytes_before, bytes_after, error\n30.0, 1.0, 9, 3, \n";
        let calls = parse_calls(old).unwrap();
        assert_eq!(calls[0].kind, Kind::JournalCompaction);
        let bad = format!("{HEADER}\n1.0, 1.0, defrag, 0, 0, \n");
        let e = format!("{:#}", parse_calls(&bad).unwrap_err());
        assert!(e.contains("unknown maintenance kind \"defrag\""), "{e}");
        let short = format!("{HEADER}\n1.0, 1.0, aae_rebuild\n");
        assert!(parse_calls(&short).is_err());
    }

    #[test]
    fn the_earliest_due_task_runs_first() {
        let s = Duration::from_secs;
        assert_eq!(next_task(&[]), None);
        assert_eq!(next_task(&[s(30), s(10)]), Some(1));
        assert_eq!(next_task(&[s(10), s(10)]), Some(0));
        assert_eq!(next_task(&[Duration::MAX, s(99)]), Some(1));
    }
}
