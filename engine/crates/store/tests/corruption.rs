//! Flip bytes in journal segments, their indexes, SST files and manifests. A read returns the
//! correct value or a corruption error, never a wrong value or a silent miss; open fails clearly
//! when it cannot trust what it finds.

use std::collections::BTreeMap;
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

fn build(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let s = Store::open(dir, cfg()).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    for i in 0..3000u32 {
        let k = format!("key{}", rng.gen_range(0..800)).into_bytes();
        let v: Vec<u8> = (0..rng.gen_range(1..700)).map(|_| rng.gen()).collect();
        s.put(b"b", &k, &v, &i.to_le_bytes(), &[]).unwrap();
        model.insert(k, v);
    }
    s.close().unwrap();
    model
}

fn verify(dir: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) -> (usize, usize) {
    let s = match Store::open(dir, cfg()) {
        Ok(s) => s,
        Err(e) => {
            assert!(
                e.is_corruption(),
                "{what}: open failed with a non-corruption error: {e}"
            );
            return (0, 1);
        }
    };
    let (mut ok, mut errors) = (0, 0);
    for (k, v) in model {
        match s.get(b"b", k) {
            Ok(Some(o)) => {
                assert_eq!(
                    &o.value,
                    v,
                    "{what}: WRONG VALUE for {}",
                    String::from_utf8_lossy(k)
                );
                ok += 1;
            }
            Ok(None) => panic!("{what}: {} silently missing", String::from_utf8_lossy(k)),
            Err(e) => {
                assert!(e.is_corruption(), "{what}: {e}");
                errors += 1;
            }
        }
    }
    (ok, errors)
}

#[test]
fn flipped_bytes_never_yield_wrong_values() {
    let base = tempfile::tempdir().unwrap();
    let model = build(base.path());
    let all = files(base.path());
    let kinds = ["seg", "idx", "sst", "MANIFEST"];
    let mut rng = SmallRng::seed_from_u64(99);
    let mut detected = 0;
    for trial in 0..160 {
        let kind = kinds[trial % kinds.len()];
        let candidates: Vec<&PathBuf> = all
            .iter()
            .filter(|p| {
                p.to_string_lossy().contains(kind) && std::fs::metadata(p).unwrap().len() > 0
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
        bytes[pos] ^= rng.gen_range(1..=255u8);
        std::fs::write(&target, &bytes).unwrap();
        let what = format!("trial {trial}: byte {pos} of {}", target.display());
        let (_, errors) = verify(work.path(), &model, &what);
        if errors > 0 {
            detected += 1;
        }
    }
    // Most flips land in live data and must be reported (a few hit a manifest we can fall back
    // from, or an index we rebuild).
    assert!(detected > 40, "only {detected} of 160 flips were detected");
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
