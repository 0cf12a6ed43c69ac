//! Opening a store: the newest usable manifest and its tables, the journal segments (indexes
//! loaded or rebuilt by scanning, torn tails cut), replay of what the ledger had not persisted, and
//! the checks that no acknowledged write is silently missing.

use super::*;
use crate::journal::spare::{spare_path, Spares};

pub(super) fn list_ids(disk: &Disk, dir: &Path, ext: &str) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for name in disk
        .list_dir(dir)
        .ctx(|| format!("listing {}", dir.display()))?
    {
        if let Some(stem) = name.strip_suffix(ext) {
            if let Ok(id) = stem.parse::<u64>() {
                ids.push(id);
            }
        } else if name.ends_with(".tmp") {
            remove_if_exists(&**disk, &dir.join(&name))?;
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

impl Store {
    /// Open (or create) a store in `dir`, recovering from the journal whatever the ledger had not
    /// persisted.
    pub fn open(dir: impl AsRef<Path>, cfg: Config) -> Result<Store> {
        Self::open_on(RealStorage::shared(), dir, cfg)
    }

    /// `open` on a given storage layer (the real filesystem, or a simulated disk in tests).
    pub fn open_on(disk: Disk, dir: impl AsRef<Path>, cfg: Config) -> Result<Store> {
        cfg.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let journal_dir = dir.join("journal");
        let ledger_dir = dir.join("ledger");
        for d in [&dir, &journal_dir, &ledger_dir] {
            create_dir_durable(&*disk, d)?;
        }
        let lock_path = dir.join("LOCK");
        let lock = match disk.lock(&lock_path) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(Error::Locked { path: dir.clone() })
            }
            Err(e) => {
                return Err(Error::Io {
                    context: format!("locking {}", lock_path.display()),
                    source: e,
                })
            }
        };

        // Ledger: the newest usable manifest, its tables, and nothing else.
        let loaded = manifest::load(&*disk, &dir, &ledger_dir)?;
        let newest_gen = manifest::list(&*disk, &dir)?.first().copied().unwrap_or(0);
        let m = loaded.unwrap_or_else(|| Manifest {
            levels: vec![Vec::new(); NUM_LEVELS],
            ..Manifest::default()
        });
        let persisted = m.persisted_sqn;
        let mut max_file_id = m.next_file_id;
        let live: std::collections::HashSet<u64> =
            m.levels.iter().flatten().map(|t| t.id).collect();
        for id in list_ids(&disk, &ledger_dir, ".sst")? {
            if !live.contains(&id) {
                log::info!("removing ledger file {id} that no manifest lists");
                remove_if_exists(&*disk, &sst_path(&ledger_dir, id))?;
            }
            max_file_id = max_file_id.max(id + 1);
        }
        let mut version = Version::empty();
        for (l, tables) in m.levels.iter().enumerate() {
            for t in tables {
                version.levels[l].push(Arc::new(Table::open(&disk, &ledger_dir, t.clone())?));
            }
        }

        // Journal: index every segment and replay what the ledger had not persisted.
        let mut mem = MemState {
            active: Arc::new(Memtable::default()),
            immutables: VecDeque::new(),
        };
        let mut max_sqn = persisted;
        let mut segments: Vec<Arc<Segment>> = Vec::new();
        // Compaction outputs the manifest lists complete their rename; unlisted ones are leftovers
        // of an interrupted compaction, as are unlisted segments older than the newest listed one
        // (replaced by a compaction whose old files were not yet deleted).
        let listed: std::collections::HashSet<u64> = m.segments.iter().map(|s| s.id).collect();
        let max_listed = listed.iter().copied().max();
        for id in list_ids(&disk, &journal_dir, ".cseg")? {
            let cseg = segment::cseg_path(&journal_dir, id);
            if listed.contains(&id) {
                disk.rename(&cseg, &segment::seg_path(&journal_dir, id))
                    .ctx(|| format!("renaming {}", cseg.display()))?;
            } else {
                log::info!(
                    "removing {} left by an interrupted journal compaction",
                    cseg.display()
                );
                remove_if_exists(&*disk, &cseg)?;
                remove_if_exists(&*disk, &segment::idx_path(&journal_dir, id))?;
            }
        }
        // Spares are made again from the segments compaction replaces from now on.
        for n in list_ids(&disk, &journal_dir, ".spare")? {
            remove_if_exists(&*disk, &spare_path(&journal_dir, n))?;
        }
        sync_dir(&*disk, &journal_dir)?;
        let mut ids = Vec::new();
        for id in list_ids(&disk, &journal_dir, ".seg")? {
            if !listed.contains(&id) && max_listed.is_some_and(|m| id < m) {
                log::info!("removing journal segment {id} replaced by compaction");
                remove_if_exists(&*disk, &segment::seg_path(&journal_dir, id))?;
                remove_if_exists(&*disk, &segment::idx_path(&journal_dir, id))?;
            } else {
                ids.push(id);
            }
        }
        // Every segment that holds SQNs the ledger has not persisted must still be there: a missing
        // one would silently drop acknowledged writes.
        for s in m
            .segments
            .iter()
            .filter(|s| !s.closed || s.last_sqn > persisted)
        {
            let present = disk.exists(&segment::seg_path(&journal_dir, s.id))
                || disk.exists(&segment::cseg_path(&journal_dir, s.id));
            if !present {
                return Err(Error::Corruption(format!(
                    "journal segment {} (SQNs {}..{}) is listed in the manifest but missing from {}; \
                     the ledger has persisted only up to SQN {persisted}, so writes would be lost",
                    s.id,
                    s.first_sqn,
                    s.last_sqn,
                    journal_dir.display()
                )));
            }
        }
        // Replayed SQNs must follow the ledger's without a gap (nothing above `persisted` is ever
        // compacted away): a gap means journal records are missing.
        let mut empty_segments = Vec::new();
        let mut next_replay = persisted + 1;
        let mut gap: Option<(Sqn, Sqn)> = None;
        // A roll syncs the segment it replaced after the roll, outside the write lock, and
        // nothing in a newer segment is called durable (acknowledged, or persisted by the ledger)
        // before that sync. A power cut before it may take the old segment's tail while the
        // kernel had written back records of the newer one. The newer segment's link says how
        // long its predecessor was: when that segment is shorter now, the records after the hole
        // were never acknowledged, and they are cut rather than reported as a gap. A missing
        // predecessor, or a hole anywhere else, is still reported.
        let mut lengths: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let mut cutting = false;
        // (segment, the segment its successor mark names), from the segments scanned.
        let mut rolled_to: Vec<(u64, u64)> = Vec::new();
        // `Ok(false)`: the record lies after such a hole (`may_cut`) and is not replayed.
        let mut replay =
            |mem: &mut MemState, view: &RecordView<'_>, may_cut: bool| -> Result<bool> {
                if view.sqn != next_replay {
                    if may_cut {
                        return Ok(false);
                    }
                    gap.get_or_insert((next_replay, view.sqn));
                }
                next_replay = view.sqn + 1;
                let applied = Applied::from_record(view, cfg.max_value_bytes).map_err(|e| {
                    Error::Corruption(format!("replaying journal record sqn {}: {e}", view.sqn))
                })?;
                apply(&mem.active, &applied);
                if mem.active.bytes() >= cfg.memtable_bytes {
                    let full = std::mem::take(&mut mem.active);
                    mem.immutables.push_back(full);
                }
                Ok(true)
            };
        for (i, &id) in ids.iter().enumerate() {
            let is_last = i + 1 == ids.len();
            let listed = m.segments.iter().find(|s| s.id == id);
            let listed_closed = listed.is_some_and(|s| s.closed);
            // Closed, and every record in the ledger already: nothing to replay, so its index is
            // read only when a lookup first needs it (open time does not grow with the journal).
            if let Some(s) =
                listed.filter(|s| s.closed && s.first_sqn > 0 && s.last_sqn <= persisted)
            {
                let seg = Segment::open_lazy(&disk, &journal_dir, id, s.first_sqn, s.last_sqn)?;
                max_sqn = max_sqn.max(s.last_sqn);
                segments.push(seg);
                continue;
            }
            let idx = if listed_closed || !is_last {
                segment::load_index(&*disk, &journal_dir, id)?
            } else {
                None
            };
            let seg = if let Some(entries) = idx {
                let seg = Segment::open(&disk, &journal_dir, id, entries, true)?;
                for e in seg.entries()?.into_iter().filter(|e| e.sqn > persisted) {
                    let raw = seg.read_raw(e)?;
                    let view = record::decode(&raw).map_err(|err| {
                        Error::Corruption(format!(
                            "journal segment {} record sqn {} (not yet in the ledger): {err}",
                            seg.path.display(),
                            e.sqn
                        ))
                    })?;
                    // An index is written only after its segment was synced: a hole before it
                    // is damage, never a cut.
                    replay(&mut mem, &view, false)?;
                }
                seg
            } else {
                let path = segment::seg_path(&journal_dir, id);
                let mut entries: Vec<IdxEntry> = Vec::new();
                let mut start = 0u64;
                let begins = segment::read_start(&*disk, &path)?;
                if begins == segment::Start::Spare {
                    // A spare a roll renamed into place whose link never reached the disk: it
                    // holds none of this segment's records, and its length says so to the
                    // segment after it (whose records, if any survived, come after a hole).
                    log::warn!(
                        "journal segment {}: a reused file whose link was lost; it holds no records",
                        path.display()
                    );
                    truncate_durably(&*disk, &path, 0)?;
                }
                let may_cut = !listed_closed
                    && match begins {
                        segment::Start::Linked(l) => {
                            lengths.get(&l.prev_id).is_some_and(|&len| len < l.prev_len)
                        }
                        _ => false,
                    };
                // Newer than a cut: all of it goes.
                let mut cut_at: Option<u64> = cutting.then_some(0);
                while cut_at.is_none() {
                    let before = entries.len();
                    let last = entries.last().map(|e| e.sqn).unwrap_or(0);
                    let end = segment::scan(&*disk, &path, start, last, |e, view| {
                        if cut_at.is_some() {
                            return Ok(());
                        }
                        if view.sqn > persisted && !replay(&mut mem, view, may_cut)? {
                            cut_at = Some(e.offset);
                            return Ok(());
                        }
                        entries.push(e);
                        Ok(())
                    })?;
                    if cut_at.is_some() {
                        break;
                    }
                    if start > 0 {
                        // We skipped a damaged record: safe only if it was already in the ledger.
                        let next = entries.get(before).map(|e| e.sqn).unwrap_or(u64::MAX);
                        if next.saturating_sub(1) > persisted {
                            return Err(Error::Corruption(format!(
                                "journal segment {} has a damaged record before sqn {next} that the \
                                 ledger had not yet persisted (persisted up to {persisted})",
                                path.display()
                            )));
                        }
                    }
                    // In the segment that was active (the manifest does not list it closed; a
                    // compaction output may have a higher id), writeback lost to a failed
                    // fdatasync or a power cut is cut there, even with later records after it:
                    // none of them was acknowledged as durable. In a new file it is a header never
                    // written (zeros); in a reused one, damage that no later record knew to be
                    // synced (`segment::lost_writeback_at`). Any other damage is corruption.
                    // The record before the damage: this segment's last good one, or the last
                    // of the segments before it (SQNs run on from one segment to the next).
                    let last_good = entries.last().map_or(max_sqn, |e| e.sqn);
                    let end = match end {
                        ScanEnd::Corrupt {
                            offset,
                            reason,
                            next_valid,
                        } if !listed_closed
                            && segment::lost_writeback_at(
                                &*disk, &path, offset, next_valid, last_good,
                            )? =>
                        {
                            log::warn!(
                                "journal segment {}: never-written bytes at offset {offset} with records \
                                 after them at {next_valid}: lost writeback, none of it acknowledged",
                                path.display()
                            );
                            ScanEnd::TornTail { offset, reason }
                        }
                        other => other,
                    };
                    match end {
                        ScanEnd::Clean => break,
                        ScanEnd::Rolled { next_id } => {
                            rolled_to.push((id, next_id));
                            break;
                        }
                        ScanEnd::TornTail { offset, reason } => {
                            log::warn!(
                                "journal segment {}: torn tail at offset {offset} ({reason}); truncating",
                                path.display()
                            );
                            truncate_durably(&*disk, &path, offset)?;
                            break;
                        }
                        ScanEnd::Corrupt {
                            offset,
                            reason,
                            next_valid,
                        } => {
                            log::error!(
                                "journal segment {}: damaged record at offset {offset} ({reason}); valid data resumes at {next_valid}",
                                path.display()
                            );
                            start = next_valid;
                        }
                    }
                }
                if let Some(offset) = cut_at {
                    cutting = true;
                    log::warn!(
                        "journal segment {}: records from offset {offset} come after the unsynced \
                         tail of a segment a roll replaced, lost in a power cut; none of them was \
                         acknowledged as durable, so they are cut",
                        path.display()
                    );
                    truncate_durably(&*disk, &path, offset)?;
                }
                let has_records = !entries.is_empty();
                let seg = Segment::open(&disk, &journal_dir, id, entries, false)?;
                if has_records {
                    // What the scan found may be only in the page cache (a process crash): make
                    // it durable before anything (a flush, a compaction) relies on it. The
                    // space the crashed writer had reserved past its end goes back.
                    disk.open(&path, true)
                        .and_then(|f| {
                            f.release_reserved()?;
                            f.sync_data()
                        })
                        .ctx(|| format!("syncing {}", path.display()))?;
                    seg.close(&journal_dir)?;
                }
                seg
            };
            // What is left of it (after any torn tail was cut), for the link of the next one.
            lengths.insert(id, seg.file_len()?);
            if let Some(last) = seg.last_sqn() {
                max_sqn = max_sqn.max(last);
                segments.push(seg);
            } else {
                // Removed only once a manifest that no longer lists it is on disk.
                empty_segments.push(id);
            }
        }
        // A segment a roll started, newer than every segment the manifest lists, is known only
        // by the mark its predecessor ends with (the manifest that would list it was not yet
        // written): missing, it took acknowledged writes with it and no SQN gap shows it.
        // Older ones may be gone rightly (compaction), and the manifest says which must exist.
        if let Some(&(id, next)) = rolled_to
            .iter()
            .find(|(_, next)| !ids.contains(next) && max_listed.is_none_or(|m| *next > m))
        {
            return Err(Error::Corruption(format!(
                "journal segment {next} is missing from {}: segment {id} ends with the mark of a \
                 roll to it, and no manifest lists it yet, so it held the newest writes",
                journal_dir.display()
            )));
        }
        if let Some((want, got)) = gap {
            return Err(Error::Corruption(format!(
                "journal records are missing: after the ledger's SQN {persisted} recovery expected \
                 SQN {want} next but found {got} (a journal segment was lost or damaged)"
            )));
        }
        // Compaction outputs carry new ids but old SQNs: order by SQN.
        segments.sort_by_key(|s| s.first_sqn());
        let next_segment_id = ids.last().map(|i| i + 1).unwrap_or(1);
        let (active_seg, file) = Segment::create(&disk, &journal_dir, next_segment_id)?;
        segments.push(active_seg.clone());
        sync_dir(&*disk, &journal_dir)?;
        let spares = (cfg.journal_spare_segments > 0).then(|| {
            Arc::new(Spares::new(
                journal_dir.clone(),
                cfg.journal_spare_segments,
                cfg.journal_segment_bytes / 2,
            ))
        });
        let journal = Arc::new(Journal::new(
            journal_dir,
            segments,
            cfg.max_value_bytes,
            spares,
        ));
        let writer = JournalWriter::new(active_seg, file);
        let journal_files = Ranked::mutex(
            Rank::JournalFiles,
            JournalFiles {
                active: writer.file.clone(),
                unsynced: Vec::new(),
            },
        );

        let persisted_floor = manifest::persisted_floor(&*disk, &dir)?;
        let inner = Arc::new_cyclic(|me| Inner {
            me: me.clone(),
            syncer_thread: Mutex::new(None),
            worker_thread: Mutex::new(None),
            disk,
            dir,
            ledger_dir,
            journal,
            journal_files,
            journal_sync_gate: Ranked::mutex(Rank::JournalSyncGate, ()),
            rolled: Ranked::mutex(Rank::RolledSegments, Vec::new()),
            journal_dir_due: Ranked::mutex(Rank::JournalDir, false),
            aae: (cfg.aae_segments > 0).then(|| {
                Ranked::mutex(
                    Rank::Aae,
                    AaeState::new(cfg.aae_segments, cfg.aae_branch_width),
                )
            }),
            snapshots: Ranked::mutex(Rank::Snapshots, Vec::new()),
            compaction_lock: Ranked::mutex(Rank::CompactionLock, ()),
            key_stripes: (0..write_path::KEY_STRIPES)
                .map(|_| Ranked::mutex(Rank::KeyStripe, ()))
                .collect(),
            write_queue: Ranked::mutex(Rank::WriteQueue, Default::default()),
            write_beacon: crate::beacon::Beacon::new(),
            write: Ranked::mutex(
                Rank::Write,
                WriteState {
                    journal: writer,
                    next_sqn: max_sqn + 1,
                    next_segment_id: next_segment_id + 1,
                    unsynced_bytes: 0,
                    unflushed_journal_bytes: 0,
                    group_buf: Vec::new(),
                },
            ),
            mem: Ranked::rwlock(Rank::Mem, mem),
            version: Ranked::rwlock(Rank::Version, Arc::new(version)),
            persisted_sqn: AtomicU64::new(persisted),
            last_sqn: AtomicU64::new(max_sqn),
            next_file_id: AtomicU64::new(max_file_id),
            manifest: Ranked::mutex(
                Rank::Manifest,
                ManifestState {
                    generation: newest_gen.max(m.generation),
                    pending: VecDeque::new(),
                    persisted_history: VecDeque::from([persisted_floor]),
                },
            ),
            sync: Ranked::mutex(
                Rank::Sync,
                SyncState {
                    synced: max_sqn,
                    requested: max_sqn,
                    shutdown: false,
                    failed: None,
                    syncer_running: false,
                    #[cfg(test)]
                    syncer_paused: false,
                },
            ),
            synced_sqn: AtomicU64::new(max_sqn),
            sync_beacon: crate::beacon::Beacon::new(),
            syncer_cv: Condvar::new(),
            bg: Ranked::mutex(
                Rank::Bg,
                Bg {
                    merge_blocked: None,
                    shutdown: false,
                    abandon: false,
                    error: None,
                    cursors: vec![Vec::new(); NUM_LEVELS],
                    worker_running: false,
                    wakes: 0,
                },
            ),
            bg_cv: Condvar::new(),
            done_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            c: Counters::default(),
            cfg,
        });
        inner.write_manifest(Vec::new())?;
        for id in empty_segments {
            remove_if_exists(&*inner.disk, &segment::seg_path(&inner.journal.dir, id))?;
            remove_if_exists(&*inner.disk, &segment::idx_path(&inner.journal.dir, id))?;
        }
        let aae_builder = inner.load_aae_tree(max_sqn)?;
        // Started now for what recovery left (frozen memtables, merges); it exits when idle.
        if !inner.wake_worker(&mut inner.bg.lock()) {
            return Err(Error::Io {
                context: "starting the ledger worker".into(),
                source: std::io::Error::other("no thread could be started"),
            });
        }
        let scheduler = if inner.cfg.compaction_runs_per_day > 0 {
            let sched_inner = inner.clone();
            Some(
                std::thread::Builder::new()
                    .name("levee-journal-compaction".into())
                    .spawn(move || sched_inner.scheduler())
                    .ctx(|| "starting the compaction scheduler".to_string())?,
            )
        } else {
            None
        };
        // The syncer is started by the first write that needs it (`Inner::wake_syncer`).
        Ok(Store {
            inner,
            scheduler: Mutex::new(scheduler),
            aae_builder: Mutex::new(aae_builder),
            lock: Mutex::new(Some(lock)),
        })
    }
}

