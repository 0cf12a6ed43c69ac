//! Journal segment files and their SQN→offset indexes.
//!
//! A segment `<id>.seg` is a sequence of records (see `record`). A segment a roll started begins
//! with a link to the segment it replaced, whose tail is synced after the roll, outside the write
//! lock: recovery tells an unsynced tail lost in a power cut (the link says the predecessor was
//! longer) from a segment that is missing. When a segment is closed its index is written beside it
//! as `<id>.idx`:
//!
//! ```text
//! link     := ff ff ff ff "LVLK" prev_id:u64 prev_len:u64 crc:u32  (a record never starts so)
//! reused   := ff ff ff ff "LVLR" prev_id:u64 prev_len:u64 floor:u64 crc:u32
//! spare    := ff ff ff ff "LVSP"
//! next     := ff ff ff ff "LVNX" id:u64 next_id:u64 last_sqn:u64 crc:u32
//! idx      := "LVIX" version:u32 count:u64 (sqn:u64 offset:u64 len:u32)* crc:u32
//! ```
//!
//! A segment a roll replaced ends with `next`, naming the segment that followed it. It is
//! written after the new segment's directory entry is durable and synced with the old segment's
//! tail, so before anything in the new segment is called durable: a newest segment lost before
//! any manifest listed it is then still seen to be missing (the manifest cannot tell).
//!
//! A *reused* segment is the file of a segment journal compaction replaced, written over from
//! the start (`spare.rs`): past its records lie the old file's bytes, whose records all carry
//! SQNs up to `floor`. Recovery takes no record at or below the floor as this segment's, and
//! tells a hole of lost writeback in it (old bytes, where a new file has zeros) from damage by
//! the synced SQN later records carry ([`lost_writeback_at`]). A file that begins with `spare`
//! was made a spare and holds no records of its own.
//!
//! The index of the active segment lives only in memory and is rebuilt by scanning the file on open.
//! A closed segment whose records the ledger has all persisted is opened *lazily*: its SQN range
//! comes from the manifest and its index file is read on the first lookup inside that range, so
//! opening a store does not read every segment's index (20 bytes per record).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::record::{self, RecordView, HEADER_BYTES};
use super::spare::Spares;
use crate::codec::{put_u32, put_u64, seal, unseal, Reader};
use crate::error::{Error, IoContext, Result};
use crate::fsutil::{sync_dir, write_atomic};
use crate::storage::{Disk, Storage, StorageFile};

const IDX_MAGIC: &[u8; 4] = b"LVIX";
const IDX_VERSION: u32 = 1;
/// Largest record the scanner accepts as plausible: the largest value a config may allow (1 GiB)
/// plus room for key, metadata and index changes. Fixed, so a smaller limit after a restart never
/// makes valid records look damaged.
pub(crate) const MAX_RECORD_BYTES: usize = (1 << 30) + (16 << 20);
/// Smallest possible record body (sqn, kind, timestamp, three empty byte strings, change count).
const MIN_BODY: usize = 8 + 1 + 8 + 4 + 4 + 4 + 4;

/// The link a rolled-in segment begins with. Its first four bytes read as a record length no
/// record has (above `MAX_RECORD_BYTES`), so a segment without one is never taken for one with.
const LINK_MAGIC: [u8; 8] = [0xff, 0xff, 0xff, 0xff, b'L', b'V', b'L', b'K'];
/// Bytes of a link: magic, predecessor id and length, CRC.
pub(crate) const LINK_BYTES: u64 = 8 + 8 + 8 + 4;
/// The link of a reused segment: the same, with the floor SQN of the old file's records.
const REUSED_LINK_MAGIC: [u8; 8] = [0xff, 0xff, 0xff, 0xff, b'L', b'V', b'L', b'R'];
/// Bytes of a reused segment's link.
pub(crate) const REUSED_LINK_BYTES: u64 = LINK_BYTES + 8;
/// What a spare begins with (`spare.rs`): written over the old file's start before it is renamed.
pub(crate) const SPARE_MAGIC: [u8; 8] = [0xff, 0xff, 0xff, 0xff, b'L', b'V', b'S', b'P'];

/// The mark a segment a roll replaced ends with (see the module docs).
const NEXT_MAGIC: [u8; 8] = [0xff, 0xff, 0xff, 0xff, b'L', b'V', b'N', b'X'];
/// Bytes of the mark: magic, the segment's id, its successor's id, its last SQN, CRC.
pub(crate) const NEXT_BYTES: u64 = 8 + 8 + 8 + 8 + 4;

/// What a segment a roll replaced says about the segment that followed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    /// The segment the mark ends (a reused file's old mark names another id).
    pub id: u64,
    /// The segment the roll started.
    pub next_id: u64,
    /// The last record's SQN in this segment (a reused file's old mark has an older one).
    pub last_sqn: u64,
}

pub(crate) fn encode_next(next: Next) -> Vec<u8> {
    let mut out = Vec::with_capacity(NEXT_BYTES as usize);
    out.extend_from_slice(&NEXT_MAGIC);
    put_u64(&mut out, next.id);
    put_u64(&mut out, next.next_id);
    put_u64(&mut out, next.last_sqn);
    seal(&mut out, 0);
    out
}

/// The mark `buf` holds, if it is a whole one whose checksum holds.
fn decode_next(buf: &[u8]) -> Option<Next> {
    if buf.len() != NEXT_BYTES as usize || buf[..NEXT_MAGIC.len()] != NEXT_MAGIC {
        return None;
    }
    let payload = unseal(buf, "segment successor mark").ok()?;
    let mut r = Reader::new(&payload[NEXT_MAGIC.len()..], "segment successor mark");
    Some(Next {
        id: r.u64().ok()?,
        next_id: r.u64().ok()?,
        last_sqn: r.u64().ok()?,
    })
}

/// The id of the segment at `path` (`<id>.seg`).
fn id_of(path: &Path) -> Option<u64> {
    path.file_stem()?.to_str()?.parse().ok()
}

/// What a rolled-in segment says about the segment it replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Link {
    pub prev_id: u64,
    /// The predecessor's length when it was replaced: all of it durable before anything after.
    pub prev_len: u64,
    /// A reused segment's floor: every record of the file's earlier use carries an SQN at or
    /// below it, every record written since one above it. 0 in a new file.
    pub floor: u64,
}

impl Link {
    /// Bytes the link takes at the start of its segment: records follow.
    pub(crate) fn bytes(&self) -> u64 {
        if self.floor > 0 {
            REUSED_LINK_BYTES
        } else {
            LINK_BYTES
        }
    }
}

