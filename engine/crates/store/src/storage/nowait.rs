//! Reads that never wait for the disk.
//!
//! A server that runs its engine calls on a thread pool pays a thread hand-off (a wake-up and a
//! context switch) per call, even when everything the call reads is already in the page cache.
//! [`without_waiting`] runs a read-only engine call on the calling thread with every file read
//! made as `preadv2(RWF_NOWAIT)`: data in the page cache is read as usual, and a read that would
//! have to wait for the device fails at once. The call then reports `None` and the caller runs it
//! again where waiting is allowed (its blocking pool). An async server can so answer cached reads
//! on its reactor and send only the reads that miss the cache to the pool.
//!
//! What counts as "would wait" here: a file read whose data is not in the page cache, and the
//! lazy load of a journal segment's index (it opens and reads a whole file). Locks are not
//! covered: the read paths take only short in-memory locks, never one held across I/O.
//!
//! Where the kernel or filesystem does not support `RWF_NOWAIT` (`EOPNOTSUPP`), the first such
//! read turns the mode off for the process: [`without_waiting`] then returns `None` at once and
//! every call goes to the caller's pool, as before.

use std::cell::Cell;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Whether this thread is inside [`without_waiting`].
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// Whether a read inside the current [`without_waiting`] would have waited.
    static BLOCKED: Cell<bool> = const { Cell::new(false) };
}

/// Cleared once the kernel refuses `RWF_NOWAIT` for a file of this process.
static SUPPORTED: AtomicBool = AtomicBool::new(true);

/// Run `f` (a read-only engine call) on this thread without waiting for the disk: `Some` of its
/// result when every read it made was served from memory, `None` when one would have waited (the
/// result, an I/O error of kind `WouldBlock`, is dropped: run the call again on a thread that may
/// block). Calls may not nest.
pub fn without_waiting<T>(f: impl FnOnce() -> T) -> Option<T> {
    if !SUPPORTED.load(Ordering::Relaxed) {
        return None;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(false));
        }
    }
    assert!(
        !ACTIVE.with(Cell::get),
        "levee_store::storage::without_waiting does not nest"
    );
    ACTIVE.with(|a| a.set(true));
    BLOCKED.with(|b| b.set(false));
    let reset = Reset;
    let out = f();
    drop(reset);
    if BLOCKED.with(Cell::get) {
        None
    } else {
        Some(out)
    }
}

/// Whether the calling thread is inside [`without_waiting`].
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// Record that a read inside [`without_waiting`] would have waited, and the error to return.
pub(crate) fn would_wait(what: &str) -> io::Error {
    BLOCKED.with(|b| b.set(true));
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{what} is not in memory (a read that may not wait)"),
    )
}

/// Whether the current [`without_waiting`] call has hit a read that would wait (false outside
/// one): counters of completed reads skip the attempt that will be made again.
pub(crate) fn blocked() -> bool {
    active() && BLOCKED.with(Cell::get)
}

/// `pread` with `RWF_NOWAIT`: `WouldBlock` (recorded) when the data is not in the page cache.
pub(crate) fn pread_nowait(file: &std::fs::File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` points at `buf`, valid for writes of `buf.len()` bytes for the whole call;
    // the descriptor is owned by `file`, open for the call's duration.
    let n = unsafe {
        libc::preadv2(
            file.as_raw_fd(),
            &iov,
            1,
            offset as libc::off_t,
            libc::RWF_NOWAIT,
        )
    };
    if n >= 0 {
        return Ok(n as usize);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) => Err(would_wait("file data")),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            log::info!(
                "this kernel or filesystem does not support reads that may not wait \
                 (preadv2 RWF_NOWAIT: {err}); every engine read runs on the caller's pool"
            );
            SUPPORTED.store(false, Ordering::Relaxed);
            Err(would_wait("file data"))
        }
        _ => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// Drop a file's pages from the page cache (they are clean after the sync).
    fn evict(f: &std::fs::File) {
        f.sync_all().unwrap();
        // SAFETY: plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0, "posix_fadvise(DONTNEED)");
    }

    fn nowait_read(f: &std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
        pread_nowait(f, buf, 0)
    }

    #[test]
    fn a_read_of_evicted_data_reports_it_would_wait_and_a_cached_read_does_not() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("f");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 1 << 20]).unwrap();
        evict(&f);
        let f = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 64 << 10];

        let r = without_waiting(|| nowait_read(&f, &mut buf));
        assert!(r.is_none(), "an evicted page was read without waiting");
        assert!(!active(), "the mode is left on after the call");

        // A read that may wait brings the pages in; now the same read needs no wait.
        f.read_exact_at(&mut buf, 0).unwrap();
        let r = without_waiting(|| nowait_read(&f, &mut buf));
        assert_eq!(r.map(|r| r.unwrap()), Some(buf.len()));
        assert!(buf.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_call_that_reads_nothing_returns_its_result_and_a_panic_leaves_the_mode() {
        assert_eq!(without_waiting(|| 41 + 1), Some(42));
        let r = std::panic::catch_unwind(|| without_waiting(|| panic!("inside")));
        assert!(r.is_err());
        assert!(!active());
        assert!(!blocked());
    }
}
