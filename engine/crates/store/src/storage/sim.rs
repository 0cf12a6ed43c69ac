//! `SimDisk`: an in-memory disk that knows what is durable, for power-loss and I/O-fault tests.
//!
//! Every file is an inode with its current bytes (what the page cache shows) and its durable bytes
//! (as of the last successful `sync_data`). The namespace is kept twice: the current directory
//! entries and the durable ones (as of the last `sync_dir` of each directory). [`SimDisk::power_cut`]
//! returns the disk a machine would find after losing power: only durable entries and, for each
//! file, its durable bytes plus (optionally) a random prefix of what was appended after them — a
//! torn write — and, of what was written over bytes the disk held (a reused journal segment), any
//! subset of whole 512-byte sectors. A failed `sync_data` loses the dirty bytes for good: a later
//! successful sync persists what the disk held there before (zeros past its old end), as Linux
//! may after an fsync error.
//!
//! A [`FaultPlan`] injects errors: at one numbered operation, at random by a seed, or a crash at a
//! numbered operation after which every call fails (the machine stopped; call `power_cut` next).

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{LockGuard, Storage, StorageFile};

/// The kinds of operation a fault plan can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimOp {
    Create,
    Open,
    Read,
    Append,
    SetLen,
    Sync,
    SyncDir,
    Rename,
    Remove,
    List,
    CreateDir,
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`: the device failed.
    Eio,
    /// `ENOSPC`: the disk is full.
    Enospc,
}

/// Which operations fail. Operations are numbered from 0 in the order the disk sees them.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// The machine stops at this operation: it and every later one fail with `EIO`.
    pub crash_at: Option<u64>,
    /// This one operation fails with this error; later ones succeed.
    pub fail_at: Option<(u64, FaultKind)>,
    /// Each eligible operation fails with probability 1/`random_one_in` (0: never).
    pub random_one_in: u64,
    /// Seed of the random faults.
    pub seed: u64,
    /// Operation kinds eligible for random faults (empty: all).
    pub only: Vec<SimOp>,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Byte ranges whose dirty data a failed sync dropped: a later sync persists what the disk
    /// held there before (zeros past its old end).
    lost: Vec<(usize, usize)>,
}

impl Inode {
    /// What a successful sync makes durable: the data, except ranges a failed sync lost, which
    /// keep what the disk held before (zeros past its old end).
    fn synced_image(&self) -> Vec<u8> {
        let mut d = self.data.clone();
        for &(a, b) in &self.lost {
            let b = b.min(d.len());
            if a < b {
                let held = self.durable.len().clamp(a, b);
                d[a..held].copy_from_slice(&self.durable[a..held]);
                d[held..b].fill(0);
            }
        }
        d
    }

    /// Where the data first differs from the durable bytes: everything before is clean.
    fn clean_prefix(&self) -> usize {
        self.data
            .iter()
            .zip(&self.durable)
            .position(|(a, b)| a != b)
            .unwrap_or(self.data.len().min(self.durable.len()))
    }
}

type InodeRef = Arc<Mutex<Inode>>;

/// The unit a power cut never tears: bytes written over what the disk held are kept or lost a
/// sector at a time.
const SECTOR_BYTES: usize = 512;

struct Namespace {
    files: HashMap<PathBuf, InodeRef>,
    dirs: HashSet<PathBuf>,
    durable_files: HashMap<PathBuf, InodeRef>,
    durable_dirs: HashSet<PathBuf>,
    locks: HashSet<PathBuf>,
}

/// Called with every operation before it runs (tests use it to pause a thread inside an I/O call).
pub type SimHook = Arc<dyn Fn(SimOp) + Send + Sync>;

struct Shared {
    ns: Mutex<Namespace>,
    plan: Mutex<FaultPlan>,
    hook: Mutex<Option<SimHook>>,
    ops: AtomicU64,
    injected: AtomicU64,
    dead: std::sync::atomic::AtomicBool,
}

/// An in-memory disk with a durability model and fault injection. Cheap to clone (shared state).
#[derive(Clone)]
pub struct SimDisk {
    s: Arc<Shared>,
}

impl std::fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDisk")
            .field("ops", &self.ops())
            .field("dead", &self.is_dead())
            .finish()
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fault_error(kind: FaultKind, op: SimOp, n: u64) -> io::Error {
    match kind {
        FaultKind::Eio => io::Error::other(format!("simulated EIO ({op:?}, operation {n})")),
        FaultKind::Enospc => io::Error::new(
            io::ErrorKind::StorageFull,
            format!("simulated ENOSPC ({op:?}, operation {n})"),
        ),
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl Default for SimDisk {
    fn default() -> Self {
        Self::new()
    }
}

impl SimDisk {
    /// An empty disk with a durable root directory `/`.
    pub fn new() -> SimDisk {
        let root: HashSet<PathBuf> = [PathBuf::from("/")].into_iter().collect();
        SimDisk {
            s: Arc::new(Shared {
                ns: Mutex::new(Namespace {
                    files: HashMap::new(),
                    dirs: root.clone(),
                    durable_files: HashMap::new(),
                    durable_dirs: root,
                    locks: HashSet::new(),
                }),
                plan: Mutex::new(FaultPlan::default()),
                hook: Mutex::new(None),
                ops: AtomicU64::new(0),
                injected: AtomicU64::new(0),
                dead: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// A shared handle usable as the engine's storage.
    pub fn handle(&self) -> super::Disk {
        Arc::new(self.clone())
    }

    /// Replace the fault plan. Operation numbers count from the disk's creation (see `ops`).
    pub fn set_plan(&self, plan: FaultPlan) {
        *self.s.plan.lock() = plan;
    }

    /// Install (or remove) a hook called before every operation, on the calling thread.
    pub fn set_hook(&self, hook: Option<SimHook>) {
        *self.s.hook.lock() = hook;
    }

    /// Operations performed so far.
    pub fn ops(&self) -> u64 {
        self.s.ops.load(Ordering::SeqCst)
    }

    /// Faults injected so far (the crash counts once).
    pub fn injected(&self) -> u64 {
        self.s.injected.load(Ordering::SeqCst)
    }

    /// Whether the machine has stopped (a crash point was reached or the power was cut).
    pub fn is_dead(&self) -> bool {
        self.s.dead.load(Ordering::SeqCst)
    }

    /// Cut the power: this disk stops answering (every call fails) and the returned disk holds what
    /// survived. With `torn`, each file keeps a random prefix (chosen by `seed`) of the bytes
    /// appended after its last sync; without, it keeps exactly its durable bytes.
    pub fn power_cut(&self, seed: u64, torn: bool) -> SimDisk {
        self.s.dead.store(true, Ordering::SeqCst);
        let ns = self.s.ns.lock();
        let mut rng = seed;
        let dirs: HashSet<PathBuf> = ns
            .durable_dirs
            .iter()
            .filter(|d| ancestors_durable(d, &ns.durable_dirs))
            .cloned()
            .collect();
        let mut files = HashMap::new();
        let mut paths: Vec<&PathBuf> = ns.durable_files.keys().collect();
        paths.sort();
        for p in paths {
            if !p.parent().is_some_and(|d| dirs.contains(d)) {
                continue;
            }
            let ino = ns.durable_files[p].lock();
            let mut data = ino.durable.clone();
            if torn {
                // The dirty bytes from the first one that differs from the disk. Those appended
                // past the old end keep a prefix (writeback in file order, cut anywhere). Those
                // written over bytes the disk held (a reused journal segment) keep any subset of
                // their sectors: writeback and the device's cache reorder them, and a device
                // writes a sector whole or not at all (what a reused segment's link at offset 0
                // relies on).
                rng = splitmix(rng);
                let from = ino.clean_prefix();
                if ino.data.len() > from && !rng.is_multiple_of(3) {
                    let img = ino.synced_image();
                    let old_end = ino.durable.len().min(ino.data.len()).max(from);
                    // How many of the overwritten sectors reach the disk: a quarter, half or
                    // three quarters of them, each one at random.
                    rng = splitmix(rng);
                    let quarters = 1 + rng % 3;
                    let mut at = from;
                    while at < old_end {
                        let end = ((at / SECTOR_BYTES + 1) * SECTOR_BYTES).min(old_end);
                        rng = splitmix(rng);
                        if rng % 4 < quarters {
                            data[at..end].copy_from_slice(&img[at..end]);
                        }
                        at = end;
                    }
                    let extra = ino.data.len() - old_end;
                    if extra > 0 {
                        let keep = (splitmix(rng) % (extra as u64 + 1)) as usize;
                        let end = old_end + keep;
                        data.resize(end.max(data.len()), 0);
                        data[old_end..end].copy_from_slice(&img[old_end..end]);
                    }
                }
            }
            files.insert(
                p.clone(),
                Arc::new(Mutex::new(Inode {
                    durable: data.clone(),
                    data,
                    lost: Vec::new(),
                })),
            );
        }
        SimDisk {
            s: Arc::new(Shared {
                ns: Mutex::new(Namespace {
                    durable_files: files.clone(),
                    files,
                    durable_dirs: dirs.clone(),
                    dirs,
                    locks: HashSet::new(),
                }),
                plan: Mutex::new(FaultPlan::default()),
                hook: Mutex::new(None),
                ops: AtomicU64::new(0),
                injected: AtomicU64::new(0),
                dead: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Paths of the files that currently exist, sorted (for test diagnostics).
    pub fn list_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.s.ns.lock().files.keys().cloned().collect();
        v.sort();
        v
    }

    /// Overwrite bytes of an existing file, durably, without counting an operation: for tests that
    /// damage stored data on purpose.
    pub fn corrupt(&self, path: &Path, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let ns = self.s.ns.lock();
        let ino = ns.files.get(path).ok_or_else(|| not_found(path))?;
        let mut ino = ino.lock();
        let end = (offset + bytes.len()).min(ino.data.len());
        if offset < end {
            let n = end - offset;
            ino.data[offset..end].copy_from_slice(&bytes[..n]);
            let dl = ino.durable.len().min(end);
            if offset < dl {
                let m = dl - offset;
                ino.durable[offset..dl].copy_from_slice(&bytes[..m]);
            }
        }
        Ok(())
    }

    /// Remove a file durably without counting an operation (tests that lose a file on purpose).
    pub fn delete_durably(&self, path: &Path) -> io::Result<()> {
        let mut ns = self.s.ns.lock();
        ns.files.remove(path).ok_or_else(|| not_found(path))?;
        ns.durable_files.remove(path);
        Ok(())
    }

    /// Count one operation and decide whether it fails.
    fn step(&self, op: SimOp) -> io::Result<()> {
        let hook = self.s.hook.lock().clone();
        if let Some(h) = hook {
            h(op);
        }
        let n = self.s.ops.fetch_add(1, Ordering::SeqCst);
        if self.is_dead() {
            return Err(io::Error::other(format!(
                "simulated machine is off ({op:?}, operation {n})"
            )));
        }
        let plan = self.s.plan.lock();
        if plan.crash_at.is_some_and(|c| n >= c) {
            self.s.dead.store(true, Ordering::SeqCst);
            self.s.injected.fetch_add(1, Ordering::SeqCst);
            return Err(io::Error::other(format!(
                "simulated machine stopped ({op:?}, operation {n})"
            )));
        }
        if let Some((at, kind)) = plan.fail_at {
            if at == n {
                self.s.injected.fetch_add(1, Ordering::SeqCst);
                return Err(fault_error(kind, op, n));
            }
        }
        if plan.random_one_in > 0 && (plan.only.is_empty() || plan.only.contains(&op)) {
            let r = splitmix(plan.seed ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D));
            if r.is_multiple_of(plan.random_one_in) {
                let writes = matches!(op, SimOp::Append | SimOp::Create | SimOp::CreateDir);
                let kind = if writes && (r >> 32).is_multiple_of(2) {
                    FaultKind::Enospc
                } else {
                    FaultKind::Eio
                };
                self.s.injected.fetch_add(1, Ordering::SeqCst);
                return Err(fault_error(kind, op, n));
            }
        }
        Ok(())
    }

    fn parent_exists(ns: &Namespace, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(d) if ns.dirs.contains(d) => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: parent directory does not exist", path.display()),
            )),
        }
    }

    fn file(&self, ino: InodeRef, writable: bool) -> Arc<dyn StorageFile> {
        Arc::new(SimFile {
            disk: self.clone(),
            ino,
            writable,
        })
    }
}

fn ancestors_durable(d: &Path, durable: &HashSet<PathBuf>) -> bool {
    d.ancestors().skip(1).all(|a| durable.contains(a))
}

struct SimFile {
    disk: SimDisk,
    ino: InodeRef,
    writable: bool,
}

impl SimFile {
    fn check_writable(&self) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "file opened read-only",
            ))
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.disk.step(SimOp::Read)?;
        let ino = self.ino.lock();
        let off = offset as usize;
        if off >= ino.data.len() {
            return Ok(0);
        }
        let n = buf.len().min(ino.data.len() - off);
        buf[..n].copy_from_slice(&ino.data[off..off + n]);
        Ok(n)
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // One operation per call, as the real implementation does one pread for it.
        self.disk.step(SimOp::Read)?;
        let ino = self.ino.lock();
        let off = offset as usize;
        if off
            .checked_add(buf.len())
            .is_none_or(|e| e > ino.data.len())
        {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file ends before the requested range",
            ));
        }
        buf.copy_from_slice(&ino.data[off..off + buf.len()]);
        Ok(())
    }
    fn append(&self, data: &[u8]) -> io::Result<()> {
        self.check_writable()?;
        self.disk.step(SimOp::Append)?;
        self.ino.lock().data.extend_from_slice(data);
        Ok(())
    }
    /// Counted (and faulted) as an append: it is the journal's write.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable()?;
        self.disk.step(SimOp::Append)?;
        let mut ino = self.ino.lock();
        let (at, end) = (offset as usize, offset as usize + data.len());
        if ino.data.len() < end {
            ino.data.resize(end, 0);
        }
        ino.data[at..end].copy_from_slice(data);
        Ok(())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable()?;
        self.disk.step(SimOp::SetLen)?;
        let mut ino = self.ino.lock();
        ino.data.resize(len as usize, 0);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        let r = self.disk.step(SimOp::Sync);
        let mut ino = self.ino.lock();
        match r {
            Ok(()) => {
                ino.durable = ino.synced_image();
                ino.lost.clear();
                Ok(())
            }
            Err(e) => {
                if !self.disk.is_dead() {
                    // The kernel dropped the dirty pages' errors: their data never reaches the disk.
                    let from = ino.clean_prefix();
                    let to = ino.data.len();
                    if from < to {
                        ino.lost.push((from, to));
                    }
                }
                Err(e)
            }
        }
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.ino.lock().data.len() as u64)
    }
}

impl Storage for SimDisk {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.step(SimOp::CreateDir)?;
        let mut ns = self.s.ns.lock();
        for a in path.ancestors() {
            if a.as_os_str().is_empty() {
                continue;
            }
            if ns.files.contains_key(a) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a file", a.display()),
                ));
            }
            ns.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn create_new(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.step(SimOp::Create)?;
        let mut ns = self.s.ns.lock();
        Self::parent_exists(&ns, path)?;
        if ns.files.contains_key(path) || ns.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists", path.display()),
            ));
        }
        let ino: InodeRef = Arc::default();
        ns.files.insert(path.to_path_buf(), ino.clone());
        Ok(self.file(ino, true))
    }
    fn create(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.step(SimOp::Create)?;
        let mut ns = self.s.ns.lock();
        Self::parent_exists(&ns, path)?;
        if let Some(ino) = ns.files.get(path).cloned() {
            ino.lock().data.clear();
            return Ok(self.file(ino, true));
        }
        let ino: InodeRef = Arc::default();
        ns.files.insert(path.to_path_buf(), ino.clone());
        Ok(self.file(ino, true))
    }
    fn open(&self, path: &Path, write: bool) -> io::Result<Arc<dyn StorageFile>> {
        self.step(SimOp::Open)?;
        let ns = self.s.ns.lock();
        let ino = ns.files.get(path).cloned().ok_or_else(|| not_found(path))?;
        Ok(self.file(ino, write))
    }
    fn open_overwrite(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        self.open(path, true)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.step(SimOp::Rename)?;
        let mut ns = self.s.ns.lock();
        Self::parent_exists(&ns, to)?;
        let ino = ns.files.remove(from).ok_or_else(|| not_found(from))?;
        ns.files.insert(to.to_path_buf(), ino);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.step(SimOp::Remove)?;
        let mut ns = self.s.ns.lock();
        ns.files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.step(SimOp::List)?;
        let ns = self.s.ns.lock();
        if !ns.dirs.contains(path) {
            return Err(not_found(path));
        }
        let child = |p: &PathBuf| -> Option<String> {
            (p.parent() == Some(path)).then(|| p.file_name().unwrap().to_string_lossy().into())
        };
        Ok(ns
            .files
            .keys()
            .filter_map(child)
            .chain(ns.dirs.iter().filter_map(child))
            .collect())
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.step(SimOp::SyncDir)?;
        let mut ns = self.s.ns.lock();
        if !ns.dirs.contains(path) {
            return Err(not_found(path));
        }
        let under = |p: &Path| p.parent() == Some(path);
        ns.durable_files.retain(|p, _| !under(p));
        let now: Vec<(PathBuf, InodeRef)> = ns
            .files
            .iter()
            .filter(|(p, _)| under(p))
            .map(|(p, i)| (p.clone(), i.clone()))
            .collect();
        ns.durable_files.extend(now);
        ns.durable_dirs.retain(|p| !under(p));
        let dirs: Vec<PathBuf> = ns.dirs.iter().filter(|p| under(p)).cloned().collect();
        ns.durable_dirs.extend(dirs);
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let ns = self.s.ns.lock();
        ns.files.contains_key(path) || ns.dirs.contains(path)
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        let mut ns = self.s.ns.lock();
        if !ns.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "held by another open store",
            ));
        }
        Ok(Box::new(SimLock {
            disk: self.clone(),
            path: path.to_path_buf(),
        }))
    }
}

struct SimLock {
    disk: SimDisk,
    path: PathBuf,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        self.disk.s.ns.lock().locks.remove(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// A disk with a durable directory `/a` holding a new file `name` whose `data` is fsynced.
    fn disk_with_synced_file(name: &str, data: &[u8]) -> (SimDisk, Arc<dyn StorageFile>) {
        let d = SimDisk::new();
        d.create_dir_all(&p("/a")).unwrap();
        d.sync_dir(&p("/")).unwrap();
        let f = d.create_new(&p(name)).unwrap();
        f.append(data).unwrap();
        f.sync_data().unwrap();
        (d, f)
    }

    #[test]
    fn a_power_cut_keeps_only_synced_data_and_synced_entries() {
        let (d, f) = disk_with_synced_file("/a/x", b"hello");
        f.append(b" world").unwrap();
        // Entry not yet durable: the whole file is gone.
        let after = d.power_cut(1, false);
        assert!(!after.exists(&p("/a/x")));
        assert!(after.exists(&p("/a")));

        let (d, f) = disk_with_synced_file("/a/x", b"hello");
        d.sync_dir(&p("/a")).unwrap();
        f.append(b" world").unwrap();
        let after = d.power_cut(1, false);
        assert_eq!(after.read(&p("/a/x")).unwrap(), b"hello");
        // The old disk is off.
        assert!(d.read(&p("/a/x")).is_err());
    }

    #[test]
    fn an_unsynced_directory_loses_its_files() {
        let d = SimDisk::new();
        d.create_dir_all(&p("/a/b")).unwrap();
        d.sync_dir(&p("/a")).unwrap(); // b is durable in a, but a is not durable in /
        let f = d.create_new(&p("/a/b/x")).unwrap();
        f.append(b"1").unwrap();
        f.sync_data().unwrap();
        d.sync_dir(&p("/a/b")).unwrap();
        let after = d.power_cut(0, false);
        assert!(!after.exists(&p("/a/b/x")));
    }

    #[test]
    fn renames_and_removes_need_a_directory_sync() {
        let (d, _f) = disk_with_synced_file("/a/tmp", b"v1");
        d.rename(&p("/a/tmp"), &p("/a/m")).unwrap();
        d.sync_dir(&p("/a")).unwrap();
        d.remove_file(&p("/a/m")).unwrap();
        let after = d.power_cut(0, false);
        assert_eq!(after.read(&p("/a/m")).unwrap(), b"v1");
        assert!(!after.exists(&p("/a/tmp")));
    }

    #[test]
    fn torn_tails_keep_a_prefix_of_the_unsynced_bytes() {
        let mut seen = HashSet::new();
        for seed in 0..64 {
            let d = SimDisk::new();
            let f = d.create_new(&p("/x")).unwrap();
            f.append(b"abc").unwrap();
            f.sync_data().unwrap();
            d.sync_dir(&p("/")).unwrap();
            f.append(b"defgh").unwrap();
            let got = d.power_cut(seed, true).read(&p("/x")).unwrap();
            assert!(b"abcdefgh".starts_with(&got) && got.len() >= 3, "{got:?}");
            seen.insert(got.len());
        }
        assert!(seen.len() > 3, "torn lengths seen: {seen:?}");
    }

    /// Bytes written over in place (a reused journal segment) reach the disk a whole sector at a
    /// time, in any order: after a power cut each sector is all new or all old, any mix of them
    /// (later ones without earlier ones too); what ran past the old end keeps a prefix; the file
    /// keeps its old length. Synced, they all stay.
    #[test]
    fn bytes_written_over_in_place_keep_any_whole_sectors_after_a_power_cut() {
        let old = vec![b'o'; 4 * SECTOR_BYTES];
        let mut patterns = HashSet::new();
        let mut later_without_earlier = false;
        for seed in 0..64 {
            let (d, f) = disk_with_synced_file("/a/x", &old);
            d.sync_dir(&p("/a")).unwrap();
            f.write_at(b"abc", 0).unwrap();
            f.sync_data().unwrap();
            // Over every sector from byte 3 on, and 100 bytes past the old end.
            f.write_at(&[b'n'; 4 * SECTOR_BYTES + 97], 3).unwrap();
            let got = d.power_cut(seed, true).read(&p("/a/x")).unwrap();
            assert!(got.starts_with(b"abc"), "{:?}", &got[..8]);
            assert!(got.len() >= old.len(), "the file lost its old length");
            let mut pattern = Vec::new();
            for (i, sector) in got[..old.len()].chunks(SECTOR_BYTES).enumerate() {
                let body = if i == 0 { &sector[3..] } else { sector };
                let new = body.iter().all(|b| *b == b'n');
                assert!(new || body.iter().all(|b| *b == b'o'), "sector {i} torn");
                pattern.push(new);
            }
            let past = &got[old.len()..];
            assert!(
                past.iter().all(|b| *b == b'n'),
                "past the old end: a prefix of the new bytes"
            );
            later_without_earlier |= pattern.windows(2).any(|w| !w[0] && w[1]);
            patterns.insert(pattern);
        }
        assert!(patterns.len() > 4, "sector patterns seen: {patterns:?}");
        assert!(
            later_without_earlier,
            "no later sector reached the disk without an earlier one"
        );
        let (d, f) = disk_with_synced_file("/a/x", &old);
        d.sync_dir(&p("/a")).unwrap();
        f.write_at(&[b'n'; 4 * SECTOR_BYTES + 97], 3).unwrap();
        f.sync_data().unwrap();
        let got = d.power_cut(7, true).read(&p("/a/x")).unwrap();
        assert_eq!(got.len(), 4 * SECTOR_BYTES + 100);
        assert!(got[3..].iter().all(|b| *b == b'n'), "synced bytes all kept");
    }

    #[test]
    fn a_failed_sync_loses_the_dirty_bytes_even_if_a_later_sync_succeeds() {
        let d = SimDisk::new();
        let f = d.create_new(&p("/x")).unwrap();
        d.sync_dir(&p("/")).unwrap();
        f.append(b"AAAA").unwrap();
        let sync_op = d.ops();
        d.set_plan(FaultPlan {
            fail_at: Some((sync_op, FaultKind::Eio)),
            ..FaultPlan::default()
        });
        assert!(f.sync_data().is_err());
        f.append(b"BB").unwrap();
        f.sync_data().unwrap();
        // The page cache still shows the bytes; the disk has zeros where they were.
        assert_eq!(d.read(&p("/x")).unwrap(), b"AAAABB");
        assert_eq!(d.power_cut(0, false).read(&p("/x")).unwrap(), b"\0\0\0\0BB");
    }

    /// Bytes written over old ones that a failed sync dropped keep the old bytes on the disk
    /// (zeros only past the old end), even after a later sync succeeds.
    #[test]
    fn a_failed_sync_over_old_bytes_leaves_the_old_bytes() {
        let (d, f) = disk_with_synced_file("/a/x", b"oooo");
        d.sync_dir(&p("/a")).unwrap();
        f.write_at(b"nnnnnn", 2).unwrap();
        d.set_plan(FaultPlan {
            fail_at: Some((d.ops(), FaultKind::Eio)),
            ..FaultPlan::default()
        });
        assert!(f.sync_data().is_err());
        f.write_at(b"BB", 8).unwrap();
        f.sync_data().unwrap();
        assert_eq!(d.read(&p("/a/x")).unwrap(), b"oonnnnnnBB");
        assert_eq!(
            d.power_cut(0, false).read(&p("/a/x")).unwrap(),
            b"oooo\0\0\0\0BB"
        );
    }

    #[test]
    fn a_crash_point_stops_every_later_operation() {
        let d = SimDisk::new();
        let f = d.create_new(&p("/x")).unwrap();
        d.set_plan(FaultPlan {
            crash_at: Some(d.ops() + 1),
            ..FaultPlan::default()
        });
        f.append(b"1").unwrap();
        assert!(f.append(b"2").is_err());
        assert!(d.is_dead());
        assert!(f.sync_data().is_err());
    }
}
