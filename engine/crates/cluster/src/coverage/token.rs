//! Continuation tokens: where a paged coverage query resumes, bound to the query and to the ring
//! version its plan was made on.
//!
//! ```text
//! token = 'Q' 0x01  query_hash:u64le  ring_version:u64le
//!         varint term_len  term  varint key_len  key          the last entry returned
//!         crc32c:u32le                                        CRC-32C of all bytes before it
//! varint = unsigned LEB128, at most 10 bytes, shortest form
//! ```
//!
//! Tokens go to clients as opaque bytes. They are not authenticated: a forged token can only
//! start a query at another position of the same answer. The checksum catches damage, the query
//! hash a token passed to another query, the ring version a token kept across a change of the
//! member list.

use super::merge::IndexEntry;
use crate::wire::{open, put_bytes, seal, FormatError};

/// Format version of tokens; a change of layout needs a new one.
pub const TOKEN_VERSION: u8 = 1;
const TOKEN_TAG: u8 = b'Q';

/// Longest term a token carries: a 64 KiB binary term in the store's order-preserving
/// encoding (every byte may double, plus a tag and a terminator).
pub const MAX_TOKEN_TERM_BYTES: usize = 2 * 64 * 1024 + 3;
/// Longest key a token carries (the store's key limit).
pub const MAX_TOKEN_KEY_BYTES: usize = 64 * 1024;

/// A 64-bit fingerprint of a query's parameters: FNV-1a over the kind and each field, every
/// one prefixed by its length (as u64le) so that field boundaries count. Frozen: tokens in
/// clients' hands outlive upgrades.
///
/// The caller decides what a query's parameters are (bucket, index, range, `return_terms`, a
/// term filter…) and passes them in a fixed order; `max_results` should not be one of them, so
/// that a client may change its page size between pages.
pub fn query_hash(kind: &[u8], fields: &[&[u8]]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(PRIME);
        }
    };
    for part in std::iter::once(kind).chain(fields.iter().copied()) {
        eat(&(part.len() as u64).to_le_bytes());
        eat(part);
    }
    h
}

/// A decoded continuation token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Continuation {
    query_hash: u64,
    ring_version: u64,
    after: IndexEntry,
}

