//! What the background tasks that move data (ring transitions, rebuilds) share: their progress
//! files, written durably and read back with a clear error, and a warning logged once per
//! change (or every 10 s) while a step keeps failing.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Writes `p` as JSON durably: temp file, fsync, rename, fsync of the directory.
pub fn save_json<T: Serialize>(path: &Path, p: &T) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec(p)?)
            .and_then(|_| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("fsyncing {}", dir.display()))?;
    }
    Ok(())
}

/// Reads the JSON at `path` (the default when there is none); a file that does not parse is an
/// error naming it and saying what removing it does (`if_removed`).
pub fn load_json<T: DeserializeOwned + Default>(path: &Path, if_removed: &str) -> Result<T> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b)
            .with_context(|| format!("{} is damaged; {if_removed}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// A warning logged when it changes, or every 10 s while it stays the same.
#[derive(Default)]
pub struct Throttled(Mutex<Option<(String, Instant)>>);

impl Throttled {
    pub fn warn(&self, what: &str, msg: String) {
        let mut last = self.0.lock();
        if last
            .as_ref()
            .is_none_or(|(m, at)| *m != msg || at.elapsed() >= Duration::from_secs(10))
        {
            log::warn!("{what}: {msg}; retrying");
            *last = Some((msg, Instant::now()));
        }
    }
}
