//! Small filesystem helpers over the storage layer: durable atomic replace, directory fsync,
//! durable directory creation.

use std::path::Path;

use crate::error::{IoContext, Result};
use crate::storage::Storage;

/// fsync a directory so that created, renamed or removed entries are durable.
pub(crate) fn sync_dir(disk: &dyn Storage, dir: &Path) -> Result<()> {
    disk.sync_dir(dir)
        .ctx(|| format!("syncing directory {}", dir.display()))
}

/// Create `dir` (and missing parents) and make every new entry durable: each directory created is
/// fsynced into its parent, so files later made durable inside it cannot vanish with it.
pub(crate) fn create_dir_durable(disk: &dyn Storage, dir: &Path) -> Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty() && !disk.exists(a))
        .collect();
    disk.create_dir_all(dir)
        .ctx(|| format!("creating {}", dir.display()))?;
    // Deepest first is fine: each sync makes one new entry durable in its parent.
    for d in missing {
        if let Some(parent) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(disk, parent)?;
        }
    }
    Ok(())
}

/// Write `data` to `path` via a temporary file: write, fsync, rename, fsync the directory.
pub(crate) fn write_atomic(disk: &dyn Storage, dir: &Path, path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let f = disk
        .create(&tmp)
        .ctx(|| format!("creating {}", tmp.display()))?;
    f.append(data)
        .ctx(|| format!("writing {}", tmp.display()))?;
    f.sync_data().ctx(|| format!("syncing {}", tmp.display()))?;
    drop(f);
    disk.rename(&tmp, path)
        .ctx(|| format!("renaming {} into place", tmp.display()))?;
    sync_dir(disk, dir)
}

/// Remove a file, ignoring "not found".
pub(crate) fn remove_if_exists(disk: &dyn Storage, path: &Path) -> Result<()> {
    match disk.remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(crate::error::Error::Io {
            context: format!("removing {}", path.display()),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Remove a file in a destructor: "not found" is fine, anything else is logged.
pub(crate) fn remove_quietly(disk: &dyn Storage, path: &Path) {
    if let Err(e) = disk.remove_file(path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("could not remove {}: {e}", path.display());
        }
    }
}
