//! The claim: which member owns each partition. Pure functions of plain data, computed the same
//! way on every node.
//!
//! # Goals, in order
//!
//! 1. **Balance** (always met): every member owns `⌊ring_size / members⌋` or one more.
//! 2. **Distinct members in every preflist**: any `n_val` consecutive partitions (wrapping round)
//!    have distinct owners. When the cluster has fewer members than `n_val` the target is
//!    `members` distinct owners per preflist (every preflist holds every member).
//! 3. **Distinct zones in every preflist**: the same with zones, target `min(n_val, zones)`
//!    distinct zones per preflist (a member without a zone is in the zone `""`; one zone in all
//!    means no zone goal).
//! 4. **Few moves**: a change of members moves as few partitions as goals 1–3 allow.
//!
//! Goal 1 is a hard rule; 2–4 are met as far as the search below can, in that order of
//! priority. [`Claim::report`] says how far a claim meets 2 and 3; [`Transition`] says how many
//! partitions a change moved against the least that balance needs (`ideal`).
//!
//! # Algorithm
//!
//! *From nothing* ([`Claim::initial`]): members are put in a sequence that spreads every zone
//! evenly along it (the k-th of a zone's c members sits at the fraction (2k+1)/2c), and
//! partition `p` goes to member `p mod members`. That is balanced, and a window of `n_val` is
//! distinct everywhere except where the sequence wraps at the end of the ring when
//! `ring_size mod members` is between 1 and `n_val - 2`. A swap search ([`spacing`]) then
//! swaps pairs of partitions' owners while that lowers (node penalty, zone penalty); swaps keep
//! balance.
//!
//! *From a previous claim* ([`Claim::rebalance`]):
//! 1. Partitions of members that left become unowned. Quotas: the `ring_size mod members`
//!    members that own most today get the one extra partition (fewest moves); ties go to the
//!    first name.
//! 2. While a member is under its quota, the member furthest under takes one partition, either
//!    unowned or from a member over its quota, choosing (in order): no node conflict, no zone
//!    conflict, farthest from its own partitions, unowned before owned, from the donor most over
//!    its quota, lowest index. Every step moves one partition that balance must move, so after
//!    this step `moved == ideal`.
//! 3. The swap search from the initial claim runs again, now also counting moves: it fixes the
//!    conflicts step 2 could not avoid (each fix moves one or two more partitions) and undoes
//!    moves that turned out unnecessary. A zone fix is worth a move only when it completes the
//!    zones of more preflists than the partitions it moves.
//! 4. If a node conflict is still left, the initial claim of the new members is turned and
//!    relabelled (within zones) to keep as many owners as it can, searched the same way, and
//!    taken if it is better. So a rebalanced claim never has node conflicts where a fresh claim
//!    has none — at the price of more moves in the tight cases below.
//!
//! Membership order, hash maps and randomness play no part: members are sorted by name, all
//! ties are broken by index, so every node computes the same claim from the same input.
//! The claim depends on the previous claim (that is what keeps moves few), so nodes agree on a
//! claim only if they agree on the one before it; [`Claim::initial`] starts the chain.
//!
//! # Limits (known, tested)
//!
//! * `members < n_val`: no preflist can hold `n_val` distinct members. The claim is *degraded*,
//!   not refused (a one-node development cluster must run): every window of `members`
//!   consecutive partitions is distinct, so every preflist holds all members.
//!   `report().distinct_nodes_target < n_val` says so.
//! * `members == n_val` with `ring_size` not a multiple of `n_val` (e.g. 3 members, n_val 3,
//!   any power-of-two ring): distinct preflists would force the owners to repeat with period
//!   `n_val`, which cannot close round the ring. A few preflists (2 with a ring of 64) hold
//!   `n_val - 1` distinct members; `report().preflists_short_of_nodes` counts them. Add a
//!   member to clear them.
//! * More generally balance and spacing both hold only if `⌈ring_size/members⌉ · n_val ≤
//!   ring_size`; small rings with few members can miss it.
//! * Zones: with exactly `n_val` zones the zone pattern must repeat with period `n_val`, which
//!   cannot close round a power-of-two ring either: with 3 zones and n_val 3, two preflists or so
//!   span only 2 zones even with equal zones. A zone holding more than `1/n_val` of the members
//!   (4 members in 3 zones) must repeat within many preflists: e.g. 8 members in zones of 3/3/2
//!   on 1,024 partitions leave 256 preflists on 2 zones, which is the least possible. A join that
//!   makes zones equal (8 → 9) keeps most of those: reaching the new optimum would rearrange the
//!   whole ring, and zones are never bought with more moves than they fix.
//! * A leave usually moves more than `ideal`: the leaver's partitions sit between the other
//!   members, and most can only be taken after a swap elsewhere. Measured worst case over every
//!   leaver, n_val 3: 5 → 4 members 3.2× ideal; 6 or more members ≤ 2× on rings of 64 or more.
//! * `members == n_val + 1` or `== n_val` (tight): few layouts are conflict-free, and reaching one
//!   from the previous claim can take step 4, moving 2–3× ideal (n_val 5, 5 → 6 members on 64
//!   partitions: 33 moves for an ideal of 10).
//! * The search stops at a layout no swap or three-way rotation improves. The tests compare the
//!   initial claim with exhaustive search on rings of 4–16 partitions.
//!
//! # Measured (n_val 3, no zones; `tests/integration/claim_properties.rs::movement_table`)
//!
//! | ring | change | moved | ideal |
//! |---|---|---|---|
//! | 64 | 3 → 4 | 16 | 16 |
//! | 64 | 4 → 5 | 12 | 12 |
//! | 64 | 5 → 4 | 12 | 12 |
//! | 1024 | 8 → 9 | 113 | 113 |
//! | 1024 | 9 → 8 | 113 | 113 |

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::spacing::{Layout, UNOWNED};
use super::{Partition, RingError, RingParams, RingSize};

