//! Background work at a lower CPU priority. Journal compaction runs on a scoped thread of its own
//! that lowers its nice value first, so that requests come first for the CPU: a thread's nice
//! value can be raised but not lowered again without privileges, and the caller is often a thread
//! that serves requests next (a node's blocking pool), so the caller's own priority is never
//! touched. (The AAE rebuild was tried here and is not: docs/benchmarks.md, "AAE rebuilds at a
//! lower CPU priority, tried and not kept".)

use crate::error::Result;

/// Run `work` on a new thread named `name` at nice `nice` (0–19) and return what it returns.
/// Inline, at the caller's priority, when `nice` is 0 or no thread can be started (logged).
/// A panic in `work` is resumed on the caller.
pub(crate) fn run_at_nice<T: Send>(
    name: &str,
    nice: i32,
    work: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    if nice == 0 {
        return work();
    }
    // The work moves to the thread, or stays for the inline fallback if it does not start.
    let work = std::sync::Mutex::new(Some(work));
    let run = || {
        let work = work.lock().unwrap_or_else(|p| p.into_inner()).take();
        (work.expect("the background work runs once"))()
    };
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn_scoped(scope, || {
                set_thread_nice(name, nice);
                run()
            });
        match thread {
            Ok(t) => t
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => {
                log::warn!("no {name} thread ({e}): working at the caller's priority");
                run()
            }
        }
    })
}

/// Lower the calling thread's priority to nice `nice` (Linux: `setpriority` on a thread id
/// affects that thread only), never raising it: a process already niced further keeps its
/// value. A failure is logged once per process; the work then runs at the priority it has.
fn set_thread_nice(name: &str, nice: i32) {
    // SAFETY: plain system calls on the calling thread's own id; errno is cleared first because
    // getpriority may legitimately return -1.
    let failed = unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        let unknown = now == -1 && *libc::__errno_location() != 0;
        !unknown && now < nice && libc::setpriority(libc::PRIO_PROCESS, tid, nice) != 0
    };
    if failed {
        static WARNED: std::sync::Once = std::sync::Once::new();
        let e = std::io::Error::last_os_error();
        WARNED.call_once(|| log::warn!("could not lower the {name} thread's priority: {e}"));
    }
}
