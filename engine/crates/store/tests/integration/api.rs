//! Public API behaviour: bad input gets typed errors and leaves data intact, HEAD never reads the
//! journal, operations after close fail, sync writers share fsyncs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use levee_store::storage::{SimDisk, SimOp};
use levee_store::{Config, Error, IndexChange, Store, SyncMode, Term, MAX_KEY_BYTES};

fn open(dir: &std::path::Path) -> Store {
    Store::open(dir, Config::small_for_tests()).unwrap()
}

/// The default configuration with these journal durability settings.
fn journal_cfg(sync_on_write: SyncMode, journal_bytes_per_sync: u64) -> Config {
    Config {
        sync_on_write,
        journal_bytes_per_sync,
        ..Config::default()
    }
}

#[test]
fn bad_input_gets_typed_errors_and_leaves_data_intact() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        max_value_bytes: 1 << 20,
        max_metadata_bytes: 1024,
        ..Config::small_for_tests()
    };
    let s = Store::open(d.path(), cfg).unwrap();
    let sqn = s.put(b"b", b"k", b"v1", b"m1", &[]).unwrap();

    assert!(matches!(
        s.put(b"b", b"", b"v", b"", &[]),
        Err(Error::InvalidKey(_))
    ));
    assert!(matches!(s.get(b"b", b""), Err(Error::InvalidKey(_))));
    assert!(matches!(
        s.head(b"b", &vec![7u8; MAX_KEY_BYTES + 1]),
        Err(Error::InvalidKey(_))
    ));
    assert!(matches!(
        s.put(b"b", &vec![7u8; MAX_KEY_BYTES + 1], b"v", b"", &[]),
        Err(Error::InvalidKey(_))
    ));
    match s.put(b"b", b"k", &vec![0u8; (1 << 20) + 1], b"", &[]) {
        Err(Error::ValueTooLarge { size, limit }) => {
            assert_eq!((size, limit), ((1 << 20) + 1, 1 << 20))
        }
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    assert!(matches!(
        s.put(b"b", b"k", b"v", &[0u8; 1025], &[]),
        Err(Error::MetadataTooLarge { .. })
    ));
    let err = s.put(b"a\0b", b"k", b"v", b"", &[]).unwrap_err();
    assert!(matches!(err, Error::InvalidBucket(_)));
    assert!(
        err.to_string().contains("collide"),
        "message explains why: {err}"
    );
    assert!(matches!(
        s.put(b"", b"k", b"v", b"", &[]),
        Err(Error::InvalidBucket(_))
    ));
    let bad_field = IndexChange::add(b"".to_vec(), Term::Int(1));
    assert!(matches!(
        s.put(b"b", b"k", b"v", b"", &[bad_field]),
        Err(Error::InvalidIndex(_))
    ));

    // None of that touched the stored object, nor consumed an SQN.
    let o = s.get(b"b", b"k").unwrap().unwrap();
    assert_eq!(
        (o.sqn, o.value.as_slice(), o.metadata.as_slice()),
        (sqn, &b"v1"[..], &b"m1"[..])
    );
    assert_eq!(s.put(b"b", b"k2", b"v", b"", &[]).unwrap(), sqn + 1);
    s.close().unwrap();
    let s = open(d.path());
    assert_eq!(s.get(b"b", b"k").unwrap().unwrap().value, b"v1");
}

#[test]
fn operations_after_close_fail_with_closed() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    s.put(b"b", b"k", b"v", b"", &[]).unwrap();
    s.close().unwrap();
    assert!(matches!(
        s.put(b"b", b"k", b"v", b"", &[]),
        Err(Error::Closed)
    ));
    assert!(matches!(s.get(b"b", b"k"), Err(Error::Closed)));
    assert!(matches!(s.head(b"b", b"k"), Err(Error::Closed)));
    assert!(matches!(s.delete(b"b", b"k", b"", &[]), Err(Error::Closed)));
    assert!(matches!(s.flush(), Err(Error::Closed)));
    s.close().unwrap();
}

#[test]
fn a_locked_directory_is_refused_with_its_path() {
    let d = tempfile::tempdir().unwrap();
    let _s = open(d.path());
    let err = Store::open(d.path(), Config::small_for_tests()).unwrap_err();
    assert!(matches!(err, Error::Locked { .. }), "{err:?}");
    assert!(err.to_string().contains(&d.path().display().to_string()));
}

