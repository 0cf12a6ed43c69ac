//! How far apart each member's (and each zone's) partitions sit on the ring, and the swap search
//! that spreads them. Internal to the claim (`claim.rs` decides quotas and who takes what; this
//! file only measures and repairs).
//!
//! A preflist is `n_val` consecutive partitions, so "every preflist on distinct members" is the
//! same as "two partitions of one member are at least `w = n_val` apart, going round the ring".
//! The *penalty* of a layout counts, for every pair of same-owner partitions closer than `w`, the
//! windows of `w` consecutive partitions that contain both (`w - d` for a pair `d` apart, counted
//! both ways round a small ring). It is zero exactly when every window of `w` has distinct owners,
//! and it falls as a close pair moves apart, which gives the search a slope to follow.

/// Marks a partition with no owner yet (its previous owner left, during `Claim::rebalance`).
pub(crate) const UNOWNED: usize = usize::MAX;

/// Penalty contributed by one partition `p` against the partitions within `w` of it for which
/// `same(q)` holds.
pub(crate) fn window_penalty(r: usize, w: usize, p: usize, same: impl Fn(usize) -> bool) -> u64 {
    let mut s = 0;
    for d in 1..w {
        let weight = (w - d) as u64;
        if same((p + d) % r) {
            s += weight;
        }
        if same((p + r - d) % r) {
            s += weight;
        }
    }
    s
}

/// A claim being built: an owner (member index) per partition.
pub(crate) struct Layout<'a> {
    pub owner: Vec<usize>,
    /// Member index → zone index.
    zone_of: &'a [usize],
    /// Target distance between two partitions of one member (1 = no constraint).
    node_w: usize,
    /// Preflist length, over which zones are counted.
    n_val: usize,
    /// Distinct zones wanted in every preflist (1 = no zone goal).
    zone_target: usize,
    /// Owner of each partition in the claim being replaced (`None`: left the cluster); `None`
    /// for a claim built from nothing, where movement does not count.
    prev: Option<&'a [Option<usize>]>,
}

/// What the search lowers, compared in this order: node penalty; zone shortfall plus partitions
/// moved (moving one more partition is worth it when it gives one more preflist its full set of
/// zones, not otherwise); partitions moved.
type Cost = (i64, i64, i64);

