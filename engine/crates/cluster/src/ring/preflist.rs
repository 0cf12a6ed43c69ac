//! Preflists: where the `n_val` replicas of a key live, and where they go while owners are down.
//!
//! The *primary preflist* of a key in partition `p` is partitions `p, p+1, …, p+n_val-1` (mod
//! `ring_size`) with their owners. When some of those owners are down, each down primary gets a
//! *fallback*: walking on round the ring from `p+n_val`, the owner of the next partition that is
//! up and not already in the preflist (as a primary, up or down, or as an earlier fallback). The
//! fallback holds the down primary's partition for it (hinted handoff) and hands it back when it
//! returns. (A member that owns no partition — more members than partitions — is never reached
//! by the walk, so never a fallback.) Skipping nodes already in the preflist is what keeps the `n_val` copies on `n_val`
//! distinct nodes — Riak's fallback choice does not, so it can put two copies on one node.

use std::collections::BTreeSet;

use super::claim::Claim;
use super::hash::partition_of;
use super::{Partition, RingError};

/// A partition and the member that owns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    pub partition: Partition,
    pub node: String,
}

/// Why a node is asked to hold a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The node owns the partition.
    Primary,
    /// The node stands in for `primary`, which is down, and must hand the data back.
    Fallback { primary: String },
}

/// One replica of a request: the partition it is for, the node to send it to, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub partition: Partition,
    pub node: String,
    pub role: Role,
}

/// Where a request's replicas go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Targets {
    /// Up primaries and fallbacks, in preflist order (a fallback takes its primary's place).
    pub targets: Vec<Target>,
    /// Down primaries no node could stand in for (fewer nodes up than `n_val`).
    pub uncovered: Vec<Replica>,
}

impl Targets {
    pub fn primaries(&self) -> usize {
        self.targets
            .iter()
            .filter(|t| t.role == Role::Primary)
            .count()
    }
}

fn check(claim: &Claim, partition: Partition) -> Result<(), RingError> {
    if partition >= claim.ring_size().get() {
        return Err(RingError::NoSuchPartition {
            partition,
            ring_size: claim.ring_size(),
        });
    }
    Ok(())
}

/// The `n_val` partitions from `partition` on, with their owners.
pub fn primary_preflist(claim: &Claim, partition: Partition) -> Result<Vec<Replica>, RingError> {
    check(claim, partition)?;
    let r = claim.ring_size().get();
    Ok((0..claim.n_val())
        .map(|i| {
            let p = (partition + i) % r;
            Replica {
                partition: p,
                node: claim.owner(p).to_string(),
            }
        })
        .collect())
}

/// The primary preflist of a (bucket, key).
pub fn preflist_of_key(claim: &Claim, bucket: &[u8], key: &[u8]) -> Vec<Replica> {
    primary_preflist(claim, partition_of(bucket, key, claim.ring_size()))
        .expect("partition_of stays inside the ring")
}

/// Where the replicas of the preflist starting at `partition` go while the nodes in `down` are
/// down.
pub fn targets(
    claim: &Claim,
    partition: Partition,
    down: &BTreeSet<String>,
) -> Result<Targets, RingError> {
    targets_n(claim, partition, claim.n_val(), down)
}

/// [`targets`] for a preflist of the first `n_val` of the claim's `n_val` partitions (a bucket
/// type with fewer replicas than the ring is laid out for). `n_val` above the claim's is an error.
pub fn targets_n(
    claim: &Claim,
    partition: Partition,
    n_val: u32,
    down: &BTreeSet<String>,
) -> Result<Targets, RingError> {
    if n_val == 0 || n_val > claim.n_val() {
        return Err(RingError::PreflistLongerThanClaim {
            n_val,
            claim_n_val: claim.n_val(),
        });
    }
    let mut primaries = primary_preflist(claim, partition)?;
    primaries.truncate(n_val as usize);
    let r = claim.ring_size().get();
    let mut taken: BTreeSet<&str> = primaries.iter().map(|p| claim.owner(p.partition)).collect();
    // Candidate fallbacks: owners after the preflist, in ring order.
    let mut next = (n_val..r).map(|i| claim.owner((partition + i) % r));
    let mut out = Targets {
        targets: Vec::with_capacity(primaries.len()),
        uncovered: Vec::new(),
    };
    for p in primaries {
        if !down.contains(&p.node) {
            out.targets.push(Target {
                partition: p.partition,
                node: p.node,
                role: Role::Primary,
            });
            continue;
        }
        match next.find(|n| !down.contains(*n) && !taken.contains(n)) {
            Some(f) => {
                taken.insert(f);
                out.targets.push(Target {
                    partition: p.partition,
                    node: f.to_string(),
                    role: Role::Fallback { primary: p.node },
                });
            }
            None => out.uncovered.push(p),
        }
    }
    Ok(out)
}

