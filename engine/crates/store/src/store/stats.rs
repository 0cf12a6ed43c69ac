//! Engine counters and sizes: `Stats` (the node exports them as Prometheus metrics).

use super::*;

/// Upper bounds, in seconds, of the buckets of the journal fdatasync histogram
/// (`Stats::journal_fsync_buckets`); one more bucket takes the syncs above the last bound.
pub const JOURNAL_FSYNC_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5,
];

/// The histogram bucket of a journal fdatasync that took `nanos`: the first whose bound it does
/// not exceed, or the one past the last bound.
pub(super) fn fsync_bucket(nanos: u64) -> usize {
    JOURNAL_FSYNC_BUCKETS
        .iter()
        .position(|&b| nanos as f64 <= b * 1e9)
        .unwrap_or(JOURNAL_FSYNC_BUCKETS.len())
}

/// The bound, in seconds, under which at least a share `q` (0–1) of the journal fdatasyncs
/// counted in `buckets` (as [`Stats::journal_fsync_buckets`]) fell: the upper bound of the
/// bucket that holds the `q`-quantile, infinite when that is the bucket past the last bound.
/// `None` when nothing was counted.
pub fn journal_fsync_quantile_bound(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile (1-based), at least the first sync.
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(
                JOURNAL_FSYNC_BUCKETS
                    .get(i)
                    .copied()
                    .unwrap_or(f64::INFINITY),
            );
        }
    }
    Some(f64::INFINITY)
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
    /// Longest single journal fdatasync: a synced write waits this long behind one.
    pub max_journal_fsync_seconds: f64,
    /// Journal fdatasyncs by duration: how many fell in each bucket of
    /// [`JOURNAL_FSYNC_BUCKETS`] (not cumulative), the last entry those above its last bound.
    pub journal_fsync_buckets: Vec<u64>,
    /// Segment rolls under the write lock (the new file's creation; the old segment's sync and
    /// index follow on the ledger worker).
    pub journal_roll_seconds: f64,
    /// Longest single roll: writers wait this long behind it.
    pub max_journal_roll_seconds: f64,
    pub aae_rebuilds: u64,
    /// Duration of the last AAE rebuild.
    pub aae_rebuild_seconds: f64,
    /// Of that, the time it waited between batches for its pace (`aae_rebuild_busy_percent`).
    pub aae_rebuild_paced_seconds: f64,
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
    /// Replaced segment files kept as spares since open (`Config::journal_spare_segments`), rolls
    /// that wrote a segment over one, and spares ready now.
    pub journal_spares_made: u64,
    pub journal_spares_reused: u64,
    pub journal_spares_ready: u64,
    pub ledger_files_per_level: Vec<u64>,
    /// Damaged SST parts found so far (data blocks failing their checksum; an unreadable index,
    /// bloom or footer counts one). Reads of their keys return `Error::Corruption`.
    pub ledger_damaged_blocks: u64,
    /// 1 when merges stopped because one met a damaged table (nothing is dropped: the table stays
    /// as it is, and writers get an error instead of waiting once level 0 is full).
    pub ledger_merges_blocked: u64,
    /// The store's on-demand threads running now: the ledger worker and the syncer (0 to 2;
    /// both exit after `Config::idle_thread_exit` without work).
    pub background_threads: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) puts: AtomicU64,
    pub(super) deletes: AtomicU64,
    pub(super) gets: AtomicU64,
    pub(super) heads: AtomicU64,
    pub(super) user_bytes: AtomicU64,
    pub(super) journal_bytes: AtomicU64,
    pub(super) ledger_bytes: AtomicU64,
    pub(super) flushes: AtomicU64,
    pub(super) merges: AtomicU64,
    pub(super) stall_nanos: AtomicU64,
    pub(super) max_stall_nanos: AtomicU64,
    pub(super) fsyncs: AtomicU64,
    pub(super) fsync_nanos: AtomicU64,
    pub(super) max_fsync_nanos: AtomicU64,
    pub(super) fsync_buckets: [AtomicU64; JOURNAL_FSYNC_BUCKETS.len() + 1],
    pub(super) roll_nanos: AtomicU64,
    pub(super) max_roll_nanos: AtomicU64,
    pub(super) aae_rebuilds: AtomicU64,
    pub(super) aae_rebuild_nanos: AtomicU64,
    pub(super) aae_rebuild_paced_nanos: AtomicU64,
    pub(super) compaction_runs: AtomicU64,
    pub(super) compaction_reclaimed: AtomicU64,
    pub(super) compaction_active: AtomicU64,
}

