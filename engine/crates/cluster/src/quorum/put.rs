//! The PUT quorum: when to acknowledge a write, and when it can no longer be acknowledged.
//!
//! Each replica answers `Written` (the write is applied and readable), maybe later `Durable`
//! (it is on disk: fsynced), or `Failed` (error, overload, timeout; after `Written` it means the
//! sync failed). The write succeeds once
//!
//! * `w` replicas have written (durable counts as written),
//! * `pw` of them are primaries,
//! * `dw` of them are durable,
//!
//! and fails as soon as one of these is out of reach with the replicas still pending — not at the
//! deadline. A failed PUT is not undone: the replicas that wrote keep the value (a later read may
//! return it), as in Riak; the client learns only that the quorum was not met.

use super::options::{QuorumOption, WriteQuorum};
use super::{Failure, QuorumError, ReplicaRole, TrackerError};

/// One replica's reply to a PUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutReply {
    Written,
    Durable,
    Failed(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Written,
    Durable,
    Failed { written: bool, failure: Failure },
}

/// What the replicas did, for the reply and the logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PutSummary {
    /// Replicas the write was sent to.
    pub replicas: u32,
    /// Written (including durable and written-then-failed-to-sync).
    pub written: u32,
    pub durable: u32,
    /// Written, on primaries.
    pub primaries_written: u32,
    /// Failed before writing.
    pub failed: u32,
    /// Of `failed` plus sync failures, overloads.
    pub overloaded: u32,
    /// No reply yet.
    pub pending: u32,
}

/// What the coordinator does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutDecision {
    Wait,
    /// Acknowledge the client.
    Succeeded(PutSummary),
    /// Answer "quorum not met" with these counts.
    Failed(QuorumError),
}

/// The replies to one PUT so far.
#[derive(Clone, Debug)]
pub struct PutTracker {
    quorum: WriteQuorum,
    roles: Vec<ReplicaRole>,
    states: Vec<State>,
}

impl PutTracker {
    /// `roles[i]` is the role of target `i` (see [`ReplicaRole::of_targets`]). Fewer targets
    /// than `n_val` (uncovered primaries) is allowed: the decision may then be a failure at once.
    pub fn new(quorum: WriteQuorum, roles: &[ReplicaRole]) -> PutTracker {
        PutTracker {
            quorum,
            roles: roles.to_vec(),
            states: vec![State::Pending; roles.len()],
        }
    }

    pub fn quorum(&self) -> &WriteQuorum {
        &self.quorum
    }

    /// Records replica `replica`'s reply and decides. `Written` then `Durable`, or `Written`
    /// then `Failed` (the sync failed), are allowed; anything after `Durable` or `Failed`, or
    /// `Written` twice, is an error and changes nothing.
    pub fn add(&mut self, replica: usize, reply: PutReply) -> Result<PutDecision, TrackerError> {
        let replicas = self.states.len();
        let state = self
            .states
            .get_mut(replica)
            .ok_or(TrackerError::UnknownReplica { replica, replicas })?;
        *state = match (*state, reply) {
            (State::Pending, PutReply::Written) => State::Written,
            (State::Pending | State::Written, PutReply::Durable) => State::Durable,
            (State::Pending, PutReply::Failed(failure)) => State::Failed {
                written: false,
                failure,
            },
            (State::Written, PutReply::Failed(failure)) => State::Failed {
                written: true,
                failure,
            },
            _ => return Err(TrackerError::AlreadyAnswered { replica }),
        };
        Ok(self.decision())
    }

    /// The deadline passed: every replica still silent timed out (and, if `dw` is asked, every
    /// replica that wrote but never said durable).
    pub fn expire(&mut self) -> PutDecision {
        let dw = self.quorum.dw() > 0;
        for s in &mut self.states {
            *s = match *s {
                State::Pending => State::Failed {
                    written: false,
                    failure: Failure::Timeout,
                },
                State::Written if dw => State::Failed {
                    written: true,
                    failure: Failure::Timeout,
                },
                other => other,
            };
        }
        self.decision()
    }

    pub fn summary(&self) -> PutSummary {
        let mut s = PutSummary {
            replicas: self.states.len() as u32,
            ..PutSummary::default()
        };
        for (state, role) in self.states.iter().zip(&self.roles) {
            let written = matches!(
                state,
                State::Written | State::Durable | State::Failed { written: true, .. }
            );
            s.written += u32::from(written);
            s.durable += u32::from(*state == State::Durable);
            s.primaries_written += u32::from(written && *role == ReplicaRole::Primary);
            s.pending += u32::from(*state == State::Pending);
            if let State::Failed { written, failure } = state {
                s.failed += u32::from(!written);
                s.overloaded += u32::from(*failure == Failure::Overloaded);
            }
        }
        s
    }

    /// The decision on the replies so far (see the module documentation).
    pub fn decision(&self) -> PutDecision {
        let q = &self.quorum;
        let sum = self.summary();
        if sum.written >= q.w() && sum.primaries_written >= q.pw() && sum.durable >= q.dw() {
            return PutDecision::Succeeded(sum);
        }
        let primaries = self
            .roles
            .iter()
            .filter(|r| **r == ReplicaRole::Primary)
            .count() as u32;
        let mut primaries_pending = 0;
        let mut primaries_failed = 0;
        let mut may_yet_be_durable = 0;
        let mut sync_failed = 0;
        for (state, role) in self.states.iter().zip(&self.roles) {
            let primary = *role == ReplicaRole::Primary;
            match state {
                State::Pending => {
                    primaries_pending += u32::from(primary);
                    may_yet_be_durable += 1;
                }
                State::Written => may_yet_be_durable += 1,
                State::Failed { written, .. } => {
                    primaries_failed += u32::from(primary && !written);
                    sync_failed += u32::from(*written);
                }
                State::Durable => {}
            }
        }
        let error = |option, needed, ok, failed| QuorumError {
            option,
            needed,
            ok,
            notfound: 0,
            failed,
            overloaded: sum.overloaded,
            replicas: sum.replicas,
            primaries,
        };
        if sum.written + sum.pending < q.w() {
            return PutDecision::Failed(error(QuorumOption::W, q.w(), sum.written, sum.failed));
        }
        if sum.primaries_written + primaries_pending < q.pw() {
            return PutDecision::Failed(error(
                QuorumOption::Pw,
                q.pw(),
                sum.primaries_written,
                primaries_failed,
            ));
        }
        if sum.durable + may_yet_be_durable < q.dw() {
            return PutDecision::Failed(error(
                QuorumOption::Dw,
                q.dw(),
                sum.durable,
                sum.failed + sync_failed,
            ));
        }
        PutDecision::Wait
    }
}
