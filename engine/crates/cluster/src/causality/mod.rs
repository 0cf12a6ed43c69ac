//! Causality: dotted version vectors and the sibling sets they order.
//!
//! * [`clock`] — [`Actor`] (a vnode incarnation), [`Dot`] (one write), [`Clock`] (a set of
//!   events in dotted-version-vector form) with `descends` / `dominates` / `concurrent` / `join`.
//! * [`siblings`] — [`SiblingSet`]: what a replica stores for a key; [`update`] makes the clock
//!   of a coordinated put, [`SiblingSet::sync`] merges replicas, [`SiblingSet::context`] is what a
//!   read hands the client, [`SiblingSet::resolve_lww`] the last-write-wins policy. A delete is a
//!   put of a [`SiblingKind::Tombstone`].
//! * [`tombstone`] — when a tombstone left alone may be reaped.
//! * [`codec`] — the versioned binary encoding of sibling sets and contexts.
//!
//! The write path, in terms of these functions (the node does the I/O):
//!
//! ```
//! use levee_cluster::causality::{update, Actor, Clock, ConflictPolicy, SiblingMeta, SiblingSet};
//!
//! let vnode = Actor::new(0x5eed);
//! let stored = SiblingSet::new(); // what the coordinating vnode holds for the key
//! let ctx = Clock::new(); // a blind put: the client read nothing
//! let clock = update(&ctx, &stored, vnode).unwrap();
//! let stored = stored.put(clock, SiblingMeta::for_value(b"hello", 1_700_000_000_000_000));
//! // The coordinator sends `stored` (the whole set) to the other replicas, which merge it:
//! let replica = SiblingSet::new().merge(&stored, ConflictPolicy::Siblings);
//! assert_eq!(replica, stored);
//! // A read returns the siblings and `context()`, which the client's next put passes back.
//! assert!(replica.context().descends(&ctx));
//! ```

pub mod clock;
pub mod codec;
pub mod siblings;
pub mod tombstone;

pub use clock::{Actor, Causal, Clock, Dot};
pub use codec::{
    decode_context, decode_siblings, encode_context, encode_siblings, DecodeError, FORMAT_VERSION,
};
pub use siblings::{
    recorded_n_val, update, ConflictPolicy, CounterExhausted, Sibling, SiblingKind, SiblingMeta,
    SiblingSet,
};
pub use tombstone::{tombstone_reapable, ReplicaCopy};
