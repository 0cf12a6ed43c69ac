//! Property tests of every decoder of on-disk bytes: journal records, SST files (data blocks, block
//! index, bloom, footer), manifests, segment indexes and the AAE tree file. Arbitrary bytes never
//! panic; valid bytes with damage never decode to a wrong value (an error, or the original).

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use crate::aae::AaeState;
use crate::config::NUM_LEVELS;
use crate::journal::record::{self, Kind};
use crate::journal::segment::{self, IdxEntry};
use crate::keys::{IndexChange, Term};
use crate::ledger::bloom::Bloom;
use crate::ledger::sst::{sst_path, Table, TableBuilder, TableMeta};
use crate::ledger::value::LedgerValue;
use crate::manifest::{Manifest, SegmentEntry};
use crate::storage::{SimDisk, Storage};

/// Apply `flips` (position, xor mask) to `bytes`; masks of 0 are made 1 so every flip changes a byte.
fn damage(bytes: &mut [u8], flips: &[(usize, u8)]) {
    if bytes.is_empty() {
        return;
    }
    for &(pos, mask) in flips {
        let n = bytes.len();
        bytes[pos % n] ^= mask.max(1);
    }
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>()), 1..4)
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn journal_records_decode_exactly_or_fail(
        sqn in 1u64.., ts in any::<u64>(), key in bytes(40), meta in bytes(40),
        value in bytes(600), term in any::<i64>(), del in any::<bool>(), f in flips(),
        junk in bytes(200),
    ) {
        let kind = if del { Kind::Delete } else { Kind::Put };
        let changes = vec![IndexChange::add(b"f_int".to_vec(), Term::Int(term))];
        let mut buf = Vec::new();
        record::encode(&mut buf, sqn, kind, ts, &key, &meta, &changes, &value);
        let v = record::decode(&buf).unwrap();
        prop_assert_eq!((v.sqn, v.kind, v.timestamp), (sqn, kind, ts));
        prop_assert_eq!((v.ledger_key, v.metadata, v.value), (&key[..], &meta[..], &value[..]));
        prop_assert_eq!(&v.changes, &changes);
        let mut bad = buf.clone();
        damage(&mut bad, &f);
        if let Ok(v) = record::decode(&bad) {
            prop_assert_eq!((v.sqn, v.ledger_key, v.metadata, v.value), (sqn, &key[..], &meta[..], &value[..]));
        }
        let _ = record::decode(&junk);
    }

    #[test]
    fn ledger_values_and_blooms_never_panic(junk in bytes(300)) {
        let _ = LedgerValue::decode(&junk);
        if let Some(b) = Bloom::decode(&junk) {
            let _ = b.may_contain(b"k");
        }
        let _ = AaeState::decode(&junk, 64, 8);
        let _ = Manifest::decode(&junk);
    }

    #[test]
    fn manifests_decode_exactly_or_fail(
        generation in any::<u64>(), persisted in any::<u64>(), ids in prop::collection::vec(any::<u64>(), 0..6),
        f in flips(),
    ) {
        let mut levels = vec![Vec::new(); NUM_LEVELS];
        for (i, id) in ids.iter().enumerate() {
            levels[i % NUM_LEVELS].push(TableMeta { id: *id, size: i as u64, entries: 3, smallest: b"a".to_vec(), largest: b"z".to_vec() });
        }
        let m = Manifest {
            generation, persisted_sqn: persisted, next_file_id: 9,
            segments: ids.iter().map(|&id| SegmentEntry { id, first_sqn: 1, last_sqn: 2, closed: id % 2 == 0 }).collect(),
            levels,
        };
        let buf = m.encode();
        prop_assert_eq!(&Manifest::decode(&buf).unwrap(), &m);
        let mut bad = buf.clone();
        damage(&mut bad, &f);
        if let Ok(d) = Manifest::decode(&bad) {
            prop_assert_eq!(&d, &m);
        }
    }

    #[test]
    fn segment_indexes_load_exactly_or_report_damage(
        n in 0usize..50, f in flips(), junk in bytes(300),
    ) {
        let disk = SimDisk::new();
        let dir = Path::new("/j");
        disk.create_dir_all(dir).unwrap();
        let entries: Vec<IdxEntry> = (0..n as u64).map(|i| IdxEntry { sqn: i + 1, offset: i * 100, len: 100 }).collect();
        segment::write_index(&disk, dir, 1, &entries).unwrap();
        prop_assert_eq!(segment::load_index(&disk, dir, 1).unwrap(), Some(entries.clone()));
        let path = segment::idx_path(dir, 1);
        let mut bad = disk.read(&path).unwrap();
        damage(&mut bad, &f);
        let f2 = disk.create(&path).unwrap();
        f2.append(&bad).unwrap();
        match segment::load_index(&disk, dir, 1).unwrap() {
            None => {}
            Some(got) => prop_assert_eq!(got, entries),
        }
        let f3 = disk.create(&path).unwrap();
        f3.append(&junk).unwrap();
        let _ = segment::load_index(&disk, dir, 1);
    }

    #[test]
    fn sst_reads_return_the_value_written_or_corruption(
        n in 1u32..300, f in flips(), junk in bytes(400),
    ) {
        let disk = SimDisk::new().handle();
        let dir = Path::new("/l");
        disk.create_dir_all(dir).unwrap();
        let mut b = TableBuilder::create(&disk, dir, 1, 256, 10).unwrap();
        let value = |i: u32| LedgerValue { sqn: i as u64 + 1, tombstone: false, value_size: i, value_hash: i ^ 7, last_modified: 0, metadata: vec![i as u8; (i % 5) as usize] };
        for i in 0..n {
            let mut v = Vec::new();
            value(i).encode(&mut v);
            b.add(format!("k{i:05}").as_bytes(), &v).unwrap();
        }
        let meta = b.finish().unwrap();
        let path = sst_path(dir, 1);
        let mut bad = disk.read(&path).unwrap();
        damage(&mut bad, &f);
        disk.create(&path).unwrap().append(&bad).unwrap();
        let t = Arc::new(Table::open(&disk, dir, meta.clone()).unwrap());
        for i in 0..n {
            match t.get(format!("k{i:05}").as_bytes()) {
                Ok(Some(v)) => prop_assert_eq!(v, value(i)),
                Ok(None) => prop_assert!(false, "k{i:05} vanished without an error"),
                Err(e) => prop_assert!(e.is_corruption(), "{e}"),
            }
        }
        let items = match t.iter_from(&[]) {
            Ok(it) => it.collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        };
        for item in items {
            match item {
                Ok((k, v)) => {
                    let i: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
                    prop_assert_eq!(LedgerValue::decode(&v).unwrap(), value(i));
                }
                Err(e) => prop_assert!(e.is_corruption(), "{e}"),
            }
        }
        disk.create(&path).unwrap().append(&junk).unwrap();
        if let Ok(t) = Table::open(&disk, dir, meta) {
            let _ = t.get(b"k00001");
        }
    }
}
