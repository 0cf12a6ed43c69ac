//! Reads made with `storage::without_waiting` (a server's reactor answers cached reads itself and
//! sends the rest to its pool): a read whose data is not in the page cache must report that it
//! would wait instead of waiting, leave nothing behind (no counted read, no damage noted), and the
//! same read then works normally. Real files: the page cache is the kernel's, emptied per file
//! with `posix_fadvise(DONTNEED)` after a sync.

use std::os::fd::AsRawFd;
use std::path::Path;

use levee_store::storage::without_waiting;
use levee_store::{Config, Store};

const KEYS: usize = 40;

fn value(i: usize) -> Vec<u8> {
    vec![(i % 251) as u8; 4096]
}

/// A store on real files with `KEYS` values, its ledger flushed to a table.
fn written(dir: &Path) -> Store {
    let s = Store::open(dir, Config::small_for_tests()).unwrap();
    for i in 0..KEYS {
        s.put(b"b", format!("k{i:02}").as_bytes(), &value(i), b"meta", &[])
            .unwrap();
    }
    s.flush().unwrap();
    s
}

/// Drop from the page cache every file under `dir` whose name ends in one of `exts`.
fn evict(dir: &Path, exts: &[&str]) -> usize {
    let mut n = 0;
    for e in walk(dir) {
        if !exts.iter().any(|x| e.extension().is_some_and(|y| y == *x)) {
            continue;
        }
        let f = std::fs::File::open(&e).unwrap();
        f.sync_all().unwrap();
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED) of {}", e.display());
        n += 1;
    }
    n
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn extensions(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = walk(dir)
        .iter()
        .filter_map(|p| p.extension().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn tempdir() -> tempfile::TempDir {
    // The target directory, not a tmpfs: the test needs a page cache that can be emptied.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[test]
fn a_get_of_evicted_data_would_wait_counts_nothing_and_then_reads_normally() {
    let d = tempdir();
    let s = written(d.path());
    let all = extensions(d.path());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    // The kernel may keep a page that is busy at that moment (a loaded machine): evict again
    // until the read is refused, a few times at most.
    let mut before = s.stats();
    let refused = (0..10).any(|_| {
        assert!(evict(d.path(), &all) > 0);
        before = s.stats();
        without_waiting(|| s.get(b"b", b"k07")).is_none()
    });
    assert!(
        refused,
        "a GET of evicted data was answered without waiting, 10 evictions in a row"
    );
    let after = s.stats();
    assert_eq!(after.gets, before.gets, "the refused attempt was counted");
    assert_eq!(after.journal_reads, before.journal_reads);

    // The same read on a thread that may wait, then again without waiting: now cached.
    let got = s.get(b"b", b"k07").unwrap().unwrap();
    assert_eq!(got.value, value(7));
    let again = without_waiting(|| s.get(b"b", b"k07"))
        .expect("a cached GET was refused")
        .unwrap()
        .unwrap();
    assert_eq!(again.value, value(7));
    assert_eq!(again.sqn, got.sqn);
    let end = s.stats();
    assert_eq!(end.gets, before.gets + 2);
    // Nothing was marked damaged by the refused attempt.
    for i in 0..KEYS {
        let k = format!("k{i:02}");
        assert_eq!(s.get(b"b", k.as_bytes()).unwrap().unwrap().value, value(i));
    }
    s.close().unwrap();
}

#[test]
fn a_head_needs_only_the_ledger_in_memory() {
    let d = tempdir();
    let s = written(d.path());
    // Bring the ledger's table in, then drop everything but the ledger's files.
    assert!(s.head(b"b", b"k03").unwrap().is_some());
    let ledger_exts = ["sst"];
    let others: Vec<String> = extensions(d.path())
        .into_iter()
        .filter(|e| !ledger_exts.contains(&e.as_str()))
        .collect();
    assert!(
        extensions(d.path()).iter().any(|e| e == "sst"),
        "no ledger table to keep: {:?}",
        extensions(d.path())
    );
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    // The HEAD first, then a GET of the same key as the control: refused, it shows the journal
    // was out of memory when the HEAD ran (the kernel may keep a busy page: evict again then).
    for _ in 0..10 {
        evict(d.path(), &others);
        let h = without_waiting(|| s.head(b"b", b"k03"))
            .expect("a HEAD waited for a file other than the ledger's")
            .unwrap()
            .unwrap();
        assert_eq!(h.metadata, b"meta");
        if without_waiting(|| s.get(b"b", b"k03")).is_none() {
            s.close().unwrap();
            return;
        }
    }
    panic!("the journal stayed in memory through 10 evictions: the HEAD proved nothing");
}
