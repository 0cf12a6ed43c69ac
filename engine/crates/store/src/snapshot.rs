//! Snapshots, secondary-index queries and folds.
//!
//! A snapshot pins a [`View`]: the memtables, ledger version and journal segments of one moment,
//! with an SQN fence. Files it references are not deleted while it lives. It expires after
//! `Config::snapshot_query_lifetime` / `snapshot_fold_lifetime`; the store's worker then drops its
//! references, and any further read fails with `Error::SnapshotExpired`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use crate::aae;
use crate::error::{Error, Result};
use crate::journal::{self, Journal};
use crate::keys::{self, Term, TAG_INDEX, TAG_OBJECT};
use crate::ledger::value::LedgerValue;
use crate::store::{Head, Object, Sqn};
use crate::view::{prefix_end, RangeIter, View};

/// What a snapshot is for; sets its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotKind {
    Query,
    Fold,
}

/// Releases what one fold iterator pins (its view and table iterators) when the snapshot expires.
type Release = Box<dyn Fn() + Send + Sync>;

/// A fold iterator's pinned state, emptied by the snapshot's reaper at expiry.
type Slot<T> = Arc<Mutex<Option<T>>>;

pub(crate) struct SnapInner {
    view: RwLock<Option<View>>,
    /// Fold iterators made from this snapshot: expiry empties their slots, so an iterator that is
    /// kept but no longer read does not keep tables and obsolete segments on disk.
    folds: Mutex<Vec<Release>>,
    expires_at: Instant,
    lifetime: Duration,
}

impl SnapInner {
    pub(crate) fn new(view: View, lifetime: Duration) -> Arc<SnapInner> {
        Arc::new(SnapInner {
            view: RwLock::new(Some(view)),
            folds: Mutex::new(Vec::new()),
            expires_at: Instant::now() + lifetime,
            lifetime,
        })
    }

    /// Register a fold iterator's state so expiry releases it.
    fn slot<T: Send + 'static>(&self, state: T) -> Slot<T> {
        let slot = Arc::new(Mutex::new(Some(state)));
        let weak = Arc::downgrade(&slot);
        let mut folds = self.folds.lock();
        folds.push(Box::new(move || {
            if let Some(s) = weak.upgrade() {
                s.lock().take();
            }
        }));
        slot
    }

    fn expired_error(&self) -> Error {
        Error::SnapshotExpired {
            lifetime_secs: self.lifetime.as_secs(),
        }
    }

    /// Drop the pinned view once expired; true if it was (or already is) released.
    pub(crate) fn reap(&self) -> bool {
        if Instant::now() >= self.expires_at {
            self.view.write().take();
            for release in std::mem::take(&mut *self.folds.lock()) {
                release();
            }
            true
        } else {
            false
        }
    }

    fn view(&self) -> Result<View> {
        if self.reap() {
            return Err(self.expired_error());
        }
        self.view.read().clone().ok_or_else(|| self.expired_error())
    }

    fn check(&self) -> Result<()> {
        if Instant::now() >= self.expires_at {
            Err(self.expired_error())
        } else {
            Ok(())
        }
    }
}

/// A point-in-time view of a store. Reads through it see exactly the writes with SQN ≤ `sqn()`.
pub struct Snapshot {
    pub(crate) inner: Arc<SnapInner>,
    pub(crate) journal: Arc<Journal>,
    pub(crate) fence: Sqn,
}

/// A secondary-index range query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexQuery {
    pub bucket: Vec<u8>,
    pub field: Vec<u8>,
    /// First term (inclusive).
    pub start: Term,
    /// Last term (inclusive); same kind (integer or binary) as `start`.
    pub end: Term,
    /// Return (term, key) pairs instead of keys alone.
    pub return_terms: bool,
    /// Keep only binary terms matching this regular expression.
    pub term_regex: Option<String>,
    pub max_results: Option<usize>,
    /// Token from the previous page's `IndexPage::continuation`.
    pub continuation: Option<Vec<u8>>,
}

