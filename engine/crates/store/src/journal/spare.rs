//! Spare journal segments: files journal compaction replaced, kept for a roll to write the next
//! active segment over instead of starting a new file.
//!
//! Why: an fdatasync of an append into a new file commits the filesystem's journal too (the
//! blocks the append allocated, or the unwritten extents it converted), and in `sync` mode every
//! write waits for one. Written over, an old file's blocks are allocated and written already, so
//! the fdatasync writes the data and nothing else (docs/benchmarks.md, "Reused segments").
//!
//! The order that keeps every crash readable:
//! 1. On the reaper thread, once no reader holds the replaced segment and the manifest that
//!    replaced it is durable: its start is written over with a spare's mark (`SPARE_MAGIC`) and
//!    synced, then it is renamed `<n>.spare`. A crash between the two leaves a segment no manifest
//!    lists, removed on open as before; a `.spare` left by a crash is removed on open.
//! 2. A roll renames a spare to `<id>.seg` and writes the reused link (with the floor SQN) over
//!    the mark. A sync that acknowledges any record of the segment syncs the link with it and the
//!    directory before it. A crash before that finds the mark: the segment holds nothing.
//! 3. Once rolled out, the segment is cut to its records' end before the sync of its tail, so a
//!    closed segment holds its own records only. A closing store removes its spares.
//!
//! A power cut during a write over an old file leaves its sectors new and old in any mix; the
//! synced SQN each record carries tells such a hole from damage (`segment::lost_writeback_at`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::segment::SPARE_MAGIC;
use crate::error::{IoContext, Result};
use crate::storage::Storage;

/// The path of spare number `n` in `dir`.
pub(crate) fn spare_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:020}.spare"))
}

/// The store's spares, ready for the next rolls.
pub(crate) struct Spares {
    dir: PathBuf,
    /// At most this many are kept (`Config::journal_spare_segments`).
    max: usize,
    /// A replaced file shorter than this is removed, not kept: written over, most of the next
    /// segment would be appended as in a new file anyway.
    min_bytes: u64,
    ready: Mutex<Vec<PathBuf>>,
    next: AtomicU64,
    /// Spares made and spares a roll took, since open.
    pub made: AtomicU64,
    pub taken: AtomicU64,
}

impl Spares {
    pub(crate) fn new(dir: PathBuf, max: usize, min_bytes: u64) -> Spares {
        Spares {
            dir,
            max,
            min_bytes,
            ready: Mutex::new(Vec::new()),
            next: AtomicU64::new(0),
            made: AtomicU64::new(0),
            taken: AtomicU64::new(0),
        }
    }

    /// A spare for a roll, if one is ready. The caller renames it into place.
    pub(crate) fn take(&self) -> Option<PathBuf> {
        let p = self.ready.lock().pop()?;
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(p)
    }

    /// Spares ready now.
    pub(crate) fn ready(&self) -> usize {
        self.ready.lock().len()
    }

    /// Remove every spare ready (a closing store: the next open would remove them anyway).
    pub(crate) fn remove_all(&self, disk: &dyn Storage) {
        for p in self.ready.lock().drain(..) {
            crate::fsutil::remove_quietly(disk, &p);
        }
    }

