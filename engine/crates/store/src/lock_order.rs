//! The store's lock order, stated once as ranks and checked at run time when the
//! `lock-order-check` feature is on (the store's own tests turn it on through a dev-dependency, so
//! every test of `make test` runs under it; release builds of the node pay nothing).
//!
//! A thread may take a lock only if its rank is higher than every lock it already holds. Taking
//! one out of order panics with both names: a lock-order comment that drifts from the code (issue
//! 11, bug 9) becomes a failing test instead of a deadlock in production.

use std::ops::{Deref, DerefMut};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Ranks, lowest first: a thread holding one of these takes only locks further down this list.
/// `Inner`'s locks, then the journal's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Rank {
    /// A write's key stripe, held from its AAE lookup of the key's old version to the end of the
    /// write (a second write of the key waits, so the tree's delta is right).
    KeyStripe = 1,
    /// The queue of writers waiting for the journal (group append), held only to queue, take a
    /// group or pass the lead — never across I/O or another of these locks.
    WriteQueue,
    /// One journal compaction at a time, held across its whole run.
    CompactionLock,
    /// The registry of live snapshots.
    Snapshots,
    /// The write path: SQN assignment, journal append, memtable insert.
    Write,
    /// Segments a roll handed on, not yet closed (their index written): the ledger worker or
    /// `close` holds it while it closes them.
    RolledSegments,
    /// Held across every fdatasync of the journal with its poisoning decision.
    JournalSyncGate,
    /// The files a journal sync covers: the active segment's and rolled-out ones not yet synced.
    JournalFiles,
    /// The AAE tree.
    Aae,
    /// The manifest writer.
    Manifest,
    /// Whether the journal directory holds an entry not yet made durable (a rolled-in segment).
    JournalDir,
    /// The background-work state (flush/merge queue, stall and settle checks).
    Bg,
    /// Memtables.
    Mem,
    /// The ledger's current version (its tables).
    Version,
    /// Group commit: synced SQN and waiters.
    Sync,
}

#[cfg(feature = "lock-order-check")]
mod check {
    use super::Rank;
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Examples (benchmarks) are built with dev-dependencies, so with this feature: they switch
    /// the check off at start (`disable_lock_order_check`) to measure the engine as shipped.
    pub(super) static ENABLED: AtomicBool = AtomicBool::new(true);
    fn on() -> bool {
        ENABLED.load(Ordering::Relaxed)
    }

    thread_local! {
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
        /// Set by this module's own tests to see the violation as a panic.
        pub(super) static PANIC_ON_VIOLATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A violation aborts the process (after printing where): a panic on a background thread
    /// would only end that thread, and joins that ignore it could hide the violation from a test.
    fn violated(msg: String) -> ! {
        if PANIC_ON_VIOLATION.with(|p| p.get()) {
            panic!("{msg}");
        }
        eprintln!("{msg}\n{}", std::backtrace::Backtrace::force_capture());
        std::process::abort();
    }

    pub(super) fn acquire(rank: Rank) {
        if !on() {
            return;
        }
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(&top) = h.iter().max() {
                if top >= rank {
                    let held = h.clone();
                    drop(h);
                    violated(format!(
                        "lock order violated: taking {rank:?} while holding {held:?} \
                         (see store::lock_order::Rank)"
                    ));
                }
            }
            h.push(rank);
        });
    }

    /// A lock taken without waiting (`try_lock`) cannot close a wait cycle: recorded, not checked.
    pub(super) fn record(rank: Rank) {
        if !on() {
            return;
        }
        HELD.with(|h| h.borrow_mut().push(rank));
    }

    pub(super) fn release(rank: Rank) {
        if !on() {
            return;
        }
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|r| *r == rank) {
                h.remove(i);
            }
        });
    }
}

#[cfg(not(feature = "lock-order-check"))]
mod check {
    use super::Rank;
    #[inline(always)]
    pub(super) fn acquire(_: Rank) {}
    #[inline(always)]
    pub(super) fn record(_: Rank) {}
    #[inline(always)]
    pub(super) fn release(_: Rank) {}
}

