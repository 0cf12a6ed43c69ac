//! The load loop and basho_bench-compatible output: `summary.csv`, `<label>_latencies.csv` (µs,
//! HDR histograms per window; the label is the operation's name with `_` written as `-`, as
//! basho_bench names its files), `errors.csv`, plus `resources.csv` (device bytes written from
//! /proc/self/io, disk usage, RSS, CPU), `maintenance.csv` (explicit journal compactions and AAE
//! rebuilds, when the scenario asks for them: maintenance.rs) and `meta.txt`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::drivers::Driver;
use crate::generators::{
    key_bytes, random_buffer, unique_key, value_buffer, KeyGen, ValueGen, VALUE_BUFFER_BYTES,
};
use crate::records;
use crate::scenario::Scenario;

pub const SUMMARY_HEADER: &str = "elapsed, window, total, successful, failed";
pub const LATENCY_HEADER: &str =
    "elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors";
pub const ERRORS_HEADER: &str = "\"error\",\"count\"";
pub const RESOURCES_HEADER: &str =
    "elapsed, window, device_write_bytes, disk_bytes, rss_bytes, cpu_seconds";

/// basho_bench's label for an operation in file names: every character other than an ASCII letter
/// or digit becomes `-` (so `postcode_query` is written to `postcode-query_latencies.csv`).
pub fn basho_label(op: &str) -> String {
    op.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The per-operation latency file basho_bench writes for `op`.
pub fn latency_file_name(op: &str) -> String {
    format!("{}_latencies.csv", basho_label(op))
}

/// Size of the random buffer put_unique's documents are sliced from.
const UNIQUE_BUFFER_BYTES: usize = 32 << 20;

/// The value for `op` in a per-operation map, made by `new` the first time. Looked up by `&str`:
/// the hot path (every operation, under the window lock) allocates no key.
fn per_op<'a, V>(map: &'a mut BTreeMap<String, V>, op: &str, new: impl FnOnce() -> V) -> &'a mut V {
    if !map.contains_key(op) {
        map.insert(op.to_owned(), new());
    }
    map.get_mut(op).expect("inserted above")
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap()
}

#[derive(Default)]
struct Window {
    hists: BTreeMap<String, Histogram<u64>>,
    errors: BTreeMap<String, u64>,
    errors_by_op: BTreeMap<String, u64>,
}

/// Totals of a finished run.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub successful: u64,
    pub failed: u64,
    pub seconds: f64,
    pub user_bytes_written: u64,
    pub device_bytes_written: u64,
}

/// A progress line on stderr (drawn only on a terminal, never with `quiet`) of `len` steps.
fn progress_bar(quiet: bool, len: u64, template: &str) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Bytes this process caused to be written to the device (`write_bytes` of /proc/self/io).
fn proc_io_write_bytes() -> u64 {
    procfs::process::Process::myself()
        .and_then(|p| p.io())
        .map_or(0, |io| io.write_bytes)
}