pub(crate) fn encode_link(link: Link) -> Vec<u8> {
    let mut out = Vec::with_capacity(link.bytes() as usize);
    out.extend_from_slice(if link.floor > 0 {
        &REUSED_LINK_MAGIC
    } else {
        &LINK_MAGIC
    });
    put_u64(&mut out, link.prev_id);
    put_u64(&mut out, link.prev_len);
    if link.floor > 0 {
        put_u64(&mut out, link.floor);
    }
    seal(&mut out, 0);
    out
}

/// How a segment file begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// With a record, or empty: records from offset 0.
    Records,
    /// With a whole link: records from `Link::bytes`.
    Linked(Link),
    /// With a spare's mark: no records of its own.
    Spare,
    /// With a link's magic but shorter than a link: a write torn at the very start.
    TornLink,
    /// With a whole link that fails its checksum.
    DamagedLink,
}

/// Read how the segment at `path` begins.
pub(crate) fn read_start(disk: &dyn Storage, path: &Path) -> Result<Start> {
    let file = disk
        .open(path, false)
        .ctx(|| format!("opening {}", path.display()))?;
    start_of(&*file, path)
}

fn start_of(file: &dyn StorageFile, path: &Path) -> Result<Start> {
    let len = file.len().ctx(|| format!("stat {}", path.display()))?;
    let mut buf = [0u8; REUSED_LINK_BYTES as usize];
    let n = buf.len().min(len as usize);
    file.read_exact_at(&mut buf[..n], 0)
        .ctx(|| format!("reading {}", path.display()))?;
    let magic = LINK_MAGIC.len();
    let (want, reused) = if n >= magic && buf[..magic] == LINK_MAGIC {
        (LINK_BYTES as usize, false)
    } else if n >= magic && buf[..magic] == REUSED_LINK_MAGIC {
        (REUSED_LINK_BYTES as usize, true)
    } else if n >= magic && buf[..magic] == SPARE_MAGIC {
        return Ok(Start::Spare);
    } else {
        // Shorter than a magic, a prefix of one is a torn link too (the magics share their
        // first six bytes, and a spare's mark is written over bytes that were there already).
        if n > 0 && n < magic && buf[..n] == LINK_MAGIC[..n] {
            return Ok(Start::TornLink);
        }
        return Ok(Start::Records);
    };
    if n < want {
        return Ok(Start::TornLink);
    }
    let Ok(payload) = unseal(&buf[..want], "segment link") else {
        return Ok(Start::DamagedLink);
    };
    let mut r = Reader::new(&payload[magic..], "segment link");
    Ok(Start::Linked(Link {
        prev_id: r.u64()?,
        prev_len: r.u64()?,
        floor: if reused { r.u64()? } else { 0 },
    }))
}

/// The floor of the segment at `path` (`Link::floor`; 0 unless it is reused).
fn floor_of(file: &dyn StorageFile, path: &Path) -> Result<u64> {
    Ok(match start_of(file, path)? {
        Start::Linked(l) => l.floor,
        _ => 0,
    })
}

/// Where a record lives inside its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdxEntry {
    pub sqn: u64,
    pub offset: u64,
    /// Whole record length, header included.
    pub len: u32,
}

pub(crate) fn seg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.seg"))
}
pub(crate) fn idx_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.idx"))
}
/// A compaction output before the manifest lists it.
pub(crate) fn cseg_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.cseg"))
}

/// A segment's SQN→offset index: in memory, or (closed, fully persisted segments opened by
/// recovery) only its SQN range until a lookup needs it.
enum Index {
    Loaded(Vec<IdxEntry>),
    Lazy { first: u64, last: u64 },
}

/// One segment file, shared by readers (pread) and, while active, the writer.
pub(crate) struct Segment {
    pub id: u64,
    pub path: PathBuf,
    disk: Disk,
    file: Arc<dyn StorageFile>,
    index: RwLock<Index>,
    closed: AtomicBool,
    /// Replaced by compaction: the files go when the last reader (e.g. a snapshot) lets go.
    obsolete: AtomicBool,
    /// Where the file goes instead, if it is wanted as a spare then (`spare.rs`).
    spares: std::sync::OnceLock<Arc<Spares>>,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            let (disk, file) = (self.disk.clone(), self.file.clone());
            let idx = self.path.with_extension("idx");
            match self.spares.get() {
                Some(spares) => crate::reaper::keep_or_remove_later(
                    disk,
                    self.path.clone(),
                    idx,
                    file,
                    spares.clone(),
                ),
                None => crate::reaper::remove_later(disk, vec![self.path.clone(), idx], file),
            }
        }
    }
}

impl Segment {
    /// Create a new, empty active segment; returns it and the append handle.
    pub(crate) fn create(
        disk: &Disk,
        dir: &Path,
        id: u64,
    ) -> Result<(Arc<Segment>, Arc<dyn StorageFile>)> {
        Self::create_as(disk, dir, id, false, true)
    }

    /// `create` without the directory sync: for a roll, under the write lock. Its caller makes
    /// the directory durable before anything in the segment is called durable or any manifest
    /// lists it (`Inner::sync_journal_dir`), and writes the link first.
    pub(crate) fn create_unlisted(
        disk: &Disk,
        dir: &Path,
        id: u64,
    ) -> Result<(Arc<Segment>, Arc<dyn StorageFile>)> {
        Self::create_as(disk, dir, id, false, false)
    }

    /// Create a compaction output: written as `<id>.cseg`, renamed to `<id>.seg` once the manifest
    /// lists it (`path` already names the final file).
    pub(crate) fn create_output(
        disk: &Disk,
        dir: &Path,
        id: u64,
    ) -> Result<(Arc<Segment>, Arc<dyn StorageFile>)> {
        Self::create_as(disk, dir, id, true, true)
    }

    fn create_as(
        disk: &Disk,
        dir: &Path,
        id: u64,
        output: bool,
        durable_entry: bool,
    ) -> Result<(Arc<Segment>, Arc<dyn StorageFile>)> {
        let path = seg_path(dir, id);
        let on_disk = if output {
            cseg_path(dir, id)
        } else {
            path.clone()
        };
        let file = disk
            .create_new(&on_disk)
            .ctx(|| format!("creating journal segment {}", on_disk.display()))?;
        if durable_entry {
            sync_dir(&**disk, dir)?;
        }
        Ok(Self::empty(disk, id, path, file))
    }

    /// A segment with no records yet, written through `file`; returns it and `file`.
    fn empty(
        disk: &Disk,
        id: u64,
        path: PathBuf,
        file: Arc<dyn StorageFile>,
    ) -> (Arc<Segment>, Arc<dyn StorageFile>) {
        let seg = Segment {
            id,
            path,
            disk: disk.clone(),
            file: file.clone(),
            index: RwLock::new(Index::Loaded(Vec::new())),
            closed: AtomicBool::new(false),
            obsolete: AtomicBool::new(false),
            spares: std::sync::OnceLock::new(),
        };
        (Arc::new(seg), file)
    }

