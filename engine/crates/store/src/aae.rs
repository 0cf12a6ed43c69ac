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

/// Leaves allocated on demand: `CHUNK` leaves at a time.
const CHUNK: usize = 256;

/// A tree's leaves, held a chunk of [`CHUNK`] leaves (1 KiB) at a time: a chunk no write ever
/// touched holds no memory and reads as zeros. An empty tree holds nothing; the first key
/// allocates the chunk table (8 bytes per chunk: 32 KiB at the default 1 Mi segments), and the
/// tree grows with the keys it holds to at most `4 × segments` bytes plus that table once every
/// chunk holds a key. What a tree answers (leaves, branches, root, diffs, the tree file) does not
/// depend on which chunks are allocated.
#[derive(Debug, Clone)]
pub(crate) struct Leaves {
    segments: u32,
    /// Empty until the first non-zero XOR, then one entry per chunk. The last chunk may reach
    /// past `segments`; its leaves there are never written and stay zero.
    chunks: Vec<Option<Box<[u32; CHUNK]>>>,
}

impl Leaves {
    pub(crate) fn new(segments: u32) -> Self {
        Leaves {
            segments,
            chunks: Vec::new(),
        }
    }

    pub(crate) fn segments(&self) -> u32 {
        self.segments
    }

    fn chunk(&self, i: usize) -> Option<&[u32; CHUNK]> {
        self.chunks.get(i).and_then(|c| c.as_deref())
    }

    pub(crate) fn get(&self, segment: u32) -> u32 {
        let s = segment as usize;
        self.chunk(s / CHUNK).map_or(0, |c| c[s % CHUNK])
    }

    /// XOR `delta` into `segment`, allocating its chunk if it is the first non-zero XOR there.
    pub(crate) fn xor(&mut self, segment: u32, delta: u32) {
        assert!(
            segment < self.segments,
            "AAE segment {segment} of {}",
            self.segments
        );
        if delta == 0 {
            return;
        }
        if self.chunks.is_empty() {
            self.chunks
                .resize_with((self.segments as usize).div_ceil(CHUNK), || None);
        }
        let s = segment as usize;
        let c = self.chunks[s / CHUNK].get_or_insert_with(|| Box::new([0; CHUNK]));
        c[s % CHUNK] ^= delta;
    }

    /// XOR every leaf of `other` (of the same size) into this one.
    pub(crate) fn xor_all(&mut self, other: &Leaves) {
        for (s, d) in other.allocated() {
            self.xor(s as u32, d);
        }
    }

    /// (segment, leaf) of every leaf in an allocated chunk, in order (the others are zero).
    fn allocated(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        let n = self.segments as usize;
        self.chunks.iter().enumerate().flat_map(move |(i, c)| {
            c.iter().flat_map(move |c| {
                let end = CHUNK.min(n - i * CHUNK);
                c[..end]
                    .iter()
                    .enumerate()
                    .map(move |(j, l)| (i * CHUNK + j, *l))
            })
        })
    }

    /// Every leaf in order, zeros included.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.segments).map(|s| self.get(s))
    }

    /// Bytes of memory the leaves hold (the chunk table and the allocated chunks).
    #[cfg(test)]
    pub(crate) fn memory_bytes(&self) -> usize {
        self.chunks.len() * std::mem::size_of::<Option<Box<[u32; CHUNK]>>>()
            + self.chunks.iter().flatten().count() * CHUNK * 4
    }
}

/// Equal when every leaf is: an allocated chunk of zeros equals one never allocated.
impl PartialEq for Leaves {
    fn eq(&self, other: &Self) -> bool {
        let zero = |c: &[u32; CHUNK]| c.iter().all(|l| *l == 0);
        self.segments == other.segments
            && (0..self.chunks.len().max(other.chunks.len())).all(|i| {
                match (self.chunk(i), other.chunk(i)) {
                    (Some(a), Some(b)) => a == b,
                    (Some(c), None) | (None, Some(c)) => zero(c),
                    (None, None) => true,
                }
            })
    }
}

impl Eq for Leaves {}

/// A copy of a store's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AaeTree {
    leaves: Leaves,
    branch_width: u32,
}

