//! Errors returned by the store. Every variant carries enough context to tell a user what went wrong
//! and where; corruption is always reported, never papered over with a wrong value.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T> = std::result::Result<T, Error>;

/// What a store operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is empty or too long.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The bucket is empty, too long, or contains a byte the ledger key encoding reserves.
    #[error("invalid bucket: {0}")]
    InvalidBucket(String),
    /// An index change names an invalid field or term.
    #[error("invalid index change: {0}")]
    InvalidIndex(String),
    /// The value exceeds `Config::max_value_bytes`.
    #[error("value of {size} bytes exceeds the limit of {limit} bytes (Config::max_value_bytes)")]
    ValueTooLarge { size: usize, limit: usize },
    /// The metadata exceeds `Config::max_metadata_bytes`.
    #[error(
        "metadata of {size} bytes exceeds the limit of {limit} bytes (Config::max_metadata_bytes)"
    )]
    MetadataTooLarge { size: usize, limit: usize },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// The store was closed; open it again to use it.
    #[error("the store is closed")]
    Closed,
    /// Another open store (in this or another process) holds the directory's lock.
    #[error("store directory {path} is locked by another open store")]
    Locked { path: PathBuf },
    /// An I/O error, with what the store was doing.
    #[error("I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// Stored data failed a checksum or structural check.
    #[error("corruption detected: {0}")]
    Corruption(String),
    /// A background task failed; the store refuses writes until reopened.
    #[error("store is unusable after a background failure (reopen it): {0}")]
    Poisoned(String),
    /// A query is malformed: invalid regex, mixed term types, a continuation from another query.
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// The snapshot outlived its lifetime and its files were released.
    #[error(
        "snapshot expired after {lifetime_secs} s (Config::snapshot_*_lifetime); take a new one"
    )]
    SnapshotExpired { lifetime_secs: u64 },
    /// The operation is already running (e.g. a second AAE rebuild or journal compaction).
    #[error("busy: {0}")]
    Busy(String),
}

impl Error {
    /// The same error for another caller (a failed group append answers every writer in it). An
    /// I/O error keeps its kind and message; its source chain becomes that text.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::InvalidKey(s) => Error::InvalidKey(s.clone()),
            Error::InvalidBucket(s) => Error::InvalidBucket(s.clone()),
            Error::InvalidIndex(s) => Error::InvalidIndex(s.clone()),
            Error::ValueTooLarge { size, limit } => Error::ValueTooLarge {
                size: *size,
                limit: *limit,
            },
            Error::MetadataTooLarge { size, limit } => Error::MetadataTooLarge {
                size: *size,
                limit: *limit,
            },
            Error::InvalidConfig(s) => Error::InvalidConfig(s.clone()),
            Error::Closed => Error::Closed,
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption(s) => Error::Corruption(s.clone()),
            Error::Poisoned(s) => Error::Poisoned(s.clone()),
            Error::InvalidQuery(s) => Error::InvalidQuery(s.clone()),
            Error::SnapshotExpired { lifetime_secs } => Error::SnapshotExpired {
                lifetime_secs: *lifetime_secs,
            },
            Error::Busy(s) => Error::Busy(s.clone()),
        }
    }

    /// True when the error means stored bytes are damaged.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption(_))
    }
}

/// Attach context to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}