/// One page of index query results, in (term, key) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexPage {
    /// (term if `return_terms`, key).
    pub results: Vec<(Option<Term>, Vec<u8>)>,
    /// Present when more results follow: pass it back to get the next page.
    pub continuation: Option<Vec<u8>>,
}

/// Options of a head fold.
#[derive(Debug, Clone, Default)]
pub struct HeadFoldOptions {
    /// Only this bucket (all buckets when `None`).
    pub bucket: Option<Vec<u8>>,
    /// Skip objects whose journal record is missing (and report them in `FoldedHead::in_journal`).
    pub journal_check: bool,
    /// Only keys in these AAE segments (see `aae_segment`).
    pub segments: Option<Vec<u32>>,
    /// AAE segment count the `segments` filter refers to.
    pub segment_count: u32,
    /// Only objects last modified in `[from, to]` (µs since the Unix epoch).
    pub modified_range: Option<(u64, u64)>,
    pub max_count: Option<usize>,
}

/// A head returned by `fold_heads`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedHead {
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    pub head: Head,
}

/// Order of an object fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldOrder {
    /// Bucket, key order (random journal reads).
    Key,
    /// Journal order: segments read sequentially (friendly to HDDs).
    Journal,
}

/// An object returned by `fold_objects`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldedObject {
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    pub object: Object,
}

const CONTINUATION_VERSION: u8 = 1;

/// A continuation token that resumes an index query right after the entry (`term`, `key`): lets a
/// caller that merges several stores' results (a coverage query) restart each store at one global
/// position.
pub fn index_continuation(bucket: &[u8], field: &[u8], term: &Term, key: &[u8]) -> Vec<u8> {
    let mut token = vec![CONTINUATION_VERSION];
    token.extend_from_slice(&keys::index_key(bucket, field, term, key));
    token
}

fn index_prefix(bucket: &[u8], field: &[u8]) -> Vec<u8> {
    let mut p = vec![TAG_INDEX];
    p.extend_from_slice(bucket);
    p.push(0);
    p.extend_from_slice(field);
    p.push(0);
    p
}

/// Split the part of an index ledger key after its (bucket, field) prefix into (term, key).
fn decode_term_and_key(rest: &[u8]) -> Result<(Term, &[u8])> {
    let bad = || Error::Corruption("malformed index entry in the ledger".into());
    match rest.first() {
        Some(1) if rest.len() >= 9 => {
            let raw = u64::from_be_bytes(rest[1..9].try_into().unwrap());
            Ok((Term::Int((raw ^ (1 << 63)) as i64), &rest[9..]))
        }
        Some(2) => {
            let mut term = Vec::new();
            let mut i = 1;
            loop {
                match (rest.get(i), rest.get(i + 1)) {
                    (Some(0), Some(0xFF)) => {
                        term.push(0);
                        i += 2;
                    }
                    (Some(0), Some(1)) => return Ok((Term::Bin(term), &rest[i + 2..])),
                    (Some(&b), _) if b != 0 => {
                        term.push(b);
                        i += 1;
                    }
                    _ => return Err(bad()),
                }
            }
        }
        _ => Err(bad()),
    }
}

fn head_of(v: &LedgerValue) -> Head {
    Head {
        sqn: v.sqn,
        value_size: v.value_size,
        value_hash: v.value_hash,
        metadata: v.metadata.clone(),
    }
}

impl Snapshot {
    /// The SQN fence: every write up to it is visible, none after it.
    pub fn sqn(&self) -> Sqn {
        self.fence
    }

