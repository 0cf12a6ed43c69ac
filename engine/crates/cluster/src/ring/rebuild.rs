//! Which vnodes a member that lost its data rebuilds, and from where (pure; the node's side is
//! engine/crates/node/src/rebuild.rs).
//!
//! The replicas of a key whose own partition is `P` live in the vnodes `P, P+1, …, P+n_val-1`
//! (its primary preflist), so vnode `q` holds the keys of the `n_val` partitions `q-n_val+1 ..= q`.
//! Every other vnode that holds keys of one of those partitions is a *source* for `q`, for the
//! partitions the two share.

use std::collections::{BTreeMap, BTreeSet};

use crate::ring::claim::Claim;
use crate::ring::Partition;

/// The sources of vnode `q`: every other vnode sharing a preflist with it, with the key
/// partitions they share.
pub fn rebuild_sources(claim: &Claim, q: Partition) -> BTreeMap<Partition, BTreeSet<Partition>> {
    let r = claim.ring_size().get();
    let n = claim.n_val().min(r);
    let mut out: BTreeMap<Partition, BTreeSet<Partition>> = BTreeMap::new();
    for back in 0..n {
        let p = (q + r - back) % r;
        for i in 0..n {
            let v = (p + i) % r;
            if v != q {
                out.entry(v).or_default().insert(p);
            }
        }
    }
    out
}

/// The key partitions vnode `q` holds.
pub fn held_partitions(claim: &Claim, q: Partition) -> BTreeSet<Partition> {
    let r = claim.ring_size().get();
    (0..claim.n_val().min(r))
        .map(|back| (q + r - back) % r)
        .collect()
}

/// The vnodes `me` owns under `claim`: what it rebuilds after losing its data.
pub fn owned_vnodes(claim: &Claim, me: &str) -> Vec<Partition> {
    (0..claim.ring_size().get())
        .filter(|p| claim.owner(*p) == me)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::claim::ClaimMember;
    use crate::ring::{RingParams, RingSize};

    fn claim(ring: u32, n_val: u32, members: &[&str]) -> Claim {
        let members: Vec<ClaimMember> = members.iter().map(|m| ClaimMember::new(*m, "")).collect();
        Claim::initial(
            RingParams::new(RingSize::new(ring).unwrap(), n_val).unwrap(),
            &members,
        )
        .unwrap()
    }

    #[test]
    fn a_vnode_is_rebuilt_from_every_vnode_sharing_a_preflist() {
        let c = claim(16, 3, &["a", "b", "c", "d"]);
        let set = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        // Vnode 0 holds the keys of partitions 14, 15 and 0 (wrapping round the ring).
        assert_eq!(held_partitions(&c, 0), set(&[14, 15, 0]));
        let s = rebuild_sources(&c, 0);
        assert_eq!(
            s,
            BTreeMap::from([
                (14, set(&[14])),
                (15, set(&[14, 15])),
                (1, set(&[15, 0])),
                (2, set(&[0]))
            ])
        );
        // Every held partition is given by n_val - 1 sources.
        for q in 0..16 {
            let s = rebuild_sources(&c, q);
            for p in held_partitions(&c, q) {
                assert_eq!(
                    s.values().filter(|k| k.contains(&p)).count(),
                    2,
                    "vnode {q}, partition {p}"
                );
            }
            assert!(!s.contains_key(&q));
        }
        // n_val 1: nothing holds a copy.
        assert!(rebuild_sources(&claim(8, 1, &["a", "b"]), 3).is_empty());
    }

    #[test]
    fn a_member_rebuilds_the_vnodes_it_owns() {
        let c = claim(8, 2, &["a", "b"]);
        let a = owned_vnodes(&c, "a");
        let b = owned_vnodes(&c, "b");
        assert_eq!(a.len() + b.len(), 8);
        assert!(a.iter().all(|p| c.owner(*p) == "a") && b.iter().all(|p| c.owner(*p) == "b"));
        assert!(owned_vnodes(&c, "z").is_empty());
    }
}
