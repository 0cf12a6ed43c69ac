//! Journal compaction: score closed segments, rewrite a chosen run's live records (original
//! SQNs) into new segments, swap them in; and the daily scheduler. While a compression method
//! is set, a live record stored raw is compressed as it is rewritten (value_codec.rs).

use super::*;
use crate::pacing::{Pace, Pacer, STORE_BURST};
use crate::value_codec::{self, ValueCodec};
use std::collections::HashMap;

/// Bytes a compaction output gathers before one write. Record-sized writes to a new file cost the
/// kernel as much again in zeroing the unwritten rest of each fresh page cache folio as in copying
/// the data (a profile of the compaction thread: 31 % copying, 30 % zeroing); whole-span writes
/// leave only the last partial page to zero.
const OUTPUT_SPAN: usize = 1 << 20;
/// A compaction consults its pace after this many records visited or bytes moved, whichever
/// comes first (a few milliseconds of work).
const PACE_BATCH_RECORDS: u32 = 256;
const PACE_BATCH_BYTES: u64 = 4 << 20;

/// A compaction output segment written in `OUTPUT_SPAN` pieces. The segment is invisible to
/// readers until the compaction swaps it in, after `finish`, so records waiting in the buffer are
/// never looked for.
struct Output {
    w: JournalWriter,
    /// Bytes gathered before a write: `OUTPUT_SPAN`, or a quarter of a segment when segments are
    /// small (tests), so an output is still written in several pieces.
    span: usize,
    buf: Vec<u8>,
    records: Vec<(Sqn, u32)>,
    /// Bytes of the file already synced.
    synced_at: u64,
}

impl Output {
    fn new(w: JournalWriter, segment_bytes: u64) -> Output {
        let span = OUTPUT_SPAN.min((segment_bytes / 4).max(1) as usize);
        Output {
            w,
            span,
            buf: Vec::with_capacity(span + (64 << 10)),
            records: Vec::new(),
            synced_at: 0,
        }
    }

    /// Bytes in the segment, written or buffered.
    fn size(&self) -> u64 {
        self.w.size + self.buf.len() as u64
    }

    fn full(&self, max_bytes: u64, max_records: u64) -> bool {
        self.size() >= max_bytes || self.w.records + self.records.len() as u64 >= max_records
    }

