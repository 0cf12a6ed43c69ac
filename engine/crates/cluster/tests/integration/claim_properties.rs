//! Property tests of the claim: balance, distinct nodes in preflists, movement, determinism.

use levee_cluster::{Claim, ClaimMember, RingParams, RingSize};
use proptest::prelude::*;

fn params(r: u32, n: u32) -> RingParams {
    RingParams::new(RingSize::new(r).unwrap(), n).unwrap()
}

/// `count` members named m00.., zones round-robin over `zones` (0: no zones).
fn members(ids: impl IntoIterator<Item = usize>, zones: usize) -> Vec<ClaimMember> {
    ids.into_iter()
        .map(|i| {
            let zone = if zones == 0 {
                String::new()
            } else {
                format!("z{}", i % zones)
            };
            ClaimMember::new(format!("m{i:02}"), zone)
        })
        .collect()
}

fn assert_balanced(c: &Claim) {
    let rep = c.report();
    assert!(
        rep.max_owned - rep.min_owned <= 1,
        "unbalanced: {:?}",
        c.counts()
    );
    assert_eq!(
        c.counts().iter().map(|(_, n)| n).sum::<usize>(),
        c.ring_size().get() as usize
    );
}

/// Balance and spacing can both hold only if no member needs more than ring/n_val partitions.
fn roomy(r: u32, n: u32, m: usize) -> bool {
    m > n as usize && (r as usize).div_ceil(m) * n as usize <= r as usize
}

/// Every `w` consecutive partitions (wrapping) have distinct owners.
fn windows_distinct(owners: &[usize], w: usize) -> bool {
    let r = owners.len();
    (0..r).all(|s| {
        let mut win: Vec<usize> = (0..w).map(|i| owners[(s + i) % r]).collect();
        win.sort();
        win.dedup();
        win.len() == w
    })
}

/// Exhaustive search: does a balanced ring of `r` partitions over `m` members exist in which every
/// `w` consecutive partitions (wrapping) are distinct?
fn exists_perfect(r: usize, m: usize, w: usize) -> bool {
    fn go(owners: &mut Vec<usize>, count: &mut [usize], r: usize, w: usize, hi: usize) -> bool {
        let p = owners.len();
        if p == r {
            return windows_distinct(owners, w);
        }
        for o in 0..count.len() {
            if count[o] == hi || owners[p.saturating_sub(w - 1)..].contains(&o) {
                continue;
            }
            // Members are interchangeable: open member o only after member o - 1.
            if count[o] == 0 && o > 0 && count[o - 1] == 0 {
                break;
            }
            owners.push(o);
            count[o] += 1;
            if go(owners, count, r, w, hi) {
                return true;
            }
            owners.pop();
            count[o] -= 1;
        }
        false
    }
    go(&mut Vec::new(), &mut vec![0; m], r, w, r.div_ceil(m))
}

