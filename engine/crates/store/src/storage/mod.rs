//! The storage layer: every file and directory operation of the engine goes through [`Storage`].
//!
//! Two implementations: [`RealStorage`] (the operating system's filesystem) and [`SimDisk`] (an
//! in-memory disk that remembers, per file and per directory entry, what has been made durable, so
//! a simulated power cut drops exactly what a real one could, and that can inject I/O errors).
//!
//! The engine relies on these durability rules, which both implementations follow:
//! - file data is durable after [`StorageFile::sync_data`] returns `Ok`;
//! - a created, renamed or removed directory entry is durable after [`Storage::sync_dir`] of the
//!   directory holding it returns `Ok` (a new directory: after `sync_dir` of its parent);
//! - an `Err` from `sync_data` may have dropped the unsynced data for good, even if a later sync of
//!   the same file succeeds ("fsyncgate"): the engine must not trust that file's unsynced tail again.

pub mod nowait;
mod sim;

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

pub use nowait::without_waiting;
pub use sim::{FaultKind, FaultPlan, SimDisk, SimHook, SimOp};

/// An open file. Reads are positional; writes append, except into a reused journal segment,
/// whose old bytes are written over in place (`write_at`, `journal/spare.rs`).
#[allow(clippy::len_without_is_empty)] // `len` is the file size; nothing asks for emptiness
pub trait StorageFile: Send + Sync {
    /// Read up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Append all of `data` at the end of the file.
    fn append(&self, data: &[u8]) -> io::Result<()>;
    /// Write all of `data` at `offset`, over what is there and past the end if it runs on. Only
    /// on a file opened with [`Storage::open_overwrite`] (an appending one ignores `offset`).
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Cut (or extend with zeros) the file to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Make the file's data (and its size) durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Reserve the blocks of `[offset, offset + len)` without changing the file's length, so
    /// appends there need no block allocation. Appends and reads see nothing of it. The default
    /// reserves nothing (the simulated disk has no blocks to allocate).
    fn reserve(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// Give back whatever [`StorageFile::reserve`] left past the end of the file; its length
    /// and content stay.
    fn release_reserved(&self) -> io::Result<()> {
        Ok(())
    }

    /// Fill `buf` from `offset`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        read_exact_with(self, buf, offset)
    }
}

/// Fill `buf` from `offset` with `read_at` calls; `UnexpectedEof` if the file is shorter.
fn read_exact_with<F: StorageFile + ?Sized>(
    f: &F,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match f.read_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file ends before the requested range",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A handle on a held directory lock; dropping it releases the lock.
pub type LockGuard = Box<dyn Any + Send + Sync>;

/// File and directory operations on paths.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Create `path` and any missing parents (not yet durable: see the module docs).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Create a new, empty file for reading and appending; `AlreadyExists` if it exists.
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;
    /// Create or truncate a file for reading and appending.
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;
    /// Open an existing file for reading (and appending / truncating if `write`).
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn StorageFile>>;
    /// Open an existing file for reading and positional writes ([`StorageFile::write_at`]).
    fn open_overwrite(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>>;
    /// Rename `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Remove a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// The names of the entries of a directory (files and directories), in no particular order.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Make the directory's entries durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Whether a file or directory exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Take an exclusive lock named by `path` (creating the file); `WouldBlock` when held.
    fn lock(&self, path: &Path) -> io::Result<LockGuard>;

    /// The whole content of a file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open(path, false)?;
        let len = f.len()?;
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)?;
        Ok(buf)
    }
}

/// The shared handle the engine passes around.
pub type Disk = Arc<dyn Storage>;

/// The operating system's filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealStorage;

impl RealStorage {
    /// A shared handle on the real filesystem.
    pub fn shared() -> Disk {
        Arc::new(RealStorage)
    }
}

struct RealFile(File);

impl StorageFile for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if nowait::active() {
            return nowait::pread_nowait(&self.0, buf, offset);
        }
        self.0.read_at(buf, offset)
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        (&self.0).write_all(data)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
        else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // SAFETY: a plain system call on a descriptor this value owns; no memory is passed.
        let r =
            unsafe { libc::fallocate(self.0.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    fn release_reserved(&self) -> io::Result<()> {
        // Setting the length the file has frees the blocks reserved past it (ext4, XFS).
        self.0.set_len(self.0.metadata()?.len())
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if nowait::active() {
            return read_exact_with(self, buf, offset);
        }
        self.0.read_exact_at(buf, offset)
    }
}

impl Storage for RealStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let f = OpenOptions::new()
            .create_new(true)
            .read(true)
            .append(true)
            .open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        // Not O_APPEND (incompatible with O_TRUNC): the cursor starts at 0 of the empty file and
        // every write advances it, so writes still land at the end.
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn StorageFile>> {
        if nowait::active() {
            return Err(nowait::would_wait("opening a file"));
        }
        let f = OpenOptions::new().read(true).append(write).open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn open_overwrite(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Arc::new(RealFile(f)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(path)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(f)),
            Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "held by another open store",
            )),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        if nowait::active() {
            return Err(nowait::would_wait("reading a whole file"));
        }
        std::fs::read(path)
    }
}
