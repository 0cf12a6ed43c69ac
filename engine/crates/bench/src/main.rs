//! `levee-bench run <scenario.toml> [--out DIR] [--driver NAME] [--duration D] [--quiet]`
//! `levee-bench compare <run dir>... --out compare.png [--op get]`

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

#[derive(Subcommand)]
enum Cmd {
    /// Run a scenario; writes summary.csv, <label>_latencies.csv (basho_bench's labels:
    /// `index_query` → index-query), errors.csv, resources.csv and summary.png.
    Run {
        scenario: PathBuf,
        /// Run directory (default out/<scenario>-<driver>).
        #[arg(long)]
        out: Option<PathBuf>,
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
        /// No progress line.
        #[arg(long)]
        quiet: bool,
    },
    /// Draw several runs side by side and print a markdown table of ratios to the first.
    Compare {
        runs: Vec<PathBuf>,
        #[arg(long, default_value = "compare.png")]
        out: PathBuf,
        #[arg(long, default_value = "get")]
        op: String,
    },
}

fn main() -> Result<()> {
    match Args::parse().cmd {
        Cmd::Run {
            scenario,
            out,
            driver,
            duration,
            data_dir,
            address,
            quiet,
        } => {
            let mut s = scenario::Scenario::load(&scenario)?;
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
            let stem = scenario
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let out =
                out.unwrap_or_else(|| PathBuf::from("out").join(format!("{stem}-{}", s.driver)));
            if out.exists() {
                std::fs::remove_dir_all(&out)
                    .with_context(|| format!("clearing {}", out.display()))?;
            }
            let (data, temporary) = match data_dir {
                Some(d) => (d, false),
                None => (out.join("data"), true),
            };
            std::fs::create_dir_all(&data)?;
            let driver = drivers::open(&s.driver, &data, s.sync, s.address.as_deref())?;
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
        Cmd::Compare { runs, out, op } => {
            let table = charts::compare(&runs, &out, &op)?;
            println!("{table}");
            eprintln!("chart: {}", out.display());
        }
    }
    Ok(())
}
