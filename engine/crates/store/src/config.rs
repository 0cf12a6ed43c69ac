//! Store configuration. Defaults suit a production node; tests shrink the sizes to exercise rolls,
//! flushes and merges quickly.

use crate::error::{Error, Result};

/// When a write becomes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// The OS decides when journal pages reach the disk. A process crash loses nothing that was
    /// acknowledged (the data is in the page cache); a machine crash may lose recent writes.
    #[default]
    None,
    /// A write returns only after its journal record is on disk (fdatasync). Concurrent writers
    /// share one fdatasync per commit group.
    Sync,
}

impl std::str::FromStr for SyncMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" | "off" => Ok(SyncMode::None),
            "sync" | "on" => Ok(SyncMode::Sync),
            other => Err(Error::InvalidConfig(format!(
                "sync_on_write must be `none` or `sync`, not `{other}`"
            ))),
        }
    }
}

/// Store settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub sync_on_write: SyncMode,
    /// A journal segment rolls when it reaches this size.
    pub journal_segment_bytes: u64,
    /// ... or this many records.
    pub journal_segment_records: u64,
    /// How many segment files journal compaction replaced are kept as spares, for the next rolls
    /// to write over instead of starting new files (0: removed at once; at most 16; default 2).
    /// Only files of at least half `journal_segment_bytes` are kept. In `sync` mode this is
    /// worth having: the fdatasync of a write into an old file's blocks commits nothing in the
    /// filesystem's own journal (docs/benchmarks.md, "Reused segments"). Each spare holds its
    /// disk space until a roll takes it; spares are removed when the store closes (and any a
    /// crash left, when it opens). Recovery takes damage in a reused segment's tail that no
    /// later record knew synced for lost writeback (docs/engine.md, "Reused segments"); 0 keeps
    /// the stricter check of new files.
    pub journal_spare_segments: usize,
    /// With `sync_on_write = none`, ask the background syncer to fdatasync the active segment each
    /// time this many bytes have been appended since the last request (0: never); writers do not
    /// wait for it. Keeps the dirty tail short, so the fdatasync a segment roll does under the
    /// write lock is short (measured at 8 KB values: longest roll 2.4 s without, 0.04-0.11 s with
    /// 8 MiB), and bounds what an OS crash can lose. Ignored in `sync` mode.
    pub journal_bytes_per_sync: u64,
    /// The ledger memtable is flushed to an SST when it holds this many bytes.
    pub memtable_bytes: usize,
    /// ... or when this many journal bytes were written since it started (values are not in the
    /// memtable, so without this a memtable of small entries could stand for gigabytes of journal
    /// that recovery would have to replay after a crash).
    pub max_unflushed_journal_bytes: u64,
    /// Target size of a ledger SST file.
    pub sst_target_bytes: u64,
    /// Target size of an SST data block.
    pub sst_block_bytes: usize,
    /// Bloom filter bits per key.
    pub bloom_bits_per_key: u32,
    /// L0 files that trigger a merge into L1.
    pub l0_merge_trigger: usize,
    /// L0 files at which writers wait for merges.
    pub l0_stall_files: usize,
    /// Memtables waiting to be flushed at which writers wait.
    pub max_immutable_memtables: usize,
    /// Size target of L1; each deeper level is `level_multiplier` times larger.
    pub level_base_bytes: u64,
    pub level_multiplier: u64,
    /// Largest accepted value.
    pub max_value_bytes: usize,
    /// Largest accepted user metadata (version vectors live here).
    pub max_metadata_bytes: usize,
    /// Lifetime of snapshots taken for index queries.
    pub snapshot_query_lifetime: std::time::Duration,
    /// Lifetime of snapshots taken for folds (AAE rebuilds, handoff, object folds).
    pub snapshot_fold_lifetime: std::time::Duration,
    /// AAE tree segments (leaves); 0 disables the tree. Default 1,048,576 (4 MiB of memory).
    pub aae_segments: u32,
    /// AAE leaves per branch.
    pub aae_branch_width: u32,
    /// Percent of the time an AAE tree rebuild works (1–100; 100: unpaced, a core's worth of CPU
    /// while it runs): it folds the ledger in batches and waits between them (`pacing`).
    /// Default 10: a rebuild takes about ten times as long as unpaced and a tenth of a core.
    pub aae_rebuild_busy_percent: u32,
    /// Journal compaction run choice.
    pub compaction: crate::compaction::CompactionThresholds,
    /// Records sampled per segment to score its live fraction.
    pub compaction_sample_records: usize,
    /// Read+write budget of a compaction run (bytes per second); `None`: unthrottled.
    pub compaction_bytes_per_sec: Option<u64>,
    /// Percent of the time a compaction run works (1–100; default 100: unpaced). Below 100 a run
    /// waits between batches of records, leaving the CPU to requests, and reclaims space that
    /// much more slowly.
    pub compaction_busy_percent: u32,
    /// The nice value (0–19) of the thread a journal compaction runs on: a compaction gets a
    /// core only when requests leave it free. Default 10; 0 runs it on the caller's thread at
    /// the caller's priority.
    pub compaction_nice: i32,
    /// Scheduled compaction: allowed UTC hours `[start, end)` (may wrap midnight; equal = all day).
    pub compaction_window: (u32, u32),
    /// Scheduled compaction runs per day; 0 disables the scheduler (explicit `compact_journal` only).
    pub compaction_runs_per_day: u32,
    /// How values are compressed in the journal (default none). Journal compaction also
    /// compresses the raw records it rewrites while a method is set.
    pub compression_method: crate::Compression,
    /// When: as a write arrives (default), or only when journal compaction rewrites it.
    pub compression_point: crate::CompressionPoint,
    /// How long the ledger worker and the syncer wait without work before their threads exit
    /// (the next request starts them again). Default 10 s; tests shorten it.
    pub idle_thread_exit: std::time::Duration,
}

