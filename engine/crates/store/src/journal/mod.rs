//! The journal: append-only segments holding every write's record (key, metadata, index changes and
//! value), addressed by SQN. It is the write-ahead log and the home of values; the ledger only stores
//! the SQN, so rewriting segments never touches the ledger.

pub(crate) mod record;
pub(crate) mod segment;
pub(crate) mod spare;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::{Error, IoContext, Result};
use crate::storage::{Disk, StorageFile};
use crate::value_codec;
use segment::{IdxEntry, Segment};

/// The ordered segment list as readers hold it: a shared, immutable snapshot (taking one is one
/// reference count, not a copy of the list; a roll or compaction publishes a new one).
pub(crate) type SegmentList = Arc<Vec<Arc<Segment>>>;

/// Read side of the journal: the ordered list of segments.
pub(crate) struct Journal {
    pub dir: PathBuf,
    segments: RwLock<SegmentList>,
    /// Records read from segments (the counting layer behind "HEAD never reads the journal").
    pub reads: AtomicU64,
    /// The largest value a compressed record may claim (`Config::max_value_bytes`).
    max_value_bytes: usize,
    /// Replaced segment files kept for rolls to write over (`spare.rs`); `None`: removed.
    pub spares: Option<Arc<spare::Spares>>,
}

/// An owned copy of a record's payload.
#[derive(Debug, Clone)]
pub(crate) struct OwnedRecord {
    pub value: Vec<u8>,
}

impl Journal {
    pub(crate) fn new(
        dir: PathBuf,
        segments: Vec<Arc<Segment>>,
        max_value_bytes: usize,
        spares: Option<Arc<spare::Spares>>,
    ) -> Self {
        Journal {
            dir,
            segments: RwLock::new(Arc::new(segments)),
            reads: AtomicU64::new(0),
            max_value_bytes,
            spares,
        }
    }

    pub(crate) fn segments(&self) -> SegmentList {
        self.segments.read().clone()
    }

    pub(crate) fn push(&self, seg: Arc<Segment>) {
        let mut segs = self.segments.write();
        let mut next = Vec::clone(&segs);
        next.push(seg);
        *segs = Arc::new(next);
    }

    /// Replace the adjacent segments `old` (in list order) with `new` (a compaction's outputs).
    pub(crate) fn replace(&self, old: &[Arc<Segment>], new: Vec<Arc<Segment>>) {
        let mut segs = self.segments.write();
        let Some(at) = segs.iter().position(|s| s.id == old[0].id) else {
            return;
        };
        let mut next = Vec::clone(&segs);
        next.splice(at..at + old.len(), new);
        *segs = Arc::new(next);
    }

    /// Read the record with `sqn` from the live segment list.
    pub(crate) fn read(&self, sqn: u64, ledger_key: &[u8]) -> Result<OwnedRecord> {
        let segs = self.segments.read().clone();
        self.read_in(&segs, sqn, ledger_key)
    }

    /// Read the record with `sqn` from `pinned` (a segment list taken before the ledger lookup that
    /// produced `sqn`), or from the live list when it was appended to a segment that rolled in since.
    pub(crate) fn read_pinned(
        &self,
        pinned: &[Arc<Segment>],
        sqn: u64,
        ledger_key: &[u8],
    ) -> Result<OwnedRecord> {
        match find(pinned, sqn)? {
            Some((seg, e)) => self.read_entry(&seg, e, sqn, ledger_key),
            None => self.read(sqn, ledger_key),
        }
    }

    /// Read the record with `sqn` from `segs` (a snapshot's segment list), verifying its checksum and
    /// that it is the record asked for.
    pub(crate) fn read_in(
        &self,
        segs: &[Arc<Segment>],
        sqn: u64,
        ledger_key: &[u8],
    ) -> Result<OwnedRecord> {
        let (seg, e) = find(segs, sqn)?.ok_or_else(|| {
            Error::Corruption(format!(
                "journal has no record with sqn {sqn} that the ledger points to"
            ))
        })?;
        self.read_entry(&seg, e, sqn, ledger_key)
    }

    /// Read one located record and check it is the one asked for.
    fn read_entry(
        &self,
        seg: &Segment,
        e: IdxEntry,
        sqn: u64,
        ledger_key: &[u8],
    ) -> Result<OwnedRecord> {
        let mut raw = seg.read_raw(e)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let view = record::decode(&raw).map_err(|err| {
            Error::Corruption(format!(
                "segment {} record sqn {sqn}: {err}",
                seg.path.display()
            ))
        })?;
        if view.sqn != sqn || view.ledger_key != ledger_key {
            return Err(Error::Corruption(format!(
                "segment {} holds sqn {} for another key where sqn {sqn} was expected",
                seg.path.display(),
                view.sqn
            )));
        }
        if view.codec != value_codec::ValueCodec::Raw {
            let value = view.original_value(self.max_value_bytes).map_err(|err| {
                Error::Corruption(format!(
                    "segment {} record sqn {sqn}: {err}",
                    seg.path.display()
                ))
            })?;
            return Ok(OwnedRecord {
                value: value.into_owned(),
            });
        }
        // The value is the record's last field: keep it in the buffer it was read into (moved to
        // the front while that buffer is still in cache) rather than copying it into a new one —
        // that copy was 11 % of the CPU of a GET-heavy run with 8 KB values.
        let start = view.value.as_ptr() as usize - raw.as_ptr() as usize;
        let len = view.value.len();
        raw.truncate(start + len);
        raw.drain(..start);
        Ok(OwnedRecord { value: raw })
    }