#[test]
fn invalid_config_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        l0_stall_files: 2,
        l0_merge_trigger: 4,
        ..Config::default()
    };
    assert!(matches!(
        Store::open(d.path(), cfg),
        Err(Error::InvalidConfig(_))
    ));
    assert!(matches!(
        "maybe".parse::<SyncMode>(),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn head_never_reads_the_journal_and_get_reads_it_once() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    for i in 0..300u32 {
        s.put(
            b"b",
            format!("k{i}").as_bytes(),
            &vec![i as u8; 500],
            &i.to_le_bytes(),
            &[],
        )
        .unwrap();
        if i == 150 {
            s.flush().unwrap(); // half the keys in SSTs, half in the memtable
        }
    }
    let before = s.stats().journal_reads;
    for i in 0..300u32 {
        let h = s.head(b"b", format!("k{i}").as_bytes()).unwrap().unwrap();
        assert_eq!(h.metadata, i.to_le_bytes());
        assert_eq!(h.value_size, 500);
    }
    assert!(s.head(b"b", b"missing").unwrap().is_none());
    assert_eq!(
        s.stats().journal_reads,
        before,
        "HEAD must not read the journal"
    );
    for i in 0..300u32 {
        s.get(b"b", format!("k{i}").as_bytes()).unwrap().unwrap();
    }
    assert_eq!(
        s.stats().journal_reads,
        before + 300,
        "GET reads the journal exactly once"
    );
}

#[test]
fn deletes_hide_objects_and_survive_reopen_and_merges() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    for i in 0..2000u32 {
        s.put(b"b", format!("k{i}").as_bytes(), b"v", b"", &[])
            .unwrap();
    }
    s.flush().unwrap();
    for i in (0..2000u32).step_by(2) {
        s.delete(b"b", format!("k{i}").as_bytes(), b"", &[])
            .unwrap();
    }
    s.close().unwrap();
    let s = open(d.path());
    for i in 0..2000u32 {
        let present = s.get(b"b", format!("k{i}").as_bytes()).unwrap().is_some();
        assert_eq!(present, i % 2 == 1, "k{i}");
    }
}

/// Group commit, counted rather than timed: on the simulated disk the syncer's first fdatasync is
/// held while 31 more sync writers append and wait (none is acknowledged before its record is
/// durable); once released, one more fdatasync acknowledges all 31.
#[test]
fn sync_writers_share_fsyncs_group_commit() {
    let disk = SimDisk::new();
    let cfg = Config {
        sync_on_write: SyncMode::Sync,
        ..Config::default()
    };
    let s = Arc::new(Store::open_on(disk.handle(), "/db", cfg).unwrap());
    let first_sqn = s.stats().last_sqn + 1;
    let (held_tx, held) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let once = AtomicBool::new(false);
    disk.set_hook(Some(Arc::new(move |op| {
        if op == SimOp::Sync
            && std::thread::current().name() == Some("levee-journal-sync")
            && !once.swap(true, Ordering::SeqCst)
        {
            held_tx.send(()).unwrap();
            release_rx.lock().unwrap().recv().unwrap();
        }
    })));
    let put = |t: u32| {
        let s = s.clone();
        std::thread::spawn(move || {
            s.put(b"b", format!("w{t}").as_bytes(), &[1u8; 512], b"", &[])
                .unwrap()
        })
    };
    let first = put(0);
    held.recv_timeout(Duration::from_secs(10))
        .expect("the first sync put asks the syncer for an fdatasync");
    let rest: Vec<_> = (1..32).map(put).collect();
    // Every record is appended (SQNs are taken at append) while the first fdatasync is held.
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.stats().last_sqn < first_sqn + 31 {
        assert!(
            Instant::now() < deadline,
            "31 writers did not append within 10 s (last SQN {})",
            s.stats().last_sqn
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !first.is_finished() && rest.iter().all(|w| !w.is_finished()),
        "a sync put returned before its fdatasync"
    );
    assert_eq!(s.stats().journal_fsyncs, 0);
    // Held past 20 ms in all, so the duration histogram has something to place.
    std::thread::sleep(Duration::from_millis(25));
    release.send(()).unwrap();
    first.join().unwrap();
    for w in rest {
        w.join().unwrap();
    }
    let st = s.stats();
    assert_eq!(st.puts, 32);
    assert_eq!(
        st.journal_fsyncs, 2,
        "the held fdatasync, then one for the 31 writers that gathered behind it"
    );
    // Both syncs are in the duration histogram, the held one above 20 ms.
    let over_20ms = levee_store::JOURNAL_FSYNC_BUCKETS
        .iter()
        .position(|&b| b > 0.02)
        .unwrap();
    assert_eq!(st.journal_fsync_buckets.iter().sum::<u64>(), 2);
    assert!(
        st.journal_fsync_buckets[over_20ms..].iter().sum::<u64>() >= 1,
        "the held sync is not above 20 ms: {:?}",
        st.journal_fsync_buckets
    );
    assert!(st.max_journal_fsync_seconds >= 0.025);
    disk.set_hook(None);
    s.close().unwrap();
}

#[test]
fn a_single_sync_writer_fsyncs_every_write() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        sync_on_write: SyncMode::Sync,
        ..Config::default()
    };
    let s = Store::open(d.path(), cfg).unwrap();
    for i in 0..50u32 {
        s.put(b"b", &i.to_le_bytes(), b"v", b"", &[]).unwrap();
    }
    let st = s.stats();
    assert_eq!(st.journal_fsyncs, 50);
    assert_eq!(st.journal_fsync_buckets.iter().sum::<u64>(), 50);
}

