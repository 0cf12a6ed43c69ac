//! The in-memory head of the ledger: a sorted map of ledger key → ledger value, filled in SQN order
//! under the store's write lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::RwLock;

use super::value::LedgerValue;

#[derive(Default)]
pub(crate) struct Memtable {
    map: RwLock<BTreeMap<Vec<u8>, LedgerValue>>,
    bytes: AtomicUsize,
    /// Highest SQN applied; once frozen, every SQN up to this one is in this or an older table.
    last_sqn: AtomicU64,
}

impl Memtable {
    pub(crate) fn insert(&self, key: Vec<u8>, value: LedgerValue) {
        let add = key.len() + value.encoded_len() + 32;
        let sqn = value.sqn;
        self.map.write().insert(key, value);
        self.bytes.fetch_add(add, Ordering::Relaxed);
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    /// Record that every write up to `sqn` has been applied (writes without ledger changes still
    /// advance the fence).
    pub(crate) fn note_sqn(&self, sqn: u64) {
        self.last_sqn.fetch_max(sqn, Ordering::Release);
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<LedgerValue> {
        self.map.read().get(key).cloned()
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

    /// All entries, sorted, encoded for an SST.
    pub(crate) fn encoded_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.map
            .read()
            .iter()
            .map(|(k, v)| {
                let mut b = Vec::with_capacity(v.encoded_len());
                v.encode(&mut b);
                (k.clone(), b)
            })
            .collect()
    }
}
