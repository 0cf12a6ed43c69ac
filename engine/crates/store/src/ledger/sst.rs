//! Ledger SST files.
//!
//! ```text
//! sst    := data_block* index_block bloom_block footer
//! block  := entry* crc:u32                        entry := key:bytes value:bytes
//! index  := count:u32 (last_key:bytes offset:u64 len:u32)* crc:u32
//! bloom  := k:u8 hash:u8 0:u16 bits* crc:u32      (hash 1 XXH3, 0 the old CRC pair)
//! footer := index_off:u64 index_len:u32 bloom_off:u64 bloom_len:u32 entries:u64 max_sqn:u64
//!           magic "LVST" crc:u32                  (48 bytes; crc over the first 44)
//! ```
//! Lengths include each block's trailing CRC. The index and bloom are loaded into memory when the
//! table is opened; data blocks are read with one pread each and checked against their CRC.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bloom::Bloom;
use super::value::LedgerValue;
use crate::codec::{put_bytes, put_u32, put_u64, seal, unseal, Reader};
use crate::error::{Error, IoContext, Result};
use crate::fsutil::remove_quietly;
use crate::storage::{Disk, StorageFile};

/// `io::Write` over a storage file's appends (for the builder's `BufWriter`).
struct AppendWriter(Arc<dyn StorageFile>);

impl Write for AppendWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const MAGIC: &[u8; 4] = b"LVST";
const FOOTER_BYTES: usize = 48;

pub(crate) fn sst_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.sst"))
}

/// What the manifest records about a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableMeta {
    pub id: u64,
    pub size: u64,
    pub entries: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
}

impl TableMeta {
    pub(crate) fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest.as_slice() <= hi && self.largest.as_slice() >= lo
    }
}

/// Writes one SST from entries given in ascending key order.
pub(crate) struct TableBuilder {
    id: u64,
    path: PathBuf,
    disk: Disk,
    out: BufWriter<AppendWriter>,
    offset: u64,
    block: Vec<u8>,
    block_last: Vec<u8>,
    block_target: usize,
    index: Vec<u8>,
    index_count: u32,
    keys: Vec<Vec<u8>>,
    smallest: Option<Vec<u8>>,
    max_sqn: u64,
    bits_per_key: u32,
}

impl TableBuilder {
    pub(crate) fn create(
        disk: &Disk,
        dir: &Path,
        id: u64,
        block_target: usize,
        bits_per_key: u32,
    ) -> Result<Self> {
        let path = sst_path(dir, id);
        let f = disk
            .create_new(&path)
            .ctx(|| format!("creating SST {}", path.display()))?;
        Ok(TableBuilder {
            id,
            path,
            disk: disk.clone(),
            out: BufWriter::with_capacity(256 << 10, AppendWriter(f)),
            offset: 0,
            block: Vec::with_capacity(block_target + 1024),
            block_last: Vec::new(),
            block_target,
            index: Vec::new(),
            index_count: 0,
            keys: Vec::new(),
            smallest: None,
            max_sqn: 0,
            bits_per_key,
        })
    }

