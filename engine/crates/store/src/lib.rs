//! levee-store: a value-separated key-value engine after leveled and WiscKey.
//!
//! Keys, metadata and secondary-index entries live in an LSM *ledger*; values live in an
//! append-only *journal* addressed by sequence number (SQN). The ledger stores the SQN rather than a
//! file position, so rewriting journal segments never touches the ledger. `head` reads only the
//! ledger; `get` adds one journal read.
//!
//! ```no_run
//! use levee_store::{Config, Store};
//! let store = Store::open("/tmp/levee-example", Config::default())?;
//! let sqn = store.put(b"bucket", b"key", b"value", b"vclock", &[])?;
//! assert_eq!(store.get(b"bucket", b"key")?.unwrap().value, b"value");
//! assert_eq!(store.head(b"bucket", b"key")?.unwrap().sqn, sqn);
//! store.close()?;
//! # Ok::<(), levee_store::Error>(())
//! ```
//!
//! On-disk formats, fsync order and recovery rules are documented in `docs/engine.md`.

mod aae;
mod beacon;
mod codec;
mod compaction;
mod config;
mod error;
mod fsutil;
mod journal;
mod keys;
mod ledger;
mod lock_order;
mod manifest;
pub mod pacing;
mod priority;
mod reaper;
mod snapshot;
pub mod storage;
mod store;
mod value_codec;
mod view;

#[cfg(test)]
mod decoders_proptest;

pub use aae::{leaf_hash as aae_leaf_hash, segment_of as aae_segment, AaeKeyHash, AaeTree};
pub use compaction::{
    choose as choose_compaction_run, day_schedule, hour_allowed, CompactionThresholds,
};
pub use config::{
    Config, SyncMode, DEFAULT_COMPACTION_NICE, MAX_BUCKET_BYTES, MAX_KEY_BYTES, NUM_LEVELS,
};
pub use error::{Error, Result};
pub use keys::{validate_index_changes, validate_object_key, IndexChange, IndexOp, Term};
#[doc(hidden)]
pub use lock_order::{checked as lock_order_checked, disable as disable_lock_order_check};
pub use snapshot::{
    index_continuation, FoldOrder, FoldedHead, FoldedObject, HeadFold, HeadFoldOptions, IndexPage,
    IndexQuery, ObjectFold, Snapshot, SnapshotKind,
};
pub use store::{
    journal_fsync_quantile_bound, CompactionReport, Head, Object, Sqn, Stats, Store,
    JOURNAL_FSYNC_BUCKETS, MAX_INDEX_CHANGE_BYTES,
};
pub use value_codec::{Compression, CompressionPoint, ZSTD_LEVEL};
