//! Tictac anti-entropy tree: `segments` leaves (default 1,048,576 = 4,096 branches × 256 leaves),
//! each the XOR of `leaf_hash(bucket, key, metadata)` over the live objects whose (bucket, key)
//! falls in that segment. XOR makes the tree order-independent and incrementally maintainable: a
//! write XORs the old object's hash out and the new one in, and trees of different stores merge by
//! XOR. Tombstones do not contribute.

/// Default number of segments (leaves).
pub const DEFAULT_SEGMENTS: u32 = 1 << 20;
/// Default leaves per branch.
pub const DEFAULT_BRANCH_WIDTH: u32 = 256;

fn hash64(parts: &[&[u8]]) -> u64 {
    let mut a = 0x5EED_0001u32;
    let mut b = 0x5EED_0002u32;
    for p in parts {
        a = crc32c::crc32c_append(a, p);
        a = crc32c::crc32c_append(a, &[0xFE]);
        b = crc32c::crc32c_append(b ^ 0x9E37_79B9, p);
        b = crc32c::crc32c_append(b, &[0xFD]);
    }
    ((a as u64) << 32) | b as u64
}

/// The segment a (bucket, key) belongs to.
pub fn segment_of(bucket: &[u8], key: &[u8], segments: u32) -> u32 {
    (hash64(&[bucket, key]) % segments.max(1) as u64) as u32
}

/// The hash an object contributes to its leaf: of its key and its metadata (the version vector).
///
/// Tree version 2. Version 1 folded `hash64`'s two CRC lanes together as they were, and CRCs are
/// affine: the XOR of two lanes over the same bytes depends only on the lengths of the parts. Two
/// versions of an object whose metadata had the same length (a version vector whose counter went
/// from 1 to 2) hashed alike, so a replica that missed the update looked in sync. The lanes now
/// go through a 64-bit finalizer first, which every bit of both lanes reaches.
pub fn leaf_hash(bucket: &[u8], key: &[u8], metadata: &[u8]) -> u32 {
    let h = mix64(hash64(&[bucket, key, metadata]));
    (h ^ (h >> 32)) as u32
}

/// A 64-bit finalizer (xor-shift and multiply rounds, as in MurmurHash3's `fmix64`): a bijection
/// in which every input bit affects every output bit.
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A key of an AAE segment with the hash it contributes to its leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AaeKeyHash {
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    pub hash: u32,
}

/// A copy of a store's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AaeTree {
    leaves: Vec<u32>,
    branch_width: u32,
}

impl AaeTree {
    pub(crate) fn new(leaves: Vec<u32>, branch_width: u32) -> Self {
        AaeTree {
            leaves,
            branch_width,
        }
    }

    /// XOR of every leaf.
    pub fn root(&self) -> u32 {
        self.leaves.iter().fold(0, |a, b| a ^ b)
    }

    /// One value per branch: the XOR of its leaves.
    pub fn branches(&self) -> Vec<u32> {
        self.leaves
            .chunks(self.branch_width as usize)
            .map(|c| c.iter().fold(0, |a, b| a ^ b))
            .collect()
    }

    pub fn leaves(&self) -> &[u32] {
        &self.leaves
    }

    pub fn segment_count(&self) -> u32 {
        self.leaves.len() as u32
    }

    /// Segments whose leaves differ, found branch first.
    pub fn diff_segments(&self, other: &AaeTree) -> Vec<u32> {
        let w = self.branch_width as usize;
        let (mine, theirs) = (self.branches(), other.branches());
        let mut out = Vec::new();
        for (b, (x, y)) in mine.iter().zip(theirs.iter()).enumerate() {
            if x != y {
                for s in b * w..((b + 1) * w).min(self.leaves.len()) {
                    if self.leaves[s] != other.leaves.get(s).copied().unwrap_or(0) {
                        out.push(s as u32);
                    }
                }
            }
        }
        out
    }
}

/// The live tree and, during a rebuild, the changes made since the rebuild's snapshot.
pub(crate) struct AaeState {
    pub leaves: Vec<u32>,
    pub branch_width: u32,
    pub rebuild_delta: Option<Vec<u32>>,
    /// Why the tree cannot be served (being rebuilt after an unclean shutdown, or that rebuild
    /// failed); `None` when it is current.
    pub unavailable: Option<String>,
}

/// File holding the tree as of a clean close: `"LVAE" version:u32 segments:u32 branch_width:u32
/// sqn:u64 leaf:u32* crc:u32`. Valid only if the store's last SQN at the next open is `sqn`.
pub(crate) const TREE_FILE: &str = "AAE";
const TREE_MAGIC: &[u8; 4] = b"LVAE";
/// 2: `leaf_hash` changed (a version 1 file is rebuilt at open).
const TREE_VERSION: u32 = 2;