    pub fn head(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Head>> {
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        let view = self.inner.view()?;
        Ok(view
            .get(&keys::object_key(bucket, key))?
            .filter(|v| !v.tombstone)
            .map(|v| head_of(&v)))
    }

    pub fn get(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Object>> {
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        let view = self.inner.view()?;
        let lk = keys::object_key(bucket, key);
        let Some(v) = view.get(&lk)?.filter(|v| !v.tombstone) else {
            return Ok(None);
        };
        read_object(&self.journal, &view, &lk, &v).map(Some)
    }

    /// Run a secondary-index range query on this snapshot.
    pub fn index_query(&self, q: &IndexQuery) -> Result<IndexPage> {
        keys::validate_bucket(&q.bucket)?;
        keys::validate_index_change(&keys::IndexChange::add(q.field.clone(), q.start.clone()))?;
        let regex = match (&q.term_regex, &q.start) {
            (None, _) => None,
            (Some(_), Term::Int(_)) => {
                return Err(Error::InvalidQuery(
                    "term_regex applies to binary terms only".into(),
                ))
            }
            (Some(r), Term::Bin(_)) => Some(
                regex::bytes::Regex::new(r)
                    .map_err(|e| Error::InvalidQuery(format!("invalid term_regex `{r}`: {e}")))?,
            ),
        };
        if std::mem::discriminant(&q.start) != std::mem::discriminant(&q.end) {
            return Err(Error::InvalidQuery(
                "start and end terms must both be integers or both binary".into(),
            ));
        }
        if q.start > q.end {
            return Err(Error::InvalidQuery("start term is after end term".into()));
        }
        if q.max_results == Some(0) {
            return Err(Error::InvalidQuery("max_results must be at least 1".into()));
        }
        let prefix = index_prefix(&q.bucket, &q.field);
        let mut lo = prefix.clone();
        keys::encode_term(&mut lo, &q.start);
        let mut hi = prefix.clone();
        keys::encode_term(&mut hi, &q.end);
        let hi = prefix_end(&hi);
        if let Some(c) = &q.continuation {
            let after = match c.split_first() {
                Some((&CONTINUATION_VERSION, k)) if k.starts_with(&prefix) => k,
                _ => {
                    return Err(Error::InvalidQuery(
                        "continuation token does not belong to this query".into(),
                    ))
                }
            };
            let mut next = after.to_vec();
            next.push(0);
            if next > lo {
                lo = next;
            }
        }
        let view = self.inner.view()?;
        let mut results = Vec::new();
        let mut last_key: Option<Vec<u8>> = None;
        let mut continuation = None;
        for item in view.range(&lo, hi.as_deref())? {
            let (lk, v) = item?;
            if v.tombstone {
                continue;
            }
            let (term, key) = decode_term_and_key(&lk[prefix.len()..])?;
            if let (Some(re), Term::Bin(b)) = (&regex, &term) {
                if !re.is_match(b) {
                    continue;
                }
            }
            if q.max_results.is_some_and(|m| results.len() >= m) {
                let mut token = vec![CONTINUATION_VERSION];
                token.extend_from_slice(last_key.as_deref().unwrap_or_default());
                continuation = Some(token);
                break;
            }
            results.push((q.return_terms.then_some(term), key.to_vec()));
            last_key = Some(lk);
        }
        Ok(IndexPage {
            results,
            continuation,
        })
    }

    /// Keys of `bucket` in `[start, end)` (whole bucket when `None`), in order.
    pub fn fold_keys(
        &self,
        bucket: &[u8],
        start: Option<&[u8]>,
        end: Option<&[u8]>,
    ) -> Result<impl Iterator<Item = Result<Vec<u8>>> + Send + use<>> {
        keys::validate_bucket(bucket)?;
        let lo = keys::object_key(bucket, start.unwrap_or_default());
        let hi = match end {
            Some(e) => Some(keys::object_key(bucket, e)),
            None => prefix_end(&keys::object_key(bucket, b"")),
        };
        let view = self.inner.view()?;
        let range = view.range(&lo, hi.as_deref())?;
        let inner = self.inner.clone();
        Ok(range.filter_map(move |item| {
            if let Err(e) = inner.check() {
                return Some(Err(e));
            }
            match item {
                Err(e) => Some(Err(e)),
                Ok((_, v)) if v.tombstone => None,
                Ok((lk, _)) => keys::split_object_key(&lk).map(|(_, k)| Ok(k.to_vec())),
            }
        }))
    }

    /// Heads (metadata without values) of the objects matching `opts`, in key order.
    pub fn fold_heads(&self, opts: &HeadFoldOptions) -> Result<HeadFold> {
        let (lo, hi) = object_range(opts.bucket.as_deref())?;
        if opts.segments.is_some() && opts.segment_count == 0 {
            return Err(Error::InvalidQuery(
                "a segment filter needs segment_count".into(),
            ));
        }
        let view = self.inner.view()?;
        let range = view.range(&lo, hi.as_deref())?;
        Ok(HeadFold {
            state: self.inner.slot((range, view)),
            inner: self.inner.clone(),
            opts: opts.clone(),
            seen: 0,
        })
    }

    /// Objects of every bucket in key order, starting right after (bucket, key) — from the first
    /// when `None`: a fold that resumes where an earlier one stopped.
    pub fn fold_objects_after(&self, after: Option<(&[u8], &[u8])>) -> Result<ObjectFold> {
        let (mut lo, hi) = object_range(None)?;
        if let Some((b, k)) = after {
            keys::validate_bucket(b)?;
            lo = keys::object_key(b, k);
            lo.push(0); // the smallest ledger key after it
        }
        let view = self.inner.view()?;
        Ok(ObjectFold {
            state: self
                .inner
                .slot((ObjectSource::Key(view.range(&lo, hi.as_deref())?), view)),
            journal: self.journal.clone(),
            inner: self.inner.clone(),
            bucket: None,
        })
    }

    /// Objects of `bucket` (all buckets when `None`), in key or journal order.
    pub fn fold_objects(&self, bucket: Option<&[u8]>, order: FoldOrder) -> Result<ObjectFold> {
        let (lo, hi) = object_range(bucket)?;
        let view = self.inner.view()?;
        let source = match order {
            FoldOrder::Key => ObjectSource::Key(view.range(&lo, hi.as_deref())?),
            FoldOrder::Journal => ObjectSource::Journal {
                segment: 0,
                entry: 0,
                entries: Vec::new(),
            },
        };
        Ok(ObjectFold {
            state: self.inner.slot((source, view)),
            journal: self.journal.clone(),
            inner: self.inner.clone(),
            bucket: bucket.map(|b| b.to_vec()),
        })
    }
}

fn object_range(bucket: Option<&[u8]>) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    Ok(match bucket {
        Some(b) => {
            keys::validate_bucket(b)?;
            let lo = keys::object_key(b, b"");
            let hi = prefix_end(&lo);
            (lo, hi)
        }
        None => (vec![TAG_OBJECT], Some(vec![TAG_OBJECT + 1])),
    })
}

fn read_object(journal: &Journal, view: &View, lk: &[u8], v: &LedgerValue) -> Result<Object> {
    let rec = journal.read_in(&view.segments, v.sqn, lk)?;
    crate::store::check_value(&rec.value, v)?;
    Ok(Object {
        sqn: v.sqn,
        value: rec.value,
        metadata: v.metadata.clone(),
    })
}

/// Iterator returned by [`Snapshot::fold_heads`].
pub struct HeadFold {
    state: Slot<(RangeIter, View)>,
    inner: Arc<SnapInner>,
    opts: HeadFoldOptions,
    seen: usize,
}

impl Iterator for HeadFold {
    type Item = Result<FoldedHead>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.opts.max_count.is_some_and(|m| self.seen >= m) {
                return None;
            }
            let mut slot = self.state.lock();
            if let Err(e) = self.inner.check() {
                slot.take();
                return Some(Err(e));
            }
            let Some((range, view)) = slot.as_mut() else {
                return Some(Err(self.inner.expired_error()));
            };
            let (lk, v) = match range.next()? {
                Ok(x) => x,
                Err(e) => return Some(Err(e)),
            };
            if v.tombstone {
                continue;
            }
            let Some((bucket, key)) = keys::split_object_key(&lk) else {
                continue;
            };
            if let Some(segs) = &self.opts.segments {
                if !segs.contains(&aae::segment_of(bucket, key, self.opts.segment_count)) {
                    continue;
                }
            }
            if let Some((from, to)) = self.opts.modified_range {
                if v.last_modified < from || v.last_modified > to {
                    continue;
                }
            }
            let in_journal = if self.opts.journal_check {
                match journal::Journal::contains_in(&view.segments, v.sqn) {
                    Ok(found) => found,
                    Err(e) => return Some(Err(e)),
                }
            } else {
                true
            };
            if !in_journal {
                log::warn!(
                    "fold: sqn {} of {:?}/{:?} is missing from the journal",
                    v.sqn,
                    bucket,
                    key
                );
                continue;
            }
            self.seen += 1;
            return Some(Ok(FoldedHead {
                bucket: bucket.to_vec(),
                key: key.to_vec(),
                head: head_of(&v),
            }));
        }
    }
}

