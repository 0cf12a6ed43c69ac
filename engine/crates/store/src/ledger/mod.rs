//! The ledger: an LSM of ledger key → ledger value (SQN, status, value size/hash, metadata).
//! Memtables flush to L0; leveled merges push data down L1..L6, where each level's files do not
//! overlap. `pick_merge` decides what to merge as a pure function of the levels' metadata.

pub(crate) mod bloom;
pub(crate) mod memtable;
pub(crate) mod sst;
pub(crate) mod value;

use std::path::Path;
use std::sync::Arc;

use crate::config::{Config, NUM_LEVELS};
use crate::error::Result;
use crate::storage::Disk;
use sst::{Table, TableBuilder, TableMeta};
use value::LedgerValue;

/// An immutable set of tables, one list per level. L0 is ordered oldest → newest (its files may
/// overlap); deeper levels are sorted by key and do not overlap.
#[derive(Clone, Default)]
pub(crate) struct Version {
    pub levels: Vec<Vec<Arc<Table>>>,
}

impl Version {
    pub(crate) fn empty() -> Self {
        Version {
            levels: vec![Vec::new(); NUM_LEVELS],
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<LedgerValue>> {
        for t in self.levels[0].iter().rev() {
            if t.meta.smallest.as_slice() <= key && key <= t.meta.largest.as_slice() {
                if let Some(v) = t.get(key)? {
                    return Ok(Some(v));
                }
            }
        }
        for level in &self.levels[1..] {
            let i = level.partition_point(|t| t.meta.largest.as_slice() < key);
            if let Some(t) = level.get(i) {
                if t.meta.smallest.as_slice() <= key {
                    if let Some(v) = t.get(key)? {
                        return Ok(Some(v));
                    }
                }
            }
        }
        Ok(None)
    }

    pub(crate) fn metas(&self) -> Vec<Vec<TableMeta>> {
        self.levels
            .iter()
            .map(|l| l.iter().map(|t| t.meta.clone()).collect())
            .collect()
    }

    pub(crate) fn disk_bytes(&self) -> u64 {
        self.levels.iter().flatten().map(|t| t.meta.size).sum()
    }
}

/// A merge chosen by `pick_merge`: tables of `level` and the overlapping tables of `level + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeTask {
    pub level: usize,
    pub upper: Vec<u64>,
    pub lower: Vec<u64>,
    /// No deeper level holds these keys, so tombstones can be dropped.
    pub drop_tombstones: bool,
}

/// Size target of a level (L1 = `level_base_bytes`, ×`level_multiplier` per level).
pub(crate) fn level_target(cfg: &Config, level: usize) -> u64 {
    let mut t = cfg.level_base_bytes;
    for _ in 1..level {
        t = t.saturating_mul(cfg.level_multiplier);
    }
    t
}

/// Files over their level targets: L0 files beyond the trigger plus, per level, the whole files
/// its size exceeds the target by.
pub(crate) fn merge_backlog(levels: &[Vec<TableMeta>], cfg: &Config) -> u64 {
    let mut backlog = levels[0].len().saturating_sub(cfg.l0_merge_trigger - 1) as u64;
    for (l, files) in levels.iter().enumerate().skip(1).take(NUM_LEVELS - 2) {
        let bytes: u64 = files.iter().map(|m| m.size).sum();
        let over = bytes.saturating_sub(level_target(cfg, l));
        backlog += over.div_ceil(cfg.sst_target_bytes.max(1));
    }
    backlog
}

/// Decide the next merge, if any. L0 first (when it holds `l0_merge_trigger` files), then the level
/// most over its size target; within a level the file after `cursors[level]` (round robin).
pub(crate) fn pick_merge(
    levels: &[Vec<TableMeta>],
    cfg: &Config,
    cursors: &[Vec<u8>],
) -> Option<MergeTask> {
    let (level, upper): (usize, Vec<&TableMeta>) = if levels[0].len() >= cfg.l0_merge_trigger {
        (0, levels[0].iter().collect())
    } else {
        let mut best: Option<(f64, usize)> = None;
        for (l, files) in levels.iter().enumerate().take(NUM_LEVELS - 1).skip(1) {
            let bytes: u64 = files.iter().map(|m| m.size).sum();
            let score = bytes as f64 / level_target(cfg, l) as f64;
            if score > 1.0 && best.is_none_or(|(s, _)| score > s) {
                best = Some((score, l));
            }
        }
        let (_, l) = best?;
        let files = &levels[l];
        let cursor = cursors.get(l).map(|c| c.as_slice()).unwrap_or(&[]);
        let pick = files
            .iter()
            .find(|m| m.smallest.as_slice() > cursor)
            .unwrap_or(&files[0]);
        (l, vec![pick])
    };
    let lo = upper.iter().map(|m| m.smallest.as_slice()).min()?;
    let hi = upper.iter().map(|m| m.largest.as_slice()).max()?;
    let lower: Vec<u64> = levels[level + 1]
        .iter()
        .filter(|m| m.overlaps(lo, hi))
        .map(|m| m.id)
        .collect();
    // The merged range grows to cover the lower files too.
    let lo2 = levels[level + 1]
        .iter()
        .filter(|m| lower.contains(&m.id))
        .map(|m| m.smallest.as_slice())
        .fold(lo, |a, b| a.min(b));
    let hi2 = levels[level + 1]
        .iter()
        .filter(|m| lower.contains(&m.id))
        .map(|m| m.largest.as_slice())
        .fold(hi, |a, b| a.max(b));
    let deeper = levels[level + 2..]
        .iter()
        .flatten()
        .any(|m| m.overlaps(lo2, hi2));
    Some(MergeTask {
        level,
        upper: upper.iter().map(|m| m.id).collect(),
        lower,
        drop_tombstones: !deeper,
    })
}

/// Merge sorted sources; on equal keys the source with the lowest index (the newest) wins.
pub(crate) struct MergeIter<V, I: Iterator<Item = Result<(Vec<u8>, V)>>> {
    sources: Vec<I>,
    heads: Vec<Option<(Vec<u8>, V)>>,
    started: bool,
}

impl<V, I: Iterator<Item = Result<(Vec<u8>, V)>>> MergeIter<V, I> {
    pub(crate) fn new(sources: Vec<I>) -> Self {
        let n = sources.len();
        MergeIter {
            sources,
            heads: (0..n).map(|_| None).collect(),
            started: false,
        }
    }

