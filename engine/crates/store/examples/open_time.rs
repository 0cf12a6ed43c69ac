//! `make bench-open`: how long opening a store takes, as a function of the data it holds. For each
//! size (default 100 MiB and 10 GiB of 8 KB values over distinct keys, written without sync):
//! write it, close cleanly, time the reopen; then write another 64 MiB, stop like a crash
//! (`simulate_crash`: no flush, no saved AAE tree), time the reopen (replay included) and the
//! background AAE rebuild it starts. With `--drop-caches` (root) the page cache is dropped before
//! each open, so the opens read from the device.
//!
//! Options: `--sizes-mib 100,10240`, `--dir PATH` (default: a temporary folder), `--drop-caches`.

use std::time::{Duration, Instant};

use levee_store::{Config, Store};

const VALUE: usize = 8192;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn drop_caches(enabled: bool) {
    if enabled {
        // SAFETY-free: plain file writes; needs root.
        let _ = std::process::Command::new("sync").status();
        if let Err(e) = std::fs::write("/proc/sys/vm/drop_caches", "3\n") {
            eprintln!("cannot drop caches ({e}); run as root or without --drop-caches");
            std::process::exit(2);
        }
    }
}

fn fill(s: &Store, from: u64, bytes: u64, value: &[u8]) -> u64 {
    let n = bytes / VALUE as u64;
    let started = Instant::now();
    for i in from..from + n {
        s.put(b"b", format!("key-{i:012}").as_bytes(), value, b"vv", &[])
            .unwrap();
        if (i - from) % 65_536 == 65_535 {
            eprint!(
                "\r  wrote {} MiB ({:.0} MiB/s)   ",
                ((i - from + 1) * VALUE as u64) >> 20,
                ((i - from + 1) * VALUE as u64) as f64
                    / 1048576.0
                    / started.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!();
    from + n
}

fn main() {
    // Built with the dev-dependencies, so with the test-only lock-order check: measure without it.
    levee_store::disable_lock_order_check();
    let sizes: Vec<u64> = arg("--sizes-mib")
        .unwrap_or_else(|| "100,10240".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("--sizes-mib takes numbers, e.g. 100,10240")
        })
        .collect();
    let drop_page_cache = std::env::args().any(|a| a == "--drop-caches");
    let base = arg("--dir").map(std::path::PathBuf::from);
    let cfg = Config::default();
    let mut value = vec![0u8; VALUE];
    for (i, b) in value.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1];
    }
    println!("size_mib,clean_open_s,crash_open_s,aae_rebuild_after_crash_s,files");
    for mib in sizes {
        let tmp = match &base {
            Some(b) => tempfile::tempdir_in(b).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let dir = tmp.path();
        eprintln!("{mib} MiB:");
        let s = Store::open(dir, cfg.clone()).unwrap();
        let next = fill(&s, 0, mib << 20, &value);
        s.close().unwrap();
        drop(s);
        drop_caches(drop_page_cache);
        let t = Instant::now();
        let s = Store::open(dir, cfg.clone()).unwrap();
        let clean = t.elapsed();
        assert!(s.aae_tree().is_ok(), "the saved tree was not loaded");
        fill(&s, next, 64 << 20, &value);
        s.simulate_crash();
        drop_caches(drop_page_cache);
        let t = Instant::now();
        let s = Store::open(dir, cfg.clone()).unwrap();
        let crash = t.elapsed();
        assert!(s.wait_for_aae(Duration::from_secs(3600)).unwrap());
        let rebuild = t.elapsed() - crash;
        let files = walk(dir);
        s.close().unwrap();
        println!(
            "{mib},{:.3},{:.3},{:.3},{files}",
            clean.as_secs_f64(),
            crash.as_secs_f64(),
            rebuild.as_secs_f64()
        );
    }
}

fn walk(d: &std::path::Path) -> usize {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(&e.path())
            } else {
                1
            }
        })
        .sum()
}
