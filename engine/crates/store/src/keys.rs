//! Ledger keys. Objects and index entries share one sorted keyspace:
//!
//! * object: `0x01 | bucket | 0x00 | key`
//! * index entry: `0x02 | bucket | 0x00 | field | 0x00 | term | key`
//!
//! Buckets and fields may not contain `0x00` (that would let two different (bucket, key) pairs encode
//! to the same ledger key); keys are free bytes because they come last. Integer terms encode as
//! `0x01` + 8 big-endian bytes with the sign bit flipped (so they sort numerically); binary terms as
//! `0x02` + the bytes with `0x00` escaped as `0x00 0xFF`, closed by `0x00 0x01`.

use crate::config::{MAX_BUCKET_BYTES, MAX_KEY_BYTES};
use crate::error::{Error, Result};

pub(crate) const TAG_OBJECT: u8 = 0x01;
pub(crate) const TAG_INDEX: u8 = 0x02;

/// A secondary-index term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Term {
    Int(i64),
    Bin(Vec<u8>),
}

/// Whether an index change adds or removes the object's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexOp {
    Add,
    Remove,
}

/// One change to the object's secondary-index entries, written atomically with the object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IndexChange {
    pub op: IndexOp,
    pub field: Vec<u8>,
    pub term: Term,
}

impl IndexChange {
    pub fn add(field: impl Into<Vec<u8>>, term: Term) -> Self {
        IndexChange {
            op: IndexOp::Add,
            field: field.into(),
            term,
        }
    }
    pub fn remove(field: impl Into<Vec<u8>>, term: Term) -> Self {
        IndexChange {
            op: IndexOp::Remove,
            field: field.into(),
            term,
        }
    }
}

pub(crate) fn validate_bucket(bucket: &[u8]) -> Result<()> {
    if bucket.is_empty() {
        return Err(Error::InvalidBucket("bucket is empty".into()));
    }
    if bucket.len() > MAX_BUCKET_BYTES {
        return Err(Error::InvalidBucket(format!(
            "bucket is {} bytes; the limit is {MAX_BUCKET_BYTES}",
            bucket.len()
        )));
    }
    if bucket.contains(&0) {
        return Err(Error::InvalidBucket(
            "bucket contains a 0x00 byte, which separates bucket from key in ledger keys; two \
             different (bucket, key) pairs could collide"
                .into(),
        ));
    }
    Ok(())
}

pub(crate) fn validate_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidKey("key is empty".into()));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidKey(format!(
            "key is {} bytes; the limit is {MAX_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

/// The checks a write or read of (bucket, key) passes in the store, for callers that route the
/// request elsewhere first (a cluster coordinator): a bad name fails before any replica is asked.
pub fn validate_object_key(bucket: &[u8], key: &[u8]) -> Result<()> {
    validate_bucket(bucket)?;
    validate_key(key)
}

/// The store's checks of one index change (field name, term size), for the same callers.
pub fn validate_index_changes(changes: &[IndexChange]) -> Result<()> {
    changes.iter().try_for_each(validate_index_change)
}

pub(crate) fn validate_index_change(c: &IndexChange) -> Result<()> {
    if c.field.is_empty() || c.field.len() > MAX_BUCKET_BYTES || c.field.contains(&0) {
        return Err(Error::InvalidIndex(format!(
            "index field must be 1..={MAX_BUCKET_BYTES} bytes without 0x00 (got {} bytes)",
            c.field.len()
        )));
    }
    if let Term::Bin(b) = &c.term {
        if b.len() > MAX_KEY_BYTES {
            return Err(Error::InvalidIndex(format!(
                "binary term is {} bytes; the limit is {MAX_KEY_BYTES}",
                b.len()
            )));
        }
    }
    Ok(())
}

/// Ledger key of an object.
pub(crate) fn object_key(bucket: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + bucket.len() + key.len());
    k.push(TAG_OBJECT);
    k.extend_from_slice(bucket);
    k.push(0);
    k.extend_from_slice(key);
    k
}

/// Split an object ledger key back into (bucket, key).
pub(crate) fn split_object_key(lk: &[u8]) -> Option<(&[u8], &[u8])> {
    if lk.first() != Some(&TAG_OBJECT) {
        return None;
    }
    let rest = &lk[1..];
    let sep = rest.iter().position(|&b| b == 0)?;
    Some((&rest[..sep], &rest[sep + 1..]))
}

pub(crate) fn encode_term(out: &mut Vec<u8>, term: &Term) {
    match term {
        Term::Int(i) => {
            out.push(0x01);
            out.extend_from_slice(&((*i as u64) ^ (1 << 63)).to_be_bytes());
        }
        Term::Bin(b) => {
            out.push(0x02);
            for &byte in b {
                out.push(byte);
                if byte == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0x00, 0x01]);
        }
    }
}

/// Ledger key of an index entry.
pub(crate) fn index_key(bucket: &[u8], field: &[u8], term: &Term, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + bucket.len() + field.len() + key.len() + 16);
    k.push(TAG_INDEX);
    k.extend_from_slice(bucket);
    k.push(0);
    k.extend_from_slice(field);
    k.push(0);
    encode_term(&mut k, term);
    k.extend_from_slice(key);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_sort_by_bucket_then_key_and_round_trip() {
        let a = object_key(b"b", b"zz");
        let b = object_key(b"ba", b"a");
        assert!(
            a < b,
            "bucket `b` sorts before bucket `ba` whatever the keys"
        );
        assert_eq!(split_object_key(&a), Some((&b"b"[..], &b"zz"[..])));
        let with_nul = object_key(b"b", b"\0x");
        assert_eq!(split_object_key(&with_nul), Some((&b"b"[..], &b"\0x"[..])));
    }

    #[test]
    fn bucket_with_nul_is_rejected_because_it_would_collide() {
        // ("a\0b", "c") and ("a", "b\0c") would both encode to 01 61 00 62 00 63.
        assert!(matches!(
            validate_bucket(b"a\0b"),
            Err(Error::InvalidBucket(_))
        ));
        assert!(matches!(validate_bucket(b""), Err(Error::InvalidBucket(_))));
        assert!(validate_bucket(b"a").is_ok());
    }

    #[test]
    fn key_limits() {
        assert!(matches!(validate_key(b""), Err(Error::InvalidKey(_))));
        assert!(validate_key(&vec![1u8; MAX_KEY_BYTES]).is_ok());
        assert!(matches!(
            validate_key(&vec![1u8; MAX_KEY_BYTES + 1]),
            Err(Error::InvalidKey(_))
        ));
    }

    #[test]
    fn integer_terms_sort_numerically_and_binary_terms_lexically() {
        let k = |t: Term| index_key(b"b", b"f", &t, b"k");
        assert!(k(Term::Int(-5)) < k(Term::Int(-1)));
        assert!(k(Term::Int(-1)) < k(Term::Int(0)));
        assert!(k(Term::Int(0)) < k(Term::Int(i64::MAX)));
        assert!(k(Term::Bin(b"a".to_vec())) < k(Term::Bin(b"a\0".to_vec())));
        assert!(k(Term::Bin(b"a\0".to_vec())) < k(Term::Bin(b"a\x01".to_vec())));
        assert!(k(Term::Bin(b"ab".to_vec())) < k(Term::Bin(b"b".to_vec())));
    }
}
