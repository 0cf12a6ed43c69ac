//! Maintenance benchmark (`make bench-maintenance`): journal compaction throughput, put latency
//! with and without a compaction running, AAE rebuild time with and without the journal check, and
//! the cost of maintaining the AAE tree on the write path. Options: `--keys N` for the AAE phase
//! (default 1,000,000), `--dir PATH`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use levee_store::{Config, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// Puts from `writers` threads for `secs`; returns (ops/s, p50 µs, p99 µs, max µs).
fn put_load(
    s: &Arc<Store>,
    writers: u64,
    secs: f64,
    keys: u64,
    buf: &Arc<Vec<u8>>,
) -> (f64, u64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let hs: Vec<_> = (0..writers)
        .map(|w| {
            let (s, stop, buf) = (s.clone(), stop.clone(), buf.clone());
            std::thread::spawn(move || {
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
                let mut rng = SmallRng::seed_from_u64(w);
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.gen_range(0..keys);
                    let off = rng.gen_range(0..buf.len() - 8192);
                    let t = Instant::now();
                    s.put(b"m", &k.to_le_bytes(), &buf[off..off + 8192], b"", &[])
                        .unwrap();
                    h.saturating_record(t.elapsed().as_micros() as u64);
                }
                h
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    for h in hs {
        all.add(h.join().unwrap()).unwrap();
    }
    (
        all.len() as f64 / start.elapsed().as_secs_f64(),
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99),
        all.max(),
    )
}

fn main() {
    // Built with the dev-dependencies, so with the test-only lock-order check: measure without it.
    levee_store::disable_lock_order_check();
    let aae_keys: u64 = arg("--keys")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let base = arg("--dir")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    let mut buf = vec![0u8; 16 << 20];
    SmallRng::seed_from_u64(3).fill(&mut buf[..]);
    let buf = Arc::new(buf);
    println!(
        "levee-store maintenance benchmark, dir {}",
        tmp.path().display()
    );

    // 1. Journal compaction: 10,000 keys × 8 KB written 4 times, then compact until nothing is left.
    let cfg = Config {
        journal_segment_bytes: 16 << 20,
        ..Config::default()
    };
    let s = Arc::new(Store::open(tmp.path().join("compaction"), cfg.clone()).unwrap());
    let keys = 10_000u64;
    for round in 0..4u64 {
        for k in 0..keys {
            let off = ((k * 7 + round * 13) as usize * 4099) % (buf.len() - 8192);
            s.put(b"m", &k.to_le_bytes(), &buf[off..off + 8192], b"", &[])
                .unwrap();
        }
    }
    for _ in 0..4 {
        s.put(b"m", b"tick", b"t", b"", &[]).unwrap();
        s.flush().unwrap();
    }
    settle();
    let before = s.stats().journal_disk_bytes;
    let t = Instant::now();
    let mut runs = 0;
    while !s.compact_journal().unwrap().compacted_segments.is_empty() {
        runs += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    let after = s.stats().journal_disk_bytes;
    let reclaimed = (before - after) as f64 / (1 << 20) as f64;
    println!(
        "journal compaction: {runs} runs, {:.0} MiB -> {:.0} MiB, reclaimed {reclaimed:.0} MiB in {secs:.2} s = {:.0} MiB/s reclaimed",
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64,
        reclaimed / secs
    );

    // 2. p99 put latency, 4 writers, without and with a compaction running.
    settle();
    let quiet = put_load(&s, 4, 5.0, keys, &buf);
    settle();
    let busy = Arc::new(AtomicBool::new(true));
    let compactor = {
        let (s, busy) = (s.clone(), busy.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while busy.load(Ordering::Relaxed) {
                if s.compact_journal()
                    .map(|r| !r.compacted_segments.is_empty())
                    .unwrap_or(false)
                {
                    n += 1;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            n
        })
    };
    let loaded = put_load(&s, 4, 5.0, keys, &buf);
    busy.store(false, Ordering::Relaxed);
    let n = compactor.join().unwrap();
    println!("| put latency (8 KB, 4 writers, 5 s) | ops/s | p50 µs | p99 µs | max µs |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| no compaction | {:.0} | {} | {} | {} |",
        quiet.0, quiet.1, quiet.2, quiet.3
    );
    println!(
        "| compaction running ({n} runs) | {:.0} | {} | {} | {} |",
        loaded.0, loaded.1, loaded.2, loaded.3
    );
    drop(s);

    // 3. AAE rebuild for `aae_keys` keys (100-byte values), with and without the journal check.
    let s = Store::open(tmp.path().join("aae"), Config::default()).unwrap();
    let t = Instant::now();
    for k in 0..aae_keys {
        s.put(
            b"a",
            &k.to_be_bytes(),
            &buf[(k as usize % 1000)..(k as usize % 1000) + 100],
            &k.to_le_bytes(),
            &[],
        )
        .unwrap();
    }
    let load = aae_keys as f64 / t.elapsed().as_secs_f64();
    s.flush().unwrap();
    let ledger_only = s.rebuild_aae(false).unwrap();
    let with_check = s.rebuild_aae(true).unwrap();
    println!(
        "AAE rebuild of {aae_keys} keys: {:.2} s from the ledger, {:.2} s with journal check ({:.2}x)",
        ledger_only.as_secs_f64(),
        with_check.as_secs_f64(),
        with_check.as_secs_f64() / ledger_only.as_secs_f64()
    );
    drop(s);

    // 4. Cost of maintaining the AAE tree on the write path (100-byte values, 1 writer).
    let plain = Store::open(
        tmp.path().join("no-aae"),
        Config {
            aae_segments: 0,
            ..Config::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    for k in 0..aae_keys {
        plain
            .put(
                b"a",
                &k.to_be_bytes(),
                &buf[(k as usize % 1000)..(k as usize % 1000) + 100],
                &k.to_le_bytes(),
                &[],
            )
            .unwrap();
    }
    let no_aae = aae_keys as f64 / t.elapsed().as_secs_f64();
    println!(
        "put rate, 100-byte values: {load:.0}/s with the AAE tree, {no_aae:.0}/s without ({:.2}x)",
        load / no_aae
    );
}
