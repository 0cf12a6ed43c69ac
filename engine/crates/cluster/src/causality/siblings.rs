//! Sibling sets: the values a replica keeps for one key, each with the clock of the write that made
//! it, and the rules that merge them.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::clock::{Actor, Clock, Dot};

/// What a sibling holds: a value (described, not carried: the value bytes stay in the store) or
/// a tombstone (a delete is a put of a tombstone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiblingKind {
    /// A value: its CRC-32C and its size in bytes.
    Value {
        hash: u32,
        size: u64,
    },
    Tombstone,
}

/// The metadata of one sibling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SiblingMeta {
    /// When the coordinator took the write, in microseconds since the Unix epoch (its wall clock).
    pub timestamp_us: u64,
    pub kind: SiblingKind,
    /// The n_val of the bucket type that wrote it, when smaller than the cluster's; 0 when the
    /// write used the cluster's n_val. Tells AAE exchange which replicas should hold the key
    /// ([`SiblingSet::n_val`]).
    pub n_val: u8,
}

impl SiblingMeta {
    /// The metadata of a value written at `timestamp_us`: its CRC-32C and length.
    pub fn for_value(value: &[u8], timestamp_us: u64) -> SiblingMeta {
        SiblingMeta {
            timestamp_us,
            kind: SiblingKind::Value {
                hash: levee_checksum::crc32c(value),
                size: value.len() as u64,
            },
            n_val: 0,
        }
    }

    pub fn tombstone(timestamp_us: u64) -> SiblingMeta {
        SiblingMeta {
            timestamp_us,
            kind: SiblingKind::Tombstone,
            n_val: 0,
        }
    }

    /// The same metadata recording a write at `n_val` replicas in a cluster of `cluster_n_val`
    /// (recorded only when it is smaller).
    pub fn written_at(self, n_val: u32, cluster_n_val: u32) -> SiblingMeta {
        SiblingMeta {
            n_val: recorded_n_val(n_val, cluster_n_val),
            ..self
        }
    }

    pub fn is_tombstone(&self) -> bool {
        self.kind == SiblingKind::Tombstone
    }

    /// The last-write-wins order: later timestamp first; at the same microsecond a tombstone beats
    /// a value (a delete and a write that tie: the delete wins), then the larger hash, then the
    /// larger size, then the recorded n_val. Total on metadata, independent of clocks, the same
    /// on every node.
    pub fn lww_cmp(&self, other: &SiblingMeta) -> Ordering {
        fn rank(k: &SiblingKind) -> (u8, u32, u64) {
            match *k {
                SiblingKind::Value { hash, size } => (0, hash, size),
                SiblingKind::Tombstone => (1, 0, 0),
            }
        }
        self.timestamp_us
            .cmp(&other.timestamp_us)
            .then_with(|| rank(&self.kind).cmp(&rank(&other.kind)))
            .then_with(|| self.n_val.cmp(&other.n_val))
    }
}

impl PartialOrd for SiblingMeta {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SiblingMeta {
    /// The same order as [`SiblingMeta::lww_cmp`] (it is total).
    fn cmp(&self, other: &Self) -> Ordering {
        self.lww_cmp(other)
    }
}

/// The `SiblingMeta::n_val` byte of a write at `n_val` replicas in a cluster of `cluster_n_val`:
/// the n_val when smaller, else 0.
pub fn recorded_n_val(n_val: u32, cluster_n_val: u32) -> u8 {
    if n_val < cluster_n_val {
        u8::try_from(n_val).unwrap_or(u8::MAX)
    } else {
        0
    }
}

/// One sibling: a write's clock and metadata.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sibling {
    pub clock: Clock,
    pub meta: SiblingMeta,
}

impl Sibling {
    pub fn new(clock: Clock, meta: SiblingMeta) -> Sibling {
        Sibling { clock, meta }
    }
}

