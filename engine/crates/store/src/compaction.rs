//! Journal compaction decisions, as pure functions: which run of adjacent segments to rewrite
//! (`choose`, leveled's rule) and when to run (`day_schedule`).
//!
//! A segment's score is the percentage of its sampled bytes still live (lower is better). For each
//! run of 1..=`max_run` adjacent segments, the run's target is
//! `single + (run_threshold − single) · (len − 1) / (max_run − 1)` and its score is
//! `target − mean(segment scores)`; the best run with a positive score is chosen (ties → longer).

/// Thresholds of the run choice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionThresholds {
    /// A single segment is worth compacting when less than this percentage of it is live.
    pub single_file: f64,
    /// A run of `max_run` segments is worth compacting when its mean live percentage is below this.
    pub run: f64,
    pub max_run: usize,
}

impl Default for CompactionThresholds {
    fn default() -> Self {
        CompactionThresholds {
            single_file: 30.0,
            run: 70.0,
            max_run: 8,
        }
    }
}

/// Choose `(start, len)` of the run to compact among segments with these live percentages.
pub fn choose(scores: &[f64], t: &CompactionThresholds) -> Option<(usize, usize)> {
    let max_run = t.max_run.max(1);
    let mut best: Option<(f64, usize, usize)> = None;
    for len in 1..=max_run.min(scores.len()) {
        let target = if max_run == 1 {
            t.single_file
        } else {
            t.single_file + (t.run - t.single_file) * (len - 1) as f64 / (max_run - 1) as f64
        };
        for start in 0..=scores.len() - len {
            let mean = scores[start..start + len].iter().sum::<f64>() / len as f64;
            let score = target - mean;
            if score > 0.0
                && best.is_none_or(|(b, _, blen)| score > b || (score == b && len > blen))
            {
                best = Some((score, start, len));
            }
        }
    }
    best.map(|(_, s, l)| (s, l))
}

/// Whether `hour` (0–23, UTC) is inside the window `[start, end)`; a window may wrap midnight,
/// and `start == end` means all day.
pub fn hour_allowed(hour: u32, start: u32, end: u32) -> bool {
    if start == end {
        true
    } else if start < end {
        (start..end).contains(&hour)
    } else {
        hour >= start || hour < end
    }
}

/// Start times (Unix seconds) of `runs` compactions on the UTC day beginning at `day_start`:
/// random 15-minute slots inside the allowed hours, sorted. `seed` makes it reproducible.
pub fn day_schedule(
    day_start: u64,
    start_hour: u32,
    end_hour: u32,
    runs: u32,
    seed: u64,
) -> Vec<u64> {
    let slots: Vec<u64> = (0..96u64)
        .filter(|s| hour_allowed((s / 4) as u32, start_hour, end_hour))
        .collect();
    if slots.is_empty() {
        return Vec::new();
    }
    let mut x = seed ^ day_start.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out: Vec<u64> = (0..runs)
        .map(|_| {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            day_start + slots[(r % slots.len() as u64) as usize] * 900
        })
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_follows_the_leveled_rule() {
        let t = CompactionThresholds {
            single_file: 30.0,
            run: 70.0,
            max_run: 4,
        };
        // Nothing worth doing: everything fully live.
        assert_eq!(choose(&[100.0, 100.0, 100.0], &t), None);
        assert_eq!(choose(&[], &t), None);
        // One nearly empty segment: compact it alone (target 30 − 10 = 20).
        assert_eq!(choose(&[100.0, 10.0, 100.0], &t), Some((1, 1)));
        // Four at 60 %: a single one misses its 30 % target, the run of four (target 70) wins.
        assert_eq!(choose(&[60.0, 60.0, 60.0, 60.0], &t), Some((0, 4)));
        // Runs never exceed max_run.
        assert_eq!(choose(&[50.0; 6], &t).map(|(_, l)| l), Some(4));
        // The best score wins even when shorter: 5 % alone (25) beats 4 × ~51 % (≈19).
        assert_eq!(choose(&[60.0, 5.0, 60.0, 80.0], &t), Some((1, 1)));
        // Ties go to the longer run.
        let t2 = CompactionThresholds {
            single_file: 50.0,
            run: 50.0,
            max_run: 2,
        };
        assert_eq!(choose(&[40.0, 40.0], &t2), Some((0, 2)));
        // max_run 1 uses the single-file threshold only.
        let t1 = CompactionThresholds {
            single_file: 30.0,
            run: 70.0,
            max_run: 1,
        };
        assert_eq!(choose(&[50.0, 20.0], &t1), Some((1, 1)));
    }

    #[test]
    fn windows_wrap_midnight() {
        // 22 → 04 covers 22, 23, 0, 1, 2, 3.
        let allowed: Vec<u32> = (0..24).filter(|&h| hour_allowed(h, 22, 4)).collect();
        assert_eq!(allowed, vec![0, 1, 2, 3, 22, 23]);
        assert_eq!((0..24).filter(|&h| hour_allowed(h, 1, 3)).count(), 2);
        assert_eq!((0..24).filter(|&h| hour_allowed(h, 5, 5)).count(), 24);
    }

    #[test]
    fn schedule_stays_inside_the_window() {
        let day = 1_700_006_400; // a UTC midnight
        for seed in 0..50 {
            let runs = day_schedule(day, 22, 4, 4, seed);
            assert_eq!(runs.len(), 4);
            assert!(runs.windows(2).all(|w| w[0] <= w[1]));
            for r in runs {
                let hour = ((r - day) / 3600) as u32;
                assert!(hour_allowed(hour, 22, 4), "seed {seed}: hour {hour}");
                assert_eq!((r - day) % 900, 0, "15-minute slots");
            }
        }
        assert_ne!(
            day_schedule(day, 0, 0, 24, 1),
            day_schedule(day, 0, 0, 24, 2)
        );
    }
}
