//! Flip bytes in journal segments, their indexes, SST files and manifests. Each read returns the
//! correct value or a corruption error exactly as far as the flipped byte reaches, never a wrong
//! value or a silent miss; open fails clearly when it cannot trust what it finds (a damaged record
//! the ledger has not persisted).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};

use levee_store::{Config, Error, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn cfg() -> Config {
    Config {
        memtable_bytes: 8 << 10,
        sst_target_bytes: 8 << 10,
        level_base_bytes: 16 << 10,
        ..Config::small_for_tests()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if !p.ends_with("LOCK") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Writes 3,000 puts over 800 keys and closes; returns each key's value and the SQN of its last
/// put (the version reads must find).
fn build(dir: &Path) -> BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
    let s = Store::open(dir, cfg()).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    for i in 0..3000u32 {
        let k = format!("key{}", rng.gen_range(0..800)).into_bytes();
        let v: Vec<u8> = (0..rng.gen_range(1..700)).map(|_| rng.gen()).collect();
        let sqn = s.put(b"b", &k, &v, &i.to_le_bytes(), &[]).unwrap();
        model.insert(k, (v, sqn));
    }
    s.close().unwrap();
    model
}

// Readers of the on-disk formats as docs/engine.md lays them out, byte by byte: enough to say
// which keys a flipped byte belongs to.

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// `bytes` (len:u32 · len bytes) at `*at`; advances `*at`.
fn bytes_at<'a>(b: &'a [u8], at: &mut usize) -> &'a [u8] {
    let n = u32_at(b, *at) as usize;
    let v = &b[*at + 4..*at + 4 + n];
    *at += 4 + n;
    v
}

/// The user key of an object's ledger key (`0x01 · bucket · 0x00 · key`) in bucket `b`.
fn user_key(ledger_key: &[u8]) -> Option<&[u8]> {
    ledger_key.strip_prefix(b"\x01b\x00")
}

/// The link a segment a roll started begins with (magic, prev_id, prev_len, crc).
const LINK_MAGIC: &[u8] = b"\xff\xff\xff\xffLVLK";
const LINK_BYTES: usize = 28;

/// The journal record of a segment holding byte `pos`: (its key, its SQN); `None` for a byte of
/// the segment's link.
fn journal_record_at(seg: &[u8], pos: usize) -> Option<(Vec<u8>, u64)> {
    let mut at = if seg.starts_with(LINK_MAGIC) {
        LINK_BYTES
    } else {
        0
    };
    if pos < at {
        return None;
    }
    loop {
        let end = at + 8 + u32_at(seg, at) as usize;
        if pos < end {
            // body: sqn:u64 · kind:u8 · [synced:u64 when kind has 0x08] · timestamp:u64 ·
            // ledger_key:bytes · ...
            let synced = if seg[at + 8 + 8] & 0x08 != 0 { 8 } else { 0 };
            let mut k = at + 8 + 17 + synced;
            let key = user_key(bytes_at(seg, &mut k)).unwrap().to_vec();
            return Some((key, u64_at(seg, at + 8)));
        }
        at = end;
    }
}

/// A newest manifest's live tables, by file name.
fn live_tables(dir: &Path) -> BTreeSet<String> {
    let newest = files(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("MANIFEST-")
        })
        .max()
        .unwrap();
    let m = std::fs::read(newest).unwrap();
    // "LVMF" · version:u32 · generation:u64 · persisted_sqn:u64 · next_file_id:u64
    let mut at = 4 + 4 + 8 + 8 + 8;
    let segments = u32_at(&m, at) as usize;
    at += 4 + segments * (8 + 8 + 8 + 1);
    let tables = u32_at(&m, at);
    at += 4;
    (0..tables)
        .map(|_| {
            let id = u64_at(&m, at + 1);
            at += 1 + 8 + 8 + 8;
            bytes_at(&m, &mut at);
            bytes_at(&m, &mut at);
            format!("{id:020}.sst")
        })
        .collect()
}

/// The part of an SST a flipped byte `pos` spoils, read from the intact file: its entries (user
/// key, SQN) and the range of keys a lookup reads it for (from `.1`, up to and including `.2`).
/// A data block spoils its own entries; the index, the bloom filter or the footer spoil the
/// whole table.
type Spoiled = (Vec<(Vec<u8>, u64)>, Bound<Vec<u8>>, Vec<u8>);

