//! `make demo`: open a store in a temporary folder and run a seed-like workload — 8 KB
//! incompressible values, pareto-distributed keys (basho_bench `pareto_int`), 5 GET : 1 UPDATE
//! (update = GET then PUT) — printing progress every 5 s and, at the end, ops/s and latency
//! percentiles. Options: `--seconds N` (30), `--workers N` (8), `--keys N` (200000), `--sync`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use levee_store::{Config, Store, SyncMode};
use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const VALUE: usize = 8192;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// basho_bench's pareto_int: mean 0.2·N, shape 1.5 (folded into the keyspace).
fn pareto(rng: &mut SmallRng, n: u64) -> u64 {
    let (mean, shape) = (0.2 * n as f64, 1.5f64);
    let u: f64 = 1.0 - rng.gen::<f64>();
    let x = ((u.powf(-1.0 / shape) - 1.0) * mean * (shape - 1.0)) as u64;
    x % n
}

fn main() {
    // Built with the dev-dependencies, so with the test-only lock-order check: measure without it.
    levee_store::disable_lock_order_check();
    let secs: u64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(30);
    let workers: usize = arg("--workers").and_then(|s| s.parse().ok()).unwrap_or(8);
    let keys: u64 = arg("--keys")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let sync = std::env::args().any(|a| a == "--sync");
    let tmp = tempfile::tempdir().unwrap();
    let cfg = Config {
        sync_on_write: if sync { SyncMode::Sync } else { SyncMode::None },
        ..Config::default()
    };
    let store = Arc::new(Store::open(tmp.path(), cfg).unwrap());
    println!(
        "levee demo: {secs} s, {workers} workers, pareto over {keys} keys, 8 KB values, 5 GET : 1 UPDATE, sync_on_write={}",
        if sync { "sync" } else { "none" }
    );
    println!("store: {}", tmp.path().display());
    let mut buf = vec![0u8; 32 << 20];
    SmallRng::seed_from_u64(42).fill(&mut buf[..]);
    let buf = Arc::new(buf);
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let not_found = Arc::new(AtomicU64::new(0));
    let hist = |_| Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    let get_h = Arc::new(Mutex::new(hist(())));
    let upd_h = Arc::new(Mutex::new(hist(())));
    let start = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (store, buf, stop, ops, nf) = (
                store.clone(),
                buf.clone(),
                stop.clone(),
                ops.clone(),
                not_found.clone(),
            );
            let (get_h, upd_h) = (get_h.clone(), upd_h.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(w as u64);
                let (mut gh, mut uh) = (hist(()), hist(()));
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("{:012}", pareto(&mut rng, keys));
                    let t = Instant::now();
                    if rng.gen_range(0..6) < 5 {
                        if store.get(b"demo", key.as_bytes()).unwrap().is_none() {
                            nf.fetch_add(1, Ordering::Relaxed);
                        }
                        gh.saturating_record(t.elapsed().as_micros() as u64);
                    } else {
                        let _ = store.get(b"demo", key.as_bytes()).unwrap();
                        let off = rng.gen_range(0..buf.len() - VALUE);
                        store
                            .put(b"demo", key.as_bytes(), &buf[off..off + VALUE], b"", &[])
                            .unwrap();
                        uh.saturating_record(t.elapsed().as_micros() as u64);
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                get_h.lock().add(&gh).unwrap();
                upd_h.lock().add(&uh).unwrap();
            })
        })
        .collect();
    let mut last = 0;
    let mut elapsed = 0;
    while elapsed < secs {
        let step = 5.min(secs - elapsed);
        std::thread::sleep(Duration::from_secs(step));
        elapsed += step;
        let now = ops.load(Ordering::Relaxed);
        let s = store.stats();
        println!(
            "[{elapsed:>4}s/{secs}s] {:>8.0} ops/s   journal {:>6} MiB   ledger {:>5} KiB   flushes {:>3} merges {:>3}",
            (now - last) as f64 / step as f64,
            s.journal_disk_bytes >> 20,
            s.ledger_disk_bytes >> 10,
            s.flushes,
            s.merges
        );
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let total = ops.load(Ordering::Relaxed);
    let wall = start.elapsed().as_secs_f64();
    let s = store.stats();
    println!();
    println!(
        "throughput: {:.0} ops/s ({total} ops in {wall:.1} s; {} GETs found nothing yet)",
        total as f64 / wall,
        not_found.load(Ordering::Relaxed)
    );
    println!("| op | n | mean µs | median | 95th | 99th | 99.9th | max |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, h) in [("get", get_h.lock()), ("update", upd_h.lock())] {
        println!(
            "| {name} | {} | {:.0} | {} | {} | {} | {} | {} |",
            h.len(),
            h.mean(),
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.95),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max()
        );
    }
    let wa = (s.journal_bytes_written + s.ledger_bytes_written) as f64
        / s.user_bytes_written.max(1) as f64;
    println!(
        "write amplification {wa:.3}; write stalls {:.3} s; journal reads {}",
        s.write_stall_seconds, s.journal_reads
    );
    store.close().unwrap();
}