/// A member as the claim sees it: a name (its identity) and a zone. Addresses do not matter to
/// the claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClaimMember {
    pub name: String,
    pub zone: String,
}

impl ClaimMember {
    pub fn new(name: impl Into<String>, zone: impl Into<String>) -> ClaimMember {
        ClaimMember {
            name: name.into(),
            zone: zone.into(),
        }
    }
}

/// Owners of every partition of a ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    params: RingParams,
    /// Sorted by name, names unique.
    members: Vec<ClaimMember>,
    /// Per partition, an index into `members`.
    owners: Vec<usize>,
}

/// One partition changing owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub partition: Partition,
    pub from: String,
    pub to: String,
}

/// The claim a member change leads to, and what it costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub claim: Claim,
    /// Partitions whose owner changes, in partition order.
    pub moves: Vec<Move>,
    /// The fewest partitions any balanced claim must move: what members under their quota must
    /// gain. For one member joining a balanced ring of `m`, about `ring_size / (m + 1)`.
    pub ideal: usize,
}

impl Transition {
    pub fn moved(&self) -> usize {
        self.moves.len()
    }
}

/// How far a claim meets its goals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimReport {
    pub n_val: u32,
    pub members: usize,
    pub min_owned: usize,
    pub max_owned: usize,
    /// `min(n_val, members)`: distinct members a preflist can have.
    pub distinct_nodes_target: usize,
    /// Preflists (one per partition) with fewer distinct members than the target.
    pub preflists_short_of_nodes: usize,
    /// Fewest distinct members in any preflist.
    pub min_distinct_nodes: usize,
    pub zones: usize,
    /// `min(n_val, zones)`.
    pub distinct_zones_target: usize,
    pub preflists_short_of_zones: usize,
    pub min_distinct_zones: usize,
}

impl ClaimReport {
    /// Every preflist meets both targets (and the targets are `n_val` members).
    pub fn meets_targets(&self) -> bool {
        self.preflists_short_of_nodes == 0 && self.preflists_short_of_zones == 0
    }

    /// Fewer members than `n_val`: no preflist can be on `n_val` distinct members.
    pub fn degraded(&self) -> bool {
        self.distinct_nodes_target < self.n_val as usize
    }
}

/// Members sorted by name; refuses an empty list and repeated names.
fn canonical(members: &[ClaimMember]) -> Result<Vec<ClaimMember>, RingError> {
    if members.is_empty() {
        return Err(RingError::NoMembers);
    }
    let mut v = members.to_vec();
    v.sort();
    if let Some(w) = v.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(RingError::DuplicateMember(w[0].name.clone()));
    }
    Ok(v)
}

/// The spacing goals of a member list.
struct Goals {
    /// Member index → zone index (zones numbered in name order).
    zone_of: Vec<usize>,
    zones: usize,
    node_w: usize,
    zone_target: usize,
}

fn goals(params: &RingParams, members: &[ClaimMember]) -> Goals {
    let zone_names: BTreeMap<&str, usize> = {
        let mut z: Vec<&str> = members.iter().map(|m| m.zone.as_str()).collect();
        z.sort();
        z.dedup();
        z.into_iter().enumerate().map(|(i, z)| (z, i)).collect()
    };
    let zone_of: Vec<usize> = members
        .iter()
        .map(|m| zone_names[m.zone.as_str()])
        .collect();
    let n = params.n_val() as usize;
    let zones = zone_names.len();
    Goals {
        zone_of,
        zones,
        node_w: n.min(members.len()),
        zone_target: if zones >= 2 { n.min(zones) } else { 1 },
    }
}