fn sst_spoiled(sst: &[u8], pos: usize) -> Spoiled {
    // footer (48 bytes): index_off:u64 · index_len:u32 · bloom_off:u64 · bloom_len:u32 · ...
    let footer = sst.len() - 48;
    let (index_off, index_len) = (
        u64_at(sst, footer) as usize,
        u32_at(sst, footer + 8) as usize,
    );
    // index block: count:u32 · (last_key:bytes · offset:u64 · len:u32)* · crc:u32
    let index = &sst[index_off..index_off + index_len];
    let mut at = 4;
    let handles: Vec<(Vec<u8>, usize, usize)> = (0..u32_at(index, 0))
        .map(|_| {
            let last = user_key(bytes_at(index, &mut at)).unwrap().to_vec();
            let (off, len) = (u64_at(index, at) as usize, u32_at(index, at + 8) as usize);
            at += 12;
            (last, off, len)
        })
        .collect();
    // data block: (key:bytes · value:bytes)* · crc:u32; a ledger value starts with sqn:u64
    let entries = |&(_, off, len): &(Vec<u8>, usize, usize)| {
        let block = &sst[off..off + len - 4];
        let mut at = 0;
        let mut out = Vec::new();
        while at < block.len() {
            let k = user_key(bytes_at(block, &mut at)).unwrap().to_vec();
            let v = bytes_at(block, &mut at);
            out.push((k, u64_at(v, 0)));
        }
        out
    };
    match handles
        .iter()
        .position(|(_, off, len)| (*off..off + len).contains(&pos))
    {
        // The table's range starts at its smallest key; a later block's after the one before.
        Some(0) => {
            let e = entries(&handles[0]);
            let first = Bound::Included(e[0].0.clone());
            (e, first, handles[0].0.clone())
        }
        Some(i) => (
            entries(&handles[i]),
            Bound::Excluded(handles[i - 1].0.clone()),
            handles[i].0.clone(),
        ),
        None => {
            let all: Vec<(Vec<u8>, u64)> = handles.iter().flat_map(entries).collect();
            let first = Bound::Included(all[0].0.clone());
            (all, first, handles.last().unwrap().0.clone())
        }
    }
}

/// What each read of a damaged store must give.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Value,
    Corruption,
    /// The read reaches the damaged part only if a bloom filter or the table order lets it:
    /// the right value or a corruption error.
    Either,
}

/// Expectations for every key of `model` after flipping byte `pos` of `file` (a copy of a file
/// of the store in `base`).
fn expectations(
    base: &Path,
    file: &Path,
    pos: usize,
    model: &BTreeMap<Vec<u8>, (Vec<u8>, u64)>,
) -> BTreeMap<Vec<u8>, Expect> {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let bytes = std::fs::read(file).unwrap();
    let mut out: BTreeMap<Vec<u8>, Expect> =
        model.keys().map(|k| (k.clone(), Expect::Value)).collect();
    if name.ends_with(".seg") {
        // A GET reads exactly the record its ledger entry names: only the key whose current
        // value is in the damaged record fails. No read reaches the link of a closed segment
        // (only a recovery scan of an unclosed one reads it).
        if let Some((key, sqn)) = journal_record_at(&bytes, pos) {
            if model[&key].1 == sqn {
                out.insert(key, Expect::Corruption);
            }
        }
    } else if name.ends_with(".sst") && live_tables(base).contains(&name) {
        let (entries, from, last) = sst_spoiled(&bytes, pos);
        for k in model.keys() {
            if (from.as_ref(), Bound::Included(&last)).contains(k) {
                // Its lookup may reach the spoiled part (bloom false positives, table order).
                out.insert(k.clone(), Expect::Either);
            }
        }
        for (k, sqn) in entries {
            let newest = model[&k].1 == sqn;
            // The newest version is only here: the read must fail. An older one: a newer
            // table answers first.
            out.insert(
                k,
                if newest {
                    Expect::Corruption
                } else {
                    Expect::Value
                },
            );
        }
    }
    // `.idx` (rebuilt from its segment), manifests (the previous generation is used), tables no
    // live manifest lists: nothing a read depends on.
    out
}
/// 160 times, one byte of a journal segment, a segment index, an SST or a manifest is flipped in
/// a copy of a closed store, and every read is checked against what that byte can reach:
/// - the open succeeds: a damaged SST fails only reads that reach it (not the open), a damaged
///   `.idx` is rebuilt from its segment, a damaged manifest gives way to the previous generation;
/// - `Error::Corruption` for the key whose current value is in a damaged journal record, and for
///   the keys whose newest version is in a damaged SST data block (every key of the table when its
///   index, bloom filter or footer is damaged);
/// - the right value for every other key, except keys in the damaged part's key range that a bloom
///   false positive or the table order may still lead to it: the right value or `Corruption`;
/// - never a wrong value, a silent miss or another error.
#[test]
fn flipped_bytes_fail_exactly_the_reads_they_reach() {
    let base = tempfile::tempdir().unwrap();
    let model = build(base.path());
    let all = files(base.path());
    let kinds = [".seg", ".idx", ".sst", "MANIFEST-"];
    let mut rng = SmallRng::seed_from_u64(99);
    // Per kind: trials, reads that had to fail.
    let mut seen: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for trial in 0..160 {
        let kind = kinds[trial % kinds.len()];
        let candidates: Vec<&PathBuf> = all
            .iter()
            .filter(|p| {
                p.file_name().unwrap().to_string_lossy().contains(kind)
                    && std::fs::metadata(p).unwrap().len() > 0
            })
            .collect();
        assert!(
            !candidates.is_empty(),
            "store should have {kind} files: {all:?}"
        );
        let victim = candidates[rng.gen_range(0..candidates.len())];
        let work = tempfile::tempdir().unwrap();
        copy_dir(base.path(), work.path());
        let target = work.path().join(victim.strip_prefix(base.path()).unwrap());
        let mut bytes = std::fs::read(&target).unwrap();
        let pos = rng.gen_range(0..bytes.len());
        let expect = expectations(base.path(), victim, pos, &model);
        bytes[pos] ^= rng.gen_range(1..=255u8);
        std::fs::write(&target, &bytes).unwrap();
        let what = format!("trial {trial}: byte {pos} of {}", target.display());
        let s =
            Store::open(work.path(), cfg()).unwrap_or_else(|e| panic!("{what}: open failed: {e}"));
        let tally = seen.entry(kind).or_default();
        tally.0 += 1;
        for (k, (v, _)) in &model {
            let key = String::from_utf8_lossy(k);
            let want = expect[k];
            match s.get(b"b", k) {
                Ok(Some(o)) if want != Expect::Corruption => {
                    assert_eq!(&o.value, v, "{what}: WRONG VALUE for {key}")
                }
                Err(e) if e.is_corruption() && want != Expect::Value => {}
                Ok(Some(_)) => panic!("{what}: {key} read a value; its newest version is damaged"),
                Ok(None) => panic!("{what}: {key} silently missing"),
                Err(e) => panic!("{what}: {key}: expected {want:?}, got {e}"),
            }
            if want == Expect::Corruption {
                tally.1 += 1;
            }
        }
    }
    // The seed makes flips land in live journal records and SST blocks: the strict expectations
    // above were exercised, not only the harmless ones.
    for kind in [".seg", ".sst"] {
        assert!(
            seen[kind].1 > 0,
            "no {kind} flip reached a live key: {seen:?}"
        );
    }
}

