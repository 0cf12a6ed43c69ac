//! Ring transitions as a node holds them: the claim it *routes* with, and the *target* claim a
//! member change moves partitions to.
//!
//! A member list that moves partitions does not change where requests go at once. The node keeps
//! routing with the claim it has (every moving partition is still served by its current owner)
//! and records the target; each current owner streams the partitions it gives up to their next
//! owner (`transition` in the node), and once every moving partition's owner reports its transfer
//! done, the target becomes the routing claim — on every node, from the same facts, with no
//! election. Writes made meanwhile reach both owners (the coordinator forwards them), and what the
//! old owner still holds afterwards goes over by handoff.
//!
//! The target of a list is computed from the previous *target* (or the routing claim when none
//! runs), never from a half-done state, so every node that saw the same lists computes the same
//! claims. A list that names exactly the routing claim's members (a scale that is taken back)
//! cancels the transition instead: the target is dropped and nothing moves.

use crate::ring::claim::{Claim, Move};

use super::change::{classify_change, MembershipChange};
use super::members::{Member, MemberList, MembersError};

/// What a node routes with and where a transition goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingState {
    /// The newest member list (the operator's).
    pub list: MemberList,
    /// The list `routing` was made for: addresses of members that are leaving (in the routing
    /// claim, not in `list`) come from here.
    pub routing_list: MemberList,
    /// The claim requests are routed with.
    pub routing: Claim,
    /// The claim a transition moves to (`None`: no transition).
    pub target: Option<Claim>,
}

impl RingState {
    /// A ring with no transition.
    pub fn settled(list: MemberList, claim: Claim) -> RingState {
        RingState {
            routing_list: list.clone(),
            list,
            routing: claim,
            target: None,
        }
    }

    /// A member by name: from the newest list, else (a leaving member) from the routing list.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.list.get(name).or_else(|| self.routing_list.get(name))
    }

    /// Every member requests may reach: the newest list's, then the leaving ones.
    pub fn all_members(&self) -> Vec<&Member> {
        let mut out: Vec<&Member> = self.list.members().iter().collect();
        out.extend(
            self.routing_list
                .members()
                .iter()
                .filter(|m| self.list.get(&m.name).is_none()),
        );
        out
    }

    /// Partitions that change owner from the routing claim to the target, in partition order.
    pub fn moves(&self) -> Vec<Move> {
        let Some(t) = &self.target else {
            return Vec::new();
        };
        self.routing
            .owners()
            .zip(t.owners())
            .enumerate()
            .filter(|(_, (from, to))| from != to)
            .map(|(p, (from, to))| Move {
                partition: p as u32,
                from: from.to_string(),
                to: to.to_string(),
            })
            .collect()
    }

    /// The owner a partition is moving to, if it is moving.
    pub fn next_owner(&self, partition: u32) -> Option<&str> {
        next_owner(&self.routing, self.target.as_ref(), partition)
    }

    /// The state once every move is done: the target routes.
    pub fn completed(&self) -> RingState {
        match &self.target {
            None => self.clone(),
            Some(t) => RingState::settled(self.list.clone(), t.clone()),
        }
    }
}

/// What a new member list does to a ring state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListChange {
    /// Same version, same members.
    Unchanged,
    /// Taken: the new state (a transition starts, changes target, is cancelled, or none is
    /// needed).
    Adopted(RingState),
}

/// The owner `partition` moves to from `routing` to `target` (`None`: it stays, or no
/// transition runs).
pub fn next_owner<'a>(
    routing: &Claim,
    target: Option<&'a Claim>,
    partition: u32,
) -> Option<&'a str> {
    let to = target?.owner(partition);
    (to != routing.owner(partition)).then_some(to)
}