#[test]
fn small_rings_are_perfect_whenever_exhaustive_search_finds_a_perfect_ring() {
    let mut checked = 0;
    for r in [4u32, 8, 16] {
        for n in 2..=4u32 {
            for m in 1..=6usize {
                if n > r || (r == 16 && m > 5) {
                    continue;
                }
                // The claim's target: every min(n_val, members) consecutive partitions distinct.
                let w = (n as usize).min(m);
                let c = Claim::initial(params(r, n), &members(0..m, 0)).unwrap();
                let names: Vec<&str> = c.owners().collect();
                let owners: Vec<usize> = names
                    .iter()
                    .map(|o| c.members().iter().position(|mm| mm.name == *o).unwrap())
                    .collect();
                let perfect = exists_perfect(r as usize, m, w);
                assert_eq!(
                    windows_distinct(&owners, w),
                    perfect,
                    "ring {r} n_val {n} members {m}: exhaustive search says perfect={perfect}, claim {names:?}"
                );
                if perfect && m >= n as usize {
                    assert_eq!(c.report().preflists_short_of_nodes, 0);
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 50);
}

#[test]
fn fewer_members_than_n_val_degrade_to_every_member_in_every_preflist() {
    for (r, n, m) in [(64, 3, 1), (64, 3, 2), (64, 5, 4), (8, 3, 2)] {
        let c = Claim::initial(params(r, n), &members(0..m, 0)).unwrap();
        let rep = c.report();
        assert!(rep.degraded() && !rep.meets_targets() || rep.preflists_short_of_nodes == 0);
        assert_eq!(
            (rep.distinct_nodes_target, rep.min_distinct_nodes),
            (m, m),
            "{rep:?}"
        );
        assert_eq!(rep.preflists_short_of_nodes, 0);
    }
    // 3 members with n_val 3 on a power-of-two ring: impossible; two preflists hold 2 members.
    let rep = Claim::initial(params(64, 3), &members(0..3, 0))
        .unwrap()
        .report();
    assert!(!rep.degraded());
    assert_eq!(
        (rep.preflists_short_of_nodes, rep.min_distinct_nodes),
        (2, 2)
    );
}

/// A random history: an initial member set, then joins, leaves and replacements.
fn history() -> impl Strategy<Value = (u32, u32, usize, Vec<usize>, Vec<Vec<usize>>)> {
    (
        prop::sample::select(vec![8u32, 16, 32, 64, 128, 256]),
        1u32..=4,
        prop::sample::select(vec![0usize, 2, 3, 4]),
        prop::collection::btree_set(0usize..24, 1..10),
        prop::collection::vec(prop::collection::btree_set(0usize..24, 1..12), 1..4),
    )
        .prop_filter("n_val fits the ring", |(r, n, ..)| n <= r)
        .prop_map(|(r, n, z, first, next)| {
            (
                r,
                n,
                z,
                first.into_iter().collect(),
                next.into_iter().map(|s| s.into_iter().collect()).collect(),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_claim_is_balanced((r, n, z, first, steps) in history()) {
        let mut c = Claim::initial(params(r, n), &members(first, z)).unwrap();
        assert_balanced(&c);
        for ids in steps {
            let t = c.rebalance(&members(ids, z)).unwrap();
            assert_balanced(&t.claim);
            prop_assert!(t.moved() >= t.ideal, "moved {} < ideal {}", t.moved(), t.ideal);
            c = t.claim;
        }
    }

    #[test]
    fn roomy_claims_put_every_preflist_on_distinct_nodes((r, n, _z, first, steps) in history()) {
        let c = Claim::initial(params(r, n), &members(first.clone(), 0)).unwrap();
        if roomy(r, n, first.len()) {
            prop_assert_eq!(c.report().preflists_short_of_nodes, 0, "initial {:?}", c.owners().collect::<Vec<_>>());
        }
        let mut c = c;
        for ids in steps {
            let m = ids.len();
            let fresh = Claim::initial(params(r, n), &members(ids.clone(), 0)).unwrap();
            let t = c.rebalance(&members(ids, 0)).unwrap();
            // Never worse than starting afresh, which is perfect when there is room.
            if roomy(r, n, m) {
                prop_assert_eq!(fresh.report().preflists_short_of_nodes, 0);
            }
            if fresh.report().preflists_short_of_nodes == 0 {
                prop_assert_eq!(t.claim.report().preflists_short_of_nodes, 0,
                    "rebalance to {} members: {:?}", m, t.claim.owners().collect::<Vec<_>>());
            }
            c = t.claim;
        }
    }

    #[test]
    fn claims_do_not_depend_on_input_order((r, n, z, first, steps) in history(), seed in any::<u64>()) {
        let shuffled = |mut v: Vec<ClaimMember>| {
            // A fixed permutation from the seed: reverse, then rotate.
            v.reverse();
            let k = (seed as usize) % v.len();
            v.rotate_left(k);
            v
        };
        let a = Claim::initial(params(r, n), &members(first.clone(), z)).unwrap();
        let b = Claim::initial(params(r, n), &shuffled(members(first, z))).unwrap();
        prop_assert_eq!(&a, &b);
        let ids = &steps[0];
        let ta = a.rebalance(&members(ids.clone(), z)).unwrap();
        let tb = b.rebalance(&shuffled(members(ids.clone(), z))).unwrap();
        prop_assert_eq!(ta, tb);
    }

    #[test]
    fn rebalancing_to_the_same_members_moves_nothing((r, n, z, first, steps) in history()) {
        let mut c = Claim::initial(params(r, n), &members(first, z)).unwrap();
        for ids in steps {
            c = c.rebalance(&members(ids, z)).unwrap().claim;
            let again = c.rebalance(c.members()).unwrap();
            prop_assert_eq!(again.moved(), 0);
            prop_assert_eq!(&again.claim, &c);
        }
    }

    /// One member joins a ring that meets its targets (no zones, n_val ≤ 3, room to spare): the
    /// join moves exactly what balance needs, all to the new member.
    #[test]
    fn a_join_moves_only_what_balance_needs(
        r in prop::sample::select(vec![32u32, 64, 128, 256, 1024]),
        n in 1u32..=3,
        m in 4usize..=12,
    ) {
        prop_assume!(roomy(r, n, m));
        let c = Claim::initial(params(r, n), &members(0..m, 0)).unwrap();
        let t = c.rebalance(&members(0..=m, 0)).unwrap();
        prop_assert_eq!(t.claim.report().preflists_short_of_nodes, 0);
        prop_assert_eq!(t.ideal, r as usize / (m + 1));
        prop_assert_eq!(t.moved(), t.ideal);
        let newcomer = format!("m{m:02}");
        prop_assert!(t.moves.iter().all(|mv| mv.to == newcomer));
    }

    /// One member leaves: its partitions must move; the search may move more to keep preflists
    /// on distinct nodes. Measured worst cases: 2× the ideal from 6 members up on rings of 64 or
    /// more, 2.5× on a ring of 32, 3.25× for 5 → 4 members (docs/cluster.md).
    #[test]
    fn a_leave_moves_the_leavers_partitions_and_few_others(
        r in prop::sample::select(vec![32u32, 64, 128, 256, 1024]),
        n in 1u32..=3,
        m in 5usize..=12,
        leaver in 0usize..12,
    ) {
        prop_assume!(roomy(r, n, m - 1) && leaver < m);
        let c = Claim::initial(params(r, n), &members(0..m, 0)).unwrap();
        let rest: Vec<usize> = (0..m).filter(|&i| i != leaver).collect();
        let t = c.rebalance(&members(rest, 0)).unwrap();
        let gone = format!("m{leaver:02}");
        prop_assert_eq!(t.claim.report().preflists_short_of_nodes, 0);
        prop_assert!(t.moves.iter().filter(|mv| mv.from == gone).count() == c.partitions_of(&gone).len());
        let bound = if m >= 6 && r >= 64 { 2.0 } else if m >= 6 { 2.5 } else { 3.25 };
        prop_assert!(t.moved() as f64 <= bound * t.ideal as f64, "moved {} ideal {}", t.moved(), t.ideal);
    }
}

/// Zones of equal size, at least n_val of them: every preflist spans n_val zones except at most a
/// couple where the zone pattern closes round a power-of-two ring.
#[test]
fn equal_zones_spread_every_preflist_over_n_val_zones() {
    for (r, n, zones, per_zone) in [
        (64, 3, 3, 2),
        (256, 3, 3, 3),
        (64, 2, 2, 3),
        (256, 3, 4, 2),
        (1024, 3, 3, 4),
    ] {
        let c = Claim::initial(params(r, n), &members(0..zones * per_zone, zones)).unwrap();
        let rep = c.report();
        assert_eq!(rep.preflists_short_of_nodes, 0, "{rep:?}");
        assert!(
            rep.preflists_short_of_zones <= 2,
            "ring {r} n_val {n} zones {zones}: {rep:?}"
        );
    }
}

/// The numbers quoted in docs/cluster.md.
#[test]
fn movement_table() {
    let mut lines = Vec::new();
    let mut run = |r: u32, sizes: &[usize]| {
        let mut c = Claim::initial(params(r, 3), &members(0..sizes[0], 0)).unwrap();
        for &m in &sizes[1..] {
            let started = std::time::Instant::now();
            let t = c.rebalance(&members(0..m, 0)).unwrap();
            println!(
                "ring {r} {}→{m}: rebalanced in {:.1} ms",
                c.members().len(),
                started.elapsed().as_secs_f64() * 1e3
            );
            lines.push((
                r,
                c.members().len(),
                m,
                t.moved(),
                t.ideal,
                t.claim.report().preflists_short_of_nodes,
            ));
            c = t.claim;
        }
    };
    run(64, &[3, 4, 5, 4, 3]);
    run(1024, &[8, 9, 8]);
    run(4096, &[12, 13]);
    for l in &lines {
        println!(
            "ring {} {}→{} members: moved {} (ideal {}), preflists short of 3 nodes {}",
            l.0, l.1, l.2, l.3, l.4, l.5
        );
    }
    let want = [
        (64, 3, 4, 16, 16, 0),
        (64, 4, 5, 12, 12, 0),
        (64, 5, 4, 12, 12, 0),
        (64, 4, 3, 16, 16, 2),
        (1024, 8, 9, 113, 113, 0),
        (1024, 9, 8, 113, 113, 0),
        (4096, 12, 13, 315, 315, 0),
    ];
    assert_eq!(lines, want);
}