/// Member indexes in an order that spreads each zone evenly: the k-th of a zone's c members is
/// placed at (2k+1)/2c; ties by zone, then by name.
fn spread_order(zone_of: &[usize], zones: usize) -> Vec<usize> {
    let mut size = vec![0usize; zones];
    let mut rank = vec![0usize; zone_of.len()];
    for (i, &z) in zone_of.iter().enumerate() {
        rank[i] = size[z];
        size[z] += 1;
    }
    let mut order: Vec<usize> = (0..zone_of.len()).collect();
    order.sort_by(|&a, &b| {
        // (2 rank_a + 1) / (2 size_a)  vs  (2 rank_b + 1) / (2 size_b)
        let fa = (2 * rank[a] + 1) * size[zone_of[b]];
        let fb = (2 * rank[b] + 1) * size[zone_of[a]];
        fa.cmp(&fb)
            .then(zone_of[a].cmp(&zone_of[b]))
            .then(a.cmp(&b))
    });
    order
}

/// `fresh` (owners by member index) turned by some `k` partitions and its members relabelled
/// within their zones so that as many partitions as possible keep their owner in `prev`. Turns
/// by `0..min(ring, members)` are tried (the initial claim repeats with period `members`, so
/// larger turns mostly repeat smaller ones); members are matched greedily by overlap.
fn aligned(fresh: &[usize], prev: &[Option<usize>], zone_of: &[usize], m: usize) -> Vec<usize> {
    let r = fresh.len();
    let mut best: Option<(usize, Vec<usize>)> = None;
    for k in 0..r.min(m) {
        let mut overlap: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for p in 0..r {
            let i = fresh[(p + k) % r];
            if let Some(j) = prev[p] {
                if zone_of[i] == zone_of[j] {
                    *overlap.entry((i, j)).or_default() += 1;
                }
            }
        }
        let mut pairs: Vec<((usize, usize), usize)> = overlap.into_iter().collect();
        pairs.sort_by_key(|&((i, j), c)| (std::cmp::Reverse(c), i, j));
        let (mut to, mut used) = (vec![usize::MAX; m], vec![false; m]);
        let mut kept = 0;
        for ((i, j), c) in pairs {
            if to[i] == usize::MAX && !used[j] {
                to[i] = j;
                used[j] = true;
                kept += c;
            }
        }
        // Members left unmatched pair up within their zones, in index order.
        for i in 0..m {
            if to[i] == usize::MAX {
                let j = (0..m)
                    .find(|&j| !used[j] && zone_of[j] == zone_of[i])
                    .expect("zones have as many members on both sides");
                to[i] = j;
                used[j] = true;
            }
        }
        if best.as_ref().is_none_or(|(b, _)| kept > *b) {
            best = Some((kept, (0..r).map(|p| to[fresh[(p + k) % r]]).collect()));
        }
    }
    best.expect("a ring has at least one partition").1
}

impl Claim {
    /// The first claim of a cluster, from its members alone.
    pub fn initial(params: RingParams, members: &[ClaimMember]) -> Result<Claim, RingError> {
        let members = canonical(members)?;
        let g = goals(&params, &members);
        let n_val = params.n_val() as usize;
        let seq = spread_order(&g.zone_of, g.zones);
        let r = params.ring_size().len();
        let owner: Vec<usize> = (0..r).map(|p| seq[p % seq.len()]).collect();
        let mut layout = Layout::new(owner, &g.zone_of, g.node_w, n_val, g.zone_target, None);
        layout.improve();
        Ok(Claim {
            params,
            members,
            owners: layout.owner,
        })
    }

