//! The in-memory head of the ledger: a sorted map of ledger key → the versions written since the
//! last flush, filled in SQN order under the store's write lock. Keeping every version (not just
//! the newest) lets a snapshot read the memtable as of its SQN fence while writes continue; a flush
//! writes only the newest version of each key.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use super::value::LedgerValue;

#[derive(Default)]
pub(crate) struct Memtable {
    /// Versions of a key in ascending SQN order.
    map: RwLock<BTreeMap<Vec<u8>, Vec<LedgerValue>>>,
    bytes: AtomicUsize,
    /// Highest SQN applied; once frozen, every SQN up to this one is in this or an older table.
    last_sqn: AtomicU64,
}

fn visible(versions: &[LedgerValue], fence: u64) -> Option<&LedgerValue> {
    versions.iter().rev().find(|v| v.sqn <= fence)
}

impl Memtable {
    pub(crate) fn insert(&self, key: Vec<u8>, value: LedgerValue) {
        let add = key.len() + value.encoded_len() + 32;
        let sqn = value.sqn;
        self.map.write().entry(key).or_default().push(value);
        self.bytes.fetch_add(add, Ordering::Relaxed);
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    /// Record that every write up to `sqn` has been applied.
    pub(crate) fn note_sqn(&self, sqn: u64) {
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    /// The newest version of `key` with an SQN at or below `fence`.
    pub(crate) fn get(&self, key: &[u8], fence: u64) -> Option<LedgerValue> {
        self.map
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
        self.map.read().is_empty()
    }

    /// Sorted copy of the versions visible at `fence` for keys in `[start, end)`.
    pub(crate) fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        fence: u64,
    ) -> Vec<(Vec<u8>, LedgerValue)> {
        let map = self.map.read();
        let hi = match end {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        map.range::<[u8], _>((Bound::Included(start), hi))
            .filter_map(|(k, v)| visible(v, fence).map(|v| (k.clone(), v.clone())))
            .collect()
    }

    /// The newest version of every key, sorted, encoded for an SST.
    pub(crate) fn encoded_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.map
            .read()
            .iter()
            .filter_map(|(k, versions)| {
                let v = versions.last()?;
                let mut b = Vec::with_capacity(v.encoded_len());
                v.encode(&mut b);
                Some((k.clone(), b))
            })
            .collect()
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
}
