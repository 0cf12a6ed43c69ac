//! Secondary indexes, snapshots, folds, journal compaction and the AAE tree.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_store::{
    aae_segment, Config, Error, FoldOrder, HeadFoldOptions, IndexChange, IndexQuery, SnapshotKind,
    Store, Term,
};

fn q(field: &str, start: Term, end: Term) -> IndexQuery {
    IndexQuery {
        bucket: b"b".to_vec(),
        field: field.as_bytes().to_vec(),
        start,
        end,
        return_terms: true,
        term_regex: None,
        max_results: None,
        continuation: None,
    }
}

fn all_pages(s: &Store, mut query: IndexQuery, page: usize) -> Vec<(Option<Term>, Vec<u8>)> {
    query.max_results = Some(page);
    let mut out = Vec::new();
    loop {
        let p = s.index_query(&query).unwrap();
        assert!(p.results.len() <= page);
        out.extend(p.results);
        match p.continuation {
            Some(c) => query.continuation = Some(c),
            None => return out,
        }
    }
}

#[test]
fn index_queries_ranges_terms_regex_and_pagination() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    for i in 0..500i64 {
        let key = format!("k{i:04}");
        let changes = [
            IndexChange::add("age_int", Term::Int(i % 100 - 50)),
            IndexChange::add(
                "name_bin",
                Term::Bin(format!("name{:03}", i % 37).into_bytes()),
            ),
        ];
        s.put(b"b", key.as_bytes(), b"v", b"", &changes).unwrap();
        if i == 250 {
            s.flush().unwrap();
        }
    }
    // Integer range, negative terms included, ordered by (term, key).
    let r = s
        .index_query(&q("age_int", Term::Int(-3), Term::Int(2)))
        .unwrap();
    assert_eq!(r.results.len(), 6 * 5);
    assert!(r.continuation.is_none());
    assert_eq!(r.results[0], (Some(Term::Int(-3)), b"k0047".to_vec()));
    assert!(r.results.windows(2).all(|w| w[0] <= w[1]));
    // Pagination returns the same results as one big page.
    let paged = all_pages(&s, q("age_int", Term::Int(-50), Term::Int(49)), 7);
    let whole = s
        .index_query(&q("age_int", Term::Int(-50), Term::Int(49)))
        .unwrap()
        .results;
    assert_eq!(paged.len(), 500);
    assert_eq!(paged, whole);
    // Keys only.
    let mut keys_only = q(
        "name_bin",
        Term::Bin(b"name000".to_vec()),
        Term::Bin(b"name000".to_vec()),
    );
    keys_only.return_terms = false;
    let r = s.index_query(&keys_only).unwrap();
    assert!(r.results.iter().all(|(t, _)| t.is_none()));
    assert_eq!(r.results.len(), (0..500).filter(|i| i % 37 == 0).count());
    // Regex on binary terms.
    let mut re = q(
        "name_bin",
        Term::Bin(b"name".to_vec()),
        Term::Bin(b"name999".to_vec()),
    );
    re.term_regex = Some("^name0[01]7$".into());
    let r = s.index_query(&re).unwrap();
    let terms: BTreeSet<Vec<u8>> = r
        .results
        .iter()
        .map(|(t, _)| {
            if let Some(Term::Bin(b)) = t {
                b.clone()
            } else {
                panic!()
            }
        })
        .collect();
    assert_eq!(
        terms,
        [b"name007".to_vec(), b"name017".to_vec()]
            .into_iter()
            .collect()
    );
    // Removing an entry hides it.
    s.put(
        b"b",
        b"k0047",
        b"v2",
        b"",
        &[IndexChange::remove("age_int", Term::Int(-3))],
    )
    .unwrap();
    let r = s
        .index_query(&q("age_int", Term::Int(-3), Term::Int(-3)))
        .unwrap();
    assert!(!r.results.iter().any(|(_, k)| k == b"k0047"));
    // Bad queries are typed errors.
    let mut bad = re.clone();
    bad.term_regex = Some("(".into());
    assert!(
        matches!(s.index_query(&bad), Err(Error::InvalidQuery(m)) if m.contains("invalid term_regex"))
    );
    let mut bad = q("age_int", Term::Int(0), Term::Int(1));
    bad.term_regex = Some("x".into());
    assert!(matches!(s.index_query(&bad), Err(Error::InvalidQuery(_))));
    assert!(matches!(
        s.index_query(&q("age_int", Term::Int(0), Term::Bin(vec![]))),
        Err(Error::InvalidQuery(_))
    ));
    let mut bad = q("age_int", Term::Int(0), Term::Int(1));
    bad.continuation = Some(b"garbage".to_vec());
    assert!(matches!(s.index_query(&bad), Err(Error::InvalidQuery(_))));
    // Index entries survive reopen (they are replayed from the journal record of their write).
    s.close().unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    assert_eq!(
        all_pages(&s, q("age_int", Term::Int(-50), Term::Int(49)), 100).len(),
        499
    );
}

