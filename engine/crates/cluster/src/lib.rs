//! levee-cluster: the cluster layer of levee.
//!
//! Pure functions of plain data (the node does the I/O and calls them):
//!
//! * [`ring::hash`] — (bucket, key) → partition, frozen for the life of a data directory.
//! * [`ring::claim`] — members → the owner of every partition, balanced, spread over nodes and
//!   zones, and a member change that moves few partitions.
//! * [`ring::preflist`] — the `n_val` replicas of a key, with fallbacks that skip the nodes
//!   already in the preflist while primaries are down.
//! * [`membership`] — the versioned member list the operator writes, and the classification of
//!   a new list (same claim, or a ring transition the node must refuse for now).
//! * [`ring::ring_file`] — the ring size recorded in a data directory at first start.
//! * [`causality`] — dotted version vectors, sibling sets and their merge, last-write-wins,
//!   tombstones, and the binary encoding of object metadata and client contexts.
//! * [`index_entries`] — the secondary-index entries an object carries (per live sibling), the
//!   ledger metadata that stores their union next to the sibling set, and the diff a replica
//!   applies to its index when a merge changes them.
//! * [`object`] — a replica's object (sibling set + the contents of its live siblings), how a
//!   vnode stores it, and the merge a replica applies to an incoming object.
//! * [`quorum`] — the coordinator's decisions: PUT and GET quorum trackers (`w`/`pw`/`dw`,
//!   `r`/`pr`/`notfound_ok`/`basic_quorum`), value fetch and read-repair plans, and the
//!   per-bucket-type options.
//! * [`coverage`] — coverage queries: the plan of vnodes that answers every key-partition once,
//!   the merge of their sorted streams, and continuation tokens bound to a query.
//! * [`handoff`] — hinted handoff: which fallback vnodes to hand back now (throttled), and the
//!   acknowledged, resumable batches of one transfer.
//!
//! `docs/cluster.md` describes the algorithms, formats and their limits.

pub mod causality;
pub mod coverage;
pub mod handoff;
pub mod index_entries;
pub mod membership;
pub mod object;
pub mod quorum;
pub mod ring;
mod wire;

pub use causality::{
    decode_context, decode_siblings, encode_context, encode_siblings, tombstone_reapable, update,
    Actor, Causal, Clock, ConflictPolicy, CounterExhausted, DecodeError, Dot, ReplicaCopy, Sibling,
    SiblingKind, SiblingMeta, SiblingSet,
};

pub use coverage::{
    coverage_plan, merge_sorted, query_hash, Continuation, ContinuationError, CoverageError,
    CoveragePlan, CoverageVnode, FallbackVnode, FormatError, IndexEntry, KeyFilter, Merge,
    MergeError, MergeStep, MergedPage,
};
pub use handoff::{
    plan_handoffs, Batch, BatchId, BatchLimit, Handoff, HandoffError, HandoffKey, HandoffLimits,
    HandoffPlan, HandoffState, HandoffStatus, KeySource, Wait,
};
pub use index_entries::{
    apply_edits, decode_ledger_meta, encode_ledger_meta, siblings_bytes, EntriesError, IndexDiff,
    IndexEdit, IndexTerm, KeyIndexEntry,
};
pub use membership::change::{classify_change, MembershipChange};
pub use membership::members::{Member, MemberList, MembersError};
pub use membership::transition::{apply_list, next_owner, ListChange, RingState};
pub use object::{decode_contents, merge_needs_local_contents, Content, Object, ObjectError};
pub use quorum::{
    BucketTypeProps, Failure, GetDecision, GetTracker, HeadReply, OptionsError, PutDecision,
    PutReply, PutSummary, PutTracker, QuorumError, QuorumOption, QuorumValue, ReadOptions,
    ReadQuorum, RepairPlan, RepairReason, ReplicaRole, TrackerError, ValueFetch, WriteOptions,
    WriteQuorum,
};
pub use ring::claim::{Claim, ClaimMember, ClaimReport, Move, Transition};
pub use ring::hash::partition_of;
pub use ring::preflist::{
    hint_holders, preflist_of_key, primary_preflist, targets, targets_n, Replica, Role, Target,
    Targets,
};
pub use ring::rebuild::{held_partitions, owned_vnodes, rebuild_sources};
pub use ring::ring_file::{ensure_ring_size, RingFileError, RingSizeCheck};
pub use ring::{Partition, RingError, RingParams, RingSize};