impl AaeTree {
    pub(crate) fn new(leaves: Leaves, branch_width: u32) -> Self {
        AaeTree {
            leaves,
            branch_width,
        }
    }

    /// XOR of every leaf.
    pub fn root(&self) -> u32 {
        self.leaves.allocated().fold(0, |a, (_, l)| a ^ l)
    }

    /// One value per branch: the XOR of its leaves.
    pub fn branches(&self) -> Vec<u32> {
        let w = self.branch_width.max(1) as usize;
        let mut out = vec![0; (self.leaves.segments as usize).div_ceil(w)];
        for (s, l) in self.leaves.allocated() {
            out[s / w] ^= l;
        }
        out
    }

    /// The leaf of `segment` (0 beyond the tree).
    pub fn leaf(&self, segment: u32) -> u32 {
        if segment < self.leaves.segments {
            self.leaves.get(segment)
        } else {
            0
        }
    }

    /// Every leaf, in segment order (`segment_count` values: 4 bytes each).
    pub fn leaves(&self) -> Vec<u32> {
        self.leaves.iter().collect()
    }

    pub fn segment_count(&self) -> u32 {
        self.leaves.segments
    }

    /// Segments whose leaves differ, found branch first.
    pub fn diff_segments(&self, other: &AaeTree) -> Vec<u32> {
        let w = self.branch_width.max(1);
        let (mine, theirs) = (self.branches(), other.branches());
        let mut out = Vec::new();
        for (b, (x, y)) in mine.iter().zip(theirs.iter()).enumerate() {
            if x != y {
                let b = b as u32;
                for s in b * w..((b + 1) * w).min(self.segment_count()) {
                    if self.leaf(s) != other.leaf(s) {
                        out.push(s);
                    }
                }
            }
        }
        out
    }
}