#[test]
fn a_snapshot_never_changes_while_writes_flushes_and_merges_continue() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    for i in 0..300u32 {
        s.put(
            b"b",
            format!("k{i:03}").as_bytes(),
            format!("old{i}").as_bytes(),
            b"m",
            &[IndexChange::add("i_int", Term::Int(i as i64))],
        )
        .unwrap();
    }
    let snap = s.snapshot(SnapshotKind::Query).unwrap();
    let keys_before: Vec<Vec<u8>> = snap
        .fold_keys(b"b", None, None)
        .unwrap()
        .map(|k| k.unwrap())
        .collect();
    let q_before = snap
        .index_query(&q("i_int", Term::Int(0), Term::Int(1000)))
        .unwrap();
    let flushes_before = s.stats().flushes;
    for round in 0..5 {
        for i in 0..300u32 {
            if i % 3 == 0 {
                s.delete(
                    b"b",
                    format!("k{i:03}").as_bytes(),
                    b"",
                    &[IndexChange::remove("i_int", Term::Int(i as i64))],
                )
                .unwrap();
            } else {
                s.put(
                    b"b",
                    format!("k{i:03}").as_bytes(),
                    format!("new{round}").as_bytes(),
                    b"m2",
                    &[],
                )
                .unwrap();
            }
        }
        s.put(b"b", format!("extra{round}").as_bytes(), b"x", b"", &[])
            .unwrap();
        s.flush().unwrap();
    }
    // Five flushes put at least five tables in L0, over the merge trigger (4): the merges must
    // have run, under the snapshot, once the ledger has settled.
    assert!(
        s.stats().flushes >= flushes_before + 5,
        "flushes {} -> {}",
        flushes_before,
        s.stats().flushes
    );
    assert!(
        s.wait_for_merges(Duration::from_secs(20)).unwrap(),
        "merges did not settle within 20 s"
    );
    assert!(s.stats().merges > 0, "no merge ran: {:?}", s.stats());
    for i in 0..300u32 {
        let o = snap
            .get(b"b", format!("k{i:03}").as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(o.value, format!("old{i}").into_bytes());
        assert_eq!(
            snap.head(b"b", format!("k{i:03}").as_bytes())
                .unwrap()
                .unwrap()
                .metadata,
            b"m"
        );
    }
    let keys_after: Vec<Vec<u8>> = snap
        .fold_keys(b"b", None, None)
        .unwrap()
        .map(|k| k.unwrap())
        .collect();
    assert_eq!(keys_before, keys_after);
    assert_eq!(keys_after.len(), 300);
    assert_eq!(
        snap.index_query(&q("i_int", Term::Int(0), Term::Int(1000)))
            .unwrap(),
        q_before
    );
    // The live store sees the new state.
    assert!(s.get(b"b", b"k000").unwrap().is_none());
    assert_eq!(s.get(b"b", b"k001").unwrap().unwrap().value, b"new4");
}

