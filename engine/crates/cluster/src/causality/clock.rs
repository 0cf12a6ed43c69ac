//! Actors, dots and clocks.
//!
//! A [`Clock`] is a set of *events*; an event is a [`Dot`] `(actor, counter)`, the `counter`-th
//! update an actor coordinated. A clock is kept in the compact form of a dotted version vector: a
//! version vector `vv` (for each actor, every counter `1..=vv[actor]`) plus the dots beyond it that
//! are not contiguous with it. A clock made by [`update`](super::update) from a gap-free context
//! has at most one such dot — the DVV of Preguiça et al., where the dot names the write and the
//! vector its causal past. The form allows several so that the join of any clocks is exact (no
//! event is ever assumed seen that was not).
//!
//! The form is canonical: a dot at or below `vv[actor]` is dropped, a dot at `vv[actor] + 1` is
//! folded into the vector, counters are ≥ 1. Two clocks with the same events are therefore equal
//! as values, byte for byte in the encoding, and `descends` is plain set inclusion.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Who coordinated a write: one vnode (a partition on a node) in one incarnation.
///
/// A compact 64-bit id rather than `(partition, node name)`: the node draws it at random when it
/// creates a vnode's store, records it in the store, and draws a new one whenever the store starts
/// empty again (lost disk, replaced pod). A vnode that lost its data and came back under its old
/// actor would reissue counters it had already used, and the new writes would be silently taken
/// for old ones (Riak's kv679); a fresh random actor cannot collide with its past. With 64 random
/// bits, a cluster with 10⁶ actors over its life has a collision chance below 3·10⁻⁸.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Actor(u64);

impl Actor {
    pub const fn new(id: u64) -> Actor {
        Actor(id)
    }

    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// One event: the `counter`-th write coordinated by `actor` (counters start at 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dot {
    pub actor: Actor,
    pub counter: u64,
}

impl Dot {
    pub const fn new(actor: Actor, counter: u64) -> Dot {
        Dot { actor, counter }
    }
}

impl fmt::Display for Dot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.actor, self.counter)
    }
}

/// A set of events in canonical dotted-version-vector form (see the module documentation).
///
/// `Ord` is an arbitrary total order (by vector, then dots) used only to keep sibling sets
/// sorted; the causal order is [`Clock::descends`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Clock {
    vv: BTreeMap<Actor, u64>,
    dots: BTreeSet<Dot>,
}

/// The comparison of two clocks in the causal order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Causal {
    Equal,
    /// The first clock strictly descends the second (has seen all of it and more).
    Dominates,
    /// The second clock strictly descends the first.
    Dominated,
    /// Each has events the other lacks.
    Concurrent,
}

impl Clock {
    /// The empty clock: no event. The context of a blind put.
    pub fn new() -> Clock {
        Clock::default()
    }

    /// A clock holding the events of `vv` (each actor's counters `1..=n`) and of `dots`, brought
    /// to canonical form. Counters of 0 mean "no event" and are ignored.
    pub fn from_parts(
        vv: impl IntoIterator<Item = (Actor, u64)>,
        dots: impl IntoIterator<Item = Dot>,
    ) -> Clock {
        let mut c = Clock::new();
        for (a, n) in vv {
            if n > 0 {
                let e = c.vv.entry(a).or_insert(0);
                *e = (*e).max(n);
            }
        }
        c.dots = dots.into_iter().filter(|d| d.counter > 0).collect();
        c.normalize();
        c
    }

    /// Drop dots the vector already holds and fold those contiguous with it. The dots are visited
    /// in (actor, counter) order, so a run `vv+1, vv+2, …` folds in one pass.
    fn normalize(&mut self) {
        let dots = std::mem::take(&mut self.dots);
        for d in dots {
            let base = self.vv.get(&d.actor).copied().unwrap_or(0);
            if d.counter <= base {
                continue;
            }
            if d.counter == base + 1 {
                self.vv.insert(d.actor, d.counter);
            } else {
                self.dots.insert(d);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.vv.is_empty() && self.dots.is_empty()
    }

    /// The version-vector part: for each actor, the counter up to which every event is held.
    pub fn vector(&self) -> impl Iterator<Item = (Actor, u64)> + '_ {
        self.vv.iter().map(|(a, n)| (*a, *n))
    }

    /// The dots beyond the vector, in (actor, counter) order.
    pub fn dots(&self) -> impl Iterator<Item = Dot> + '_ {
        self.dots.iter().copied()
    }

    /// Whether the clock holds the event `dot`.
    pub fn contains(&self, dot: Dot) -> bool {
        dot.counter >= 1
            && (dot.counter <= self.vv.get(&dot.actor).copied().unwrap_or(0)
                || self.dots.contains(&dot))
    }

    /// The highest counter of `actor` the clock holds (0 if none).
    pub fn max_counter(&self, actor: Actor) -> u64 {
        let base = self.vv.get(&actor).copied().unwrap_or(0);
        let dot = self
            .dots
            .range(Dot::new(actor, 0)..=Dot::new(actor, u64::MAX))
            .next_back()
            .map_or(0, |d| d.counter);
        base.max(dot)
    }