/// Whether this build checks the lock order (tests assert it, so turning the check off in the
/// tests fails them instead of silently testing nothing).
pub fn checked() -> bool {
    #[cfg(feature = "lock-order-check")]
    return check::ENABLED.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "lock-order-check"))]
    false
}

/// Switch the check off for the rest of the process: for benchmarks, which cargo builds with
/// the dev-dependencies (and so with the check) like tests. Call it before opening any store.
pub fn disable() {
    #[cfg(feature = "lock-order-check")]
    check::ENABLED.store(false, std::sync::atomic::Ordering::Relaxed);
}

/// A lock with its rank.
pub(crate) struct Ranked<L> {
    rank: Rank,
    lock: L,
}

/// A guard that records, while it lives, that this thread holds a lock of its rank.
pub(crate) struct Guard<G> {
    rank: Rank,
    guard: G,
}

impl<G> Guard<G> {
    fn new(rank: Rank, take: impl FnOnce() -> G) -> Self {
        check::acquire(rank);
        Guard {
            rank,
            guard: take(),
        }
    }
    /// The underlying guard, for a `Condvar` wait (which gives the lock back and retakes it: the
    /// thread's record of held locks does not change).
    pub(crate) fn raw(&mut self) -> &mut G {
        &mut self.guard
    }
}

impl<G> Drop for Guard<G> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}
impl<G: DerefMut> DerefMut for Guard<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

impl<T> Ranked<Mutex<T>> {
    pub(crate) fn mutex(rank: Rank, value: T) -> Self {
        Ranked {
            rank,
            lock: Mutex::new(value),
        }
    }
    pub(crate) fn lock(&self) -> Guard<MutexGuard<'_, T>> {
        Guard::new(self.rank, || self.lock.lock())
    }
    pub(crate) fn try_lock(&self) -> Option<Guard<MutexGuard<'_, T>>> {
        let guard = self.lock.try_lock()?;
        check::record(self.rank);
        Some(Guard {
            rank: self.rank,
            guard,
        })
    }
}

impl<T> Ranked<RwLock<T>> {
    pub(crate) fn rwlock(rank: Rank, value: T) -> Self {
        Ranked {
            rank,
            lock: RwLock::new(value),
        }
    }
    pub(crate) fn read(&self) -> Guard<RwLockReadGuard<'_, T>> {
        Guard::new(self.rank, || self.lock.read())
    }
    pub(crate) fn write(&self) -> Guard<RwLockWriteGuard<'_, T>> {
        Guard::new(self.rank, || self.lock.write())
    }
}

#[cfg(all(test, feature = "lock-order-check"))]
mod tests {
    use super::*;

    fn panic_on_violation() {
        check::PANIC_ON_VIOLATION.with(|p| p.set(true));
    }

    #[test]
    fn locks_taken_in_rank_order_are_allowed() {
        let write = Ranked::mutex(Rank::Write, ());
        let version = Ranked::rwlock(Rank::Version, ());
        let _w = write.lock();
        let _v = version.read();
    }

    #[test]
    #[should_panic(expected = "lock order violated: taking Write while holding [Version]")]
    fn a_lock_taken_against_the_order_panics() {
        let write = Ranked::mutex(Rank::Write, ());
        let version = Ranked::rwlock(Rank::Version, ());
        panic_on_violation();
        let _v = version.read();
        let _w = write.lock();
    }

    #[test]
    #[should_panic(expected = "taking Bg while holding [Bg]")]
    fn the_same_rank_twice_panics() {
        let a = Ranked::mutex(Rank::Bg, ());
        let b = Ranked::mutex(Rank::Bg, ());
        panic_on_violation();
        let _a = a.lock();
        let _b = b.lock();
    }

    #[test]
    fn a_released_lock_no_longer_counts() {
        let write = Ranked::mutex(Rank::Write, ());
        let version = Ranked::rwlock(Rank::Version, ());
        drop(version.read());
        let _w = write.lock();
    }
}