/// A query snapshot reads while its lifetime lasts and fails with `SnapshotExpired` (no longer
/// counted live) once it has passed. Judged against the clock rather than a sleep: a read that
/// ended before the lifetime could have run out must succeed, one that began after it surely had
/// must fail. An attempt in which the machine stalled through the whole lifetime before the first
/// read shows nothing, and is tried again.
#[test]
fn an_expired_snapshot_fails_with_a_typed_error() {
    const LIFETIME: Duration = Duration::from_millis(200);
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        snapshot_query_lifetime: LIFETIME,
        ..Config::small_for_tests()
    };
    let s = Store::open(d.path(), cfg).unwrap();
    s.put(b"b", b"k", b"v", b"", &[]).unwrap();
    for _attempt in 0..5 {
        let before = Instant::now();
        let snap = s.snapshot(SnapshotKind::Query).unwrap();
        let taken = Instant::now();
        let mut reads_in_lifetime = 0;
        loop {
            let start = Instant::now();
            let read = snap.get(b"b", b"k");
            let live = s.stats().live_snapshots;
            let end = Instant::now();
            if end < before + LIFETIME {
                assert!(
                    matches!(read, Ok(Some(_))),
                    "read {:?} into the lifetime: {:?}",
                    end - before,
                    read.err()
                );
                assert_eq!(live, 1);
                reads_in_lifetime += 1;
            } else if start >= taken + LIFETIME {
                assert!(
                    matches!(read, Err(Error::SnapshotExpired { .. })),
                    "read {:?} after the lifetime: {:?}",
                    start - taken,
                    read.map(|o| o.is_some())
                );
                assert_eq!(live, 0, "an expired snapshot still counted live");
                break;
            }
            assert!(
                start < taken + LIFETIME + Duration::from_secs(10),
                "the snapshot still reads 10 s after its {LIFETIME:?} lifetime"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        if reads_in_lifetime > 0 {
            return;
        }
    }
    panic!("in 5 attempts, no read landed within the snapshot's {LIFETIME:?} lifetime");
}

#[test]
fn folds_filter_and_orders_agree() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..400u32 {
        let key = format!("k{:03}", (i * 7) % 200).into_bytes();
        let value = format!("v{i}").into_bytes();
        s.put(b"f", &key, &value, &i.to_le_bytes(), &[]).unwrap();
        model.insert(key, value);
    }
    s.put(b"other", b"x", b"y", b"", &[]).unwrap();
    s.delete(b"f", b"k000", b"", &[]).unwrap();
    model.remove(b"k000".as_slice());
    let snap = s.snapshot(SnapshotKind::Fold).unwrap();
    let by_key: Vec<_> = snap
        .fold_objects(Some(b"f"), FoldOrder::Key)
        .unwrap()
        .map(|o| o.unwrap())
        .collect();
    let mut by_journal: Vec<_> = snap
        .fold_objects(Some(b"f"), FoldOrder::Journal)
        .unwrap()
        .map(|o| o.unwrap())
        .collect();
    assert_eq!(by_key.len(), model.len());
    assert!(by_key.iter().all(|o| model[&o.key] == o.object.value));
    by_journal.sort_by(|a, b| a.key.cmp(&b.key));
    assert_eq!(by_key, by_journal);
    // Heads: all buckets, then a segment filter, a max count and a modified range.
    let all: Vec<_> = snap
        .fold_heads(&HeadFoldOptions::default())
        .unwrap()
        .map(|h| h.unwrap())
        .collect();
    assert_eq!(all.len(), model.len() + 1);
    let segs = vec![
        aae_segment(b"f", b"k001", 64),
        aae_segment(b"f", b"k002", 64),
    ];
    let opts = HeadFoldOptions {
        bucket: Some(b"f".to_vec()),
        segments: Some(segs.clone()),
        segment_count: 64,
        journal_check: true,
        ..Default::default()
    };
    let filtered: Vec<_> = snap
        .fold_heads(&opts)
        .unwrap()
        .map(|h| h.unwrap())
        .collect();
    assert!(filtered.iter().any(|h| h.key == b"k001") && filtered.iter().any(|h| h.key == b"k002"));
    assert!(filtered
        .iter()
        .all(|h| segs.contains(&aae_segment(&h.bucket, &h.key, 64))));
    assert!(filtered.len() < model.len() / 4);
    let opts = HeadFoldOptions {
        max_count: Some(5),
        ..Default::default()
    };
    assert_eq!(snap.fold_heads(&opts).unwrap().count(), 5);
    let opts = HeadFoldOptions {
        modified_range: Some((0, 1)),
        ..Default::default()
    };
    assert_eq!(snap.fold_heads(&opts).unwrap().count(), 0);
    let opts = HeadFoldOptions {
        modified_range: Some((0, u64::MAX)),
        ..Default::default()
    };
    assert_eq!(snap.fold_heads(&opts).unwrap().count(), model.len() + 1);
}