    /// Whether the journal holds a record with `sqn` (index lookup only).
    pub(crate) fn contains_in(segs: &[Arc<Segment>], sqn: u64) -> Result<bool> {
        Ok(find(segs, sqn)?.is_some())
    }

    pub(crate) fn disk_bytes(&self) -> u64 {
        self.segments.read().iter().map(|s| s.disk_bytes()).sum()
    }
}

/// Find the segment and index entry of `sqn` in a list ordered by SQN range. Errs only when a
/// lazily opened segment's index cannot be read.
pub(crate) fn find(segs: &[Arc<Segment>], sqn: u64) -> Result<Option<(Arc<Segment>, IdxEntry)>> {
    let mut i = segs.partition_point(|s| s.first_sqn().is_some_and(|f| f <= sqn));
    while i > 0 {
        i -= 1;
        if let Some(e) = segs[i].locate(sqn)? {
            return Ok(Some((segs[i].clone(), e)));
        }
        if segs[i].first_sqn().is_some() {
            break;
        }
    }
    Ok(None)
}

/// How much of the active segment's file [`JournalWriter::reserve_ahead`] reserves at a time.
pub(crate) const RESERVE_CHUNK: u64 = 16 << 20;

/// The append side: the active segment and its write handle. Owned by the store's write lock.
pub(crate) struct JournalWriter {
    pub seg: Arc<Segment>,
    pub file: Arc<dyn StorageFile>,
    pub size: u64,
    pub records: u64,
    /// The file's blocks are reserved up to this offset (`reserve_ahead`; 0: none).
    reserved: u64,
    /// Reserving failed for this file: appends allocate as they write.
    reserve_off: bool,
    /// The file is a reused one (`spare.rs`): records are written at `size`, over the old bytes.
    reused: bool,
}

impl JournalWriter {
    /// A writer appending to the empty `seg` through `file`.
    pub(crate) fn new(seg: Arc<Segment>, file: Arc<dyn StorageFile>) -> JournalWriter {
        JournalWriter {
            seg,
            file,
            size: 0,
            records: 0,
            reserved: 0,
            reserve_off: false,
            reused: false,
        }
    }

    /// Before appending `incoming` bytes: when less than half a [`RESERVE_CHUNK`] of reserved
    /// space would be left past them, reserve the next chunk of the file, never past `limit` (the
    /// size at which the segment rolls, so a rolled segment keeps nothing reserved).
    ///
    /// An append into blocks not yet allocated makes ext4 reserve them under the inode's
    /// block-map lock, which writeback (a journal sync) and the conversion of written extents
    /// also take; the leader of a group of writes waited there up to 22 ms with the write lock
    /// held (docs/benchmarks.md, "Where levee's window maxima come from"). Into reserved blocks it
    /// does not. Best effort: when reserving fails (a filesystem without `fallocate`, a full
    /// disk), this file's appends allocate as they write, as before.
    pub(crate) fn reserve_ahead(&mut self, incoming: u64, limit: u64) {
        let end = self.size + incoming;
        if self.reserve_off || end + RESERVE_CHUNK / 2 <= self.reserved {
            return;
        }
        let from = self.reserved.max(self.size);
        let to = (from + RESERVE_CHUNK).min(limit);
        if to <= from {
            return;
        }
        match self.file.reserve(from, to - from) {
            Ok(()) => self.reserved = to,
            Err(_) => self.reserve_off = true,
        }
    }

    /// Give back the space reserved past the end of the file (a closing store's active
    /// segment). Only the reservation goes: the file keeps its length.
    pub(crate) fn release_reserved(&mut self) -> Result<()> {
        if self.reused {
            // The old file's bytes past the records go too: a closed segment holds its own only.
            self.file.set_len(self.size).ctx(|| {
                format!(
                    "cutting reused journal segment {} to its records",
                    self.seg.id
                )
            })?;
        } else if self.reserved > self.size {
            self.file.release_reserved().ctx(|| {
                format!(
                    "releasing the space reserved in journal segment {}",
                    self.seg.id
                )
            })?;
        }
        self.reserved = 0;
        Ok(())
    }

