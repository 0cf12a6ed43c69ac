//! The background ledger worker: memtable flushes, level merges, and the manifest version edits
//! that publish them.

use super::*;

impl Inner {
    /// Ask the ledger worker to look for work: wake it, or start it if it is not running. `bg`
    /// is the caller's guard of `self.bg`. `false` if a thread was needed and could not be
    /// started. No worker starts once the store is shutting down or its worker failed.
    pub(super) fn wake_worker(&self, bg: &mut Bg) -> bool {
        bg.wakes += 1;
        if bg.worker_running || bg.shutdown || bg.abandon || bg.error.is_some() {
            self.bg_cv.notify_all();
            return true;
        }
        bg.worker_running = self.start_thread("levee-ledger", Inner::worker, &self.worker_thread);
        bg.worker_running
    }

    /// Make sure a worker looks at the store again before it may exit, without waking it: a
    /// running worker sees a new snapshot on its next round (it reaps on its poll) and counts the
    /// moved `wakes` as a reason to stay; a stopped one is started. Taking a snapshot (every
    /// index query, every fold) comes here, so a busy store does not wake its worker per query.
    pub(super) fn keep_worker(&self, bg: &mut Bg) -> bool {
        if bg.worker_running {
            bg.wakes += 1;
            return true;
        }
        self.wake_worker(bg)
    }

    pub(super) fn worker(self: Arc<Self>) {
        let mut idle_since: Option<Instant> = None;
        loop {
            let wakes = self.bg.lock().wakes;
            let live_snapshots = self.reap_snapshots();
            let (shutdown, abandon) = {
                let bg = self.bg.lock();
                (bg.shutdown, bg.abandon)
            };
            let step = if abandon {
                break;
            } else if !self.rolled.lock().is_empty() {
                self.finish_rolls()
            } else if !self.mem.read().immutables.is_empty() {
                self.flush_one()
            } else if shutdown {
                break;
            } else if self.bg.lock().merge_blocked.is_some() {
                Ok(false)
            } else {
                match self.merge_once() {
                    // A damaged input: merging would have to drop what cannot be read. Stop
                    // merging instead of poisoning the store: reads and flushes go on.
                    Err(Error::Corruption(m)) => {
                        log::error!("ledger merges stopped: a merge input is damaged: {m}");
                        self.bg.lock().merge_blocked = Some(m);
                        Ok(false)
                    }
                    other => other,
                }
            };
            let mut bg = self.bg.lock();
            match step {
                Ok(true) => {
                    idle_since = None;
                    self.done_cv.notify_all();
                }
                Ok(false) => {
                    self.done_cv.notify_all();
                    if !bg.shutdown {
                        // Nothing found since `wakes` was read, no snapshot to expire: after
                        // `idle_thread_exit` of that the thread goes (the next wake starts one).
                        let idle = idle_since.get_or_insert_with(Instant::now);
                        if live_snapshots == 0
                            && bg.wakes == wakes
                            && idle.elapsed() >= self.cfg.idle_thread_exit
                        {
                            bg.worker_running = false;
                            return;
                        }
                        self.bg_cv.wait_for(bg.raw(), Duration::from_millis(200));
                    }
                }
                Err(e) => {
                    log::error!("ledger worker stopped: {e}");
                    bg.error = Some(e.to_string());
                    self.done_cv.notify_all();
                    break;
                }
            }
        }
        // Stopped for good (shutdown, abandon or an error, which `wake_worker` checks first).
        let mut bg = self.bg.lock();
        bg.worker_running = false;
        self.done_cv.notify_all();
    }

    /// Flush the oldest frozen memtable to an L0 table.
    pub(super) fn flush_one(&self) -> Result<bool> {
        let Some(mem) = self.mem.read().immutables.front().cloned() else {
            return Ok(false);
        };
        // The ledger must never persist a pointer to a journal record the disk may not have: after a
        // machine crash recovery replays only records above persisted_sqn, so a lost record below
        // it would surface as a corruption error instead of a lost write.
        self.journal_durable_through(mem.last_sqn())?;
        let entries = mem.encoded_entries();
        if !entries.is_empty() {
            let mut b = TableBuilder::create(
                &self.disk,
                &self.ledger_dir,
                self.new_file_id(),
                self.cfg.sst_block_bytes,
                self.cfg.bloom_bits_per_key,
            )?;
            for (k, v) in &entries {
                b.add(k, v)?;
            }
            let meta = b.finish()?;
            self.c.ledger_bytes.fetch_add(meta.size, Ordering::Relaxed);
            sync_dir(&*self.disk, &self.ledger_dir)?;
            let table = Arc::new(Table::open(&self.disk, &self.ledger_dir, meta)?);
            let mut v = self.version.write();
            let mut nv = (**v).clone();
            nv.levels[0].push(table);
            *v = Arc::new(nv);
        }
        self.persisted_sqn
            .fetch_max(mem.last_sqn(), Ordering::AcqRel);
        self.mem.write().immutables.pop_front();
        self.c.flushes.fetch_add(1, Ordering::Relaxed);
        self.write_manifest(Vec::new())?;
        Ok(true)
    }

