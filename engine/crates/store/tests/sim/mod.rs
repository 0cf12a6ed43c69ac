//! Shared by the power-loss and I/O-fault tests: a random workload on a `SimDisk`, a model of every
//! write it attempted, and a check of a recovered store against that model.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use levee_store::storage::SimDisk;
use levee_store::{
    CompactionThresholds, Config, Error, IndexChange, IndexQuery, SnapshotKind, Store, SyncMode,
    Term,
};
use rand::rngs::SmallRng;
use rand::Rng;

pub const BUCKET: &[u8] = b"b";
pub const FIELD: &[u8] = b"w_int";
pub const KEYS: u32 = 24;
pub const DIR: &str = "/db";

/// What a key holds after some prefix of the writes: (value, metadata, index term).
pub type State = BTreeMap<u32, (Vec<u8>, Vec<u8>, i64)>;
/// What a store holds: key → (value, metadata).
pub type Objects = BTreeMap<u32, (Vec<u8>, Vec<u8>)>;
/// Index entries of `FIELD`: (term, key).
pub type IndexEntries = BTreeSet<(i64, u32)>;

#[derive(Clone, Debug)]
pub enum Write {
    Put {
        key: u32,
        value: Vec<u8>,
        metadata: Vec<u8>,
        term: i64,
    },
    Delete {
        key: u32,
    },
}

impl Write {
    pub fn key(&self) -> u32 {
        match self {
            Write::Put { key, .. } | Write::Delete { key } => *key,
        }
    }
    pub fn apply(&self, s: &mut State) {
        match self {
            Write::Put {
                key,
                value,
                metadata,
                term,
            } => {
                s.insert(*key, (value.clone(), metadata.clone(), *term));
            }
            Write::Delete { key } => {
                s.remove(key);
            }
        }
    }
}

/// Every write attempted, in order, and whether the store acknowledged it.
#[derive(Default, Clone, Debug)]
pub struct History {
    pub writes: Vec<(Write, bool)>,
}

impl History {
    pub fn state_after(&self, k: usize) -> State {
        let mut s = State::new();
        for (w, _) in &self.writes[..k] {
            w.apply(&mut s);
        }
        s
    }
    pub fn current(&self) -> State {
        self.state_after(self.writes.len())
    }
}

pub fn key_bytes(k: u32) -> Vec<u8> {
    format!("key-{k:04}").into_bytes()
}

/// Small sizes: a few hundred writes roll segments, flush memtables, merge levels and compact.
pub fn config(mode: SyncMode) -> Config {
    Config {
        sync_on_write: mode,
        journal_segment_bytes: 16 << 10,
        journal_segment_records: 40,
        // Rolls write over segments compaction replaced, so every cut point can fall in a reused
        // file (its link, its records over old ones, its cut to length).
        journal_spare_segments: 2,
        journal_bytes_per_sync: 4 << 10,
        memtable_bytes: 3 << 10,
        sst_target_bytes: 2 << 10,
        sst_block_bytes: 256,
        l0_merge_trigger: 2,
        l0_stall_files: 6,
        level_base_bytes: 6 << 10,
        level_multiplier: 3,
        aae_segments: 256,
        aae_branch_width: 16,
        compaction: CompactionThresholds {
            single_file: 90.0,
            run: 95.0,
            max_run: 4,
        },
        compaction_sample_records: 8,
        ..Config::default()
    }
}

pub fn open(disk: &SimDisk, cfg: &Config) -> levee_store::Result<Store> {
    Store::open_on(disk.handle(), Path::new(DIR), cfg.clone())
}

