//! `levee-bench run <scenario.toml> [--out DIR [--force]] [--driver NAME] [--duration D]
//!   [--compact-journal-every D [--compaction-mb-per-sec N]]
//!   [--rebuild-aae-every D [--journal-check]] [--quiet]`
//! `levee-bench drop <run dir>`
//! `levee-bench compare <run dir>... --out compare.png [--op get]`
//! `levee-bench accumulated <run dir>... --out accumulated.png`

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use levee_bench::{charts, drivers, runner, scenario};

#[derive(Parser)]
#[command(
    name = "levee-bench",
    version,
    about = "Volume tests with basho_bench-compatible output"
)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size of `Run`'s options beside the small commands costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario; writes summary.csv, <label>_latencies.csv (basho_bench's labels:
    /// `postcode_query` → postcode-query), errors.csv, resources.csv and summary.png.
    ///
    /// Key generators follow basho_bench (`uniform_int` draws 1..N) except one: `sequential_int`
    /// is one sequence shared by all workers, starting after the preloaded keys, so each key is
    /// written once (basho_bench gives each worker its own, writing every key `concurrent`
    /// times); use `partitioned_sequential_int` for one disjoint range per worker.
    Run {
        /// The scenario file (TOML; docs/benchmarks.md).
        scenario: PathBuf,
        /// Run directory (default out/<scenario>-<driver>). It must not exist or be empty; an
        /// earlier run's directory is replaced only with --force, and any other non-empty
        /// directory is refused even then.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace the earlier run held by --out.
        #[arg(long)]
        force: bool,
        /// Override the scenario's driver: levee, rocksdb, rocksdb-blob, fjall, leveldb or grpc.
        #[arg(long)]
        driver: Option<String>,
        /// Override the scenario's duration (e.g. 30s).
        #[arg(long)]
        duration: Option<String>,
        /// Data directory for embedded drivers (default: <out>/data, removed afterwards).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// gRPC driver address.
        #[arg(long)]
        address: Option<String>,
        /// Override the scenario's compression: none, lz4 or zstd (levee, rocksdb, rocksdb-blob).
        #[arg(long)]
        compression: Option<String>,
        /// Override the scenario's explicit maintenance interval (levee's journal compaction,
        /// e.g. 30s, or `off`; other engines compact on their own and ignore it).
        #[arg(long)]
        compact_journal_every: Option<String>,
        /// Override the scenario's AAE rebuild interval (levee's tree rebuilt from a fold of the
        /// ledger, e.g. 3m; other engines ignore it).
        #[arg(long)]
        rebuild_aae_every: Option<String>,
        /// The AAE rebuilds check each object's journal record too.
        #[arg(long)]
        journal_check: bool,
        /// levee only: pace journal compaction to this many MB/s of reads + writes.
        #[arg(long)]
        compaction_mb_per_sec: Option<u64>,
        /// levee only: roll journal segments at this many MiB (the store's default: 256).
        #[arg(long)]
        journal_segment_mb: Option<u64>,
        /// levee only: keep this many replaced journal segment files for rolls to write over,
        /// 0–16 (the store's default: 2).
        #[arg(long)]
        journal_spares: Option<usize>,
        /// levee only: the percent of the time a journal compaction works, 1–100 (the store's
        /// default: 100, unpaced).
        #[arg(long)]
        compaction_busy_percent: Option<u32>,
        /// levee only: the percent of the time an AAE rebuild works, 1–100 (100: unpaced; the
        /// store's default: 10).
        #[arg(long)]
        aae_busy_percent: Option<u32>,
        /// levee only: the nice value, 0–19, of the journal compaction thread (the store's
        /// default: 10; 0: no thread of its own, the maintenance thread's priority).
        #[arg(long, allow_negative_numbers = true)]
        compaction_nice: Option<i32>,
        /// No progress line.
        #[arg(long)]
        quiet: bool,
        /// Check the scenario with these options (driver name, settings) and exit without
        /// running: `make bench` checks every cell of its matrix this way before the first run.
        #[arg(long)]
        check: bool,
    },
    /// Serve the node-path anchor: `levee.v1.KV` answered from memory by a bare tonic server with
    /// `levee serve`'s transport settings, for `run --driver grpc --address` to load next to a
    /// node (docs/benchmarks.md, "A levee node over gRPC"). Runs until stopped.
    Anchor {
        /// Address to listen on (port 0: any free port; the line printed says which).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Runtime worker threads (`levee serve` uses one per core).
        #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |n| n.get()))]
        threads: usize,
    },
    /// The throughput drop while maintenance ran (maintenance.csv) against windows with none,
    /// per kind of maintenance, over the run and its second half (docs/benchmarks.md).
    Drop {
        /// A run directory with summary.csv and maintenance.csv.
        run: PathBuf,
    },
    /// Draw several runs side by side and print a markdown table of ratios to the first.
    Compare {
        /// Run directories; every ratio is to the first.
        runs: Vec<PathBuf>,
        /// The chart written.
        #[arg(long, default_value = "compare.png")]
        out: PathBuf,
        /// The operation compared (get, update, put, ...).
        #[arg(long, default_value = "get")]
        op: String,
    },
    /// Chart throughput against accumulated operations (how the seeds compare long runs), with a
    /// least-squares trend per run, and print the trends where the shortest run ended.
    Accumulated {
        /// Run directories; the ratio is the first run's trend ÷ each run's.
        runs: Vec<PathBuf>,
        /// The chart written.
        #[arg(long, default_value = "accumulated.png")]
        out: PathBuf,
    },
}

