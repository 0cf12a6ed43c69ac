//! The active journal segment's blocks reserved ahead of its end (`JournalWriter::reserve_ahead`),
//! on the real filesystem: the file keeps the length of what was appended, the space is held
//! while the store writes, and it goes back at close, or at the next open after a crash.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use levee_store::{Config, Store};

const VALUE: usize = 8 << 10;
const PUTS: usize = 100;

fn cfg() -> Config {
    Config {
        // Large enough that nothing rolls and the first reservation is a whole chunk (16 MiB).
        journal_segment_bytes: 64 << 20,
        journal_segment_records: 1 << 20,
        ..Config::small_for_tests()
    }
}

/// The journal segment files, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .map(|p| {
            let id = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (id, p)
        })
        .collect();
    segs.sort();
    segs.into_iter().map(|(_, p)| p).collect()
}

/// (length, bytes allocated on disk) of a file.
fn sizes(path: &Path) -> (u64, u64) {
    let m = std::fs::metadata(path).unwrap();
    (m.len(), m.blocks() * 512)
}

fn value(i: usize) -> Vec<u8> {
    (0..VALUE).map(|j| (i * 31 + j) as u8).collect()
}

fn put_all(s: &Store) {
    for i in 0..PUTS {
        s.put(b"b", format!("k{i}").as_bytes(), &value(i), b"", &[])
            .unwrap();
    }
}

/// A store with every value written, its active segment, and that segment's length, checked to
/// hold a reservation past its end.
fn written(dir: &Path) -> (Store, PathBuf, u64) {
    let s = Store::open(dir, cfg()).unwrap();
    put_all(&s);
    let active = segments(dir).pop().unwrap();
    let (len, allocated) = sizes(&active);
    assert!(
        allocated >= len + (8 << 20),
        "{allocated} bytes allocated for a {len}-byte segment: nothing reserved ahead"
    );
    (s, active, len)
}

fn check_all(s: &Store) {
    for i in 0..PUTS {
        let got = s.get(b"b", format!("k{i}").as_bytes()).unwrap().unwrap();
        assert_eq!(got.value, value(i), "k{i}");
    }
}

/// The writing segment holds a reservation past its end, its length is what was appended (a
/// reservation that grew the file would put zeros where a scan looks for the next record), and
/// it is given back at close.
#[test]
fn the_active_segment_reserves_ahead_keeps_its_length_and_gives_the_space_back_at_close() {
    let d = tempfile::tempdir().unwrap();
    let (s, active, len) = written(d.path());
    assert!(
        len > (PUTS * VALUE) as u64 && len < 2 << 20,
        "the segment's length {len} is not what was appended"
    );
    s.close().unwrap();
    let (len_after, allocated_after) = sizes(&active);
    assert_eq!(len_after, len, "closing changed the segment's length");
    assert!(
        allocated_after <= len + (64 << 10),
        "{allocated_after} bytes still allocated for a {len}-byte segment after close"
    );
    let s = Store::open(d.path(), cfg()).unwrap();
    check_all(&s);
    s.close().unwrap();
}

/// A writer that crashed left its reservation behind: the next open gives it back, and every
/// record is read back.
#[test]
fn space_a_crashed_writer_reserved_goes_back_at_the_next_open() {
    let d = tempfile::tempdir().unwrap();
    let (s, active, len) = written(d.path());
    s.simulate_crash();
    let s = Store::open(d.path(), cfg()).unwrap();
    let (len_after, allocated_after) = sizes(&active);
    assert_eq!(len_after, len, "recovery changed the segment's length");
    assert!(
        allocated_after <= len + (64 << 10),
        "{allocated_after} bytes still allocated for a {len}-byte segment after recovery"
    );
    check_all(&s);
    s.close().unwrap();
}