    /// Make the replaced segment file at `seg` a spare if one is wanted and it is large enough
    /// (the reaper, with no reader left holding it). `Ok(false)`: not wanted; the caller removes
    /// it. An error leaves the file for the caller to remove.
    pub(crate) fn keep(&self, disk: &dyn Storage, seg: &Path) -> Result<bool> {
        if self.ready.lock().len() >= self.max {
            return Ok(false);
        }
        let file = disk
            .open_overwrite(seg)
            .ctx(|| format!("opening {} to keep as a spare", seg.display()))?;
        if file.len().ctx(|| format!("stat {}", seg.display()))? < self.min_bytes {
            return Ok(false);
        }
        file.write_at(&SPARE_MAGIC, 0)
            .and_then(|()| file.sync_data())
            .ctx(|| format!("marking {} a spare", seg.display()))?;
        let to = spare_path(&self.dir, self.next.fetch_add(1, Ordering::Relaxed));
        disk.rename(seg, &to)
            .ctx(|| format!("renaming {} to {}", seg.display(), to.display()))?;
        self.made.fetch_add(1, Ordering::Relaxed);
        self.ready.lock().push(to);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use crate::journal::segment::{self, ScanEnd};
    use crate::storage::RealStorage;
    use crate::{Config, Store, SyncMode};
    use std::sync::Arc;

    /// Overwrites of a few keys with values of about `size` bytes, compacted after each round
    /// if `compact`: compaction replaces mostly dead segments, the reaper keeps them as spares,
    /// and later rolls write over them.
    fn churn(s: &Store, rounds: usize, size: usize, compact: bool, latest: &mut [Vec<u8>]) {
        for round in 0..rounds {
            for i in 0..240 {
                let k = i % latest.len();
                let v: Vec<u8> = (0..size + k).map(|j| (round * 7 + i + j) as u8).collect();
                s.put(b"b", format!("k{k:02}").as_bytes(), &v, b"m", &[])
                    .unwrap();
                latest[k] = v;
            }
            if compact {
                s.flush().unwrap();
                s.compact_journal().unwrap();
            }
        }
    }

    fn check(s: &Store, latest: &[Vec<u8>], when: &str) {
        for (k, v) in latest.iter().enumerate() {
            let got = s.get(b"b", format!("k{k:02}").as_bytes()).unwrap();
            assert!(got.is_some_and(|o| &o.value == v), "{when}: key {k}");
        }
    }

    /// On real files: rolls write segments over spares, every value reads back before and after
    /// a restart and after a crash, and every segment file on disk holds its own records and
    /// nothing after them but, once rolled out, its successor mark (a reused file is cut to its
    /// records first), so a scan of each ends clean or at that mark. No spare outlives a close, or an open after a crash.
    #[test]
    fn rolls_write_over_spares_and_each_segment_file_ends_with_its_records() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = Config {
            sync_on_write: SyncMode::Sync,
            journal_segment_bytes: 16 << 10,
            journal_spare_segments: 2,
            ..Config::small_for_tests()
        };
        let mut latest = vec![Vec::new(); 20];
        let s = Store::open(dir.path(), cfg.clone()).unwrap();
        churn(&s, 8, 3000, true, &mut latest);
        // Rolls onto the spares left, and out of them, with no compaction to replace them. The
        // records are smaller, so each segment ends before the old file did.
        let before = s.stats().journal_spares_reused;
        churn(&s, 1, 100, false, &mut latest);
        let st = s.stats();
        assert!(
            st.journal_spares_reused > before,
            "no reused segment rolled out: {st:?}"
        );
        assert!(st.journal_spares_made > 0, "no spare made: {st:?}");
        check(&s, &latest, "live");
        // Spares ready when the store closes: the close removes them. A compaction call
        // replaces every segment worth it, the rolled-out ones too: write on until a roll
        // (onto one of the spares) leaves a rolled-out segment for the scan below.
        s.flush().unwrap();
        s.compact_journal().unwrap();
        let rolls = s.stats().journal_spares_reused;
        for _ in 0..20 {
            if s.stats().journal_spares_reused > rolls {
                break;
            }
            churn(&s, 1, 10, false, &mut latest);
        }
        assert!(
            s.stats().journal_spares_reused > rolls,
            "no roll onto a spare"
        );
        assert!(
            s.stats().journal_spares_ready > 0,
            "no spare ready at close"
        );
        s.close().unwrap();

        let jdir = dir.path().join("journal");
        let spares = |when: &str| {
            let n = std::fs::read_dir(&jdir)
                .unwrap()
                .filter(|e| {
                    let p = e.as_ref().unwrap().path();
                    p.extension().is_some_and(|x| x == "spare")
                })
                .count();
            assert_eq!(n, 0, "spares left {when}");
        };
        spares("after close");
        let disk: crate::storage::Disk = Arc::new(RealStorage);
        let (mut seen, mut rolled) = (0, 0);
        for name in std::fs::read_dir(&jdir).unwrap() {
            let name = name.unwrap().file_name().into_string().unwrap();
            let Some(id) = name
                .strip_suffix(".seg")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let path = segment::seg_path(&jdir, id);
            let end = segment::scan(&*disk, &path, 0, 0, |_, _| Ok(())).unwrap();
            // A rolled-out segment ends with its mark naming the next one, right after its
            // records (a reused file cut to them first); the others with their last record.
            match end {
                ScanEnd::Clean => {}
                ScanEnd::Rolled { next_id } if next_id == id + 1 => rolled += 1,
                other => panic!("{name}: {other:?}"),
            }
            seen += 1;
        }
        assert!(
            seen > 1 && rolled > 0,
            "segments scanned: {seen}, rolled out: {rolled}"
        );

        let s = Store::open(dir.path(), cfg.clone()).unwrap();
        check(&s, &latest, "reopened");
        churn(&s, 4, 300, true, &mut latest);
        assert!(s.stats().journal_spares_reused > 0);
        s.flush().unwrap();
        s.compact_journal().unwrap();
        assert!(
            s.stats().journal_spares_ready > 0,
            "no spare ready at the crash"
        );
        s.simulate_crash();
        let s = Store::open(dir.path(), cfg).unwrap();
        spares("after an open that followed a crash");
        check(&s, &latest, "after a crash");
        s.close().unwrap();
    }
}