    fn refill(&mut self, i: usize) -> Result<()> {
        self.heads[i] = self.sources[i].next().transpose()?;
        Ok(())
    }
}

impl<V, I: Iterator<Item = Result<(Vec<u8>, V)>>> Iterator for MergeIter<V, I> {
    type Item = Result<(Vec<u8>, V)>;
    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Err(e) = self.refill(i) {
                    return Some(Err(e));
                }
            }
        }
        let mut best: Option<usize> = None;
        for (i, h) in self.heads.iter().enumerate() {
            if let Some((k, _)) = h {
                if best.is_none_or(|b| k < &self.heads[b].as_ref().unwrap().0) {
                    best = Some(i);
                }
            }
        }
        let b = best?;
        let item = self.heads[b].take().unwrap();
        if let Err(e) = self.refill(b) {
            return Some(Err(e));
        }
        for i in b + 1..self.heads.len() {
            if self.heads[i].as_ref().is_some_and(|(k, _)| *k == item.0) {
                if let Err(e) = self.refill(i) {
                    return Some(Err(e));
                }
            }
        }
        Some(Ok(item))
    }
}

/// Run a merge: read the input tables, write output tables split at `sst_target_bytes`.
/// `next_id` hands out file ids. Returns the new tables' metadata and the bytes written.
pub(crate) fn run_merge(
    disk: &Disk,
    dir: &Path,
    cfg: &Config,
    inputs_newest_first: &[Arc<Table>],
    drop_tombstones: bool,
    mut next_id: impl FnMut() -> u64,
) -> Result<(Vec<TableMeta>, u64)> {
    let iters: Vec<_> = inputs_newest_first
        .iter()
        .map(|t| t.iter_from(&[]))
        .collect::<Result<_>>()?;
    let merged = MergeIter::new(iters);
    let mut outputs = Vec::new();
    let mut written = 0u64;
    let mut builder: Option<TableBuilder> = None;
    let result = (|| -> Result<()> {
        for item in merged {
            let (k, v) = item?;
            if drop_tombstones && LedgerValue::encoded_is_tombstone(&v) {
                continue;
            }
            if builder.is_none() {
                builder = Some(TableBuilder::create(
                    disk,
                    dir,
                    next_id(),
                    cfg.sst_block_bytes,
                    cfg.bloom_bits_per_key,
                )?);
            }
            let b = builder.as_mut().unwrap();
            b.add(&k, &v)?;
            if b.size() >= cfg.sst_target_bytes {
                let meta = builder.take().unwrap().finish()?;
                written += meta.size;
                outputs.push(meta);
            }
        }
        if let Some(b) = builder.take() {
            if !b.is_empty() {
                let meta = b.finish()?;
                written += meta.size;
                outputs.push(meta);
            } else {
                b.abandon();
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        if let Some(b) = builder.take() {
            b.abandon();
        }
        for m in &outputs {
            crate::fsutil::remove_quietly(&**disk, &sst::sst_path(dir, m.id));
        }
        return Err(e);
    }
    Ok((outputs, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: u64, lo: &str, hi: &str, size: u64) -> TableMeta {
        TableMeta {
            id,
            size,
            entries: 1,
            smallest: lo.into(),
            largest: hi.into(),
        }
    }

    fn cfg() -> Config {
        Config {
            level_base_bytes: 100,
            level_multiplier: 10,
            l0_merge_trigger: 4,
            ..Config::default()
        }
    }

    #[test]
    fn pick_merge_table() {
        let none: Vec<Vec<u8>> = vec![Vec::new(); NUM_LEVELS];
        let mut levels = vec![Vec::new(); NUM_LEVELS];
        // Nothing to do on an empty tree, or with 3 L0 files.
        assert_eq!(pick_merge(&levels, &cfg(), &none), None);
        levels[0] = vec![
            meta(1, "a", "c", 10),
            meta(2, "b", "d", 10),
            meta(3, "x", "z", 10),
        ];
        assert_eq!(pick_merge(&levels, &cfg(), &none), None);
        // 4 L0 files: all of L0 plus the overlapping L1 files; no deeper data → drop tombstones.
        levels[0].push(meta(4, "c", "e", 10));
        levels[1] = vec![
            meta(10, "a", "b", 10),
            meta(11, "f", "g", 10),
            meta(12, "y", "z", 10),
        ];
        assert_eq!(
            pick_merge(&levels, &cfg(), &none),
            Some(MergeTask {
                level: 0,
                upper: vec![1, 2, 3, 4],
                lower: vec![10, 11, 12],
                drop_tombstones: true
            })
        );
        // Deeper data overlapping the range keeps tombstones.
        levels[2] = vec![meta(20, "f", "f", 10)];
        assert!(!pick_merge(&levels, &cfg(), &none).unwrap().drop_tombstones);
        // L1 over target (300 > 100): the file after the cursor, with its L2 overlaps.
        levels[0].clear();
        levels[1] = vec![
            meta(10, "a", "b", 100),
            meta(11, "e", "g", 100),
            meta(12, "y", "z", 100),
        ];
        let mut cursors = none.clone();
        cursors[1] = b"b".to_vec();
        assert_eq!(
            pick_merge(&levels, &cfg(), &cursors),
            Some(MergeTask {
                level: 1,
                upper: vec![11],
                lower: vec![20],
                drop_tombstones: true
            })
        );
        // Cursor past the last file wraps to the first.
        cursors[1] = b"zz".to_vec();
        assert_eq!(
            pick_merge(&levels, &cfg(), &cursors).unwrap().upper,
            vec![10]
        );
        // The level most over target wins: L2 at 5000/1000 beats L1 at 300/100.
        levels[2] = vec![meta(20, "f", "f", 5000)];
        assert_eq!(pick_merge(&levels, &cfg(), &none).unwrap().level, 2);
    }

    #[test]
    fn merge_iter_prefers_newest_source() {
        let s = |v: Vec<(&str, &str)>| {
            v.into_iter()
                .map(|(k, x)| Ok((k.as_bytes().to_vec(), x.as_bytes().to_vec())))
                .collect::<Vec<_>>()
                .into_iter()
        };
        let m: Vec<_> = MergeIter::new(vec![
            s(vec![("b", "new"), ("d", "new")]),
            s(vec![("a", "old"), ("b", "old"), ("c", "old")]),
        ])
        .map(|r| r.unwrap())
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
        assert_eq!(
            m,
            vec![
                ("a".into(), "old".into()),
                ("b".into(), "new".into()),
                ("c".into(), "old".into()),
                ("d".into(), "new".into())
            ]
        );
    }

    #[test]
    fn backlog_counts_files_over_target() {
        let mut levels = vec![Vec::new(); NUM_LEVELS];
        let c = Config {
            sst_target_bytes: 50,
            ..cfg()
        };
        assert_eq!(merge_backlog(&levels, &c), 0);
        levels[0] = (0..6).map(|i| meta(i, "a", "b", 1)).collect();
        levels[1] = vec![meta(9, "a", "z", 200)];
        // L0: 6 - 3 = 3; L1: 100 bytes over target / 50 = 2.
        assert_eq!(merge_backlog(&levels, &c), 5);
    }
}