#[test]
fn a_fold_resumes_right_after_the_last_object_it_returned() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    for b in [b"a".as_slice(), b"b", b"bb"] {
        for i in 0..50u32 {
            let key = format!("k{i:02}").into_bytes();
            s.put(b, &key, &i.to_le_bytes(), b"", &[]).unwrap();
        }
    }
    s.delete(b"b", b"k07", b"", &[]).unwrap();
    let snap = s.snapshot(SnapshotKind::Fold).unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = snap
        .fold_objects_after(None)
        .unwrap()
        .map(|o| o.map(|o| (o.bucket, o.key)).unwrap())
        .collect();
    assert_eq!(all.len(), 149);
    // Resumed in pieces of 17 at the last (bucket, key) returned: the same objects, none twice.
    let mut resumed = Vec::new();
    loop {
        let after = resumed.last().cloned();
        let page: Vec<(Vec<u8>, Vec<u8>)> = snap
            .fold_objects_after(
                after
                    .as_ref()
                    .map(|(b, k): &(Vec<u8>, Vec<u8>)| (b.as_slice(), k.as_slice())),
            )
            .unwrap()
            .take(17)
            .map(|o| o.map(|o| (o.bucket, o.key)).unwrap())
            .collect();
        if page.is_empty() {
            break;
        }
        resumed.extend(page);
    }
    assert_eq!(resumed, all);
    // Bucket "b" ends before "bb" begins: a key of "b" is not mistaken for one of "bb".
    let after_b: Vec<_> = snap
        .fold_objects_after(Some((b"b", b"k49")))
        .unwrap()
        .map(|o| o.unwrap().bucket)
        .collect();
    assert_eq!(after_b.len(), 50);
    assert!(after_b.iter().all(|b| b == b"bb"));
}

fn journal_cfg() -> Config {
    Config {
        journal_segment_bytes: 64 << 10,
        journal_segment_records: 10_000,
        compaction_sample_records: 1000,
        ..Config::small_for_tests()
    }
}

/// The calling thread's nice value (`getpriority` on its thread id).
fn thread_nice() -> i32 {
    // SAFETY: a read-only system call on the calling thread's id.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
}