/// Where to keep a *hint* of each replica in `missed` (primaries of the preflist at `partition`
/// that did not get a write: uncovered by [`targets_n`], or unreachable when written): walking on
/// round the ring from `partition + n_val`, the owner of the next partition that is up, is not
/// `missed`'s own node, and holds no hint yet — a node that already holds another replica of the
/// key may be chosen. A hint is not a replica: it counts toward no quorum, and its holder hands
/// it to the primary when that returns (hinted handoff). It keeps a write that only `w` of `n_val`
/// replicas took from having only `w` copies while a primary is down. `None` for a replica no
/// node can hold (every other node down).
pub fn hint_holders(
    claim: &Claim,
    partition: Partition,
    n_val: u32,
    down: &BTreeSet<String>,
    missed: &[Replica],
) -> Vec<Option<Target>> {
    let r = claim.ring_size().get();
    let mut holding: BTreeSet<&str> = BTreeSet::new();
    missed
        .iter()
        .map(|m| {
            let holder = (n_val..n_val + r)
                .map(|i| claim.owner((partition + i) % r))
                .find(|n| *n != m.node && !down.contains(*n) && !holding.contains(n))
                .or_else(|| {
                    // Fewer nodes up than hints: one node may hold several.
                    (n_val..n_val + r)
                        .map(|i| claim.owner((partition + i) % r))
                        .find(|n| *n != m.node && !down.contains(*n))
                })?;
            holding.insert(holder);
            Some(Target {
                partition: m.partition,
                node: holder.to_string(),
                role: Role::Fallback {
                    primary: m.node.clone(),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::claim::ClaimMember;
    use crate::ring::{RingParams, RingSize};

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

    fn down(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// Shorthand: "a" = primary a, "c>a" = c stands in for a.
    fn show(t: &Targets) -> Vec<String> {
        t.targets
            .iter()
            .map(|t| match &t.role {
                Role::Primary => t.node.clone(),
                Role::Fallback { primary } => format!("{}>{primary}", t.node),
            })
            .collect()
    }

    #[test]
    fn preflists_wrap_round_the_ring() {
        let c = claim("abcdabcd", 3);
        let p: Vec<_> = primary_preflist(&c, 6)
            .unwrap()
            .into_iter()
            .map(|r| (r.partition, r.node))
            .collect();
        assert_eq!(
            p,
            [(6, "c".into()), (7, "d".into()), (0, "a".into())].to_vec()
        );
        assert_eq!(
            primary_preflist(&c, 8).unwrap_err(),
            RingError::NoSuchPartition {
                partition: 8,
                ring_size: RingSize::new(8).unwrap()
            }
        );
    }

    #[test]
    fn fallback_table() {
        // ring "abcdeabc" (8 partitions), n_val 3; preflist at 0 is a, b, c.
        let c = claim("abcdeabc", 3);
        let cases: &[(&[&str], &[&str], usize)] = &[
            (&[], &["a", "b", "c"], 0),
            // b down: the next node after the preflist is d.
            (&["b"], &["a", "d>b", "c"], 0),
            // a and c down: d, then e.
            (&["a", "c"], &["d>a", "b", "e>c"], 0),
            // d down too: the walk skips d, takes e, then finds only a, b, c (in the preflist).
            (&["a", "d"], &["e>a", "b", "c"], 0),
            // Nodes of the preflist are never fallbacks, even when they own later partitions.
            (&["a", "d", "e"], &["b", "c"], 1),
            // A node that is not a member being "down" changes nothing.
            (&["zz"], &["a", "b", "c"], 0),
        ];
        for &(d, want, uncovered) in cases {
            let t = targets(&c, 0, &down(d)).unwrap();
            assert_eq!(show(&t), want, "down {d:?}");
            assert_eq!(t.uncovered.len(), uncovered, "down {d:?}");
        }
        // Wrapping: preflist at 6 is b, c, a; fallbacks walk 1, 2, ... = b (taken), c (taken), d.
        let t = targets(&c, 6, &down(&["c"])).unwrap();
        assert_eq!(show(&t), ["b", "d>c", "a"]);
        assert_eq!(
            t.targets[1].partition, 7,
            "the fallback holds c's partition"
        );
    }

    #[test]
    fn shorter_preflists_of_a_bucket_type() {
        // ring "abcdeabc", laid out for n_val 3; a bucket type of n_val 1 or 2 takes the first
        // partitions of the preflist, and its fallbacks walk on from there.
        let c = claim("abcdeabc", 3);
        let cases: &[(u32, &[&str], &[&str])] = &[
            (1, &[], &["a"]),
            (2, &[], &["a", "b"]),
            (3, &[], &["a", "b", "c"]),
            // n_val 1, a down: the walk starts at partition 1 (b).
            (1, &["a"], &["b>a"]),
            // n_val 2, b down: c is next and not in the preflist of two.
            (2, &["b"], &["a", "c>b"]),
        ];
        for &(n, d, want) in cases {
            let t = targets_n(&c, 0, n, &down(d)).unwrap();
            assert_eq!(show(&t), want, "n_val {n}, down {d:?}");
        }
        assert_eq!(
            targets_n(&c, 0, 3, &down(&["b"])).unwrap(),
            targets(&c, 0, &down(&["b"])).unwrap()
        );
        for n in [0, 4] {
            assert!(matches!(
                targets_n(&c, 0, n, &down(&[])),
                Err(RingError::PreflistLongerThanClaim { .. })
            ));
        }
    }

    #[test]
    fn hints_go_to_the_next_live_node_even_one_holding_a_replica() {
        // Three members, n_val 3: no node outside the preflist, so a down primary's replica is
        // uncovered, and its hint goes to the next live node round the ring.
        let c = claim("abcabcab", 3);
        let miss = |p: u32| Replica {
            partition: p,
            node: c.owner(p).to_string(),
        };
        let show = |h: Vec<Option<Target>>| -> Vec<String> {
            h.into_iter()
                .map(|t| t.map_or("-".into(), |t| format!("{}@{}", t.node, t.partition)))
                .collect()
        };
        let cases: &[(&[&str], &[u32], &[&str])] = &[
            // c down: preflist at 0 is a b c; the walk from 3 meets a first.
            (&["c"], &[2], &["a@2"]),
            // a down: the walk from 3 meets a (down), then b.
            (&["a"], &[0], &["b@0"]),
            // b and c down: both hints to a, the only live node.
            (&["b", "c"], &[1, 2], &["a@1", "a@2"]),
            // c unreachable though not yet marked down: the hint still avoids c itself.
            (&[], &[2], &["a@2"]),
            // Everyone but the missed node down: nowhere to keep it.
            (&["a", "b"], &[2], &["-"]),
        ];
        for &(d, missed, want) in cases {
            let missed: Vec<Replica> = missed.iter().map(|&p| miss(p)).collect();
            assert_eq!(
                show(hint_holders(&c, 0, 3, &down(d), &missed)),
                want,
                "down {d:?}"
            );
        }
        // With a node outside the preflist, the hint goes there first (d), then on.
        let c = claim("abcdeabc", 3);
        let h = hint_holders(
            &c,
            0,
            3,
            &down(&["b", "c"]),
            &[
                Replica {
                    partition: 1,
                    node: "b".into(),
                },
                Replica {
                    partition: 2,
                    node: "c".into(),
                },
            ],
        );
        let nodes: Vec<String> = h.into_iter().map(|t| t.unwrap().node).collect();
        assert_eq!(nodes, ["d", "e"]);
    }

    #[test]
    fn keys_map_to_their_partition_preflist() {
        let c = claim("abcdabcd", 2);
        let p = partition_of(b"users", b"alice", c.ring_size());
        assert_eq!(
            preflist_of_key(&c, b"users", b"alice"),
            primary_preflist(&c, p).unwrap()
        );
    }
}
