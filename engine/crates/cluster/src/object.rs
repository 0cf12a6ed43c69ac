//! A replica's object: the sibling set of a key and the contents (user metadata and value) of its
//! live siblings — how a vnode stores a key, and what replicas send each other.
//!
//! In the store, the sibling set is the ledger metadata (so a HEAD reads it without touching the
//! journal) and the contents are the journal value:
//!
//! ```text
//! contents  = 'V' 0x01  varint count  (varint meta_len  meta  varint value_len  value) × count
//!           | 'V' 0x02  varint count  (varint meta_len  meta  varint value_len  value  entries) × count
//! ```
//!
//! one entry per live sibling, in the set's (canonical) order; tombstones have none. Version 2
//! carries each sibling's secondary-index entries (`entries` as in [`crate::index_entries`]); it is
//! written only when some sibling has entries, so an object without them encodes as before. Each value's
//! CRC-32C and size must match its sibling's metadata, so a content can never be paired with the
//! wrong sibling.
//!
//! Merging (`merge`) is the sibling-set merge with contents carried along: a sibling of the result
//! takes its content from whichever side holds a sibling with the same metadata.
//! [`merge_needs_local_contents`] tells a replica whether it must read its own contents at all
//! (only when one of its siblings survives next to the incoming ones), so the usual put — a new
//! write that supersedes what the replica had — costs a HEAD, not a GET.

use crate::causality::{ConflictPolicy, SiblingKind, SiblingMeta, SiblingSet};
use crate::index_entries::{self, KeyIndexEntry};
use crate::wire::{self, put_varint};

const TAG: u8 = b'V';
const VERSION: u8 = 1;
const VERSION_WITH_ENTRIES: u8 = 2;

/// The user's part of one sibling.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Content {
    /// Opaque to levee (the client's `metadata` bytes).
    pub metadata: Vec<u8>,
    pub value: Vec<u8>,
    /// The key's secondary-index entries as this sibling's write left them (sorted, no
    /// duplicates; see [`crate::index_entries`]).
    pub index: Vec<KeyIndexEntry>,
}

/// A sibling set with the contents of its live siblings, aligned with `siblings.live()`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    pub siblings: SiblingSet,
    pub contents: Vec<Content>,
}

/// Why bytes or parts do not make an object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectError {
    #[error("object contents: {0}")]
    Malformed(String),
    #[error("object has {live} live siblings but {contents} contents")]
    CountMismatch { live: usize, contents: usize },
    #[error("content {index} does not match its sibling (CRC-32C/size {got_hash:08x}/{got_size}, sibling says {want_hash:08x}/{want_size})")]
    ContentMismatch {
        index: usize,
        got_hash: u32,
        got_size: u64,
        want_hash: u32,
        want_size: u64,
    },
    #[error("merge result holds a sibling whose content neither side supplied")]
    MissingContent,
}

impl Object {
    /// Pairs a set with its contents, checking counts and each value against its sibling.
    pub fn new(siblings: SiblingSet, contents: Vec<Content>) -> Result<Object, ObjectError> {
        let live: Vec<&SiblingMeta> = siblings.live().map(|s| &s.meta).collect();
        if live.len() != contents.len() {
            return Err(ObjectError::CountMismatch {
                live: live.len(),
                contents: contents.len(),
            });
        }
        for (index, (m, c)) in live.iter().zip(&contents).enumerate() {
            let (got_hash, got_size) = (levee_checksum::crc32c(&c.value), c.value.len() as u64);
            if let SiblingKind::Value { hash, size } = m.kind {
                if (hash, size) != (got_hash, got_size) {
                    return Err(ObjectError::ContentMismatch {
                        index,
                        got_hash,
                        got_size,
                        want_hash: hash,
                        want_size: size,
                    });
                }
            }
        }
        Ok(Object { siblings, contents })
    }

    /// The object of one write: a value or, with `content` None, a tombstone.
    pub fn single(siblings: SiblingSet, content: Option<Content>) -> Result<Object, ObjectError> {
        Object::new(siblings, content.into_iter().collect())
    }

