//! Closing a store (sync the journal unless it is poisoned, flush, save the AAE tree, write the
//! manifest) and the crash stand-in tests use.

use super::*;

impl Store {
    /// Flush, make the journal durable, stop the background worker and release the directory.
    /// Later calls on this handle return `Error::Closed`; closing twice is harmless.
    pub fn close(&self) -> Result<()> {
        let i = &self.inner;
        if i.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Stop scheduled compaction first: a run in progress needs the write lock to allocate ids.
        // (Notified under `bg`, which a throttled compaction holds between its check and its wait.)
        drop(i.bg.lock());
        i.bg_cv.notify_all();
        if let Some(h) = self.scheduler.lock().take() {
            let _ = h.join();
        }
        // A compaction a caller started sees `closed` at its next record and stops; wait for it,
        // so its swap and renames never run after the directory lock is released. A background
        // AAE rebuild stops the same way (it needs the write lock to finish).
        drop(i.compaction_lock.lock());
        if let Some(h) = self.aae_builder.lock().take() {
            let _ = h.join();
        }
        // Writers still waiting for a group commit get `Closed`; the sync below makes their
        // records durable all the same.
        self.stop_syncer();
        let result = (|| -> Result<()> {
            let mut w = i.write.lock();
            // The journal first, so the final memtable flush finds every record it persists
            // durable. A journal poisoned by a failed sync or roll is never synced again and the
            // memtable is not flushed: the next open replays what the disk really holds.
            let gate = i.journal_sync_gate.lock();
            let failed = i.sync.lock().failed.clone();
            let synced = match failed {
                Some(f) => Err(Error::Poisoned(f)),
                None => i.sync_rolled().and_then(|_| {
                    JournalWriter::sync(&*w.journal.file).map_err(|e| {
                        i.poison_journal(format!("journal fdatasync at close failed: {e}"))
                    })
                }),
            };
            drop(gate);
            if synced.is_ok() {
                // Best effort: space left reserved is only space, and goes with the segment.
                let _ = w.journal.release_reserved();
                i.mark_synced(w.next_sqn - 1);
                i.rotate_memtable();
            }
            {
                let mut bg = i.bg.lock();
                bg.shutdown = true;
                bg.abandon = synced.is_err();
                i.bg_cv.notify_all();
            }
            self.join_worker();
            synced?;
            if let Some(e) = &i.bg.lock().error {
                return Err(Error::Poisoned(e.clone()));
            }
            // Segments rolled out since the worker last looked (it has stopped): their index
            // now, so the next open need not scan them.
            i.finish_rolls()?;
            if w.journal.records > 0 {
                w.journal.seg.close(&i.journal.dir)?;
            }
            drop(w);
            i.write_manifest(Vec::new())?;
            i.save_aae_tree();
            Ok(())
        })();
        // Files the store replaced (tables a merge or the final flush retired, segments a
        // compaction replaced) go on the reaper thread: let it finish with them, so a closed
        // directory holds only what the manifest lists before another open may take it.
        crate::reaper::barrier();
        // Spares serve this open's rolls only (the next open removes any left): none outlives it.
        if let Some(spares) = &self.inner.journal.spares {
            spares.remove_all(&*self.inner.disk);
        }
        self.lock.lock().take();
        result
    }

    /// Stop as a crash would: no flush, no journal sync, no manifest; release the directory.
    /// For tests that need a store whose ledger lags its journal, without a separate process.
    #[doc(hidden)]
    pub fn simulate_crash(self) {
        let i = &self.inner;
        i.closed.store(true, Ordering::Release);
        i.bg_cv.notify_all();
        if let Some(h) = self.scheduler.lock().take() {
            let _ = h.join();
        }
        self.stop_syncer();
        if let Some(h) = self.aae_builder.lock().take() {
            let _ = h.join();
        }
        let _w = i.write.lock();
        {
            let mut bg = i.bg.lock();
            bg.shutdown = true;
            bg.abandon = true;
            i.bg_cv.notify_all();
        }
        self.join_worker();
        self.lock.lock().take();
    }

    /// Join the ledger worker after `bg.shutdown` is set (no worker starts after it).
    fn join_worker(&self) {
        let h = self.inner.worker_thread.lock().take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    pub(super) fn stop_syncer(&self) {
        {
            let mut s = self.inner.sync.lock();
            s.shutdown = true;
            self.inner.syncer_cv.notify_all();
            self.inner.sync_beacon.raise();
        }
        // After `shutdown` no syncer starts, so this is the last one.
        let h = self.inner.syncer_thread.lock().take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}
