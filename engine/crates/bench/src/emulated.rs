//! Secondary indexes for the peers, which have none of their own (RocksDB, BlobDB, fjall,
//! LevelDB): the scheme Riak used over eleveldb. Each index entry is an extra key
//! `\xff2i/<field>/<term>\0<key>` written in the same write batch as the object, and a range query
//! is an iterator over those keys. When the scenario indexes objects, a stored value starts with
//! a header carrying the object's entries (as a Riak object carries its index metadata), so an
//! update can remove the entries it replaces and a delete the ones it leaves behind.
//!
//! A peer implements [`Kv`], its plain operations; [`Emulated`] makes it a [`Driver`].

use std::path::PathBuf;

use anyhow::{bail, ensure, Context, Result};

use crate::drivers::Driver;
use crate::records::{self, Entry, RangeQuery};

/// Prefix of emulated index keys (primary keys are digits or `u` and digits, so they never
/// collide).
const INDEX_PREFIX: &[u8] = b"\xff2i/";

/// An engine's own operations.
pub trait Kv: Send + Sync {
    /// Whether the key is present, reading its value as a GET does without copying it out.
    fn exists(&self, key: &[u8]) -> Result<bool>;
    /// A metadata-only read where the engine has one; [`Kv::exists`] otherwise.
    fn contains(&self, key: &[u8]) -> Result<bool> {
        self.exists(key)
    }
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// One atomic write: the puts, then the deletes.
    fn write(&self, puts: &[(Vec<u8>, Vec<u8>)], deletes: &[Vec<u8>]) -> Result<()>;
    /// Keys in `[from, to)` in order, handed to `f` until it returns false.
    fn scan(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()>;
    fn close(&self) -> Result<()>;
    fn data_dir(&self) -> PathBuf;
}

/// An index key: prefix, field, `/`, term, NUL, key. Terms hold no NUL ([`records::validate`]),
/// so byte order is term order, then key order.
pub fn index_key(field: &str, term: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = field_prefix(field);
    k.extend_from_slice(term);
    k.push(0);
    k.extend_from_slice(key);
    k
}

fn field_prefix(field: &str) -> Vec<u8> {
    let mut k = INDEX_PREFIX.to_vec();
    k.extend_from_slice(field.as_bytes());
    k.push(b'/');
    k
}

/// Key range `[from, to)` covering terms `lo..=hi` of `field`.
pub fn index_range(field: &str, lo: &[u8], hi: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut from = field_prefix(field);
    from.extend_from_slice(lo);
    from.push(0);
    let mut to = field_prefix(field);
    to.extend_from_slice(hi);
    to.push(1);
    (from, to)
}

/// The term of an index key of `field`.
pub fn index_term<'a>(k: &'a [u8], field: &str) -> Option<&'a [u8]> {
    let rest = k.strip_prefix(field_prefix(field).as_slice())?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(&rest[..end])
}

/// A stored value with its entries: the header's length (four bytes, little-endian), the
/// entries as [`records::encode`] writes them, the value.
pub fn frame(entries: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + entries.len() + value.len());
    v.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    v.extend_from_slice(entries);
    v.extend_from_slice(value);
    v
}

/// The entries' bytes of a value [`frame`] wrote.
pub fn unframe(stored: &[u8]) -> Result<&[u8]> {
    let n = stored
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
        .context("stored value shorter than its index header")?;
    stored
        .get(4..4 + n)
        .context("stored value shorter than its index entries")
}

/// A peer as a [`Driver`]. `framed`: values carry their entries (the scenario indexes objects).
pub struct Emulated<K> {
    kv: K,
    framed: bool,
}

impl<K: Kv> Emulated<K> {
    pub fn new(kv: K, framed: bool) -> Emulated<K> {
        Emulated { kv, framed }
    }

    /// The entries stored with `key` (none when it is absent).
    fn stored_entries(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.kv.read(key)? {
            Some(v) => Ok(Some(unframe(&v)?.to_vec())),
            None => Ok(None),
        }
    }

    fn index_keys(entries: &[Entry], key: &[u8]) -> Vec<Vec<u8>> {
        entries
            .iter()
            .map(|e| index_key(&e.field, &e.term, key))
            .collect()
    }
}