/// Longest accepted key.
pub const MAX_KEY_BYTES: usize = 64 * 1024;
/// Longest accepted bucket name.
pub const MAX_BUCKET_BYTES: usize = 255;
/// Number of ledger levels (L0..L6).
pub const NUM_LEVELS: usize = 7;
/// Default `Config::compaction_nice` (measured: docs/benchmarks.md, "Compaction at a lower CPU
/// priority").
pub const DEFAULT_COMPACTION_NICE: i32 = 10;

impl Default for Config {
    fn default() -> Self {
        Config {
            sync_on_write: SyncMode::None,
            journal_segment_bytes: 256 << 20,
            journal_segment_records: 200_000,
            journal_spare_segments: 2,
            journal_bytes_per_sync: 8 << 20,
            memtable_bytes: 16 << 20,
            max_unflushed_journal_bytes: 256 << 20,
            sst_target_bytes: 8 << 20,
            sst_block_bytes: 4096,
            bloom_bits_per_key: 10,
            l0_merge_trigger: 4,
            l0_stall_files: 16,
            max_immutable_memtables: 2,
            level_base_bytes: 64 << 20,
            level_multiplier: 10,
            max_value_bytes: 50 << 20,
            max_metadata_bytes: 1 << 20,
            snapshot_query_lifetime: std::time::Duration::from_secs(30 * 60),
            snapshot_fold_lifetime: std::time::Duration::from_secs(24 * 3600),
            aae_segments: crate::aae::DEFAULT_SEGMENTS,
            aae_branch_width: crate::aae::DEFAULT_BRANCH_WIDTH,
            aae_rebuild_busy_percent: 10,
            compaction: crate::compaction::CompactionThresholds::default(),
            compaction_sample_records: 192,
            compaction_bytes_per_sec: None,
            compaction_busy_percent: 100,
            compaction_nice: DEFAULT_COMPACTION_NICE,
            compaction_window: (0, 0),
            compaction_runs_per_day: 0,
            compression_method: crate::Compression::None,
            compression_point: crate::CompressionPoint::OnReceipt,
            idle_thread_exit: std::time::Duration::from_secs(10),
        }
    }
}

impl Config {
    /// Small sizes that make tests roll segments, flush and merge often.
    pub fn small_for_tests() -> Self {
        Config {
            journal_segment_bytes: 256 << 10,
            journal_segment_records: 500,
            memtable_bytes: 32 << 10,
            sst_target_bytes: 16 << 10,
            sst_block_bytes: 1024,
            level_base_bytes: 64 << 10,
            level_multiplier: 4,
            l0_stall_files: 8,
            aae_segments: 4096,
            aae_branch_width: 64,
            ..Config::default()
        }
    }

    /// Check every setting is in range (`Store::open` does this too).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidConfig(m.to_string()));
        if self.journal_segment_bytes < 4096 {
            return bad("journal_segment_bytes must be at least 4096");
        }
        if self.journal_segment_records == 0 {
            return bad("journal_segment_records must be at least 1");
        }
        if self.journal_spare_segments > 16 {
            return bad("journal_spare_segments must be at most 16");
        }
        if self.max_unflushed_journal_bytes < 4096 {
            return bad("max_unflushed_journal_bytes must be at least 4096");
        }
        if self.memtable_bytes < 1024 {
            return bad("memtable_bytes must be at least 1024");
        }
        if self.sst_block_bytes < 256 || self.sst_target_bytes < self.sst_block_bytes as u64 {
            return bad("sst_block_bytes must be >= 256 and <= sst_target_bytes");
        }
        if self.l0_merge_trigger == 0 || self.l0_stall_files <= self.l0_merge_trigger {
            return bad("l0_stall_files must be greater than l0_merge_trigger (>= 1)");
        }
        if self.max_immutable_memtables == 0 {
            return bad("max_immutable_memtables must be at least 1");
        }
        if self.level_multiplier < 2 {
            return bad("level_multiplier must be at least 2");
        }
        if self.aae_segments > 0
            && (self.aae_branch_width == 0
                || !self.aae_segments.is_multiple_of(self.aae_branch_width))
        {
            return bad("aae_segments must be a multiple of aae_branch_width (>= 1)");
        }
        if !(1..=100).contains(&self.compaction_busy_percent) {
            return bad("compaction_busy_percent must be 1 to 100");
        }
        if !(0..=19).contains(&self.compaction_nice) {
            return bad("compaction_nice must be 0 to 19");
        }
        if !(1..=100).contains(&self.aae_rebuild_busy_percent) {
            return bad("aae_rebuild_busy_percent must be 1 to 100");
        }
        let c = &self.compaction;
        if !(0.0..=100.0).contains(&c.single_file)
            || !(0.0..=100.0).contains(&c.run)
            || c.single_file > c.run
        {
            return bad("compaction thresholds must satisfy 0 <= single_file <= run <= 100");
        }
        if c.max_run == 0 || self.compaction_sample_records == 0 {
            return bad("compaction max_run and sample records must be at least 1");
        }
        if self.compaction_window.0 > 23 || self.compaction_window.1 > 23 {
            return bad("compaction_window hours must be 0-23");
        }
        if self.max_value_bytes > (1 << 30) {
            return bad("max_value_bytes must be at most 1 GiB");
        }
        Ok(())
    }
}
