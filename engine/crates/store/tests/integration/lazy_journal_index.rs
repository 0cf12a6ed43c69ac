//! Closed journal segments whose records the ledger has all persisted are opened without reading
//! their index files (open time must not grow with the journal). These tests check that such a
//! segment still serves every read when its index file is damaged, missing or disagrees with the
//! manifest, and that a damaged record costs only the reads of that record.

use std::path::{Path, PathBuf};

use levee_store::storage::{SimDisk, Storage};
use levee_store::{Config, Error, Store};

const DIR: &str = "/db";
const KEYS: usize = 60;

fn cfg() -> Config {
    Config {
        journal_segment_records: 10,
        ..Config::small_for_tests()
    }
}

/// A store with `KEYS` keys over six closed segments, closed cleanly (everything persisted).
fn written() -> SimDisk {
    let disk = SimDisk::new();
    let s = Store::open_on(disk.handle(), Path::new(DIR), cfg()).unwrap();
    for i in 0..KEYS {
        s.put(b"b", key(i).as_bytes(), value(i).as_bytes(), b"", &[])
            .unwrap();
    }
    s.close().unwrap();
    disk
}

fn key(i: usize) -> String {
    format!("k{i:03}")
}
fn value(i: usize) -> String {
    format!("value-{i}")
}

/// The journal's closed segment files in id order, with the given extension.
fn journal_files(disk: &SimDisk, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = disk
        .list_files()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn assert_all_readable(s: &Store) {
    for i in 0..KEYS {
        let got = s.get(b"b", key(i).as_bytes()).unwrap();
        assert_eq!(
            got.map(|o| o.value),
            Some(value(i).into_bytes()),
            "key {}",
            key(i)
        );
    }
}

#[test]
fn a_damaged_index_of_a_lazy_segment_is_rebuilt_on_first_read() {
    let disk = written();
    let idx = journal_files(&disk, "idx");
    assert!(idx.len() >= 6, "expected six closed segments, got {idx:?}");
    let before = disk.read(&idx[1]).unwrap();
    disk.corrupt(&idx[1], 20, &[0xAB; 8]).unwrap();
    let s = Store::open_on(disk.handle(), Path::new(DIR), cfg()).unwrap();
    assert_all_readable(&s);
    assert_eq!(
        disk.read(&idx[1]).unwrap(),
        before,
        "the index file is rewritten as it was"
    );
    s.close().unwrap();
}

#[test]
fn a_missing_index_of_a_lazy_segment_is_rebuilt_on_first_read() {
    let disk = written();
    let idx = journal_files(&disk, "idx");
    for p in &idx {
        disk.delete_durably(p).unwrap();
    }
    let s = Store::open_on(disk.handle(), Path::new(DIR), cfg()).unwrap();
    assert_all_readable(&s);
    s.close().unwrap();
}

#[test]
fn an_index_that_disagrees_with_the_manifest_is_not_trusted() {
    let disk = written();
    let idx = journal_files(&disk, "idx");
    // Segment 1's index in segment 2's place: a valid file for the wrong SQNs.
    let other = disk.read(&idx[0]).unwrap();
    disk.delete_durably(&idx[1]).unwrap();
    let f = disk.create_new(&idx[1]).unwrap();
    f.append(&other).unwrap();
    f.sync_data().unwrap();
    let s = Store::open_on(disk.handle(), Path::new(DIR), cfg()).unwrap();
    assert_all_readable(&s);
    s.close().unwrap();
}

#[test]
fn a_damaged_record_in_a_lazy_segment_fails_only_its_own_read() {
    let disk = written();
    let seg = journal_files(&disk, "seg");
    let idx = journal_files(&disk, "idx");
    // No index to rely on, and one record in the middle of the second segment damaged: the rescan
    // must step over it and keep the records after it.
    disk.delete_durably(&idx[1]).unwrap();
    let len = disk.read(&seg[1]).unwrap().len();
    disk.corrupt(&seg[1], len / 2, &[0xFF; 4]).unwrap();
    let s = Store::open_on(disk.handle(), Path::new(DIR), cfg()).unwrap();
    let mut failed = Vec::new();
    for i in 0..KEYS {
        match s.get(b"b", key(i).as_bytes()) {
            Ok(Some(o)) => assert_eq!(o.value, value(i).into_bytes(), "key {}", key(i)),
            Ok(None) => panic!("key {} vanished", key(i)),
            Err(Error::Corruption(m)) => {
                assert!(m.contains("sqn"), "{m}");
                failed.push(i)
            }
            Err(e) => panic!("key {}: unexpected error {e}", key(i)),
        }
    }
    assert_eq!(
        failed.len(),
        1,
        "exactly the damaged record fails: {failed:?}"
    );
    assert!(
        (10..20).contains(&failed[0]),
        "the damaged record is in segment 2: {failed:?}"
    );
    s.close().unwrap();
}
