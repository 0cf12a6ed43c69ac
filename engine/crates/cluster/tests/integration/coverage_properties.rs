//! Property tests of coverage plans, the merge of sorted streams and continuation tokens.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;

use levee_cluster::{
    coverage_plan, merge_sorted, query_hash, Claim, ClaimMember, Continuation, ContinuationError,
    CoveragePlan, IndexEntry, KeyFilter, Merge, MergeStep, RingParams, RingSize,
};
use proptest::prelude::*;

/// A claim of `r` partitions with arbitrary owners among `m` members (not necessarily balanced or
/// spaced: the plan must not rely on the claim's goals).
fn claim(r: u32, n: u32, m: usize, owner_picks: &[usize]) -> Claim {
    let members: Vec<ClaimMember> = (0..m)
        .map(|i| ClaimMember::new(format!("m{i}"), ""))
        .collect();
    let names: Vec<String> = (0..r as usize)
        .map(|p| format!("m{}", owner_picks[p] % m))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let params = RingParams::new(RingSize::new(r).unwrap(), n).unwrap();
    Claim::from_owners(params, &members, &refs).unwrap()
}

fn down_set(m: usize, mask: u16) -> BTreeSet<String> {
    (0..m)
        .filter(|i| mask >> i & 1 == 1)
        .map(|i| format!("m{i}"))
        .collect()
}

/// Vnodes holding key-partition `k`.
fn holders(k: u32, n: u32, r: u32) -> impl Iterator<Item = u32> {
    (0..n).map(move |i| (k + i) % r)
}

/// The fewest up vnodes covering every coverable key-partition, by exhaustive search.
fn fewest_by_search(c: &Claim, n: u32, down: &BTreeSet<String>) -> usize {
    let r = c.ring_size().get();
    let up: Vec<u32> = (0..r).filter(|&v| !down.contains(c.owner(v))).collect();
    let need: Vec<u32> = (0..r)
        .filter(|&k| holders(k, n, r).any(|v| up.contains(&v)))
        .collect();
    (0..=up.len())
        .find(|&size| {
            // Any subset of `up` of this size covering `need`?
            let mut found = false;
            let total = 1u32 << up.len();
            for mask in 0..total {
                if mask.count_ones() as usize != size {
                    continue;
                }
                let picked: Vec<u32> = (0..up.len())
                    .filter(|i| mask >> i & 1 == 1)
                    .map(|i| up[i])
                    .collect();
                if need
                    .iter()
                    .all(|&k| holders(k, n, r).any(|v| picked.contains(&v)))
                {
                    found = true;
                    break;
                }
            }
            found
        })
        .expect("all up vnodes cover what is coverable")
}