/// Perform one random operation. Returns `Err` (and records a failed write) when the store refused.
pub fn step(
    store: &Store,
    rng: &mut SmallRng,
    hist: &mut History,
    next_term: &mut i64,
) -> Result<(), Error> {
    let roll = rng.gen_range(0..100);
    match roll {
        0..=69 => {
            let key = rng.gen_range(0..KEYS);
            let cur = hist.current();
            let term = *next_term;
            *next_term += 1;
            let len = if rng.gen_bool(0.1) {
                rng.gen_range(1000..3000)
            } else {
                rng.gen_range(0..300)
            };
            let value: Vec<u8> = (0..len).map(|i| (term as u8) ^ (i as u8)).collect();
            let metadata = format!("vv-{term}").into_bytes();
            let mut changes = vec![IndexChange::add(FIELD.to_vec(), Term::Int(term))];
            if let Some((_, _, old)) = cur.get(&key) {
                changes.push(IndexChange::remove(FIELD.to_vec(), Term::Int(*old)));
            }
            let w = Write::Put {
                key,
                value: value.clone(),
                metadata: metadata.clone(),
                term,
            };
            let r = store.put(BUCKET, &key_bytes(key), &value, &metadata, &changes);
            hist.writes.push((w, r.is_ok()));
            r.map(|_| ())
        }
        70..=79 => {
            let key = rng.gen_range(0..KEYS);
            let cur = hist.current();
            let mut changes = Vec::new();
            if let Some((_, _, old)) = cur.get(&key) {
                changes.push(IndexChange::remove(FIELD.to_vec(), Term::Int(*old)));
            }
            let r = store.delete(BUCKET, &key_bytes(key), b"tomb", &changes);
            hist.writes.push((Write::Delete { key }, r.is_ok()));
            r.map(|_| ())
        }
        80..=84 => store.flush(),
        85..=88 => match store.compact_journal() {
            Ok(_) | Err(Error::Busy(_)) => Ok(()),
            Err(e) => Err(e),
        },
        89..=93 => {
            // A snapshot sees exactly the acknowledged state.
            let snap = store.snapshot(SnapshotKind::Query)?;
            for _ in 0..3 {
                let key = rng.gen_range(0..KEYS);
                let got = snap.get(BUCKET, &key_bytes(key))?;
                if let Err(m) = check_key(hist, key, got.map(|o| (o.value, o.metadata))) {
                    panic!("snapshot read: {m}");
                }
            }
            Ok(())
        }
        _ => {
            let key = rng.gen_range(0..KEYS);
            let got = store.get(BUCKET, &key_bytes(key))?;
            if let Err(m) = check_key(hist, key, got.map(|o| (o.value, o.metadata))) {
                panic!("live read: {m}");
            }
            Ok(())
        }
    }
}

type Obj = Option<(Vec<u8>, Vec<u8>)>;

/// What a read of `key` may return: the last acknowledged write to it (or nothing if none), or a
/// failed write after that one (it may have been applied before the error).
fn allowed(hist: &History, key: u32) -> Vec<Obj> {
    let as_obj = |w: &Write| match w {
        Write::Put {
            value, metadata, ..
        } => Some((value.clone(), metadata.clone())),
        Write::Delete { .. } => None,
    };
    let writes: Vec<&(Write, bool)> = hist.writes.iter().filter(|(w, _)| w.key() == key).collect();
    let last_ack = writes.iter().rposition(|(_, ok)| *ok);
    let mut out = vec![last_ack.and_then(|i| as_obj(&writes[i].0))];
    let after = last_ack.map_or(0, |i| i + 1);
    out.extend(writes[after..].iter().map(|(w, _)| as_obj(w)));
    out
}

fn describe(o: &Obj) -> Option<(usize, String)> {
    o.as_ref()
        .map(|(v, m)| (v.len(), String::from_utf8_lossy(m).into_owned()))
}

fn check_key(hist: &History, key: u32, got: Obj) -> Result<(), String> {
    let ok = allowed(hist, key);
    if ok.contains(&got) {
        return Ok(());
    }
    Err(format!(
        "key {key}: store has {:?}; allowed {:?}",
        describe(&got),
        ok.iter().map(describe).collect::<Vec<_>>()
    ))
}

