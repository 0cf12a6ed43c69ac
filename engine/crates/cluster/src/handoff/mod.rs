//! Hinted handoff: which fallback vnodes a node hands back now ([`plan`]) and the resumable,
//! acknowledged batches of one transfer ([`state`]). Pure; the node does the I/O. Ownership
//! handoff (ring transitions) is not built.

pub mod plan;
pub mod state;

pub use plan::{plan_handoffs, Handoff, HandoffLimits, HandoffPlan, Wait};
pub use state::{
    Batch, BatchId, BatchLimit, HandoffError, HandoffKey, HandoffState, HandoffStatus, KeySource,
    HANDOFF_STATE_VERSION, MAX_HANDOFF_KEY_BYTES,
};
