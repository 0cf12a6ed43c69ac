//! What a node keeps after it switches to a ring transition's target, and until when
//! (docs/cluster.md, "Settling").
//!
//! Members switch one by one, and one that cannot switch (it cannot reach a member it must ask,
//! in a partial partition) goes on routing by the claim before: its reads go to the old owners.
//! So after its switch a node keeps, for as long as any member may still route by the old claim,
//! - the vnodes it streamed away (handoff does not hand them over and empty them), and
//! - the forward-back: writes to the partitions the switch gave it go to their previous owner too.
//!
//! That lasts at least [`SETTLE_MIN`], and until every member of the lists before and after the
//! switch has been heard routing by the target's list (or a newer one). A member that a newer
//! list no longer names is not waited for: the operator publishes a list only after the
//! transition before it completed, which a member that left does only once it has switched.
//! The state is kept in `<data_dir>/SETTLING`, so a restart resumes it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use levee_cluster::MemberList;
use serde::{Deserialize, Serialize};

/// Where a node keeps its settle across restarts.
pub const SETTLE_FILE: &str = "SETTLING";

/// The shortest settle: other members switch within a poll or two of each other, and a read one
/// of them routed by the old claim just before may still be on its way.
pub const SETTLE_MIN: Duration = Duration::from_secs(5);

/// A switch settling.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    /// The member list whose target this node switched to.
    pub version: u64,
    /// Members not yet heard routing by list `version` or newer: they may still route by the
    /// claim before the switch.
    pub awaiting: BTreeSet<String>,
    /// The partitions the switch gave this node, with their previous owner (writes to them are
    /// forwarded back there while the switch settles).
    pub received_from: BTreeMap<u32, String>,
    /// The list the routing claim was made for before the switch, as JSON: members that left in
    /// the switch are reached through it.
    pub departed_list_json: String,
}

impl Settle {
    /// The settle of a switch by `me` from routing by `routing_list` to the target of `list`,
    /// which gives `me` the partitions in `received_from`. A settle still running from an earlier
    /// switch is folded in: its partitions keep forwarding back (unless this switch moves them
    /// on). Whoever it waited for is waited for now without folding: a member behind its list is
    /// behind this one too, and every member it waited for is in one of these two lists unless it
    /// left before them (the operator publishes a list only once the transition before it
    /// completed, which a leaving member does only after it switched).
    pub fn after_switch(
        me: &str,
        routing_list: &MemberList,
        list: &MemberList,
        received_from: BTreeMap<u32, String>,
        moved_away: &BTreeSet<u32>,
        earlier: Option<&Settle>,
    ) -> Settle {
        let awaiting: BTreeSet<String> = routing_list
            .members()
            .iter()
            .chain(list.members())
            .map(|m| m.name.clone())
            .filter(|n| n != me)
            .collect();
        let mut received = BTreeMap::new();
        if let Some(e) = earlier {
            received.extend(
                e.received_from
                    .iter()
                    .filter(|(p, _)| !moved_away.contains(p))
                    .map(|(p, from)| (*p, from.clone())),
            );
        }
        received.extend(received_from);
        Settle {
            version: list.version(),
            awaiting,
            received_from: received,
            departed_list_json: routing_list.to_json(),
        }
    }

    /// `name` answered that it routes by the claim of list `routing_version`: once that is this
    /// switch's list or newer it is no longer waited for. Whether that changed anything.
    pub fn heard(&mut self, name: &str, routing_version: u64) -> bool {
        routing_version >= self.version && self.awaiting.remove(name)
    }

    /// This node runs list `list` (routing by `routing_list`): when it is newer than the switch,
    /// members neither names are no longer waited for. Whether that changed anything.
    pub fn newer_lists(&mut self, list: &MemberList, routing_list: &MemberList) -> bool {
        if list.version() <= self.version {
            return false;
        }
        let before = self.awaiting.len();
        self.awaiting
            .retain(|n| list.get(n).is_some() || routing_list.get(n).is_some());
        self.awaiting.len() != before
    }