/// Journal compaction works on a thread of its own at `compaction_nice`, so requests come first
/// for the CPU, and leaves the caller's thread at the priority it had (a node compacts on its
/// blocking pool, whose threads serve requests next). Observed on the simulated disk: the thread
/// that creates the compaction's output files, and its nice value then.
#[test]
fn journal_compaction_runs_on_its_own_thread_at_a_lower_priority() {
    use levee_store::storage::{SimDisk, SimOp};
    let disk = SimDisk::new();
    let cfg = journal_cfg();
    assert_eq!(cfg.compaction_nice, levee_store::DEFAULT_COMPACTION_NICE);
    let s = Store::open_on(disk.handle(), "/db", cfg).unwrap();
    let value = |k: u32, round: u32| format!("{k}:{round}:").repeat(200).into_bytes();
    for round in 0..4 {
        for k in 0..300u32 {
            s.put(b"b", &k.to_le_bytes(), &value(k, round), b"", &[])
                .unwrap();
        }
    }
    let creators = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = creators.clone();
    disk.set_hook(Some(Arc::new(move |op| {
        if op == SimOp::Create {
            let name = std::thread::current().name().map(str::to_owned);
            seen.lock().unwrap().push((name, thread_nice()));
        }
    })));
    let caller = thread_nice();
    let report = s.compact_journal().unwrap();
    disk.set_hook(None);
    assert!(
        !report.compacted_segments.is_empty(),
        "three of every four records are dead: a run qualifies"
    );
    let creators = creators.lock().unwrap();
    let want = caller.max(levee_store::DEFAULT_COMPACTION_NICE);
    assert!(
        creators
            .iter()
            .any(|(name, nice)| name.as_deref() == Some("levee-compaction") && *nice == want),
        "the outputs are written by levee-compaction at nice {want}: {creators:?}"
    );
    let me = std::thread::current().name().map(str::to_owned);
    assert!(
        creators.iter().all(|(name, _)| *name != me),
        "nothing is written on the caller's thread: {creators:?}"
    );
    assert_eq!(thread_nice(), caller, "the caller's priority is unchanged");
    for k in 0..300u32 {
        assert_eq!(
            s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 3)
        );
    }
}

/// One call catches up: with more dead segments than one run may take (`max_run`), a call
/// compacts run after run until none of the segments it began with is worth it, so the next
/// call finds nothing. One run per call left the rest for later and, under a steady update load,
/// let the journal grow without bound.
#[test]
fn one_compaction_call_compacts_every_run_worth_it() {
    let d = tempfile::tempdir().unwrap();
    let cfg = journal_cfg();
    let max_run = cfg.compaction.max_run;
    let s = Store::open(d.path(), cfg).unwrap();
    let value = |k: u32, round: u32| format!("{k}:{round}:").repeat(200).into_bytes();
    for round in 0..6u32 {
        for k in 0..300u32 {
            s.put(b"b", &k.to_le_bytes(), &value(k, round), b"", &[])
                .unwrap();
        }
    }
    let segments = s.stats().journal_segments;
    assert!(
        segments > 3 * max_run as u64,
        "the test needs more dead segments than a few runs take: {segments}"
    );
    let report = s.compact_journal().unwrap();
    assert!(
        report.runs >= 2 && report.compacted_segments.len() > max_run,
        "one call, {} runs over {} segments (max_run {max_run})",
        report.runs,
        report.compacted_segments.len()
    );
    let again = s.compact_journal().unwrap();
    assert!(
        again.compacted_segments.is_empty(),
        "a second call found more to do: {:?} (scores {:?})",
        again.compacted_segments,
        again.scores
    );
    assert_eq!(s.stats().journal_compaction_runs, u64::from(report.runs));
    for k in 0..300u32 {
        assert_eq!(
            s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 5)
        );
    }
}

/// A few keys overwritten many times never fill the ledger memtable, so nothing of the journal
/// is persisted in the ledger; compaction must still reclaim the replaced values (it flushes and
/// checkpoints first), and every latest value must survive a crash right after it.
#[test]
fn compaction_reclaims_on_a_store_whose_memtable_never_filled() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        memtable_bytes: 64 << 20,
        ..journal_cfg()
    };
    let s = Store::open(d.path(), cfg.clone()).unwrap();
    let value = |k: u32, round: u32| format!("{k}:{round}:").repeat(200).into_bytes();
    for round in 0..20u32 {
        for k in 0..40u32 {
            s.put(b"b", &k.to_le_bytes(), &value(k, round), b"", &[])
                .unwrap();
        }
    }
    assert_eq!(s.stats().flushes, 0, "the memtable must not have filled");
    let before = s.stats().journal_disk_bytes;
    let mut runs = 0;
    loop {
        let r = s.compact_journal().unwrap();
        if r.compacted_segments.is_empty() {
            break;
        }
        runs += 1;
        assert!(runs < 100);
    }
    let after = s.stats().journal_disk_bytes;
    // 19 of 20 rounds were replaced; the open segment and one partly live output may remain.
    assert!(
        runs > 0 && after <= before / 4,
        "journal {before} -> {after} bytes after {runs} runs"
    );
    drop(s); // no close: as a crash, recovery replays from the manifest the checkpoint wrote
    let s = Store::open(d.path(), cfg).unwrap();
    for k in 0..40u32 {
        assert_eq!(
            s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 19),
            "key {k} after compaction and reopen"
        );
    }
}