/// `journal_bytes_per_sync` in `none` mode: writers do not wait, but the background syncer
/// fdatasyncs about once per that many appended bytes, and 0 turns it off.
#[test]
fn unsynced_writers_get_background_syncs_per_journal_bytes() {
    let run = |bytes_per_sync: u64| {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), journal_cfg(SyncMode::None, bytes_per_sync)).unwrap();
        for i in 0..400u32 {
            s.put(b"b", &i.to_le_bytes(), &[7u8; 8192], b"", &[])
                .unwrap();
            if i % 64 == 63 {
                // Give the syncer a moment so requests do not all merge into one.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        s.close().unwrap();
        s.stats().journal_fsyncs
    };
    assert_eq!(run(0), 0, "bytes_per_sync 0 must not fsync in none mode");
    // 400 x 8 KiB = 3.2 MiB of journal: a request every 256 KiB is 12 of them.
    let n = run(256 << 10);
    assert!(
        (4..=13).contains(&n),
        "expected about 12 background fsyncs, got {n}"
    );
}

/// Regression: `close` took the write lock and then joined the background syncer, which could be
/// waiting for that same lock to read the journal's position, so close never returned (seen as a
/// levee-bench test hanging in `Store::close`). Writers keep the syncer busy while close runs.
#[test]
fn close_returns_while_the_background_syncer_is_busy() {
    for mode in [SyncMode::None, SyncMode::Sync] {
        for round in 0..30 {
            let d = tempfile::tempdir().unwrap();
            let s = std::sync::Arc::new(Store::open(d.path(), journal_cfg(mode, 4096)).unwrap());
            let writers: Vec<_> = (0..4u32)
                .map(|t| {
                    let s = s.clone();
                    std::thread::spawn(move || {
                        let mut i = 0u32;
                        while s
                            .put(b"b", format!("{t}-{i}").as_bytes(), &[5u8; 2048], b"", &[])
                            .is_ok()
                        {
                            i += 1;
                        }
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(15));
            let (tx, rx) = std::sync::mpsc::channel();
            let closer = s.clone();
            std::thread::spawn(move || {
                let _ = tx.send(closer.close());
            });
            match rx.recv_timeout(std::time::Duration::from_secs(20)) {
                Ok(r) => r.unwrap(),
                Err(_) => panic!("{mode:?} round {round}: close did not return within 20 s"),
            }
            for w in writers {
                w.join().unwrap();
            }
            // Every acknowledged write is there after reopening.
            drop(s);
            let s = Store::open(d.path(), Config::default()).unwrap();
            s.close().unwrap();
        }
    }
}

/// Without sync_on_write and without background syncs, a memtable flush still fdatasyncs the
/// journal first: the ledger must not persist pointers to journal records a machine crash could
/// lose (recovery would then report corruption instead of a lost tail).
#[test]
fn a_ledger_flush_never_outruns_the_durable_journal() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        memtable_bytes: 16 << 10,
        ..journal_cfg(SyncMode::None, 0)
    };
    let s = Store::open(d.path(), cfg).unwrap();
    for i in 0..3000u32 {
        s.put(b"b", &i.to_be_bytes(), &[3u8; 512], b"", &[])
            .unwrap();
        if i % 500 == 499 {
            let st = s.stats();
            assert!(
                st.journal_synced_sqn >= st.persisted_sqn,
                "after {} puts the ledger persisted sqn {} but the journal is durable only to {}",
                i + 1,
                st.persisted_sqn,
                st.journal_synced_sqn
            );
        }
    }
    s.flush().unwrap();
    let st = s.stats();
    assert_eq!(st.persisted_sqn, st.last_sqn);
    assert!(st.journal_synced_sqn >= st.persisted_sqn);
    assert!(
        st.journal_fsyncs >= 1,
        "the flushes needed at least one journal fdatasync"
    );
    // A second flush with nothing new needs no further sync.
    let before = st.journal_fsyncs;
    s.flush().unwrap();
    assert_eq!(s.stats().journal_fsyncs, before);
    s.close().unwrap();
}

#[test]
fn stats_account_for_bytes_written() {
    let d = tempfile::tempdir().unwrap();
    let s = open(d.path());
    for i in 0..1000u32 {
        s.put(b"b", format!("k{i}").as_bytes(), &[9u8; 1000], b"", &[])
            .unwrap();
    }
    s.flush().unwrap();
    let st = s.stats();
    assert!(st.user_bytes_written >= 1000 * 1000);
    assert!(st.journal_bytes_written > st.user_bytes_written);
    assert!(st.ledger_bytes_written > 0 && st.ledger_bytes_written < st.user_bytes_written / 5);
    assert!(st.journal_disk_bytes >= st.user_bytes_written);
    assert_eq!(st.persisted_sqn, st.last_sqn);
}
