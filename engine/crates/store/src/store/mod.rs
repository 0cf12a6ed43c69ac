//! `Store`: the public API, a thin layer over the concerns in this folder, and the state they share
//! (`Inner`):
//! - `recovery`: open — manifest, tables, journal segments, replay, the checks that nothing
//!   acknowledged is silently missing;
//! - `write_path`: journal append, memtable apply, group commit, stalls, the poisoning rule;
//! - `ledger_worker`: memtable flushes, level merges, manifest version edits;
//! - `journal_compaction`: scoring, rewriting and swapping journal segments, the scheduler;
//! - `aae_upkeep`: the per-write tree delta, the saved tree, background rebuilds;
//! - `snapshots`: consistent views and the release of expired ones;
//! - `shutdown`: close and the crash stand-in; `stats`: counters.
//!
//! Lock order: `crate::lock_order::Rank` lists the locks of `Inner` in order; a thread holding one
//! takes only locks further down that list (compaction_lock, snapshots, write, rolled,
//! journal_sync_gate, journal_files, aae, manifest, journal_dir_due, bg, mem, version, sync). The store's tests check every
//! acquisition against it (feature `lock-order-check`), so this comment cannot drift from the code.

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
use crate::journal::{Journal, JournalWriter, RolledTail};
use crate::keys::{self, IndexChange, IndexOp};
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::{sst_path, Table, TableBuilder};
use crate::ledger::value::LedgerValue;
use crate::ledger::{merge_backlog, pick_merge, run_merge, Version};
use crate::lock_order::{Rank, Ranked};
use crate::manifest::{self, Manifest, SegmentEntry, KEEP};
use crate::snapshot::{
    FoldedHead, HeadFoldOptions, IndexPage, IndexQuery, SnapInner, Snapshot, SnapshotKind,
};
use crate::storage::{Disk, LockGuard, RealStorage, StorageFile};
use crate::view::View;

mod aae_upkeep;
mod journal_compaction;
mod ledger_worker;
mod recovery;
mod shutdown;
mod snapshots;
mod stats;
mod write_path;

use stats::Counters;
pub use stats::{journal_fsync_quantile_bound, Stats, JOURNAL_FSYNC_BUCKETS};
use write_path::{apply, Applied};

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
    /// Runs compacted (a call goes on while a run among the segments it began with is worth it).
    pub runs: u32,
    pub seconds: f64,
    /// Of `seconds`, the time the run waited for its pace (`compaction_busy_percent`,
    /// `compaction_bytes_per_sec`).
    pub paced_seconds: f64,
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
    /// Bytes appended since the last background-sync request (`journal_bytes_per_sync`).
    unsynced_bytes: u64,
    /// Journal bytes appended since the active memtable was last frozen: a cap on it bounds what
    /// recovery replays after a crash (`Config::max_unflushed_journal_bytes`).
    unflushed_journal_bytes: u64,
    /// The records of a group, back to back, for its one journal write.
    group_buf: Vec<u8>,
}

/// A segment a roll replaced, with the last SQN it holds, until it is closed.
type RolledSegment = (Arc<Segment>, Sqn);

/// What a sync of the journal must cover, as the last roll left it.
struct JournalFiles {
    active: Arc<dyn StorageFile>,
    /// Files of segments rolls replaced whose tails are not yet synced, oldest first. Every sync
    /// of the active file syncs these first (`Inner::sync_rolled`), so nothing in a newer segment
    /// is called durable while an older one's tail may still be lost.
    unsynced: Vec<RolledTail>,
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
    /// A syncer thread is running (or starting). It is started by the first request after it
    /// stopped and stops once nothing was requested for `Config::idle_thread_exit`; both change this
    /// under the `sync` lock, so a request either finds the syncer running (and wakes it) or
    /// starts one.
    syncer_running: bool,
    /// Tests only: the syncer does no work while set, so a test can hold a synced writer
    /// waiting and see what else wakes it.
    #[cfg(test)]
    syncer_paused: bool,
}