/// How a bucket type resolves concurrent writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConflictPolicy {
    /// Keep every concurrent value; a read returns them all with one context that resolves them.
    #[default]
    Siblings,
    /// Keep only the sibling with the latest timestamp ([`SiblingMeta::lww_cmp`]).
    Lww,
}

/// The siblings a replica keeps for a key.
///
/// Invariants (kept by every constructor): sorted by (clock, metadata), no duplicates, and no
/// sibling whose clock is strictly dominated by another's. Two siblings may share a clock only if
/// their metadata differ — which correct actors never produce (a dot names one write); both are
/// then kept rather than one silently dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SiblingSet {
    siblings: Vec<Sibling>,
}

/// A clock counter would pass `u64::MAX` (only a forged context can get there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("actor {actor} has used every counter: the context passed in claims counter {counter}")]
pub struct CounterExhausted {
    pub actor: Actor,
    pub counter: u64,
}

/// The clock of a coordinated put through the vnode `actor`.
///
/// `ctx` is what the client read (the [`SiblingSet::context`] it was given; the empty clock for a
/// blind put), `local` the sibling set the coordinating vnode holds now. The new clock is `ctx`
/// plus one new dot of `actor`, with a counter above any of `actor`'s counters in `ctx` or in
/// `local`, so the write is a new event no replica has seen. Storing it with
/// `local.put(clock, meta)` drops exactly the siblings the client had seen; those it had not
/// stay as siblings.
///
/// The local set is part of the input because the context alone cannot give a fresh counter: two
/// clients reading the same context through one vnode would otherwise mint the same dot for two
/// different writes.
pub fn update(ctx: &Clock, local: &SiblingSet, actor: Actor) -> Result<Clock, CounterExhausted> {
    let seen = local
        .siblings
        .iter()
        .map(|s| s.clock.max_counter(actor))
        .fold(ctx.max_counter(actor), u64::max);
    let counter = seen.checked_add(1).ok_or(CounterExhausted {
        actor,
        counter: seen,
    })?;
    let mut clock = ctx.clone();
    clock.insert(Dot::new(actor, counter));
    Ok(clock)
}

impl SiblingSet {
    /// No sibling: the state of a key never written (and the context of a blind put is
    /// `SiblingSet::new().context()`, the empty clock).
    pub fn new() -> SiblingSet {
        SiblingSet::default()
    }

    pub fn single(clock: Clock, meta: SiblingMeta) -> SiblingSet {
        SiblingSet {
            siblings: vec![Sibling { clock, meta }],
        }
    }

    /// Keeps the siblings no other dominates, once each.
    pub fn from_siblings(siblings: impl IntoIterator<Item = Sibling>) -> SiblingSet {
        let mut all: Vec<Sibling> = siblings.into_iter().collect();
        all.sort();
        all.dedup();
        let keep: Vec<bool> = all
            .iter()
            .map(|s| !all.iter().any(|o| o.clock.dominates(&s.clock)))
            .collect();
        SiblingSet {
            siblings: all
                .into_iter()
                .zip(keep)
                .filter_map(|(s, k)| k.then_some(s))
                .collect(),
        }
    }

    /// Only for the decoder, which has checked the invariants itself.
    pub(crate) fn from_canonical(siblings: Vec<Sibling>) -> SiblingSet {
        SiblingSet { siblings }
    }

    pub fn siblings(&self) -> &[Sibling] {
        &self.siblings
    }

    pub fn len(&self) -> usize {
        self.siblings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.siblings.is_empty()
    }

    /// The siblings that hold a value (not tombstones).
    pub fn live(&self) -> impl Iterator<Item = &Sibling> {
        self.siblings.iter().filter(|s| !s.meta.is_tombstone())
    }

    /// Some sibling, and every one a tombstone: the key reads as not found.
    pub fn is_tombstone_only(&self) -> bool {
        !self.siblings.is_empty() && self.siblings.iter().all(|s| s.meta.is_tombstone())
    }

    /// The join of every sibling's clock: the context a read returns and the client passes back
    /// with its next put (which then supersedes every sibling it read).
    pub fn context(&self) -> Clock {
        self.siblings
            .iter()
            .fold(Clock::new(), |acc, s| acc.join(&s.clock))
    }

