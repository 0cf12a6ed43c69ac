//! `Store`: the public API, the write path with group commit, recovery, and the background worker
//! that flushes memtables and merges ledger levels.
//!
//! Lock order: a thread holding a lock takes only locks to its right, never one to its left:
//! `compaction_lock` → `write` → `journal_sync_gate` → `active_journal`;
//! `write` → `aae`; `write` → `mem`; `write` → `manifest` → `version`;
//! `bg` → `mem` and `bg` → `version` (stall and settle checks read them under `bg`);
//! `snapshots` → a snapshot's view → its fold slots.
//! `sync` and `bg` are leaves: each is held alone, never while taking the other or any lock above
//! (`poison_journal` takes them one after the other). `mem` and `version` are never nested.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::aae::{self, AaeKeyHash, AaeState, AaeTree};
use crate::config::{Config, SyncMode, NUM_LEVELS};
use crate::error::{Error, IoContext, Result};
use crate::fsutil::{create_dir_durable, remove_if_exists, sync_dir};
use crate::journal::record::{self, Kind, RecordView};
use crate::journal::segment::{self, IdxEntry, ScanEnd, Segment};
use crate::journal::{Journal, JournalWriter};
use crate::keys::{self, IndexChange, IndexOp};
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::{sst_path, Table, TableBuilder};
use crate::ledger::value::LedgerValue;
use crate::ledger::{merge_backlog, pick_merge, run_merge, Version};
use crate::manifest::{self, Manifest, SegmentEntry, KEEP};
use crate::snapshot::{
    FoldedHead, HeadFoldOptions, IndexPage, IndexQuery, SnapInner, Snapshot, SnapshotKind,
};
use crate::storage::{Disk, LockGuard, RealStorage, StorageFile};
use crate::view::View;

/// Sequence number: one per write, shared by the object and its index entries.
pub type Sqn = u64;

/// Largest total size of the index changes of one write.
pub const MAX_INDEX_CHANGE_BYTES: usize = 4 << 20;

/// An object returned by `get`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub sqn: Sqn,
    pub value: Vec<u8>,
    pub metadata: Vec<u8>,
}

/// What `head` returns: everything the ledger knows, without the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub sqn: Sqn,
    pub value_size: u32,
    /// CRC32C of the value.
    pub value_hash: u32,
    pub metadata: Vec<u8>,
}

/// What one journal compaction did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactionReport {
    /// Live percentage of each candidate segment, in journal order.
    pub scores: Vec<f64>,
    /// Ids of the segments rewritten (empty when no run was worth it).
    pub compacted_segments: Vec<u64>,
    pub records_kept: u64,
    pub records_dropped: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub seconds: f64,
}

/// Engine counters (the node exports them as Prometheus metrics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub puts: u64,
    pub deletes: u64,
    pub gets: u64,
    pub heads: u64,
    /// Bytes of keys, values and metadata accepted from callers.
    pub user_bytes_written: u64,
    /// Bytes appended to journal segments.
    pub journal_bytes_written: u64,
    /// Bytes written to ledger SSTs by flushes and merges.
    pub ledger_bytes_written: u64,
    pub journal_disk_bytes: u64,
    pub ledger_disk_bytes: u64,
    /// Records read from the journal (GET reads one; HEAD none).
    pub journal_reads: u64,
    pub flushes: u64,
    pub merges: u64,
    /// Time writers spent waiting for flushes/merges to catch up.
    pub write_stall_seconds: f64,
    /// Longest single wait of a writer.
    pub max_write_stall_seconds: f64,
    /// Ledger files over their level targets.
    pub ledger_merge_backlog: u64,
    pub journal_fsyncs: u64,
    /// Time spent in journal fdatasync calls.
    pub journal_fsync_seconds: f64,
    /// Segment rolls (sync of the old segment, its index, the new file) under the write lock.
    pub journal_roll_seconds: f64,
    /// Longest single roll: writers wait this long behind it.
    pub max_journal_roll_seconds: f64,
    pub aae_rebuilds: u64,
    /// Duration of the last AAE rebuild.
    pub aae_rebuild_seconds: f64,
    /// Snapshots currently pinning files.
    pub live_snapshots: u64,
    pub journal_compaction_runs: u64,
    pub journal_compaction_reclaimed_bytes: u64,
    /// 1 while a journal compaction runs.
    pub journal_compaction_active: u64,
    pub persisted_sqn: Sqn,
    pub last_sqn: Sqn,
    /// Every journal record up to this SQN has been fdatasynced (by a group commit, the
    /// background syncer, a segment roll, or before a memtable flush). Never below `persisted_sqn`
    /// once a flush has completed.
    pub journal_synced_sqn: Sqn,
    pub journal_segments: u64,
    pub ledger_files_per_level: Vec<u64>,
    /// Damaged SST parts found so far (data blocks failing their checksum; an unreadable index,
    /// bloom or footer counts one). Reads of their keys return `Error::Corruption`.
    pub ledger_damaged_blocks: u64,
    /// 1 when merges stopped because one met a damaged table (nothing is dropped: the table stays
    /// as it is, and writers get an error instead of waiting once level 0 is full).
    pub ledger_merges_blocked: u64,
}

#[derive(Default)]
struct Counters {
    puts: AtomicU64,
    deletes: AtomicU64,
    gets: AtomicU64,
    heads: AtomicU64,
    user_bytes: AtomicU64,
    journal_bytes: AtomicU64,
    ledger_bytes: AtomicU64,
    flushes: AtomicU64,
    merges: AtomicU64,
    stall_nanos: AtomicU64,
    max_stall_nanos: AtomicU64,
    fsyncs: AtomicU64,
    fsync_nanos: AtomicU64,
    roll_nanos: AtomicU64,
    max_roll_nanos: AtomicU64,
    aae_rebuilds: AtomicU64,
    aae_rebuild_nanos: AtomicU64,
    compaction_runs: AtomicU64,
    compaction_reclaimed: AtomicU64,
    compaction_active: AtomicU64,
}

struct MemState {
    active: Arc<Memtable>,
    /// Frozen memtables waiting for flush, oldest first.
    immutables: VecDeque<Arc<Memtable>>,
}

struct WriteState {
    journal: JournalWriter,
    next_sqn: Sqn,
    next_segment_id: u64,
    buf: Vec<u8>,
    /// Bytes appended since the last background-sync request (`journal_bytes_per_sync`).
    unsynced_bytes: u64,
    /// Journal bytes appended since the active memtable was last frozen: a cap on it bounds what
    /// recovery replays after a crash (`Config::max_unflushed_journal_bytes`).
    unflushed_journal_bytes: u64,
}

