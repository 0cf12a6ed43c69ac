//! The GET quorum, HEAD-then-GET: every replica answers a HEAD (its sibling set's metadata, or
//! notfound, or a failure); the coordinator decides from those, then fetches each winning value
//! from one replica that holds it.
//!
//! The rules are Riak's (`r`, `pr`, `notfound_ok`, `basic_quorum`):
//!
//! * A *found* reply counts toward `r`, and toward `pr` if it comes from a primary. A *notfound*
//!   counts the same way when `notfound_ok` is set; otherwise it counts as a notfound. Failures
//!   (error, overload, timeout) never count.
//! * **Success** as soon as `ok ≥ r` and `primary ok ≥ pr`: the reply is the merge of the found
//!   heads under the conflict policy — *found* if it holds a live value, *notfound* if it is
//!   empty or tombstones only.
//! * **Give up** when notfounds + failures reach [`ReadQuorum::fail_threshold`] (`n_val − r + 1`,
//!   or with `basic_quorum` a majority if smaller), or every target replied, or `r` / `pr` is out
//!   of reach with the replies still pending. The answer is then, in Riak's order: *notfound* if
//!   every reply was a notfound or a tombstone and none failed (and some was not counted toward
//!   `r`); else a `pr` error if `r` was met or `pr ≥ r`; else an `r` error.
//!
//! One difference: Riak notices an unreachable `pr` only once all replies are in; here it is
//! noticed as soon as the pending primaries cannot make it up.

use std::collections::BTreeSet;

use super::options::{QuorumOption, ReadQuorum};
use super::{Failure, QuorumError, ReplicaRole, TrackerError};
use crate::causality::{tombstone_reapable, Clock, ConflictPolicy, ReplicaCopy, SiblingSet};

/// One replica's reply to a HEAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeadReply {
    /// The replica's sibling set (tombstones included) and its vnode queue length when it
    /// answered (to pick where to fetch values from).
    Found {
        siblings: SiblingSet,
        queue_len: u32,
    },
    NotFound,
    Failed(Failure),
}

/// Fetch the value of `merged.siblings()[sibling]` from `sources[0]`, or the next on failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueFetch {
    pub sibling: usize,
    /// Replicas whose HEAD showed this sibling, shortest queue first (then primaries, then
    /// target order). Never empty.
    pub sources: Vec<usize>,
}

/// What the coordinator does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetDecision {
    Wait,
    /// Fetch the live siblings' values and reply with them and `merged.context()`. Tombstone
    /// siblings in `merged` have no value to fetch but stay in the reply (and its context).
    Found {
        merged: SiblingSet,
        fetch: Vec<ValueFetch>,
    },
    /// Reply notfound. `context` is the tombstones' clock when the key was deleted (a write that
    /// passes it back supersedes the delete without a sibling).
    NotFound {
        context: Option<Clock>,
    },
    Failed(QuorumError),
}

/// Why a replica gets a read repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairReason {
    /// It answered notfound.
    Missing,
    /// Its sibling set differs from the merge (it lacks something the merge has).
    Stale,
}

/// Send `merged` to each replica of `targets`, which merges it into what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPlan {
    pub merged: SiblingSet,
    pub targets: Vec<(usize, RepairReason)>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    found: u32,
    found_primary: u32,
    deleted: u32,
    notfound: u32,
    notfound_primary: u32,
    failed: u32,
    overloaded: u32,
    pending: u32,
    primaries_pending: u32,
    primaries: u32,
}

/// The HEAD replies to one GET so far.
#[derive(Clone, Debug)]
pub struct GetTracker {
    quorum: ReadQuorum,
    policy: ConflictPolicy,
    roles: Vec<ReplicaRole>,
    replies: Vec<Option<HeadReply>>,
}

impl GetTracker {
    /// `roles[i]` is the role of target `i` ([`ReplicaRole::of_targets`]).
    pub fn new(quorum: ReadQuorum, policy: ConflictPolicy, roles: &[ReplicaRole]) -> GetTracker {
        GetTracker {
            quorum,
            policy,
            roles: roles.to_vec(),
            replies: vec![None; roles.len()],
        }
    }

    pub fn quorum(&self) -> &ReadQuorum {
        &self.quorum
    }

    /// Records replica `replica`'s reply (one per replica) and decides.
    pub fn add(&mut self, replica: usize, reply: HeadReply) -> Result<GetDecision, TrackerError> {
        let replicas = self.replies.len();
        let slot = self
            .replies
            .get_mut(replica)
            .ok_or(TrackerError::UnknownReplica { replica, replicas })?;
        if slot.is_some() {
            return Err(TrackerError::AlreadyAnswered { replica });
        }
        *slot = Some(reply);
        Ok(self.decision())
    }

    /// The deadline passed: every replica still silent timed out.
    pub fn expire(&mut self) -> GetDecision {
        for r in &mut self.replies {
            if r.is_none() {
                *r = Some(HeadReply::Failed(Failure::Timeout));
            }
        }
        self.decision()
    }

    /// Every target replied (or timed out): the read-repair plan is final.
    pub fn complete(&self) -> bool {
        self.replies.iter().all(Option::is_some)
    }

    fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for (reply, role) in self.replies.iter().zip(&self.roles) {
            let primary = u32::from(*role == ReplicaRole::Primary);
            c.primaries += primary;
            match reply {
                None => {
                    c.pending += 1;
                    c.primaries_pending += primary;
                }
                Some(HeadReply::Found { siblings, .. }) => {
                    c.found += 1;
                    c.found_primary += primary;
                    c.deleted += u32::from(siblings.is_tombstone_only());
                }
                Some(HeadReply::NotFound) => {
                    c.notfound += 1;
                    c.notfound_primary += primary;
                }
                Some(HeadReply::Failed(f)) => {
                    c.failed += 1;
                    c.overloaded += u32::from(*f == Failure::Overloaded);
                }
            }
        }
        c
    }

    fn found_sets(&self) -> impl Iterator<Item = (usize, &SiblingSet, u32)> {
        self.replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(HeadReply::Found {
                    siblings,
                    queue_len,
                }) => Some((i, siblings, *queue_len)),
                _ => None,
            })
    }

    /// The merge of every found head so far under the conflict policy.
    pub fn merged(&self) -> SiblingSet {
        self.found_sets().fold(SiblingSet::new(), |acc, (_, s, _)| {
            acc.merge(s, self.policy)
        })
    }

    /// The decision on the replies so far (module documentation).
    pub fn decision(&self) -> GetDecision {
        let q = &self.quorum;
        let c = self.counts();
        let (ok, pok, uncounted_notfound) = if q.notfound_ok() {
            (
                c.found + c.notfound,
                c.found_primary + c.notfound_primary,
                0,
            )
        } else {
            (c.found, c.found_primary, c.notfound)
        };
        if ok >= q.r() && pok >= q.pr() {
            return self.reply();
        }
        let give_up = c.pending == 0
            || uncounted_notfound + c.failed >= q.fail_threshold()
            || ok + c.pending < q.r()
            || pok + c.primaries_pending < q.pr();
        if !give_up {
            return GetDecision::Wait;
        }
        if uncounted_notfound + c.deleted > 0 && ok == c.deleted && c.failed == 0 {
            let merged = self.merged();
            return GetDecision::NotFound {
                context: (!merged.is_empty()).then(|| merged.context()),
            };
        }
        let error = |option, needed, ok| QuorumError {
            option,
            needed,
            ok,
            notfound: uncounted_notfound,
            failed: c.failed,
            overloaded: c.overloaded,
            replicas: self.roles.len() as u32,
            primaries: c.primaries,
        };
        if pok < q.pr() && (ok >= q.r() || q.pr() >= q.r()) {
            GetDecision::Failed(error(QuorumOption::Pr, q.pr(), pok))
        } else {
            GetDecision::Failed(error(QuorumOption::R, q.r(), ok))
        }
    }

    fn reply(&self) -> GetDecision {
        let merged = self.merged();
        if merged.is_empty() {
            return GetDecision::NotFound { context: None };
        }
        if merged.is_tombstone_only() {
            return GetDecision::NotFound {
                context: Some(merged.context()),
            };
        }
        let fetch = self.fetch_plan(&merged);
        GetDecision::Found { merged, fetch }
    }

    /// Where to fetch each live sibling of `merged` from. A replica holds a sibling when its
    /// head has a sibling with the same metadata (timestamp, hash, size): under `lww` the merged
    /// sibling carries a joined clock no replica stores, but the value is the same.
    pub fn fetch_plan(&self, merged: &SiblingSet) -> Vec<ValueFetch> {
        merged
            .siblings()
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.meta.is_tombstone())
            .map(|(i, s)| {
                let mut sources: Vec<(u32, bool, usize)> = self
                    .found_sets()
                    .filter(|(_, set, _)| set.siblings().iter().any(|o| o.meta == s.meta))
                    .map(|(j, _, queue)| (queue, self.roles[j] != ReplicaRole::Primary, j))
                    .collect();
                sources.sort();
                ValueFetch {
                    sibling: i,
                    sources: sources.into_iter().map(|(_, _, j)| j).collect(),
                }
            })
            .collect()
    }

    /// Which replicas to repair, from the replies so far (call it when [`Self::complete`], or
    /// when the node stops waiting). Replicas that failed or have not answered are not repaired:
    /// nothing is known of them. Nothing found → nothing to repair. Tombstones are repaired like
    /// values (so that all primaries come to hold them and they can be reaped).
    pub fn read_repair(&self) -> RepairPlan {
        let merged = self.merged();
        let mut targets = Vec::new();
        if !merged.is_empty() {
            for (i, reply) in self.replies.iter().enumerate() {
                match reply {
                    Some(HeadReply::NotFound) => targets.push((i, RepairReason::Missing)),
                    Some(HeadReply::Found { siblings, .. }) if *siblings != merged => {
                        targets.push((i, RepairReason::Stale))
                    }
                    _ => {}
                }
            }
        }
        RepairPlan { merged, targets }
    }

    /// Whether the key's tombstone may be reaped ([`tombstone_reapable`]): every target replied,
    /// they are the `n_val` primaries, and all hold the same tombstones, at least `delay_us` old.
    pub fn reapable(&self, now_us: u64, delay_us: u64) -> bool {
        let mut copies = Vec::with_capacity(self.replies.len());
        for (reply, role) in self.replies.iter().zip(&self.roles) {
            let state = match reply {
                Some(HeadReply::Found { siblings, .. }) => Some(siblings),
                Some(HeadReply::NotFound) => None,
                _ => return false,
            };
            copies.push(ReplicaCopy {
                primary: *role == ReplicaRole::Primary,
                state,
            });
        }
        tombstone_reapable(
            &self.merged(),
            &copies,
            self.quorum.n_val(),
            now_us,
            delay_us,
        )
    }

    /// Replicas that have replied, in target order.
    pub fn answered(&self) -> BTreeSet<usize> {
        self.replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.is_some().then_some(i))
            .collect()
    }
}