    /// Merges two replicas' sets (Preguiça's *sync*): every sibling of either that no sibling of
    /// either strictly dominates, once. Commutative, associative, idempotent.
    pub fn sync(&self, other: &SiblingSet) -> SiblingSet {
        SiblingSet::from_siblings(self.siblings.iter().chain(&other.siblings).cloned())
    }

    /// Stores a coordinated write: `clock` from [`update`], so it dominates what the client had
    /// seen and is concurrent with the rest.
    pub fn put(&self, clock: Clock, meta: SiblingMeta) -> SiblingSet {
        self.sync(&SiblingSet::single(clock, meta))
    }

    /// Last write wins: the one sibling with the greatest [`SiblingMeta::lww_cmp`], carrying the
    /// join of every clock (so it supersedes the losers wherever they still are). The empty set
    /// stays empty.
    pub fn resolve_lww(&self) -> SiblingSet {
        match self.siblings.iter().map(|s| s.meta).max() {
            None => SiblingSet::new(),
            Some(meta) => SiblingSet::single(self.context(), meta),
        }
    }

    /// Merges under a conflict policy. `Lww` is the timestamp order over the siblings of both,
    /// causality aside (a write stamped earlier loses even if it saw the other): a join of
    /// (max, clock union), so also commutative, associative and idempotent.
    pub fn merge(&self, other: &SiblingSet, policy: ConflictPolicy) -> SiblingSet {
        match policy {
            ConflictPolicy::Siblings => self.sync(other),
            ConflictPolicy::Lww => {
                let both = SiblingSet {
                    siblings: self
                        .siblings
                        .iter()
                        .chain(&other.siblings)
                        .cloned()
                        .collect(),
                };
                both.resolve_lww()
            }
        }
    }

    /// Every sibling of `other` is in `self` or strictly dominated by a sibling of `self`: a
    /// replica holding `other` has nothing `self` lacks.
    pub fn covers(&self, other: &SiblingSet) -> bool {
        other.siblings.iter().all(|o| {
            self.siblings
                .iter()
                .any(|s| s == o || s.clock.dominates(&o.clock))
        })
    }

    /// The newest timestamp of any sibling.
    pub fn latest_timestamp_us(&self) -> Option<u64> {
        self.siblings.iter().map(|s| s.meta.timestamp_us).max()
    }