/// Why a continuation token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContinuationError {
    #[error("invalid continuation token: {0}")]
    Format(#[from] FormatError),
    #[error("continuation token belongs to another query")]
    OtherQuery,
    #[error("continuation token was made on ring version {token}, the cluster is on {current}: start the query again")]
    RingChanged { token: u64, current: u64 },
    #[error("continuation position too long: {what} is {len} bytes, the limit is {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

impl Continuation {
    /// A token resuming after `after` (the last entry returned) of the query `query_hash` on a
    /// plan made at `ring_version`. Refuses terms and keys longer than the limits.
    pub fn new(
        query_hash: u64,
        ring_version: u64,
        after: IndexEntry,
    ) -> Result<Continuation, ContinuationError> {
        for (what, len, max) in [
            ("term", after.term.len(), MAX_TOKEN_TERM_BYTES),
            ("key", after.key.len(), MAX_TOKEN_KEY_BYTES),
        ] {
            if len > max {
                return Err(ContinuationError::TooLong { what, len, max });
            }
        }
        Ok(Continuation {
            query_hash,
            ring_version,
            after,
        })
    }

    pub fn query_hash(&self) -> u64 {
        self.query_hash
    }

    pub fn ring_version(&self) -> u64 {
        self.ring_version
    }

    /// The last entry the previous page returned; the next page starts above it.
    pub fn after(&self) -> &IndexEntry {
        &self.after
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.after.term.len() + self.after.key.len());
        out.push(TOKEN_TAG);
        out.push(TOKEN_VERSION);
        out.extend_from_slice(&self.query_hash.to_le_bytes());
        out.extend_from_slice(&self.ring_version.to_le_bytes());
        put_bytes(&mut out, &self.after.term);
        put_bytes(&mut out, &self.after.key);
        seal(&mut out);
        out
    }

    /// Decodes any bytes without panicking: a token, or a typed error.
    pub fn decode(bytes: &[u8]) -> Result<Continuation, ContinuationError> {
        let mut r = open(bytes, TOKEN_TAG, TOKEN_VERSION, "continuation token")?;
        let query_hash = r.u64le("query hash")?;
        let ring_version = r.u64le("ring version")?;
        let term = r.bytes("term", MAX_TOKEN_TERM_BYTES)?;
        let key = r.bytes("key", MAX_TOKEN_KEY_BYTES)?;
        r.end()?;
        Ok(Continuation {
            query_hash,
            ring_version,
            after: IndexEntry { term, key },
        })
    }

    /// Decodes `bytes` and checks that the token belongs to the query `query_hash` and to the
    /// ring the cluster is on; returns the entry to resume after.
    pub fn resume(
        bytes: &[u8],
        query_hash: u64,
        ring_version: u64,
    ) -> Result<IndexEntry, ContinuationError> {
        let t = Continuation::decode(bytes)?;
        if t.query_hash != query_hash {
            return Err(ContinuationError::OtherQuery);
        }
        if t.ring_version != ring_version {
            return Err(ContinuationError::RingChanged {
                token: t.ring_version,
                current: ring_version,
            });
        }
        Ok(t.after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn query_hash_is_frozen_and_counts_field_boundaries() {
        // Test vectors from an independent implementation of the definition above.
        assert_eq!(query_hash(b"", &[]), 0xa8c7_f832_281a_39c5);
        assert_eq!(query_hash(b"list_keys", &[b"users"]), 0x4fdd_69f9_b4df_808c);
        let a = query_hash(b"index_range", &[b"users", b"age_int", b"1", b"9"]);
        assert_eq!(
            a,
            query_hash(b"index_range", &[b"users", b"age_int", b"1", b"9"])
        );
        assert_ne!(
            a,
            query_hash(b"index_range", &[b"users", b"age_int", b"19", b""])
        );
        assert_ne!(
            a,
            query_hash(b"index_eq", &[b"users", b"age_int", b"1", b"9"])
        );
        assert_ne!(
            query_hash(b"k", &[b"ab", b"c"]),
            query_hash(b"k", &[b"a", b"bc"])
        );
    }

    #[test]
    fn golden_token_bytes() {
        let t =
            Continuation::new(0x0102_0304_0506_0708, 5, IndexEntry::new(*b"t", *b"k1")).unwrap();
        let b = t.encode();
        assert_eq!(
            hex(&b[..b.len() - 4]),
            "5101\
             0807060504030201\
             0500000000000000\
             0174\
             026b31"
        );
        assert_eq!(
            &b[b.len() - 4..],
            &crc32c::crc32c(&b[..b.len() - 4]).to_le_bytes()
        );
        assert_eq!(Continuation::decode(&b).unwrap(), t);
    }

    #[test]
    fn resume_binds_the_query_and_the_ring_version() {
        let q = query_hash(b"list_keys", &[b"users"]);
        let other = query_hash(b"list_keys", &[b"orders"]);
        let b = Continuation::new(q, 7, IndexEntry::new(Vec::new(), *b"alice"))
            .unwrap()
            .encode();
        assert_eq!(Continuation::resume(&b, q, 7).unwrap().key, b"alice");
        assert_eq!(
            Continuation::resume(&b, other, 7),
            Err(ContinuationError::OtherQuery)
        );
        assert_eq!(
            Continuation::resume(&b, q, 8),
            Err(ContinuationError::RingChanged {
                token: 7,
                current: 8
            })
        );
    }

    #[test]
    fn bad_tokens_are_typed_errors() {
        let good = Continuation::new(1, 2, IndexEntry::new(*b"t", *b"k"))
            .unwrap()
            .encode();
        let fmt = |b: &[u8]| match Continuation::decode(b) {
            Err(ContinuationError::Format(f)) => f,
            other => panic!("{other:?}"),
        };
        assert!(matches!(fmt(&[]), FormatError::Truncated { .. }));
        assert!(matches!(
            fmt(b"X\x01"),
            FormatError::WrongTag { found: b'X', .. }
        ));
        assert_eq!(fmt(b"Q\x02rest-of-it"), FormatError::UnsupportedVersion(2));
        assert!(matches!(fmt(b"Q\x01ab"), FormatError::Truncated { .. }));
        let mut flipped = good.clone();
        flipped[10] ^= 1;
        assert!(matches!(fmt(&flipped), FormatError::Checksum { .. }));
        // A well-sealed body with trailing bytes, or a length past the end.
        let reseal = |body: &[u8]| {
            let mut v = body.to_vec();
            seal(&mut v);
            v
        };
        let body = &good[..good.len() - 4];
        let mut long = body.to_vec();
        long.push(0);
        assert!(matches!(
            fmt(&reseal(&long)),
            FormatError::TrailingBytes { .. }
        ));
        let mut short = body.to_vec();
        short.pop();
        assert!(matches!(
            fmt(&reseal(&short)),
            FormatError::Truncated { .. }
        ));
        // A term length over the limit is refused before any allocation.
        let mut huge = b"Q\x01".to_vec();
        huge.extend_from_slice(&[0; 16]);
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            fmt(&reseal(&huge)),
            FormatError::TooLong { what: "term", .. }
        ));
        // Too long to make.
        assert!(matches!(
            Continuation::new(
                1,
                1,
                IndexEntry::new(Vec::new(), vec![0; MAX_TOKEN_KEY_BYTES + 1])
            ),
            Err(ContinuationError::TooLong { what: "key", .. })
        ));
    }
}