impl AaeState {
    pub(crate) fn new(segments: u32, branch_width: u32) -> Self {
        AaeState {
            leaves: vec![0; segments as usize],
            branch_width,
            rebuild_delta: None,
            unavailable: None,
        }
    }

    /// The tree file for a store whose last SQN is `sqn`.
    pub(crate) fn encode(&self, sqn: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(28 + self.leaves.len() * 4);
        out.extend_from_slice(TREE_MAGIC);
        crate::codec::put_u32(&mut out, TREE_VERSION);
        crate::codec::put_u32(&mut out, self.leaves.len() as u32);
        crate::codec::put_u32(&mut out, self.branch_width);
        crate::codec::put_u64(&mut out, sqn);
        for l in &self.leaves {
            crate::codec::put_u32(&mut out, *l);
        }
        crate::codec::seal(&mut out, 0);
        out
    }

    /// Decode a tree file: (sqn, state). Any damage or a shape other than (`segments`, `width`) is
    /// an error (the caller rebuilds).
    pub(crate) fn decode(buf: &[u8], segments: u32, width: u32) -> crate::Result<(u64, AaeState)> {
        let payload = crate::codec::unseal(buf, "AAE tree file")?;
        let mut r = crate::codec::Reader::new(payload, "AAE tree file");
        if r.raw(4)? != TREE_MAGIC || r.u32()? != TREE_VERSION {
            return Err(crate::Error::Corruption(
                "AAE tree file: bad magic or version".into(),
            ));
        }
        let (n, w, sqn) = (r.u32()?, r.u32()?, r.u64()?);
        if n != segments || w != width {
            return Err(crate::Error::Corruption(format!(
                "AAE tree file has {n} segments of width {w}; the config asks for {segments}/{width}"
            )));
        }
        let mut leaves = Vec::with_capacity(n as usize);
        for _ in 0..n {
            leaves.push(r.u32()?);
        }
        r.expect_end()?;
        let mut st = AaeState::new(segments, width);
        st.leaves = leaves;
        Ok((sqn, st))
    }

    pub(crate) fn segments(&self) -> u32 {
        self.leaves.len() as u32
    }

    /// Apply a write: XOR `delta` into `segment` of the live tree and of a running rebuild.
    pub(crate) fn xor(&mut self, segment: u32, delta: u32) {
        self.leaves[segment as usize] ^= delta;
        if let Some(d) = &mut self.rebuild_delta {
            d[segment as usize] ^= delta;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Versions of an object whose metadata has the same length (the common case: a version
    /// vector's counter moving on) must hash differently, or a stale replica looks in sync.
    /// Tree version 1's hash gave every one of these pairs the same leaf hash.
    #[test]
    fn same_length_metadata_hashes_differ() {
        let mut same = 0;
        for i in 0..1000u32 {
            let key = format!("k{i:04}");
            let a = leaf_hash(b"b", key.as_bytes(), &[1, 0, 0, 0, (i % 7) as u8]);
            let b = leaf_hash(b"b", key.as_bytes(), &[2, 0, 0, 0, (i % 7) as u8]);
            let other_key = leaf_hash(
                b"b",
                format!("x{i:04}").as_bytes(),
                &[1, 0, 0, 0, (i % 7) as u8],
            );
            same += usize::from(a == b) + usize::from(a == other_key);
        }
        assert!(same <= 1, "{same} of 2000 pairs hashed alike");
    }

    #[test]
    fn segments_spread_and_diff_finds_the_one_that_differs() {
        let n = 1024;
        let mut a = AaeState::new(n, 16);
        let mut b = AaeState::new(n, 16);
        let mut used = std::collections::HashSet::new();
        for i in 0..5000u32 {
            let k = i.to_le_bytes();
            let s = segment_of(b"b", &k, n);
            used.insert(s);
            a.xor(s, leaf_hash(b"b", &k, b"v1"));
            b.xor(s, leaf_hash(b"b", &k, b"v1"));
        }
        assert!(
            used.len() > 950,
            "5000 keys should touch nearly all 1024 segments, got {}",
            used.len()
        );
        let s = segment_of(b"b", b"odd", n);
        b.xor(s, leaf_hash(b"b", b"odd", b"v1"));
        let ta = AaeTree::new(a.leaves.clone(), 16);
        let tb = AaeTree::new(b.leaves.clone(), 16);
        assert_ne!(ta.root(), tb.root());
        assert_eq!(ta.diff_segments(&tb), vec![s]);
        assert_eq!(ta.branches().len(), 64);
    }
}
