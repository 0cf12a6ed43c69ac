//! Process-kill crash test. The binary re-runs itself as a child that does `sync` writes from four
//! threads and reports, on stdout, each operation it is about to do (`I`) and each one acknowledged
//! (`A`). The parent kills the child with SIGKILL at a random moment, reopens the store and checks
//! that every key holds its last acknowledged state, or the state of the one operation that was in
//! flight on that key's thread, and that each live object's index entry (written atomically with
//! it) is present. A thread compacts the journal all the while. Repeated `LEVEE_CRASH_KILLS` times (default 50; `make crash-soak`
//! runs 1000).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use levee_store::{Config, IndexChange, IndexQuery, Store, SyncMode, Term};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const THREADS: u64 = 4;
const KEYS_PER_THREAD: u64 = 150;

fn config() -> Config {
    Config {
        sync_on_write: SyncMode::Sync,
        memtable_bytes: 16 << 10,
        ..Config::small_for_tests()
    }
}

fn value_of(key: &str, version: u64) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(version ^ (crc32c::crc32c(key.as_bytes()) as u64) << 32);
    let len = rng.gen_range(1..6000);
    (0..len).map(|_| rng.gen()).collect()
}

fn child(dir: &str, start: u64) {
    let store = std::sync::Arc::new(Store::open(dir, config()).expect("child open"));
    // Journal compaction runs continuously, so kills also land in the middle of compactions.
    {
        let store = store.clone();
        std::thread::spawn(move || loop {
            let _ = store.compact_journal();
            std::thread::sleep(std::time::Duration::from_millis(5));
        });
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(start + t);
                let mut version = start + t;
                loop {
                    version += THREADS;
                    let key = format!("t{t}-k{}", rng.gen_range(0..KEYS_PER_THREAD));
                    let put = rng.gen_range(0..10) != 0;
                    let kind = if put { 'P' } else { 'D' };
                    let line = format!("I {t} {key} {version} {kind}\n");
                    std::io::stdout().lock().write_all(line.as_bytes()).unwrap();
                    let idx = [IndexChange::add(
                        b"v_int".to_vec(),
                        Term::Int(version as i64),
                    )];
                    if put {
                        store
                            .put(
                                b"crash",
                                key.as_bytes(),
                                &value_of(&key, version),
                                &version.to_le_bytes(),
                                &idx,
                            )
                            .unwrap();
                    } else {
                        store
                            .delete(b"crash", key.as_bytes(), &version.to_le_bytes(), &[])
                            .unwrap();
                    }
                    let line = format!("A {t} {key} {version} {kind}\n");
                    std::io::stdout().lock().write_all(line.as_bytes()).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Absent,
    Put(u64),
}

fn main() {
    if let Ok(dir) = std::env::var("LEVEE_CRASH_CHILD_DIR") {
        let start = std::env::var("LEVEE_CRASH_START").unwrap().parse().unwrap();
        child(&dir, start);
        return;
    }
    let kills: u64 = std::env::var("LEVEE_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("LEVEE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("crash test: {kills} SIGKILLs, seed {seed} (LEVEE_CRASH_SEED={seed} repeats the kill timing)");
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut model: HashMap<String, State> = HashMap::new();
    let mut next_start = 1u64;
    let mut acked_total = 0u64;
    let started = Instant::now();
    for cycle in 0..kills {
        let mut child = Command::new(&exe)
            .env("LEVEE_CRASH_CHILD_DIR", dir.path())
            .env("LEVEE_CRASH_START", next_start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until the child has opened the store and acknowledged something, then kill it at a
        // random moment.
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let l = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
            let l =
                l.unwrap_or_else(|_| panic!("cycle {cycle}: child produced no acknowledgement"));
            let acked = l.starts_with('A');
            lines.push(l);
            if acked {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.gen_range(0..80_000)));
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "child must have been killed");
        reader.join().unwrap();
        lines.extend(rx.try_iter());

        // Apply what the child reported: acknowledged ops are facts; the last intent of a thread
        // without its ack may or may not have happened.
        let mut in_flight: HashMap<u64, (String, State)> = HashMap::new();
        let mut max_version = next_start;
        for l in &lines {
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() != 5 {
                continue; // a line torn by the kill
            }
            let (t, key, version) = (
                f[1].parse::<u64>().unwrap(),
                f[2].to_string(),
                f[3].parse::<u64>().unwrap(),
            );
            let state = if f[4] == "P" {
                State::Put(version)
            } else {
                State::Absent
            };
            max_version = max_version.max(version);
            match f[0] {
                "I" => {
                    in_flight.insert(t, (key, state));
                }
                "A" => {
                    in_flight.remove(&t);
                    model.insert(key, state);
                    acked_total += 1;
                }
                _ => {}
            }
        }
        next_start = max_version + THREADS + 1;

        let store = Store::open(dir.path(), config())
            .unwrap_or_else(|e| panic!("cycle {cycle}: reopen failed: {e}"));
        let flight: HashMap<&String, State> = in_flight.values().map(|(k, s)| (k, *s)).collect();
        for (key, want) in model.iter_mut() {
            let got = match store
                .get(b"crash", key.as_bytes())
                .unwrap_or_else(|e| panic!("cycle {cycle}: get {key}: {e}"))
            {
                None => State::Absent,
                Some(o) => {
                    let v = u64::from_le_bytes(
                        o.metadata
                            .as_slice()
                            .try_into()
                            .expect("metadata is a version"),
                    );
                    assert_eq!(
                        o.value,
                        value_of(key, v),
                        "cycle {cycle}: {key} version {v} has a wrong value"
                    );
                    State::Put(v)
                }
            };
            if let State::Put(v) = got {
                let q = IndexQuery {
                    bucket: b"crash".to_vec(),
                    field: b"v_int".to_vec(),
                    start: Term::Int(v as i64),
                    end: Term::Int(v as i64),
                    return_terms: false,
                    term_regex: None,
                    max_results: None,
                    continuation: None,
                };
                let page = store.index_query(&q).unwrap();
                assert_eq!(
                    page.results,
                    vec![(None, key.as_bytes().to_vec())],
                    "cycle {cycle}: index entry of {key} v{v}"
                );
            }
            if got != *want {
                let alt = flight.get(key);
                assert_eq!(
                    Some(&got),
                    alt,
                    "cycle {cycle}: {key} is {got:?}; last acknowledged {want:?}, in flight {alt:?}"
                );
                *want = got;
            }
        }
        // Keys first written by an in-flight op are either absent or that op's value.
        for (key, s) in &flight {
            if !model.contains_key(*key) {
                let got = store
                    .get(b"crash", key.as_bytes())
                    .unwrap()
                    .map(|o| State::Put(u64::from_le_bytes(o.metadata.try_into().unwrap())));
                match got {
                    None => {}
                    Some(g) => {
                        assert_eq!(g, *s, "cycle {cycle}: {key}");
                        model.insert((*key).clone(), g);
                    }
                }
            }
        }
        store.close().unwrap();
    }
    let stats = Store::open(dir.path(), config()).unwrap().stats();
    println!(
        "crash test: {kills} kills, {acked_total} acknowledged writes verified over {} keys in {:.1}s; \
         journal {} bytes in {} segments",
        model.len(),
        started.elapsed().as_secs_f64(),
        stats.journal_disk_bytes,
        stats.journal_segments
    );
    println!("1 passed, 0 failed");
}
