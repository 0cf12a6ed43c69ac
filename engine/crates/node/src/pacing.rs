//! The pace of background streams — hinted handoff (`handoff.rs`) and ring-transition transfers
//! (`transition.rs`): each stream stays under a byte rate *and* works at most a share of the time
//! (`[handoff] max_bytes_per_sec`, `busy_percent`). The buckets and their arithmetic are the
//! store's (`levee_store::pacing`, which also paces AAE rebuilds); this adds the async wait.

use std::time::Instant;

pub use levee_store::pacing::{Pace, Pacer};

/// Times one batch against a shared [`Pacer`] and waits as it requires.
pub struct Batch<'a> {
    pacer: &'a parking_lot::Mutex<Pacer>,
    started: Instant,
}

impl<'a> Batch<'a> {
    pub fn start(pacer: &'a parking_lot::Mutex<Pacer>) -> Self {
        Batch {
            pacer,
            started: Instant::now(),
        }
    }

    /// The batch sent `bytes`: wait as the pace requires.
    pub async fn done(self, bytes: u64) {
        let wait = self.pacer.lock().after_batch(self.started.elapsed(), bytes);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}