struct ManifestState {
    generation: u64,
    /// Tables dropped from the version by manifest generation `g`; their files go once every kept
    /// manifest generation no longer lists them.
    pending: VecDeque<(u64, Vec<Arc<Table>>)>,
    /// `persisted_sqn` of the manifest generations on disk, oldest first.
    persisted_history: VecDeque<u64>,
}

struct SyncState {
    /// Every SQN up to this one is on disk.
    synced: Sqn,
    /// Highest SQN a writer is waiting for.
    requested: Sqn,
    shutdown: bool,
    /// An fdatasync failed: the page cache may have dropped the data, so no later sync can be
    /// trusted to cover it. Writers get this error until the store is reopened.
    failed: Option<String>,
}

struct Bg {
    /// A merge met a damaged table: merges stop (flushes go on) until a reopen.
    merge_blocked: Option<String>,
    shutdown: bool,
    /// Stop at once without flushing (simulated crash).
    abandon: bool,
    error: Option<String>,
    cursors: Vec<Vec<u8>>,
}

struct Inner {
    disk: Disk,
    dir: PathBuf,
    ledger_dir: PathBuf,
    cfg: Config,
    journal: Arc<Journal>,
    write: Mutex<WriteState>,
    /// The active segment's file, replaced on a roll. The syncer and the flush worker sync it
    /// without the write lock, so they never wait behind writers (or behind close, which holds
    /// that lock while it joins the worker).
    active_journal: Mutex<Arc<dyn StorageFile>>,
    /// Held across every fdatasync of the active segment (group commit, background sync, flush,
    /// roll, close) together with its poisoning decision, so no sync can succeed over bytes an
    /// earlier failed sync dropped before the store is marked poisoned.
    journal_sync_gate: Mutex<()>,
    aae: Option<Mutex<AaeState>>,
    compaction_lock: Mutex<()>,
    snapshots: Mutex<Vec<std::sync::Weak<SnapInner>>>,
    mem: RwLock<MemState>,
    version: RwLock<Arc<Version>>,
    persisted_sqn: AtomicU64,
    last_sqn: AtomicU64,
    next_file_id: AtomicU64,
    manifest: Mutex<ManifestState>,
    sync: Mutex<SyncState>,
    sync_cv: Condvar,
    syncer_cv: Condvar,
    bg: Mutex<Bg>,
    bg_cv: Condvar,
    done_cv: Condvar,
    closed: AtomicBool,
    c: Counters,
}

/// A value-separated key-value store. Cheap to share: all methods take `&self` and are safe to call
/// from many threads at once.
pub struct Store {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    scheduler: Mutex<Option<JoinHandle<()>>>,
    /// Rebuilds the AAE tree in the background after an open that found no current tree file.
    aae_builder: Mutex<Option<JoinHandle<()>>>,
    lock: Mutex<Option<LockGuard>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .finish()
    }
}

fn list_ids(disk: &Disk, dir: &Path, ext: &str) -> Result<Vec<u64>> {
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

/// The ledger side of one write.
pub(crate) struct Applied<'a> {
    pub sqn: Sqn,
    pub kind: Kind,
    pub timestamp: u64,
    pub ledger_key: &'a [u8],
    pub metadata: &'a [u8],
    pub changes: &'a [IndexChange],
    pub value_len: usize,
    pub value_hash: u32,
}

impl<'a> Applied<'a> {
    fn from_record(view: &'a RecordView<'a>) -> Self {
        Applied {
            sqn: view.sqn,
            kind: view.kind,
            timestamp: view.timestamp,
            ledger_key: view.ledger_key,
            metadata: view.metadata,
            changes: &view.changes,
            value_len: view.value.len(),
            value_hash: crc32c::crc32c(view.value),
        }
    }
}