/// Applies `new` to `cur`. Refuses a version that goes back and a reused version with other
/// content (typed errors, state unchanged).
pub fn apply_list(cur: &RingState, new: &MemberList) -> Result<ListChange, MembersError> {
    let base = cur.target.as_ref().unwrap_or(&cur.routing);
    match classify_change(&cur.list, base, new)? {
        MembershipChange::Unchanged => return Ok(ListChange::Unchanged),
        MembershipChange::SameClaim { claim } if cur.target.is_none() => {
            // Addresses or zones only: the routing claim keeps its owners.
            return Ok(ListChange::Adopted(RingState::settled(new.clone(), claim)));
        }
        _ => {}
    }
    // The members of the routing claim again (a scale taken back): cancel.
    if new.claim_members() == cur.routing.members() {
        let claim = Claim::from_owners(
            cur.routing.params(),
            &new.claim_members(),
            &cur.routing.owners().collect::<Vec<_>>(),
        )?;
        return Ok(ListChange::Adopted(RingState::settled(new.clone(), claim)));
    }
    let target = base.rebalance(&new.claim_members())?.claim;
    if target.owners().eq(cur.routing.owners()) {
        // Nothing moves relative to what routes (e.g. a target taken back to the same owners).
        return Ok(ListChange::Adopted(RingState::settled(new.clone(), target)));
    }
    Ok(ListChange::Adopted(RingState {
        list: new.clone(),
        routing_list: cur.routing_list.clone(),
        routing: cur.routing.clone(),
        target: Some(target),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{RingParams, RingSize};

    fn list(version: u64, names: &[&str]) -> MemberList {
        MemberList::new(
            version,
            names
                .iter()
                .map(|n| Member::new(*n, format!("{n}:8087"), ""))
                .collect(),
        )
        .unwrap()
    }

    fn params() -> RingParams {
        RingParams::new(RingSize::new(16).unwrap(), 3).unwrap()
    }

    fn formed(names: &[&str]) -> RingState {
        let l = list(1, names);
        let c = Claim::initial(params(), &l.claim_members()).unwrap();
        RingState::settled(l, c)
    }

    fn adopted(r: Result<ListChange, MembersError>) -> RingState {
        match r.unwrap() {
            ListChange::Adopted(s) => s,
            other => panic!("not adopted: {other:?}"),
        }
    }

    #[test]
    fn a_join_starts_a_transition_that_routes_with_the_old_claim() {
        let s = formed(&["a", "b", "c"]);
        let t = adopted(apply_list(&s, &list(2, &["a", "b", "c", "d"])));
        assert_eq!(
            t.routing, s.routing,
            "routing unchanged until the moves are done"
        );
        let moves = t.moves();
        assert!(
            !moves.is_empty() && moves.iter().all(|m| m.to == "d"),
            "{moves:?}"
        );
        assert_eq!(t.next_owner(moves[0].partition), Some("d"));
        // Every node computes the same target from the same lists.
        let again = adopted(apply_list(&s, &list(2, &["a", "b", "c", "d"])));
        assert_eq!(again, t);
        let done = t.completed();
        assert_eq!(done.routing, t.target.clone().unwrap());
        assert!(done.target.is_none() && done.moves().is_empty());
        assert_eq!(done.routing_list, done.list);
    }

    #[test]
    fn a_leaving_member_stays_reachable_until_the_transition_completes() {
        let s = formed(&["a", "b", "c", "d"]);
        let t = adopted(apply_list(&s, &list(2, &["a", "b", "c"])));
        // Every partition d owned moves (others may move too, to keep preflists spread).
        let from_d: Vec<u32> = t
            .moves()
            .iter()
            .filter(|m| m.from == "d")
            .map(|m| m.partition)
            .collect();
        assert_eq!(from_d, s.routing.partitions_of("d"));
        assert!(t.moves().iter().all(|m| m.to != "d"));
        assert_eq!(t.member("d").unwrap().address, "d:8087");
        assert_eq!(t.all_members().len(), 4);
        assert!(t.completed().member("d").is_none());
    }

    #[test]
    fn a_list_during_a_transition_retargets_from_the_previous_target() {
        let s = formed(&["a", "b", "c"]);
        let t1 = adopted(apply_list(&s, &list(2, &["a", "b", "c", "d"])));
        let t2 = adopted(apply_list(&t1, &list(3, &["a", "b", "c", "d", "e"])));
        assert_eq!(t2.routing, s.routing);
        let want = t1
            .target
            .as_ref()
            .unwrap()
            .rebalance(&list(3, &["a", "b", "c", "d", "e"]).claim_members())
            .unwrap()
            .claim;
        assert_eq!(t2.target.as_ref(), Some(&want));
    }

    #[test]
    fn the_routing_members_again_cancel_the_transition() {
        let s = formed(&["a", "b", "c"]);
        let t = adopted(apply_list(&s, &list(2, &["a", "b", "c", "d"])));
        let back = adopted(apply_list(&t, &list(3, &["a", "b", "c"])));
        assert!(back.target.is_none());
        assert_eq!(
            back.routing.owners().collect::<Vec<_>>(),
            s.routing.owners().collect::<Vec<_>>()
        );
        assert_eq!(back.list.version(), 3);
    }

    #[test]
    fn addresses_only_change_nothing_else_and_old_versions_are_refused() {
        let s = formed(&["a", "b", "c"]);
        let mut moved = list(2, &["a", "b", "c"]).members().to_vec();
        moved[0].address = "a2:8087".into();
        let l = MemberList::new(2, moved).unwrap();
        let t = adopted(apply_list(&s, &l));
        assert!(t.target.is_none());
        assert_eq!(t.member("a").unwrap().address, "a2:8087");
        assert_eq!(apply_list(&t, &l).unwrap(), ListChange::Unchanged);
        assert!(matches!(
            apply_list(&t, &list(1, &["a", "b", "c"])),
            Err(MembersError::VersionWentBackwards { .. })
        ));
        assert!(matches!(
            apply_list(&t, &list(2, &["a", "b"])),
            Err(MembersError::VersionReused { .. })
        ));
    }
}