impl SyncState {
    /// Whether the syncer has nothing to do (or, in tests, is told to do nothing).
    fn syncer_idle(&self) -> bool {
        #[cfg(test)]
        if self.syncer_paused {
            return true;
        }
        self.requested <= self.synced
    }
}

struct Bg {
    /// A merge met a damaged table: merges stop (flushes go on) until a reopen.
    merge_blocked: Option<String>,
    shutdown: bool,
    /// Stop at once without flushing (simulated crash).
    abandon: bool,
    error: Option<String>,
    cursors: Vec<Vec<u8>>,
    /// The ledger worker is running (or starting). Like the syncer it is started on demand
    /// (`Inner::wake_worker`) and exits after `Config::idle_thread_exit` with nothing to do; both
    /// change this under the `bg` lock.
    worker_running: bool,
    /// Counts the wake-ups asked for: a worker that sees it move since it last looked for work
    /// looks again instead of exiting, so no frozen memtable or new snapshot waits for a worker
    /// that decided to stop.
    wakes: u64,
}

struct Inner {
    /// This store's own `Arc`, for the threads it starts on demand.
    me: std::sync::Weak<Inner>,
    /// The running (or last) syncer thread, joined at close.
    syncer_thread: Mutex<Option<JoinHandle<()>>>,
    /// The running (or last) ledger worker thread, joined at close.
    worker_thread: Mutex<Option<JoinHandle<()>>>,
    disk: Disk,
    dir: PathBuf,
    ledger_dir: PathBuf,
    cfg: Config,
    journal: Arc<Journal>,
    write: Ranked<Mutex<WriteState>>,
    /// The files a sync of the journal covers: the active segment's, replaced on a roll, and the
    /// files of segments rolls replaced whose tails are not yet synced. The syncer and the flush
    /// worker sync them without the write lock, so they never wait behind writers (or behind
    /// close, which holds that lock while it joins the worker), and a roll swaps them without
    /// waiting for a sync.
    journal_files: Ranked<Mutex<JournalFiles>>,
    /// Held across every fdatasync of the journal (group commit, background sync, flush, closing
    /// a rolled-out segment, close) together with its poisoning decision, so no sync can succeed
    /// over bytes an earlier failed sync dropped before the store is marked poisoned.
    journal_sync_gate: Ranked<Mutex<()>>,
    /// Segments rolls replaced, oldest first, with the last SQN each holds, for the ledger worker
    /// (or `close`) to close: sync, write the index, mark closed, write the manifest.
    rolled: Ranked<Mutex<Vec<RolledSegment>>>,
    /// The journal directory holds an entry (a rolled-in segment's) whose durability no
    /// directory sync has covered yet. Synced before anything in that segment is called durable
    /// and before a manifest that could list it is written.
    journal_dir_due: Ranked<Mutex<bool>>,
    aae: Option<Ranked<Mutex<AaeState>>>,
    compaction_lock: Ranked<Mutex<()>>,
    /// Writes of the same key serialise on its stripe while the AAE tree is kept
    /// (`write_path.rs`); writes of other keys look their old versions up in parallel.
    key_stripes: Vec<Ranked<Mutex<()>>>,
    /// Writers waiting for the journal (`write_path.rs`, group append).
    write_queue: Ranked<Mutex<write_path::WriteQueue>>,
    /// Writers waiting in `write_queue` sleep on it, each on its ticket's lane.
    write_beacon: crate::beacon::Beacon,
    snapshots: Ranked<Mutex<Vec<std::sync::Weak<SnapInner>>>>,
    mem: Ranked<RwLock<MemState>>,
    version: Ranked<RwLock<Arc<Version>>>,
    persisted_sqn: AtomicU64,
    last_sqn: AtomicU64,
    next_file_id: AtomicU64,
    manifest: Ranked<Mutex<ManifestState>>,
    sync: Ranked<Mutex<SyncState>>,
    /// `SyncState::synced`, readable without the lock: a woken writer checks it here.
    synced_sqn: AtomicU64,
    /// Raised whenever `synced`, `failed` or `shutdown` changes: writers waiting for durability
    /// sleep on it (one wake-up for all of them, beacon.rs).
    sync_beacon: crate::beacon::Beacon,
    syncer_cv: Condvar,
    bg: Ranked<Mutex<Bg>>,
    bg_cv: Condvar,
    done_cv: Condvar,
    closed: AtomicBool,
    c: Counters,
}

