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
//!
//! A large file is shrunk before it is unlinked, `SHRINK_STEP` at a time with an fdatasync after
//! each step, so the filesystem frees its blocks in small transactions. On a filesystem mounted
//! with online discard, a transaction that freed a whole 256 MiB segment discarded all of it
//! before it completed, and every fdatasync waiting on that transaction (synced writes among
//! them) waited 200 ms and more (docs/benchmarks.md, "Discards of removed segments").

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, SendError, Sender};
use std::sync::{Arc, OnceLock};

use crate::fsutil::remove_quietly;
use crate::journal::spare::Spares;
use crate::storage::{Disk, Storage, StorageFile};

/// How much of a file's end one step of [`shrink_then_remove`] frees.
pub(crate) const SHRINK_STEP: u64 = 16 << 20;

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
                shrink_then_remove(&*disk, p);
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
                Ok(false) => shrink_then_remove(&*disk, &seg),
                Err(e) => {
                    log::warn!("not kept as a spare, removed: {e}");
                    shrink_then_remove(&*disk, &seg);
                }
            }
            drop(file);
        }
        Job::Barrier(done) => {
            let _ = done.send(());
        }
    }
}

/// Remove `path`; if it is longer than a step, first cut it from its end `SHRINK_STEP` at a time,
/// each cut fdatasynced (which commits the freed blocks, and on a discarding filesystem discards
/// them, one step's worth per commit). The file is one no manifest lists any more, so a crash
/// part-way leaves a shorter unlisted file that the next open removes. Any failure on the way
/// falls back to the plain removal.
///
/// What is left of each file (at most a step) is unlinked without a sync, and those bytes add up
/// over the files the reaper removes (the ledger's tables a merge replaced come several at a
/// time): once they reach a step, the directory of the last one is synced, which commits the
/// unlinks in one transaction of about a step.
fn shrink_then_remove(disk: &dyn Storage, path: &Path) {
    static UNSYNCED_FREED: AtomicU64 = AtomicU64::new(0);
    let left = (|| -> std::io::Result<u64> {
        let file = disk.open(path, true)?;
        let mut len = file.len()?;
        while len > SHRINK_STEP {
            len -= SHRINK_STEP;
            file.set_len(len)?;
            file.sync_data()?;
        }
        Ok(len)
    })();
    let left = left.unwrap_or_else(|e| {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::debug!(
                "removing {} without shrinking it first: {e}",
                path.display()
            );
        }
        0
    });
    remove_quietly(disk, path);
    // Atomic as a whole: without a reaper thread, removals run on their callers' threads.
    let mut sync = false;
    let _ = UNSYNCED_FREED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
        let (freed, due) = commit_due(f, left);
        sync = due;
        Some(freed)
    });
    if sync {
        if let Some(dir) = path.parent() {
            if let Err(e) = disk.sync_dir(dir) {
                log::debug!("syncing {} after removals: {e}", dir.display());
            }
        }
    }
}

/// The bytes removed since the last sync, after a file with `left` bytes is unlinked, and
/// whether to sync now (they reached a step; the count starts again from 0).
fn commit_due(freed: u64, left: u64) -> (u64, bool) {
    let freed = freed.saturating_add(left);
    if freed >= SHRINK_STEP {
        (0, true)
    } else {
        (freed, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{SimDisk, SimOp};
    use std::path::Path;

    /// A file longer than a step loses its end a step at a time, each cut synced before the
    /// next, and only then is unlinked; a short one is unlinked at once.
    #[test]
    fn a_large_file_is_cut_in_synced_steps_before_it_is_unlinked() {
        let sim = SimDisk::new();
        let disk = sim.handle();
        disk.create_dir_all(Path::new("/d")).unwrap();
        let (big, small) = (PathBuf::from("/d/2.seg"), PathBuf::from("/d/2.idx"));
        let f = disk.create_new(&big).unwrap();
        f.append(&vec![7u8; (2 * SHRINK_STEP + SHRINK_STEP / 2) as usize])
            .unwrap();
        f.sync_data().unwrap();
        drop(disk.create_new(&small).unwrap());
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let log = seen.clone();
        sim.set_hook(Some(Arc::new(move |op| {
            if matches!(op, SimOp::SetLen | SimOp::Sync | SimOp::Remove) {
                log.lock().push(op);
            }
        })));
        remove_later(disk.clone(), vec![big.clone(), small.clone()], f);
        barrier();
        sim.set_hook(None);
        assert!(!disk.exists(&big) && !disk.exists(&small));
        use SimOp::{Remove, SetLen, Sync};
        assert_eq!(
            *seen.lock(),
            vec![SetLen, Sync, SetLen, Sync, Remove, Remove],
            "2.5 steps long: two synced cuts, then the unlink; the short file: the unlink alone"
        );
    }

    #[test]
    fn removals_are_committed_once_they_add_up_to_a_step() {
        const S: u64 = SHRINK_STEP;
        for (freed, left, want) in [
            (0, 0, (0, false)),
            (0, S / 4, (S / 4, false)),
            (S / 2, S / 2 - 1, (S - 1, false)),
            (S / 2, S / 2, (0, true)),
            (S - 1, S, (0, true)),
            (u64::MAX, 1, (0, true)),
        ] {
            assert_eq!(commit_due(freed, left), want, "freed {freed}, left {left}");
        }
    }

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