/// µs since the Unix epoch.
pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Apply one write's ledger changes (the object and its index entries) to a memtable.
fn apply(mem: &Memtable, w: &Applied<'_>) {
    mem.insert(
        w.ledger_key.to_vec(),
        LedgerValue {
            sqn: w.sqn,
            tombstone: w.kind == Kind::Delete,
            value_size: w.value_len as u32,
            value_hash: w.value_hash,
            last_modified: w.timestamp,
            metadata: w.metadata.to_vec(),
        },
    );
    if let Some((bucket, key)) = keys::split_object_key(w.ledger_key) {
        for c in w.changes {
            mem.insert(
                keys::index_key(bucket, &c.field, &c.term, key),
                LedgerValue {
                    sqn: w.sqn,
                    tombstone: c.op == IndexOp::Remove,
                    value_size: 0,
                    value_hash: 0,
                    last_modified: w.timestamp,
                    metadata: Vec::new(),
                },
            );
        }
    }
    mem.note_sqn(w.sqn);
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
        let mut replay = |mem: &mut MemState, view: &RecordView<'_>| {
            if view.sqn != next_replay && gap.is_none() {
                gap = Some((next_replay, view.sqn));
            }
            next_replay = view.sqn + 1;
            apply(&mem.active, &Applied::from_record(view));
            if mem.active.bytes() >= cfg.memtable_bytes {
                let full = std::mem::take(&mut mem.active);
                mem.immutables.push_back(full);
            }
        };
        for (i, &id) in ids.iter().enumerate() {
            let is_last = i + 1 == ids.len();
            let listed_closed = m.segments.iter().any(|s| s.id == id && s.closed);
            let idx = if listed_closed || !is_last {
                segment::load_index(&*disk, &journal_dir, id)?
            } else {
                None
            };
            let seg = if let Some(entries) = idx {
                let seg = Segment::open(&disk, &journal_dir, id, entries, true)?;
                for e in seg.entries().into_iter().filter(|e| e.sqn > persisted) {
                    let raw = seg.read_raw(e)?;
                    let view = record::decode(&raw).map_err(|err| {
                        Error::Corruption(format!(
                            "journal segment {} record sqn {} (not yet in the ledger): {err}",
                            seg.path.display(),
                            e.sqn
                        ))
                    })?;
                    replay(&mut mem, &view);
                }
                seg
            } else {
                let path = segment::seg_path(&journal_dir, id);
                let mut entries: Vec<IdxEntry> = Vec::new();
                let mut start = 0u64;
                loop {
                    let before = entries.len();
                    let last = entries.last().map(|e| e.sqn).unwrap_or(0);
                    let end = segment::scan(&*disk, &path, start, last, |e, view| {
                        entries.push(e);
                        if view.sqn > persisted {
                            replay(&mut mem, view);
                        }
                        Ok(())
                    })?;
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
                    // compaction output may have a higher id), a record whose header was never written
                    // (zeros) is writeback lost to a failed fdatasync or a power cut, even with
                    // later records after it: a successful sync covering those would have made
                    // this range durable too, so none of them was acknowledged as durable. Cut
                    // the segment there. Any other damage is corruption.
                    let end = match end {
                        ScanEnd::Corrupt {
                            offset,
                            reason,
                            next_valid,
                        } if !listed_closed && segment::zero_header_at(&*disk, &path, offset)? => {
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
                        ScanEnd::TornTail { offset, reason } => {
                            log::warn!(
                                "journal segment {}: torn tail at offset {offset} ({reason}); truncating",
                                path.display()
                            );
                            let f = disk
                                .open(&path, true)
                                .ctx(|| format!("opening {}", path.display()))?;
                            f.set_len(offset)
                                .ctx(|| format!("truncating {}", path.display()))?;
                            f.sync_data()
                                .ctx(|| format!("syncing {}", path.display()))?;
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
                let seg = Segment::open(&disk, &journal_dir, id, entries, false)?;
                if seg.record_count() > 0 {
                    // What the scan found may be only in the page cache (a process crash): make
                    // it durable before anything (a flush, a compaction) relies on it.
                    disk.open(&path, true)
                        .and_then(|f| f.sync_data())
                        .ctx(|| format!("syncing {}", path.display()))?;
                    seg.close(&journal_dir)?;
                }
                seg
            };
            if let Some(last) = seg.last_sqn() {
                max_sqn = max_sqn.max(last);
                segments.push(seg);
            } else {
                // Removed only once a manifest that no longer lists it is on disk.
                empty_segments.push(id);
            }
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
        let journal = Arc::new(Journal::new(journal_dir, segments));
        let writer = JournalWriter {
            seg: active_seg,
            file,
            size: 0,
            records: 0,
        };
        let active_journal = Mutex::new(writer.file.clone());

        let persisted_floor = manifest::persisted_floor(&*disk, &dir)?;
        let inner = Arc::new(Inner {
            disk,
            dir,
            ledger_dir,
            journal,
            active_journal,
            journal_sync_gate: Mutex::new(()),
            aae: (cfg.aae_segments > 0)
                .then(|| Mutex::new(AaeState::new(cfg.aae_segments, cfg.aae_branch_width))),
            snapshots: Mutex::new(Vec::new()),
            compaction_lock: Mutex::new(()),
            write: Mutex::new(WriteState {
                journal: writer,
                next_sqn: max_sqn + 1,
                next_segment_id: next_segment_id + 1,
                buf: Vec::new(),
                unsynced_bytes: 0,
                unflushed_journal_bytes: 0,
            }),
            mem: RwLock::new(mem),
            version: RwLock::new(Arc::new(version)),
            persisted_sqn: AtomicU64::new(persisted),
            last_sqn: AtomicU64::new(max_sqn),
            next_file_id: AtomicU64::new(max_file_id),
            manifest: Mutex::new(ManifestState {
                generation: newest_gen.max(m.generation),
                pending: VecDeque::new(),
                persisted_history: VecDeque::from([persisted_floor]),
            }),
            sync: Mutex::new(SyncState {
                synced: max_sqn,
                requested: max_sqn,
                shutdown: false,
                failed: None,
            }),
            sync_cv: Condvar::new(),
            syncer_cv: Condvar::new(),
            bg: Mutex::new(Bg {
                merge_blocked: None,
                shutdown: false,
                abandon: false,
                error: None,
                cursors: vec![Vec::new(); NUM_LEVELS],
            }),
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
        let worker_inner = inner.clone();
        let worker = std::thread::Builder::new()
            .name("levee-ledger".into())
            .spawn(move || worker_inner.worker())
            .ctx(|| "starting the ledger worker".to_string())?;
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
        let syncer =
            if inner.cfg.sync_on_write == SyncMode::Sync || inner.cfg.journal_bytes_per_sync > 0 {
                let syncer_inner = inner.clone();
                Some(
                    std::thread::Builder::new()
                        .name("levee-journal-sync".into())
                        .spawn(move || syncer_inner.syncer())
                        .ctx(|| "starting the journal syncer".to_string())?,
                )
            } else {
                None
            };
        Ok(Store {
            inner,
            worker: Mutex::new(Some(worker)),
            syncer: Mutex::new(syncer),
            scheduler: Mutex::new(scheduler),
            aae_builder: Mutex::new(aae_builder),
            lock: Mutex::new(Some(lock)),
        })
    }

    /// Store `value` under (bucket, key) with `metadata` (e.g. a version vector) and index changes,
    /// all under one SQN. Returns that SQN once the write is as durable as `sync_on_write` promises.
    pub fn put(
        &self,
        bucket: &[u8],
        key: &[u8],
        value: &[u8],
        metadata: &[u8],
        index_changes: &[IndexChange],
    ) -> Result<Sqn> {
        if value.len() > self.inner.cfg.max_value_bytes {
            return Err(Error::ValueTooLarge {
                size: value.len(),
                limit: self.inner.cfg.max_value_bytes,
            });
        }
        self.inner
            .write(Kind::Put, bucket, key, value, metadata, index_changes)
    }

    /// Write a tombstone for (bucket, key). `metadata` is kept with the tombstone.
    pub fn delete(
        &self,
        bucket: &[u8],
        key: &[u8],
        metadata: &[u8],
        index_changes: &[IndexChange],
    ) -> Result<Sqn> {
        self.inner
            .write(Kind::Delete, bucket, key, &[], metadata, index_changes)
    }

    /// The object stored under (bucket, key): one ledger lookup plus one journal read.
    pub fn get(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Object>> {
        let i = &self.inner;
        i.check_open()?;
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        i.c.gets.fetch_add(1, Ordering::Relaxed);
        let lk = keys::object_key(bucket, key);
        // The segment list first: a journal compaction that drops the record after the ledger
        // lookup below (because a newer write replaced it) cannot take it from this list.
        let segments = i.journal.segments();
        let Some(lv) = i.lookup(&lk)? else {
            return Ok(None);
        };
        if lv.tombstone {
            return Ok(None);
        }
        let rec = i.journal.read_pinned(&segments, lv.sqn, &lk)?;
        if rec.value.len() != lv.value_size as usize || crc32c::crc32c(&rec.value) != lv.value_hash
        {
            return Err(Error::Corruption(format!(
                "value of sqn {} does not match the size/hash the ledger recorded",
                lv.sqn
            )));
        }
        Ok(Some(Object {
            sqn: lv.sqn,
            value: rec.value,
            metadata: lv.metadata,
        }))
    }

    /// Metadata of (bucket, key) from the ledger alone; never reads the journal.
    pub fn head(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Head>> {
        let i = &self.inner;
        i.check_open()?;
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        i.c.heads.fetch_add(1, Ordering::Relaxed);
        let lk = keys::object_key(bucket, key);
        Ok(i.lookup(&lk)?.filter(|v| !v.tombstone).map(|v| Head {
            sqn: v.sqn,
            value_size: v.value_size,
            value_hash: v.value_hash,
            metadata: v.metadata,
        }))
    }

    /// Flush the ledger memtable to an SST and wait until it is persisted.
    pub fn flush(&self) -> Result<()> {
        let i = &self.inner;
        i.check_open()?;
        let target = {
            let _w = i.write.lock();
            i.rotate_memtable();
            i.last_sqn.load(Ordering::Acquire)
        };
        let mut bg = i.bg.lock();
        i.bg_cv.notify_all();
        while i.persisted_sqn.load(Ordering::Acquire) < target {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.clone()));
            }
            i.done_cv.wait_for(&mut bg, Duration::from_millis(50));
        }
        Ok(())
    }

    /// Wait until the ledger has nothing left to flush or merge: no frozen memtable and every level
    /// within its target size. Returns `Ok(false)` if `timeout` passes first. Merges run in the
    /// background; this is for operators and tests that need the ledger settled (for example
    /// before measuring its shape), not for normal writes.
    pub fn wait_for_merges(&self, timeout: Duration) -> Result<bool> {
        let i = &self.inner;
        i.check_open()?;
        let deadline = Instant::now() + timeout;
        let mut bg = i.bg.lock();
        loop {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.clone()));
            }
            let settled = i.mem.read().immutables.is_empty()
                && pick_merge(&i.version.read().metas(), &i.cfg, &bg.cursors).is_none();
            if settled {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            i.bg_cv.notify_all();
            i.done_cv.wait_for(&mut bg, Duration::from_millis(50));
        }
    }

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
            let w = i.write.lock();
            // The journal first, so the final memtable flush finds every record it persists
            // durable. A journal poisoned by a failed sync or roll is never synced again and the
            // memtable is not flushed: the next open replays what the disk really holds.
            let gate = i.journal_sync_gate.lock();
            let failed = i.sync.lock().failed.clone();
            let synced = match failed {
                Some(f) => Err(Error::Poisoned(f)),
                None => JournalWriter::sync(&*w.journal.file).map_err(|e| {
                    i.poison_journal(format!("journal fdatasync at close failed: {e}"))
                }),
            };
            drop(gate);
            if synced.is_ok() {
                {
                    let mut s = i.sync.lock();
                    s.synced = s.synced.max(w.next_sqn - 1);
                }
                i.rotate_memtable();
            }
            {
                let mut bg = i.bg.lock();
                bg.shutdown = true;
                bg.abandon = synced.is_err();
                i.bg_cv.notify_all();
            }
            if let Some(h) = self.worker.lock().take() {
                let _ = h.join();
            }
            synced?;
            if let Some(e) = &i.bg.lock().error {
                return Err(Error::Poisoned(e.clone()));
            }
            if w.journal.records > 0 {
                w.journal.seg.close(&i.journal.dir)?;
            }
            drop(w);
            i.write_manifest(Vec::new())?;
            i.save_aae_tree();
            Ok(())
        })();
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
        if let Some(h) = self.worker.lock().take() {
            let _ = h.join();
        }
        self.lock.lock().take();
    }

    fn stop_syncer(&self) {
        {
            let mut s = self.inner.sync.lock();
            s.shutdown = true;
            self.inner.syncer_cv.notify_all();
            self.inner.sync_cv.notify_all();
        }
        if let Some(h) = self.syncer.lock().take() {
            let _ = h.join();
        }
    }

    /// A point-in-time view for queries and folds; writes continue meanwhile.
    pub fn snapshot(&self, kind: SnapshotKind) -> Result<Snapshot> {
        self.inner.snapshot(kind)
    }

    /// Secondary-index range query on a fresh query snapshot.
    pub fn index_query(&self, q: &IndexQuery) -> Result<IndexPage> {
        self.inner.snapshot(SnapshotKind::Query)?.index_query(q)
    }

    /// Score the closed journal segments, choose a run with `Config::compaction` thresholds and
    /// rewrite its live records (original SQNs) into new segments. Never touches the ledger.
    /// `Error::Busy` if a compaction is already running.
    pub fn compact_journal(&self) -> Result<CompactionReport> {
        self.inner.check_open()?;
        self.inner.compact_journal()
    }

    /// A copy of the AAE tree.
    pub fn aae_tree(&self) -> Result<AaeTree> {
        self.inner.check_open()?;
        let aae = self
            .inner
            .aae
            .as_ref()
            .ok_or_else(|| Error::InvalidConfig("AAE is disabled (aae_segments = 0)".into()))?;
        let a = aae.lock();
        if let Some(why) = &a.unavailable {
            return Err(Error::Busy(format!("the AAE tree is unavailable: {why}")));
        }
        Ok(AaeTree::new(a.leaves.clone(), a.branch_width))
    }

    /// Wait until the AAE tree can be served (after an open that found no current tree file it
    /// is rebuilt in the background). `Ok(false)` if `timeout` passes first; `Error::Busy` with
    /// the reason if the rebuild failed.
    pub fn wait_for_aae(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.aae_tree() {
                Ok(_) => return Ok(true),
                Err(Error::Busy(why)) => {
                    let running = self
                        .aae_builder
                        .lock()
                        .as_ref()
                        .is_some_and(|h| !h.is_finished());
                    if !running && !why.contains("being rebuilt") {
                        return Err(Error::Busy(why));
                    }
                    if Instant::now() >= deadline {
                        return Ok(false);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// (bucket, key, leaf hash) of every live object in the given AAE segments.
    pub fn aae_keys_in_segments(&self, segments: &[u32]) -> Result<Vec<AaeKeyHash>> {
        let count = self.aae_tree()?.segment_count();
        let snap = self.inner.snapshot(SnapshotKind::Fold)?;
        let opts = HeadFoldOptions {
            segments: Some(segments.to_vec()),
            segment_count: count,
            ..HeadFoldOptions::default()
        };
        snap.fold_heads(&opts)?
            .map(|h| {
                h.map(|FoldedHead { bucket, key, head }| {
                    let hash = aae::leaf_hash(&bucket, &key, &head.metadata);
                    AaeKeyHash { bucket, key, hash }
                })
            })
            .collect()
    }

    /// Rebuild the AAE tree from a fold of heads (optionally checking each object's journal record
    /// exists) without pausing writes. Returns how long it took.
    pub fn rebuild_aae(&self, journal_check: bool) -> Result<Duration> {
        self.inner.check_open()?;
        self.inner.rebuild_aae(journal_check)
    }

    /// Engine counters and sizes.
    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        let version = i.version.read().clone();
        let c = &i.c;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            puts: l(&c.puts),
            deletes: l(&c.deletes),
            gets: l(&c.gets),
            heads: l(&c.heads),
            user_bytes_written: l(&c.user_bytes),
            journal_bytes_written: l(&c.journal_bytes),
            ledger_bytes_written: l(&c.ledger_bytes),
            journal_disk_bytes: i.journal.disk_bytes(),
            ledger_disk_bytes: version.disk_bytes(),
            journal_reads: i.journal.reads.load(Ordering::Relaxed),
            flushes: l(&c.flushes),
            merges: l(&c.merges),
            write_stall_seconds: l(&c.stall_nanos) as f64 / 1e9,
            max_write_stall_seconds: l(&c.max_stall_nanos) as f64 / 1e9,
            ledger_merge_backlog: merge_backlog(&version.metas(), &i.cfg),
            journal_fsyncs: l(&c.fsyncs),
            journal_fsync_seconds: l(&c.fsync_nanos) as f64 / 1e9,
            journal_roll_seconds: l(&c.roll_nanos) as f64 / 1e9,
            max_journal_roll_seconds: l(&c.max_roll_nanos) as f64 / 1e9,
            aae_rebuilds: l(&c.aae_rebuilds),
            aae_rebuild_seconds: l(&c.aae_rebuild_nanos) as f64 / 1e9,
            live_snapshots: i.reap_snapshots() as u64,
            journal_compaction_runs: l(&c.compaction_runs),
            journal_compaction_reclaimed_bytes: l(&c.compaction_reclaimed),
            journal_compaction_active: l(&c.compaction_active),
            persisted_sqn: i.persisted_sqn.load(Ordering::Acquire),
            last_sqn: i.last_sqn.load(Ordering::Acquire),
            journal_synced_sqn: i.sync.lock().synced,
            journal_segments: i.journal.segments().len() as u64,
            ledger_files_per_level: version.levels.iter().map(|l| l.len() as u64).collect(),
            ledger_damaged_blocks: version
                .levels
                .iter()
                .flatten()
                .map(|t| t.damaged_blocks())
                .sum(),
            ledger_merges_blocked: u64::from(i.bg.lock().merge_blocked.is_some()),
        }
    }

    /// The directory this store lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("closing store {}: {e}", self.inner.dir.display());
        }
    }
}