    fn append(&mut self, sqn: Sqn, rec: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(rec);
        self.records.push((sqn, rec.len() as u32));
        if self.buf.len() >= self.span {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> Result<()> {
        if !self.records.is_empty() {
            self.w.append_many(&self.records, &self.buf)?;
            self.buf.clear();
            self.records.clear();
        }
        Ok(())
    }

    /// Write the output back once `bytes_per_sync` more of it is written, as the syncer does for
    /// the active segment: one fdatasync of a whole output at its end kept the disk busy for
    /// seconds, and synced writes queued behind it.
    fn sync_every(&mut self, bytes_per_sync: u64) -> Result<()> {
        if self.w.size - self.synced_at >= bytes_per_sync.max(1) {
            JournalWriter::sync(&*self.w.file)?;
            self.synced_at = self.w.size;
        }
        Ok(())
    }

    /// Write out the rest, sync, and close the segment (its index written).
    fn finish(mut self, dir: &Path) -> Result<()> {
        self.write_out()?;
        JournalWriter::sync(&*self.w.file)?;
        self.w.seg.close(dir)
    }
}

impl Inner {
    /// With a compression method set, re-encode a raw put record `rec` with its value compressed
    /// into `out` (same SQN, same ledger data: the ledger keeps the original value's length and
    /// CRC). Returns false — `out` unused — when the record stays as it is.
    fn recompressed(
        &self,
        rec: &RecordView<'_>,
        packed: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let method = self.cfg.compression_method;
        if method == crate::Compression::None
            || rec.codec != ValueCodec::Raw
            || rec.kind != Kind::Put
        {
            return Ok(false);
        }
        let codec = value_codec::compress(method, rec.value, packed);
        if codec == ValueCodec::Raw {
            return Ok(false);
        }
        record::encode_unsequenced(
            out,
            rec.kind,
            rec.timestamp,
            rec.ledger_key,
            rec.metadata,
            &rec.changes,
            packed,
            codec,
        );
        // No synced SQN: a compaction output is closed and listed, and recovery reads it only
        // for records it already holds (`lost_writeback_at` is for the active segment).
        record::seal(out, rec.sqn, 0);
        Ok(true)
    }

    /// No journal record at or below this SQN is needed by any recovery path: every manifest
    /// generation a later open might use has persisted it in the ledger.
    pub(super) fn protected_sqn(&self) -> Sqn {
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
    ///
    /// `durable`: the journal's synced SQN, read by the caller before the records it checks
    /// (it only grows, so an older value keeps more records, never fewer).
    pub(super) fn record_is_live(
        &self,
        sqn: Sqn,
        ledger_key: &[u8],
        protected: Sqn,
        durable: Sqn,
    ) -> Result<bool> {
        if sqn > protected {
            return Ok(true);
        }
        Ok(self
            .lookup(ledger_key)?
            .is_some_and(|v| v.sqn == sqn || v.sqn > durable))
    }

    /// The journal's synced SQN now (see `record_is_live`).
    fn durable_sqn(&self) -> Sqn {
        self.synced_sqn.load(Ordering::Acquire)
    }

    /// Percentage of a segment's bytes still live, from a contiguous sample of its records.
    pub(super) fn score_segment(&self, seg: &Segment, protected: Sqn, seed: u64) -> Result<f64> {
        let entries = seg.entries()?;
        if entries.is_empty() {
            return Ok(100.0);
        }
        let n = self.cfg.compaction_sample_records.min(entries.len());
        let start = (seed as usize) % (entries.len() - n + 1);
        let (mut live, mut total) = (0u64, 0u64);
        let sample = &entries[start..start + n];
        let mut reader = segment::SpanReader::new(seg, sample);
        let durable = self.durable_sqn();
        for e in sample {
            let rec = record::decode(reader.record(*e)?)?;
            total += e.len as u64;
            if self.record_is_live(rec.sqn, rec.ledger_key, protected, durable)? {
                live += e.len as u64;
            }
        }
        Ok(live as f64 * 100.0 / total.max(1) as f64)
    }

    pub(super) fn compact_journal(&self) -> Result<CompactionReport> {
        let Some(_running) = self.compaction_lock.try_lock() else {
            return Err(Error::Busy(
                "a journal compaction is already running".into(),
            ));
        };
        self.c.compaction_active.store(1, Ordering::Relaxed);
        let result =
            crate::priority::run_at_nice("levee-compaction", self.cfg.compaction_nice, || {
                self.compact_journal_locked()
            });
        // The replaced segments nobody else holds are queued for removal by now: wait for it.
        crate::reaper::barrier();
        self.c.compaction_active.store(0, Ordering::Relaxed);
        result
    }

    /// Make every closed journal segment eligible for compaction. Records above the protected
    /// floor stay (recovery may replay them), so a store whose ledger memtable has not flushed
    /// since they were written — a few keys, each overwritten many times, never fill it — could
    /// never reclaim anything. Flush the memtable if it holds records of a closed segment, then
    /// write manifest generations (same contents) until the oldest kept one has persisted them
    /// too; the floor is that oldest generation's (see `protected_sqn`). Segments rolls replaced
    /// are closed first, here if the ledger worker has not yet done it.
    pub(super) fn checkpoint_closed_segments(&self) -> Result<()> {
        self.finish_rolls()?;
        let Some(want) = self
            .journal
            .segments()
            .iter()
            .take_while(|s| s.is_closed())
            .filter_map(|s| s.last_sqn())
            .max()
        else {
            return Ok(());
        };
        if self.protected_sqn() >= want {
            return Ok(());
        }
        if self.persisted_sqn.load(Ordering::Acquire) < want {
            self.flush_and_wait()?;
        }
        for _ in 0..KEEP {
            if self.protected_sqn() >= want {
                break;
            }
            self.write_manifest(Vec::new())?;
        }
        Ok(())
    }

    /// Compact runs until none of the segments that were candidates when the call began is
    /// worth it: a call catches up with what piled up since the last one instead of doing one
    /// run of at most `max_run` segments (under a write load that fills segments faster than
    /// one run per call frees them, the journal would otherwise grow for ever: a 16 KB update
    /// load grew it by 30 MB/s with a call every 5 s, docs/benchmarks.md). Segments that close
    /// during the call, and the call's own outputs, wait for the next one, so a call ends even
    /// under a write load that never stops.
    pub(super) fn compact_journal_locked(&self) -> Result<CompactionReport> {
        let started = Instant::now();
        self.checkpoint_closed_segments()?;
        let mut first: Option<HashMap<u64, f64>> = None;
        let mut total = CompactionReport::default();
        loop {
            let run = self.compact_one_run(&mut first)?;
            if total.runs == 0 {
                total.scores = run.scores;
            }
            if run.compacted_segments.is_empty() {
                break;
            }
            total.runs += 1;
            total.compacted_segments.extend(run.compacted_segments);
            total.records_kept += run.records_kept;
            total.records_dropped += run.records_dropped;
            total.bytes_before += run.bytes_before;
            total.bytes_after += run.bytes_after;
            total.paced_seconds += run.paced_seconds;
            if self.closed.load(Ordering::Acquire) {
                break;
            }
        }
        total.seconds = started.elapsed().as_secs_f64();
        Ok(total)
    }

    /// One run: score the candidates, choose a run (leveled's rule) and rewrite it. `first`
    /// holds the scores of the call's first run, by segment id: later runs of the call reuse
    /// them (a segment's live share only falls, so an older score keeps more, never less), and
    /// segments it did not score — outputs, segments closed since — score as wholly live (never
    /// worth compacting), which keeps the choice's adjacency as it is on disk. So a call reads
    /// each segment's sample once and rewrites each segment at most once.
    fn compact_one_run(&self, first: &mut Option<HashMap<u64, f64>>) -> Result<CompactionReport> {
        let started = Instant::now();
        let protected = self.protected_sqn();
        let candidates: Vec<Arc<Segment>> = self
            .journal
            .segments()
            .iter()
            .take_while(|s| s.is_closed() && s.last_sqn().is_some_and(|l| l <= protected))
            .cloned()
            .collect();
        let scores = match first {
            Some(known) => candidates
                .iter()
                .map(|s| known.get(&s.id).copied().unwrap_or(100.0))
                .collect(),
            None => {
                let seed = now_micros();
                let scores = candidates
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        self.score_segment(s, protected, seed.wrapping_add(i as u64 * 7919))
                    })
                    .collect::<Result<Vec<f64>>>()?;
                *first = Some(
                    candidates
                        .iter()
                        .map(|s| s.id)
                        .zip(scores.clone())
                        .collect(),
                );
                scores
            }
        };
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
        let mut writer: Option<Output> = None;
        let new_output = || -> Result<JournalWriter> {
            let id = {
                let mut w = self.write.lock();
                w.next_segment_id += 1;
                w.next_segment_id - 1
            };
            let (seg, file) = Segment::create_output(&self.disk, &dir, id)?;
            Ok(JournalWriter::new(seg, file))
        };
        // Paced by bytes moved and by the share of the time it works; both off by default.
        let mut pacer = Pacer::with_burst(
            Pace {
                max_bytes_per_sec: self.cfg.compaction_bytes_per_sec.unwrap_or(0),
                busy_percent: self.cfg.compaction_busy_percent,
            },
            STORE_BURST,
        );
        let (mut batch_started, mut batch_records, mut batch_bytes) = (Instant::now(), 0u32, 0u64);
        let (mut packed, mut rewritten) = (Vec::new(), Vec::new());
        let rewrite = (|| -> Result<()> {
            for seg in run {
                let entries = seg.entries()?;
                let mut reader = segment::SpanReader::new(seg, &entries);
                let mut durable = self.durable_sqn();
                for &e in &entries {
                    if self.closed.load(Ordering::Acquire) {
                        return Err(Error::Closed);
                    }
                    batch_records += 1;
                    if batch_records >= PACE_BATCH_RECORDS || batch_bytes >= PACE_BATCH_BYTES {
                        report.paced_seconds += self
                            .pace_batch(&mut pacer, batch_started.elapsed(), batch_bytes)
                            .as_secs_f64();
                        (batch_started, batch_records, batch_bytes) = (Instant::now(), 0, 0);
                        // Keys rewritten since the run started were replaced by writes that have
                        // become durable since: read the synced SQN again (before the lookups it
                        // guards), or every record whose key was written during the run would be
                        // kept — 40 % of a run's bytes under a hot update load.
                        durable = self.durable_sqn();
                    }
                    let raw = reader.record(e)?;
                    let rec = record::decode(raw).map_err(|err| {
                        Error::Corruption(format!(
                            "compacting {} (sqn {}): {err}",
                            seg.path.display(),
                            e.sqn
                        ))
                    })?;
                    if !self.record_is_live(rec.sqn, rec.ledger_key, protected, durable)? {
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
                            w.finish(&dir)?;
                        }
                        let w = new_output()?;
                        outputs.push(w.seg.clone());
                        writer = Some(Output::new(w, self.cfg.journal_segment_bytes));
                    }
                    let out = self.recompressed(&rec, &mut packed, &mut rewritten)?;
                    let out = if out { &rewritten[..] } else { raw };
                    let w = writer.as_mut().unwrap();
                    w.append(rec.sqn, out)?;
                    w.sync_every(self.cfg.journal_bytes_per_sync)?;
                    self.c
                        .journal_bytes
                        .fetch_add(out.len() as u64, Ordering::Relaxed);
                    report.records_kept += 1;
                    batch_bytes += (raw.len() + out.len()) as u64;
                }
            }
            if let Some(w) = writer.take() {
                w.finish(&dir)?;
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
            s.mark_obsolete(self.journal.spares.as_ref());
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
    pub(super) fn scheduler(self: Arc<Self>) {
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
                        .wait_for(bg.raw(), Duration::from_secs((next - now).min(60)));
                }
            }
            match self.compact_journal() {
                Ok(_) | Err(Error::Busy(_)) | Err(Error::Closed) => {}
                Err(e) => log::error!("scheduled journal compaction failed: {e}"),
            }
        }
    }
}