impl<'a> Layout<'a> {
    pub fn new(
        owner: Vec<usize>,
        zone_of: &'a [usize],
        node_w: usize,
        n_val: usize,
        zone_target: usize,
        prev: Option<&'a [Option<usize>]>,
    ) -> Layout<'a> {
        Layout {
            owner,
            zone_of,
            node_w: node_w.max(1),
            n_val,
            zone_target,
            prev,
        }
    }

    fn r(&self) -> usize {
        self.owner.len()
    }

    /// Penalty of member `m` at partition `p`.
    pub fn node_penalty(&self, p: usize, m: usize) -> u64 {
        window_penalty(self.r(), self.node_w, p, |q| self.owner[q] == m)
    }

    /// Penalty with a wider window: how crowded `m`'s own partitions are around `p`. Used to
    /// prefer, among conflict-free places, the one farthest from `m`'s other partitions.
    pub fn crowding(&self, p: usize, m: usize, w: usize) -> u64 {
        window_penalty(self.r(), w, p, |q| self.owner[q] == m)
    }

    /// Zones missing from the preflist starting at `start` (target minus distinct zones;
    /// unowned partitions count as no zone).
    fn zone_shortfall(&self, start: usize) -> i64 {
        let r = self.r();
        let mut zones = [usize::MAX; super::MAX_N_VAL as usize];
        let mut k = 0;
        for i in 0..self.n_val {
            let o = self.owner[(start + i) % r];
            if o == UNOWNED {
                continue;
            }
            let z = self.zone_of[o];
            if !zones[..k].contains(&z) {
                zones[k] = z;
                k += 1;
            }
        }
        self.zone_target.saturating_sub(k) as i64
    }

    /// Starts of the preflists that contain `p`.
    fn preflists_with(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let r = self.r();
        (0..self.n_val).map(move |s| (p + r - s) % r)
    }

    /// Zone shortfall of the preflists containing `p`.
    pub fn zone_shortfall_around(&self, p: usize) -> i64 {
        if self.zone_target <= 1 {
            return 0;
        }
        self.preflists_with(p).map(|s| self.zone_shortfall(s)).sum()
    }

    fn moved(&self, p: usize) -> i64 {
        match self.prev {
            Some(prev) => (prev[p] != Some(self.owner[p])) as i64,
            None => 0,
        }
    }

    /// Whether `p` is worth trying to change: in a node conflict, in a preflist short of zones,
    /// or moved (a swap might undo the move).
    fn unsettled(&self, p: usize) -> bool {
        self.node_penalty(p, self.owner[p]) > 0
            || self.moved(p) > 0
            || self.zone_shortfall_around(p) > 0
    }

    /// Penalty of the pair (x, y) if they had the same owner: the windows of `node_w` holding both.
    fn pair_weight(&self, x: usize, y: usize) -> u64 {
        let (r, w) = (self.r(), self.node_w);
        let d = (y + r - x) % r; // x → y going forward
        let mut s = 0;
        for e in [d, r - d] {
            if e > 0 && e < w {
                s += (w - e) as u64;
            }
        }
        s
    }

    /// The part of the layout's cost that depends on the owners of the partitions in `set`
    /// (distinct): node penalty of every pair with one end in `set` (pairs with both ends in it
    /// counted once), zone shortfall of every preflist containing one of them, and moves.
    fn local_cost(&self, set: &[usize]) -> Cost {
        let mut node: u64 = set
            .iter()
            .map(|&x| self.node_penalty(x, self.owner[x]))
            .sum();
        for (i, &x) in set.iter().enumerate() {
            for &y in &set[i + 1..] {
                if self.owner[x] == self.owner[y] {
                    node -= self.pair_weight(x, y);
                }
            }
        }
        let zone = if self.zone_target <= 1 {
            0
        } else {
            let mut starts = [0usize; 3 * super::MAX_N_VAL as usize];
            let mut k = 0;
            for &x in set {
                for s in self.preflists_with(x) {
                    if !starts[..k].contains(&s) {
                        starts[k] = s;
                        k += 1;
                    }
                }
            }
            starts[..k].iter().map(|&s| self.zone_shortfall(s)).sum()
        };
        let moved = set.iter().map(|&x| self.moved(x)).sum();
        (node as i64, zone, moved)
    }

    /// Change of the cost if the owners of `set` rotated: `set[0]` takes `set[1]`'s owner, ...,
    /// the last takes `set[0]`'s. As a [`Cost`]: the zone term includes the moves.
    fn rotation_delta(&mut self, set: &[usize]) -> Cost {
        let before = self.local_cost(set);
        self.rotate(set);
        let after = self.local_cost(set);
        self.unrotate(set);
        let dm = after.2 - before.2;
        (after.0 - before.0, after.1 - before.1 + dm, dm)
    }

    fn rotate(&mut self, set: &[usize]) {
        let first = self.owner[set[0]];
        for i in 0..set.len() - 1 {
            self.owner[set[i]] = self.owner[set[i + 1]];
        }
        self.owner[set[set.len() - 1]] = first;
    }

    fn unrotate(&mut self, set: &[usize]) {
        let last = self.owner[set[set.len() - 1]];
        for i in (1..set.len()).rev() {
            self.owner[set[i]] = self.owner[set[i - 1]];
        }
        self.owner[set[0]] = last;
    }

    /// Rotate owners while that lowers the cost. Sweeps the partitions in order; each unsettled
    /// one takes its best swap with another partition if that improves the layout, and a
    /// partition still in a node conflict then tries rotations of three (it takes `q`'s owner,
    /// `q` takes `s`'s, `s` takes its). Rotations keep every member's count, so balance is
    /// untouched. Ends at a layout no swap or three-rotation improves: where a better layout
    /// needs a longer chain of changes, it stops short of it (see the claim's documentation).
    pub fn improve(&mut self) {
        let r = self.r();
        loop {
            let mut changed = false;
            for p in 0..r {
                if !self.unsettled(p) {
                    continue;
                }
                let mut best: Option<(Cost, usize)> = None;
                for q in 0..r {
                    if self.owner[q] == self.owner[p] {
                        continue;
                    }
                    let d = self.rotation_delta(&[p, q]);
                    if d < (0, 0, 0) && best.is_none_or(|(b, _)| d < b) {
                        best = Some((d, q));
                    }
                }
                if let Some((_, q)) = best {
                    self.owner.swap(p, q);
                    changed = true;
                    continue;
                }
                if self.node_penalty(p, self.owner[p]) > 0 {
                    if let Some(set) = self.best_three_rotation(p) {
                        self.rotate(&set);
                        changed = true;
                    }
                }
            }
            if !changed {
                return;
            }
        }
    }

    /// The best improving rotation (p ← q ← s ← p), if any. Only members that fit at `p` as
    /// things stand are tried for `q`'s owner, which keeps this far below `r²` evaluations.
    fn best_three_rotation(&mut self, p: usize) -> Option<[usize; 3]> {
        let r = self.r();
        let a = self.owner[p];
        let qs: Vec<usize> = (0..r)
            .filter(|&q| self.owner[q] != a && self.node_penalty(p, self.owner[q]) == 0)
            .collect();
        let mut best: Option<(Cost, [usize; 3])> = None;
        for &q in &qs {
            for s in 0..r {
                if s == p || s == q || self.owner[s] == self.owner[q] {
                    continue;
                }
                let set = [p, q, s];
                let d = self.rotation_delta(&set);
                if d < (0, 0, 0) && best.is_none_or(|(b, _)| d < b) {
                    best = Some((d, set));
                }
            }
        }
        best.map(|(_, set)| set)
    }

    /// The whole layout's cost, comparable with [`Cost`] deltas: (node penalty, zone shortfall
    /// plus moves, moves).
    pub fn total_cost(&self) -> (i64, i64, i64) {
        let r = self.r();
        let node: u64 = (0..r)
            .map(|p| self.node_penalty(p, self.owner[p]))
            .sum::<u64>()
            / 2;
        let zone: i64 = if self.zone_target <= 1 {
            0
        } else {
            (0..r).map(|s| self.zone_shortfall(s)).sum()
        };
        let moved: i64 = (0..r).map(|p| self.moved(p)).sum();
        (node as i64, zone + moved, moved)
    }

    /// Change of the zone shortfall around `p` if member `m` owned `p`.
    pub fn zone_shortfall_change(&mut self, p: usize, m: usize) -> i64 {
        let before = self.zone_shortfall_around(p);
        let o = std::mem::replace(&mut self.owner[p], m);
        let after = self.zone_shortfall_around(p);
        self.owner[p] = o;
        after - before
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalty_counts_the_windows_a_close_pair_shares() {
        // A at 0 and 1 (distance 1) share w-1 = 2 windows of 3; at 0 and 2 they share 1.
        let zones = [0, 0, 0];
        let l = Layout::new(vec![0, 0, 1, 2, 1, 2], &zones, 3, 3, 1, None);
        assert_eq!(l.node_penalty(0, 0), 2);
        assert_eq!(l.node_penalty(1, 0), 2);
        // B at 2 and 4: one shared window (2,3,4); C at 3 and 5: one (3,4,5).
        assert_eq!(l.node_penalty(2, 1), 1);
        assert_eq!(l.node_penalty(5, 2), 1);
        // Round the seam: 5 and 0 are 1 apart.
        assert_eq!(l.node_penalty(5, 0), 2 + 1);
        // A ring of 4 with w = 3: two partitions 2 apart share one window each way round.
        let l = Layout::new(vec![0, 1, 0, 2], &zones, 3, 3, 1, None);
        assert_eq!(l.node_penalty(0, 0), 2);
    }

    #[test]
    fn improve_spreads_a_crowded_layout_without_changing_counts() {
        let zones = [0, 0, 0, 0];
        let mut l = Layout::new(vec![0, 0, 1, 1, 2, 2, 3, 3], &zones, 3, 3, 1, None);
        l.improve();
        let pen: u64 = (0..8).map(|p| l.node_penalty(p, l.owner[p])).sum();
        assert_eq!(pen, 0, "{:?}", l.owner);
        for m in 0..4 {
            assert_eq!(l.owner.iter().filter(|&&o| o == m).count(), 2);
        }
    }
}
