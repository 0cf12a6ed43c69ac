//! The reaper: one process-wide thread that removes files the engine no longer lists — journal
//! segments replaced by compaction, ledger tables replaced by a merge — once their last holder
//! lets go, or keeps a replaced segment's file as a spare for a roll to write over
//! (`journal/spare.rs`).
//!
//! That holder is often a reader: a GET that took the segment list or the ledger version just
//! before the replacement. Unlinking a 256 MiB segment and closing its last handle (the kernel then
//! drops its page cache) took such a GET hundreds of milliseconds, so the work is queued here
//! instead. A crash with work still queued leaves files the manifest does not list; the next open
//! removes them.

use std::path::PathBuf;
use std::sync::mpsc::{channel, SendError, Sender};
use std::sync::{Arc, OnceLock};

use crate::fsutil::remove_quietly;
use crate::journal::spare::Spares;
use crate::storage::{Disk, StorageFile};

enum Job {
    /// Remove the files, then close the handle (the last one, so the kernel frees the space).
    Remove {
        disk: Disk,
        paths: Vec<PathBuf>,
        file: Arc<dyn StorageFile>,
    },
    /// Keep the segment file `seg` as a spare if `spares` wants it, else remove it; remove
    /// `idx`; then close the handle.
    Keep {
        disk: Disk,
        seg: PathBuf,
        idx: PathBuf,
        file: Arc<dyn StorageFile>,
        spares: Arc<Spares>,
    },
    /// Answer once everything queued before is done.
    Barrier(Sender<()>),
}

/// Remove `paths` and close `file` on the reaper thread (inline if it could not be started).
pub(crate) fn remove_later(disk: Disk, paths: Vec<PathBuf>, file: Arc<dyn StorageFile>) {
    submit(Job::Remove { disk, paths, file });
}

/// Keep the journal segment file `seg` as one of `spares` (`journal/spare.rs`) if it is wanted
/// and large enough, else remove it as [`remove_later`] does; its index `idx` goes either way.
pub(crate) fn keep_or_remove_later(
    disk: Disk,
    seg: PathBuf,
    idx: PathBuf,
    file: Arc<dyn StorageFile>,
    spares: Arc<Spares>,
) {
    submit(Job::Keep {
        disk,
        seg,
        idx,
        file,
        spares,
    });
}

/// Wait until every removal queued before this call is done (journal compaction calls it before
/// it returns, so its caller sees the space back).
pub(crate) fn barrier() {
    let (tx, rx) = channel();
    submit(Job::Barrier(tx));
    let _ = rx.recv();
}

fn submit(job: Job) {
    static QUEUE: OnceLock<Sender<Job>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("levee-reaper".into())
            .spawn(move || {
                for job in rx {
                    run(job);
                }
            });
        if let Err(e) = spawned {
            log::warn!("no reaper thread ({e}): replaced files are removed inline");
        }
        tx
    });
    if let Err(SendError(job)) = queue.send(job) {
        run(job);
    }
}

fn run(job: Job) {
    match job {
        Job::Remove { disk, paths, file } => {
            for p in &paths {
                remove_quietly(&*disk, p);
            }
            drop(file);
        }
        Job::Keep {
            disk,
            seg,
            idx,
            file,
            spares,
        } => {
            remove_quietly(&*disk, &idx);
            match spares.keep(&*disk, &seg) {
                Ok(true) => {}
                Ok(false) => remove_quietly(&*disk, &seg),
                Err(e) => {
                    log::warn!("not kept as a spare, removed: {e}");
                    remove_quietly(&*disk, &seg);
                }
            }
            drop(file);
        }
        Job::Barrier(done) => {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{SimDisk, SimOp};
    use std::path::Path;

    /// The file goes on the reaper thread, not on the thread that hands it over, and it is gone
    /// once `barrier` returns.
    #[test]
    fn files_are_removed_on_the_reaper_thread_before_the_barrier_returns() {
        let sim = SimDisk::new();
        let removers = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = removers.clone();
        sim.set_hook(Some(Arc::new(move |op| {
            if op == SimOp::Remove {
                let me = std::thread::current().name().map(str::to_owned);
                seen.lock().push(me);
            }
        })));
        let disk = sim.handle();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let (a, b) = (PathBuf::from("/d/1.seg"), PathBuf::from("/d/1.idx"));
        let file = disk.create_new(&a).unwrap();
        drop(disk.create_new(&b).unwrap());
        remove_later(disk.clone(), vec![a.clone(), b.clone()], file);
        barrier();
        assert!(!disk.exists(&a) && !disk.exists(&b), "both files removed");
        assert_eq!(
            *removers.lock(),
            vec![Some("levee-reaper".to_owned()); 2],
            "removed by the reaper thread"
        );
    }
}