impl Inner {
    /// No journal record at or below this SQN is needed by any recovery path: every manifest
    /// generation a later open might use has persisted it in the ledger.
    fn protected_sqn(&self) -> Sqn {
        let floor = self
            .manifest
            .lock()
            .persisted_history
            .iter()
            .copied()
            .min()
            .unwrap_or(0);
        floor.min(self.persisted_sqn.load(Ordering::Acquire))
    }

    /// Whether the record may still be needed: the ledger points at it, replay may need it, or the
    /// write that replaced it is not yet durable (a power cut would lose that write and leave the
    /// ledger pointing here again).
    fn record_is_live(&self, sqn: Sqn, ledger_key: &[u8], protected: Sqn) -> Result<bool> {
        if sqn > protected {
            return Ok(true);
        }
        let durable = self.sync.lock().synced;
        Ok(self
            .lookup(ledger_key)?
            .is_some_and(|v| v.sqn == sqn || v.sqn > durable))
    }

    /// Percentage of a segment's bytes still live, from a contiguous sample of its records.
    fn score_segment(&self, seg: &Segment, protected: Sqn, seed: u64) -> Result<f64> {
        let entries = seg.entries();
        if entries.is_empty() {
            return Ok(100.0);
        }
        let n = self.cfg.compaction_sample_records.min(entries.len());
        let start = (seed as usize) % (entries.len() - n + 1);
        let (mut live, mut total) = (0u64, 0u64);
        for e in &entries[start..start + n] {
            let raw = seg.read_raw(*e)?;
            let rec = record::decode(&raw)?;
            total += e.len as u64;
            if self.record_is_live(rec.sqn, rec.ledger_key, protected)? {
                live += e.len as u64;
            }
        }
        Ok(live as f64 * 100.0 / total.max(1) as f64)
    }