    /// The number of events held (saturating).
    pub fn events(&self) -> u64 {
        self.vv
            .values()
            .fold(self.dots.len() as u64, |acc, n| acc.saturating_add(*n))
    }

    /// Adds one event.
    pub fn insert(&mut self, dot: Dot) {
        if dot.counter == 0 || self.contains(dot) {
            return;
        }
        self.dots.insert(dot);
        self.normalize();
    }

    /// The union of the events of both clocks.
    pub fn join(&self, other: &Clock) -> Clock {
        let mut out = self.clone();
        for (a, n) in &other.vv {
            let e = out.vv.entry(*a).or_insert(0);
            *e = (*e).max(*n);
        }
        out.dots.extend(other.dots.iter().copied());
        out.normalize();
        out
    }

    /// `self` has seen every event of `other` (equal clocks descend each other).
    pub fn descends(&self, other: &Clock) -> bool {
        // Canonical form: `self` holds the run 1..=n of an actor only if its vector reaches n
        // (a dot at vv+1 would have been folded in).
        other
            .vv
            .iter()
            .all(|(a, n)| self.vv.get(a).copied().unwrap_or(0) >= *n)
            && other.dots.iter().all(|d| self.contains(*d))
    }

    /// `self` descends `other` and has at least one event `other` lacks.
    pub fn dominates(&self, other: &Clock) -> bool {
        self != other && self.descends(other)
    }

    /// Neither descends the other.
    pub fn concurrent(&self, other: &Clock) -> bool {
        !self.descends(other) && !other.descends(self)
    }

    /// Where `self` stands relative to `other`.
    pub fn compare(&self, other: &Clock) -> Causal {
        match (self.descends(other), other.descends(self)) {
            (true, true) => Causal::Equal,
            (true, false) => Causal::Dominates,
            (false, true) => Causal::Dominated,
            (false, false) => Causal::Concurrent,
        }
    }

    /// The causal order as a `PartialOrd`-style answer (`None` when concurrent).
    pub fn partial_cmp_causal(&self, other: &Clock) -> Option<Ordering> {
        match self.compare(other) {
            Causal::Equal => Some(Ordering::Equal),
            Causal::Dominates => Some(Ordering::Greater),
            Causal::Dominated => Some(Ordering::Less),
            Causal::Concurrent => None,
        }
    }
}

impl fmt::Display for Clock {
    /// `{actor:n, …}` then `+ actor:c` for each dot beyond the vector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (a, n)) in self.vv.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{a}:{n}")?;
        }
        f.write_str("}")?;
        for d in &self.dots {
            write!(f, " + {d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Actor = Actor::new(1);
    const B: Actor = Actor::new(2);

    #[test]
    fn a_dot_contiguous_with_the_vector_is_folded_in() {
        let c = Clock::from_parts([(A, 2)], [Dot::new(A, 3), Dot::new(A, 4), Dot::new(A, 6)]);
        assert_eq!(c.vector().collect::<Vec<_>>(), vec![(A, 4)]);
        assert_eq!(c.dots().collect::<Vec<_>>(), vec![Dot::new(A, 6)]);
        assert_eq!(c.max_counter(A), 6);
        assert_eq!(c.events(), 5);
    }

    #[test]
    fn a_dot_below_the_vector_is_dropped() {
        let c = Clock::from_parts([(A, 5)], [Dot::new(A, 3)]);
        assert_eq!(c, Clock::from_parts([(A, 5)], []));
    }

    #[test]
    fn a_gap_dot_is_concurrent_with_the_run_before_it() {
        // Two blind puts through one vnode: {A:1} and the dot A:2 with an empty past.
        let first = Clock::from_parts([(A, 1)], []);
        let second = Clock::from_parts([], [Dot::new(A, 2)]);
        assert_eq!(first.compare(&second), Causal::Concurrent);
        let both = first.join(&second);
        assert_eq!(both, Clock::from_parts([(A, 2)], []));
        assert!(both.dominates(&first) && both.dominates(&second));
    }

    #[test]
    fn descends_is_event_inclusion() {
        let small = Clock::from_parts([(A, 1)], [Dot::new(B, 3)]);
        let big = Clock::from_parts([(A, 2), (B, 3)], []);
        assert_eq!(big.compare(&small), Causal::Dominates);
        assert_eq!(small.compare(&big), Causal::Dominated);
        assert_eq!(small.compare(&small.clone()), Causal::Equal);
        assert!(!small.descends(&Clock::from_parts([(B, 1)], [])));
        assert!(small.descends(&Clock::new()));
    }

    #[test]
    fn display_shows_vector_then_dots() {
        let c = Clock::from_parts([(A, 2)], [Dot::new(B, 5)]);
        assert_eq!(c.to_string(), "{0000000000000001:2} + 0000000000000002:5");
    }
}