enum ObjectSource {
    Key(RangeIter),
    Journal {
        segment: usize,
        entry: usize,
        entries: Vec<crate::journal::segment::IdxEntry>,
    },
}

/// Iterator returned by [`Snapshot::fold_objects`].
pub struct ObjectFold {
    state: Slot<(ObjectSource, View)>,
    journal: Arc<Journal>,
    inner: Arc<SnapInner>,
    bucket: Option<Vec<u8>>,
}

impl Iterator for ObjectFold {
    type Item = Result<FoldedObject>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let mut slot = self.state.lock();
            if let Err(e) = self.inner.check() {
                slot.take();
                return Some(Err(e));
            }
            let Some((source, view)) = slot.as_mut() else {
                return Some(Err(self.inner.expired_error()));
            };
            match source {
                ObjectSource::Key(range) => {
                    let (lk, v) = match range.next()? {
                        Ok(x) => x,
                        Err(e) => return Some(Err(e)),
                    };
                    if v.tombstone {
                        continue;
                    }
                    let (bucket, key) = keys::split_object_key(&lk)?;
                    return Some(read_object(&self.journal, view, &lk, &v).map(|object| {
                        FoldedObject {
                            bucket: bucket.to_vec(),
                            key: key.to_vec(),
                            object,
                        }
                    }));
                }
                ObjectSource::Journal {
                    segment,
                    entry,
                    entries,
                } => {
                    if *entry >= entries.len() {
                        let seg = view.segments.get(*segment)?;
                        let all = match seg.entries() {
                            Ok(all) => all,
                            Err(e) => return Some(Err(e)),
                        };
                        *entries = all.into_iter().filter(|e| e.sqn <= view.fence).collect();
                        *entry = 0;
                        *segment += 1;
                        continue;
                    }
                    let e = entries[*entry];
                    *entry += 1;
                    let seg = &view.segments[*segment - 1];
                    let raw = match seg.read_raw(e) {
                        Ok(r) => r,
                        Err(err) => return Some(Err(err)),
                    };
                    let rec = match crate::journal::record::decode(&raw) {
                        Ok(r) => r,
                        Err(err) => return Some(Err(err)),
                    };
                    let Some((bucket, key)) = keys::split_object_key(rec.ledger_key) else {
                        continue;
                    };
                    if self.bucket.as_deref().is_some_and(|b| b != bucket) {
                        continue;
                    }
                    // Only the version the snapshot's ledger points to is live.
                    match view.get(rec.ledger_key) {
                        Ok(Some(v)) if v.sqn == rec.sqn && !v.tombstone => {
                            let value = match rec.original_value(v.value_size as usize) {
                                Ok(value) => value.into_owned(),
                                Err(e) => return Some(Err(e)),
                            };
                            if let Err(e) = crate::store::check_value(&value, &v) {
                                return Some(Err(e));
                            }
                            return Some(Ok(FoldedObject {
                                bucket: bucket.to_vec(),
                                key: key.to_vec(),
                                object: Object {
                                    sqn: v.sqn,
                                    value,
                                    metadata: v.metadata,
                                },
                            }));
                        }
                        Ok(_) => continue,
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_decode_back_to_term_and_key() {
        for (term, key) in [
            (Term::Int(-7), &b"k1"[..]),
            (Term::Int(i64::MAX), b"\0\x01"),
            (Term::Bin(b"a\0b\x01".to_vec()), b"key\0"),
            (Term::Bin(Vec::new()), b"x"),
        ] {
            let lk = keys::index_key(b"bk", b"f", &term, key);
            let prefix = index_prefix(b"bk", b"f");
            let (t, k) = decode_term_and_key(&lk[prefix.len()..]).unwrap();
            assert_eq!((t, k), (term, key));
        }
    }
}