/// Everything the store holds for the model's keyspace: objects and index entries.
pub fn read_all(store: &Store) -> Result<(Objects, IndexEntries), Error> {
    let mut objects = BTreeMap::new();
    for k in 0..KEYS {
        let kb = key_bytes(k);
        let got = store.get(BUCKET, &kb)?;
        let head = store.head(BUCKET, &kb)?;
        if got.as_ref().map(|o| (o.sqn, &o.metadata)) != head.as_ref().map(|h| (h.sqn, &h.metadata))
        {
            return Err(Error::Corruption(format!("key {k}: head and get disagree")));
        }
        if let Some(o) = got {
            objects.insert(k, (o.value, o.metadata));
        }
    }
    let mut index = BTreeSet::new();
    let mut q = IndexQuery {
        bucket: BUCKET.to_vec(),
        field: FIELD.to_vec(),
        start: Term::Int(i64::MIN),
        end: Term::Int(i64::MAX),
        return_terms: true,
        term_regex: None,
        max_results: Some(50),
        continuation: None,
    };
    loop {
        let page = store.index_query(&q)?;
        for (t, key) in page.results {
            let Some(Term::Int(t)) = t else {
                return Err(Error::Corruption("non-integer term".into()));
            };
            let k: u32 = std::str::from_utf8(&key)
                .ok()
                .and_then(|s| s.strip_prefix("key-"))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Corruption(format!("unknown key {key:?} in the index")))?;
            index.insert((t, k));
        }
        match page.continuation {
            Some(c) => q.continuation = Some(c),
            None => break,
        }
    }
    Ok((objects, index))
}

fn matches(s: &State, objects: &Objects, index: &IndexEntries) -> bool {
    s.len() == objects.len()
        && s.iter()
            .all(|(k, (v, m, _))| objects.get(k).is_some_and(|(ov, om)| ov == v && om == m))
        && s.len() == index.len()
        && s.iter().all(|(k, (_, _, t))| index.contains(&(*t, *k)))
}

/// After a power cut: the store must hold exactly the state after some prefix of the attempted
/// writes that includes every acknowledged one (`floor` writes at least). Returns that prefix's
/// length; the caller truncates the history to it.
pub fn check_prefix(store: &Store, hist: &History, floor: usize) -> Result<usize, String> {
    let (objects, index) = read_all(store).map_err(|e| format!("reading back: {e}"))?;
    let mut s = hist.state_after(floor);
    let mut candidates = Vec::new();
    for k in floor..=hist.writes.len() {
        if k > floor {
            hist.writes[k - 1].0.apply(&mut s);
        }
        if matches(&s, &objects, &index) {
            candidates.push(k);
        }
    }
    match candidates.last() {
        Some(&k) => Ok(k),
        None => Err(format!(
            "recovered state matches no prefix of the {} writes from {floor} on \
             (acknowledged: {}); store objects {:?}; index {:?}; model after all {:?}",
            hist.writes.len(),
            hist.writes.iter().filter(|w| w.1).count(),
            objects
                .iter()
                .map(|(k, (v, m))| (k, v.len(), String::from_utf8_lossy(m).into_owned()))
                .collect::<Vec<_>>(),
            index,
            hist.current()
                .iter()
                .map(|(k, (v, _, t))| (k, v.len(), t))
                .collect::<Vec<_>>(),
        )),
    }
}

/// After I/O faults: every acknowledged write is there unless a later write to the same key
/// (acknowledged, or failed and so possibly applied) replaced it; a failed write may be present or
/// absent. Nothing else may appear.
pub fn check_acknowledged(store: &Store, hist: &History) -> Result<(), String> {
    let (objects, _) = read_all(store).map_err(|e| format!("reading back: {e}"))?;
    for k in 0..KEYS {
        check_key(hist, k, objects.get(&k).cloned())?;
    }
    Ok(())
}

/// A number from the environment variable `var` (a case count, or a seed to rerun alone).
pub fn env_u64(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

/// How many cases a test runs: `default`, or the value of the environment variable `var`.
pub fn cases(var: &str, default: u64) -> u64 {
    env_u64(var).unwrap_or(default)
}