    pub(crate) fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        debug_assert!(
            self.keys.last().is_none_or(|k| k.as_slice() < key),
            "keys must ascend"
        );
        if self.smallest.is_none() {
            self.smallest = Some(key.to_vec());
        }
        if value.len() >= 8 {
            self.max_sqn = self
                .max_sqn
                .max(u64::from_le_bytes(value[..8].try_into().unwrap()));
        }
        put_bytes(&mut self.block, key);
        put_bytes(&mut self.block, value);
        self.block_last.clear();
        self.block_last.extend_from_slice(key);
        self.keys.push(key.to_vec());
        if self.block.len() >= self.block_target {
            self.finish_block()?;
        }
        Ok(())
    }

    fn finish_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        seal(&mut self.block, 0);
        self.out
            .write_all(&self.block)
            .ctx(|| format!("writing {}", self.path.display()))?;
        put_bytes(&mut self.index, &self.block_last);
        put_u64(&mut self.index, self.offset);
        put_u32(&mut self.index, self.block.len() as u32);
        self.index_count += 1;
        self.offset += self.block.len() as u64;
        self.block.clear();
        Ok(())
    }

    /// Bytes written so far (an estimate of the final size, for splitting outputs).
    pub(crate) fn size(&self) -> u64 {
        self.offset + self.block.len() as u64
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Write index, bloom and footer, fsync the file (not its directory entry: the caller syncs
    /// the directory once for all the tables it made), and return the table's metadata.
    pub(crate) fn finish(mut self) -> Result<TableMeta> {
        self.finish_block()?;
        let mut index = Vec::with_capacity(self.index.len() + 8);
        put_u32(&mut index, self.index_count);
        index.extend_from_slice(&self.index);
        seal(&mut index, 0);
        let bloom = Bloom::build(self.keys.iter().map(|k| k.as_slice()), self.bits_per_key);
        let mut bloom_buf = Vec::new();
        bloom.encode(&mut bloom_buf);
        seal(&mut bloom_buf, 0);
        let index_off = self.offset;
        let bloom_off = index_off + index.len() as u64;
        let mut footer = Vec::with_capacity(FOOTER_BYTES);
        put_u64(&mut footer, index_off);
        put_u32(&mut footer, index.len() as u32);
        put_u64(&mut footer, bloom_off);
        put_u32(&mut footer, bloom_buf.len() as u32);
        put_u64(&mut footer, self.keys.len() as u64);
        put_u64(&mut footer, self.max_sqn);
        footer.extend_from_slice(MAGIC);
        seal(&mut footer, 0);
        debug_assert_eq!(footer.len(), FOOTER_BYTES);
        let path = self.path.clone();
        for part in [&index, &bloom_buf, &footer] {
            self.out
                .write_all(part)
                .ctx(|| format!("writing {}", path.display()))?;
        }
        let file = self.out.into_inner().map_err(|e| Error::Io {
            context: format!("flushing {}", path.display()),
            source: e.into_error(),
        })?;
        file.0
            .sync_data()
            .ctx(|| format!("syncing {}", path.display()))?;
        let size = bloom_off + bloom_buf.len() as u64 + FOOTER_BYTES as u64;
        Ok(TableMeta {
            id: self.id,
            size,
            entries: self.keys.len() as u64,
            smallest: self.smallest.unwrap_or_default(),
            largest: self.keys.pop().unwrap_or_default(),
        })
    }

    /// Give up on this table and remove its file.
    pub(crate) fn abandon(self) {
        let path = self.path.clone();
        let disk = self.disk.clone();
        drop(self);
        remove_quietly(&*disk, &path);
    }
}

struct BlockHandle {
    last_key: Vec<u8>,
    offset: u64,
    len: u32,
}

struct Loaded {
    index: Vec<BlockHandle>,
    bloom: Bloom,
}

/// An open SST: its metadata, in-memory block index and bloom filter, and the file for block reads.
/// A table whose index, bloom or footer is damaged stays in the version but answers every read that
/// reaches it with a corruption error.
pub(crate) struct Table {
    pub meta: TableMeta,
    pub path: PathBuf,
    disk: Disk,
    file: Arc<dyn StorageFile>,
    loaded: std::result::Result<Loaded, String>,
    obsolete: std::sync::atomic::AtomicBool,
    /// Offsets of data blocks found damaged (each logged once), for `Stats`.
    damaged: parking_lot::Mutex<std::collections::BTreeSet<u64>>,
}

impl Drop for Table {
    fn drop(&mut self) {
        // On the reaper thread: the last holder is often a GET that took the version before a
        // merge replaced this table.
        if self.obsolete.load(std::sync::atomic::Ordering::Acquire) {
            crate::reaper::remove_later(
                self.disk.clone(),
                vec![self.path.clone()],
                self.file.clone(),
            );
        }
    }
}

impl Table {
    pub(crate) fn open(disk: &Disk, dir: &Path, meta: TableMeta) -> Result<Table> {
        let path = sst_path(dir, meta.id);
        let file = disk
            .open(&path, false)
            .ctx(|| format!("opening SST {}", path.display()))?;
        let loaded = Self::load(&*file, &path).map_err(|e| {
            log::error!("SST {}: {e}", path.display());
            e.to_string()
        });
        Ok(Table {
            meta,
            path,
            disk: disk.clone(),
            file,
            loaded,
            obsolete: std::sync::atomic::AtomicBool::new(false),
            damaged: parking_lot::Mutex::new(std::collections::BTreeSet::new()),
        })
    }

    fn load(file: &dyn StorageFile, path: &Path) -> Result<Loaded> {
        let len = file.len().ctx(|| format!("stat {}", path.display()))?;
        if len < FOOTER_BYTES as u64 {
            return Err(Error::Corruption(format!(
                "SST {} is too short",
                path.display()
            )));
        }
        let read = |off: u64, n: usize| -> Result<Vec<u8>> {
            if off.checked_add(n as u64).is_none_or(|end| end > len) {
                return Err(Error::Corruption(format!(
                    "SST {}: block beyond end of file",
                    path.display()
                )));
            }
            let mut b = vec![0u8; n];
            file.read_exact_at(&mut b, off)
                .ctx(|| format!("reading {}", path.display()))?;
            Ok(b)
        };
        let footer = read(len - FOOTER_BYTES as u64, FOOTER_BYTES)?;
        let f = unseal(&footer, "SST footer")?;
        let mut r = Reader::new(f, "SST footer");
        let (index_off, index_len) = (r.u64()?, r.u32()? as usize);
        let (bloom_off, bloom_len) = (r.u64()?, r.u32()? as usize);
        let _entries = r.u64()?;
        let _max_sqn = r.u64()?;
        if r.raw(4)? != MAGIC {
            return Err(Error::Corruption(format!(
                "SST {}: bad magic",
                path.display()
            )));
        }
        let index_buf = read(index_off, index_len)?;
        let index_payload = unseal(&index_buf, "SST index")?;
        let mut r = Reader::new(index_payload, "SST index");
        let n = r.u32()? as usize;
        let mut index = Vec::with_capacity(n.min(index_payload.len()));
        for _ in 0..n {
            index.push(BlockHandle {
                last_key: r.bytes()?.to_vec(),
                offset: r.u64()?,
                len: r.u32()?,
            });
        }
        r.expect_end()?;
        let bloom_buf = read(bloom_off, bloom_len)?;
        let bloom = Bloom::decode(unseal(&bloom_buf, "SST bloom")?).ok_or_else(|| {
            Error::Corruption(format!("SST {}: bad bloom filter", path.display()))
        })?;
        Ok(Loaded { index, bloom })
    }

    /// Damaged parts found so far: data blocks that failed their checksum, plus one if the
    /// index, bloom or footer could not be loaded.
    pub(crate) fn damaged_blocks(&self) -> u64 {
        self.damaged.lock().len() as u64 + u64::from(self.loaded.is_err())
    }

    fn loaded(&self) -> Result<&Loaded> {
        self.loaded.as_ref().map_err(|e| {
            Error::Corruption(format!("SST {} is unreadable: {e}", self.path.display()))
        })
    }

    fn read_block(&self, h: &BlockHandle) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; h.len as usize];
        self.file.read_exact_at(&mut buf, h.offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Corruption(format!(
                    "SST {}: block past end of file",
                    self.path.display()
                ))
            } else {
                Error::Io {
                    context: format!("reading {}", self.path.display()),
                    source: e,
                }
            }
        })?;
        let n = unseal(&buf, "SST data block")
            .map_err(|e| {
                if self.damaged.lock().insert(h.offset) {
                    log::error!(
                        "SST {}: damaged data block at offset {}: {e}; reads of its keys fail",
                        self.path.display(),
                        h.offset
                    );
                }
                Error::Corruption(format!(
                    "{} at offset {}: {e}",
                    self.path.display(),
                    h.offset
                ))
            })?
            .len();
        buf.truncate(n);
        Ok(buf)
    }

    /// Look a key up: bloom (in memory), block index (in memory), then one block read.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<LedgerValue>> {
        let l = self.loaded()?;
        if !l.bloom.may_contain(key) {
            return Ok(None);
        }
        let i = l.index.partition_point(|h| h.last_key.as_slice() < key);
        let Some(h) = l.index.get(i) else {
            return Ok(None);
        };
        let block = self.read_block(h)?;
        let mut r = Reader::new(&block, "SST data block");
        while !r.is_empty() {
            let k = r.bytes()?;
            let v = r.bytes()?;
            if k == key {
                return LedgerValue::decode(v).map(Some);
            }
            if k > key {
                break;
            }
        }
        Ok(None)
    }

    /// Every entry of the table, in order (for merges and range reads).
    pub(crate) fn iter_from(self: &Arc<Self>, start: &[u8]) -> Result<TableIter> {
        let l = self.loaded()?;
        let block = l.index.partition_point(|h| h.last_key.as_slice() < start);
        Ok(TableIter {
            table: self.clone(),
            block,
            entries: Vec::new().into_iter(),
            start: start.to_vec(),
        })
    }

    /// Mark the table replaced: its file is removed when the last reference (a version or a
    /// snapshot) goes.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Iterates a table's entries from a start key, one block at a time.