/// A value-separated key-value store. Cheap to share: all methods take `&self` and are safe to call
/// from many threads at once.
pub struct Store {
    inner: Arc<Inner>,
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

/// µs since the Unix epoch.
/// A value read from the journal against what the ledger recorded for it. The record's own
/// CRC32C (checked by its decoder) covers the value, and the reader checked that the record is the
/// one asked for (its SQN and key), so the size is compared here and the value is not hashed a
/// second time: a second CRC over every GET's value was the cost, not a second line of defence.
pub(crate) fn check_value(value: &[u8], lv: &LedgerValue) -> Result<()> {
    if value.len() != lv.value_size as usize {
        return Err(Error::Corruption(format!(
            "value of sqn {} is {} bytes where the ledger recorded {}",
            lv.sqn,
            value.len(),
            lv.value_size
        )));
    }
    Ok(())
}

pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

impl Store {
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
        let lk = keys::object_key(bucket, key);
        let found = (|| {
            // The segment list first: a journal compaction that drops the record after the
            // ledger lookup below (because a newer write replaced it) cannot take it from it.
            let segments = i.journal.segments();
            let Some(lv) = i.lookup(&lk)? else {
                return Ok(None);
            };
            if lv.tombstone {
                return Ok(None);
            }
            let rec = i.journal.read_pinned(&segments, lv.sqn, &lk)?;
            check_value(&rec.value, &lv)?;
            Ok(Some(Object {
                sqn: lv.sqn,
                value: rec.value,
                metadata: lv.metadata,
            }))
        })();
        count_read(&i.c.gets);
        found
    }

    /// Metadata of (bucket, key) from the ledger alone; never reads the journal.
    pub fn head(&self, bucket: &[u8], key: &[u8]) -> Result<Option<Head>> {
        let i = &self.inner;
        i.check_open()?;
        keys::validate_bucket(bucket)?;
        keys::validate_key(key)?;
        let lk = keys::object_key(bucket, key);
        let found = i.lookup(&lk);
        count_read(&i.c.heads);
        Ok(found?.filter(|v| !v.tombstone).map(|v| Head {
            sqn: v.sqn,
            value_size: v.value_size,
            value_hash: v.value_hash,
            metadata: v.metadata,
        }))
    }

