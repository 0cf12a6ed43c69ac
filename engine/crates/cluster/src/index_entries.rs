//! The secondary-index entries an object carries, so that every path that moves or merges an
//! object (replication, read repair, hinted handoff, ring transitions, rebuilds, AAE repair)
//! moves its index entries with it.
//!
//! Each live sibling's content holds the entries its write gave the key: the entries of the
//! replica it was coordinated on (the union over that replica's live siblings) with the client's
//! changes applied. A replica's index entries for a key are the union over its live siblings, so
//! they follow from the object alone, as in Riak: a sibling superseded by a merge takes its
//! entries with it, a tombstone has none (a delete that supersedes every sibling removes the
//! key's entries), concurrent siblings keep the entries of both.
//!
//! A replica needs the entries it holds to remove the ones a merge drops, without reading its
//! journal: the vnode's ledger metadata for the key (what a HEAD reads) stores the union next to
//! the sibling set:
//!
//! ```text
//! ledger metadata = sibling set                                  (no entries: the plain set)
//!                 | 'I' 0x01  varint set_len  sibling set  entries
//! entries         = varint count  entry × count                  (strictly ascending)
//! entry           = varint field_len  field  term
//! term            = 0x00 i64 big-endian  |  0x01 varint len  bytes
//! ```
//!
//! An object without entries is stored exactly as before they existed, so its AAE leaf hash
//! (over the ledger metadata) does not change; with entries, two replicas that hold the same
//! siblings but different entries hash differently and an exchange repairs them.

use std::collections::BTreeSet;

use crate::causality::{decode_siblings, encode_siblings, SiblingSet};
use crate::wire::{self, put_varint};

const TAG: u8 = b'I';
const VERSION: u8 = 1;
const TERM_INT: u8 = 0;
const TERM_BIN: u8 = 1;

/// A secondary-index term (the store's `Term`, as the cluster layer carries it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IndexTerm {
    Int(i64),
    Bin(Vec<u8>),
}

/// One secondary-index entry of an object: `field` = `term`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyIndexEntry {
    pub field: Vec<u8>,
    pub term: IndexTerm,
}

impl KeyIndexEntry {
    pub fn new(field: impl Into<Vec<u8>>, term: IndexTerm) -> Self {
        KeyIndexEntry {
            field: field.into(),
            term,
        }
    }

    /// Bytes this entry takes in the encoding (its share of the ledger metadata).
    pub fn encoded_len(&self) -> usize {
        let term = match &self.term {
            IndexTerm::Int(_) => 9,
            IndexTerm::Bin(b) => 1 + varint_len(b.len() as u64) + b.len(),
        };
        varint_len(self.field.len() as u64) + self.field.len() + term
    }
}

/// A client's change to a key's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexEdit {
    Add(KeyIndexEntry),
    Remove(KeyIndexEntry),
}

/// The entries a new write gives its sibling: `base` (the coordinating replica's entries for the
/// key) with `edits` applied in order (a later edit of the same entry wins). Sorted, no duplicates.
pub fn apply_edits(base: &[KeyIndexEntry], edits: &[IndexEdit]) -> Vec<KeyIndexEntry> {
    let mut set: BTreeSet<KeyIndexEntry> = base.iter().cloned().collect();
    for e in edits {
        match e {
            IndexEdit::Add(x) => {
                set.insert(x.clone());
            }
            IndexEdit::Remove(x) => {
                set.remove(x);
            }
        }
    }
    set.into_iter().collect()
}

/// The union of several sorted entry lists (sorted, no duplicates).
pub fn union_of<'a>(lists: impl IntoIterator<Item = &'a [KeyIndexEntry]>) -> Vec<KeyIndexEntry> {
    let set: BTreeSet<&KeyIndexEntry> = lists.into_iter().flatten().collect();
    set.into_iter().cloned().collect()
}

/// What a replica must change in its index when its entries for a key go from `old` to `new`
/// (both sorted): the entries to add and the entries to remove.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexDiff {
    pub add: Vec<KeyIndexEntry>,
    pub remove: Vec<KeyIndexEntry>,
}