/// Write 100 keys, stop as a crash would (nothing flushed), and return the last journal segment.
fn crashed_store_with_100_keys(dir: &Path, cfg: Config) -> PathBuf {
    let s = Store::open(dir, cfg).unwrap();
    for i in 0..100u32 {
        s.put(b"b", &i.to_le_bytes(), &[i as u8; 300], b"", &[])
            .unwrap();
    }
    s.simulate_crash();
    files(&dir.join("journal"))
        .into_iter()
        .rfind(|p| p.extension().unwrap() == "seg")
        .unwrap()
}

#[test]
fn a_torn_tail_is_truncated_and_everything_before_it_survives() {
    let d = tempfile::tempdir().unwrap();
    let seg = crashed_store_with_100_keys(d.path(), Config::small_for_tests());
    let good_len = std::fs::metadata(&seg).unwrap().len();
    // Half a record: a plausible header promising more bytes than were written.
    let mut f = std::fs::OpenOptions::new().append(true).open(&seg).unwrap();
    use std::io::Write;
    f.write_all(&[200, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    drop(f);
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    assert_eq!(
        std::fs::metadata(&seg).unwrap().len(),
        good_len,
        "torn tail truncated"
    );
    for i in 0..100u32 {
        assert_eq!(
            s.get(b"b", &i.to_le_bytes()).unwrap().unwrap().value,
            vec![i as u8; 300]
        );
    }
}

#[test]
fn a_damaged_record_the_ledger_has_not_persisted_stops_open_without_harm() {
    let d = tempfile::tempdir().unwrap();
    let cfg = Config {
        memtable_bytes: 1 << 20,
        ..Config::small_for_tests()
    };
    let seg = crashed_store_with_100_keys(d.path(), cfg);
    let orig = std::fs::read(&seg).unwrap();
    let mut bad = orig.clone();
    let mid = orig.len() / 2;
    bad[mid] ^= 0x55;
    std::fs::write(&seg, &bad).unwrap();
    let err = Store::open(d.path(), Config::small_for_tests()).unwrap_err();
    assert!(matches!(err, Error::Corruption(_)), "{err:?}");
    assert!(err.to_string().contains("not yet persisted"), "{err}");
    // Nothing was truncated or rewritten: restoring the byte brings everything back.
    assert_eq!(std::fs::read(&seg).unwrap().len(), orig.len());
    std::fs::write(&seg, &orig).unwrap();
    let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
    for i in 0..100u32 {
        assert_eq!(
            s.get(b"b", &i.to_le_bytes()).unwrap().unwrap().value,
            vec![i as u8; 300]
        );
    }
}