    /// The claim for a new member list, moving as few partitions of this one as the goals allow.
    /// Members are matched by name; a member whose zone changed keeps its partitions unless
    /// spreading zones needs them moved.
    pub fn rebalance(&self, members: &[ClaimMember]) -> Result<Transition, RingError> {
        let members = canonical(members)?;
        let g = goals(&self.params, &members);
        let n_val = self.params.n_val() as usize;
        let (r, m) = (self.params.ring_size().len(), members.len());
        let index: BTreeMap<&str, usize> = members
            .iter()
            .enumerate()
            .map(|(i, mm)| (mm.name.as_str(), i))
            .collect();
        let prev: Vec<Option<usize>> = self
            .owners
            .iter()
            .map(|&o| index.get(self.members[o].name.as_str()).copied())
            .collect();

        let mut count = vec![0usize; m];
        for o in prev.iter().flatten() {
            count[*o] += 1;
        }
        // Quotas: the members owning most keep the extra partitions.
        let mut by_count: Vec<usize> = (0..m).collect();
        by_count.sort_by_key(|&i| (std::cmp::Reverse(count[i]), i));
        let mut quota = vec![r / m; m];
        for &i in by_count.iter().take(r % m) {
            quota[i] += 1;
        }
        let ideal: usize = (0..m).map(|i| quota[i].saturating_sub(count[i])).sum();

        // Step 2: members under quota take partitions that must move anyway.
        let owner: Vec<usize> = prev.iter().map(|o| o.unwrap_or(UNOWNED)).collect();
        let mut layout = Layout::new(
            owner,
            &g.zone_of,
            g.node_w,
            n_val,
            g.zone_target,
            Some(&prev),
        );
        while let Some(taker) = (0..m)
            .filter(|&i| count[i] < quota[i])
            .max_by_key(|&i| (quota[i] - count[i], std::cmp::Reverse(i)))
        {
            let spread_w = (r / quota[taker]).max(g.node_w);
            let mut best = None;
            for p in 0..r {
                let o = layout.owner[p];
                if o != UNOWNED && count[o] <= quota[o] {
                    continue;
                }
                let key = (
                    layout.node_penalty(p, taker),
                    layout.zone_shortfall_change(p, taker),
                    layout.crowding(p, taker, spread_w),
                    o != UNOWNED,
                    std::cmp::Reverse(if o == UNOWNED { 0 } else { count[o] - quota[o] }),
                    p,
                );
                if best.as_ref().is_none_or(|b| key < *b) {
                    best = Some(key);
                }
            }
            let p = best
                .expect("a member under quota implies an unowned partition or one over quota")
                .5;
            let o = layout.owner[p];
            if o != UNOWNED {
                count[o] -= 1;
            }
            layout.owner[p] = taker;
            count[taker] += 1;
        }
        // Step 3: repair what step 2 could not avoid, and undo needless moves.
        layout.improve();
        // Step 4: a node conflict is left. Start again from the initial claim of the new members,
        // turned and relabelled to keep as many owners as it can, and keep the better of the two.
        if layout.total_cost().0 > 0 {
            let fresh = Claim::initial(self.params, &members)?;
            let owner = aligned(&fresh.owners, &prev, &g.zone_of, m);
            let mut other = Layout::new(
                owner,
                &g.zone_of,
                g.node_w,
                n_val,
                g.zone_target,
                Some(&prev),
            );
            other.improve();
            if other.total_cost() < layout.total_cost() {
                layout = other;
            }
        }

        let claim = Claim {
            params: self.params,
            members,
            owners: layout.owner,
        };
        let moves = (0..r)
            .filter(|&p| self.owner(p as Partition) != claim.owner(p as Partition))
            .map(|p| Move {
                partition: p as Partition,
                from: self.owner(p as Partition).to_string(),
                to: claim.owner(p as Partition).to_string(),
            })
            .collect();
        Ok(Transition {
            claim,
            moves,
            ideal,
        })
    }

    /// A claim from its parts (for example as persisted); checks that every owner is a member.
    pub fn from_owners(
        params: RingParams,
        members: &[ClaimMember],
        owners: &[&str],
    ) -> Result<Claim, RingError> {
        let members = canonical(members)?;
        if owners.len() != params.ring_size().len() {
            return Err(RingError::OwnerCount {
                ring_size: params.ring_size(),
                owners: owners.len(),
            });
        }
        let owners = owners
            .iter()
            .enumerate()
            .map(|(p, o)| {
                members
                    .binary_search_by(|m| m.name.as_str().cmp(o))
                    .map_err(|_| RingError::UnknownOwner {
                        partition: p as Partition,
                        owner: o.to_string(),
                    })
            })
            .collect::<Result<Vec<usize>, RingError>>()?;
        Ok(Claim {
            params,
            members,
            owners,
        })
    }

    pub fn params(&self) -> RingParams {
        self.params
    }

    pub fn ring_size(&self) -> RingSize {
        self.params.ring_size()
    }

    pub fn n_val(&self) -> u32 {
        self.params.n_val()
    }

    /// Members, sorted by name.
    pub fn members(&self) -> &[ClaimMember] {
        &self.members
    }

    /// Name of the owner of `partition` (which must be below `ring_size`).
    pub fn owner(&self, partition: Partition) -> &str {
        &self.members[self.owners[partition as usize]].name
    }

