//! The coverage plan: which vnodes to ask so that every key-partition is answered exactly once.
//!
//! A key in key-partition `k` is stored on the vnodes of its preflist, `k, k+1, …, k+n_val-1`
//! (mod `ring_size`). So vnode `v` holds the keys of key-partitions `v-n_val+1 ..= v`: an *arc* of
//! `n_val` key-partitions ending at `v`. A plan picks arcs of vnodes whose owner is up so that
//! the arcs cover every key-partition that can be covered, and gives each picked vnode the
//! key-partitions it must answer for (its *filter*): the arcs may overlap, the filters do not.
//!
//! # Choice
//!
//! 1. **Fewest vnodes.** Covering a circle with equal arcs: fix the coverable key-partition `x`
//!    that the fewest up vnodes hold. Every plan picks one of those vnodes; for each choice
//!    `a0` the rest of the circle, cut open after `a0`'s arc, is a line, and a dynamic program
//!    over it gives the fewest further arcs. The best `a0` gives the optimum (tests compare
//!    with exhaustive search).
//! 2. **Spread over nodes.** Walking the line, among the arcs that keep the count minimal, take
//!    the one on the node with the fewest picks so far, then the one reaching furthest. Across
//!    the choices of `a0` (all with the fewest vnodes) the plan with the lowest largest
//!    per-node count wins, then the lowest sum of squared counts, then the fewest filtered
//!    vnodes, then the first `a0`.
//! 3. **Primaries only.** A fallback vnode holds only the writes taken while its primary was
//!    down, so it can never make a key-partition complete. A key-partition with all `n_val`
//!    vnodes on down nodes is `uncovered`; the fallbacks that would have taken its writes under
//!    the current down set are listed apart (`fallbacks`) for a caller that wants to add what
//!    they hold to an answer it reports as incomplete.
//!
//! No randomness and no hash-map order: the same claim, `n_val` and down set give the same plan.
//! Riak varies plans per request to spread load; a caller wanting that can rotate which of the
//! equal plans it uses, this function does not.

use std::collections::{BTreeMap, BTreeSet};

use crate::ring::claim::Claim;
use crate::ring::hash::partition_of;
use crate::ring::preflist::{targets, Role};
use crate::ring::{Partition, RingError, RingParams, RingSize};

/// Which of the key-partitions a vnode holds it must answer for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyFilter {
    /// All `n_val` key-partitions the vnode holds.
    All,
    /// Only these key-partitions (ascending, non-empty, a strict subset of the vnode's arc).
    Only(Vec<Partition>),
}

/// One vnode a coverage query asks, on the node that owns it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoverageVnode {
    pub node: String,
    /// The vnode's partition.
    pub vnode: Partition,
    pub filter: KeyFilter,
}

impl CoverageVnode {
    /// Whether a key of `key_partition` found on this vnode belongs in the answer.
    pub fn keeps(&self, key_partition: Partition) -> bool {
        match &self.filter {
            KeyFilter::All => true,
            KeyFilter::Only(ps) => ps.binary_search(&key_partition).is_ok(),
        }
    }

    /// Whether the vnode answers for this (bucket, key): what the vnode applies to each key it
    /// folds over.
    pub fn keeps_key(&self, bucket: &[u8], key: &[u8], ring_size: RingSize) -> bool {
        self.keeps(partition_of(bucket, key, ring_size))
    }
}

/// A fallback vnode that would have taken writes for uncovered key-partitions while their
/// primaries are down. What it holds is partial: only writes made during the outage, and only
/// those routed to it under the current down set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FallbackVnode {
    pub node: String,
    /// The (down) primary's vnode partition the fallback stands in for.
    pub vnode: Partition,
    pub primary: String,
    /// Uncovered key-partitions whose writes it took, ascending.
    pub key_partitions: Vec<Partition>,
}

/// The vnodes a coverage query asks, and what it cannot cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoveragePlan {
    pub ring_size: RingSize,
    pub n_val: u32,
    /// Picked vnodes in vnode order; their filters cover every coverable key-partition once.
    pub vnodes: Vec<CoverageVnode>,
    /// Key-partitions whose `n_val` vnodes are all on down nodes, ascending. An answer without
    /// them is incomplete and must say so.
    pub uncovered: Vec<Partition>,
    /// Partial stand-ins for the uncovered key-partitions (never counted as coverage).
    pub fallbacks: Vec<FallbackVnode>,
}

impl CoveragePlan {
    /// Every key-partition is covered by an up primary.
    pub fn is_complete(&self) -> bool {
        self.uncovered.is_empty()
    }