    /// The active segment `id` of a roll, written over the spare at `spare` (`spare.rs`): renamed
    /// into place without the directory sync (as [`Segment::create_unlisted`]), opened for
    /// positional writes. Returns it and its write handle.
    pub(crate) fn create_reused(
        disk: &Disk,
        dir: &Path,
        id: u64,
        spare: &Path,
    ) -> Result<(Arc<Segment>, Arc<dyn StorageFile>)> {
        let path = seg_path(dir, id);
        disk.rename(spare, &path)
            .ctx(|| format!("renaming {} to {}", spare.display(), path.display()))?;
        let file = disk
            .open_overwrite(&path)
            .ctx(|| format!("opening journal segment {}", path.display()))?;
        Ok(Self::empty(disk, id, path, file))
    }

    /// Open an existing segment with a known index.
    pub(crate) fn open(
        disk: &Disk,
        dir: &Path,
        id: u64,
        index: Vec<IdxEntry>,
        closed: bool,
    ) -> Result<Arc<Segment>> {
        Self::open_with(disk, dir, id, Index::Loaded(index), closed)
    }

    /// Open a closed segment holding SQNs `first..=last` (from the manifest) without reading its
    /// index: the index file is loaded on the first lookup inside that range.
    pub(crate) fn open_lazy(
        disk: &Disk,
        dir: &Path,
        id: u64,
        first: u64,
        last: u64,
    ) -> Result<Arc<Segment>> {
        Self::open_with(disk, dir, id, Index::Lazy { first, last }, true)
    }

    fn open_with(
        disk: &Disk,
        dir: &Path,
        id: u64,
        index: Index,
        closed: bool,
    ) -> Result<Arc<Segment>> {
        let path = seg_path(dir, id);
        let file = disk
            .open(&path, false)
            .ctx(|| format!("opening journal segment {}", path.display()))?;
        Ok(Arc::new(Segment {
            id,
            path,
            disk: disk.clone(),
            file,
            index: RwLock::new(index),
            closed: AtomicBool::new(closed),
            obsolete: AtomicBool::new(false),
            spares: std::sync::OnceLock::new(),
        }))
    }

    /// Load a lazily opened segment's index (its file, or a rescan when the file is missing or
    /// damaged). Checks that the records match the range the manifest gave.
    fn load(&self) -> Result<()> {
        let (first, last) = match *self.index.read() {
            Index::Loaded(_) => return Ok(()),
            Index::Lazy { first, last } => (first, last),
        };
        if crate::storage::nowait::active() {
            // Loading reads a whole file under the index's write lock: never without waiting.
            return Err(Error::Io {
                context: format!("loading the index of {}", self.path.display()),
                source: crate::storage::nowait::would_wait("a journal segment's index"),
            });
        }
        let mut idx = self.index.write();
        if let Index::Loaded(_) = *idx {
            return Ok(());
        }
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let exact = |v: &[IdxEntry]| {
            v.first().map(|e| e.sqn) == Some(first) && v.last().map(|e| e.sqn) == Some(last)
        };
        let entries = match load_index(&*self.disk, dir, self.id)? {
            Some(v) if exact(&v) => v,
            other => {
                if other.is_some() {
                    log::warn!(
                        "journal index of {} does not match the manifest's SQNs {first}..{last}: \
                         rebuilding it from the segment",
                        self.path.display()
                    );
                }
                let v = rescan_closed(&*self.disk, &self.path)?;
                if v.iter().any(|e| e.sqn < first || e.sqn > last) {
                    return Err(Error::Corruption(format!(
                        "journal segment {} holds SQNs outside the manifest's {first}..{last}",
                        self.path.display()
                    )));
                }
                if exact(&v) {
                    write_index(&*self.disk, dir, self.id, &v)?;
                }
                v
            }
        };
        *idx = Index::Loaded(entries);
        Ok(())
    }

    /// Run `f` on the loaded index.
    fn with_index<T>(&self, f: impl FnOnce(&[IdxEntry]) -> T) -> Result<T> {
        self.load()?;
        match &*self.index.read() {
            Index::Loaded(v) => Ok(f(v)),
            Index::Lazy { .. } => unreachable!("load() leaves the index loaded"),
        }
    }

    pub(crate) fn first_sqn(&self) -> Option<u64> {
        match &*self.index.read() {
            Index::Loaded(v) => v.first().map(|e| e.sqn),
            Index::Lazy { first, .. } => Some(*first),
        }
    }
    pub(crate) fn last_sqn(&self) -> Option<u64> {
        match &*self.index.read() {
            Index::Loaded(v) => v.last().map(|e| e.sqn),
            Index::Lazy { last, .. } => Some(*last),
        }
    }
    /// Whether the index is in memory (false only for a lazily opened segment not yet read).
    #[cfg(test)]
    pub(crate) fn index_loaded(&self) -> bool {
        matches!(*self.index.read(), Index::Loaded(_))
    }
    /// Mark replaced: its files are removed when the last reference goes, or its file is kept
    /// as a spare if `spares` wants one then.
    pub(crate) fn mark_obsolete(&self, spares: Option<&Arc<Spares>>) {
        if let Some(s) = spares {
            let _ = self.spares.set(s.clone());
        }
        self.obsolete.store(true, Ordering::Release);
    }

    /// The file's length now.
    pub(crate) fn file_len(&self) -> Result<u64> {
        self.file
            .len()
            .ctx(|| format!("stat {}", self.path.display()))
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
    /// Append to the index of the active segment (always loaded).
    pub(crate) fn push_index(&self, e: IdxEntry) {
        match &mut *self.index.write() {
            Index::Loaded(v) => v.push(e),
            Index::Lazy { .. } => unreachable!("only the active segment is appended to"),
        }
    }
    pub(crate) fn entries(&self) -> Result<Vec<IdxEntry>> {
        self.with_index(|v| v.to_vec())
    }
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.file.len().unwrap_or(0)
    }

    /// Find the record with this SQN. A lazily opened segment reads its index only when `sqn`
    /// falls inside its range.
    pub(crate) fn locate(&self, sqn: u64) -> Result<Option<IdxEntry>> {
        let search = |idx: &[IdxEntry]| index_lookup(idx, sqn);
        // One read lock on the hot path (a loaded index).
        match &*self.index.read() {
            Index::Loaded(idx) => return Ok(search(idx)),
            Index::Lazy { first, last } if sqn < *first || sqn > *last => return Ok(None),
            Index::Lazy { .. } => {}
        }
        self.with_index(search)
    }