    /// Owner names, partition by partition.
    pub fn owners(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.owners.iter().map(|&o| self.members[o].name.as_str())
    }

    /// Zone of the owner of `partition`.
    pub fn owner_zone(&self, partition: Partition) -> &str {
        &self.members[self.owners[partition as usize]].zone
    }

    /// Partitions owned by `name`, ascending.
    pub fn partitions_of(&self, name: &str) -> Vec<Partition> {
        self.owners()
            .enumerate()
            .filter(|(_, o)| *o == name)
            .map(|(p, _)| p as Partition)
            .collect()
    }

    /// Partitions owned per member, in name order.
    pub fn counts(&self) -> Vec<(&str, usize)> {
        let mut c = vec![0usize; self.members.len()];
        for &o in &self.owners {
            c[o] += 1;
        }
        self.members
            .iter()
            .zip(c)
            .map(|(m, c)| (m.name.as_str(), c))
            .collect()
    }

    pub fn report(&self) -> ClaimReport {
        let counts: Vec<usize> = self.counts().into_iter().map(|(_, c)| c).collect();
        let g = goals(&self.params, &self.members);
        let (r, n) = (self.owners.len(), self.params.n_val() as usize);
        let distinct = |key: &dyn Fn(usize) -> usize| -> Vec<usize> {
            (0..r)
                .map(|p| {
                    let mut w: Vec<usize> = (0..n).map(|i| key((p + i) % r)).collect();
                    w.sort_unstable();
                    w.dedup();
                    w.len()
                })
                .collect()
        };
        let nodes = distinct(&|p| self.owners[p]);
        let zones = distinct(&|p| g.zone_of[self.owners[p]]);
        let node_target = n.min(self.members.len());
        let zone_target = n.min(g.zones);
        ClaimReport {
            n_val: self.params.n_val(),
            members: self.members.len(),
            min_owned: *counts.iter().min().unwrap(),
            max_owned: *counts.iter().max().unwrap(),
            distinct_nodes_target: node_target,
            preflists_short_of_nodes: nodes.iter().filter(|&&d| d < node_target).count(),
            min_distinct_nodes: *nodes.iter().min().unwrap(),
            zones: g.zones,
            distinct_zones_target: zone_target,
            preflists_short_of_zones: zones.iter().filter(|&&d| d < zone_target).count(),
            min_distinct_zones: *zones.iter().min().unwrap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(r: u32, n: u32) -> RingParams {
        RingParams::new(RingSize::new(r).unwrap(), n).unwrap()
    }

    fn members(names: &[&str]) -> Vec<ClaimMember> {
        names.iter().map(|n| ClaimMember::new(*n, "")).collect()
    }

    #[test]
    fn refuses_empty_and_duplicate_member_lists() {
        assert_eq!(
            Claim::initial(params(8, 3), &[]).unwrap_err(),
            RingError::NoMembers
        );
        assert_eq!(
            Claim::initial(params(8, 3), &members(&["a", "b", "a"])).unwrap_err(),
            RingError::DuplicateMember("a".into())
        );
    }

    #[test]
    fn small_rings_table() {
        // (ring, n_val, members, owners): the exact claims, frozen.
        let cases: &[(u32, u32, &[&str], &str)] = &[
            (8, 3, &["a"], "aaaaaaaa"),
            (8, 3, &["a", "b"], "abababab"),
            (8, 3, &["a", "b", "c", "d"], "abcdabcd"),
            (8, 2, &["c", "a", "b"], "abcabcab"),
            (8, 1, &["a", "b", "c"], "abcabcab"),
        ];
        for &(r, n, names, want) in cases {
            let c = Claim::initial(params(r, n), &members(names)).unwrap();
            let got: String = c.owners().collect();
            assert_eq!(got, want, "ring {r} n_val {n} members {names:?}");
        }
    }

    #[test]
    fn from_owners_checks_its_input() {
        let m = members(&["a", "b"]);
        let c = Claim::from_owners(params(4, 2), &m, &["a", "b", "a", "b"]).unwrap();
        assert_eq!(c, Claim::initial(params(4, 2), &m).unwrap());
        assert_eq!(
            Claim::from_owners(params(4, 2), &m, &["a", "b"]).unwrap_err(),
            RingError::OwnerCount {
                ring_size: RingSize::new(4).unwrap(),
                owners: 2
            }
        );
        assert_eq!(
            Claim::from_owners(params(4, 2), &m, &["a", "b", "a", "z"]).unwrap_err(),
            RingError::UnknownOwner {
                partition: 3,
                owner: "z".into()
            }
        );
    }
}