    /// The picked vnode answering for `key_partition`, if any.
    pub fn vnode_for(&self, key_partition: Partition) -> Option<&CoverageVnode> {
        let n = self.n_val;
        let r = self.ring_size.get();
        (0..n)
            .map(|i| (key_partition + i) % r)
            .filter_map(|v| self.vnodes.iter().find(|c| c.vnode == v))
            .find(|c| c.keeps(key_partition))
    }
}

/// Errors of coverage planning.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoverageError {
    #[error("coverage plan: {0}")]
    Ring(#[from] RingError),
}

/// How good a candidate plan is, lower is better: (vnodes, largest per-node count, sum of
/// squared per-node counts, filtered vnodes).
type Score = (usize, usize, usize, usize);

/// A chosen arc: a vnode and the key-partitions it answers for (ascending, contiguous on the
/// ring).
struct Pick {
    vnode: usize,
    keep: Vec<usize>,
}

/// The coverage plan for keys stored with `n_val` replicas on `claim` while the nodes in `down`
/// are down. `n_val` is the bucket's, which may differ from the claim's; it must fit the ring.
pub fn coverage_plan(
    claim: &Claim,
    n_val: u32,
    down: &BTreeSet<String>,
) -> Result<CoveragePlan, CoverageError> {
    let params = RingParams::new(claim.ring_size(), n_val)?;
    let r = claim.ring_size().len();
    let n = n_val as usize;
    let up: Vec<bool> = (0..r)
        .map(|v| !down.contains(claim.owner(v as Partition)))
        .collect();
    // Up vnodes holding each key-partition.
    let holders: Vec<usize> = (0..r)
        .map(|k| (0..n).filter(|i| up[(k + i) % r]).count())
        .collect();
    let uncovered: Vec<Partition> = (0..r)
        .filter(|&k| holders[k] == 0)
        .map(|k| k as Partition)
        .collect();

    let mut best: Option<(Score, Vec<Pick>)> = None;
    let x = (0..r)
        .filter(|&k| holders[k] > 0)
        .min_by_key(|&k| holders[k]);
    if let Some(x) = x {
        for i in 0..n {
            let a0 = (x + i) % r;
            if !up[a0] {
                continue;
            }
            let picks = plan_from(claim, &up, &holders, r, n, a0);
            let score = score(claim, n, &picks);
            if best.as_ref().is_none_or(|(s, _)| score < *s) {
                best = Some((score, picks));
            }
        }
    }
    let mut vnodes: Vec<CoverageVnode> = best
        .map(|(_, picks)| picks)
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let filter = if p.keep.len() == n {
                KeyFilter::All
            } else {
                let mut keep: Vec<Partition> = p.keep.iter().map(|&k| k as Partition).collect();
                keep.sort_unstable();
                KeyFilter::Only(keep)
            };
            CoverageVnode {
                node: claim.owner(p.vnode as Partition).to_string(),
                vnode: p.vnode as Partition,
                filter,
            }
        })
        .collect();
    vnodes.sort_by_key(|v| v.vnode);

    let fallbacks = fallbacks_for(claim, params, down, &uncovered)?;
    Ok(CoveragePlan {
        ring_size: claim.ring_size(),
        n_val,
        vnodes,
        uncovered,
        fallbacks,
    })
}

/// The best plan that picks vnode `a0` (with its whole arc). Line position `j` is key-partition
/// (and vnode) `a0 + 1 + j`; the line holds the `r - n` key-partitions outside `a0`'s arc.
fn plan_from(
    claim: &Claim,
    up: &[bool],
    holders: &[usize],
    r: usize,
    n: usize,
    a0: usize,
) -> Vec<Pick> {
    let at = |j: usize| (a0 + 1 + j) % r;
    let line = r - n;
    // Vnodes at line positions i ..= i+n-1 hold position i; the last is at most r-2, so a0 (at
    // r-1) is never among them and no vnode appears twice.
    let candidates = |i: usize| (i..=(i + n - 1).min(r - 2)).filter(|&p| up[at(p)]);
    // fewest[i]: fewest arcs covering the coverable positions i.. of the line.
    let mut fewest = vec![0usize; line + 1];
    for i in (0..line).rev() {
        fewest[i] = if holders[at(i)] == 0 {
            fewest[i + 1]
        } else {
            1 + candidates(i)
                .map(|p| fewest[(p + 1).min(line)])
                .min()
                .expect("a coverable key-partition has an up vnode")
        };
    }
    let mut load: BTreeMap<&str, usize> = BTreeMap::new();
    *load.entry(claim.owner(a0 as Partition)).or_default() += 1;
    let mut picks = vec![Pick {
        vnode: a0,
        keep: (0..n).map(|i| (a0 + r - i) % r).collect(),
    }];
    let mut i = 0;
    while i < line {
        if holders[at(i)] == 0 {
            i += 1;
            continue;
        }
        let p = candidates(i)
            .filter(|&p| fewest[(p + 1).min(line)] + 1 == fewest[i])
            .min_by_key(|&p| {
                let node = claim.owner(at(p) as Partition);
                (load.get(node).copied().unwrap_or(0), std::cmp::Reverse(p))
            })
            .expect("the dynamic program found an arc");
        *load.entry(claim.owner(at(p) as Partition)).or_default() += 1;
        // Positions before i are covered already; positions i..=p are coverable (an up arc
        // holds them), those past the line belong to a0.
        let end = p.min(line - 1);
        picks.push(Pick {
            vnode: at(p),
            keep: (i..=end).map(at).collect(),
        });
        i = end + 1;
    }
    picks
}

