//! levee-cluster: the cluster layer of levee.
//!
//! This first part holds the ring and the member list, as pure functions of plain data:
//!
//! * [`ring::hash`] — (bucket, key) → partition, frozen for the life of a data directory.
//! * [`ring::claim`] — members → the owner of every partition, balanced, spread over nodes and
//!   zones, and a member change that moves few partitions.
//! * [`ring::preflist`] — the `n_val` replicas of a key, with fallbacks that skip the nodes
//!   already in the preflist while primaries are down.
//! * [`membership`] — the versioned member list the operator writes, and the classification of
//!   a new list (same claim, or a ring transition the node must refuse for now).
//! * [`ring::ring_file`] — the ring size recorded in a data directory at first start.
//!
//! `docs/cluster.md` describes the algorithms, formats and their limits.

pub mod membership;
pub mod ring;

pub use membership::change::{accept_without_transition, classify_change, MembershipChange};
pub use membership::members::{Member, MemberList, MembersError};
pub use ring::claim::{Claim, ClaimMember, ClaimReport, Move, Transition};
pub use ring::hash::partition_of;
pub use ring::preflist::{
    preflist_of_key, primary_preflist, targets, Replica, Role, Target, Targets,
};
pub use ring::ring_file::{ensure_ring_size, RingFileError, RingSizeCheck};
pub use ring::{Partition, RingError, RingParams, RingSize};
