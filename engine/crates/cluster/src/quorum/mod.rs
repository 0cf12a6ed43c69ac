//! Quorums: when a coordinator may answer a PUT or a GET, and what it answers.
//!
//! * [`options`] — `n_val, r, w, pr, pw, dw, notfound_ok, basic_quorum` and the conflict policy:
//!   per-bucket-type defaults ([`BucketTypeProps`], serde), per-request overrides, validation.
//! * [`put`] — [`PutTracker`]: replica acknowledgements in, "wait / succeeded / failed" out.
//! * [`get`] — [`GetTracker`]: HEAD replies in, "wait / found / notfound / failed" out, which
//!   replica to fetch each value from, and the read-repair plan.
//!
//! Trackers are plain state machines over the replies received so far: no clock, no I/O. The
//! node feeds each reply as it arrives and acts on the first decision other than `Wait`; at its
//! deadline it calls `expire`, which turns every missing reply into a timeout. A tracker keeps
//! taking replies after its decision (a GET's read repair wants them all).

pub mod get;
pub mod options;
pub mod put;

use std::fmt;

pub use get::{GetDecision, GetTracker, HeadReply, RepairPlan, RepairReason, ValueFetch};
pub use options::{
    BucketTypeProps, OptionsError, QuorumOption, QuorumValue, ReadOptions, ReadQuorum,
    WriteOptions, WriteQuorum,
};
pub use put::{PutDecision, PutReply, PutSummary, PutTracker};

use crate::ring::preflist::{Role, Targets};

/// Whether a replica is asked as a primary of the preflist or as a fallback for a down one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicaRole {
    Primary,
    Fallback,
}

impl ReplicaRole {
    /// The roles of a request's targets, in order: index `i` of a tracker is `targets[i]`.
    pub fn of_targets(targets: &Targets) -> Vec<ReplicaRole> {
        targets
            .targets
            .iter()
            .map(|t| match t.role {
                Role::Primary => ReplicaRole::Primary,
                Role::Fallback { .. } => ReplicaRole::Fallback,
            })
            .collect()
    }
}

/// Why a replica gave no usable answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// It answered with an error.
    Error,
    /// Its queue was full or its deadline passed before it started (the client should back off).
    Overloaded,
    /// No answer before the request's deadline.
    Timeout,
}

/// A quorum that was not, or can no longer be, met — with the counts the client error reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumError {
    /// The option that failed.
    pub option: QuorumOption,
    pub needed: u32,
    /// Replies that count toward `option` (for `pr`/`pw`: from primaries only).
    pub ok: u32,
    /// Notfound replies that did not count (GET with `notfound_ok = false`).
    pub notfound: u32,
    /// Errors, overloads and timeouts.
    pub failed: u32,
    /// Of `failed`, how many were overloads.
    pub overloaded: u32,
    /// Replicas in the request's targets (fewer than `n_val` when no node could stand in for a
    /// down primary).
    pub replicas: u32,
    /// Of `replicas`, the primaries (the most `pr`/`pw` could get).
    pub primaries: u32,
}

impl QuorumError {
    /// Some replica refused for overload: the node answers UNAVAILABLE with a retry hint, as Riak
    /// answers `overload`, rather than a plain quorum error.
    pub fn is_overload(&self) -> bool {
        self.overloaded > 0
    }
}

impl fmt::Display for QuorumError {
    /// `quorum not met: w=2 needed, 1 ok, 2 failed`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quorum not met: {}={} needed, {} ok",
            self.option, self.needed, self.ok
        )?;
        if self.option.is_primary() {
            f.write_str(" from primaries")?;
        }
        if self.notfound > 0 {
            write!(f, ", {} notfound", self.notfound)?;
        }
        write!(f, ", {} failed", self.failed)?;
        if self.overloaded > 0 {
            write!(f, " ({} overloaded)", self.overloaded)?;
        }
        if self.option.is_primary() && self.primaries < self.needed {
            write!(f, "; only {} primaries reachable", self.primaries)?;
        } else if !self.option.is_primary() && self.replicas < self.needed {
            write!(f, "; only {} replicas reachable", self.replicas)?;
        }
        Ok(())
    }
}

impl std::error::Error for QuorumError {}

/// A reply the tracker cannot take: a bug in the caller, reported rather than panicking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TrackerError {
    #[error("replica {replica} is not one of the request's {replicas} targets")]
    UnknownReplica { replica: usize, replicas: usize },
    #[error("replica {replica} already gave its final reply")]
    AlreadyAnswered { replica: usize },
}