    /// Flush the ledger memtable to an SST and wait until it is persisted.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_open()?;
        self.inner.flush_and_wait()
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
            i.wake_worker(&mut bg);
            i.done_cv.wait_for(bg.raw(), Duration::from_millis(50));
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
    /// rewrite its live records (original SQNs) into new segments; again, until no run of the
    /// segments that were candidates when the call began is worth it. First makes every closed
    /// segment eligible: a ledger that has not yet persisted their records (a small store whose
    /// memtable never fills) is flushed, and manifest generations are written until every kept
    /// one has persisted them. Never changes the ledger's contents.
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
        let aae = self
            .inner
            .aae
            .as_ref()
            .ok_or_else(|| Error::InvalidConfig("AAE is disabled (aae_segments = 0)".into()))?;
        loop {
            self.inner.check_open()?;
            // The builder's state before the tree's: a builder seen finished has already set the
            // tree's final state.
            let running = self
                .aae_builder
                .lock()
                .as_ref()
                .is_some_and(|h| !h.is_finished());
            match aae.lock().unavailable.clone() {
                None => return Ok(true),
                Some(why) if !running => {
                    return Err(Error::Busy(format!("the AAE tree is unavailable: {why}")))
                }
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// (bucket, key, leaf hash) of every live object in the given AAE segments.
    pub fn aae_keys_in_segments(&self, segments: &[u32]) -> Result<Vec<AaeKeyHash>> {
        let count = self.aae_tree()?.segment_count();
        // A segment beyond the tree is a caller with another tree size: answering "no keys"
        // would make it repair nothing, silently.
        if let Some(bad) = segments.iter().find(|&&s| s >= count) {
            return Err(Error::InvalidQuery(format!(
                "AAE segment {bad} is beyond this tree's {count} segments (0..={}); \
                 segment numbers must come from a tree of the same size",
                count - 1
            )));
        }
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
    /// Start one of the store's on-demand threads (`run` on this store) and keep its handle in
    /// `slot` for close to join; the thread it replaces has returned already. `false` if no
    /// thread could be started.
    fn start_thread(
        &self,
        name: &str,
        run: fn(Arc<Inner>),
        slot: &Mutex<Option<JoinHandle<()>>>,
    ) -> bool {
        let Some(me) = self.me.upgrade() else {
            return false;
        };
        match std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(me))
        {
            Ok(h) => {
                *slot.lock() = Some(h);
                true
            }
            Err(e) => {
                log::error!("starting {name}: {e}");
                false
            }
        }
    }

    /// End a batch of paced background work (a compaction's records, a rebuild's heads) that
    /// took `worked` and moved `bytes`: wait as `pacer` requires, or until the store closes, and
    /// return how long it waited.
    fn pace_batch(
        &self,
        pacer: &mut crate::pacing::Pacer,
        worked: Duration,
        bytes: u64,
    ) -> Duration {
        let wait = pacer.after_batch(worked, bytes);
        if wait.is_zero() {
            return Duration::ZERO;
        }
        let rested = Instant::now();
        // Close notifies under `bg`, which this holds between its check and its wait.
        let mut bg = self.bg.lock();
        if !self.closed.load(Ordering::Acquire) {
            self.bg_cv.wait_for(bg.raw(), wait);
        }
        rested.elapsed()
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
}

/// Count a read, unless it is an attempt without waiting that would have waited (it will be
/// made again, and counted then).
fn count_read(counter: &AtomicU64) {
    if !crate::storage::nowait::blocked() {
        counter.fetch_add(1, Ordering::Relaxed);
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

    /// A synced writer waits for the syncer; a later write's segment roll has the old segment
    /// fsynced (by the ledger worker, which closes it) and so makes the waiting record durable
    /// too. Whoever syncs it must wake the writer: the syncer, finding
    /// nothing requested beyond the mark, would not (it hung `fault_regressions` once in CI).
    #[test]
    fn a_roll_that_makes_a_waiting_synced_write_durable_wakes_it() {
        let d = tempfile::tempdir().unwrap();
        let cfg = Config {
            sync_on_write: SyncMode::Sync,
            journal_segment_records: 2,
            ..Config::small_for_tests()
        };
        let s = Arc::new(Store::open(d.path(), cfg).unwrap());
        s.inner.sync.lock().syncer_paused = true;
        let put = |key: &'static [u8]| {
            let s = s.clone();
            std::thread::spawn(move || s.put(b"b", key, b"v", b"", &[]).unwrap())
        };
        // The segment's first record: its writer asks the (paused) syncer and waits.
        let a = put(b"a");
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.inner.sync.lock().requested < 1 {
            assert!(
                Instant::now() < deadline,
                "the first writer never asked for a sync"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // The second record fills the segment: closing it after the roll fsyncs both.
        let b = put(b"b");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !(a.is_finished() && b.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let woken = a.is_finished();
        {
            // Let everything go (a writer left asleep is woken here, so the test ends).
            let mut st = s.inner.sync.lock();
            st.syncer_paused = false;
            s.inner.syncer_cv.notify_all();
            s.inner.sync_beacon.raise();
        }
        let (sqn_a, sqn_b) = (a.join().unwrap(), b.join().unwrap());
        assert!(
            woken,
            "the writer of sqn {sqn_a} slept on although the roll after sqn {sqn_b} made it durable"
        );
        assert!(s.stats().journal_synced_sqn >= sqn_b);
        s.close().unwrap();
    }
}