/// A parameter of the kernel's free page reporting (`/sys/module/page_reporting/parameters`),
/// where the kernel has it.
fn page_reporting(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/module/page_reporting/parameters/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Resident bytes and CPU seconds (user + system) of this process, with the kernel's page size
/// and clock tick rather than assumed ones.
fn rss_and_cpu() -> (u64, f64) {
    let Ok(stat) = procfs::process::Process::myself().and_then(|p| p.stat()) else {
        return (0, 0.0);
    };
    let tick = procfs::ticks_per_second() as f64;
    let cpu = (stat.utime + stat.stime) as f64 / tick;
    (stat.rss * procfs::page_size(), cpu)
}

fn dir_bytes(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn pick_op(ops: &[(String, u32)], total: u32, rng: &mut SmallRng) -> usize {
    let mut r = rng.gen_range(0..total);
    for (i, (_, w)) in ops.iter().enumerate() {
        if r < *w {
            return i;
        }
        r -= w;
    }
    ops.len() - 1
}

/// Run the scenario against `driver`, writing the CSVs into `out`.
pub fn run(s: &Scenario, driver: Arc<dyn Driver>, out: &Path, quiet: bool) -> Result<RunResult> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let buf = value_buffer(VALUE_BUFFER_BYTES, 0x5EED, s.compressible);
    let user_bytes = Arc::new(AtomicU64::new(0));
    let io_start = proc_io_write_bytes();
    let reported_start = page_reporting("reported_kib");

    if s.preload.keys > 0 {
        let mut v = ValueGen::new(&s.value_generator, buf.clone(), 99);
        let start = Instant::now();
        let bar = progress_bar(
            quiet,
            s.preload.keys,
            "preload {pos}/{len} keys  {per_sec}  ETA {eta}",
        );
        for k in 0..s.preload.keys {
            let value = v.next_value(k);
            user_bytes.fetch_add(value.len() as u64 + 12, Ordering::Relaxed);
            driver.put(&key_bytes(k), value, &[])?;
            if k % 1_000 == 0 {
                bar.set_position(k);
            }
        }
        bar.finish_and_clear();
        if !quiet {
            eprintln!(
                "preload {} keys in {:.1} s",
                s.preload.keys,
                start.elapsed().as_secs_f64()
            );
        }
    }

    let windows: Vec<Arc<Mutex<Window>>> = (0..s.concurrent)
        .map(|_| Arc::new(Mutex::new(Window::default())))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let done_ops = Arc::new(AtomicU64::new(0));
    let done_errs = Arc::new(AtomicU64::new(0));
    let shared_seq = Arc::new(AtomicU64::new(s.preload.keys));
    // Write-once documents: incompressible whatever `compressible` says, numbered in the order
    // their puts were issued (get_unique reads one of those issued so far).
    let unique_buf = s
        .operations
        .iter()
        .any(|(op, _)| op == "put_unique")
        .then(|| random_buffer(UNIQUE_BUFFER_BYTES.max(2 * s.unique_value_size), 0xD0C5));
    let unique_seq = Arc::new(AtomicU64::new(0));
    let dob_regex = s.dob_regex()?;
    // Per query operation: (queries answered, results returned), for meta.txt.
    let query_results: Arc<Mutex<BTreeMap<String, (u64, u64)>>> = Arc::default();
    let total_weight: u32 = s.operations.iter().map(|(_, w)| *w).sum();
    let start = Instant::now();
    let deadline = start + s.duration;
    let workers: Vec<_> = (0..s.concurrent)
        .map(|w| {
            let (s, driver, window, stop) =
                (s.clone(), driver.clone(), windows[w].clone(), stop.clone());
            let (buf, shared, ops_c, errs_c, user) = (
                buf.clone(),
                shared_seq.clone(),
                done_ops.clone(),
                done_errs.clone(),
                user_bytes.clone(),
            );
            let (unique_buf, unique_seq, dob_regex, query_results) = (
                unique_buf.clone(),
                unique_seq.clone(),
                dob_regex.clone(),
                query_results.clone(),
            );
            let counted = move |op: &str, n: Result<usize>| {
                n.map(|n| {
                    let mut q = query_results.lock();
                    let e = per_op(&mut q, op, Default::default);
                    e.0 += 1;
                    e.1 += n as u64;
                })
            };
            std::thread::spawn(move || {
                let mut keys =
                    KeyGen::new(&s.key_generator, w as u64, s.concurrent as u64, shared, 1);
                let mut values = ValueGen::new(&s.value_generator, buf, w as u64 + 1000);
                let mut rng = SmallRng::seed_from_u64(w as u64 * 7919);
                let interval = (s.mode == "rate").then(|| Duration::from_secs_f64(1.0 / s.rate));
                let mut next_at = Instant::now();
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if let Some(iv) = interval {
                        let now = Instant::now();
                        if next_at > now {
                            std::thread::sleep(next_at - now);
                        }
                        next_at += iv;
                    }
                    let i = pick_op(&s.operations, total_weight, &mut rng);
                    let op = s.operations[i].0.as_str();
                    let k = if crate::scenario::UNKEYED_OPS.contains(&op) {
                        0
                    } else {
                        let Some(k) = keys.next_key() else { break };
                        k
                    };
                    let key = key_bytes(k);
                    let t = Instant::now();
                    let result: Result<()> = match op {
                        "get" => driver.get(&key).map(|_| ()),
                        "head" => driver.head(&key).map(|_| ()),
                        "delete" => driver.delete(&key),
                        "put" => {
                            let value = values.next_value(k);
                            user.fetch_add((value.len() + key.len()) as u64, Ordering::Relaxed);
                            driver.put(&key, value, &[])
                        }
                        "update" | "update_with_2i" => {
                            let index = (op == "update_with_2i")
                                .then(|| records::record(&mut rng, s.index.entries));
                            let value = values.next_value(k);
                            user.fetch_add((value.len() + key.len()) as u64, Ordering::Relaxed);
                            driver.update(&key, value, index.as_deref())
                        }
                        "put_unique" => {
                            let buf = unique_buf.as_deref().expect("allocated for put_unique");
                            let size = s.unique_value_size;
                            let off = rng.gen_range(0..=buf.len() - size);
                            let key = unique_key(unique_seq.fetch_add(1, Ordering::Relaxed));
                            let index = records::record(&mut rng, s.index.entries);
                            user.fetch_add((size + key.len()) as u64, Ordering::Relaxed);
                            driver.put(&key, &buf[off..off + size], &index)
                        }
                        "get_unique" => {
                            let n = unique_seq.load(Ordering::Relaxed);
                            let key = unique_key(if n == 0 { 0 } else { rng.gen_range(0..n) });
                            driver.get(&key).map(|_| ())
                        }
                        "postcode_query" => counted(
                            op,
                            driver.index_query(&records::postcode_query(
                                &mut rng,
                                s.index.max_results,
                            )),
                        ),
                        "dob_query" => counted(
                            op,
                            driver.index_query(&records::dob_query(
                                &mut rng,
                                dob_regex.as_ref(),
                                s.index.max_results,
                            )),
                        ),
                        _ => unreachable!("validated"),
                    };
                    let us = t.elapsed().as_micros() as u64;
                    let mut win = window.lock();
                    match result {
                        Ok(()) => per_op(&mut win.hists, op, hist).saturating_record(us.max(1)),
                        Err(e) => {
                            *win.errors.entry(format!("{op}: {e}")).or_default() += 1;
                            *per_op(&mut win.errors_by_op, op, Default::default) += 1;
                            errs_c.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    ops_c.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    // Explicit maintenance (levee journal compaction, AAE rebuilds): maintenance.csv.
    let maintenance = crate::maintenance::spawn(
        driver.clone(),
        s.maintenance()?,
        out,
        start,
        deadline,
        stop.clone(),
    )?;

    // Reporter: one row per window.
    let mut summary = std::fs::File::create(out.join("summary.csv"))?;
    writeln!(summary, "{SUMMARY_HEADER}")?;
    let mut resources = std::fs::File::create(out.join("resources.csv"))?;
    writeln!(resources, "{RESOURCES_HEADER}")?;
    let mut lat_files: BTreeMap<String, std::fs::File> = BTreeMap::new();
    for (op, _) in &s.operations {
        if !lat_files.contains_key(op) {
            let mut f = std::fs::File::create(out.join(latency_file_name(op)))?;
            writeln!(f, "{LATENCY_HEADER}")?;
            lat_files.insert(op.clone(), f);
        }
    }
    let mut all_errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut result = RunResult::default();
    let mut io_last = proc_io_write_bytes();
    let mut last_tick = start;
    let data_dir: Option<PathBuf> = driver.data_dir();
    let bar = progress_bar(
        quiet,
        s.duration.as_secs().max(1),
        &format!("{} [{{pos:>5}}/{{len}} s] {{msg}}", s.driver),
    );
    loop {
        let mut finished = workers.iter().all(|w| w.is_finished());
        let next_tick = last_tick + s.report_interval;
        // Sleep in short steps so the progress line stays live.
        while Instant::now() < next_tick && !workers.iter().all(|w| w.is_finished()) {
            std::thread::sleep(
                Duration::from_millis(100).min(next_tick.saturating_duration_since(Instant::now())),
            );
            let el = start.elapsed().as_secs_f64();
            bar.set_position(el as u64);
            bar.set_message(format!(
                "{:>9} ops  {:>8.0} ops/s  {} errors",
                done_ops.load(Ordering::Relaxed),
                done_ops.load(Ordering::Relaxed) as f64 / el.max(0.001),
                done_errs.load(Ordering::Relaxed)
            ));
        }
        // At the deadline, let the operations in flight finish into this window rather than
        // into a sliver of a window of their own.
        if Instant::now() >= deadline {
            while !workers.iter().all(|w| w.is_finished()) {
                std::thread::sleep(Duration::from_millis(1));
            }
            finished = true;
        }
        let now = Instant::now();
        let window_secs = (now - last_tick).as_secs_f64();
        last_tick = now;
        let elapsed = (now - start).as_secs_f64();
        let mut merged = Window::default();
        for w in &windows {
            let taken = std::mem::take(&mut *w.lock());
            for (op, h) in taken.hists {
                merged.hists.entry(op).or_insert_with(hist).add(&h).unwrap();
            }
            for (e, n) in taken.errors {
                *merged.errors.entry(e).or_default() += n;
            }
            for (e, n) in taken.errors_by_op {
                *merged.errors_by_op.entry(e).or_default() += n;
            }
        }
        let ok: u64 = merged.hists.values().map(|h| h.len()).sum();
        let failed: u64 = merged.errors.values().sum();
        if ok + failed > 0 || !finished {
            writeln!(
                summary,
                "{elapsed:.3}, {window_secs:.3}, {}, {ok}, {failed}",
                ok + failed
            )?;
            for (op, f) in lat_files.iter_mut() {
                let errors = merged.errors_by_op.get(op).copied().unwrap_or(0);
                match merged.hists.get(op) {
                    Some(h) if !h.is_empty() => writeln!(
                        f,
                        "{elapsed:.3}, {window_secs:.3}, {}, {}, {:.1}, {}, {}, {}, {}, {}, {errors}",
                        h.len(),
                        h.min(),
                        h.mean(),
                        h.value_at_quantile(0.5),
                        h.value_at_quantile(0.95),
                        h.value_at_quantile(0.99),
                        h.value_at_quantile(0.999),
                        h.max()
                    )?,
                    _ => writeln!(f, "{elapsed:.3}, {window_secs:.3}, 0, 0, 0, 0, 0, 0, 0, 0, {errors}")?,
                }
            }
            let io = proc_io_write_bytes();
            let (rss, cpu) = rss_and_cpu();
            let disk = data_dir.as_deref().map(dir_bytes).unwrap_or(0);
            writeln!(
                resources,
                "{elapsed:.3}, {window_secs:.3}, {}, {disk}, {rss}, {cpu:.2}",
                io - io_last
            )?;
            io_last = io;
        }
        result.successful += ok;
        result.failed += failed;
        for (e, n) in merged.errors {
            *all_errors.entry(e).or_default() += n;
        }
        if finished {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    }
    // The load ends here: waiting for a maintenance call in flight and for the driver to close
    // (a flush) is not time the workers had.
    let load_seconds = start.elapsed().as_secs_f64();
    if let Some(m) = maintenance {
        m.join()
            .map_err(|_| anyhow::anyhow!("the maintenance thread panicked"))??;
    }
    bar.finish_and_clear();
    driver.close()?;
    result.seconds = load_seconds;
    result.user_bytes_written = user_bytes.load(Ordering::Relaxed);
    result.device_bytes_written = proc_io_write_bytes() - io_start;
    let mut errors = std::fs::File::create(out.join("errors.csv"))?;
    writeln!(errors, "{ERRORS_HEADER}")?;
    for (e, n) in &all_errors {
        writeln!(errors, "\"{}\",{n}", e.replace('"', "'"))?;
    }
    let mut meta = format!(
        "driver={}\nsuccessful={}\nfailed={}\nseconds={:.3}\nuser_bytes_written={}\ndevice_bytes_written={}\n",
        s.driver, result.successful, result.failed, result.seconds, result.user_bytes_written, result.device_bytes_written
    );
    // levee's journal settings that decide how far its page cache grows (docs/benchmarks.md,
    // "Free page reporting").
    if s.driver == "levee" {
        meta.push_str(&format!(
            "journal_segment_mb={}
journal_spare_segments={}
compact_journal_every={}
",
            s.journal_segment_mb
                .unwrap_or(levee_store::Config::default().journal_segment_bytes >> 20),
            s.journal_spare_segments
                .unwrap_or(levee_store::Config::default().journal_spare_segments),
            s.compact_journal_every.as_deref().unwrap_or("off")
        ));
    }
    // The VM's free page reporting (virtio-balloon): memory handed back to the host during the
    // run must be faulted in again, at several times the cost, by whatever grows into it next —
    // a growing journal's page cache above all (docs/benchmarks.md, "Free page reporting").
    if let (Some(order), Some(start), Some(end)) = (
        page_reporting("page_reporting_order"),
        reported_start,
        page_reporting("reported_kib"),
    ) {
        meta.push_str(&format!(
            "page_reporting_order={order}\npage_reporting_kib={}\n",
            end.saturating_sub(start)
        ));
    }
    // Mean results per query, as basho_bench's 2i drivers log them.
    for (op, (n, results)) in query_results.lock().iter() {
        meta.push_str(&format!(
            "{op}_mean_results={:.3}\n",
            *results as f64 / (*n).max(1) as f64
        ));
    }
    std::fs::write(out.join("meta.txt"), meta)?;
    if !quiet {
        eprintln!(
            "done: {} ops in {:.1} s ({:.0} ops/s), {} errors, write amplification {:.2}",
            result.successful,
            result.seconds,
            result.successful as f64 / result.seconds,
            result.failed,
            result.device_bytes_written as f64 / result.user_bytes_written.max(1) as f64
        );
    }
    Ok(result)
}
