//! Which hinted handoffs a node starts now.
//!
//! A node holds a *fallback vnode* for each partition it stood in for while the partition's
//! primary was down (`partition → primary`). When the primary is up again the node hands the
//! fallback's keys back and then drops them. At most `max_concurrent` transfers run from one
//! node at a time (Riak's default is 2); the rest wait for the next plan.

use std::collections::{BTreeMap, BTreeSet};

use crate::ring::Partition;

/// Limits on handoff from one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandoffLimits {
    /// Transfers running from this node at once, at least 1.
    pub max_concurrent: usize,
}

impl Default for HandoffLimits {
    fn default() -> Self {
        HandoffLimits { max_concurrent: 2 }
    }
}

/// A transfer to start: the fallback vnode `partition`, handed back to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handoff {
    pub partition: Partition,
    pub target: String,
}

/// Why a held fallback vnode is not started now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Its primary is not up.
    PrimaryDown,
    /// Its transfer is already running.
    Running,
    /// `max_concurrent` transfers are running or starting.
    Throttled,
}

/// The plan: transfers to start, and why the others wait.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandoffPlan {
    /// In the order to start them.
    pub start: Vec<Handoff>,
    /// Every other held partition, ascending.
    pub waiting: Vec<(Partition, Wait)>,
}

/// The handoffs to start, given the fallback vnodes this node holds (`partition → primary`), the
/// nodes that are up, and the partitions whose transfer is running.
///
/// Running transfers count against the limit, whether or not `held` still lists them. Among the
/// transfers that may start, each pick goes to the target receiving the fewest transfers from
/// this node so far (running or picked), then to the lowest partition: a returning node is not
/// flooded while another waits. Deterministic.
pub fn plan_handoffs(
    held: &BTreeMap<Partition, String>,
    up: &BTreeSet<String>,
    running: &BTreeSet<Partition>,
    limits: HandoffLimits,
) -> HandoffPlan {
    let cap = limits.max_concurrent.max(1);
    let mut per_target: BTreeMap<&str, usize> = BTreeMap::new();
    for p in running {
        if let Some(t) = held.get(p) {
            *per_target.entry(t.as_str()).or_default() += 1;
        }
    }
    let mut plan = HandoffPlan::default();
    let mut ready: Vec<(Partition, &str)> = Vec::new();
    for (&p, primary) in held {
        if running.contains(&p) {
            plan.waiting.push((p, Wait::Running));
        } else if !up.contains(primary) {
            plan.waiting.push((p, Wait::PrimaryDown));
        } else {
            ready.push((p, primary.as_str()));
        }
    }
    let mut slots = cap.saturating_sub(running.len());
    while slots > 0 && !ready.is_empty() {
        let (i, _) = ready
            .iter()
            .enumerate()
            .min_by_key(|(_, (p, t))| (per_target.get(t).copied().unwrap_or(0), *p))
            .expect("not empty");
        let (p, t) = ready.remove(i);
        *per_target.entry(t).or_default() += 1;
        plan.start.push(Handoff {
            partition: p,
            target: t.to_string(),
        });
        slots -= 1;
    }
    plan.waiting
        .extend(ready.into_iter().map(|(p, _)| (p, Wait::Throttled)));
    plan.waiting.sort_by_key(|(p, _)| *p);
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(pairs: &[(Partition, &str)]) -> BTreeMap<Partition, String> {
        pairs.iter().map(|&(p, n)| (p, n.to_string())).collect()
    }

    fn set<T: Ord + Clone>(xs: &[T]) -> BTreeSet<T> {
        xs.iter().cloned().collect()
    }

    fn up(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn started(p: &HandoffPlan) -> Vec<(Partition, &str)> {
        p.start
            .iter()
            .map(|h| (h.partition, h.target.as_str()))
            .collect()
    }

    #[test]
    fn plan_table() {
        let h = held(&[(1, "a"), (3, "a"), (5, "b"), (7, "c"), (9, "a")]);
        let two = HandoffLimits::default();
        // Nobody up: everything waits for its primary.
        let p = plan_handoffs(&h, &up(&[]), &set(&[]), two);
        assert!(p.start.is_empty());
        assert!(p.waiting.iter().all(|(_, w)| *w == Wait::PrimaryDown));
        // a returns: two of its three start, the third is throttled.
        let p = plan_handoffs(&h, &up(&["a"]), &set(&[]), two);
        assert_eq!(started(&p), [(1, "a"), (3, "a")]);
        assert_eq!(
            p.waiting,
            [
                (5, Wait::PrimaryDown),
                (7, Wait::PrimaryDown),
                (9, Wait::Throttled)
            ]
        );
        // a and b return: spread over targets before doubling up on one.
        let p = plan_handoffs(&h, &up(&["a", "b", "c"]), &set(&[]), two);
        assert_eq!(started(&p), [(1, "a"), (5, "b")]);
        let p = plan_handoffs(
            &h,
            &up(&["a", "b", "c"]),
            &set(&[]),
            HandoffLimits { max_concurrent: 4 },
        );
        assert_eq!(started(&p), [(1, "a"), (5, "b"), (7, "c"), (3, "a")]);
        // Running transfers take slots, and steer the next pick away from their target.
        let p = plan_handoffs(&h, &up(&["a", "b"]), &set(&[1]), two);
        assert_eq!(started(&p), [(5, "b")]);
        assert_eq!(p.waiting[0], (1, Wait::Running));
        let p = plan_handoffs(&h, &up(&["a", "b"]), &set(&[1, 5]), two);
        assert!(p.start.is_empty());
        // A running transfer the node no longer lists still counts.
        let p = plan_handoffs(&h, &up(&["a"]), &set(&[42]), two);
        assert_eq!(started(&p), [(1, "a")]);
        // max_concurrent 0 is taken as 1.
        let p = plan_handoffs(
            &h,
            &up(&["a"]),
            &set(&[]),
            HandoffLimits { max_concurrent: 0 },
        );
        assert_eq!(started(&p), [(1, "a")]);
    }
}
