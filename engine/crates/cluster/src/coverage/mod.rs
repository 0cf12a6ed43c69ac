//! Coverage queries (IndexQuery, ListKeys): which vnodes to ask so that every key-partition is
//! answered once ([`plan`]), the merge of their sorted answers ([`merge`]), and the continuation
//! token that resumes a paged query ([`token`]). Pure functions; the node does the I/O.

pub mod merge;
pub mod plan;
pub mod token;

pub use crate::wire::FormatError;
pub use merge::{merge_sorted, IndexEntry, Merge, MergeError, MergeStep, MergedPage};
pub use plan::{
    coverage_plan, CoverageError, CoveragePlan, CoverageVnode, FallbackVnode, KeyFilter,
};
pub use token::{
    query_hash, Continuation, ContinuationError, MAX_TOKEN_KEY_BYTES, MAX_TOKEN_TERM_BYTES,
    TOKEN_VERSION,
};
