//! The ring size recorded in a data directory.
//!
//! Keys are placed in partitions by `hash mod ring_size`, so opening a data directory with another
//! ring size would silently look every key up in the wrong store. The first start records the
//! size; every later start compares and refuses a different one.
//!
//! # Format
//!
//! `<data_dir>/RING_SIZE`: the ring size in ASCII decimal followed by one `\n` (`"64\n"`).
//! Written as `RING_SIZE.tmp`, fsynced, renamed over `RING_SIZE`, then the directory is fsynced,
//! so a crash leaves either no file or the whole file. A `RING_SIZE.tmp` left by a crash is
//! ignored and overwritten.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::RingSize;

pub const RING_SIZE_FILE: &str = "RING_SIZE";

/// What [`ensure_ring_size`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingSizeCheck {
    /// No size was recorded: this start recorded the configured one.
    Recorded,
    /// The recorded size is the configured one.
    Matches,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RingFileError {
    #[error("data directory {dir} was created with ring_size {recorded} and cannot be opened with ring_size {configured}: every key would be looked up in the wrong partition. Set ring_size back to {recorded} (the ring size of a data directory never changes)")]
    Mismatch {
        dir: PathBuf,
        recorded: u32,
        configured: u32,
    },
    #[error("{path} does not hold a ring size (a power of two and a newline): {content:?}")]
    Corrupt { path: PathBuf, content: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RingFileError {
    let path = path.to_path_buf();
    move |source| RingFileError::Io { op, path, source }
}

/// The ring size recorded in `data_dir`, if any.
pub fn read_ring_size(data_dir: &Path) -> Result<Option<RingSize>, RingFileError> {
    let path = data_dir.join(RING_SIZE_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("reading", &path)(e)),
    };
    let corrupt = || RingFileError::Corrupt {
        path: path.clone(),
        content: String::from_utf8_lossy(&bytes).into_owned(),
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| corrupt())?;
    let digits = text.strip_suffix('\n').ok_or_else(corrupt)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(corrupt());
    }
    let n: u32 = digits.parse().map_err(|_| corrupt())?;
    RingSize::new(n).map(Some).map_err(|_| corrupt())
}

/// Record `ring_size` in `data_dir` (which must exist), durably: temp file, fsync, rename, fsync
/// of the directory.
pub fn write_ring_size(data_dir: &Path, ring_size: RingSize) -> Result<(), RingFileError> {
    let tmp = data_dir.join(format!("{RING_SIZE_FILE}.tmp"));
    let path = data_dir.join(RING_SIZE_FILE);
    {
        let mut f = File::create(&tmp).map_err(io_err("creating", &tmp))?;
        f.write_all(format!("{ring_size}\n").as_bytes())
            .map_err(io_err("writing", &tmp))?;
        f.sync_all().map_err(io_err("fsyncing", &tmp))?;
    }
    fs::rename(&tmp, &path).map_err(io_err("renaming to", &path))?;
    OpenOptions::new()
        .read(true)
        .open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsyncing directory", data_dir))?;
    Ok(())
}

/// At every start: record `configured` if `data_dir` has no ring size yet, else check that it
/// is the recorded one.
pub fn ensure_ring_size(
    data_dir: &Path,
    configured: RingSize,
) -> Result<RingSizeCheck, RingFileError> {
    match read_ring_size(data_dir)? {
        Some(recorded) if recorded == configured => Ok(RingSizeCheck::Matches),
        Some(recorded) => Err(RingFileError::Mismatch {
            dir: data_dir.to_path_buf(),
            recorded: recorded.get(),
            configured: configured.get(),
        }),
        None => {
            write_ring_size(data_dir, configured)?;
            Ok(RingSizeCheck::Recorded)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: u32) -> RingSize {
        RingSize::new(n).unwrap()
    }

    #[test]
    fn first_start_records_later_starts_compare() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read_ring_size(d.path()).unwrap(), None);
        assert_eq!(
            ensure_ring_size(d.path(), ring(64)).unwrap(),
            RingSizeCheck::Recorded
        );
        assert_eq!(
            fs::read_to_string(d.path().join(RING_SIZE_FILE)).unwrap(),
            "64\n"
        );
        assert!(!d.path().join("RING_SIZE.tmp").exists());
        assert_eq!(
            ensure_ring_size(d.path(), ring(64)).unwrap(),
            RingSizeCheck::Matches
        );
        let e = ensure_ring_size(d.path(), ring(128)).unwrap_err();
        assert!(
            matches!(
                e,
                RingFileError::Mismatch {
                    recorded: 64,
                    configured: 128,
                    ..
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("ring_size 64") && msg.contains("ring_size 128"),
            "{msg}"
        );
        assert!(msg.contains(&d.path().display().to_string()), "{msg}");
        // The refusal changed nothing.
        assert_eq!(read_ring_size(d.path()).unwrap(), Some(ring(64)));
    }

    #[test]
    fn a_leftover_temp_file_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("RING_SIZE.tmp"), "12").unwrap();
        assert_eq!(
            ensure_ring_size(d.path(), ring(8)).unwrap(),
            RingSizeCheck::Recorded
        );
        assert_eq!(read_ring_size(d.path()).unwrap(), Some(ring(8)));
    }

    #[test]
    fn corrupt_files_are_refused_not_replaced() {
        for bad in [
            "",
            "64",
            "64\n\n",
            " 64\n",
            "+64\n",
            "48\n",
            "0\n",
            "abc\n",
            "99999999999\n",
        ] {
            let d = tempfile::tempdir().unwrap();
            fs::write(d.path().join(RING_SIZE_FILE), bad).unwrap();
            let e = ensure_ring_size(d.path(), ring(64)).unwrap_err();
            assert!(matches!(e, RingFileError::Corrupt { .. }), "{bad:?}: {e:?}");
            assert!(e.to_string().contains("RING_SIZE"), "{e}");
            assert_eq!(
                fs::read_to_string(d.path().join(RING_SIZE_FILE)).unwrap(),
                bad
            );
        }
    }

    #[test]
    fn a_missing_directory_is_an_io_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let gone = d.path().join("nope");
        let e = ensure_ring_size(&gone, ring(64)).unwrap_err();
        assert!(matches!(e, RingFileError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