pub(crate) struct TableIter {
    table: Arc<Table>,
    block: usize,
    entries: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    start: Vec<u8>,
}

impl Iterator for TableIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.entries.next() {
                return Some(Ok(e));
            }
            let l = match self.table.loaded() {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            let h = l.index.get(self.block)?;
            self.block += 1;
            let block = match self.table.read_block(h) {
                Ok(b) => b,
                Err(e) => {
                    self.block = usize::MAX - 1;
                    return Some(Err(e));
                }
            };
            let mut out = Vec::new();
            let mut r = Reader::new(&block, "SST data block");
            while !r.is_empty() {
                match (r.bytes(), r.bytes()) {
                    (Ok(k), Ok(v)) => {
                        if k >= self.start.as_slice() {
                            out.push((k.to_vec(), v.to_vec()));
                        }
                    }
                    (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
                }
            }
            self.entries = out.into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(sqn: u64) -> Vec<u8> {
        let mut b = Vec::new();
        LedgerValue {
            sqn,
            tombstone: false,
            value_size: 1,
            value_hash: 2,
            last_modified: 0,
            metadata: vec![],
        }
        .encode(&mut b);
        b
    }

    fn build(dir: &Path, n: u32) -> TableMeta {
        let mut b =
            TableBuilder::create(&crate::storage::RealStorage::shared(), dir, 1, 256, 10).unwrap();
        for i in 0..n {
            b.add(format!("k{i:06}").as_bytes(), &value(i as u64))
                .unwrap();
        }
        b.finish().unwrap()
    }

    #[test]
    fn write_then_point_reads_and_iteration() {
        let d = tempfile::tempdir().unwrap();
        let meta = build(d.path(), 1000);
        assert_eq!(meta.entries, 1000);
        assert_eq!(meta.smallest, b"k000000");
        assert_eq!(meta.largest, b"k000999");
        let t =
            Arc::new(Table::open(&crate::storage::RealStorage::shared(), d.path(), meta).unwrap());
        for i in (0..1000).step_by(7) {
            let v = t
                .get(format!("k{i:06}").as_bytes())
                .unwrap()
                .expect("present");
            assert_eq!(v.sqn, i as u64);
        }
        assert!(t.get(b"k0005005").unwrap().is_none());
        assert!(t.get(b"zzz").unwrap().is_none());
        let all: Vec<_> = t
            .iter_from(b"k000990")
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        assert_eq!(all.len(), 10);
        assert_eq!(all[0], b"k000990");
    }

    #[test]
    fn flipped_bytes_give_corruption_never_a_wrong_value() {
        let d = tempfile::tempdir().unwrap();
        let meta = build(d.path(), 300);
        let path = sst_path(d.path(), 1);
        let orig = std::fs::read(&path).unwrap();
        for pos in (0..orig.len()).step_by(13) {
            let mut b = orig.clone();
            b[pos] ^= 0x20;
            std::fs::write(&path, &b).unwrap();
            let t = Table::open(
                &crate::storage::RealStorage::shared(),
                d.path(),
                meta.clone(),
            )
            .unwrap();
            for i in (0..300).step_by(11) {
                match t.get(format!("k{i:06}").as_bytes()) {
                    Ok(Some(v)) => assert_eq!(v.sqn, i as u64, "wrong value after flip at {pos}"),
                    Ok(None) => panic!("key k{i:06} vanished without an error after flip at {pos}"),
                    Err(e) => assert!(e.is_corruption(), "{e}"),
                }
            }
        }
    }
}
