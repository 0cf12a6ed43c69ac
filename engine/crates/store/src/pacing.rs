//! Pacing for background work: a byte rate and a share of the time, each a token bucket. The
//! node's background streams (hinted handoff, ring-transition transfers; `[handoff]
//! max_bytes_per_sec`, `busy_percent`) and the store's AAE tree rebuild
//! (`Config::aae_rebuild_busy_percent`) use it.
//!
//! The byte rate alone cannot protect the foreground: what a megabyte costs depends on the
//! machine (on two cores, 2 MiB/s per handoff source took 16–23 % of a join's foreground writes
//! and no limit took 57–68 %). The busy share bounds what the work takes on any machine: a batch's
//! time covers all of its work, so work at 10 % leaves the other 90 % of its wall time to
//! requests. An unpaced rebuild is one thread folding the ledger as fast as it can, a core's worth
//! of CPU taken from requests while it runs.
//!
//! Both limits are token buckets holding a quarter of a second's worth ([`BURST`]): short work
//! (the few hints of a node that was down for a moment, the tree of a small store) goes through
//! at once, long work settles at the limits.

use std::time::{Duration, Instant};

/// What the buckets hold: this many seconds of work, or of bytes at the byte rate.
pub const BURST: f64 = 0.25;

/// What the store's buckets hold ([`Pacer::with_burst`]): its AAE rebuilds and journal
/// compactions consult their pace every few milliseconds of work and are paced from their start.
pub const STORE_BURST: f64 = 0.005;

/// A stream's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Bytes per second (0: no byte limit).
    pub max_bytes_per_sec: u64,
    /// Percent of wall time the stream may spend on batches (1–100; 100: no limit).
    pub busy_percent: u32,
}

/// A token bucket: fills at `fill` per second up to `cap`. Spending more than it holds leaves it
/// in debt, paid off by waiting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub level: f64,
    pub cap: f64,
    pub fill: f64,
}

impl Bucket {
    pub fn full(cap: f64, fill: f64) -> Bucket {
        Bucket {
            level: cap,
            cap,
            fill,
        }
    }

    /// `passed` seconds went by since the last call; spend `amount`. Returns the seconds to wait
    /// before the next spend (0 while the bucket is not in debt).
    pub fn spend(&mut self, passed: f64, amount: f64) -> f64 {
        self.level = (self.level + passed * self.fill).min(self.cap) - amount;
        if self.level >= 0.0 {
            0.0
        } else {
            -self.level / self.fill
        }
    }
}

/// The pace of one stream (or of several that run one after another, sharing the budget).
pub struct Pacer {
    bytes: Option<Bucket>,
    busy: Option<Bucket>,
    last: Instant,
}

impl Pacer {
    pub fn new(pace: Pace) -> Self {
        Self::with_burst(pace, BURST)
    }

    /// A pacer whose buckets hold `burst` seconds' worth instead of [`BURST`].
    pub fn with_burst(pace: Pace, burst: f64) -> Self {
        let rate = pace.max_bytes_per_sec as f64;
        let share = f64::from(pace.busy_percent) / 100.0;
        Pacer {
            bytes: (pace.max_bytes_per_sec > 0).then(|| Bucket::full(rate * burst, rate)),
            busy: (1..100)
                .contains(&pace.busy_percent)
                .then(|| Bucket::full(burst, share)),
            last: Instant::now(),
        }
    }

    /// A batch that took `took` sent `bytes`: how long to wait before the next one.
    pub fn after_batch(&mut self, took: Duration, bytes: u64) -> Duration {
        let now = Instant::now();
        let passed = (now - self.last).as_secs_f64();
        self.last = now;
        let by_bytes = self
            .bytes
            .as_mut()
            .map_or(0.0, |b| b.spend(passed, bytes as f64));
        let by_busy = self
            .busy
            .as_mut()
            .map_or(0.0, |b| b.spend(passed, took.as_secs_f64()));
        Duration::from_secs_f64(by_bytes.max(by_busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_lets_a_burst_through_then_holds_the_rate() {
        // (passed, amount, wait): a bucket of 1 s of work filling at 10 %.
        let mut b = Bucket::full(1.0, 0.1);
        let steps = [
            // Within the burst: no wait.
            (0.0, 0.5, 0.0),
            (0.0, 0.5, 0.0),
            // Empty: 0.2 s of work is paid with 2 s of waiting.
            (0.0, 0.2, 2.0),
            // It waited those 2 s (the debt is paid) and works 0.1 s more: 1 s.
            (2.0, 0.1, 1.0),
            // A long idle time refills it only up to its cap.
            (100.0, 1.0, 0.0),
            (0.0, 0.1, 1.0),
        ];
        for (i, (passed, amount, want)) in steps.into_iter().enumerate() {
            let got = b.spend(passed, amount);
            assert!(
                (got - want).abs() < 1e-9,
                "step {i}: waited {got}, want {want}"
            );
        }
    }

    #[test]
    fn the_pacer_takes_the_longer_of_its_two_waits_and_skips_absent_limits() {
        let pace = |rate, pct| Pace {
            max_bytes_per_sec: rate,
            busy_percent: pct,
        };
        let ms = Duration::from_millis;
        // (pace, batch time, bytes, wait) for the first batch after a full bucket (a burst of
        // 0.25 s), then the second.
        let cases = [
            // No limits.
            (pace(0, 100), ms(5000), 1u64 << 40, [0.0, 0.0]),
            // Bytes: 2.25 MB at 1 MB/s → 2 s of debt, then 3.5 s after 1.5 MB more.
            (pace(1_000_000, 100), ms(10), 2_250_000, [2.0, 3.5]),
            // Busy share: 1.25 s of work at 50 % → 2 s; then 0.4167 s more → 2.833 s.
            (pace(0, 50), ms(1250), 0, [2.0, 2.8333]),
            // Both: the longer wait.
            (pace(1_000_000, 50), ms(1250), 1_250_000, [2.0, 2.8333]),
        ];
        for (p, took, bytes, want) in cases {
            let mut pacer = Pacer::new(p);
            let first = pacer.after_batch(took, bytes).as_secs_f64();
            let second = pacer.after_batch(took / 3, bytes * 2 / 3).as_secs_f64();
            for (got, want) in [(first, want[0]), (second, want[1])] {
                // Wall time between the calls refills a little: allow 50 ms.
                assert!(
                    (got - want).abs() < 0.05,
                    "{p:?}: waited {got}, want {want}"
                );
            }
        }
    }
}