/// A compaction run works at most `compaction_busy_percent` of its time: at 10 % it waits between
/// its batches of records about nine times as long as it works; unpaced it never waits. Either way
/// it keeps every live value.
#[test]
fn a_compaction_keeps_to_its_busy_share() {
    let value = |k: u32, round: u32| format!("{k}:{round}:").repeat(500).into_bytes();
    // Every round rewrites 1,000 hot keys and writes 250 keys of its own, never rewritten: every
    // segment but the newest holds a few live records among many replaced ones.
    let round_keys =
        |round: u32| (0..1000u32).chain(10_000 + round * 250..10_000 + (round + 1) * 250);
    let last_round = |k: u32| if k < 1000 { 7 } else { (k - 10_000) / 250 };
    for busy_percent in [100, 10] {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            journal_segment_bytes: 4 << 20,
            compaction_busy_percent: busy_percent,
            ..journal_cfg()
        };
        let s = Store::open(d.path(), cfg).unwrap();
        for round in 0..8u32 {
            for k in round_keys(round) {
                s.put(b"b", &k.to_le_bytes(), &value(k, round), b"", &[])
                    .unwrap();
            }
        }
        let r = s.compact_journal().unwrap();
        assert!(
            r.records_kept > 0 && r.records_dropped > 0,
            "{busy_percent} %: a run with live and dead records: {r:?}"
        );
        if busy_percent == 100 {
            assert_eq!(r.paced_seconds, 0.0, "unpaced: no wait");
        } else {
            assert!(
                r.paced_seconds >= 0.6 * r.seconds,
                "at {busy_percent} % a run of {:.3} s waited only {:.3} s for its pace",
                r.seconds,
                r.paced_seconds
            );
        }
        for k in (0..8).flat_map(round_keys) {
            assert_eq!(
                s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
                value(k, last_round(k)),
                "{busy_percent} %: key {k}"
            );
        }
    }
}