fn score(claim: &Claim, n: usize, picks: &[Pick]) -> Score {
    let mut load: BTreeMap<&str, usize> = BTreeMap::new();
    for p in picks {
        *load.entry(claim.owner(p.vnode as Partition)).or_default() += 1;
    }
    (
        picks.len(),
        load.values().copied().max().unwrap_or(0),
        load.values().map(|c| c * c).sum(),
        picks.iter().filter(|p| p.keep.len() < n).count(),
    )
}

/// The fallbacks that take the writes of each uncovered key-partition under `down`.
fn fallbacks_for(
    claim: &Claim,
    params: RingParams,
    down: &BTreeSet<String>,
    uncovered: &[Partition],
) -> Result<Vec<FallbackVnode>, RingError> {
    if uncovered.is_empty() {
        return Ok(Vec::new());
    }
    // The preflist functions use the claim's n_val; rebuild the claim for the bucket's.
    let owners: Vec<&str> = claim.owners().collect();
    let c = Claim::from_owners(params, claim.members(), &owners)?;
    let mut by_vnode: BTreeMap<(Partition, String, String), Vec<Partition>> = BTreeMap::new();
    for &k in uncovered {
        for t in targets(&c, k, down)?.targets {
            if let Role::Fallback { primary } = t.role {
                by_vnode
                    .entry((t.partition, t.node, primary))
                    .or_default()
                    .push(k);
            }
        }
    }
    Ok(by_vnode
        .into_iter()
        .map(|((vnode, node, primary), key_partitions)| FallbackVnode {
            node,
            vnode,
            primary,
            key_partitions,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::claim::ClaimMember;

    /// One owner per character: "abcd" is a ring of 4 owned by a, b, c, d.
    fn claim(owners: &str, n: u32) -> Claim {
        let names: Vec<String> = owners.chars().map(|c| c.to_string()).collect();
        let mut members: Vec<ClaimMember> = names
            .iter()
            .map(|n| ClaimMember::new(n.clone(), ""))
            .collect();
        members.sort();
        members.dedup();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let params = RingParams::new(RingSize::new(names.len() as u32).unwrap(), n).unwrap();
        Claim::from_owners(params, &members, &refs).unwrap()
    }

    /// Whether vnode `v` holds key-partition `k` (n_val `n`, ring of `r`).
    fn holds(v: Partition, k: Partition, n: u32, r: u32) -> bool {
        (0..n).any(|i| (k + i) % r == v)
    }

    fn down(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Shorthand: "a3" = vnode 3 on a, whole arc; "a3[1,2]" = only key-partitions 1 and 2.
    fn show(p: &CoveragePlan) -> Vec<String> {
        p.vnodes
            .iter()
            .map(|v| match &v.filter {
                KeyFilter::All => format!("{}{}", v.node, v.vnode),
                KeyFilter::Only(ks) => format!("{}{}{ks:?}", v.node, v.vnode),
            })
            .collect()
    }

    #[test]
    fn plan_table() {
        // (owners, n_val, down, plan, uncovered)
        type Case<'a> = (&'a str, u32, &'a [&'a str], &'a [&'a str], &'a [Partition]);
        let cases: &[Case] = &[
            // 8 partitions, n 2: four arcs of two tile the ring.
            ("abcdabcd", 2, &[], &["a0", "c2", "a4", "c6"], &[]),
            // n 3: 8 = 3 + 3 + 2, one arc filtered; spread over three nodes.
            ("abcdabcd", 3, &[], &["a0", "d3", "c6[4, 5]"], &[]),
            // n 1: every vnode, each its own key-partition.
            ("abab", 1, &[], &["a0", "b1", "a2", "b3"], &[]),
            // n 1 with b down: b's key-partitions cannot be covered.
            ("abab", 1, &["b"], &["a0", "a2"], &[1, 3]),
            // n = ring: any one vnode holds everything.
            ("abcd", 4, &[], &["a0"], &[]),
            // n 2, a down: vnodes 0 and 4 gone; the arcs of b, c, d still cover all.
            ("abcdabcd", 2, &["a"], &["b1", "d3", "b5", "d7"], &[]),
            // n 2, a and b down: key-partition 0 (vnodes 0, 1) and 4 (4, 5) are lost.
            (
                "abcdabcd",
                2,
                &["a", "b"],
                &["c2", "d3[3]", "c6", "d7[7]"],
                &[0, 4],
            ),
            // Everything down.
            ("abcd", 2, &["a", "b", "c", "d"], &[], &[0, 1, 2, 3]),
        ];
        for &(owners, n, d, want, lost) in cases {
            let c = claim(owners, n);
            let p = coverage_plan(&c, n, &down(d)).unwrap();
            assert_eq!(show(&p), want, "{owners} n={n} down {d:?}");
            assert_eq!(p.uncovered, lost, "{owners} n={n} down {d:?}");
            assert_eq!(p.is_complete(), lost.is_empty());
        }
    }

    #[test]
    fn vnode_for_finds_the_one_answering() {
        let c = claim("abcdabcd", 3);
        let p = coverage_plan(&c, 3, &BTreeSet::new()).unwrap();
        for k in 0..8 {
            let v = p.vnode_for(k).unwrap();
            assert!(v.keeps(k));
            assert!(holds(v.vnode, k, 3, 8));
            let answering = p
                .vnodes
                .iter()
                .filter(|v| holds(v.vnode, k, 3, 8) && v.keeps(k));
            assert_eq!(answering.count(), 1);
        }
        let p = coverage_plan(&c, 1, &down(&["a"])).unwrap();
        assert!(p.vnode_for(0).is_none());
        assert!(p.vnode_for(1).is_some());
    }

    #[test]
    fn bucket_n_val_may_differ_from_the_claims_but_must_fit_the_ring() {
        let c = claim("abcd", 3);
        assert_eq!(
            coverage_plan(&c, 1, &BTreeSet::new()).unwrap().vnodes.len(),
            4
        );
        assert_eq!(
            coverage_plan(&c, 5, &BTreeSet::new()).unwrap_err(),
            CoverageError::Ring(RingError::NValLargerThanRing {
                n_val: 5,
                ring_size: RingSize::new(4).unwrap()
            })
        );
        assert!(coverage_plan(&c, 0, &BTreeSet::new()).is_err());
    }

    #[test]
    fn uncovered_key_partitions_list_their_fallbacks() {
        // n 2, a and b down: key-partition 0 lives on vnodes 0 (a) and 1 (b). Its writes went to
        // fallbacks walking on from partition 2: c for vnode 0, d for vnode 1.
        let c = claim("abcdabcd", 2);
        let p = coverage_plan(&c, 2, &down(&["a", "b"])).unwrap();
        let got: Vec<(String, Partition, String, Vec<Partition>)> = p
            .fallbacks
            .iter()
            .map(|f| {
                (
                    f.node.clone(),
                    f.vnode,
                    f.primary.clone(),
                    f.key_partitions.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("c".into(), 0, "a".into(), vec![0]),
                ("d".into(), 1, "b".into(), vec![0]),
                ("c".into(), 4, "a".into(), vec![4]),
                ("d".into(), 5, "b".into(), vec![4]),
            ]
        );
        // Fallbacks never count as coverage.
        assert_eq!(p.uncovered, vec![0, 4]);
    }

    #[test]
    fn keeps_key_applies_the_filter_to_the_keys_partition() {
        let c = claim("abcdabcd", 3);
        let p = coverage_plan(&c, 3, &BTreeSet::new()).unwrap();
        let rs = c.ring_size();
        for i in 0..200u32 {
            let key = i.to_be_bytes();
            let k = partition_of(b"b", &key, rs);
            // Of the vnodes that hold the key, exactly one keeps it.
            let keeping = p
                .vnodes
                .iter()
                .filter(|v| holds(v.vnode, k, 3, 8) && v.keeps_key(b"b", &key, rs));
            assert_eq!(keeping.count(), 1, "key-partition {k}");
        }
    }
}