    /// Read the raw bytes of one record (one pread).
    pub(crate) fn read_raw(&self, e: IdxEntry) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; e.len as usize];
        self.read_span(&mut buf, e.offset, e.sqn)?;
        Ok(buf)
    }

    /// Fill `buf` from `offset` (one pread), for the record `sqn` that starts there.
    fn read_span(&self, buf: &mut [u8], offset: u64, sqn: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|err| {
            if err.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Corruption(format!(
                    "journal segment {} is shorter than its index says (record sqn {sqn} at \
                     {offset})",
                    self.path.display(),
                ))
            } else {
                Error::Io {
                    context: format!("reading {}", self.path.display()),
                    source: err,
                }
            }
        })
    }
}

/// Bytes read at once by [`SpanReader`].
const SPAN_READ_BYTES: u64 = 1 << 20;

/// Reads records of one segment in offset order with large sequential reads (up to 1 MiB, or
/// one record if larger) instead of one pread per record: journal compaction visits every
/// record of the segments it rewrites, most of them to drop.
pub(crate) struct SpanReader<'a> {
    seg: &'a Segment,
    /// End of the last record in the index: reads never go past it.
    end: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
}

impl<'a> SpanReader<'a> {
    /// A reader of `entries` (the segment's index, or a contiguous part of it, in offset order).
    pub(crate) fn new(seg: &'a Segment, entries: &[IdxEntry]) -> SpanReader<'a> {
        let end = entries.last().map_or(0, |e| e.offset + u64::from(e.len));
        SpanReader {
            seg,
            end,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The raw bytes of record `e`.
    pub(crate) fn record(&mut self, e: IdxEntry) -> Result<&[u8]> {
        let rec_end = e.offset + u64::from(e.len);
        if e.offset < self.start || rec_end > self.start + self.buf.len() as u64 {
            let len = SPAN_READ_BYTES
                .min(self.end.saturating_sub(e.offset))
                .max(u64::from(e.len));
            self.buf.resize(len as usize, 0);
            self.seg.read_span(&mut self.buf, e.offset, e.sqn)?;
            self.start = e.offset;
        }
        let at = (e.offset - self.start) as usize;
        Ok(&self.buf[at..at + e.len as usize])
    }
}

impl Segment {
    /// Mark closed and write the index file durably.
    pub(crate) fn close(&self, dir: &Path) -> Result<()> {
        self.with_index(|v| write_index(&*self.disk, dir, self.id, v))??;
        self.closed.store(true, Ordering::Release);
        Ok(())
    }
}

/// The entry of `sqn` in an index ordered by SQN. A segment written by the store holds one run
/// of consecutive SQNs, so the entry is at `sqn - first` — one probe, where a binary search over
/// a segment's 100,000s of entries missed the cache a dozen times on every GET (7 % of the CPU of
/// a GET-heavy run, growing with the active segment). A compacted segment has gaps: then, or
/// when the probe lands elsewhere, the binary search.
pub(crate) fn index_lookup(idx: &[IdxEntry], sqn: u64) -> Option<IdxEntry> {
    let first = idx.first()?.sqn;
    let guess = usize::try_from(sqn.checked_sub(first)?).ok()?;
    if let Some(e) = idx.get(guess) {
        if e.sqn == sqn {
            return Some(*e);
        }
    }
    idx.binary_search_by_key(&sqn, |e| e.sqn)
        .ok()
        .map(|i| idx[i])
}

pub(crate) fn write_index(
    disk: &dyn Storage,
    dir: &Path,
    id: u64,
    entries: &[IdxEntry],
) -> Result<()> {
    let mut out = Vec::with_capacity(16 + entries.len() * 20 + 4);
    out.extend_from_slice(IDX_MAGIC);
    put_u32(&mut out, IDX_VERSION);
    put_u64(&mut out, entries.len() as u64);
    for e in entries {
        put_u64(&mut out, e.sqn);
        put_u64(&mut out, e.offset);
        put_u32(&mut out, e.len);
    }
    seal(&mut out, 0);
    write_atomic(disk, dir, &idx_path(dir, id), &out)
}

/// Load an index file; `Ok(None)` when it is missing or damaged (the caller rebuilds it by scanning).
pub(crate) fn load_index(disk: &dyn Storage, dir: &Path, id: u64) -> Result<Option<Vec<IdxEntry>>> {
    let path = idx_path(dir, id);
    let buf = match disk.read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Io {
                context: format!("reading {}", path.display()),
                source: e,
            })
        }
    };
    let parsed = (|| -> Result<Vec<IdxEntry>> {
        let payload = unseal(&buf, "journal index")?;
        let mut r = Reader::new(payload, "journal index");
        if r.raw(4)? != IDX_MAGIC || r.u32()? != IDX_VERSION {
            return Err(Error::Corruption(
                "journal index: bad magic or version".into(),
            ));
        }
        let n = r.u64()? as usize;
        let mut v = Vec::with_capacity(n.min(payload.len() / 20));
        for _ in 0..n {
            v.push(IdxEntry {
                sqn: r.u64()?,
                offset: r.u64()?,
                len: r.u32()?,
            });
        }
        r.expect_end()?;
        Ok(v)
    })();
    match parsed {
        Ok(v) => Ok(Some(v)),
        Err(e) => {
            log::warn!("{}: {e}; rebuilding it from the segment", path.display());
            Ok(None)
        }
    }
}

/// Rebuild the index of a closed segment whose index file is missing or damaged. Its records were
/// all persisted to the ledger before it was opened lazily, so a damaged record only costs reads of
/// that record (they report it missing): the scan steps over it and goes on.
fn rescan_closed(disk: &dyn Storage, path: &Path) -> Result<Vec<IdxEntry>> {
    let mut entries: Vec<IdxEntry> = Vec::new();
    let mut start = 0u64;
    loop {
        let last = entries.last().map(|e| e.sqn).unwrap_or(0);
        match scan(disk, path, start, last, |e, _| {
            entries.push(e);
            Ok(())
        })? {
            ScanEnd::Clean | ScanEnd::Rolled { .. } => return Ok(entries),
            ScanEnd::TornTail { offset, reason } => {
                log::warn!(
                    "closed journal segment {}: damaged tail at offset {offset} ({reason})",
                    path.display()
                );
                return Ok(entries);
            }
            ScanEnd::Corrupt {
                offset,
                reason,
                next_valid,
            } => {
                log::error!(
                    "closed journal segment {}: damaged record at offset {offset} ({reason}); \
                     valid data resumes at {next_valid}",
                    path.display()
                );
                start = next_valid;
            }
        }
    }
}

