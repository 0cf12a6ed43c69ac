//! Property tests of preflists and fallbacks.

use std::collections::BTreeSet;

use levee_cluster::{targets, Claim, ClaimMember, RingParams, RingSize, Role};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever is down: targets are up, on distinct nodes, fallbacks are never nodes of the
    /// preflist, every replica is either sent somewhere or reported uncovered, and a replica goes
    /// uncovered only when no eligible node is left.
    #[test]
    fn fallbacks_skip_down_nodes_and_the_preflist(
        r in prop::sample::select(vec![8u32, 16, 64, 256]),
        n in 1u32..=5,
        m in 1usize..=10,
        down_mask in any::<u16>(),
        partition in any::<u32>(),
    ) {
        prop_assume!(n <= r);
        let members: Vec<ClaimMember> = (0..m).map(|i| ClaimMember::new(format!("m{i}"), "")).collect();
        let params = RingParams::new(RingSize::new(r).unwrap(), n).unwrap();
        let c = Claim::initial(params, &members).unwrap();
        let down: BTreeSet<String> = (0..m).filter(|i| down_mask >> i & 1 == 1).map(|i| format!("m{i}")).collect();
        let p = partition % r;
        let t = targets(&c, p, &down).unwrap();
        let primaries: Vec<String> = (0..n).map(|i| c.owner((p + i) % r).to_string()).collect();

        prop_assert_eq!(t.targets.len() + t.uncovered.len(), n as usize);
        let nodes: Vec<&str> = t.targets.iter().map(|t| t.node.as_str()).collect();
        for tg in &t.targets {
            prop_assert!(!down.contains(&tg.node));
            match &tg.role {
                Role::Primary => prop_assert_eq!(c.owner(tg.partition), tg.node.as_str()),
                Role::Fallback { primary } => {
                    prop_assert!(!primaries.contains(&tg.node), "fallback {} is in the preflist", tg.node);
                    prop_assert!(down.contains(primary));
                    prop_assert_eq!(c.owner(tg.partition), primary.as_str());
                }
            }
        }
        let fallbacks: BTreeSet<&str> = t.targets.iter().filter(|t| t.role != Role::Primary).map(|t| t.node.as_str()).collect();
        prop_assert_eq!(fallbacks.len(), t.targets.len() - t.primaries());
        if m >= n as usize && c.report().preflists_short_of_nodes == 0 {
            let distinct: BTreeSet<&str> = nodes.iter().copied().collect();
            prop_assert_eq!(distinct.len(), nodes.len(), "two replicas on one node: {:?}", nodes);
        }
        // Fallbacks are found by walking the ring: a member owning no partition (more members
        // than partitions) is never one.
        let eligible = (0..m)
            .map(|i| format!("m{i}"))
            .filter(|x| !down.contains(x) && !primaries.contains(x) && !c.partitions_of(x).is_empty())
            .count();
        let down_primaries = primaries.iter().filter(|x| down.contains(*x)).count();
        prop_assert_eq!(t.uncovered.len(), down_primaries.saturating_sub(eligible));
    }
}
