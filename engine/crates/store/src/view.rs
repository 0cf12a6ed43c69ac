//! A consistent read view of the store: frozen references to the memtables, the ledger version and
//! the journal segments, plus an SQN fence. Point reads and ordered range scans see exactly the
//! writes with SQN ≤ fence, however the store changes afterwards.

use std::sync::Arc;

use crate::error::Result;
use crate::journal::SegmentList;
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::{Table, TableIter};
use crate::ledger::value::LedgerValue;
use crate::ledger::{MergeIter, Version};

#[derive(Clone)]
pub(crate) struct View {
    /// Memtables, newest first.
    pub mems: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    pub fence: u64,
    pub segments: SegmentList,
}

type Source = Box<dyn Iterator<Item = Result<(Vec<u8>, LedgerValue)>> + Send>;

/// Entries of a table, decoded.
fn table_source(t: &Arc<Table>, start: &[u8]) -> Result<Source> {
    let it: TableIter = t.iter_from(start)?;
    Ok(Box::new(it.map(|r| {
        r.and_then(|(k, v)| Ok((k, LedgerValue::decode(&v)?)))
    })))
}

/// Entries of a sorted, non-overlapping level, table after table.
struct LevelIter {
    tables: std::vec::IntoIter<Arc<Table>>,
    start: Vec<u8>,
    current: Option<Source>,
}

impl Iterator for LevelIter {
    type Item = Result<(Vec<u8>, LedgerValue)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(cur) = &mut self.current {
                if let Some(item) = cur.next() {
                    return Some(item);
                }
            }
            let t = self.tables.next()?;
            match table_source(&t, &self.start) {
                Ok(s) => self.current = Some(s),
                Err(e) => {
                    self.current = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Ordered scan of `[start, end)`: newest visible version of each key, tombstones included.
pub(crate) struct RangeIter {
    merged: MergeIter<LedgerValue, Source>,
    end: Option<Vec<u8>>,
    done: bool,
}

impl Iterator for RangeIter {
    type Item = Result<(Vec<u8>, LedgerValue)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.merged.next()? {
            Ok((k, v)) => {
                if self.end.as_ref().is_some_and(|e| k >= *e) {
                    self.done = true;
                    return None;
                }
                Some(Ok((k, v)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl View {
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<LedgerValue>> {
        for m in &self.mems {
            if let Some(v) = m.get(key, self.fence) {
                return Ok(Some(v));
            }
        }
        self.version.get(key)
    }

    pub(crate) fn range(&self, start: &[u8], end: Option<&[u8]>) -> Result<RangeIter> {
        let mut sources: Vec<Source> = Vec::new();
        for m in &self.mems {
            sources.push(Box::new(
                m.range(start, end, self.fence).into_iter().map(Ok),
            ));
        }
        let overlaps = |t: &Arc<Table>| {
            t.meta.largest.as_slice() >= start && end.is_none_or(|e| t.meta.smallest.as_slice() < e)
        };
        for t in self.version.levels[0].iter().rev().filter(|t| overlaps(t)) {
            sources.push(table_source(t, start)?);
        }
        for level in &self.version.levels[1..] {
            let tables: Vec<Arc<Table>> = level.iter().filter(|t| overlaps(t)).cloned().collect();
            if !tables.is_empty() {
                sources.push(Box::new(LevelIter {
                    tables: tables.into_iter(),
                    start: start.to_vec(),
                    current: None,
                }));
            }
        }
        Ok(RangeIter {
            merged: MergeIter::new(sources),
            end: end.map(|e| e.to_vec()),
            done: false,
        })
    }
}

/// The smallest byte string greater than every string starting with `prefix` (`None`: no bound).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xFF {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_carries() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
    }
}