    fn compact_journal(&self) -> Result<CompactionReport> {
        let Some(_running) = self.compaction_lock.try_lock() else {
            return Err(Error::Busy(
                "a journal compaction is already running".into(),
            ));
        };
        self.c.compaction_active.store(1, Ordering::Relaxed);
        let result = self.compact_journal_locked();
        self.c.compaction_active.store(0, Ordering::Relaxed);
        result
    }

    fn compact_journal_locked(&self) -> Result<CompactionReport> {
        let started = Instant::now();
        let protected = self.protected_sqn();
        let candidates: Vec<Arc<Segment>> = self
            .journal
            .segments()
            .into_iter()
            .take_while(|s| s.is_closed() && s.last_sqn().is_some_and(|l| l <= protected))
            .collect();
        let seed = now_micros();
        let scores = candidates
            .iter()
            .enumerate()
            .map(|(i, s)| self.score_segment(s, protected, seed.wrapping_add(i as u64 * 7919)))
            .collect::<Result<Vec<f64>>>()?;
        let mut report = CompactionReport {
            scores: scores.clone(),
            ..CompactionReport::default()
        };
        let Some((at, len)) = crate::compaction::choose(&scores, &self.cfg.compaction) else {
            return Ok(report);
        };
        let run = &candidates[at..at + len];
        report.compacted_segments = run.iter().map(|s| s.id).collect();
        report.bytes_before = run.iter().map(|s| s.disk_bytes()).sum();
        let dir = self.journal.dir.clone();
        let mut outputs: Vec<Arc<Segment>> = Vec::new();
        let mut writer: Option<JournalWriter> = None;
        let new_output = || -> Result<JournalWriter> {
            let id = {
                let mut w = self.write.lock();
                w.next_segment_id += 1;
                w.next_segment_id - 1
            };
            let (seg, file) = Segment::create_output(&self.disk, &dir, id)?;
            Ok(JournalWriter {
                seg,
                file,
                size: 0,
                records: 0,
            })
        };
        let mut moved = 0u64;
        let rewrite = (|| -> Result<()> {
            for seg in run {
                for e in seg.entries() {
                    if self.closed.load(Ordering::Acquire) {
                        return Err(Error::Closed);
                    }
                    let raw = seg.read_raw(e)?;
                    let rec = record::decode(&raw).map_err(|err| {
                        Error::Corruption(format!(
                            "compacting {} (sqn {}): {err}",
                            seg.path.display(),
                            e.sqn
                        ))
                    })?;
                    if !self.record_is_live(rec.sqn, rec.ledger_key, protected)? {
                        report.records_dropped += 1;
                        continue;
                    }
                    if writer.as_ref().is_none_or(|w| {
                        w.full(
                            self.cfg.journal_segment_bytes,
                            self.cfg.journal_segment_records,
                        )
                    }) {
                        if let Some(w) = writer.take() {
                            JournalWriter::sync(&*w.file)?;
                            w.seg.close(&dir)?;
                        }
                        let w = new_output()?;
                        outputs.push(w.seg.clone());
                        writer = Some(w);
                    }
                    writer.as_mut().unwrap().append(rec.sqn, &raw)?;
                    self.c
                        .journal_bytes
                        .fetch_add(raw.len() as u64, Ordering::Relaxed);
                    report.records_kept += 1;
                    moved += 2 * raw.len() as u64;
                    if let Some(rate) = self.cfg.compaction_bytes_per_sec.filter(|r| *r > 0) {
                        let due = Duration::from_secs_f64(moved as f64 / rate as f64);
                        if let Some(wait) = due.checked_sub(started.elapsed()) {
                            // Woken by close, which waits for this run to stop.
                            let mut bg = self.bg.lock();
                            if !self.closed.load(Ordering::Acquire) {
                                self.bg_cv.wait_for(&mut bg, wait);
                            }
                        }
                    }
                }
            }
            if let Some(w) = writer.take() {
                JournalWriter::sync(&*w.file)?;
                w.seg.close(&dir)?;
            }
            Ok(())
        })();
        if let Err(e) = rewrite {
            for o in &outputs {
                remove_if_exists(&*self.disk, &segment::cseg_path(&dir, o.id))?;
                remove_if_exists(&*self.disk, &segment::idx_path(&dir, o.id))?;
            }
            return Err(e);
        }
        report.bytes_after = outputs.iter().map(|s| s.disk_bytes()).sum();
        self.journal.replace(run, outputs.clone());
        self.write_manifest(Vec::new())?;
        for o in &outputs {
            self.disk
                .rename(
                    &segment::cseg_path(&dir, o.id),
                    &segment::seg_path(&dir, o.id),
                )
                .ctx(|| format!("renaming compaction output {}", o.id))?;
        }
        sync_dir(&*self.disk, &dir)?;
        for s in run {
            s.mark_obsolete();
        }
        report.seconds = started.elapsed().as_secs_f64();
        self.c.compaction_runs.fetch_add(1, Ordering::Relaxed);
        self.c.compaction_reclaimed.fetch_add(
            report.bytes_before.saturating_sub(report.bytes_after),
            Ordering::Relaxed,
        );
        log::info!(
            "journal compaction: segments {:?} ({} bytes) -> {} bytes, {} records kept, {} dropped, {:.2} s",
            report.compacted_segments,
            report.bytes_before,
            report.bytes_after,
            report.records_kept,
            report.records_dropped,
            report.seconds
        );
        Ok(report)
    }

