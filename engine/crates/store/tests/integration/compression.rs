//! Value compression (`compression_method`, `compression_point`): values read back as written
//! through GET, both folds, recovery after a power cut and journal compaction; records written
//! under another method stay readable; compressible values take a fraction of the journal,
//! incompressible ones cost nothing on read.

use std::collections::BTreeMap;
use std::path::Path;

use levee_store::storage::SimDisk;
use levee_store::{
    Compression, CompressionPoint, Config, FoldOrder, SnapshotKind, Store, SyncMode,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const DIR: &str = "/db";

/// 8 KB of text that compresses well (different per key).
fn text(i: usize) -> Vec<u8> {
    let words = ["levee ", "journal ", "ledger ", "segment ", "value "];
    let mut v = format!("key {i}: ").into_bytes();
    let mut n = i;
    while v.len() < 8192 {
        v.extend_from_slice(words[n % words.len()].as_bytes());
        n = n / 2 + 3 * (n % 7);
    }
    v.truncate(8192);
    v
}

/// 8 KB that does not compress.
fn noise(i: usize) -> Vec<u8> {
    let mut v = vec![0u8; 8192];
    SmallRng::seed_from_u64(i as u64).fill(&mut v[..]);
    v
}

fn cfg(method: Compression, point: CompressionPoint) -> Config {
    Config {
        compression_method: method,
        compression_point: point,
        sync_on_write: SyncMode::Sync,
        ..Config::small_for_tests()
    }
}

fn open(disk: &SimDisk, cfg: &Config) -> Store {
    Store::open_on(disk.handle(), Path::new(DIR), cfg.clone()).unwrap()
}

/// Every key of `model` reads back its value through GET and through both object folds.
fn check(s: &Store, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for (k, v) in model {
        let got = s.get(b"b", k).unwrap().expect(what).value;
        assert!(got == *v, "{what}: GET {}", String::from_utf8_lossy(k));
    }
    let snap = s.snapshot(SnapshotKind::Fold).unwrap();
    for order in [FoldOrder::Key, FoldOrder::Journal] {
        let folded: BTreeMap<Vec<u8>, Vec<u8>> = snap
            .fold_objects(Some(b"b"), order)
            .unwrap()
            .map(|o| {
                let o = o.unwrap();
                (o.key, o.object.value)
            })
            .collect();
        assert!(folded == *model, "{what}: fold in {order:?} order");
    }
}

fn put_all(s: &Store, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, keys: std::ops::Range<usize>) {
    for i in keys {
        let v = if i % 5 == 0 { noise(i) } else { text(i) };
        let k = format!("k{i:04}").into_bytes();
        s.put(b"b", &k, &v, b"m", &[]).unwrap();
        model.insert(k, v);
    }
}

#[test]
fn values_read_back_as_written_after_a_power_cut_under_each_method() {
    let mut journal = BTreeMap::new();
    for method in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let c = cfg(method, CompressionPoint::OnReceipt);
        let disk = SimDisk::new();
        let s = open(&disk, &c);
        let mut model = BTreeMap::new();
        put_all(&s, &mut model, 0..200);
        check(&s, &model, &format!("{method:?}"));
        journal.insert(format!("{method:?}"), s.stats().journal_disk_bytes);
        // No close: the ledger has not persisted these writes, so the reopen replays the
        // journal (decompressing each value to record its length and CRC).
        let disk = disk.power_cut(1, false);
        let s = open(&disk, &c);
        check(&s, &model, &format!("{method:?} after a power cut"));
        s.close().unwrap();
    }
    // 160 of the 200 values compress; the journal holds a fraction of the raw size.
    for m in ["Lz4", "Zstd"] {
        assert!(
            (journal[m] as f64) < 0.5 * journal["None"] as f64,
            "{journal:?}"
        );
    }
}

#[test]
fn records_of_another_method_stay_readable() {
    let disk = SimDisk::new();
    let mut model = BTreeMap::new();
    let steps = [
        (Compression::None, 0..50),
        (Compression::Lz4, 50..100),
        (Compression::Zstd, 100..150),
        (Compression::None, 150..160),
    ];
    for (method, keys) in steps {
        let s = open(&disk, &cfg(method, CompressionPoint::OnReceipt));
        check(&s, &model, &format!("opened with {method:?}"));
        put_all(&s, &mut model, keys);
        check(&s, &model, &format!("written with {method:?}"));
        s.close().unwrap();
    }
}

#[test]
fn on_compact_leaves_writes_raw_and_compaction_compresses_what_it_keeps() {
    let mut after = BTreeMap::new();
    for method in [Compression::None, Compression::Lz4] {
        let disk = SimDisk::new();
        let c = Config {
            journal_segment_bytes: 64 << 10,
            ..cfg(method, CompressionPoint::OnCompact)
        };
        let s = open(&disk, &c);
        let mut model = BTreeMap::new();
        put_all(&s, &mut model, 0..100);
        // Written raw: the journal holds at least the values' bytes.
        let written = s.stats().journal_disk_bytes;
        assert!(written >= 100 * 8192, "{method:?}: {written}");
        // Overwrite every other key: each old segment is half live, worth compacting.
        for i in (0..100).step_by(2) {
            put_all(&s, &mut model, i..i + 1);
        }
        s.flush().unwrap();
        let mut kept = 0;
        for _ in 0..20 {
            let r = s.compact_journal().unwrap();
            kept += r.records_kept;
            if r.compacted_segments.is_empty() {
                break;
            }
        }
        assert!(kept >= 20, "{method:?}: compaction kept {kept} records");
        check(&s, &model, &format!("{method:?} after compaction"));
        after.insert(format!("{method:?}"), s.stats().journal_disk_bytes);
        s.close().unwrap();
        let s = open(&disk, &c);
        check(&s, &model, &format!("{method:?} reopened after compaction"));
        s.close().unwrap();
    }
    // The records compaction kept (odd keys, 4 in 5 compressible) shrank.
    assert!(
        (after["Lz4"] as f64) < 0.8 * after["None"] as f64,
        "{after:?}"
    );
}