/// Whether the damaged record at `offset` of the segment at `path`, the active one when the store
/// stopped, with valid records from `next_valid` on and records up to SQN `last_good` before it,
/// is writeback that never reached the disk (a power cut, a failed fdatasync) rather than damage
/// to records a sync had made durable. If it is, none of the records from it on was acknowledged
/// as durable, and the segment may be cut there.
///
/// In a new file, writeback that never happened reads as zeros: the damaged record's header is
/// all zeros; anything else is damage. In a reused one (`Link::floor`), a power cut leaves the
/// sectors of an unsynced write over the old file new and old in any mix, so a hole may fall
/// inside a record whose header made it. There records tell by the synced SQN each carries from
/// when it was written (every record written over a spare has one, the valid record at
/// `next_valid` included): if a valid record after the damage was written after a sync covering
/// the damaged record (its synced SQN is past `last_good`), the damaged record was durable:
/// damage. If none was, no writer was ever told it was durable: lost writeback. What that cannot
/// tell from a hole is damage to records no later record knew synced: the records of a last sync
/// with nothing written after it, or (`sync_on_write = none`) an unsynced tail a process crash
/// left whole in the page cache. Errs with an I/O error only.
pub(crate) fn lost_writeback_at(
    disk: &dyn Storage,
    path: &Path,
    offset: u64,
    next_valid: u64,
    last_good: u64,
) -> Result<bool> {
    let f = disk
        .open(path, false)
        .ctx(|| format!("opening {}", path.display()))?;
    let floor = floor_of(&*f, path)?;
    if floor == 0 {
        return zero_header_at(&*f, path, offset);
    }
    Ok(synced_from(disk, path, next_valid)?.is_some_and(|synced| synced <= last_good.max(floor)))
}

/// The highest synced SQN the valid records of the segment at `path` carry from `start` on,
/// stepping over damage; `None` when none carries one.
fn synced_from(disk: &dyn Storage, path: &Path, start: u64) -> Result<Option<u64>> {
    let mut best: Option<u64> = None;
    let (mut at, mut last) = (start, 0u64);
    loop {
        let mut seen = last;
        let end = scan(disk, path, at, last, |e, view| {
            if let Some(s) = view.synced {
                best = Some(best.map_or(s, |b| b.max(s)));
            }
            seen = e.sqn;
            Ok(())
        })?;
        last = seen;
        match end {
            ScanEnd::Corrupt { next_valid, .. } if next_valid > at => at = next_valid,
            _ => return Ok(best),
        }
    }
}

/// Whether the record header at `offset` of `file` is all zeros: bytes never written back.
fn zero_header_at(file: &dyn StorageFile, path: &Path, offset: u64) -> Result<bool> {
    let mut hdr = [0u8; HEADER_BYTES];
    match file.read_exact_at(&mut hdr, offset) {
        Ok(()) => Ok(hdr.iter().all(|b| *b == 0)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::Io {
            context: format!("reading {}", path.display()),
            source: e,
        }),
    }
}

/// How a scan of a segment ended.
#[derive(Debug)]
pub(crate) enum ScanEnd {
    /// Every byte parsed as records.
    Clean,
    /// Every byte parsed as records, then this segment's mark of a roll to segment `next_id`.
    Rolled { next_id: u64 },
    /// A partial or damaged record at the very end, with nothing valid after it: a torn write.
    TornTail { offset: u64, reason: String },
    /// A damaged record followed by valid data: real corruption.
    Corrupt {
        offset: u64,
        reason: String,
        next_valid: u64,
    },
}

/// Read a segment from the start, calling `on_record` for each valid record in order.
/// Stops at the first damaged record and classifies it as a torn tail or corruption.
/// Sequential reads through a 1 MiB window, for scans.
struct WindowReader<'a> {
    file: &'a dyn StorageFile,
    pos: u64,
    buf: Vec<u8>,
    at: usize,
}

impl WindowReader<'_> {
    fn read_exact(&mut self, out: &mut [u8]) -> std::io::Result<()> {
        let mut done = 0;
        while done < out.len() {
            if self.at == self.buf.len() {
                let want = (out.len() - done).max(1 << 20);
                self.buf.resize(want, 0);
                let n = self.file.read_at(&mut self.buf, self.pos)?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "segment ends early",
                    ));
                }
                self.buf.truncate(n);
                self.pos += n as u64;
                self.at = 0;
            }
            let n = (out.len() - done).min(self.buf.len() - self.at);
            out[done..done + n].copy_from_slice(&self.buf[self.at..self.at + n]);
            self.at += n;
            done += n;
        }
        Ok(())
    }
}