#[test]
fn compaction_reclaims_replaced_values_and_keeps_every_live_key() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), journal_cfg()).unwrap();
    let value = |k: u32, round: u32| format!("{k}:{round}:").repeat(40).into_bytes();
    for round in 0..4u32 {
        for k in 0..400u32 {
            s.put(
                b"b",
                &k.to_le_bytes(),
                &value(k, round),
                &round.to_le_bytes(),
                &[IndexChange::add("r_int", Term::Int(round as i64))],
            )
            .unwrap();
        }
    }
    // Make the ledger's persisted SQN (in every kept manifest) cover the overwritten records.
    for _ in 0..4 {
        s.put(b"b", b"tick", b"t", b"", &[]).unwrap();
        s.flush().unwrap();
    }
    let snap = s.snapshot(SnapshotKind::Fold).unwrap();
    for k in 0..400u32 {
        s.put(b"b", &k.to_le_bytes(), &value(k, 9), b"", &[])
            .unwrap();
    }
    for _ in 0..4 {
        s.put(b"b", b"tick", b"t", b"", &[]).unwrap();
        s.flush().unwrap();
    }
    let before = s.stats().journal_disk_bytes;
    let mut runs = 0;
    loop {
        let r = s.compact_journal().unwrap();
        if r.compacted_segments.is_empty() {
            break;
        }
        assert!(r.records_dropped > 0);
        runs += 1;
        assert!(runs < 100);
    }
    let after = s.stats().journal_disk_bytes;
    assert!(runs > 0, "nothing was compacted");
    // 4 of 5 rounds were replaced: the journal must shrink by that fraction, less one segment.
    assert!(
        after <= before / 5 + (64 << 10),
        "journal {before} -> {after} bytes after {runs} runs"
    );
    assert_eq!(s.stats().journal_compaction_runs, runs);
    // The snapshot still reads the values it saw, from segments it pinned.
    for k in (0..400u32).step_by(13) {
        assert_eq!(
            snap.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 3)
        );
    }
    // The segments the snapshot pinned are still on disk; once it lets go they are removed (by
    // the reaper thread, not by the thread that dropped the last reference).
    let seg_bytes_on_disk = || -> u64 {
        std::fs::read_dir(d.path().join("journal"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
            // A file the reaper removes between the listing and the stat counts as gone.
            .filter_map(|e| e.metadata().ok().map(|m| m.len()))
            .sum()
    };
    let listed = s.stats().journal_disk_bytes;
    assert!(
        seg_bytes_on_disk() > listed,
        "the snapshot's segments should still be on disk"
    );
    drop(snap);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seg_bytes_on_disk() > listed {
        assert!(
            Instant::now() < deadline,
            "replaced segments still on disk 10 s after the snapshot let go: {} > {listed} bytes",
            seg_bytes_on_disk()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for k in 0..400u32 {
        assert_eq!(
            s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 9)
        );
    }
    let idx = s
        .index_query(&q("r_int", Term::Int(0), Term::Int(3)))
        .unwrap();
    assert_eq!(
        idx.results.len(),
        1600,
        "index entries are ledger state; compaction never touches them"
    );
    s.close().unwrap();
    let s = Store::open(d.path(), journal_cfg()).unwrap();
    for k in 0..400u32 {
        assert_eq!(
            s.get(b"b", &k.to_le_bytes()).unwrap().unwrap().value,
            value(k, 9),
            "after reopen"
        );
    }
    assert!(s.compact_journal().unwrap().compacted_segments.is_empty());
}

#[test]
fn aae_trees_are_order_independent_and_pinpoint_a_difference() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Store::open(d1.path(), Config::small_for_tests()).unwrap();
    let b = Store::open(d2.path(), Config::small_for_tests()).unwrap();
    for i in 0..1000u32 {
        a.put(
            b"b",
            &i.to_le_bytes(),
            b"v",
            format!("clock{}", i % 5).as_bytes(),
            &[],
        )
        .unwrap();
    }
    for i in (0..1000u32).rev() {
        b.put(
            b"b",
            &i.to_le_bytes(),
            b"other value, same clock",
            b"stale",
            &[],
        )
        .unwrap();
        b.put(
            b"b",
            &i.to_le_bytes(),
            b"v",
            format!("clock{}", i % 5).as_bytes(),
            &[],
        )
        .unwrap();
    }
    b.put(b"b", b"gone", b"v", b"c", &[]).unwrap();
    b.delete(b"b", b"gone", b"", &[]).unwrap();
    assert_eq!(a.aae_tree().unwrap(), b.aae_tree().unwrap());
    b.put(b"b", &7u32.to_le_bytes(), b"v", b"newer clock", &[])
        .unwrap();
    let diff = a.aae_tree().unwrap().diff_segments(&b.aae_tree().unwrap());
    assert_eq!(diff.len(), 1);
    let keys = b.aae_keys_in_segments(&diff).unwrap();
    assert!(keys.iter().any(|k| k.key == 7u32.to_le_bytes()));
    // A segment number from a bigger tree is refused, not answered with no keys.
    let count = b.aae_tree().unwrap().segment_count();
    let err = b.aae_keys_in_segments(&[diff[0], count]).unwrap_err();
    assert!(
        matches!(&err, levee_store::Error::InvalidQuery(m) if m.contains(&format!("segment {count} is beyond"))),
        "{err}"
    );
    // A rebuild from the ledger gives the same tree as incremental maintenance, after reopen too.
    let t = b.aae_tree().unwrap();
    b.rebuild_aae(true).unwrap();
    assert_eq!(b.aae_tree().unwrap(), t);
    b.close().unwrap();
    let b = Store::open(d2.path(), Config::small_for_tests()).unwrap();
    assert_eq!(b.aae_tree().unwrap(), t);
    assert_eq!(
        b.stats().aae_rebuilds,
        0,
        "a clean reopen loads the saved tree: no fold"
    );
}

#[test]
fn aae_rebuild_during_concurrent_writes_matches_the_true_tree() {
    let d = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(d.path(), Config::small_for_tests()).unwrap());
    for i in 0..5000u32 {
        s.put(b"b", &i.to_le_bytes(), b"v", &i.to_le_bytes(), &[])
            .unwrap();
    }
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            for i in 0..5000u32 {
                if i % 4 == 0 {
                    s.delete(b"b", &i.to_le_bytes(), b"", &[]).unwrap();
                } else {
                    s.put(b"b", &(i * 3).to_le_bytes(), b"v2", b"new clock", &[])
                        .unwrap();
                }
            }
        })
    };
    for _ in 0..3 {
        s.rebuild_aae(false).unwrap();
    }
    writer.join().unwrap();
    let maintained = s.aae_tree().unwrap();
    s.rebuild_aae(false).unwrap();
    assert_eq!(maintained, s.aae_tree().unwrap());
}

