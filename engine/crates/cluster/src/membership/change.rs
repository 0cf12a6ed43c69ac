//! What a new member list means for the ring this node has: nothing, new addresses only, or a
//! ring transition. Until ring transitions exist (the ring-changes issue) the node accepts the
//! first two and refuses the third, keeping the ring it has: ownership never changes silently.

use crate::ring::claim::{Claim, Transition};

use super::members::{MemberList, MembersError};

/// A new member list, classified against the current one and its claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// The same version and the same members: nothing to do.
    Unchanged,
    /// A newer list under which every partition keeps its owner (addresses changed, or zones
    /// changed without breaking the zone spread, or only the version moved). `claim` has the same
    /// owners as before and the new list's zones.
    SameClaim { claim: Claim },
    /// A newer list that moves partitions: a ring transition.
    RingTransition {
        transition: Transition,
        /// Names in the new list only, sorted.
        joining: Vec<String>,
        /// Names in the current list only, sorted.
        leaving: Vec<String>,
    },
}

/// Classifies `new` against `current`, whose claim is `claim`. Refuses a version that goes back,
/// and a reused version with other content.
pub fn classify_change(
    current: &MemberList,
    claim: &Claim,
    new: &MemberList,
) -> Result<MembershipChange, MembersError> {
    let names =
        |l: &MemberList| -> Vec<String> { l.members().iter().map(|m| m.name.clone()).collect() };
    if claim.members() != current.claim_members().as_slice() {
        return Err(MembersError::ClaimMismatch {
            version: current.version(),
        });
    }
    if new.version() < current.version() {
        return Err(MembersError::VersionWentBackwards {
            current: current.version(),
            new: new.version(),
        });
    }
    if new.version() == current.version() {
        return if new == current {
            Ok(MembershipChange::Unchanged)
        } else {
            Err(MembersError::VersionReused {
                version: new.version(),
            })
        };
    }
    let transition = claim.rebalance(&new.claim_members())?;
    if transition.moves.is_empty() {
        return Ok(MembershipChange::SameClaim {
            claim: transition.claim,
        });
    }
    let (old_names, new_names) = (names(current), names(new));
    Ok(MembershipChange::RingTransition {
        transition,
        joining: new_names
            .iter()
            .filter(|n| current.get(n).is_none())
            .cloned()
            .collect(),
        leaving: old_names
            .iter()
            .filter(|n| new.get(n).is_none())
            .cloned()
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::members::Member;
    use crate::ring::{RingParams, RingSize};

    fn list(version: u64, members: &[(&str, &str, &str)]) -> MemberList {
        MemberList::new(
            version,
            members
                .iter()
                .map(|(n, a, z)| Member::new(*n, *a, *z))
                .collect(),
        )
        .unwrap()
    }

    fn four(version: u64) -> MemberList {
        list(
            version,
            &[
                ("n0", "h0:1", "z0"),
                ("n1", "h1:1", "z1"),
                ("n2", "h2:1", "z2"),
                ("n3", "h3:1", "z0"),
            ],
        )
    }

    /// `four` plus n4 in zone z1.
    fn five(version: u64) -> MemberList {
        list(
            version,
            &[
                ("n0", "h0:1", "z0"),
                ("n1", "h1:1", "z1"),
                ("n2", "h2:1", "z2"),
                ("n3", "h3:1", "z0"),
                ("n4", "h4:1", "z1"),
            ],
        )
    }

    fn claim_of(l: &MemberList) -> Claim {
        let params = RingParams::new(RingSize::new(64).unwrap(), 3).unwrap();
        Claim::initial(params, &l.claim_members()).unwrap()
    }

    #[test]
    fn classification_table() {
        let cur = four(5);
        let claim = claim_of(&cur);
        let classify = |new: &MemberList| classify_change(&cur, &claim, new);

        assert_eq!(classify(&four(5)).unwrap(), MembershipChange::Unchanged);
        // A version bump alone, or new addresses: same owners.
        for new in [
            four(6),
            list(
                6,
                &[
                    ("n0", "h0:1", "z0"),
                    ("n1", "10.0.0.1:2", "z1"),
                    ("n2", "h2:1", "z2"),
                    ("n3", "h3:1", "z0"),
                ],
            ),
        ] {
            match classify(&new).unwrap() {
                MembershipChange::SameClaim { claim: c } => {
                    assert!(c.owners().eq(claim.owners()));
                }
                other => panic!("{other:?}"),
            }
        }
        // A join and a leave are transitions, with who joins and who leaves.
        let join = five(6);
        match classify(&join).unwrap() {
            MembershipChange::RingTransition {
                transition,
                joining,
                leaving,
            } => {
                assert_eq!((joining, leaving), (vec!["n4".to_string()], vec![]));
                assert!(transition.moved() >= transition.ideal && transition.ideal == 12);
            }
            other => panic!("{other:?}"),
        }
        let leave = list(
            6,
            &[
                ("n0", "h0:1", "z0"),
                ("n1", "h1:1", "z1"),
                ("n2", "h2:1", "z2"),
            ],
        );
        assert!(matches!(
            classify(&leave).unwrap(),
            MembershipChange::RingTransition { ref leaving, .. } if leaving == &["n3".to_string()]
        ));
        // Versions.
        assert_eq!(
            classify(&four(4)).unwrap_err(),
            MembersError::VersionWentBackwards { current: 5, new: 4 }
        );
        assert_eq!(
            classify(&leave.clone_with_version(5)).unwrap_err(),
            MembersError::VersionReused { version: 5 }
        );
        // A claim that is not the current list's.
        assert_eq!(
            classify_change(&join, &claim, &join).unwrap_err(),
            MembersError::ClaimMismatch { version: 6 }
        );
    }

    impl MemberList {
        fn clone_with_version(&self, version: u64) -> MemberList {
            MemberList::new(version, self.members().to_vec()).unwrap()
        }
    }
}