impl IndexDiff {
    pub fn between(old: &[KeyIndexEntry], new: &[KeyIndexEntry]) -> IndexDiff {
        let (o, n): (BTreeSet<_>, BTreeSet<_>) = (old.iter().collect(), new.iter().collect());
        IndexDiff {
            add: n.difference(&o).map(|e| (*e).clone()).collect(),
            remove: o.difference(&n).map(|e| (*e).clone()).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

/// Why bytes are not a valid entry list or ledger metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntriesError {
    #[error("index entries: {0}")]
    Format(#[from] wire::FormatError),
    #[error("index entries not strictly ascending at byte {at}")]
    NotAscending { at: usize },
    #[error("sibling set: {0}")]
    Siblings(#[from] crate::causality::DecodeError),
}

/// Appends `entries` (sorted, no duplicates) in the format above.
pub fn put_entries(out: &mut Vec<u8>, entries: &[KeyIndexEntry]) {
    debug_assert!(
        entries.windows(2).all(|w| w[0] < w[1]),
        "entries not canonical"
    );
    put_varint(out, entries.len() as u64);
    for e in entries {
        wire::put_bytes(out, &e.field);
        match &e.term {
            IndexTerm::Int(i) => {
                out.push(TERM_INT);
                out.extend_from_slice(&i.to_be_bytes());
            }
            IndexTerm::Bin(b) => {
                out.push(TERM_BIN);
                wire::put_bytes(out, b);
            }
        }
    }
}

/// Reads what [`put_entries`] wrote from `r`, refusing a list that is not strictly ascending.
pub(crate) fn read_entries(r: &mut wire::Reader<'_>) -> Result<Vec<KeyIndexEntry>, EntriesError> {
    // The smallest entry: an empty field, a term kind and an empty binary term (3 bytes).
    let n = r.varint("entry count")?;
    if n > (r.remaining() / 3) as u64 {
        return Err(wire::FormatError::TooLong {
            what: "entry count",
            len: n,
            max: r.remaining() / 3,
        }
        .into());
    }
    let mut out: Vec<KeyIndexEntry> = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let at = r.pos();
        let field = r.bytes("index field", usize::MAX)?;
        let term = match r.u8("term kind")? {
            TERM_INT => IndexTerm::Int(i64::from_be_bytes(r.array::<8>("integer term")?)),
            TERM_BIN => IndexTerm::Bin(r.bytes("binary term", usize::MAX)?),
            _ => {
                return Err(wire::FormatError::BadValue {
                    at: r.pos() - 1,
                    what: "term kind",
                }
                .into())
            }
        };
        let e = KeyIndexEntry { field, term };
        if out.last().is_some_and(|prev| *prev >= e) {
            return Err(EntriesError::NotAscending { at });
        }
        out.push(e);
    }
    Ok(out)
}

/// The ledger metadata of a stored object: its sibling set and the union of its live siblings'
/// index entries (see the module docs).
pub fn encode_ledger_meta(siblings: &SiblingSet, entries: &[KeyIndexEntry]) -> Vec<u8> {
    let set = encode_siblings(siblings);
    if entries.is_empty() {
        return set;
    }
    let mut out = vec![TAG, VERSION];
    put_varint(&mut out, set.len() as u64);
    out.extend_from_slice(&set);
    put_entries(&mut out, entries);
    out
}

/// The sibling-set bytes inside ledger metadata (what replicas send each other), without
/// decoding them.
pub fn siblings_bytes(meta: &[u8]) -> Result<&[u8], EntriesError> {
    if meta.first() != Some(&TAG) {
        return Ok(meta);
    }
    let mut r = wire::Reader::new(meta);
    r.u8("tag byte")?;
    let v = r.u8("version byte")?;
    if v != VERSION {
        return Err(wire::FormatError::UnsupportedVersion(v).into());
    }
    let len = r.varint("sibling set length")?;
    let at = r.pos();
    let end = at
        .checked_add(len as usize)
        .filter(|e| *e <= meta.len())
        .ok_or(wire::FormatError::Truncated {
            at,
            what: "sibling set",
        })?;
    Ok(&meta[at..end])
}

/// Reads [`encode_ledger_meta`] output (and the plain sibling set stored before entries existed).
pub fn decode_ledger_meta(meta: &[u8]) -> Result<(SiblingSet, Vec<KeyIndexEntry>), EntriesError> {
    let set_bytes = siblings_bytes(meta)?;
    let set = decode_siblings(set_bytes)?;
    if set_bytes.len() == meta.len() {
        return Ok((set, Vec::new()));
    }
    let start = set_bytes.as_ptr() as usize - meta.as_ptr() as usize + set_bytes.len();
    let mut r = wire::Reader::new(meta);
    r.skip(start);
    let entries = read_entries(&mut r)?;
    r.end()?;
    if entries.is_empty() {
        // The form with entries is only written when there are some: one encoding per object.
        return Err(wire::FormatError::BadValue {
            at: start,
            what: "empty entry list in the form with entries",
        }
        .into());
    }
    Ok((set, entries))
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causality::{update, Actor, Clock, SiblingMeta};

    fn bin(f: &str, t: &str) -> KeyIndexEntry {
        KeyIndexEntry::new(f, IndexTerm::Bin(t.as_bytes().to_vec()))
    }
    fn int(f: &str, t: i64) -> KeyIndexEntry {
        KeyIndexEntry::new(f, IndexTerm::Int(t))
    }

    fn one_sibling() -> SiblingSet {
        let clock = update(&Clock::new(), &SiblingSet::new(), Actor::new(7)).unwrap();
        SiblingSet::single(clock, SiblingMeta::for_value(b"v", 5))
    }

    #[test]
    fn edits_apply_in_order_on_the_base() {
        let base = vec![bin("name_bin", "bob"), int("age_int", 41)];
        let cases: Vec<(Vec<IndexEdit>, Vec<KeyIndexEntry>)> = vec![
            (vec![], vec![int("age_int", 41), bin("name_bin", "bob")]),
            (
                vec![
                    IndexEdit::Remove(int("age_int", 41)),
                    IndexEdit::Add(int("age_int", 42)),
                ],
                vec![int("age_int", 42), bin("name_bin", "bob")],
            ),
            // Removing what is not there changes nothing; a later edit of the same entry wins.
            (
                vec![
                    IndexEdit::Remove(bin("x_bin", "y")),
                    IndexEdit::Add(bin("x_bin", "y")),
                    IndexEdit::Remove(bin("name_bin", "bob")),
                ],
                vec![int("age_int", 41), bin("x_bin", "y")],
            ),
            (
                vec![IndexEdit::Add(bin("name_bin", "bob"))],
                vec![int("age_int", 41), bin("name_bin", "bob")],
            ),
        ];
        for (edits, want) in cases {
            assert_eq!(apply_edits(&base, &edits), want, "{edits:?}");
        }
    }

    #[test]
    fn a_diff_adds_what_is_new_and_removes_what_is_gone() {
        let old = vec![int("a_int", 1), bin("b_bin", "x")];
        let new = vec![bin("b_bin", "x"), bin("b_bin", "y")];
        let d = IndexDiff::between(&old, &new);
        assert_eq!(d.add, vec![bin("b_bin", "y")]);
        assert_eq!(d.remove, vec![int("a_int", 1)]);
        assert!(IndexDiff::between(&new, &new).is_empty());
        assert_eq!(IndexDiff::between(&[], &new).add, new);
        assert_eq!(IndexDiff::between(&new, &[]).remove, new);
    }

    #[test]
    fn union_is_sorted_without_duplicates() {
        let a = vec![int("a_int", 1), bin("b_bin", "x")];
        let b = vec![int("a_int", 0), int("a_int", 1)];
        assert_eq!(
            union_of([a.as_slice(), b.as_slice()]),
            vec![int("a_int", 0), int("a_int", 1), bin("b_bin", "x")]
        );
    }

    #[test]
    fn ledger_meta_without_entries_is_the_plain_sibling_set() {
        let set = one_sibling();
        let meta = encode_ledger_meta(&set, &[]);
        assert_eq!(meta, encode_siblings(&set));
        assert_eq!(decode_ledger_meta(&meta).unwrap(), (set, vec![]));
    }

    #[test]
    fn ledger_meta_round_trips_and_damage_is_an_error_not_a_panic() {
        let set = one_sibling();
        let entries = vec![
            int("age_int", -3),
            int("age_int", i64::MAX),
            bin("name_bin", ""),
            bin("name_bin", "a\0b"),
        ];
        let meta = encode_ledger_meta(&set, &entries);
        assert_eq!(meta[0], b'I');
        assert_eq!(
            decode_ledger_meta(&meta).unwrap(),
            (set.clone(), entries.clone())
        );
        assert_eq!(siblings_bytes(&meta).unwrap(), encode_siblings(&set));
        let sizes: usize = entries.iter().map(KeyIndexEntry::encoded_len).sum();
        assert_eq!(meta.len(), 3 + encode_siblings(&set).len() + 1 + sizes);
        for cut in 1..meta.len() {
            assert!(decode_ledger_meta(&meta[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = meta.clone();
        extra.push(0);
        assert!(decode_ledger_meta(&extra).is_err());
        // Entries out of order, or duplicated, are not the canonical form.
        let mut swapped = vec![TAG, VERSION];
        let s = encode_siblings(&set);
        put_varint(&mut swapped, s.len() as u64);
        swapped.extend_from_slice(&s);
        let mut list = Vec::new();
        put_varint(&mut list, 2);
        for e in [bin("name_bin", "b"), bin("name_bin", "a")] {
            wire::put_bytes(&mut list, &e.field);
            list.push(TERM_BIN);
            if let IndexTerm::Bin(b) = &e.term {
                wire::put_bytes(&mut list, b);
            }
        }
        swapped.extend_from_slice(&list);
        assert!(matches!(
            decode_ledger_meta(&swapped),
            Err(EntriesError::NotAscending { .. })
        ));
        // The form with entries and none in it: refused (one encoding per object).
        let mut empty = vec![TAG, VERSION];
        put_varint(&mut empty, s.len() as u64);
        empty.extend_from_slice(&s);
        empty.push(0);
        assert!(decode_ledger_meta(&empty).is_err());
        assert!(decode_ledger_meta(&[TAG, 9, 0]).is_err());
    }
}
