//! Engine micro-benchmark for 8 KB values (`make bench`): put throughput with sync off, with sync on
//! at 1 and 32 writers (group commit), and get / head throughput. Prints a table and the
//! sync-32 / sync-1 ratio. Options: `--seconds N` per phase (default 5), `--dir PATH`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_store::{Config, Store, SyncMode};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const VALUE: usize = 8192;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Let the kernel write back dirty pages so one phase's writeback does not slow the next.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// Run `threads` workers calling `op(worker, i)` for `secs`; returns ops/s.
fn run(threads: usize, secs: f64, op: impl Fn(usize, u64) + Send + Sync + 'static) -> f64 {
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (op, stop, count) = (op.clone(), stop.clone(), count.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    op(t, i);
                    i += 1;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // Built with the dev-dependencies, so with the test-only lock-order check: measure without it.
    levee_store::disable_lock_order_check();
    let secs: f64 = arg("--seconds").and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let base = arg("--dir").map(std::path::PathBuf::from);
    let tmp = tempfile::tempdir_in(base.clone().unwrap_or_else(std::env::temp_dir)).unwrap();
    let mut buf = vec![0u8; 16 << 20];
    SmallRng::seed_from_u64(1).fill(&mut buf[..]);
    let buf = Arc::new(buf);
    let value = move |i: u64| -> Vec<u8> {
        let off = (i as usize * 4099) % (buf.len() - VALUE);
        buf[off..off + VALUE].to_vec()
    };
    let value = Arc::new(value);
    println!(
        "levee-store benchmark: 8 KB incompressible values, {secs} s per phase, dir {}",
        tmp.path().display()
    );
    let mut rows: Vec<(String, f64)> = Vec::new();

    let open = |name: &str, sync: SyncMode| {
        Arc::new(
            Store::open(
                tmp.path().join(name),
                Config {
                    sync_on_write: sync,
                    ..Config::default()
                },
            )
            .unwrap(),
        )
    };

    let s = open("sync", SyncMode::Sync);
    let mut sync = [0f64; 2];
    for (n, threads) in [1usize, 32].into_iter().enumerate() {
        settle();
        let before = s.stats();
        let (st, v) = (s.clone(), value.clone());
        let r = run(threads, secs, move |t, i| {
            st.put(b"sync", format!("k{t}-{i:010}").as_bytes(), &v(i), b"", &[])
                .unwrap();
        });
        sync[n] = r;
        let after = s.stats();
        let fsyncs = after.journal_fsyncs - before.journal_fsyncs;
        println!(
            "sync, {threads} writer(s): {} puts, {fsyncs} fsyncs ({:.1} puts per fsync), mean fsync {:.0} µs",
            after.puts - before.puts,
            (after.puts - before.puts) as f64 / fsyncs as f64,
            (after.journal_fsync_seconds - before.journal_fsync_seconds) * 1e6 / fsyncs as f64
        );
        rows.push((format!("put, sync on, {threads} writer(s)"), r));
    }
    let sstats = s.stats();
    drop(s);

    settle();
    let s = open("nosync", SyncMode::None);
    let (st, v) = (s.clone(), value.clone());
    let r = run(1, secs, move |_, i| {
        st.put(b"bench", format!("k{i:010}").as_bytes(), &v(i), b"", &[])
            .unwrap();
    });
    rows.push(("put, sync off, 1 writer".into(), r));
    let loaded = s.stats().puts;
    settle();
    let (st, v) = (s.clone(), value.clone());
    let r = run(4, secs, move |t, i| {
        st.put(
            b"bench4",
            format!("k{t}-{i:010}").as_bytes(),
            &v(i),
            b"",
            &[],
        )
        .unwrap();
    });
    rows.push(("put, sync off, 4 writers".into(), r));

    for threads in [1usize, 4] {
        let st = s.clone();
        let r = run(threads, secs, move |t, i| {
            let mut rng = SmallRng::seed_from_u64(t as u64 * 1_000_003 + i);
            let k = rng.gen_range(0..loaded);
            assert!(st
                .get(b"bench", format!("k{k:010}").as_bytes())
                .unwrap()
                .is_some());
        });
        rows.push((format!("get, {threads} reader(s)"), r));
        let st = s.clone();
        let r = run(threads, secs, move |t, i| {
            let mut rng = SmallRng::seed_from_u64(t as u64 * 1_000_003 + i);
            let k = rng.gen_range(0..loaded);
            assert!(st
                .head(b"bench", format!("k{k:010}").as_bytes())
                .unwrap()
                .is_some());
        });
        rows.push((format!("head, {threads} reader(s)"), r));
    }
    let stats = s.stats();
    drop(s);

    println!();
    println!("| phase | ops/s |");
    println!("|---|---:|");
    for (name, r) in &rows {
        println!("| {name} | {r:.0} |");
    }
    println!();
    println!(
        "group commit: sync put at 32 writers = {:.1}x the single-writer rate ({} fsyncs for {} sync puts)",
        sync[1] / sync[0],
        sstats.journal_fsyncs,
        sstats.puts
    );
    let wa = (stats.journal_bytes_written + stats.ledger_bytes_written) as f64
        / stats.user_bytes_written as f64;
    println!(
        "write amplification (journal+ledger bytes / user bytes, no-sync store): {wa:.3}; write stalls {:.3} s (longest {:.3} s)",
        stats.write_stall_seconds, stats.max_write_stall_seconds
    );
}
