//! The in-memory head of the ledger: a sorted map of ledger key → the versions written since the
//! last flush, filled in SQN order under the store's write lock. Keeping every version (not just
//! the newest) lets a snapshot read the memtable as of its SQN fence while writes continue; a flush
//! writes only the newest version of each key.
//!
//! The map is split into shards by a hash of the key, each behind its own read-write lock. With
//! one lock every insert made the readers that arrived meanwhile wait; on a 2-core box with 16
//! clients those readers spun, yielded and were descheduled, and that was most of the GET p99
//! (docs/benchmarks.md, "GET tail: the memtable lock"). A reader now meets a writer only when
//! both touch the same shard at once. Ordered reads (ranges, the flush) merge the shards.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use super::value::LedgerValue;

/// Shards of the map: enough that a reader rarely meets the one insert running, few enough that
/// a range read's merge stays cheap.
const SHARDS: usize = 32;

/// Versions of a key in ascending SQN order, by key.
type Shard = BTreeMap<Vec<u8>, Vec<LedgerValue>>;

pub(crate) struct Memtable {
    shards: [RwLock<Shard>; SHARDS],
    bytes: AtomicUsize,
    /// Highest SQN applied; once frozen, every SQN up to this one is in this or an older table.
    last_sqn: AtomicU64,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable {
            shards: std::array::from_fn(|_| RwLock::new(BTreeMap::new())),
            bytes: AtomicUsize::new(0),
            last_sqn: AtomicU64::new(0),
        }
    }
}

fn visible(versions: &[LedgerValue], fence: u64) -> Option<&LedgerValue> {
    versions.iter().rev().find(|v| v.sqn <= fence)
}

impl Memtable {
    fn shard(&self, key: &[u8]) -> &RwLock<Shard> {
        &self.shards[crc32c::crc32c(key) as usize % SHARDS]
    }

    pub(crate) fn insert(&self, key: Vec<u8>, value: LedgerValue) {
        let add = key.len() + value.encoded_len() + 32;
        let sqn = value.sqn;
        self.shard(&key).write().entry(key).or_default().push(value);
        self.bytes.fetch_add(add, Ordering::Relaxed);
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    /// Record that every write up to `sqn` has been applied.
    pub(crate) fn note_sqn(&self, sqn: u64) {
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    /// The newest version of `key` with an SQN at or below `fence`.
    pub(crate) fn get(&self, key: &[u8], fence: u64) -> Option<LedgerValue> {
        self.shard(key)
            .read()
            .get(key)
            .and_then(|v| visible(v, fence))
            .cloned()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn last_sqn(&self) -> u64 {
        self.last_sqn.load(Ordering::Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.read().is_empty())
    }

    /// Sorted copy of the versions visible at `fence` for keys in `[start, end)`.
    pub(crate) fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        fence: u64,
    ) -> Vec<(Vec<u8>, LedgerValue)> {
        let hi = match end {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for shard in &self.shards {
            let map = shard.read();
            out.extend(
                map.range::<[u8], _>((Bound::Included(start), hi))
                    .filter_map(|(k, v)| visible(v, fence).map(|v| (k.clone(), v.clone()))),
            );
        }
        // Each key lives in one shard: sorting the shards' runs together orders the whole.
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The newest version of every key, sorted, encoded for an SST.
    pub(crate) fn encoded_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            out.extend(shard.read().iter().filter_map(|(k, versions)| {
                let v = versions.last()?;
                let mut b = Vec::with_capacity(v.encoded_len());
                v.encode(&mut b);
                Some((k.clone(), b))
            }));
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(sqn: u64) -> LedgerValue {
        LedgerValue {
            sqn,
            tombstone: false,
            value_size: 0,
            value_hash: 0,
            last_modified: 0,
            metadata: vec![],
        }
    }

    #[test]
    fn reads_at_a_fence_see_the_version_of_that_moment() {
        let m = Memtable::default();
        m.insert(b"a".to_vec(), v(1));
        m.insert(b"b".to_vec(), v(2));
        m.insert(b"a".to_vec(), v(3));
        assert_eq!(m.get(b"a", u64::MAX).unwrap().sqn, 3);
        assert_eq!(m.get(b"a", 2).unwrap().sqn, 1);
        assert!(m.get(b"b", 1).is_none());
        let r: Vec<u64> = m
            .range(b"a", None, 2)
            .into_iter()
            .map(|(_, v)| v.sqn)
            .collect();
        assert_eq!(r, vec![1, 2]);
        let r: Vec<u64> = m
            .range(b"a", Some(b"b"), 9)
            .into_iter()
            .map(|(_, v)| v.sqn)
            .collect();
        assert_eq!(r, vec![3]);
        let flushed: Vec<u64> = m
            .encoded_entries()
            .iter()
            .map(|(_, b)| LedgerValue::decode(b).unwrap().sqn)
            .collect();
        assert_eq!(flushed, vec![3, 2]);
        assert_eq!(m.last_sqn(), 3);
    }

    /// Ranges and the flush read all shards: they must come back in key order, each key once,
    /// at the version its fence sees — checked against one ordered map of every version.
    #[test]
    fn ordered_reads_merge_the_shards_as_one_sorted_map() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let m = Memtable::default();
        let mut model: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
        let mut rng = SmallRng::seed_from_u64(7);
        for sqn in 1..=5_000u64 {
            let key = format!("k{:04}", rng.gen_range(0..700)).into_bytes();
            m.insert(key.clone(), v(sqn));
            model.entry(key).or_default().push(sqn);
        }
        assert!(
            m.shards.iter().filter(|s| !s.read().is_empty()).count() > 1,
            "the keys must spread over several shards for this test to mean anything"
        );
        for fence in [0, 1, 777, 2_500, 5_000, u64::MAX] {
            for (start, end) in [
                (&b"k0"[..], None),
                (b"k0100", Some(&b"k0350"[..])),
                (b"k0699", Some(b"k07")),
            ] {
                let want: Vec<(Vec<u8>, u64)> = model
                    .range::<[u8], _>((
                        Bound::Included(start),
                        end.map_or(Bound::Unbounded, Bound::Excluded),
                    ))
                    .filter_map(|(k, sqns)| {
                        sqns.iter()
                            .rev()
                            .find(|s| **s <= fence)
                            .map(|s| (k.clone(), *s))
                    })
                    .collect();
                let got: Vec<(Vec<u8>, u64)> = m
                    .range(start, end, fence)
                    .into_iter()
                    .map(|(k, v)| (k, v.sqn))
                    .collect();
                assert_eq!(
                    got, want,
                    "range from {start:?} to {end:?} at fence {fence}"
                );
            }
        }
        let flushed: Vec<(Vec<u8>, u64)> = m
            .encoded_entries()
            .into_iter()
            .map(|(k, b)| (k, LedgerValue::decode(&b).unwrap().sqn))
            .collect();
        let want: Vec<(Vec<u8>, u64)> = model
            .iter()
            .map(|(k, sqns)| (k.clone(), *sqns.last().unwrap()))
            .collect();
        assert_eq!(flushed, want);
    }
}
