//! Snapshots a coverage query keeps on a vnode between its pages (`FoldKeys` / `IndexPage` with a
//! `snapshot` id), so every page of one query reads that vnode as of the query's first page: an
//! entry written, moved or deleted while the query runs is seen as it was, never twice or not at
//! all. A snapshot is held while its vnode has more to give; the last page releases it, a query
//! that stops early releases it with `ReleaseSnapshots`, and one left idle for [`IDLE`] (a client
//! gone without a word) is dropped at the next hold. At most [`MAX_HELD`] are held per member:
//! each pins ledger tables and journal segments on disk.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a held snapshot may go unread before it is dropped.
pub const IDLE: Duration = Duration::from_secs(120);

/// Snapshots a member holds at once for coverage queries.
pub const MAX_HELD: usize = 1024;

/// Why a held snapshot cannot be used or held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    #[error("query snapshot {id} is not held by this member (idle for more than {idle_secs} s, or the member restarted); start the query again")]
    Unknown { id: u64, idle_secs: u64 },
    #[error("query snapshot {id} belongs to partition {held}, not {asked}")]
    OtherPartition { id: u64, held: u32, asked: u32 },
    #[error(
        "this member holds {max} query snapshots, the most it keeps; retry when queries finish"
    )]
    Full { max: usize },
}

struct Held<S> {
    partition: u32,
    snap: Arc<S>,
    idle_until: Instant,
}

struct Table<S> {
    next: u64,
    held: HashMap<u64, Held<S>>,
}

/// The snapshots held on this member, by id.
pub struct HeldSnapshots<S> {
    idle: Duration,
    max: usize,
    table: Mutex<Table<S>>,
    /// `levee_query_snapshots_held`, kept equal to the number held once set.
    gauge: OnceLock<prometheus::IntGauge>,
}

impl<S> HeldSnapshots<S> {
    /// Ids start at `seed` (never 0): a restarted member does not hand out the ids of its
    /// previous life, so an old id is refused rather than read on a stranger's snapshot.
    pub fn new(idle: Duration, max: usize, seed: u64) -> HeldSnapshots<S> {
        HeldSnapshots {
            idle,
            max,
            table: Mutex::new(Table {
                next: seed.max(1),
                held: HashMap::new(),
            }),
            gauge: OnceLock::new(),
        }
    }

    /// Report the number held in `gauge` from now on.
    pub fn publish_to(&self, gauge: prometheus::IntGauge) {
        gauge.set(self.count() as i64);
        let _ = self.gauge.set(gauge);
    }

    fn published(&self, t: &Table<S>) {
        if let Some(g) = self.gauge.get() {
            g.set(t.held.len() as i64);
        }
    }

    /// The snapshot `id` of `partition`, its idle time restarted.
    pub fn get(&self, partition: u32, id: u64, now: Instant) -> Result<Arc<S>, HoldError> {
        let mut t = self.table.lock();
        let unknown = HoldError::Unknown {
            id,
            idle_secs: self.idle.as_secs(),
        };
        let h = t.held.get_mut(&id).ok_or(unknown.clone())?;
        if h.idle_until <= now {
            t.held.remove(&id);
            self.published(&t);
            return Err(unknown);
        }
        if h.partition != partition {
            return Err(HoldError::OtherPartition {
                id,
                held: h.partition,
                asked: partition,
            });
        }
        h.idle_until = now + self.idle;
        Ok(h.snap.clone())
    }

    /// Whether one more snapshot may be held (after dropping the idle ones): checked before a
    /// query does the work of a first page.
    pub fn room(&self, now: Instant) -> Result<(), HoldError> {
        let mut t = self.table.lock();
        t.held.retain(|_, h| h.idle_until > now);
        self.published(&t);
        if t.held.len() >= self.max {
            return Err(HoldError::Full { max: self.max });
        }
        Ok(())
    }

    /// Hold `snap` of `partition`; its new id.
    pub fn hold(&self, partition: u32, snap: Arc<S>, now: Instant) -> Result<u64, HoldError> {
        self.room(now)?;
        let mut t = self.table.lock();
        let mut id = t.next;
        while id == 0 || t.held.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        t.next = id.wrapping_add(1);
        t.held.insert(
            id,
            Held {
                partition,
                snap,
                idle_until: now + self.idle,
            },
        );
        self.published(&t);
        Ok(id)
    }

    /// Let go of `id` (nothing if it is not held).
    pub fn release(&self, id: u64) {
        let mut t = self.table.lock();
        if t.held.remove(&id).is_some() {
            self.published(&t);
        }
    }

    /// Snapshots held now.
    pub fn count(&self) -> usize {
        self.table.lock().held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (HeldSnapshots<&'static str>, Instant) {
        (
            HeldSnapshots::new(Duration::from_secs(10), 2, u64::MAX),
            Instant::now(),
        )
    }

    #[test]
    fn a_held_snapshot_is_read_again_until_released_or_idle() {
        let (h, t0) = table();
        let gauge = prometheus::IntGauge::new("held", "held").unwrap();
        h.publish_to(gauge.clone());
        let id = h.hold(3, Arc::new("s"), t0).unwrap();
        assert_eq!(id, u64::MAX, "ids start at the seed");
        assert_eq!(gauge.get(), 1);
        let s = Duration::from_secs;
        assert_eq!(*h.get(3, id, t0 + s(9)).unwrap(), "s");
        // Reading restarts the idle time: 9 s after the last read it is still there.
        assert_eq!(*h.get(3, id, t0 + s(18)).unwrap(), "s");
        let gone = h.get(3, id, t0 + s(28)).unwrap_err();
        assert!(
            matches!(gone, HoldError::Unknown { id: i, .. } if i == id),
            "{gone}"
        );
        assert_eq!(h.count(), 0, "an idle snapshot is dropped");
        assert_eq!(gauge.get(), 0);
        let id2 = h.hold(3, Arc::new("t"), t0).unwrap();
        assert_eq!(id2, 1, "ids wrap around past 0");
        h.release(id2);
        assert!(h.get(3, id2, t0).is_err());
        h.release(12345); // unknown: nothing
    }

    #[test]
    fn a_snapshot_is_read_only_for_its_partition() {
        let (h, t0) = table();
        let id = h.hold(3, Arc::new("s"), t0).unwrap();
        assert_eq!(
            h.get(4, id, t0).unwrap_err(),
            HoldError::OtherPartition {
                id,
                held: 3,
                asked: 4
            }
        );
        assert!(h.get(3, id, t0).is_ok(), "refusing did not drop it");
    }

    #[test]
    fn at_most_max_are_held_and_idle_ones_make_room() {
        let (h, t0) = table();
        let s = Duration::from_secs;
        let a = h.hold(0, Arc::new("a"), t0).unwrap();
        h.hold(1, Arc::new("b"), t0 + s(5)).unwrap();
        assert_eq!(
            h.hold(2, Arc::new("c"), t0 + s(6)).unwrap_err(),
            HoldError::Full { max: 2 }
        );
        assert!(h.room(t0 + s(6)).is_err());
        // At 11 s `a` has been idle 11 s: dropped to make room, `b` stays.
        let c = h.hold(2, Arc::new("c"), t0 + s(11)).unwrap();
        assert!(h.get(0, a, t0 + s(11)).is_err());
        assert_eq!(*h.get(2, c, t0 + s(11)).unwrap(), "c");
        assert_eq!(h.count(), 2);
    }
}