    /// Append several encoded records at once (`bytes` is each of `records`' (SQN, length) in
    /// order, back to back) with one write. On failure the segment is cut back to its previous
    /// end: none of them is in it.
    pub(crate) fn append_many(&mut self, records: &[(u64, u32)], bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(
            records.iter().map(|r| r.1 as usize).sum::<usize>(),
            bytes.len()
        );
        let written = if self.reused {
            self.file.write_at(bytes, self.size)
        } else {
            self.file.append(bytes)
        };
        if let Err(e) = written {
            let cut = self.file.set_len(self.size);
            self.reserved = 0; // the cut gives the reservation back too
            let (first, last) = (
                records.first().map_or(0, |r| r.0),
                records.last().map_or(0, |r| r.0),
            );
            let sqns = if first == last {
                format!("sqn {first}")
            } else {
                format!("sqns {first}..={last}")
            };
            return Err(match cut {
                Ok(()) => Error::Io {
                    context: format!("appending {sqns} to the journal"),
                    source: e,
                },
                Err(e2) => Error::Poisoned(format!(
                    "journal append failed ({e}) and the segment could not be cut back ({e2})"
                )),
            });
        }
        for &(sqn, len) in records {
            self.seg.push_index(IdxEntry {
                sqn,
                offset: self.size,
                len,
            });
            self.size += u64::from(len);
            self.records += 1;
        }
        Ok(())
    }

    /// Append one encoded record. On failure the segment is cut back to its previous end so a
    /// half-written record never sits between valid ones.
    pub(crate) fn append(&mut self, sqn: u64, buf: &[u8]) -> Result<()> {
        self.append_many(&[(sqn, buf.len() as u32)], buf)
    }

    pub(crate) fn full(&self, max_bytes: u64, max_records: u64) -> bool {
        self.size >= max_bytes || self.records >= max_records
    }

    /// Make everything appended so far durable.
    pub(crate) fn sync(file: &dyn StorageFile) -> Result<()> {
        file.sync_data().ctx(|| "syncing the journal".to_string())
    }

    /// Start a new segment with `new_id` and append to it from now on; it begins with a link to
    /// this one. With a `spare` (`spare.rs`) the segment is written over it, and its link says
    /// every record of the old file has an SQN at or below `last_sqn` (the last one written,
    /// which is in this segment). Returns the segment and file rolled out, neither synced nor
    /// closed: that is I/O the write lock must not wait for. The caller hands the file to the
    /// next sync of the journal, which fdatasyncs it before the new one (`Inner::sync_rolled`),
    /// and the segment to the ledger worker, which closes it (`Inner::finish_rolls`).
    pub(crate) fn roll(
        &mut self,
        disk: &Disk,
        dir: &Path,
        new_id: u64,
        spare: Option<PathBuf>,
        last_sqn: u64,
    ) -> Result<RolledOut> {
        let reused = spare.and_then(|p| match Segment::create_reused(disk, dir, new_id, &p) {
            Ok(made) => Some(made),
            Err(e) => {
                log::warn!("journal segment {new_id} not written over a spare ({e}): a new file");
                crate::fsutil::remove_quietly(&**disk, &p);
                crate::fsutil::remove_quietly(&**disk, &segment::seg_path(dir, new_id));
                None
            }
        });
        let is_reused = reused.is_some();
        let (seg, file) = match reused {
            Some(made) => made,
            None => Segment::create_unlisted(disk, dir, new_id)?,
        };
        let link = segment::encode_link(segment::Link {
            prev_id: self.seg.id,
            prev_len: self.size,
            floor: if is_reused { last_sqn.max(1) } else { 0 },
        });
        if is_reused {
            file.write_at(&link, 0)
        } else {
            file.append(&link)
        }
        .ctx(|| format!("writing the link of journal segment {new_id}"))?;
        let next = segment::Next {
            id: self.seg.id,
            next_id: new_id,
            last_sqn,
        };
        let out = RolledOut {
            seg: std::mem::replace(&mut self.seg, seg),
            tail: RolledTail {
                file: std::mem::replace(&mut self.file, file),
                cut_to: self.reused.then_some(self.size),
                next,
            },
        };
        self.size = link.len() as u64;
        self.records = 0;
        self.reserved = 0;
        self.reserve_off = false;
        self.reused = is_reused;
        Ok(out)
    }
}

/// A segment a roll has just replaced as the active one.
pub(crate) struct RolledOut {
    pub seg: Arc<Segment>,
    pub tail: RolledTail,
}

/// What the next sync of the journal does to a segment a roll replaced, before any record of
/// the newer segments is called durable (`Inner::sync_rolled`): cut a reused file to its
/// records, end it with its successor mark, fdatasync it.
#[derive(Clone)]
pub(crate) struct RolledTail {
    pub file: Arc<dyn StorageFile>,
    /// A reused file is cut to its records' end here before its tail is synced.
    pub cut_to: Option<u64>,
    /// The mark naming the segment the roll started, written (`segment::encode_next`) once
    /// that segment's directory entry is durable.
    pub next: segment::Next,
}