/// The live tree and, during a rebuild, the changes made since the rebuild's snapshot.
pub(crate) struct AaeState {
    pub leaves: Leaves,
    pub branch_width: u32,
    pub rebuild_delta: Option<Leaves>,
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
            leaves: Leaves::new(segments),
            branch_width,
            rebuild_delta: None,
            unavailable: None,
        }
    }

    /// The tree file for a store whose last SQN is `sqn`.
    pub(crate) fn encode(&self, sqn: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(28 + self.leaves.segments() as usize * 4);
        out.extend_from_slice(TREE_MAGIC);
        crate::codec::put_u32(&mut out, TREE_VERSION);
        crate::codec::put_u32(&mut out, self.leaves.segments());
        crate::codec::put_u32(&mut out, self.branch_width);
        crate::codec::put_u64(&mut out, sqn);
        for l in self.leaves.iter() {
            crate::codec::put_u32(&mut out, l);
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
        let mut st = AaeState::new(segments, width);
        for s in 0..n {
            st.leaves.xor(s, r.u32()?);
        }
        r.expect_end()?;
        Ok((sqn, st))
    }

    pub(crate) fn segments(&self) -> u32 {
        self.leaves.segments()
    }

    /// Apply a write: XOR `delta` into `segment` of the live tree and of a running rebuild.
    pub(crate) fn xor(&mut self, segment: u32, delta: u32) {
        self.leaves.xor(segment, delta);
        if let Some(d) = &mut self.rebuild_delta {
            d.xor(segment, delta);
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

    /// The tree as it was before leaves were allocated by chunk: one dense vector, with the
    /// branch, root and diff rules written out again. The chunked tree must answer the same.
    struct Dense {
        leaves: Vec<u32>,
        width: usize,
    }

    impl Dense {
        fn branches(&self) -> Vec<u32> {
            let xor = |c: &[u32]| c.iter().fold(0, |a, b| a ^ b);
            self.leaves.chunks(self.width).map(xor).collect()
        }

        fn diff(&self, other: &Dense) -> Vec<u32> {
            let (mine, theirs) = (self.branches(), other.branches());
            let mut out = Vec::new();
            for (b, _) in mine
                .iter()
                .zip(&theirs)
                .enumerate()
                .filter(|(_, (x, y))| x != y)
            {
                for s in b * self.width..((b + 1) * self.width).min(self.leaves.len()) {
                    if self.leaves[s] != other.leaves[s] {
                        out.push(s as u32);
                    }
                }
            }
            out
        }
    }

    fn both(segments: u32, width: u32, xors: &[(u32, u32)]) -> (AaeState, Dense) {
        let mut lazy = AaeState::new(segments, width);
        let mut dense = Dense {
            leaves: vec![0; segments as usize],
            width: width as usize,
        };
        for &(s, d) in xors {
            lazy.xor(s % segments, d);
            dense.leaves[(s % segments) as usize] ^= d;
        }
        (lazy, dense)
    }

    proptest::proptest! {
        /// Chunked and dense trees give the same leaves, branches, root, diffs and tree file for
        /// any sequence of XORs (some undoing earlier ones, so allocated chunks return to zero),
        /// at shapes whose branches are narrower, equal to and wider than a chunk, and a segment
        /// count that is not a multiple of the chunk.
        #[test]
        fn chunked_tree_answers_as_the_dense_one(
            shape in proptest::sample::select(vec![(4096u32, 256u32), (4096, 64), (2048, 1024), (1000, 1), (1000, 8)]),
            xa in proptest::collection::vec((0u32..5000, proptest::prelude::any::<u32>()), 0..300),
            xb in proptest::collection::vec((0u32..5000, proptest::prelude::any::<u32>()), 0..30),
            undo in 0usize..300,
        ) {
            let (n, w) = shape;
            // b starts as a, undoes some of a's XORs, then takes its own.
            let undo = undo.min(xa.len());
            let xb: Vec<_> = xa.iter().chain(&xa[..undo]).chain(&xb).copied().collect();
            let (la, da) = both(n, w, &xa);
            let (lb, db) = both(n, w, &xb);
            let (ta, tb) = (AaeTree::new(la.leaves.clone(), w), AaeTree::new(lb.leaves.clone(), w));
            proptest::prop_assert_eq!(ta.leaves(), da.leaves.clone());
            proptest::prop_assert_eq!(ta.branches(), da.branches());
            proptest::prop_assert_eq!(tb.branches(), db.branches());
            proptest::prop_assert_eq!(ta.root(), da.leaves.iter().fold(0, |a, b| a ^ b));
            proptest::prop_assert_eq!(ta.diff_segments(&tb), da.diff(&db));
            proptest::prop_assert_eq!(tb.diff_segments(&ta), db.diff(&da));
            proptest::prop_assert_eq!(ta == tb, da.leaves == db.leaves);
            // The file holds every leaf, as the dense tree wrote it, and reads back equal.
            let file = la.encode(7);
            let mut dense_file = Vec::new();
            for l in &da.leaves {
                crate::codec::put_u32(&mut dense_file, *l);
            }
            proptest::prop_assert_eq!(&file[24..24 + dense_file.len()], &dense_file[..]);
            let (sqn, back) = AaeState::decode(&file, n, w).unwrap();
            proptest::prop_assert_eq!(sqn, 7);
            proptest::prop_assert!(back.leaves == la.leaves);
            // A rebuild's delta folded in: the XOR of both trees, leaf by leaf.
            let mut sum = la.leaves.clone();
            sum.xor_all(&lb.leaves);
            let want: Vec<u32> = da.leaves.iter().zip(&db.leaves).map(|(a, b)| a ^ b).collect();
            proptest::prop_assert_eq!(AaeTree::new(sum, w).leaves(), want);
        }
    }

    /// A fresh tree holds nothing; a key allocates the chunk table and one chunk, not the tree.
    #[test]
    fn a_fresh_tree_holds_no_leaves() {
        let mut st = AaeState::new(DEFAULT_SEGMENTS, DEFAULT_BRANCH_WIDTH);
        assert_eq!(st.leaves.memory_bytes(), 0);
        st.xor(segment_of(b"b", b"k", DEFAULT_SEGMENTS), 0xdead_beef);
        let table = 4096 * 8; // the chunk table of 1 Mi segments
        assert_eq!(st.leaves.memory_bytes(), table + CHUNK * 4);
        for s in 0..DEFAULT_SEGMENTS {
            st.xor(s, 1);
        }
        assert_eq!(
            st.leaves.memory_bytes(),
            table + DEFAULT_SEGMENTS as usize * 4,
            "a full tree: 4 MiB of leaves and the table"
        );
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
