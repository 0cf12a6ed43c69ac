//! Maintenance over a member's partitions (journal compaction, AAE rebuild): one partition at a
//! time; a partition that fails is reported and the others still run; a partition is started only
//! while the longest one so far would still finish before the client's deadline, so the call
//! answers with everything it did instead of being cut off by the client with nothing.

use std::time::{Duration, Instant};

/// What happened to one partition.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<R> {
    Done(R),
    Failed(String),
    /// Not started: the deadline was too close (the text says how close).
    NotStarted(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRun<R> {
    pub partition: u32,
    pub outcome: Outcome<R>,
    pub elapsed: Duration,
}

/// When the node must have answered: the client's `grpc-timeout`, less a margin for the answer's
/// way back (a twentieth, between 100 ms and 5 s). None: the client set no deadline.
pub fn answer_by(now: Instant, client_timeout: Option<Duration>) -> Option<Instant> {
    client_timeout.map(|t| {
        let margin = (t / 20).clamp(Duration::from_millis(100), Duration::from_secs(5));
        now + t.saturating_sub(margin)
    })
}

/// Whether a partition may start at `now`: always without a deadline; otherwise only if the
/// longest partition so far (nothing known before the first: it starts if any time is left)
/// would still end before it.
pub fn may_start(now: Instant, deadline: Option<Instant>, longest: Duration) -> bool {
    match deadline {
        None => true,
        Some(d) => now < d && now + longest <= d,
    }
}

/// Runs `op` on each partition in order (see the module comment). `now` is the clock (a test
/// passes a fake one).
pub fn each_partition<R>(
    parts: &[u32],
    deadline: Option<Instant>,
    mut now: impl FnMut() -> Instant,
    mut op: impl FnMut(u32) -> Result<R, String>,
) -> Vec<PartitionRun<R>> {
    let mut out = Vec::with_capacity(parts.len());
    let mut longest = Duration::ZERO;
    for &p in parts {
        let start = now();
        if !may_start(start, deadline, longest) {
            let left = deadline.map_or(Duration::ZERO, |d| d.saturating_duration_since(start));
            out.push(PartitionRun {
                partition: p,
                outcome: Outcome::NotStarted(format!(
                    "not started: {:.1} s left before the client's deadline, the longest partition so far took {:.1} s",
                    left.as_secs_f64(),
                    longest.as_secs_f64()
                )),
                elapsed: Duration::ZERO,
            });
            continue;
        }
        let outcome = match op(p) {
            Ok(r) => Outcome::Done(r),
            Err(e) => Outcome::Failed(e),
        };
        let elapsed = now().saturating_duration_since(start);
        longest = longest.max(elapsed);
        out.push(PartitionRun {
            partition: p,
            outcome,
            elapsed,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_answer_leaves_a_margin_for_the_way_back() {
        let t0 = Instant::now();
        let cases = [
            (None, None),
            (
                Some(Duration::from_millis(500)),
                Some(Duration::from_millis(400)),
            ),
            (Some(secs(60)), Some(secs(57))),
            (Some(secs(3600)), Some(secs(3595))),
        ];
        for (timeout, want) in cases {
            assert_eq!(
                answer_by(t0, timeout).map(|d| d - t0),
                want,
                "timeout {timeout:?}"
            );
        }
    }

    #[test]
    fn a_partition_starts_only_if_the_longest_so_far_still_fits() {
        let t0 = Instant::now();
        let cases = [
            // (now offset, deadline offset, longest so far, may start)
            (0, None, 1000, true),
            (0, Some(10), 0, true),
            (10, Some(10), 0, false), // deadline reached
            (4, Some(10), 6, true),   // ends exactly at the deadline
            (5, Some(10), 6, false),  // would end after it
        ];
        for (now, deadline, longest, want) in cases {
            assert_eq!(
                may_start(
                    t0 + secs(now),
                    deadline.map(|d| t0 + secs(d)),
                    secs(longest)
                ),
                want,
                "now {now} deadline {deadline:?} longest {longest}"
            );
        }
    }

    /// Each partition takes `cost[p]` seconds of a fake clock and fails if `fails` holds it.
    fn run(costs: &[u64], fails: &[u32], deadline: Option<u64>) -> Vec<(u32, &'static str, u64)> {
        let t0 = Instant::now();
        let clock = Cell::new(t0);
        let parts: Vec<u32> = (0..costs.len() as u32).collect();
        each_partition(
            &parts,
            deadline.map(|d| t0 + secs(d)),
            || clock.get(),
            |p| {
                clock.set(clock.get() + secs(costs[p as usize]));
                if fails.contains(&p) {
                    Err(format!("partition {p} is busy"))
                } else {
                    Ok(p * 10)
                }
            },
        )
        .into_iter()
        .map(|r| {
            let state = match r.outcome {
                Outcome::Done(v) => {
                    assert_eq!(v, r.partition * 10, "the op's own result is kept");
                    "done"
                }
                Outcome::Failed(e) => {
                    assert!(e.contains("busy"), "{e}");
                    "failed"
                }
                Outcome::NotStarted(e) => {
                    assert!(e.contains("deadline"), "{e}");
                    "not started"
                }
            };
            (r.partition, state, r.elapsed.as_secs())
        })
        .collect()
    }

    #[test]
    fn a_failed_partition_does_not_stop_the_others() {
        assert_eq!(
            run(&[1, 1, 1], &[1], None),
            vec![(0, "done", 1), (1, "failed", 1), (2, "done", 1)]
        );
        assert_eq!(
            run(&[1, 1, 1], &[0, 1, 2], Some(100)),
            vec![(0, "failed", 1), (1, "failed", 1), (2, "failed", 1)]
        );
    }

    #[test]
    fn partitions_the_deadline_would_cut_are_reported_not_started() {
        // 4 s each, deadline at 10 s: 0 ends at 4, 1 at 8; 2 would end at 12.
        assert_eq!(
            run(&[4, 4, 4, 4], &[], Some(10)),
            vec![
                (0, "done", 4),
                (1, "done", 4),
                (2, "not started", 0),
                (3, "not started", 0)
            ]
        );
        // A slow partition raises the estimate for the rest even when a quick one follows.
        assert_eq!(
            run(&[7, 1, 1], &[], Some(10)),
            vec![(0, "done", 7), (1, "not started", 0), (2, "not started", 0)]
        );
        // Failures count toward the estimate too (a failure can be slow).
        assert_eq!(
            run(&[6, 1], &[0], Some(10)),
            vec![(0, "failed", 6), (1, "not started", 0)]
        );
        // The first partition always starts while time is left, even if it then overruns.
        assert_eq!(
            run(&[20, 1], &[], Some(10)),
            vec![(0, "done", 20), (1, "not started", 0)]
        );
    }
}