/// Checks a plan; returns an error message on the first violation.
fn check_plan(c: &Claim, n: u32, down: &BTreeSet<String>, p: &CoveragePlan) -> Result<(), String> {
    let r = c.ring_size().get();
    for v in &p.vnodes {
        if down.contains(&v.node) || c.owner(v.vnode) != v.node {
            return Err(format!(
                "vnode {} on {} is not an up primary",
                v.vnode, v.node
            ));
        }
        if let KeyFilter::Only(ks) = &v.filter {
            if ks.is_empty() || ks.len() >= n as usize {
                return Err(format!(
                    "vnode {}: filter {ks:?} is empty or not narrower",
                    v.vnode
                ));
            }
            if !ks.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("vnode {}: filter {ks:?} not ascending", v.vnode));
            }
            if let Some(k) = ks
                .iter()
                .find(|&&k| !holders(k, n, r).any(|h| h == v.vnode))
            {
                return Err(format!(
                    "vnode {}: filter keeps {k}, which it does not hold",
                    v.vnode
                ));
            }
        }
    }
    let vnodes: BTreeSet<u32> = p.vnodes.iter().map(|v| v.vnode).collect();
    if vnodes.len() != p.vnodes.len() {
        return Err("a vnode picked twice".into());
    }
    for k in 0..r {
        let answering = p
            .vnodes
            .iter()
            .filter(|v| holders(k, n, r).any(|h| h == v.vnode) && v.keeps(k))
            .count();
        let coverable = holders(k, n, r).any(|v| !down.contains(c.owner(v)));
        let uncovered = p.uncovered.contains(&k);
        match (coverable, answering, uncovered) {
            (true, 1, false) | (false, 0, true) => {}
            _ => {
                return Err(format!(
                    "key-partition {k}: coverable {coverable}, answered by {answering}, listed uncovered {uncovered}"
                ))
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every coverable key-partition is answered by exactly one picked vnode (so filters never
    /// drop one), only up primaries are picked, and exactly the key-partitions whose vnodes are
    /// all down are reported uncovered.
    #[test]
    fn every_partition_is_covered_exactly_once(
        r in prop::sample::select(vec![1u32, 2, 4, 8, 16, 64, 256]),
        n in 1u32..=6,
        m in 1usize..=9,
        owners in prop::collection::vec(0usize..9, 256),
        mask in any::<u16>(),
    ) {
        prop_assume!(n <= r);
        let c = claim(r, n, m, &owners);
        let down = down_set(m, mask);
        let p = coverage_plan(&c, n, &down).unwrap();
        if let Err(e) = check_plan(&c, n, &down, &p) {
            return Err(TestCaseError::fail(format!("{e}\nplan {p:?}")));
        }
        prop_assert_eq!(p.is_complete(), p.uncovered.is_empty());
        // Fallbacks stand in only for uncovered key-partitions, on up nodes.
        for f in &p.fallbacks {
            prop_assert!(!down.contains(&f.node));
            prop_assert!(down.contains(&f.primary));
            prop_assert!(f.key_partitions.iter().all(|k| p.uncovered.contains(k)));
        }
        // With nothing down, the plan is ⌈r/n⌉ vnodes (every arc is available).
        if down.is_empty() {
            prop_assert_eq!(p.vnodes.len(), r.div_ceil(n) as usize);
        }
    }

    /// The plan uses the fewest vnodes any exact cover can (exhaustive search on small rings).
    #[test]
    fn the_plan_uses_the_fewest_vnodes(
        r in prop::sample::select(vec![4u32, 8, 16]),
        n in 1u32..=5,
        m in 1usize..=6,
        owners in prop::collection::vec(0usize..6, 16),
        mask in any::<u16>(),
    ) {
        prop_assume!(n <= r);
        let c = claim(r, n, m, &owners);
        let down = down_set(m, mask);
        let p = coverage_plan(&c, n, &down).unwrap();
        prop_assert_eq!(p.vnodes.len(), fewest_by_search(&c, n, &down), "plan {:?}", p);
    }

    /// The same inputs give the same plan, whatever else was computed in between and whatever
    /// the order the members were given in.
    #[test]
    fn the_plan_is_deterministic(
        r in prop::sample::select(vec![8u32, 64]),
        n in 1u32..=4,
        m in 1usize..=8,
        mask in any::<u16>(),
    ) {
        let mut members: Vec<ClaimMember> = (0..m).map(|i| ClaimMember::new(format!("m{i}"), "")).collect();
        let params = RingParams::new(RingSize::new(r).unwrap(), n).unwrap();
        let c1 = Claim::initial(params, &members).unwrap();
        members.reverse();
        let c2 = Claim::initial(params, &members).unwrap();
        let down = down_set(m, mask);
        let p1 = coverage_plan(&c1, n, &down).unwrap();
        let _other = coverage_plan(&c1, 1, &BTreeSet::new()).unwrap();
        prop_assert_eq!(&p1, &coverage_plan(&c1, n, &down).unwrap());
        prop_assert_eq!(&p1, &coverage_plan(&c2, n, &down).unwrap());
    }
}

/// A spaced claim with nothing down: the plan spreads over nodes as evenly as ⌈r/n⌉ vnodes
/// allow.
#[test]
fn plans_spread_over_nodes() {
    for (r, n, m) in [
        (64u32, 3u32, 4usize),
        (64, 3, 5),
        (64, 2, 3),
        (256, 3, 8),
        (64, 3, 16),
    ] {
        let members: Vec<ClaimMember> = (0..m)
            .map(|i| ClaimMember::new(format!("m{i:02}"), ""))
            .collect();
        let c = Claim::initial(
            RingParams::new(RingSize::new(r).unwrap(), n).unwrap(),
            &members,
        )
        .unwrap();
        let p = coverage_plan(&c, n, &BTreeSet::new()).unwrap();
        let mut per_node = std::collections::BTreeMap::<&str, usize>::new();
        for v in &p.vnodes {
            *per_node.entry(v.node.as_str()).or_default() += 1;
        }
        let max = per_node.values().max().copied().unwrap();
        let ideal = p.vnodes.len().div_ceil(m);
        assert!(max <= ideal + 1, "r={r} n={n} m={m}: {per_node:?}");
        assert_eq!(
            per_node.len(),
            m.min(p.vnodes.len()),
            "r={r} n={n} m={m}: {per_node:?}"
        );
    }
}

/// CRC-32C (Castagnoli), bitwise: the checksum the formats end with.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn entry() -> impl Strategy<Value = IndexEntry> {
    (
        prop::collection::vec(0u8..3, 0..3),
        prop::collection::vec(0u8..4, 0..3),
    )
        .prop_map(|(t, k)| IndexEntry::new(t, k))
}

/// Streams that share entries: each entry goes to the streams picked by its mask.
fn streams() -> impl Strategy<Value = (Vec<Vec<IndexEntry>>, BTreeSet<IndexEntry>)> {
    (1usize..=5, prop::collection::vec((entry(), 1u8..32), 0..40)).prop_map(|(k, es)| {
        let mut streams: Vec<BTreeSet<IndexEntry>> = vec![BTreeSet::new(); k];
        let mut all = BTreeSet::new();
        for (e, mask) in es {
            for (i, s) in streams.iter_mut().enumerate() {
                if mask >> (i % 5) & 1 == 1 {
                    s.insert(e.clone());
                }
            }
            if (0..k).any(|i| mask >> (i % 5) & 1 == 1) {
                all.insert(e);
            }
        }
        (
            streams
                .into_iter()
                .map(|s| s.into_iter().collect())
                .collect(),
            all,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Fed in random chunks, the merge emits the union of the streams in (term, key) order,
    /// each entry once.
    #[test]
    fn merge_is_the_sorted_union_without_duplicates(
        (streams, all) in streams(),
        chunks in prop::collection::vec(1usize..4, 64),
    ) {
        let k = streams.len();
        let mut m = Merge::new(k, None, None);
        let mut next = vec![0usize; k];
        let mut out = Vec::new();
        let mut c = chunks.iter().cycle();
        loop {
            match m.step() {
                MergeStep::Entry(e) => out.push(e),
                MergeStep::Need(need) => {
                    // Feed the first starved stream a chunk, or end it.
                    let i = need[0];
                    let end = (next[i] + c.next().unwrap()).min(streams[i].len());
                    if next[i] == streams[i].len() {
                        m.end(i).unwrap();
                    } else {
                        m.push(i, streams[i][next[i]..end].iter().cloned()).unwrap();
                        next[i] = end;
                    }
                }
                MergeStep::Done { continuation } => {
                    prop_assert_eq!(continuation, None);
                    break;
                }
            }
        }
        let want: Vec<IndexEntry> = all.into_iter().collect();
        prop_assert_eq!(out, want);
    }

    /// Paging with max_results and the continuation yields the whole answer once, in order,
    /// each page at most max_results.
    #[test]
    fn pages_resume_where_the_last_stopped(
        (streams, all) in streams(),
        max in 1usize..7,
    ) {
        let mut after = None;
        let mut out = Vec::new();
        for _ in 0..=all.len() + 1 {
            let page = merge_sorted(streams.clone(), after.clone(), NonZeroUsize::new(max)).unwrap();
            prop_assert!(page.entries.len() <= max);
            out.extend(page.entries);
            after = page.continuation;
            if after.is_none() {
                break;
            }
        }
        prop_assert!(after.is_none(), "paging did not end");
        let want: Vec<IndexEntry> = all.into_iter().collect();
        prop_assert_eq!(out, want);
    }

    /// A token decodes to itself, resumes its own query and is refused by any other.
    #[test]
    fn tokens_round_trip_and_bind_their_query(
        fields in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 0..4),
        other in prop::collection::vec(any::<u8>(), 0..8),
        ring in any::<u64>(),
        term in prop::collection::vec(any::<u8>(), 0..40),
        key in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        let q = query_hash(b"index", &refs);
        let mut refs2 = refs.clone();
        refs2.push(&other);
        let q2 = query_hash(b"index", &refs2);
        let t = Continuation::new(q, ring, IndexEntry::new(term, key)).unwrap();
        let b = t.encode();
        prop_assert_eq!(&Continuation::decode(&b).unwrap(), &t);
        prop_assert_eq!(&Continuation::resume(&b, q, ring).unwrap(), t.after());
        prop_assert_eq!(Continuation::resume(&b, q2, ring), Err(ContinuationError::OtherQuery));
        let is_ring_changed = matches!(
            Continuation::resume(&b, q, ring.wrapping_add(1)),
            Err(ContinuationError::RingChanged { .. })
        );
        prop_assert!(is_ring_changed);
    }

    /// Any bytes decode to a token or a typed error, never a panic; a valid token with one
    /// byte changed is refused.
    #[test]
    fn token_decoding_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
        at in any::<usize>(),
        flip in 1u8..=255,
    ) {
        let _ = Continuation::decode(&bytes);
        let mut prefixed = b"Q\x01".to_vec();
        prefixed.extend_from_slice(&bytes);
        let _ = Continuation::decode(&prefixed);
        // Random bodies with a valid header and checksum reach the parser.
        let crc = crc32c(&prefixed);
        prefixed.extend_from_slice(&crc.to_le_bytes());
        let _ = Continuation::decode(&prefixed);
        let mut b = Continuation::new(1, 2, IndexEntry::new(*b"term", bytes.clone())).unwrap().encode();
        let i = at % b.len();
        b[i] ^= flip;
        prop_assert!(Continuation::decode(&b).is_err());
    }
}
