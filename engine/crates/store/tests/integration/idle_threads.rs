//! The ledger worker and the syncer run only while they have work (engine.md "Threads"): they
//! exit after `idle_thread_exit` and the next request starts them again. No request may be left
//! waiting for a thread that decided to stop: every round below asks for work right after an
//! exit, or races one.

use std::time::{Duration, Instant};

use levee_store::{Config, SnapshotKind, Store, SyncMode};

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn idle(s: &Store) {
    wait_until("no store thread runs", || s.stats().background_threads == 0);
}

fn cfg(sync: SyncMode) -> Config {
    Config {
        sync_on_write: sync,
        idle_thread_exit: Duration::from_millis(20),
        ..Config::small_for_tests()
    }
}

#[test]
fn sync_writes_and_flushes_find_their_threads_after_they_exit() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), cfg(SyncMode::Sync)).unwrap();
    idle(&s); // the worker started at open found nothing to do
    for round in 0..40u32 {
        // A sync write returns only once durable, whether the syncer was running or not.
        let sqn = s
            .put(b"b", &round.to_le_bytes(), &[1; 100], b"", &[])
            .unwrap();
        assert!(s.stats().journal_synced_sqn >= sqn, "round {round}");
        // A flush completes whether the worker was running or not.
        s.flush().unwrap();
        assert!(s.stats().persisted_sqn >= sqn, "round {round}");
        if round % 2 == 0 {
            idle(&s);
        } else {
            std::thread::sleep(Duration::from_millis(u64::from(round % 25)));
        }
    }
    // Writers in parallel, pausing across the exit boundary.
    std::thread::scope(|sc| {
        for t in 0..4u32 {
            let s = &s;
            sc.spawn(move || {
                for i in 0..40u32 {
                    let key = (t * 1000 + i).to_le_bytes();
                    let sqn = s.put(b"c", &key, &[2; 64], b"", &[]).unwrap();
                    assert!(s.stats().journal_synced_sqn >= sqn);
                    std::thread::sleep(Duration::from_millis(u64::from((i * 7 + t) % 30)));
                }
            });
        }
    });
    idle(&s);
    s.close().unwrap();
    let s = Store::open(d.path(), cfg(SyncMode::Sync)).unwrap();
    for round in 0..40u32 {
        assert!(s.get(b"b", &round.to_le_bytes()).unwrap().is_some());
    }
    for t in 0..4u32 {
        for i in 0..40u32 {
            assert!(s
                .get(b"c", &(t * 1000 + i).to_le_bytes())
                .unwrap()
                .is_some());
        }
    }
    s.close().unwrap();
}

#[test]
fn background_syncs_and_snapshots_start_or_keep_their_threads() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        journal_bytes_per_sync: 4096,
        ..cfg(SyncMode::None)
    };
    let s = Store::open(d.path(), cfg).unwrap();
    for round in 0..20u32 {
        idle(&s);
        // Crossing journal_bytes_per_sync asks the (exited) syncer for a background sync.
        let mut last = 0;
        for i in 0..10u32 {
            last = s
                .put(b"b", &(round * 100 + i).to_le_bytes(), &[3; 1024], b"", &[])
                .unwrap();
        }
        // The first request comes at this round's fourth write (sqn last - 6 or later): only
        // a sync started in this round covers it.
        wait_until("a background sync covers this round's writes", || {
            s.stats().journal_synced_sqn >= last - 6
        });
    }
    // A live snapshot keeps the worker: it must release the snapshot's files when it expires.
    idle(&s);
    let snap = s.snapshot(SnapshotKind::Query).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.stats().background_threads,
        1,
        "the worker left a live snapshot"
    );
    drop(snap);
    idle(&s);
    s.close().unwrap();
}