    /// How many replicas should hold the key in a cluster of `cluster_n_val`: the largest n_val
    /// its siblings (live or tombstones) were written with. A smaller n_val's preflist is the
    /// start of a larger one's, so every sibling's replicas are among them. `cluster_n_val` for
    /// the empty set.
    pub fn n_val(&self, cluster_n_val: u32) -> u32 {
        self.siblings
            .iter()
            .map(|s| match s.meta.n_val {
                0 => cluster_n_val,
                n => u32::from(n),
            })
            .max()
            .unwrap_or(cluster_n_val)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Actor = Actor::new(10);
    const Y: Actor = Actor::new(20);

    fn val(ts: u64, hash: u32) -> SiblingMeta {
        SiblingMeta {
            n_val: 0,
            timestamp_us: ts,
            kind: SiblingKind::Value { hash, size: 1 },
        }
    }

    #[test]
    fn blind_put_through_the_same_vnode_makes_a_sibling() {
        let s0 = SiblingSet::new();
        let c1 = update(&s0.context(), &s0, X).unwrap();
        let s1 = s0.put(c1, val(1, 1));
        let c2 = update(&Clock::new(), &s1, X).unwrap();
        let s2 = s1.put(c2, val(2, 2));
        assert_eq!(s2.len(), 2, "{s2:?}");
    }

    #[test]
    fn put_with_the_read_context_replaces_what_was_read() {
        let s0 = SiblingSet::new();
        let s1 = s0.put(update(&Clock::new(), &s0, X).unwrap(), val(1, 1));
        let s2 = s1.put(update(&Clock::new(), &s1, Y).unwrap(), val(2, 2));
        assert_eq!(s2.len(), 2);
        let ctx = s2.context();
        let s3 = s2.put(update(&ctx, &s2, X).unwrap(), val(3, 3));
        assert_eq!(s3.len(), 1);
        assert_eq!(s3.siblings()[0].meta, val(3, 3));
    }

    #[test]
    fn put_with_a_stale_context_keeps_the_unseen_sibling() {
        let s0 = SiblingSet::new();
        let s1 = s0.put(update(&Clock::new(), &s0, X).unwrap(), val(1, 1));
        let ctx_a = s1.context();
        let s2 = s1.put(update(&ctx_a, &s1, X).unwrap(), val(2, 2));
        // A second client also read s1 and writes through another vnode holding s2.
        let s3 = s2.put(update(&ctx_a, &s2, Y).unwrap(), val(3, 3));
        let metas: Vec<_> = s3.siblings().iter().map(|s| s.meta).collect();
        assert_eq!(s3.len(), 2);
        assert!(metas.contains(&val(2, 2)) && metas.contains(&val(3, 3)));
    }

    #[test]
    fn same_clock_different_metadata_keeps_both() {
        let c = Clock::from_parts([(X, 1)], []);
        let s = SiblingSet::single(c.clone(), val(1, 1)).sync(&SiblingSet::single(c, val(1, 2)));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn lww_latest_timestamp_wins_and_carries_the_join() {
        let a = SiblingSet::single(Clock::from_parts([(X, 1)], []), val(5, 1));
        let b = SiblingSet::single(Clock::from_parts([(Y, 1)], []), val(9, 2));
        let m = a.merge(&b, ConflictPolicy::Lww);
        assert_eq!(m.len(), 1);
        assert_eq!(m.siblings()[0].meta, val(9, 2));
        assert_eq!(m.context(), Clock::from_parts([(X, 1), (Y, 1)], []));
    }

    #[test]
    fn lww_tie_tombstone_then_larger_hash() {
        let t = SiblingMeta::tombstone(7);
        assert_eq!(t.lww_cmp(&val(7, u32::MAX)), Ordering::Greater);
        assert_eq!(val(7, 3).lww_cmp(&val(7, 2)), Ordering::Greater);
        assert_eq!(val(8, 0).lww_cmp(&t), Ordering::Greater);
    }

    #[test]
    fn counter_exhaustion_is_an_error() {
        let ctx = Clock::from_parts([(X, u64::MAX)], []);
        assert_eq!(
            update(&ctx, &SiblingSet::new(), X),
            Err(CounterExhausted {
                actor: X,
                counter: u64::MAX
            })
        );
    }

    #[test]
    fn a_key_needs_the_largest_n_val_its_siblings_were_written_with() {
        // (recorded n_vals, cluster n_val, expected); 0 = the cluster's.
        let table: [(&[u32], u32, u32); 6] = [
            (&[], 3, 3),
            (&[3], 3, 3),
            (&[2], 3, 2),
            (&[2, 1], 3, 2),
            (&[2, 3], 3, 3),
            (&[5], 3, 3), // a type's n_val is never above the cluster's; recorded as 0
        ];
        for (written, cluster, want) in table {
            let set = SiblingSet::from_siblings(written.iter().enumerate().map(|(i, &n)| {
                let meta = SiblingMeta::tombstone(i as u64).written_at(n, cluster);
                Sibling::new(Clock::from_parts([], [Dot::new(X, i as u64 + 2)]), meta)
            }));
            assert_eq!(set.len(), written.len());
            assert_eq!(
                set.n_val(cluster),
                want,
                "{written:?} in a cluster of {cluster}"
            );
        }
        // Only a smaller n_val is recorded, so a write at the cluster's encodes as before.
        assert_eq!(val(1, 1).written_at(3, 3).n_val, 0);
        assert_eq!(val(1, 1).written_at(1, 3).n_val, 1);
    }
}