impl Store {
    /// Engine counters and sizes.
    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        let version = i.version.read().clone();
        // Each lock on its own statement: temporaries in the struct literal below would all be held
        // to its end, nesting `sync` and `bg` (both leaves, see lock_order::Rank).
        let (journal_synced_sqn, syncer) = {
            let s = i.sync.lock();
            (s.synced, s.syncer_running)
        };
        let (merges_blocked, worker) = {
            let bg = i.bg.lock();
            (bg.merge_blocked.is_some(), bg.worker_running)
        };
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
            max_journal_fsync_seconds: l(&c.max_fsync_nanos) as f64 / 1e9,
            journal_fsync_buckets: c.fsync_buckets.iter().map(l).collect(),
            journal_roll_seconds: l(&c.roll_nanos) as f64 / 1e9,
            max_journal_roll_seconds: l(&c.max_roll_nanos) as f64 / 1e9,
            aae_rebuilds: l(&c.aae_rebuilds),
            aae_rebuild_seconds: l(&c.aae_rebuild_nanos) as f64 / 1e9,
            aae_rebuild_paced_seconds: l(&c.aae_rebuild_paced_nanos) as f64 / 1e9,
            live_snapshots: i.reap_snapshots() as u64,
            journal_compaction_runs: l(&c.compaction_runs),
            journal_compaction_reclaimed_bytes: l(&c.compaction_reclaimed),
            journal_compaction_active: l(&c.compaction_active),
            persisted_sqn: i.persisted_sqn.load(Ordering::Acquire),
            last_sqn: i.last_sqn.load(Ordering::Acquire),
            journal_synced_sqn,
            journal_segments: i.journal.segments().len() as u64,
            journal_spares_made: i.journal.spares.as_ref().map_or(0, |s| l(&s.made)),
            journal_spares_reused: i.journal.spares.as_ref().map_or(0, |s| l(&s.taken)),
            journal_spares_ready: i.journal.spares.as_ref().map_or(0, |s| s.ready() as u64),
            ledger_files_per_level: version.levels.iter().map(|l| l.len() as u64).collect(),
            ledger_damaged_blocks: version
                .levels
                .iter()
                .flatten()
                .map(|t| t.damaged_blocks())
                .sum(),
            ledger_merges_blocked: u64::from(merges_blocked),
            background_threads: u64::from(syncer) + u64::from(worker),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sync_falls_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let last = JOURNAL_FSYNC_BUCKETS.len();
        // (nanos, bucket)
        for (nanos, want) in [
            (0, 0),
            (500_000, 0),
            (500_001, 1),
            (1_000_000, 1),
            (7_000_000, 4),
            (200_000_000, 8),
            (200_000_001, 9),
            (2_500_000_000, last - 1),
            (2_500_000_001, last),
            (u64::MAX, last),
        ] {
            assert_eq!(fsync_bucket(nanos), want, "{nanos} ns");
        }
        assert!(
            JOURNAL_FSYNC_BUCKETS.windows(2).all(|w| w[0] < w[1]),
            "bounds rise"
        );
    }

    #[test]
    fn a_quantile_bound_is_the_bound_of_the_bucket_holding_that_rank() {
        let n = JOURNAL_FSYNC_BUCKETS.len() + 1;
        let with = |pairs: &[(usize, u64)]| {
            let mut b = vec![0u64; n];
            for &(i, c) in pairs {
                b[i] = c;
            }
            b
        };
        // (buckets, q, bound)
        let cases: Vec<(Vec<u64>, f64, Option<f64>)> = vec![
            (with(&[]), 0.99, None),
            (with(&[(2, 1)]), 0.5, Some(0.002)),
            (with(&[(2, 1)]), 0.0, Some(0.002)),
            // 99 fast, 1 slow: p99 is still among the fast ones, the max is not.
            (with(&[(0, 99), (9, 1)]), 0.99, Some(0.0005)),
            (with(&[(0, 99), (9, 1)]), 1.0, Some(0.5)),
            (with(&[(0, 98), (9, 2)]), 0.99, Some(0.5)),
            (with(&[(0, 50), (4, 50)]), 0.5, Some(0.0005)),
            (with(&[(0, 50), (4, 50)]), 0.51, Some(0.01)),
            // Past the last bound: no bound.
            (with(&[(0, 1), (n - 1, 1)]), 0.99, Some(f64::INFINITY)),
        ];
        for (buckets, q, want) in cases {
            assert_eq!(
                journal_fsync_quantile_bound(&buckets, q),
                want,
                "{buckets:?} q {q}"
            );
        }
    }
}