/// Read a segment from `start`, calling `on_record` for each valid record in order.
/// Stops at the first damaged record and classifies it as a torn tail or corruption. An I/O error
/// is returned as an error, never mistaken for damage.
pub(crate) fn scan(
    disk: &dyn Storage,
    path: &Path,
    start: u64,
    mut last_sqn: u64,
    mut on_record: impl FnMut(IdxEntry, &RecordView<'_>) -> Result<()>,
) -> Result<ScanEnd> {
    let max_record_bytes = MAX_RECORD_BYTES;
    let file = disk
        .open(path, false)
        .ctx(|| format!("opening {}", path.display()))?;
    let file_len = file.len().ctx(|| format!("stat {}", path.display()))?;
    let begins = start_of(&*file, path)?;
    // Records of a reused file's earlier use are not this segment's, wherever the scan starts.
    if let Start::Linked(l) = begins {
        last_sqn = last_sqn.max(l.floor);
    }
    // A scan resumed past a damaged record (`start > 0`) is past any link already.
    let start = if start > 0 {
        start
    } else {
        match begins {
            Start::Records => 0,
            Start::Linked(l) => l.bytes(),
            // Made a spare before a roll took it, and no link written over its mark since.
            Start::Spare => return Ok(ScanEnd::Clean),
            Start::TornLink => {
                return Ok(ScanEnd::TornTail {
                    offset: 0,
                    reason: "torn segment link".into(),
                })
            }
            Start::DamagedLink => {
                let reason = "segment link checksum mismatch".to_string();
                return classify(&*file, 0, file_len, 0, MAX_RECORD_BYTES, reason);
            }
        }
    };
    let mut rd = WindowReader {
        file: &*file,
        pos: start,
        buf: Vec::new(),
        at: 0,
    };
    let mut offset = start;
    let mut body = Vec::new();
    let id = id_of(path);
    loop {
        if offset == file_len {
            return Ok(ScanEnd::Clean);
        }
        // The mark a roll ended this segment with: the last bytes, right after its last record.
        // One a reused file kept from its earlier use names another segment or an older SQN.
        if file_len - offset == NEXT_BYTES {
            let mut buf = [0u8; NEXT_BYTES as usize];
            file.read_exact_at(&mut buf, offset)
                .ctx(|| format!("reading {}", path.display()))?;
            if let Some(n) =
                decode_next(&buf).filter(|n| Some(n.id) == id && n.last_sqn == last_sqn)
            {
                return Ok(ScanEnd::Rolled { next_id: n.next_id });
            }
        }
        let problem = (|| -> Result<std::result::Result<(IdxEntry, Vec<u8>), String>> {
            if file_len - offset < HEADER_BYTES as u64 {
                return Ok(Err("partial record header".into()));
            }
            let mut hdr = [0u8; HEADER_BYTES];
            rd.read_exact(&mut hdr)
                .ctx(|| format!("reading {}", path.display()))?;
            let (len, _crc) = record::header(&hdr);
            if len < MIN_BODY || len > max_record_bytes {
                return Ok(Err(format!("implausible record length {len}")));
            }
            if file_len - offset - (HEADER_BYTES as u64) < len as u64 {
                return Ok(Err(format!(
                    "record of {len} bytes runs past the end of the file"
                )));
            }
            body.resize(len, 0);
            rd.read_exact(&mut body)
                .ctx(|| format!("reading {}", path.display()))?;
            let mut whole = hdr.to_vec();
            whole.extend_from_slice(&body);
            Ok(Ok((
                IdxEntry {
                    sqn: 0,
                    offset,
                    len: (HEADER_BYTES + len) as u32,
                },
                whole,
            )))
        })()?;
        let reason = match problem {
            Ok((mut e, whole)) => match record::decode(&whole) {
                Ok(view) if view.sqn > last_sqn => {
                    e.sqn = view.sqn;
                    last_sqn = view.sqn;
                    on_record(e, &view)?;
                    offset += e.len as u64;
                    continue;
                }
                Ok(view) => format!("sqn {} does not follow {}", view.sqn, last_sqn),
                Err(err) => err.to_string(),
            },
            Err(reason) => reason,
        };
        // Damaged record at `offset`: is anything valid after it?
        return classify(&*file, offset, file_len, last_sqn, max_record_bytes, reason);
    }
}

fn classify(
    file: &dyn StorageFile,
    bad: u64,
    file_len: u64,
    last_sqn: u64,
    max_record_bytes: usize,
    reason: String,
) -> Result<ScanEnd> {
    // Look for any valid record after the damaged one. A cheap filter (plausible length that fits,
    // kind byte, an SQN just above the last good one) runs at every offset; only candidates that
    // pass it are read whole and checksummed.
    const WINDOW: usize = 4 << 20;
    const PROBE: usize = HEADER_BYTES + 9;
    let mut pos = bad + 1;
    let mut buf = vec![0u8; WINDOW + PROBE];
    while pos + PROBE as u64 <= file_len {
        let n = ((file_len - pos) as usize).min(buf.len());
        file.read_exact_at(&mut buf[..n], pos)
            .ctx(|| "reading a segment tail".to_string())?;
        let last_start = n.saturating_sub(PROBE);
        for s in 0..=last_start {
            let p = &buf[s..s + PROBE];
            let (len, _) = record::header(p);
            let at = pos + s as u64;
            if len < MIN_BODY
                || len > max_record_bytes
                || at + (HEADER_BYTES + len) as u64 > file_len
            {
                continue;
            }
            let sqn = u64::from_le_bytes(p[HEADER_BYTES..HEADER_BYTES + 8].try_into().unwrap());
            let kind = p[HEADER_BYTES + 8];
            if sqn <= last_sqn || sqn - last_sqn > (1 << 32) || record::parse_kind(kind).is_none() {
                continue;
            }
            let mut whole = vec![0u8; HEADER_BYTES + len];
            file.read_exact_at(&mut whole, at)
                .ctx(|| "reading a segment tail".to_string())?;
            if record::decode(&whole).is_ok() {
                return Ok(ScanEnd::Corrupt {
                    offset: bad,
                    reason,
                    next_valid: at,
                });
            }
        }
        pos += (last_start + 1) as u64;
    }
    Ok(ScanEnd::TornTail {
        offset: bad,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::{encode_link, index_lookup, read_start, IdxEntry, Link, Start, SPARE_MAGIC};
    use crate::storage::{SimDisk, Storage};
    use std::path::Path;

    /// How a segment begins, for every way its first bytes can be: a record (or nothing), a
    /// whole link, a link cut short, a link with a bad checksum.
    #[test]
    fn a_segment_start_is_read_as_records_a_link_or_a_torn_or_damaged_link() {
        let link = Link {
            prev_id: 7,
            prev_len: 123_456,
            floor: 0,
        };
        let whole = encode_link(link);
        let mut damaged = whole.clone();
        damaged[12] ^= 1;
        let mut record = Vec::new();
        super::record::encode(
            &mut record,
            1,
            super::record::Kind::Put,
            0,
            b"k",
            b"",
            &[],
            b"v",
        );
        let mut linked_then_record = whole.clone();
        linked_then_record.extend_from_slice(&record);
        for (bytes, want) in [
            (Vec::new(), Start::Records),
            (record.clone(), Start::Records),
            (whole.clone(), Start::Linked(link)),
            (linked_then_record, Start::Linked(link)),
            (whole[..3].to_vec(), Start::TornLink),
            (whole[..8].to_vec(), Start::TornLink),
            (whole[..whole.len() - 1].to_vec(), Start::TornLink),
            (damaged, Start::DamagedLink),
        ] {
            let d = SimDisk::new();
            let path = Path::new("/s.seg");
            d.create(path).unwrap().append(&bytes).unwrap();
            assert_eq!(read_start(&d, path).unwrap(), want, "{} bytes", bytes.len());
        }
    }

    /// A damaged record with valid records after it is corruption whatever those records' kind
    /// byte holds (put or delete, any value codec); only damage with nothing valid after it is a
    /// torn tail.
    #[test]
    fn damage_followed_by_records_of_any_kind_and_codec_is_corruption() {
        use super::record::{encode_unsequenced, seal, Kind};
        use super::{scan, ScanEnd};
        use crate::value_codec::ValueCodec;
        let rec = |sqn: u64, kind: Kind, codec: ValueCodec| {
            let mut out = Vec::new();
            encode_unsequenced(&mut out, kind, 0, b"key", b"", &[], &[7u8; 300], codec);
            seal(&mut out, sqn, 0);
            out
        };
        for codec in [ValueCodec::Raw, ValueCodec::Lz4, ValueCodec::Zstd] {
            for kind in [Kind::Put, Kind::Delete] {
                let first = rec(1, Kind::Put, ValueCodec::Raw);
                let mut bytes = first.clone();
                bytes.extend_from_slice(&rec(2, kind, codec));
                bytes.extend_from_slice(&rec(3, kind, codec));
                let total = bytes.len() as u64;
                let case = format!("{kind:?} {codec:?}");
                for (damaged_at, want_corrupt) in [(20, true), (total as usize - 5, false)] {
                    let mut b = bytes.clone();
                    b[damaged_at] ^= 0x40;
                    let d = SimDisk::new();
                    let path = Path::new("/s.seg");
                    d.create(path).unwrap().append(&b).unwrap();
                    let end = scan(&d, path, 0, 0, |_, _| Ok(())).unwrap();
                    match end {
                        ScanEnd::Corrupt {
                            offset, next_valid, ..
                        } if want_corrupt => {
                            assert_eq!((offset, next_valid), (0, first.len() as u64), "{case}")
                        }
                        ScanEnd::TornTail { .. } if !want_corrupt => {}
                        other => panic!("{case}, byte {damaged_at} damaged: {other:?}"),
                    }
                }
            }
        }
    }

    /// Scan a segment file at `path` holding `bytes`: the SQNs of its records, and how it ended.
    fn scan_bytes(path: &str, bytes: &[u8]) -> (Vec<u64>, super::ScanEnd) {
        let d = SimDisk::new();
        let path = Path::new(path);
        d.create(path).unwrap().append(bytes).unwrap();
        let mut got = Vec::new();
        let end = super::scan(&d, path, 0, 0, |e, _| {
            got.push(e.sqn);
            Ok(())
        })
        .unwrap();
        (got, end)
    }

    /// Records `sqns` back to back, each with a value of `len` bytes.
    fn records(sqns: std::ops::RangeInclusive<u64>, len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for sqn in sqns {
            let value = vec![sqn as u8; len];
            super::record::encode(
                &mut out,
                sqn,
                super::record::Kind::Put,
                0,
                b"k",
                b"",
                &[],
                &value,
            );
        }
        out
    }

    /// The file a spare was made from: a link (a new file's, or a reused one's) and records
    /// 5..=9, its start written over with the spare's mark.
    fn old_file(reused: bool) -> Vec<u8> {
        let mut f = encode_link(Link {
            prev_id: 1,
            prev_len: 10,
            floor: if reused { 3 } else { 0 },
        });
        f.extend_from_slice(&records(5..=9, 200));
        f[..SPARE_MAGIC.len()].copy_from_slice(&SPARE_MAGIC);
        f
    }

    /// A reused segment holds the records written since its link and none of the old file's,
    /// wherever those sit: right after the link when no record followed it (the old file's
    /// first record starts there when its own link was a reused one), or past the new records.
    /// A spare's mark alone holds nothing.
    #[test]
    fn a_reused_segment_holds_only_the_records_written_over_it() {
        use super::{scan, ScanEnd};
        let link = encode_link(Link {
            prev_id: 2,
            prev_len: 99,
            floor: 20,
        });
        for old_reused in [false, true] {
            let old = old_file(old_reused);
            for new in [0..=0, 21..=21, 21..=23] {
                let mut bytes = old.clone();
                let mut fresh = link.clone();
                if !new.is_empty() && *new.start() > 0 {
                    fresh.extend_from_slice(&records(new.clone(), 30));
                }
                bytes[..fresh.len()].copy_from_slice(&fresh);
                let (got, end) = scan_bytes("/s.seg", &bytes);
                let want: Vec<u64> = new.clone().filter(|s| *s > 0).collect();
                let case = format!("old file reused {old_reused}, new records {want:?}");
                assert_eq!(got, want, "{case}");
                match end {
                    ScanEnd::TornTail { offset, .. } => {
                        assert_eq!(offset, fresh.len() as u64, "{case}")
                    }
                    other => panic!("{case}: {other:?}"),
                }
            }
            let d = SimDisk::new();
            let path = Path::new("/s.seg");
            d.create(path).unwrap().append(&old).unwrap();
            assert_eq!(read_start(&d, path).unwrap(), Start::Spare);
            let mut any = false;
            let end = scan(&d, path, 0, 0, |_, _| {
                any = true;
                Ok(())
            })
            .unwrap();
            assert!(!any && matches!(end, ScanEnd::Clean), "a spare: {end:?}");
        }
    }

    /// A scan ends `Rolled` only at this segment's own successor mark, right after its last
    /// record and at the very end of the file. A mark naming another segment or an older last
    /// SQN (a reused file's, from its earlier use), a torn or damaged one, or one with bytes
    /// after it is a tail like any other: cut as torn.
    #[test]
    fn only_a_segments_own_whole_mark_after_its_last_record_ends_it_rolled() {
        use super::{encode_next, Next, ScanEnd, NEXT_BYTES};
        let own = Next {
            id: 7,
            next_id: 8,
            last_sqn: 13,
        };
        let torn = |mut b: Vec<u8>| {
            b.truncate(NEXT_BYTES as usize - 5);
            b
        };
        let flipped = |mut b: Vec<u8>| {
            b[12] ^= 1;
            b
        };
        let trailing = |mut b: Vec<u8>| {
            b.extend_from_slice(&[0; 3]);
            b
        };
        let cases: Vec<(&str, Vec<u8>, Option<u64>)> = vec![
            ("its own mark", encode_next(own), Some(8)),
            (
                "another segment's",
                encode_next(Next { id: 3, ..own }),
                None,
            ),
            (
                "an older last SQN",
                encode_next(Next {
                    last_sqn: 12,
                    ..own
                }),
                None,
            ),
            ("torn", torn(encode_next(own)), None),
            ("damaged", flipped(encode_next(own)), None),
            ("bytes after it", trailing(encode_next(own)), None),
        ];
        for (case, mark, want) in cases {
            let body = records(11..=13, 40);
            let mut bytes = body.clone();
            bytes.extend_from_slice(&mark);
            let (got, end) = scan_bytes("/00000000000000000007.seg", &bytes);
            assert_eq!(got, vec![11, 12, 13], "{case}");
            match (end, want) {
                (ScanEnd::Rolled { next_id }, Some(w)) => assert_eq!(next_id, w, "{case}"),
                (ScanEnd::TornTail { offset, .. }, None) => {
                    assert_eq!(offset, body.len() as u64, "{case}")
                }
                (other, _) => panic!("{case}: {other:?}"),
            }
        }
    }

    /// A damaged record of a new segment that was active, with valid records after it, is
    /// writeback that never reached the disk when its header is zeros, what the file held before.
    /// With its own header (a torn body, a flipped length) it is damage.
    #[test]
    fn in_a_new_file_a_hole_is_a_header_of_zeros() {
        use super::lost_writeback_at;
        let d = SimDisk::new();
        let path = Path::new("/s.seg");
        let new = records(21..=25, 300);
        let rec = new.len() / 5; // each record's length
        let at = 2 * rec; // record 23
        let next_valid = (at + rec) as u64;
        let mut written = vec![0u8; 4 * 1024];
        written[..new.len()].copy_from_slice(&new);
        // The hole: record 23's bytes are what the file held before.
        let mut hole = written.clone();
        hole[at..at + rec].fill(0);
        // Damage: record 23 with its header, a body byte flipped.
        let mut damaged = written.clone();
        damaged[at + 40] ^= 1;
        // Damage to the header's length only.
        let mut bad_len = written.clone();
        bad_len[at] ^= 0x10;
        for (bytes, want, what) in [
            (hole, true, "hole"),
            (damaged, false, "damaged body"),
            (bad_len, false, "damaged length"),
        ] {
            d.create(path).unwrap().append(&bytes).unwrap();
            assert_eq!(
                lost_writeback_at(&d, path, at as u64, next_valid, 22).unwrap(),
                want,
                "{what}"
            );
        }
    }

    /// Damage in a reused segment that was active is writeback that never reached the disk when
    /// no valid record after it was written after a sync that covered it, and damage to synced
    /// records when one was, looking past further damage for the record that knew. In a new
    /// file a record with its own header damaged is damage either way.
    #[test]
    fn damage_is_lost_writeback_unless_a_later_record_knew_it_synced() {
        use super::lost_writeback_at;
        use super::record::{encode_unsequenced, seal, Kind};
        use crate::value_codec::ValueCodec;
        let rec = |sqn: u64, synced: u64| {
            let mut out = Vec::new();
            let value = vec![sqn as u8; 600];
            encode_unsequenced(
                &mut out,
                Kind::Put,
                0,
                b"k",
                b"",
                &[],
                &value,
                ValueCodec::Raw,
            );
            seal(&mut out, sqn, synced);
            out
        };
        let reused_link = encode_link(Link {
            prev_id: 2,
            prev_len: 99,
            floor: 20,
        });
        // (synced SQN of records 21..=25, records damaged, lost writeback?)
        let cases: &[([u64; 5], &[u64], bool)] = &[
            ([20, 20, 20, 20, 20], &[23], true),
            ([20, 20, 20, 22, 22], &[23], true),
            ([20, 20, 20, 20, 23], &[23], false),
            ([20, 20, 20, 21, 21], &[23], true),
            ([19, 20, 21, 22, 24], &[23, 24], false),
            ([19, 20, 21, 22, 22], &[23, 24], true),
        ];
        for reused in [false, true] {
            for (synced, damaged, want) in cases {
                // A new file reads a hole as zeros: a record whose header is its own is damage.
                let want = &(*want && reused);
                let mut bytes = if reused {
                    reused_link.clone()
                } else {
                    Vec::new()
                };
                let mut at = Vec::new();
                for (i, sqn) in (21..=25).enumerate() {
                    at.push(bytes.len());
                    bytes.extend_from_slice(&rec(sqn, synced[i]));
                }
                for d in *damaged {
                    let start = at[(d - 21) as usize];
                    bytes[start + 100] ^= 0x20; // in the body: the header stays this record's
                }
                let first = at[(damaged[0] - 21) as usize] as u64;
                let next_valid = at[(damaged[damaged.len() - 1] - 21 + 1) as usize] as u64;
                let d = SimDisk::new();
                let path = Path::new("/s.seg");
                d.create(path).unwrap().append(&bytes).unwrap();
                let got = lost_writeback_at(&d, path, first, next_valid, damaged[0] - 1).unwrap();
                assert_eq!(
                    got, *want,
                    "reused {reused}, synced {synced:?}, damaged {damaged:?}"
                );
            }
        }
    }

    fn idx(sqns: &[u64]) -> Vec<IdxEntry> {
        sqns.iter()
            .enumerate()
            .map(|(i, &sqn)| IdxEntry {
                sqn,
                offset: i as u64 * 100,
                len: 100,
            })
            .collect()
    }

    #[test]
    fn index_lookup_finds_every_sqn_with_and_without_gaps() {
        let run = idx(&(10..20).collect::<Vec<_>>());
        let gaps = idx(&[10, 11, 14, 15, 19, 30]); // a compacted segment
        for (index, present) in [
            (&run, (10..20).collect::<Vec<u64>>()),
            (&gaps, vec![10, 11, 14, 15, 19, 30]),
        ] {
            for sqn in 0..40 {
                let got = index_lookup(index, sqn);
                let want = index.iter().find(|e| e.sqn == sqn).copied();
                assert_eq!(
                    got.map(|e| (e.sqn, e.offset)),
                    want.map(|e| (e.sqn, e.offset)),
                    "sqn {sqn}"
                );
                assert_eq!(got.is_some(), present.contains(&sqn), "sqn {sqn}");
            }
        }
        assert!(index_lookup(&[], 5).is_none());
    }

    /// Records of every size around the span reads (tiny ones, ones across a 1 MiB boundary, one
    /// larger than a span), read in order, from a sample in the middle, and after a jump back.
    #[test]
    fn a_span_reader_returns_every_record_exactly() {
        use super::{Segment, SpanReader};
        use crate::journal::JournalWriter;
        use crate::storage::SimDisk;
        let disk = SimDisk::new().handle();
        let dir = std::path::Path::new("/j");
        disk.create_dir_all(dir).unwrap();
        let (seg, file) = Segment::create(&disk, dir, 1).unwrap();
        let mut w = JournalWriter::new(seg.clone(), file);
        let sizes: Vec<usize> = (0..300)
            .map(|i| match i % 7 {
                0 => 1,
                3 => 300_001,
                5 => (3 << 20) / 2, // more than one span
                _ => 8_192 + i,
            })
            .collect();
        let record =
            |i: usize| -> Vec<u8> { (0..sizes[i]).map(|j| (i * 31 + j * 7) as u8).collect() };
        for i in 0..sizes.len() {
            w.append(i as u64 + 1, &record(i)).unwrap();
        }
        let entries = seg.entries().unwrap();
        assert_eq!(entries.len(), sizes.len());

        let mut all = SpanReader::new(&seg, &entries);
        for (i, e) in entries.iter().enumerate() {
            assert!(all.record(*e).unwrap() == record(i), "record {i} in order");
        }
        let sample = &entries[100..140];
        let mut part = SpanReader::new(&seg, sample);
        for (k, e) in sample.iter().enumerate() {
            assert!(
                part.record(*e).unwrap() == record(100 + k),
                "sampled record {}",
                100 + k
            );
        }
        // Back to the start: read again, not served from the last span.
        assert!(part.record(entries[100]).unwrap() == record(100));
        assert!(all.record(entries[0]).unwrap() == record(0));
    }
}
