//! AAE tree upkeep: the per-write delta, the tree saved at a clean close and loaded at open, and
//! the rebuild from a snapshot fold while writes go on.

use super::*;
use crate::pacing::{Pace, Pacer, STORE_BURST};

impl Inner {
    /// The AAE segment of (bucket, key) and what XORing the old object's leaf hash out and the new
    /// one in changes there. Caller holds the write lock, so the ledger's current value is the one
    /// this write replaces; the caller applies it once the write is in.
    pub(super) fn aae_delta(
        &self,
        bucket: &[u8],
        key: &[u8],
        lk: &[u8],
        kind: Kind,
        metadata: &[u8],
    ) -> Result<(u32, u32)> {
        let old = self.lookup(lk)?;
        let mut delta = 0u32;
        if let Some(old) = old.filter(|v| !v.tombstone) {
            delta ^= aae::leaf_hash(bucket, key, &old.metadata);
        }
        if kind == Kind::Put {
            delta ^= aae::leaf_hash(bucket, key, metadata);
        }
        Ok((aae::segment_of(bucket, key, self.cfg.aae_segments), delta))
    }

    /// Install the AAE tree saved by the last clean close if it matches the recovered store (its
    /// SQN is the store's last), else start rebuilding it in the background while the store
    /// serves; `aae_tree` answers `Busy` until then. Either way open never folds the ledger, so
    /// its time does not grow with the data, and a damaged SST block cannot fail it. The file is
    /// removed before any write: a later crash must not find a tree that misses writes.
    pub(super) fn load_aae_tree(self: &Arc<Self>, last_sqn: Sqn) -> Result<Option<JoinHandle<()>>> {
        let Some(aae) = &self.aae else {
            return Ok(None);
        };
        let path = self.dir.join(aae::TREE_FILE);
        let found = match self.disk.read(&path) {
            Ok(buf) => Some(buf),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Error::Io {
                    context: format!("reading {}", path.display()),
                    source: e,
                })
            }
        };
        let saved = found.as_ref().and_then(|buf| {
            match AaeState::decode(buf, self.cfg.aae_segments, self.cfg.aae_branch_width) {
                Ok((sqn, st)) if sqn == last_sqn => Some(st),
                Ok((sqn, _)) => {
                    log::info!(
                        "AAE tree file is for SQN {sqn}, the store is at {last_sqn}: rebuilding"
                    );
                    None
                }
                Err(e) => {
                    log::warn!("{}: {e}; rebuilding the AAE tree", path.display());
                    None
                }
            }
        });
        if found.is_some() {
            remove_if_exists(&*self.disk, &path)?;
            sync_dir(&*self.disk, &self.dir)?;
        }
        if let Some(st) = saved {
            *aae.lock() = st;
            return Ok(None);
        }
        if last_sqn == 0 {
            return Ok(None); // nothing was ever written: the empty tree is current
        }
        aae.lock().unavailable = Some("being rebuilt after an unclean shutdown".into());
        let me = self.clone();
        let h = std::thread::Builder::new()
            .name("levee-aae-rebuild".into())
            .spawn(move || match me.rebuild_aae(false) {
                Ok(took) => log::info!("AAE tree rebuilt in {:.2} s", took.as_secs_f64()),
                Err(Error::Closed) => {}
                Err(e) => {
                    log::error!("rebuilding the AAE tree failed: {e}");
                    if let Some(a) = &me.aae {
                        a.lock().unavailable = Some(format!("its rebuild failed: {e}"));
                    }
                }
            })
            .ctx(|| "starting the AAE rebuild".to_string())?;
        Ok(Some(h))
    }

    /// Save the AAE tree for the next open (after a clean close's last flush). A failure only
    /// costs that open a background rebuild.
    pub(super) fn save_aae_tree(&self) {
        let Some(aae) = &self.aae else { return };
        let sqn = self.last_sqn.load(Ordering::Acquire);
        let buf = {
            let a = aae.lock();
            if a.unavailable.is_some() || a.rebuild_delta.is_some() {
                return;
            }
            a.encode(sqn)
        };
        let path = self.dir.join(aae::TREE_FILE);
        if let Err(e) = crate::fsutil::write_atomic(&*self.disk, &self.dir, &path, &buf) {
            log::warn!("saving the AAE tree: {e}; the next open rebuilds it");
        }
    }

    /// Rebuild the AAE tree from a snapshot fold of heads while writes continue: writes after the
    /// snapshot are XORed into a delta that is folded into the new tree when it is installed.
    pub(super) fn rebuild_aae(&self, journal_check: bool) -> Result<Duration> {
        let Some(aae) = &self.aae else {
            return Err(Error::InvalidConfig(
                "AAE is disabled (aae_segments = 0)".into(),
            ));
        };
        let start = Instant::now();
        let (view, segments, width) = {
            let _w = self.write.lock();
            let mut a = aae.lock();
            if a.rebuild_delta.is_some() {
                return Err(Error::Busy("an AAE rebuild is already running".into()));
            }
            a.rebuild_delta = Some(aae::Leaves::new(a.segments()));
            (self.view_locked(), a.segments(), a.branch_width)
        };
        let mut paced = Duration::ZERO;
        let built = (|| -> Result<aae::Leaves> {
            let snap = SnapInner::new(view, self.cfg.snapshot_fold_lifetime);
            let s = Snapshot {
                inner: snap,
                journal: self.journal.clone(),
                fence: 0,
            };
            let opts = HeadFoldOptions {
                journal_check,
                ..HeadFoldOptions::default()
            };
            let mut leaves = aae::Leaves::new(segments);
            let mut pacer = Pacer::with_burst(
                Pace {
                    max_bytes_per_sec: 0,
                    busy_percent: self.cfg.aae_rebuild_busy_percent,
                },
                STORE_BURST,
            );
            let mut batch = Instant::now();
            for (n, h) in s.fold_heads(&opts)?.enumerate() {
                if n % 1024 == 0 {
                    paced += self.pace_batch(&mut pacer, batch.elapsed(), 0);
                    batch = Instant::now();
                    if self.closed.load(Ordering::Acquire) {
                        return Err(Error::Closed);
                    }
                }
                let h = h?;
                leaves.xor(
                    aae::segment_of(&h.bucket, &h.key, segments),
                    aae::leaf_hash(&h.bucket, &h.key, &h.head.metadata),
                );
            }
            Ok(leaves)
        })();
        let _w = self.write.lock();
        let mut a = aae.lock();
        let delta = a.rebuild_delta.take();
        let mut leaves = built?;
        if let Some(d) = delta {
            leaves.xor_all(&d);
        }
        a.leaves = leaves;
        a.branch_width = width;
        a.unavailable = None;
        let took = start.elapsed();
        self.c.aae_rebuilds.fetch_add(1, Ordering::Relaxed);
        self.c
            .aae_rebuild_nanos
            .store(took.as_nanos() as u64, Ordering::Relaxed);
        self.c
            .aae_rebuild_paced_nanos
            .store(paced.as_nanos() as u64, Ordering::Relaxed);
        Ok(took)
    }
}
