//! Small filesystem helpers: durable atomic replace and directory fsync.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};

/// fsync a directory so that created, renamed or removed entries are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("syncing directory {}", dir.display()))
}

/// Write `data` to `path` via a temporary file: write, fsync, rename, fsync the directory.
pub(crate) fn write_atomic(dir: &Path, path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&tmp)
        .ctx(|| format!("creating {}", tmp.display()))?;
    f.write_all(data)
        .ctx(|| format!("writing {}", tmp.display()))?;
    f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).ctx(|| format!("renaming {} into place", tmp.display()))?;
    sync_dir(dir)
}

/// Remove a file, ignoring "not found".
pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(crate::error::Error::Io {
            context: format!("removing {}", path.display()),
            source: e,
        }),
        _ => Ok(()),
    }
}