impl<K: Kv> Driver for Emulated<K> {
    fn get(&self, key: &[u8]) -> Result<bool> {
        self.kv.exists(key)
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        self.kv.contains(key)
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[Entry]) -> Result<()> {
        if !self.framed {
            ensure!(
                index.is_empty(),
                "index entries on a driver opened without indexes"
            );
            return self.kv.put(key, value);
        }
        records::validate(index)?;
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Self::index_keys(index, key)
            .into_iter()
            .map(|k| (k, Vec::new()))
            .collect();
        puts.push((key.to_vec(), frame(&records::encode(index), value)));
        self.kv.write(&puts, &[])
    }
    fn update(&self, key: &[u8], value: &[u8], index: Option<&[Entry]>) -> Result<()> {
        if !self.framed {
            ensure!(
                index.is_none(),
                "index entries on a driver opened without indexes"
            );
            self.kv.exists(key)?;
            return self.kv.put(key, value);
        }
        let old = self.stored_entries(key)?.unwrap_or_default();
        let Some(new) = index else {
            // Riak's update keeps the object's metadata, index entries included.
            return self.kv.put(key, &frame(&old, value));
        };
        records::validate(new)?;
        let (removed, added) = records::diff(&records::decode(&old)?, new);
        let mut puts: Vec<(Vec<u8>, Vec<u8>)> = Self::index_keys(&added, key)
            .into_iter()
            .map(|k| (k, Vec::new()))
            .collect();
        puts.push((key.to_vec(), frame(&records::encode(new), value)));
        self.kv.write(&puts, &Self::index_keys(&removed, key))
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        if !self.framed {
            return self.kv.delete(key);
        }
        let Some(old) = self.stored_entries(key)? else {
            return self.kv.delete(key);
        };
        let mut deletes = Self::index_keys(&records::decode(&old)?, key);
        deletes.push(key.to_vec());
        self.kv.write(&[], &deletes)
    }
    fn index_query(&self, q: &RangeQuery) -> Result<usize> {
        if !self.framed {
            bail!("index query on a driver opened without indexes");
        }
        let (from, to) = index_range(q.field, &q.lo, &q.hi);
        let (mut n, mut bad) = (0usize, false);
        self.kv.scan(&from, &to, &mut |k| {
            let Some(term) = index_term(k, q.field) else {
                bad = true;
                return false;
            };
            if q.regex.as_ref().is_none_or(|r| r.is_match(term)) {
                n += 1;
            }
            n < q.max_results as usize
        })?;
        ensure!(!bad, "malformed index key in {}", q.field);
        Ok(n)
    }
    fn close(&self) -> Result<()> {
        self.kv.close()
    }
    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.kv.data_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_sort_by_term_then_key_and_decode() {
        let terms: [&[u8]; 5] = [b"", b"A", b"A1", b"AB", b"B"];
        let mut keys: Vec<Vec<u8>> = terms
            .iter()
            .rev()
            .map(|t| index_key("pc_bin", t, b"000000000001"))
            .collect();
        keys.sort();
        for (k, t) in keys.iter().zip(terms) {
            assert_eq!(index_term(k, "pc_bin"), Some(t));
        }
        assert_eq!(index_term(&keys[0], "pc"), None, "another field's key");
        // Bounds are inclusive, and a term that extends the upper bound is past it.
        let (from, to) = index_range("pc_bin", b"A", b"A1");
        let inside = |t: &[u8]| {
            let k = index_key("pc_bin", t, b"9");
            k >= from && k < to
        };
        assert!(inside(b"A") && inside(b"A1") && inside(b"A0zzz"));
        assert!(!inside(b"") && !inside(b"A10") && !inside(b"AB"));
        assert!(index_key("pc_bim", b"zzz", b"0") < from);
        assert!(index_key("pc_bio", b"", b"0") >= to);
    }

    #[test]
    fn frames_carry_entries_and_short_values_are_refused() {
        let f = frame(b"abc", b"value");
        assert_eq!(unframe(&f).unwrap(), b"abc");
        assert_eq!(&f[7..], b"value");
        assert_eq!(unframe(&frame(b"", b"")).unwrap(), b"");
        assert!(unframe(&f[..5]).is_err());
        assert!(unframe(b"ab").is_err());
    }
}
