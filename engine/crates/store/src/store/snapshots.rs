//! Consistent views for snapshots, queries and folds, and the release of expired ones.

use super::*;

impl Inner {
    pub(super) fn snapshot(&self, kind: SnapshotKind) -> Result<Snapshot> {
        self.check_open()?;
        let lifetime = match kind {
            SnapshotKind::Query => self.cfg.snapshot_query_lifetime,
            SnapshotKind::Fold => self.cfg.snapshot_fold_lifetime,
        };
        let view = self.view();
        let fence = view.fence;
        let inner = SnapInner::new(view, lifetime);
        {
            let mut reg = self.snapshots.lock();
            reg.retain(|w| w.strong_count() > 0);
            reg.push(Arc::downgrade(&inner));
        }
        // The worker releases it when its lifetime ends.
        self.keep_worker(&mut self.bg.lock());
        Ok(Snapshot {
            inner,
            journal: self.journal.clone(),
            fence,
        })
    }

    /// Release the files of expired snapshots. Journal segments they were the last to hold are
    /// removed (by the reaper) before this returns, and before the registry is let go:
    /// a caller that finds nothing left to reap (the ledger worker reaped it a moment before)
    /// also finds the files gone.
    pub(super) fn reap_snapshots(&self) -> usize {
        let mut reg = self.snapshots.lock();
        let mut expired = false;
        reg.retain(|w| {
            w.upgrade().is_some_and(|s| {
                let gone = s.reap();
                expired |= gone;
                !gone
            })
        });
        // Only after an expiry: snapshots dropped by their holders released their segments then.
        if expired {
            crate::reaper::barrier();
        }
        reg.len()
    }

    /// A consistent view at the current SQN. Taken under the write lock so the fence matches the
    /// memtables' contents.
    pub(crate) fn view(&self) -> View {
        let _w = self.write.lock();
        self.view_locked()
    }

    /// `view` for a caller that holds the write lock.
    pub(super) fn view_locked(&self) -> View {
        let fence = self.last_sqn.load(Ordering::Acquire);
        let mems = {
            let m = self.mem.read();
            std::iter::once(m.active.clone())
                .chain(m.immutables.iter().rev().cloned())
                .collect()
        };
        let version = self.version.read().clone();
        View {
            mems,
            version,
            fence,
            segments: self.journal.segments(),
        }
    }
}