/// Cut the segment at `path` to `len` bytes and make that durable.
fn truncate_durably(disk: &dyn crate::storage::Storage, path: &Path, len: u64) -> Result<()> {
    let f = disk
        .open(path, true)
        .ctx(|| format!("opening {}", path.display()))?;
    f.set_len(len)
        .ctx(|| format!("truncating {}", path.display()))?;
    f.sync_data().ctx(|| format!("syncing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::SimDisk;

    /// A roll renamed a spare into place and the power went before its link reached the disk:
    /// the segment still begins with the spare's mark. It holds none of its records, and it
    /// reads as empty to the segment after it, whose records (written back before the power
    /// went, none acknowledged) come after that hole and are cut; the store opens with what it
    /// had. Were the marked file's old length taken for its own, those records would read as a
    /// gap and the open would fail.
    #[test]
    fn a_segment_still_marked_as_a_spare_holds_nothing_and_what_follows_it_is_cut() {
        let disk = SimDisk::new();
        let cfg = Config::small_for_tests();
        let dir = Path::new("/db");
        let s = Store::open_on(disk.handle(), dir, cfg.clone()).unwrap();
        for i in 0..10 {
            s.put(b"b", format!("k{i}").as_bytes(), b"v0", b"", &[])
                .unwrap();
        }
        let last = s.stats().last_sqn;
        s.close().unwrap();
        let jdir = dir.join("journal");
        let h = disk.handle();
        let next = list_ids(&h, &jdir, ".seg").unwrap().last().unwrap() + 1;
        let write = |id: u64, bytes: &[u8]| {
            let f = h.create(&segment::seg_path(&jdir, id)).unwrap();
            f.append(bytes).unwrap();
            f.sync_data().unwrap();
        };
        let mut marked = segment::SPARE_MAGIC.to_vec();
        for sqn in 1..=20 {
            record::encode(
                &mut marked,
                sqn,
                Kind::Put,
                0,
                b"old",
                b"",
                &[],
                &[9u8; 300],
            );
        }
        write(next, &marked);
        let link = segment::encode_link(segment::Link {
            prev_id: next,
            prev_len: 5000,
            floor: 0,
        });
        let mut after = link.clone();
        for sqn in last + 3..=last + 4 {
            record::encode(&mut after, sqn, Kind::Put, 0, b"new", b"", &[], b"x");
        }
        write(next + 1, &after);
        h.sync_dir(&jdir).unwrap();
        assert!(
            marked.len() > 5000,
            "the marked file must be longer than the link says"
        );

        let s = Store::open_on(disk.handle(), dir, cfg).unwrap();
        for i in 0..10 {
            let got = s.get(b"b", format!("k{i}").as_bytes()).unwrap().unwrap();
            assert_eq!(got.value, b"v0", "k{i}");
        }
        assert_eq!(
            s.stats().last_sqn,
            last,
            "no record of the cut segments was taken"
        );
        s.close().unwrap();
    }

    fn loaded(s: &Store) -> (usize, usize) {
        let segs = s.inner.journal.segments();
        let n = segs.iter().filter(|g| g.index_loaded()).count();
        (n, segs.len())
    }

    /// Open reads no closed, fully persisted segment's index; a GET reads exactly the one it needs.
    #[test]
    fn open_reads_no_persisted_segment_index_and_a_get_reads_one() {
        let disk = SimDisk::new();
        let cfg = Config {
            journal_segment_records: 10,
            ..Config::small_for_tests()
        };
        let dir = Path::new("/db");
        let s = Store::open_on(disk.handle(), dir, cfg.clone()).unwrap();
        for i in 0..100 {
            s.put(b"b", format!("k{i:03}").as_bytes(), b"v", b"", &[])
                .unwrap();
        }
        s.close().unwrap();
        let s = Store::open_on(disk.handle(), dir, cfg).unwrap();
        let (n, total) = loaded(&s);
        assert!(total >= 10, "expected ten or more segments, got {total}");
        assert_eq!(
            n, 1,
            "only the new active segment's index may be in memory after open"
        );
        assert_eq!(s.get(b"b", b"k005").unwrap().unwrap().value, b"v");
        assert_eq!(loaded(&s).0, 2, "a GET loads the one index it needs");
        assert!(s.head(b"b", b"k050").unwrap().is_some());
        assert_eq!(loaded(&s).0, 2, "a HEAD reads the ledger only");
        s.close().unwrap();
    }
}