    /// Run one merge if `pick_merge` finds one.
    pub(super) fn merge_once(&self) -> Result<bool> {
        let version = self.version.read().clone();
        let cursors = self.bg.lock().cursors.clone();
        let Some(task) = pick_merge(&version.metas(), &self.cfg, &cursors) else {
            return Ok(false);
        };
        let find = |level: usize, ids: &[u64]| -> Vec<Arc<Table>> {
            version.levels[level]
                .iter()
                .filter(|t| ids.contains(&t.meta.id))
                .cloned()
                .collect()
        };
        let mut upper = find(task.level, &task.upper);
        upper.reverse(); // newest first (matters for overlapping L0 files)
        let lower = find(task.level + 1, &task.lower);
        let inputs: Vec<Arc<Table>> = upper.iter().chain(lower.iter()).cloned().collect();
        let (outs, written) = run_merge(
            &self.disk,
            &self.ledger_dir,
            &self.cfg,
            &inputs,
            task.drop_tombstones,
            || self.new_file_id(),
        )?;
        // The new tables' directory entries must be durable before a manifest lists them.
        sync_dir(&*self.disk, &self.ledger_dir)?;
        let mut opened = Vec::with_capacity(outs.len());
        for m in outs {
            opened.push(Arc::new(Table::open(&self.disk, &self.ledger_dir, m)?));
        }
        {
            let mut v = self.version.write();
            let mut nv = (**v).clone();
            nv.levels[task.level].retain(|t| !task.upper.contains(&t.meta.id));
            let target = &mut nv.levels[task.level + 1];
            target.retain(|t| !task.lower.contains(&t.meta.id));
            target.extend(opened);
            target.sort_by(|a, b| a.meta.smallest.cmp(&b.meta.smallest));
            *v = Arc::new(nv);
        }
        if task.level > 0 {
            if let Some(hi) = upper.iter().map(|t| t.meta.largest.clone()).max() {
                self.bg.lock().cursors[task.level] = hi;
            }
        }
        self.c.ledger_bytes.fetch_add(written, Ordering::Relaxed);
        self.c.merges.fetch_add(1, Ordering::Relaxed);
        self.write_manifest(inputs)?;
        Ok(true)
    }

    /// Write a new manifest generation describing the current state; `obsolete` tables were just
    /// dropped from the version.
    pub(super) fn write_manifest(&self, obsolete: Vec<Arc<Table>>) -> Result<()> {
        let mut ms = self.manifest.lock();
        // persisted_sqn before the version: a flush publishes the version first.
        let persisted_sqn = self.persisted_sqn.load(Ordering::Acquire);
        let version = self.version.read().clone();
        let segments = self
            .journal
            .segments()
            .iter()
            .map(|s| SegmentEntry {
                id: s.id,
                first_sqn: s.first_sqn().unwrap_or(0),
                last_sqn: s.last_sqn().unwrap_or(0),
                closed: s.is_closed(),
            })
            .collect();
        // After reading the list: a segment a roll put in it may not have a durable directory
        // entry yet, and recovery refuses a manifest whose listed segment is missing.
        self.sync_journal_dir()?;
        let generation = ms.generation + 1;
        let m = Manifest {
            generation,
            persisted_sqn,
            next_file_id: self.next_file_id.load(Ordering::Acquire),
            segments,
            levels: version.metas(),
        };
        m.store(&*self.disk, &self.dir)?;
        ms.generation = generation;
        ms.persisted_history.push_back(persisted_sqn);
        while ms.persisted_history.len() > KEEP as usize {
            ms.persisted_history.pop_front();
        }
        if !obsolete.is_empty() {
            ms.pending.push_back((generation, obsolete));
        }
        while ms
            .pending
            .front()
            .is_some_and(|(g, _)| *g + KEEP - 1 <= generation)
        {
            for t in ms.pending.pop_front().unwrap().1 {
                t.mark_obsolete();
            }
        }
        Ok(())
    }

    pub(super) fn new_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::AcqRel)
    }
}
