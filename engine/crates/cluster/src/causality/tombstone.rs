//! When a deleted key's tombstone can be removed for good.
//!
//! A delete is a put of a tombstone, so the tombstone carries the delete's clock. Removing it
//! early is how deleted data comes back: a replica that missed the delete still holds the old
//! value, and once the tombstone is gone nothing dominates that value any more (read repair or
//! anti-entropy would copy it back). So a tombstone is reapable only when
//!
//! 1. the merged state of the key is tombstones and nothing else;
//! 2. **every primary** of the preflist answered (`n_val` primary copies), and each holds exactly
//!    that merged state — none is stale, none is missing it;
//! 3. **no fallback** took part (a fallback's copy would be handed back to a primary after the
//!    reap and could resurrect an older value it holds);
//! 4. the newest tombstone is at least `delay_us` old (clients that read before the delete and
//!    write back with an old context have had time to do so, and a replica restarting from a
//!    backup is unlikely to predate it).
//!
//! The node acts on a `true` with a conditional delete on each primary (remove only if the stored
//! state is still that tombstone set).

use super::siblings::SiblingSet;

/// What one replica of the key answered, as the reap rule needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaCopy<'a> {
    /// The replica is a primary of the preflist (not a fallback standing in for one).
    pub primary: bool,
    /// Its sibling set, `None` when it has no entry for the key.
    pub state: Option<&'a SiblingSet>,
}

/// Whether the tombstone `merged` may be reaped (module documentation).
pub fn tombstone_reapable(
    merged: &SiblingSet,
    copies: &[ReplicaCopy<'_>],
    n_val: u32,
    now_us: u64,
    delay_us: u64,
) -> bool {
    if !merged.is_tombstone_only() || n_val == 0 {
        return false;
    }
    if copies.iter().any(|c| !c.primary) {
        return false;
    }
    if copies.len() != n_val as usize || copies.iter().any(|c| c.state != Some(merged)) {
        return false;
    }
    let newest = merged.latest_timestamp_us().unwrap_or(u64::MAX);
    now_us
        .checked_sub(newest)
        .is_some_and(|age| age >= delay_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::causality::{Actor, Clock, SiblingMeta};

    fn tomb(ts: u64) -> SiblingSet {
        SiblingSet::single(
            Clock::from_parts([(Actor::new(1), 2)], []),
            SiblingMeta::tombstone(ts),
        )
    }

    fn primary(s: &SiblingSet) -> ReplicaCopy<'_> {
        ReplicaCopy {
            primary: true,
            state: Some(s),
        }
    }

    #[test]
    fn all_primaries_hold_an_old_enough_tombstone() {
        let t = tomb(100);
        let copies = [primary(&t), primary(&t), primary(&t)];
        assert!(tombstone_reapable(&t, &copies, 3, 1_100, 1_000));
    }

    #[test]
    fn too_young() {
        let t = tomb(100);
        let copies = [primary(&t), primary(&t), primary(&t)];
        assert!(!tombstone_reapable(&t, &copies, 3, 1_099, 1_000));
        // A tombstone stamped in the future (skewed clock) is never old enough yet.
        assert!(!tombstone_reapable(&t, &copies, 3, 50, 0));
    }

    #[test]
    fn a_primary_did_not_answer() {
        let t = tomb(0);
        assert!(!tombstone_reapable(
            &t,
            &[primary(&t), primary(&t)],
            3,
            10,
            0
        ));
    }

    #[test]
    fn a_primary_misses_the_tombstone() {
        let t = tomb(0);
        let missing = ReplicaCopy {
            primary: true,
            state: None,
        };
        assert!(!tombstone_reapable(
            &t,
            &[primary(&t), primary(&t), missing],
            3,
            10,
            0
        ));
    }

    #[test]
    fn a_fallback_took_part() {
        let t = tomb(0);
        let fallback = ReplicaCopy {
            primary: false,
            state: Some(&t),
        };
        assert!(!tombstone_reapable(
            &t,
            &[primary(&t), primary(&t), fallback],
            3,
            10,
            0
        ));
    }

    #[test]
    fn a_live_sibling_remains() {
        let t = tomb(0);
        let mixed = t.sync(&SiblingSet::single(
            Clock::from_parts([(Actor::new(2), 1)], []),
            SiblingMeta::for_value(b"v", 0),
        ));
        let copies = [primary(&mixed), primary(&mixed), primary(&mixed)];
        assert!(!tombstone_reapable(&mixed, &copies, 3, 10, 0));
    }
}
