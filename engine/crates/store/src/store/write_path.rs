//! The write path: journal append under the write lock, memtable apply, group commit (writers
//! wait, the syncer fdatasyncs once for all), write stalls, and the poisoning rule for a failed
//! fdatasync or segment roll.

use super::*;
use crate::value_codec::{self, ValueCodec};

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
    /// The ledger changes of a journal record (recovery); the value's length and CRC are the
    /// original value's, so a compressed one is decompressed (at most `max_value` bytes).
    pub(super) fn from_record(view: &'a RecordView<'a>, max_value: usize) -> Result<Self> {
        let value = view.original_value(max_value)?;
        Ok(Applied {
            sqn: view.sqn,
            kind: view.kind,
            timestamp: view.timestamp,
            ledger_key: view.ledger_key,
            metadata: view.metadata,
            changes: &view.changes,
            value_len: value.len(),
            value_hash: levee_checksum::crc32c(&value),
        })
    }
}

/// Apply one write's ledger changes (the object and its index entries) to a memtable.
pub(super) fn apply(mem: &Memtable, w: &Applied<'_>) {
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

thread_local! {
    /// Each writing thread's record buffer (records are encoded outside the write lock).
    static RECORD_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// The writer's compressed value, before it is encoded into its record.
    static COMPRESS_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A record buffer that grew past this is freed after its write (one huge value does not stay
/// allocated in every thread that wrote one).
const RECORD_BUF_KEEP: usize = 1 << 20;

/// A group appends at most this many records or, past its first record, about this many bytes.
const GROUP_RECORDS: usize = 256;
const GROUP_BYTES: usize = 1 << 20;

/// One write waiting to be appended: its record (SQN and CRC open) and what its ledger update
/// needs.
pub(super) struct Job {
    buf: Vec<u8>,
    aae_delta: Option<(u32, u32)>,
    kind: Kind,
    timestamp: u64,
    ledger_key: Vec<u8>,
    metadata: Vec<u8>,
    changes: Vec<IndexChange>,
    value_len: usize,
    value_hash: u32,
    user_bytes: u64,
}

enum TicketState {
    /// Waiting in the queue.
    Queued(Box<Job>),
    /// Waiting at the front of the queue, told to lead the next group.
    Lead(Box<Job>),
    /// A leader is appending it.
    Taken,
    Done(Result<Sqn>, Vec<u8>),
}

/// A writer's place in the queue; the leader fills it in and wakes the writer.
pub(super) struct Ticket {
    state: Mutex<TicketState>,
    /// The writer sleeps on this lane of `Inner::write_beacon` (one bit, by its place in line).
    lane: u32,
}

/// Writers waiting for the journal (`Inner::group_append`).
#[derive(Default)]
pub(super) struct WriteQueue {
    waiting: std::collections::VecDeque<Arc<Ticket>>,
    /// A writer is leading a group (it or its successor will take what waits).
    leading: bool,
    /// Writers queued so far: the next one's lane is this modulo 32, so the 32 writers queued
    /// last all sleep on lanes of their own and a leader wakes just its group and its successor.
    queued: u64,
}

/// Key stripes (`Inner::key_stripes`).
pub(super) const KEY_STRIPES: usize = 256;

impl Inner {
    fn key_stripe(&self, ledger_key: &[u8]) -> &Ranked<Mutex<()>> {
        let h = crc32c::crc32c(ledger_key) as usize;
        &self.key_stripes[h % KEY_STRIPES]
    }

    pub(super) fn write(
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
        // Outside the write lock: the value's CRC (the ledger's value hash), the record's
        // encoding, and the AAE tree's lookup of the key's old version — a ledger read that may
        // go to disk — under the key's stripe, so no other write of the key comes in between.
        let value_hash = levee_checksum::crc32c(value);
        let timestamp = now_micros();
        let stripe = self.aae.as_ref().map(|_| self.key_stripe(&lk).lock());
        let aae_delta = match &self.aae {
            Some(_) => Some(self.aae_delta(bucket, key, &lk, kind, metadata)?),
            None => None,
        };
        let mut buf = RECORD_BUF.with_borrow_mut(std::mem::take);
        let compress = self.cfg.compression_method != crate::Compression::None
            && self.cfg.compression_point == crate::CompressionPoint::OnReceipt;
        if compress {
            COMPRESS_BUF.with_borrow_mut(|packed| {
                let codec = value_codec::compress(self.cfg.compression_method, value, packed);
                let stored = if codec == ValueCodec::Raw {
                    value
                } else {
                    &packed[..]
                };
                record::encode_unsequenced(
                    &mut buf, kind, timestamp, &lk, metadata, changes, stored, codec,
                );
                if packed.capacity() > RECORD_BUF_KEEP {
                    *packed = Vec::new();
                }
            });
        } else {
            record::encode_unsequenced(
                &mut buf,
                kind,
                timestamp,
                &lk,
                metadata,
                changes,
                value,
                ValueCodec::Raw,
            );
        }
        let job = Job {
            buf,
            aae_delta,
            kind,
            timestamp,
            ledger_key: lk,
            metadata: metadata.to_vec(),
            changes: changes.to_vec(),
            value_len: value.len(),
            value_hash,
            user_bytes: (bucket.len() + key.len() + value.len() + metadata.len()) as u64,
        };
        let (r, mut buf) = self.group_append(job);
        // The stripe orders the AAE lookup against the append; waiting for durability needs it
        // no more (holding it there made a lost wake-up a deadlock for the key's next writer).
        drop(stripe);
        if buf.capacity() <= RECORD_BUF_KEEP {
            buf.clear();
            RECORD_BUF.with_borrow_mut(|b| *b = buf);
        }
        let sqn = r?;
        if self.cfg.sync_on_write == SyncMode::Sync {
            self.wait_durable(sqn)?;
        }
        Ok(sqn)
    }

    /// Queue `job` for the journal: the writer that finds no leader leads — it appends the jobs
    /// waiting (its own first) with one write under the write lock, hands each writer its SQN
    /// and passes the lead to the next writer waiting — and every other writer sleeps until its
    /// job is done (or it is handed the lead). Returns the job's SQN and its buffer.
    fn group_append(&self, job: Job) -> (Result<Sqn>, Vec<u8>) {
        // Allocated before the queue lock; only the lane needs the queue.
        let job = TicketState::Queued(Box::new(job));
        let mut q = self.write_queue.lock();
        let ticket = Arc::new(Ticket {
            state: Mutex::new(job),
            lane: 1 << (q.queued % 32),
        });
        q.queued += 1;
        q.waiting.push_back(ticket.clone());
        let mut lead = !std::mem::replace(&mut q.leading, true);
        drop(q);
        loop {
            if lead {
                self.lead_one_group();
            }
            loop {
                // Before the check: a leader changes the ticket, then raises the beacon.
                let epoch = self.write_beacon.epoch();
                let mut st = ticket.state.lock();
                match std::mem::replace(&mut *st, TicketState::Taken) {
                    TicketState::Done(r, buf) => return (r, buf),
                    TicketState::Lead(job) => {
                        *st = TicketState::Queued(job);
                        lead = true;
                        break;
                    }
                    other => {
                        *st = other;
                        drop(st);
                        self.write_beacon.wait_lane(epoch, ticket.lane);
                    }
                }
            }
        }
    }

    /// As the leader: take the jobs waiting (up to a group's worth), append them, hand out the
    /// results, and pass the lead on (or give it up when nobody waits).
    fn lead_one_group(&self) {
        let (mut tickets, mut jobs): (Vec<Arc<Ticket>>, Vec<Job>) = (Vec::new(), Vec::new());
        {
            let mut q = self.write_queue.lock();
            let mut bytes = 0usize;
            while !q.waiting.is_empty() {
                if !jobs.is_empty() && (jobs.len() >= GROUP_RECORDS || bytes >= GROUP_BYTES) {
                    break;
                }
                let t = q.waiting.pop_front().expect("front exists");
                let job = match std::mem::replace(&mut *t.state.lock(), TicketState::Taken) {
                    TicketState::Queued(job) | TicketState::Lead(job) => *job,
                    _ => unreachable!("a waiting ticket holds its job"),
                };
                bytes += job.buf.len();
                tickets.push(t);
                jobs.push(job);
            }
        }
        let first = self.append_batch(&mut jobs);
        let mut wake = 0u32;
        for (i, (t, job)) in tickets.iter().zip(jobs).enumerate() {
            let r = match &first {
                Ok(sqn) => Ok(sqn + i as u64),
                Err(e) => Err(e.duplicate()),
            };
            *t.state.lock() = TicketState::Done(r, job.buf);
            wake |= t.lane;
        }
        {
            let mut q = self.write_queue.lock();
            match q.waiting.front() {
                None => q.leading = false,
                Some(next) => {
                    let mut st = next.state.lock();
                    if let TicketState::Queued(job) =
                        std::mem::replace(&mut *st, TicketState::Taken)
                    {
                        *st = TicketState::Lead(job);
                    }
                    wake |= next.lane;
                }
            }
        }
        // The group and the next leader in one wake-up: a writer woken first can no longer take
        // the leader's core while the others wait to be woken (10 % of groups did, for 0.3 ms).
        self.write_beacon.raise_lanes(wake);
    }

    /// The serialised part of a group of writes: SQNs, one journal append, AAE tree and memtable
    /// updates, segment roll, background-sync and memtable-rotation triggers. Returns the first
    /// job's SQN (the others follow it); on an error no job's record is in the journal.
    fn append_batch(&self, jobs: &mut [Job]) -> Result<Sqn> {
        let mut w = self.write.lock();
        self.check_open()?;
        if let Some(e) = self.poisoned() {
            return Err(Error::Poisoned(e));
        }
        let first = w.next_sqn;
        let mut records = Vec::with_capacity(jobs.len());
        // Every record up to it was fdatasynced before these are appended: recovery tells damage
        // to synced records from an unsynced tail by it (`segment::lost_writeback_at`).
        let synced = self.synced_sqn.load(Ordering::Acquire);
        for (i, job) in jobs.iter_mut().enumerate() {
            let sqn = first + i as u64;
            record::seal(&mut job.buf, sqn, synced);
            records.push((sqn, job.buf.len() as u32));
        }
        let incoming: usize = jobs.iter().map(|j| j.buf.len()).sum();
        w.journal
            .reserve_ahead(incoming as u64, self.cfg.journal_segment_bytes);
        let appended = if let [job] = &*jobs {
            w.journal.append(first, &job.buf)
        } else {
            let mut all = std::mem::take(&mut w.group_buf);
            all.clear();
            for job in jobs.iter() {
                all.extend_from_slice(&job.buf);
            }
            let r = w.journal.append_many(&records, &all);
            if all.capacity() <= GROUP_BYTES * 2 {
                w.group_buf = all;
            }
            r
        };
        if let Err(e) = appended {
            if let Error::Poisoned(m) = &e {
                self.bg.lock().error.get_or_insert(m.clone());
            }
            return Err(e);
        }
        let len = incoming;
        let sqn = first + jobs.len() as u64 - 1;
        w.next_sqn = sqn + 1;
        if let Some(aae) = &self.aae {
            let mut tree = aae.lock();
            for (seg, delta) in jobs.iter().filter_map(|j| j.aae_delta) {
                if delta != 0 {
                    tree.xor(seg, delta);
                }
            }
        }
        {
            let mem = self.mem.read();
            for (i, job) in jobs.iter().enumerate() {
                apply(
                    &mem.active,
                    &Applied {
                        sqn: first + i as u64,
                        kind: job.kind,
                        timestamp: job.timestamp,
                        ledger_key: &job.ledger_key,
                        metadata: &job.metadata,
                        changes: &job.changes,
                        value_len: job.value_len,
                        value_hash: job.value_hash,
                    },
                );
                self.c
                    .user_bytes
                    .fetch_add(job.user_bytes, Ordering::Relaxed);
                match job.kind {
                    Kind::Put => self.c.puts.fetch_add(1, Ordering::Relaxed),
                    Kind::Delete => self.c.deletes.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        self.last_sqn.store(sqn, Ordering::Release);
        self.c
            .journal_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        {
            if w.journal.full(
                self.cfg.journal_segment_bytes,
                self.cfg.journal_segment_records,
            ) {
                let id = w.next_segment_id;
                // The write itself is in; a failed roll leaves the old segment active. Only the
                // new file's creation and its link happen here, without waiting for a sync in
                // progress: the old segment's fdatasync, its index and the manifest (seven syncs,
                // 20-400 ms on a busy disk, during which every writer waited) follow outside the
                // write lock.
                let t = Instant::now();
                let failed = self.sync.lock().failed.clone();
                let rolled = match failed {
                    Some(f) => Err(Error::Poisoned(f)),
                    None => {
                        let spare = self.journal.spares.as_ref().and_then(|s| s.take());
                        w.journal
                            .roll(&self.disk, &self.journal.dir, id, spare, sqn)
                    }
                };
                w.unsynced_bytes = 0;
                match rolled {
                    Ok(old) => {
                        w.next_segment_id += 1;
                        // Before a sync can find the new file: it syncs the directory too.
                        *self.journal_dir_due.lock() = true;
                        {
                            let mut files = self.journal_files.lock();
                            files.unsynced.push(old.tail);
                            files.active = w.journal.file.clone();
                        }
                        self.journal.push(w.journal.seg.clone());
                        self.rolled.lock().push((old.seg, sqn));
                        self.wake_worker(&mut self.bg.lock());
                    }
                    // No new segment (or no link in it): the old one stays active, but a disk
                    // that refuses a new file is not one to retry on every write.
                    Err(e) => {
                        self.poison_journal(format!("rolling the journal segment failed: {e}"));
                    }
                }
                let n = t.elapsed().as_nanos() as u64;
                self.c.roll_nanos.fetch_add(n, Ordering::Relaxed);
                self.c.max_roll_nanos.fetch_max(n, Ordering::Relaxed);
            }
            if self.cfg.sync_on_write == SyncMode::None && self.cfg.journal_bytes_per_sync > 0 {
                w.unsynced_bytes += len as u64;
                if w.unsynced_bytes >= self.cfg.journal_bytes_per_sync {
                    w.unsynced_bytes = 0;
                    let mut s = self.sync.lock();
                    if s.requested < sqn {
                        s.requested = sqn;
                        // Advisory: without a syncer the roll or the flush syncs instead.
                        self.wake_syncer(&mut s);
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
        }
        Ok(first)
    }

    /// Freeze the active memtable for flushing. Caller holds the write lock.
    /// Freeze the active memtable and wait until everything written so far is persisted in the
    /// ledger.
    pub(super) fn flush_and_wait(&self) -> Result<()> {
        let target = {
            let _w = self.write.lock();
            self.rotate_memtable();
            self.last_sqn.load(Ordering::Acquire)
        };
        let mut bg = self.bg.lock();
        self.wake_worker(&mut bg);
        while self.persisted_sqn.load(Ordering::Acquire) < target {
            if let Some(e) = &bg.error {
                return Err(Error::Poisoned(e.clone()));
            }
            self.done_cv.wait_for(bg.raw(), Duration::from_millis(50));
        }
        Ok(())
    }

    pub(super) fn rotate_memtable(&self) {
        let mut m = self.mem.write();
        if m.active.is_empty() {
            return;
        }
        let full = std::mem::take(&mut m.active);
        m.immutables.push_back(full);
        drop(m);
        self.wake_worker(&mut self.bg.lock());
    }

    /// Wait while flushes or L0 merges are behind, so memory and read cost stay bounded.
    pub(super) fn maybe_stall(&self) -> Result<()> {
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
            self.wake_worker(&mut bg);
            self.done_cv.wait_for(bg.raw(), Duration::from_millis(10));
        }
        let n = start.elapsed().as_nanos() as u64;
        self.c.stall_nanos.fetch_add(n, Ordering::Relaxed);
        self.c.max_stall_nanos.fetch_max(n, Ordering::Relaxed);
        Ok(())
    }

    /// Group commit: writers register the SQN they need and wait; the syncer thread fdatasyncs
    /// everything appended so far and wakes all writers it covered. While one fdatasync runs, the
    /// next group gathers.
    pub(super) fn wait_durable(&self, sqn: Sqn) -> Result<()> {
        loop {
            // Woken, a writer whose record is durable leaves without the lock.
            if self.synced_sqn.load(Ordering::Acquire) >= sqn {
                return Ok(());
            }
            let epoch = {
                let mut s = self.sync.lock();
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
                    if !self.wake_syncer(&mut s) {
                        // No thread could be started: make the record durable here (the path a
                        // flush takes), which raises the mark and wakes the other waiters.
                        drop(s);
                        return self.journal_durable_through(sqn);
                    }
                }
                // Under the lock: every change to what was checked raises the beacon after it.
                self.sync_beacon.epoch()
            };
            self.sync_beacon.wait(epoch);
        }
    }

    /// Raise the synced mark (caller holds the `sync` lock; the caller raises the beacon).
    fn raise_synced(&self, s: &mut SyncState, sqn: Sqn) {
        s.synced = s.synced.max(sqn);
        self.synced_sqn.store(s.synced, Ordering::Release);
    }

    /// Hand the syncer a request just recorded in `s`: wake it, or start it if it is not
    /// running (it exits after `Config::idle_thread_exit` without requests, so an idle store holds no
    /// thread). `false` if no thread could be started. Nothing starts after shutdown.
    pub(super) fn wake_syncer(&self, s: &mut SyncState) -> bool {
        if s.syncer_running || s.shutdown || s.failed.is_some() {
            self.syncer_cv.notify_one();
            return true;
        }
        s.syncer_running =
            self.start_thread("levee-journal-sync", Inner::syncer, &self.syncer_thread);
        s.syncer_running
    }

    pub(super) fn syncer(self: Arc<Self>) {
        let mut s = self.sync.lock();
        loop {
            while s.syncer_idle() && !s.shutdown {
                let idle = self.syncer_cv.wait_for(s.raw(), self.cfg.idle_thread_exit);
                if idle.timed_out() && s.requested <= s.synced && !s.shutdown {
                    s.syncer_running = false;
                    return;
                }
            }
            if s.shutdown {
                s.syncer_running = false;
                return;
            }
            drop(s);
            // A failure poisons the store inside `sync_active_journal`.
            let r = self.sync_active_journal();
            s = self.sync.lock();
            if let Ok(target) = r {
                self.raise_synced(&mut s, target);
            }
            // Also after a failure: the waiters read it.
            self.sync_beacon.raise();
            if s.failed.is_some() {
                s.syncer_running = false;
                return;
            }
        }
    }

    /// A journal fdatasync or segment roll failed. The kernel may have dropped the dirty pages, and
    /// a later fdatasync of the same file can succeed without them (fsyncgate), so nothing appended
    /// since the last good sync can ever be called durable: the store is poisoned. Every later call
    /// gets `Error::Poisoned`; a reopen recovers from what the disk really holds.
    pub(super) fn poison_journal(&self, what: String) -> Error {
        log::error!("{what}; the store refuses writes until reopened");
        {
            let mut s = self.sync.lock();
            s.failed.get_or_insert_with(|| what.clone());
            self.sync_beacon.raise();
        }
        self.bg.lock().error.get_or_insert_with(|| what.clone());
        Error::Poisoned(what)
    }

    /// Make every journal record up to `sqn` durable: nothing to do when a group commit, the
    /// background syncer or a finished roll already covered it; otherwise an fdatasync of the
    /// active segment (after those of rolled-out segments not yet synced).
    pub(super) fn journal_durable_through(&self, sqn: Sqn) -> Result<()> {
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
        self.mark_synced(target);
        Ok(())
    }

    /// Everything up to `sqn` is durable: raise the mark and wake the writers waiting for it.
    /// Every path that raises it outside the syncer comes here — a raise without the wake-up
    /// leaves a writer whose record it covered asleep (the syncer, finding nothing requested
    /// beyond the mark, does not wake it either) until another write asks for more, which in a
    /// quiet store is never.
    pub(super) fn mark_synced(&self, sqn: Sqn) {
        let mut s = self.sync.lock();
        self.raise_synced(&mut s, sqn);
        self.sync_beacon.raise();
    }

    /// fdatasync the active segment, after the rolled-out ones not yet synced, and return the SQN
    /// it made durable. Needs no write lock (see `sync_rolled`).
    pub(super) fn sync_active_journal(&self) -> Result<Sqn> {
        let _gate = self.journal_sync_gate.lock();
        if let Some(f) = &self.sync.lock().failed {
            return Err(Error::Poisoned(f.clone()));
        }
        let (target, file) = self.sync_rolled()?;
        self.sync_journal_file(&*file, "journal fdatasync")?;
        Ok(target)
    }

    /// fdatasync one journal file, counted in the stats; a failure poisons the store (`what`
    /// names the sync in the error).
    fn sync_journal_file(&self, file: &dyn StorageFile, what: &str) -> Result<()> {
        let t = Instant::now();
        if let Err(e) = JournalWriter::sync(file) {
            return Err(self.poison_journal(format!("{what} failed: {e}")));
        }
        let n = t.elapsed().as_nanos() as u64;
        self.c.fsync_nanos.fetch_add(n, Ordering::Relaxed);
        self.c.max_fsync_nanos.fetch_max(n, Ordering::Relaxed);
        self.c.fsync_buckets[stats::fsync_bucket(n)].fetch_add(1, Ordering::Relaxed);
        self.c.fsyncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// fdatasync the files rolls replaced whose tails are not yet synced, oldest first, then the
    /// journal directory that holds the new segments' entries. The caller holds the gate and has
    /// checked the store is not poisoned. Returns `last_sqn` and the active file as they were
    /// together: every record up to that SQN is in a file synced here or in that one. A failure
    /// poisons the store: the lost tail may hold writes a later sync would otherwise seem to cover.
    pub(super) fn sync_rolled(&self) -> Result<(Sqn, Arc<dyn StorageFile>)> {
        // `last_sqn` is raised after the append and before a roll swaps the files, all under the
        // write lock: read under the files' lock, it is in one of the files read with it.
        let (target, unsynced, active) = {
            let files = self.journal_files.lock();
            (
                self.last_sqn.load(Ordering::Acquire),
                files.unsynced.clone(),
                files.active.clone(),
            )
        };
        // The directory first: each rolled-out segment's mark names the segment after it, which
        // must then be found after any crash (recovery reports a named segment that is missing).
        self.sync_journal_dir().map_err(|e| {
            self.poison_journal(format!("syncing the journal directory failed: {e}"))
        })?;
        for tail in &unsynced {
            let file = &*tail.file;
            let mark = segment::encode_next(tail.next);
            let marked = match tail.cut_to {
                // A reused file: the old file's bytes past its records go before its tail is
                // synced (the sync makes the new length durable with the data).
                Some(len) => file.set_len(len).and_then(|()| file.write_at(&mark, len)),
                None => file.append(&mark),
            };
            if let Err(e) = marked {
                return Err(self.poison_journal(format!(
                    "ending a rolled-out journal segment with its successor mark failed: {e}"
                )));
            }
            self.sync_journal_file(file, "fdatasync of a rolled-out journal segment")?;
        }
        if !unsynced.is_empty() {
            // Only syncs (behind the gate) take from the front; rolls add at the back.
            self.journal_files.lock().unsynced.drain(..unsynced.len());
        }
        Ok((target, active))
    }

    /// Make the journal directory durable if a roll created a file in it since it last was.
    pub(super) fn sync_journal_dir(&self) -> Result<()> {
        let mut due = self.journal_dir_due.lock();
        if *due {
            sync_dir(&*self.disk, &self.journal.dir)?;
            *due = false;
        }
        Ok(())
    }

    /// Close the segments rolls replaced (on the ledger worker, or at `close`): make their tails
    /// durable unless a sync of the journal already did, write each one's index, mark it closed
    /// (journal compaction takes it from then on) and write a manifest that says so, unless the
    /// store is closed, whose own manifest follows. Until then a crash finds the segment without
    /// an index and scans it. `Ok(false)` when there was none. A failure leaves the store
    /// poisoned, as a failed roll did when all this ran under the write lock.
    pub(super) fn finish_rolls(&self) -> Result<bool> {
        let mut rolled = self.rolled.lock();
        let Some(&(_, through)) = rolled.last() else {
            return Ok(false);
        };
        let synced = {
            let _gate = self.journal_sync_gate.lock();
            let failed = self.sync.lock().failed.clone();
            match failed {
                Some(f) => Err(Error::Poisoned(f)),
                None => self.sync_rolled().map(|_| ()),
            }
        };
        if let Err(e) = synced {
            rolled.clear();
            return Err(e);
        }
        // Every record up to the last rolled-out segment's is in a synced segment now: a writer
        // waiting for one of them may go (the syncer, seeing nothing requested beyond the mark,
        // would not wake it).
        self.mark_synced(through);
        for (seg, _) in rolled.drain(..) {
            if let Err(e) = seg.close(&self.journal.dir) {
                return Err(self.poison_journal(format!(
                    "writing the index of journal segment {} failed: {e}",
                    seg.id
                )));
            }
        }
        if !self.closed.load(Ordering::Acquire) {
            self.write_manifest(Vec::new())?;
        }
        Ok(true)
    }
}