/// A rebuild works at most `aae_rebuild_busy_percent` of its time: at 10 % it waits between its
/// batches about nine times as long as it works; unpaced it never waits. Either way it builds the
/// same tree.
#[test]
fn an_aae_rebuild_keeps_to_its_busy_share() {
    let d = tempfile::tempdir().unwrap();
    let cfg = |busy_percent| Config {
        aae_rebuild_busy_percent: busy_percent,
        ..Config::small_for_tests()
    };
    let s = Store::open(d.path(), cfg(100)).unwrap();
    for i in 0..50_000u32 {
        s.put(b"b", &i.to_le_bytes(), b"v", &i.to_le_bytes(), &[])
            .unwrap();
    }
    let maintained = s.aae_tree().unwrap();
    s.rebuild_aae(false).unwrap();
    assert_eq!(s.stats().aae_rebuild_paced_seconds, 0.0, "unpaced: no wait");
    assert_eq!(s.aae_tree().unwrap(), maintained);
    s.close().unwrap();

    let s = Store::open(d.path(), cfg(10)).unwrap();
    let took = s.rebuild_aae(true).unwrap().as_secs_f64();
    let paced = s.stats().aae_rebuild_paced_seconds;
    assert!(
        paced >= 0.6 * took,
        "at 10 % a rebuild of {took:.3} s waited only {paced:.3} s for its pace"
    );
    assert_eq!(s.aae_tree().unwrap(), maintained);
}

/// The AAE tree is kept by XOR-ing out each key's old version and in its new one. The old version
/// is looked up outside the store's write lock: writers of the same key must not both see the
/// same old version. Eight threads rewrite sixteen keys with distinct metadata; the maintained
/// tree must equal one rebuilt from the ledger.
#[test]
fn concurrent_writes_of_the_same_keys_keep_the_aae_tree_true() {
    let d = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(d.path(), Config::small_for_tests()).unwrap());
    let writers: Vec<_> = (0..8u32)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let key = (i % 16).to_le_bytes();
                    let meta = [t.to_le_bytes(), i.to_le_bytes()].concat();
                    if i % 7 == t % 7 {
                        s.delete(b"b", &key, &meta, &[]).unwrap();
                    } else {
                        s.put(b"b", &key, b"v", &meta, &[]).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let maintained = s.aae_tree().unwrap();
    s.rebuild_aae(false).unwrap();
    assert_eq!(maintained, s.aae_tree().unwrap());
}