    /// The content of the live sibling with this metadata.
    pub fn content_of(&self, meta: &SiblingMeta) -> Option<&Content> {
        self.siblings
            .live()
            .position(|s| &s.meta == meta)
            .map(|i| &self.contents[i])
    }

    /// The journal value: every live sibling's content, in order.
    pub fn encode_contents(&self) -> Vec<u8> {
        let with_entries = self.contents.iter().any(|c| !c.index.is_empty());
        let version = if with_entries {
            VERSION_WITH_ENTRIES
        } else {
            VERSION
        };
        let mut out = vec![TAG, version];
        put_varint(&mut out, self.contents.len() as u64);
        for c in &self.contents {
            put_varint(&mut out, c.metadata.len() as u64);
            out.extend_from_slice(&c.metadata);
            put_varint(&mut out, c.value.len() as u64);
            out.extend_from_slice(&c.value);
            if with_entries {
                index_entries::put_entries(&mut out, &c.index);
            }
        }
        out
    }

    /// The key's secondary-index entries on a replica holding this object: the union over its
    /// live siblings (sorted, no duplicates).
    pub fn index_entries(&self) -> Vec<KeyIndexEntry> {
        index_entries::union_of(self.contents.iter().map(|c| c.index.as_slice()))
    }
}

/// Reads what [`Object::encode_contents`] wrote.
pub fn decode_contents(bytes: &[u8]) -> Result<Vec<Content>, ObjectError> {
    let bad = |m: &str| ObjectError::Malformed(m.to_string());
    let mut r = bytes;
    if r.len() < 2 || r[0] != TAG {
        return Err(bad("not object contents (wrong tag)"));
    }
    let with_entries = match r[1] {
        VERSION => false,
        VERSION_WITH_ENTRIES => true,
        v => {
            return Err(ObjectError::Malformed(format!(
                "unsupported contents version {v}"
            )))
        }
    };
    r = &r[2..];
    let n = get_varint(&mut r)?;
    // Each content takes at least two bytes: a count larger than that is damage, not a size.
    if n > (r.len() / 2) as u64 {
        return Err(bad("count larger than the bytes that follow"));
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let metadata = take(&mut r)?;
        let value = take(&mut r)?;
        let index = if with_entries {
            let mut reader = wire::Reader::new(r);
            let entries = index_entries::read_entries(&mut reader)
                .map_err(|e| ObjectError::Malformed(e.to_string()))?;
            r = &r[reader.pos()..];
            entries
        } else {
            Vec::new()
        };
        out.push(Content {
            metadata,
            value,
            index,
        });
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok(out)
}

/// Whether merging `incoming` into a replica holding `local` keeps a live sibling only `local`
/// has — then the replica must read its own contents for the merge.
pub fn merge_needs_local_contents(
    local: &SiblingSet,
    incoming: &SiblingSet,
    policy: ConflictPolicy,
) -> bool {
    let merged = local.merge(incoming, policy);
    let needs = merged
        .live()
        .any(|s| !incoming.live().any(|i| i.meta == s.meta));
    needs
}

/// Merges `incoming` into `local` (None: the replica has nothing, or nothing it needs to supply,
/// see [`merge_needs_local_contents`]).
pub fn merge(
    local_siblings: &SiblingSet,
    local: Option<&Object>,
    incoming: &Object,
    policy: ConflictPolicy,
) -> Result<Object, ObjectError> {
    let merged = local_siblings.merge(&incoming.siblings, policy);
    let contents = merged
        .live()
        .map(|s| {
            incoming
                .content_of(&s.meta)
                .or_else(|| local.and_then(|l| l.content_of(&s.meta)))
                .cloned()
                .ok_or(ObjectError::MissingContent)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Object::new(merged, contents)
}

fn get_varint(r: &mut &[u8]) -> Result<u64, ObjectError> {
    let (v, next) =
        wire::get_varint(r, 0).map_err(|e| ObjectError::Malformed(format!("bad varint: {e:?}")))?;
    *r = &r[next..];
    Ok(v)
}

fn take(r: &mut &[u8]) -> Result<Vec<u8>, ObjectError> {
    let n = get_varint(r)?;
    if n > r.len() as u64 {
        return Err(ObjectError::Malformed(
            "length runs past the end of the contents".into(),
        ));
    }
    let (a, b) = r.split_at(n as usize);
    *r = b;
    Ok(a.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causality::{update, Actor, Clock};

    const A: Actor = Actor::new(1);
    const B: Actor = Actor::new(2);

    fn content(v: &str) -> Content {
        Content {
            metadata: format!("m-{v}").into_bytes(),
            value: v.as_bytes().to_vec(),
            index: Vec::new(),
        }
    }

    /// A coordinated put of `v` at `actor` on top of `local`, with the client context `ctx`.
    fn put(local: &Object, ctx: &Clock, actor: Actor, v: &str, ts: u64) -> Object {
        let clock = update(ctx, &local.siblings, actor).unwrap();
        let c = content(v);
        let set = SiblingSet::single(clock, SiblingMeta::for_value(&c.value, ts));
        let new = Object::single(set, Some(c)).unwrap();
        merge(&local.siblings, Some(local), &new, ConflictPolicy::Siblings).unwrap()
    }

    #[test]
    fn contents_round_trip_and_damage_is_an_error_not_a_panic() {
        let o = put(&Object::default(), &Clock::new(), A, "hello", 1);
        let bytes = o.encode_contents();
        assert_eq!(decode_contents(&bytes).unwrap(), o.contents);
        for cut in 0..bytes.len() {
            assert!(decode_contents(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_contents(&extra).is_err());
        assert!(decode_contents(&[b'V', 9, 0]).is_err());
    }

    #[test]
    fn a_content_that_does_not_match_its_sibling_is_refused() {
        let set = SiblingSet::single(
            Clock::new().join(&update(&Clock::new(), &SiblingSet::new(), A).unwrap()),
            SiblingMeta::for_value(b"right", 1),
        );
        let e = Object::single(set.clone(), Some(content("wrong"))).unwrap_err();
        assert!(matches!(e, ObjectError::ContentMismatch { .. }), "{e}");
        let e = Object::new(set, vec![]).unwrap_err();
        assert!(matches!(e, ObjectError::CountMismatch { .. }), "{e}");
    }

    #[test]
    fn a_write_that_read_the_replica_replaces_it_without_its_contents() {
        let v1 = put(&Object::default(), &Clock::new(), A, "v1", 1);
        // The client read v1 and writes v2 with its context: v1 is superseded.
        let clock = update(&v1.siblings.context(), &v1.siblings, A).unwrap();
        let c = content("v2");
        let v2 = Object::single(
            SiblingSet::single(clock, SiblingMeta::for_value(&c.value, 2)),
            Some(c),
        )
        .unwrap();
        assert!(!merge_needs_local_contents(
            &v1.siblings,
            &v2.siblings,
            ConflictPolicy::Siblings
        ));
        let merged = merge(&v1.siblings, None, &v2, ConflictPolicy::Siblings).unwrap();
        assert_eq!(merged, v2);
    }

    #[test]
    fn concurrent_writes_keep_both_contents_and_lww_keeps_the_later() {
        let base = Object::default();
        let a = put(&base, &Clock::new(), A, "from-a", 10);
        let b = put(&base, &Clock::new(), B, "from-b", 20);
        assert!(merge_needs_local_contents(
            &a.siblings,
            &b.siblings,
            ConflictPolicy::Siblings
        ));
        // Without its own contents, the replica cannot merge: an error, never a lost sibling.
        assert_eq!(
            merge(&a.siblings, None, &b, ConflictPolicy::Siblings).unwrap_err(),
            ObjectError::MissingContent
        );
        let both = merge(&a.siblings, Some(&a), &b, ConflictPolicy::Siblings).unwrap();
        let mut values: Vec<&[u8]> = both.contents.iter().map(|c| &c.value[..]).collect();
        values.sort();
        assert_eq!(values, [&b"from-a"[..], b"from-b"]);
        // Merging the other way round gives the same object.
        assert_eq!(
            merge(&b.siblings, Some(&b), &a, ConflictPolicy::Siblings).unwrap(),
            both
        );
        let lww = merge(&a.siblings, Some(&a), &b, ConflictPolicy::Lww).unwrap();
        assert_eq!(lww.contents, vec![content("from-b")]);
        assert!(!merge_needs_local_contents(
            &a.siblings,
            &b.siblings,
            ConflictPolicy::Lww
        ));
    }

    #[test]
    fn a_tombstone_has_no_content_and_supersedes_what_it_read() {
        let v1 = put(&Object::default(), &Clock::new(), A, "v1", 1);
        let clock = update(&v1.siblings.context(), &v1.siblings, A).unwrap();
        let del =
            Object::single(SiblingSet::single(clock, SiblingMeta::tombstone(2)), None).unwrap();
        let merged = merge(&v1.siblings, None, &del, ConflictPolicy::Siblings).unwrap();
        assert!(merged.siblings.is_tombstone_only());
        assert!(merged.contents.is_empty());
        assert_eq!(decode_contents(&merged.encode_contents()).unwrap(), vec![]);
    }

    fn with_index(o: &Object, terms: &[&str]) -> Object {
        let mut o = o.clone();
        for c in &mut o.contents {
            c.index = terms
                .iter()
                .map(|t| {
                    crate::index_entries::KeyIndexEntry::new(
                        "t_bin",
                        crate::index_entries::IndexTerm::Bin(t.as_bytes().to_vec()),
                    )
                })
                .collect();
        }
        o
    }

    #[test]
    fn index_entries_travel_with_their_siblings_through_a_merge() {
        let base = Object::default();
        let a = with_index(
            &put(&base, &Clock::new(), A, "from-a", 10),
            &["a", "shared"],
        );
        let b = with_index(
            &put(&base, &Clock::new(), B, "from-b", 20),
            &["b", "shared"],
        );
        // The contents carry the entries (version 2) and decode to the same.
        let bytes = a.encode_contents();
        assert_eq!(bytes[1], VERSION_WITH_ENTRIES);
        assert_eq!(decode_contents(&bytes).unwrap(), a.contents);
        for cut in 0..bytes.len() {
            assert!(decode_contents(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // Concurrent siblings: the key's entries are the union of both.
        let both = merge(&a.siblings, Some(&a), &b, ConflictPolicy::Siblings).unwrap();
        let terms: Vec<_> = both.index_entries().into_iter().map(|e| e.term).collect();
        use crate::index_entries::IndexTerm::Bin;
        assert_eq!(
            terms,
            [
                Bin(b"a".to_vec()),
                Bin(b"b".to_vec()),
                Bin(b"shared".to_vec())
            ]
        );
        // A write that read both supersedes them: only its own entries are left.
        let clock = update(&both.siblings.context(), &both.siblings, A).unwrap();
        let c = content("v3");
        let v3 = with_index(
            &Object::single(
                SiblingSet::single(clock, SiblingMeta::for_value(&c.value, 30)),
                Some(c),
            )
            .unwrap(),
            &["c"],
        );
        let merged = merge(&both.siblings, None, &v3, ConflictPolicy::Siblings).unwrap();
        assert_eq!(merged.index_entries(), v3.index_entries());
        // Last-write-wins keeps the later sibling's entries only.
        let lww = merge(&a.siblings, Some(&a), &b, ConflictPolicy::Lww).unwrap();
        assert_eq!(lww.index_entries(), b.index_entries());
        // An object without entries still encodes as version 1.
        assert_eq!(
            put(&base, &Clock::new(), A, "x", 1).encode_contents()[1],
            VERSION
        );
    }
}
