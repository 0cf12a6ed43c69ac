//! A beacon: a futex word many threads sleep on, which one call wakes all at once.
//!
//! A parking_lot `Condvar::notify_all` made under its mutex moves the sleepers onto the mutex's
//! queue, and each then wakes the next as it unlocks: fourteen writers woken by one journal
//! fdatasync ran one after another, each waiting for a core behind the one before it. A beacon
//! wakes every sleeper (or every sleeper in a set of lanes) with one `FUTEX_WAKE`, which marks
//! them all runnable before the waker can be preempted, and a woken thread re-checks its condition
//! without taking a lock.
//!
//! The protocol, as with a condition variable: read [`Beacon::epoch`], check the condition, and if
//! it does not hold, [`Beacon::wait`] with that epoch. Whoever makes a condition true does so
//! first and then calls [`Beacon::raise`]. A raise between the epoch read and the wait makes the
//! wait return at once (the futex word no longer holds the epoch), so no wake-up is lost; a wait
//! may also return without a raise, so callers loop.

use std::sync::atomic::{AtomicU32, Ordering};

/// Every lane: [`Beacon::wait`] and [`Beacon::raise`].
const ALL_LANES: u32 = u32::MAX;

pub(crate) struct Beacon {
    /// The epoch, advanced by each raise; the futex word.
    word: AtomicU32,
    /// Threads inside `wait_lane`: a raise with none skips its system call.
    sleepers: AtomicU32,
}

impl Beacon {
    pub(crate) const fn new() -> Beacon {
        Beacon {
            word: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }

    /// The epoch to pass to a wait: read it before checking the condition waited for.
    pub(crate) fn epoch(&self) -> u32 {
        self.word.load(Ordering::SeqCst)
    }

    /// Sleep until a raise after `epoch` was read (at once if one came already). May return early.
    pub(crate) fn wait(&self, epoch: u32) {
        self.wait_lane(epoch, ALL_LANES);
    }

    /// As `wait`, woken only by raises whose lanes include one of `lanes` (a bit set, not 0).
    pub(crate) fn wait_lane(&self, epoch: u32, lanes: u32) {
        debug_assert_ne!(lanes, 0);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        futex(
            &self.word,
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            epoch,
            lanes,
        );
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Advance the epoch and wake every sleeper.
    pub(crate) fn raise(&self) {
        self.raise_lanes(ALL_LANES);
    }

    /// Advance the epoch and wake the sleepers of `lanes`, in one system call. Every sleeper sees
    /// the new epoch: one of another lane that was about to sleep returns at once and looks again.
    pub(crate) fn raise_lanes(&self, lanes: u32) {
        self.word.fetch_add(1, Ordering::SeqCst);
        // SeqCst on both sides: a sleeper this load misses counted itself after the epoch moved,
        // so its futex wait compares against the new epoch and does not sleep.
        if lanes != 0 && self.sleepers.load(Ordering::SeqCst) > 0 {
            futex(
                &self.word,
                libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG,
                i32::MAX as u32,
                lanes,
            );
        }
    }
}

/// `futex(2)` with a bit set: a wait (`val` = the epoch expected, no timeout) or a wake (`val` =
/// how many). Errors need no handling: a wait that fails (`EAGAIN`: the epoch moved, `EINTR`)
/// returns to a caller that checks its condition again, and a wake of a valid word cannot fail.
fn futex(word: &AtomicU32, op: libc::c_int, val: u32, lanes: u32) {
    // SAFETY: `word` is a live, aligned u32 for the call; a null timeout means none; the second
    // address is unused by these operations.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            lanes,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::Beacon;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Wait until `done` reaches `n` or `deadline` passes; how many are done.
    fn done_by(done: &AtomicU32, n: u32, deadline: Instant) -> u32 {
        while done.load(Ordering::SeqCst) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        done.load(Ordering::SeqCst)
    }

    #[test]
    fn a_raise_wakes_every_sleeper_and_only_the_lanes_raised() {
        let b = Arc::new(Beacon::new());
        let done = Arc::new(AtomicU32::new(0));
        // Flag checks made: a thread woken for nothing has looked once more once this moves.
        let checks = Arc::new(AtomicU32::new(0));
        let flags: Vec<Arc<AtomicBool>> =
            (0..8).map(|_| Arc::new(AtomicBool::new(false))).collect();
        let threads: Vec<_> = (0..8u32)
            .map(|i| {
                let (b, done, flag) = (b.clone(), done.clone(), flags[i as usize].clone());
                let checks = checks.clone();
                std::thread::spawn(move || loop {
                    let e = b.epoch();
                    let set = flag.load(Ordering::SeqCst);
                    checks.fetch_add(1, Ordering::SeqCst);
                    if set {
                        done.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    b.wait_lane(e, 1 << (i % 4));
                })
            })
            .collect();
        // Everybody asleep.
        let deadline = Instant::now() + Duration::from_secs(10);
        while b.sleepers.load(Ordering::SeqCst) < 8 {
            assert!(Instant::now() < deadline, "the sleepers never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Lane 0 holds threads 0 and 4: set only thread 0's flag and raise lane 0; thread 4
        // wakes, finds nothing and sleeps again.
        flags[0].store(true, Ordering::SeqCst);
        b.raise_lanes(1);
        let n = done_by(&done, 1, Instant::now() + Duration::from_secs(10));
        assert_eq!(
            n, 1,
            "a raise of lane 0 woke {n} threads with their flags set"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        // Thread 4 has looked at its (unset) flag again: 8 first checks, then threads 0 and 4.
        while checks.load(Ordering::SeqCst) < 10 || b.sleepers.load(Ordering::SeqCst) < 7 {
            assert!(Instant::now() < deadline, "thread 4 never slept again");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Setting the others' flags without a raise wakes nobody: they are asleep, not polling.
        for f in &flags[1..] {
            f.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "a sleeper woke without a raise"
        );
        // A raise of lanes 1 and 2 wakes threads 1, 2, 5, 6 and leaves 3, 4 (lane 0!) and 7.
        b.raise_lanes(0b110);
        let n = done_by(&done, 5, Instant::now() + Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            done.load(Ordering::SeqCst),
            5,
            "{n}: lanes 1 and 2 hold four sleepers"
        );
        b.raise();
        assert_eq!(
            done_by(&done, 8, Instant::now() + Duration::from_secs(10)),
            8,
            "a raise of every lane left sleepers"
        );
        for t in threads {
            t.join().unwrap();
        }
    }

    /// The epoch protocol loses no wake-up: a raise that lands between a waiter's check and its
    /// sleep (here, deterministically, before the sleep starts, with nobody asleep to skip the
    /// system call for) makes the sleep return at once instead of waiting for a raise that will
    /// never come again.
    #[test]
    fn a_raise_between_the_check_and_the_sleep_is_not_lost() {
        let b = Arc::new(Beacon::new());
        let done = Arc::new(AtomicU32::new(0));
        let epoch = b.epoch();
        b.raise();
        let waiter = {
            let (b, done) = (b.clone(), done.clone());
            std::thread::spawn(move || {
                b.wait(epoch);
                done.store(1, Ordering::SeqCst);
            })
        };
        let n = done_by(&done, 1, Instant::now() + Duration::from_secs(10));
        if n == 0 {
            // Let the test end; the assertion below reports the failure.
            b.raise();
        }
        waiter.join().unwrap();
        assert_eq!(
            n, 1,
            "a waiter slept through the raise made after it read its epoch"
        );
    }
}