    /// Whether the switch has settled, `since_switch` after it (or after the node restarted
    /// during it).
    pub fn over(&self, since_switch: Duration) -> bool {
        since_switch >= SETTLE_MIN && self.awaiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use levee_cluster::Member;

    fn list(version: u64, names: &[&str]) -> MemberList {
        let members = names
            .iter()
            .map(|n| Member::new(*n, format!("{n}:7000"), ""))
            .collect();
        MemberList::new(version, members).unwrap()
    }

    fn names(s: &Settle) -> Vec<&str> {
        s.awaiting.iter().map(String::as_str).collect()
    }

    #[test]
    fn a_switch_waits_for_every_member_of_both_lists_but_itself() {
        let s = Settle::after_switch(
            "n1",
            &list(1, &["n1", "n2", "n3"]),
            &list(2, &["n1", "n2", "n4"]),
            BTreeMap::from([(3, "n3".to_string())]),
            &BTreeSet::new(),
            None,
        );
        assert_eq!(s.version, 2);
        assert_eq!(names(&s), ["n2", "n3", "n4"]);
        assert_eq!(s.received_from, BTreeMap::from([(3, "n3".to_string())]));
        assert_eq!(
            MemberList::parse(&s.departed_list_json).unwrap(),
            list(1, &["n1", "n2", "n3"])
        );
    }

    #[test]
    fn a_switch_settles_only_after_the_minimum_and_once_every_member_was_heard_switched() {
        let mut s = Settle::after_switch(
            "n1",
            &list(1, &["n1", "n2", "n3"]),
            &list(2, &["n1", "n2", "n3", "n4"]),
            BTreeMap::new(),
            &BTreeSet::new(),
            None,
        );
        // (member, the routing version it answers, changed, still awaited, over after 6 s)
        let table: &[(&str, u64, bool, &[&str], bool)] = &[
            ("n2", 1, false, &["n2", "n3", "n4"], false), // still routes by list 1
            ("n2", 2, true, &["n3", "n4"], false),
            ("n2", 2, false, &["n3", "n4"], false), // heard twice
            ("n4", 3, true, &["n3"], false),        // newer than the switch counts
            ("n5", 2, false, &["n3"], false),       // not awaited
            ("n3", 2, true, &[], true),
        ];
        for (name, routing, changed, awaited, over) in table {
            assert_eq!(s.heard(name, *routing), *changed, "{name} at {routing}");
            assert_eq!(names(&s), *awaited, "{name} at {routing}");
            assert_eq!(s.over(Duration::from_secs(6)), *over, "{name} at {routing}");
        }
        assert!(
            !s.over(SETTLE_MIN - Duration::from_millis(1)),
            "the minimum"
        );
        assert!(s.over(SETTLE_MIN));
    }

    #[test]
    fn a_newer_list_stops_the_wait_for_members_it_no_longer_names() {
        let mut s = Settle::after_switch(
            "n1",
            &list(2, &["n1", "n2", "n3", "n4"]),
            &list(3, &["n1", "n2", "n3"]),
            BTreeMap::new(),
            &BTreeSet::new(),
            None,
        );
        // The same list, or one routed by a list that still names n4: nothing changes.
        assert!(!s.newer_lists(
            &list(3, &["n1", "n2", "n3"]),
            &list(2, &["n1", "n2", "n3", "n4"])
        ));
        assert!(!s.newer_lists(&list(4, &["n1", "n2"]), &list(3, &["n1", "n2", "n3", "n4"])));
        assert_eq!(names(&s), ["n2", "n3", "n4"]);
        // List 4 drops n4 and routes by list 3, which has no n4 either: n4 left at 3 and the
        // operator published 4 only after that transition completed.
        assert!(s.newer_lists(&list(4, &["n1", "n2", "n3"]), &list(3, &["n1", "n2", "n3"])));
        assert_eq!(names(&s), ["n2", "n3"]);
    }

    #[test]
    fn a_switch_during_a_settle_keeps_forwarding_back_what_it_did_not_move_on() {
        let earlier = Settle::after_switch(
            "n1",
            &list(1, &["n1", "n2", "n3"]),
            &list(2, &["n1", "n2", "n3", "n4"]),
            BTreeMap::from([(3, "n3".to_string()), (5, "n2".to_string())]),
            &BTreeSet::new(),
            None,
        );
        let mut earlier_heard = earlier.clone();
        earlier_heard.heard("n2", 2);
        earlier_heard.heard("n4", 2);
        let s = Settle::after_switch(
            "n1",
            &list(2, &["n1", "n2", "n3", "n4"]),
            &list(3, &["n1", "n2", "n4"]),
            BTreeMap::from([(7, "n3".to_string())]),
            &BTreeSet::from([5]),
            Some(&earlier_heard),
        );
        assert_eq!(s.version, 3);
        assert_eq!(names(&s), ["n2", "n3", "n4"]);
        // p5 moved on from n1 in the second switch: n1 no longer forwards it back.
        assert_eq!(
            s.received_from,
            BTreeMap::from([(3, "n3".to_string()), (7, "n3".to_string())])
        );
    }

    #[test]
    fn a_settle_survives_its_file_format() {
        let s = Settle::after_switch(
            "n1",
            &list(1, &["n1", "n2"]),
            &list(2, &["n1", "n2", "n3"]),
            BTreeMap::from([(1, "n2".to_string())]),
            &BTreeSet::new(),
            None,
        );
        let text = serde_json::to_string(&Some(s.clone())).unwrap();
        let back: Option<Settle> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, Some(s));
    }
}