/// Written first into every run directory, so even a run stopped during preload is recognised.
const RUN_MARKER: &str = ".levee-bench-run";

/// Make way for a run in `out`: an empty or missing directory is used; an earlier run's results
/// are replaced only when `force` says so; anything else is refused.
fn clear_run_dir(out: &std::path::Path, force: bool) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    let empty = std::fs::read_dir(out)
        .with_context(|| format!("reading {}", out.display()))?
        .next()
        .is_none();
    let earlier_run = out.join(RUN_MARKER).is_file() || out.join("summary.csv").is_file();
    if !empty && !earlier_run {
        anyhow::bail!(
            "refusing to delete {}: it exists and is not an earlier levee-bench run (no {RUN_MARKER} \
             or summary.csv); choose another --out or remove it yourself",
            out.display()
        );
    }
    if empty {
        return Ok(());
    }
    if !force {
        anyhow::bail!(
            "{} holds an earlier levee-bench run; pass --force to replace it, or choose another --out",
            out.display()
        );
    }
    eprintln!("replacing the earlier run in {}", out.display());
    std::fs::remove_dir_all(out).with_context(|| format!("clearing {}", out.display()))
}

fn main() -> Result<()> {
    match Args::parse().cmd {
        Cmd::Anchor { listen, threads } => levee_bench::anchor::serve(listen, threads)?,
        Cmd::Run {
            scenario,
            out,
            force,
            driver,
            duration,
            data_dir,
            address,
            compression,
            compact_journal_every,
            rebuild_aae_every,
            journal_check,
            compaction_mb_per_sec,
            journal_segment_mb,
            journal_spares,
            aae_busy_percent,
            compaction_busy_percent,
            compaction_nice,
            quiet,
            check,
        } => {
            let mut s = scenario::Scenario::load(&scenario)?;
            if compression.is_some() {
                s.compression = compression;
            }
            if let Some(every) = compact_journal_every {
                s.compact_journal_every = (every != "off").then_some(every);
            }
            if rebuild_aae_every.is_some() {
                s.rebuild_aae_every = rebuild_aae_every;
            }
            if journal_check {
                s.rebuild_aae_journal_check = true;
            }
            if compaction_mb_per_sec.is_some() {
                s.compaction_mb_per_sec = compaction_mb_per_sec;
            }
            if journal_segment_mb.is_some() {
                s.journal_segment_mb = journal_segment_mb;
            }
            if journal_spares.is_some() {
                s.journal_spare_segments = journal_spares;
            }
            if compaction_busy_percent.is_some() {
                s.compaction_busy_percent = compaction_busy_percent;
            }
            if aae_busy_percent.is_some() {
                s.aae_rebuild_busy_percent = aae_busy_percent;
            }
            if compaction_nice.is_some() {
                s.compaction_nice = compaction_nice;
            }
            if let Some(d) = driver {
                s.driver = d;
            }
            if let Some(d) = duration {
                s.duration = scenario::parse_duration(&d)?;
            }
            if address.is_some() {
                s.address = address;
            }
            s.validate()?;
            if check {
                println!("{}: {} is a valid run", scenario.display(), s.driver);
                return Ok(());
            }
            let stem = scenario
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let out =
                out.unwrap_or_else(|| PathBuf::from("out").join(format!("{stem}-{}", s.driver)));
            clear_run_dir(&out, force)?;
            std::fs::create_dir_all(&out)
                .and_then(|_| std::fs::write(out.join(RUN_MARKER), ""))
                .with_context(|| format!("creating {}", out.display()))?;
            let (data, temporary) = match data_dir {
                Some(d) => (d, false),
                None => (out.join("data"), true),
            };
            std::fs::create_dir_all(&data)?;
            let driver = drivers::open(&s, &data)?;
            let r = runner::run(&s, driver, &out, quiet)?;
            let png = charts::summary_png(&out)?;
            if temporary {
                let _ = std::fs::remove_dir_all(&data);
            }
            println!(
                "{}: {} ops in {:.1} s = {:.0} ops/s, {} errors; results in {} ({})",
                s.driver,
                r.successful,
                r.seconds,
                r.successful as f64 / r.seconds,
                r.failed,
                out.display(),
                png.display()
            );
        }
        Cmd::Drop { run } => print!("{}", levee_bench::maintenance::report(&run)?),
        Cmd::Accumulated { runs, out } => {
            println!("{}", levee_bench::accumulated::compare(&runs, &out)?);
            eprintln!("chart: {}", out.display());
        }
        Cmd::Compare { runs, out, op } => {
            let table = charts::compare(&runs, &out, &op)?;
            println!("{table}");
            eprintln!("chart: {}", out.display());
        }
    }
    Ok(())
}