    /// Run `compact_journal` at the scheduled slots until shutdown.
    fn scheduler(self: Arc<Self>) {
        let (start_hour, end_hour) = self.cfg.compaction_window;
        let seed = crc32c::crc32c(self.dir.to_string_lossy().as_bytes()) as u64;
        loop {
            let now = now_micros() / 1_000_000;
            let day = now - now % 86_400;
            let runs = self.cfg.compaction_runs_per_day;
            let next = crate::compaction::day_schedule(day, start_hour, end_hour, runs, seed)
                .into_iter()
                .chain(crate::compaction::day_schedule(
                    day + 86_400,
                    start_hour,
                    end_hour,
                    runs,
                    seed,
                ))
                .find(|&t| t > now);
            let Some(next) = next else { return };
            {
                let mut bg = self.bg.lock();
                loop {
                    if bg.shutdown || self.closed.load(Ordering::Acquire) {
                        return;
                    }
                    let now = now_micros() / 1_000_000;
                    if now >= next {
                        break;
                    }
                    self.bg_cv
                        .wait_for(&mut bg, Duration::from_secs((next - now).min(60)));
                }
            }
            match self.compact_journal() {
                Ok(_) | Err(Error::Busy(_)) | Err(Error::Closed) => {}
                Err(e) => log::error!("scheduled journal compaction failed: {e}"),
            }
        }
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    fn poisoned(&self) -> Option<String> {
        self.bg.lock().error.clone()
    }

    fn write(
        &self,
        kind: Kind,
        bucket: &[u8],
        key: &[u8],
        value: &[u8],
        metadata: &[u8],
        changes: &[IndexChange],
    ) -> Result<Sqn> {
        self.check_open()?;
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        if metadata.len() > self.cfg.max_metadata_bytes {
            return Err(Error::MetadataTooLarge {
                size: metadata.len(),
                limit: self.cfg.max_metadata_bytes,
            });
        }
        let mut change_bytes = 0usize;
        for c in changes {
            keys::validate_index_change(c)?;
            change_bytes += c.field.len()
                + 16
                + if let keys::Term::Bin(b) = &c.term {
                    b.len()
                } else {
                    0
                };
        }
        if change_bytes > MAX_INDEX_CHANGE_BYTES {
            return Err(Error::InvalidIndex(format!(
                "index changes total {change_bytes} bytes; the limit is {MAX_INDEX_CHANGE_BYTES}"
            )));
        }
        self.maybe_stall()?;
        let lk = keys::object_key(bucket, key);
        let value_hash = crc32c::crc32c(value);
        let sqn = {
            let mut w = self.write.lock();
            self.check_open()?;
            if let Some(e) = self.poisoned() {
                return Err(Error::Poisoned(e));
            }
            // Everything that can fail without side effects comes before the append: a write
            // that returns an error must leave no record behind for a replay to resurrect.
            let aae_delta = match &self.aae {
                Some(_) => Some(self.aae_delta(bucket, key, &lk, kind, metadata)?),
                None => None,
            };
            let sqn = w.next_sqn;
            let mut buf = std::mem::take(&mut w.buf);
            buf.clear();
            let timestamp = now_micros();
            record::encode(
                &mut buf, sqn, kind, timestamp, &lk, metadata, changes, value,
            );
            let appended = w.journal.append(sqn, &buf);
            let len = buf.len();
            w.buf = buf;
            if let Err(e) = appended {
                if let Error::Poisoned(m) = &e {
                    self.bg.lock().error.get_or_insert(m.clone());
                }
                return Err(e);
            }
            w.next_sqn += 1;
            let applied = Applied {
                sqn,
                kind,
                timestamp,
                ledger_key: &lk,
                metadata,
                changes,
                value_len: value.len(),
                value_hash,
            };
            if let (Some(aae), Some((seg, delta))) = (&self.aae, aae_delta) {
                if delta != 0 {
                    aae.lock().xor(seg, delta);
                }
            }
            apply(&self.mem.read().active, &applied);
            self.last_sqn.store(sqn, Ordering::Release);
            self.c
                .journal_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            self.c.user_bytes.fetch_add(
                (bucket.len() + key.len() + value.len() + metadata.len()) as u64,
                Ordering::Relaxed,
            );
            match kind {
                Kind::Put => self.c.puts.fetch_add(1, Ordering::Relaxed),
                Kind::Delete => self.c.deletes.fetch_add(1, Ordering::Relaxed),
            };
            if w.journal.full(
                self.cfg.journal_segment_bytes,
                self.cfg.journal_segment_records,
            ) {
                let id = w.next_segment_id;
                // The write itself is in; a failed roll leaves the old segment active.
                let t = Instant::now();
                let rolled = {
                    let _gate = self.journal_sync_gate.lock();
                    match self.sync.lock().failed.clone() {
                        Some(f) => Err(Error::Poisoned(f)),
                        None => w.journal.roll(&self.disk, &self.journal.dir, id),
                    }
                };
                let n = t.elapsed().as_nanos() as u64;
                self.c.roll_nanos.fetch_add(n, Ordering::Relaxed);
                self.c.max_roll_nanos.fetch_max(n, Ordering::Relaxed);
                w.unsynced_bytes = 0;
                match rolled {
                    Ok(seg) => {
                        w.next_segment_id += 1;
                        *self.active_journal.lock() = w.journal.file.clone();
                        self.journal.push(seg);
                        // The old segment was fsynced by the roll: everything up to `sqn` is durable.
                        let mut s = self.sync.lock();
                        s.synced = s.synced.max(sqn);
                        drop(s);
                        if let Err(e) = self.write_manifest(Vec::new()) {
                            log::error!("writing the manifest after a journal roll: {e}");
                        }
                    }
                    // The old segment may be closed with a stale index, or its tail not durable:
                    // no later write may go anywhere until a reopen recovers from the disk.
                    Err(e) => {
                        self.poison_journal(format!("rolling the journal segment failed: {e}"));
                    }
                }
            }
            if self.cfg.sync_on_write == SyncMode::None && self.cfg.journal_bytes_per_sync > 0 {
                w.unsynced_bytes += len as u64;
                if w.unsynced_bytes >= self.cfg.journal_bytes_per_sync {
                    w.unsynced_bytes = 0;
                    let mut s = self.sync.lock();
                    if s.requested < sqn {
                        s.requested = sqn;
                        self.syncer_cv.notify_one();
                    }
                }
            }
            w.unflushed_journal_bytes += len as u64;
            if self.mem.read().active.bytes() >= self.cfg.memtable_bytes
                || w.unflushed_journal_bytes >= self.cfg.max_unflushed_journal_bytes
            {
                w.unflushed_journal_bytes = 0;
                self.rotate_memtable();
            }
            sqn
        };
        if self.cfg.sync_on_write == SyncMode::Sync {
            self.wait_durable(sqn)?;
        }
        Ok(sqn)
    }

    /// Freeze the active memtable for flushing. Caller holds the write lock.
    fn rotate_memtable(&self) {
        let mut m = self.mem.write();
        if m.active.is_empty() {
            return;
        }
        let full = std::mem::take(&mut m.active);
        m.immutables.push_back(full);
        drop(m);
        let _bg = self.bg.lock();
        self.bg_cv.notify_all();
    }

    /// Wait while flushes or L0 merges are behind, so memory and read cost stay bounded.
    fn maybe_stall(&self) -> Result<()> {
        let behind = || {
            self.mem.read().immutables.len() >= self.cfg.max_immutable_memtables
                || self.version.read().levels[0].len() >= self.cfg.l0_stall_files
        };
        if !behind() {
            return Ok(());
        }
        let start = Instant::now();
        let mut bg = self.bg.lock();
        while behind() {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.clone()));
            }
            if let Some(m) = &bg.merge_blocked {
                return Err(Error::Corruption(format!(
                    "writes wait for ledger merges, which stopped at a damaged table: {m}"
                )));
            }
            if bg.shutdown {
                return Err(Error::Closed);
            }
            self.bg_cv.notify_all();
            self.done_cv.wait_for(&mut bg, Duration::from_millis(10));
        }
        let n = start.elapsed().as_nanos() as u64;
        self.c.stall_nanos.fetch_add(n, Ordering::Relaxed);
        self.c.max_stall_nanos.fetch_max(n, Ordering::Relaxed);
        Ok(())
    }

    /// Group commit: writers register the SQN they need and wait; the syncer thread fdatasyncs
    /// everything appended so far and wakes all writers it covered. While one fdatasync runs, the
    /// next group gathers.
    fn wait_durable(&self, sqn: Sqn) -> Result<()> {
        let mut s = self.sync.lock();
        loop {
            if s.synced >= sqn {
                return Ok(());
            }
            if let Some(e) = &s.failed {
                return Err(Error::Poisoned(format!("journal fdatasync failed: {e}")));
            }
            if s.shutdown {
                return Err(Error::Closed);
            }
            if s.requested < sqn {
                s.requested = sqn;
                self.syncer_cv.notify_one();
            }
            self.sync_cv.wait(&mut s);
        }
    }

    fn syncer(self: Arc<Self>) {
        let mut s = self.sync.lock();
        loop {
            while s.requested <= s.synced && !s.shutdown {
                self.syncer_cv.wait(&mut s);
            }
            if s.shutdown {
                return;
            }
            drop(s);
            // A failure poisons the store inside `sync_active_journal`.
            let r = self.sync_active_journal();
            s = self.sync.lock();
            if let Ok(target) = r {
                s.synced = s.synced.max(target);
            }
            self.sync_cv.notify_all();
            if s.failed.is_some() {
                return;
            }
        }
    }

    /// The AAE segment of (bucket, key) and what XORing the old object's leaf hash out and the new
    /// one in changes there. Caller holds the write lock, so the ledger's current value is the one
    /// this write replaces; the caller applies it once the write is in.
    fn aae_delta(
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
        let segments = self.aae.as_ref().map_or(1, |a| a.lock().segments());
        Ok((aae::segment_of(bucket, key, segments), delta))
    }

    /// Install the AAE tree saved by the last clean close if it matches the recovered store (its
    /// SQN is the store's last), else start rebuilding it in the background while the store
    /// serves; `aae_tree` answers `Busy` until then. Either way open never folds the ledger, so
    /// its time does not grow with the data, and a damaged SST block cannot fail it. The file is
    /// removed before any write: a later crash must not find a tree that misses writes.
    fn load_aae_tree(self: &Arc<Self>, last_sqn: Sqn) -> Result<Option<JoinHandle<()>>> {
        let Some(aae) = &self.aae else {
            return Ok(None);
        };
        let path = self.dir.join(aae::TREE_FILE);
        let saved = match self.disk.read(&path) {
            Ok(buf) => {
                match AaeState::decode(&buf, self.cfg.aae_segments, self.cfg.aae_branch_width) {
                    Ok((sqn, st)) if sqn == last_sqn => Some(st),
                    Ok((sqn, _)) => {
                        log::info!("AAE tree file is for SQN {sqn}, the store is at {last_sqn}: rebuilding");
                        None
                    }
                    Err(e) => {
                        log::warn!("{}: {e}; rebuilding the AAE tree", path.display());
                        None
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(Error::Io {
                    context: format!("reading {}", path.display()),
                    source: e,
                })
            }
        };
        if self.disk.exists(&path) {
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
    fn save_aae_tree(&self) {
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
    fn rebuild_aae(&self, journal_check: bool) -> Result<Duration> {
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
            a.rebuild_delta = Some(vec![0; a.segments() as usize]);
            (self.view_locked(), a.segments(), a.branch_width)
        };
        let built = (|| -> Result<Vec<u32>> {
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
            let mut leaves = vec![0u32; segments as usize];
            for (n, h) in s.fold_heads(&opts)?.enumerate() {
                if n % 4096 == 0 && self.closed.load(Ordering::Acquire) {
                    return Err(Error::Closed);
                }
                let h = h?;
                leaves[aae::segment_of(&h.bucket, &h.key, segments) as usize] ^=
                    aae::leaf_hash(&h.bucket, &h.key, &h.head.metadata);
            }
            Ok(leaves)
        })();
        let _w = self.write.lock();
        let mut a = aae.lock();
        let delta = a.rebuild_delta.take().unwrap_or_default();
        let mut leaves = built?;
        for (l, d) in leaves.iter_mut().zip(delta) {
            *l ^= d;
        }
        a.leaves = leaves;
        a.branch_width = width;
        a.unavailable = None;
        let took = start.elapsed();
        self.c.aae_rebuilds.fetch_add(1, Ordering::Relaxed);
        self.c
            .aae_rebuild_nanos
            .store(took.as_nanos() as u64, Ordering::Relaxed);
        Ok(took)
    }

    fn snapshot(&self, kind: SnapshotKind) -> Result<Snapshot> {
        self.check_open()?;
        let lifetime = match kind {
            SnapshotKind::Query => self.cfg.snapshot_query_lifetime,
            SnapshotKind::Fold => self.cfg.snapshot_fold_lifetime,
        };
        let view = self.view();
        let fence = view.fence;
        let inner = SnapInner::new(view, lifetime);
        let mut reg = self.snapshots.lock();
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(&inner));
        Ok(Snapshot {
            inner,
            journal: self.journal.clone(),
            fence,
        })
    }

    /// Release the files of expired snapshots.
    fn reap_snapshots(&self) -> usize {
        let mut reg = self.snapshots.lock();
        reg.retain(|w| w.upgrade().is_some_and(|s| !s.reap()));
        reg.len()
    }

    fn lookup(&self, lk: &[u8]) -> Result<Option<LedgerValue>> {
        // Memtables before the version: a flush publishes its table before it retires the memtable.
        let (active, frozen) = {
            let m = self.mem.read();
            (m.active.clone(), m.immutables.clone())
        };
        if let Some(v) = active.get(lk, u64::MAX) {
            return Ok(Some(v));
        }
        for m in frozen.iter().rev() {
            if let Some(v) = m.get(lk, u64::MAX) {
                return Ok(Some(v));
            }
        }
        let version = self.version.read().clone();
        version.get(lk)
    }

    /// A consistent view at the current SQN. Taken under the write lock so the fence matches the
    /// memtables' contents.
    pub(crate) fn view(&self) -> View {
        let _w = self.write.lock();
        self.view_locked()
    }

    /// `view` for a caller that holds the write lock.
    fn view_locked(&self) -> View {
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

    /// Write a new manifest generation describing the current state; `obsolete` tables were just
    /// dropped from the version.
    fn write_manifest(&self, obsolete: Vec<Arc<Table>>) -> Result<()> {
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

    fn worker(self: Arc<Self>) {
        loop {
            self.reap_snapshots();
            let (shutdown, abandon) = {
                let bg = self.bg.lock();
                (bg.shutdown, bg.abandon)
            };
            let step = if abandon {
                break;
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
                    self.done_cv.notify_all();
                }
                Ok(false) => {
                    self.done_cv.notify_all();
                    if !bg.shutdown {
                        self.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
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
        let _bg = self.bg.lock();
        self.done_cv.notify_all();
    }

    fn new_file_id(&self) -> u64 {
        self.next_file_id.fetch_add(1, Ordering::AcqRel)
    }

    /// Flush the oldest frozen memtable to an L0 table.
    fn flush_one(&self) -> Result<bool> {
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

    /// A journal fdatasync or segment roll failed. The kernel may have dropped the dirty pages, and
    /// a later fdatasync of the same file can succeed without them (fsyncgate), so nothing appended
    /// since the last good sync can ever be called durable: the store is poisoned. Every later call
    /// gets `Error::Poisoned`; a reopen recovers from what the disk really holds.
    fn poison_journal(&self, what: String) -> Error {
        log::error!("{what}; the store refuses writes until reopened");
        {
            let mut s = self.sync.lock();
            s.failed.get_or_insert_with(|| what.clone());
            self.sync_cv.notify_all();
        }
        self.bg.lock().error.get_or_insert_with(|| what.clone());
        Error::Poisoned(what)
    }

    /// Make every journal record up to `sqn` durable: nothing to do when a group commit, the
    /// background syncer or a roll already covered it; otherwise one fdatasync of the active
    /// segment (closed segments were synced when they rolled).
    fn journal_durable_through(&self, sqn: Sqn) -> Result<()> {
        {
            let s = self.sync.lock();
            if let Some(f) = &s.failed {
                return Err(Error::Poisoned(f.clone()));
            }
            if s.synced >= sqn {
                return Ok(());
            }
        }
        // Records up to `sqn` were appended before their memtable was frozen: sqn <= last_sqn.
        let target = self.sync_active_journal()?;
        let mut s = self.sync.lock();
        s.synced = s.synced.max(target);
        self.sync_cv.notify_all();
        Ok(())
    }

    /// fdatasync the active segment and return the SQN it made durable. Needs no write lock:
    /// every record up to `last_sqn` (read first) was appended before that store, so it is in a
    /// closed segment (synced by its roll) or in the file active when we look next.
    fn sync_active_journal(&self) -> Result<Sqn> {
        let _gate = self.journal_sync_gate.lock();
        if let Some(f) = &self.sync.lock().failed {
            return Err(Error::Poisoned(f.clone()));
        }
        let target = self.last_sqn.load(Ordering::Acquire);
        let file = self.active_journal.lock().clone();
        let t = Instant::now();
        if let Err(e) = JournalWriter::sync(&*file) {
            return Err(self.poison_journal(format!("journal fdatasync failed: {e}")));
        }
        self.c
            .fsync_nanos
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.c.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(target)
    }

    /// Run one merge if `pick_merge` finds one.
    fn merge_once(&self) -> Result<bool> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_of_a_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path(), Config::small_for_tests()).unwrap();
        match Store::open(d.path(), Config::small_for_tests()) {
            Err(Error::Locked { .. }) => {}
            other => panic!("expected Locked, got {other:?}"),
        }
        s.close().unwrap();
        let again = Store::open(d.path(), Config::small_for_tests()).unwrap();
        again.close().unwrap();
    }
}
