//! An IndexQuery's reader: the coverage plan's vnodes merged into one answer in (term, key)
//! order ([`levee_cluster::Merge`]), each vnode asked for its next entries only when the merge
//! has used what it sent — so a query reads about what it returns, not a full page from every
//! vnode for each page it sends — and each vnode read on one snapshot it holds from the query's
//! first request to it until it has nothing more (`held_snapshots.rs`).

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{CoverageVnode, Merge, MergeStep};
use levee_proto::v1 as pb;
use tonic::Status;

use super::coverage::with_page_retries;
use super::Coordinator;
use crate::membership::ClusterView;
use crate::replica::Entry;

/// Vnodes asked at once while the merge waits on several.
const FETCH_CONCURRENCY: usize = 16;

/// Entries a vnode is asked to scan at least, and at most, per request.
const MIN_FETCH: usize = 16;
const MAX_FETCH: usize = 10_000;

/// How many entries to ask each of `vnodes` for first, to return `want`: an even share, so
/// the first round reads about one page in all.
pub(crate) fn first_fetch(want: usize, vnodes: usize) -> usize {
    want.div_ceil(vnodes.max(1)).clamp(MIN_FETCH, MAX_FETCH)
}

/// The next request's size for a vnode whose last `fetch` the merge used up: doubled (the vnode
/// holds more of the answer than an even share), never above a page or what is left to return.
pub(crate) fn next_fetch(fetch: usize, page: usize, left: Option<usize>) -> usize {
    let cap = left.map_or(page, |l| l.min(page)).max(MIN_FETCH);
    fetch.saturating_mul(2).min(cap).clamp(MIN_FETCH, MAX_FETCH)
}

/// One stream of the merge: a plan vnode, where it resumes and the snapshot it holds.
struct Share {
    cv: CoverageVnode,
    /// The last entry it scanned (entries up to here are in the merge or filtered out).
    after: Option<Entry>,
    snapshot: u64,
    fetch: usize,
}

/// One page of the answer.
pub struct Page {
    pub entries: Vec<Entry>,
    /// `None` while more pages follow. At the end: `Some(continuation)`, the position to resume
    /// from when the answer stopped at `max_results` with more to come.
    pub end: Option<Option<Entry>>,
}

/// A running IndexQuery; see the module documentation.
pub struct IndexReader {
    c: Arc<Coordinator>,
    view: Arc<ClusterView>,
    base: pb::IndexPageRequest,
    n_val: u32,
    shares: Vec<Share>,
    merge: Merge<Entry>,
    page_size: usize,
    max_results: Option<NonZeroUsize>,
    replans: u32,
}

impl IndexReader {
    /// A reader of `base`'s entries above `after` over `plan_vnodes`, in pages of `page_size`,
    /// at most `max_results`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        c: Arc<Coordinator>,
        view: Arc<ClusterView>,
        plan_vnodes: Vec<CoverageVnode>,
        base: pb::IndexPageRequest,
        n_val: u32,
        after: Option<Entry>,
        page_size: usize,
        max_results: Option<NonZeroUsize>,
    ) -> IndexReader {
        let want = max_results.map_or(page_size, |m| m.get().min(page_size));
        let fetch = first_fetch(want, plan_vnodes.len());
        let shares: Vec<Share> = plan_vnodes
            .into_iter()
            .map(|cv| Share {
                cv,
                after: after.clone(),
                snapshot: 0,
                fetch,
            })
            .collect();
        IndexReader {
            merge: Merge::new(shares.len(), after, max_results),
            c,
            view,
            base,
            n_val,
            shares,
            page_size: page_size.max(1),
            max_results,
            replans: 0,
        }
    }

    /// The next page, asking vnodes for more as the merge needs it. Each vnode page starts by
    /// the client's deadline, or within the node's default deadline of being asked; one refused
    /// for overload is asked again (`coverage::with_page_retries`).
    pub async fn next_page(&mut self, client_deadline: Option<Instant>) -> Result<Page, Status> {
        let default = self.c.replicas.default_deadline;
        let mut entries = Vec::new();
        loop {
            if entries.len() == self.page_size && !self.merge.finished() {
                return Ok(Page { entries, end: None });
            }
            match self.merge.step() {
                MergeStep::Entry(e) => entries.push(e),
                MergeStep::Need(starved) => self.fill(&starved, client_deadline, default).await?,
                MergeStep::Done { continuation } => {
                    return Ok(Page {
                        entries,
                        end: Some(continuation),
                    })
                }
            }
        }
    }

    /// Ask the `starved` streams for their next entries, a few vnodes at a time.
    async fn fill(
        &mut self,
        starved: &[usize],
        client_deadline: Option<Instant>,
        default: Duration,
    ) -> Result<(), Status> {
        for batch in starved.chunks(FETCH_CONCURRENCY) {
            let asks = batch.iter().map(|&i| {
                let s = &self.shares[i];
                let mut q = self.base.clone();
                q.limit = s.fetch as u32;
                let (c, view, cv, after, snapshot) = (
                    self.c.clone(),
                    self.view.clone(),
                    s.cv.clone(),
                    s.after.clone(),
                    s.snapshot,
                );
                let retried = c
                    .metrics
                    .coverage_page_retries
                    .with_label_values(&["index_query"]);
                async move {
                    with_page_retries(client_deadline, default, &retried, |deadline| {
                        c.index_page(&view, &cv, &q, after.as_ref(), snapshot, deadline)
                    })
                    .await
                }
            });
            let answers = futures_util::future::join_all(asks).await;
            for (&i, answer) in batch.iter().zip(answers) {
                self.take(i, answer)?;
            }
        }
        Ok(())
    }

    /// Stream `i`'s answer into the merge; a member that died hands its share to stand-ins.
    fn take(
        &mut self,
        i: usize,
        answer: Result<crate::replica::IndexPageOut, Status>,
    ) -> Result<(), Status> {
        match answer {
            Ok((results, last, snapshot)) => {
                self.c
                    .metrics
                    .coverage_fetched
                    .with_label_values(&["index_query"])
                    .inc_by(results.len() as u64);
                let node = self.shares[i].cv.node.clone();
                self.merge.push(i, results).map_err(|e| {
                    Status::internal(format!("member {node} answered an index page: {e}"))
                })?;
                let left = self
                    .max_results
                    .map(|m| m.get().saturating_sub(self.merge.emitted()));
                let s = &mut self.shares[i];
                s.snapshot = snapshot;
                s.fetch = next_fetch(s.fetch, self.page_size, left);
                match last {
                    Some(l) => s.after = Some(l),
                    None => self.merge.end(i).expect("stream i exists"),
                }
                Ok(())
            }
            Err(e) => {
                // A member died under the query: its vnode's share goes to other replicas,
                // resuming where it stopped (what it sent is still merged).
                if crate::peers::is_unreachable(&e) && self.replans < super::MAX_REPLANS {
                    if let Ok(stand_ins) = self.c.replan(self.n_val, &self.shares[i].cv) {
                        self.replans += 1;
                        self.merge.end(i).expect("stream i exists");
                        let (after, fetch) = (self.shares[i].after.clone(), self.shares[i].fetch);
                        for cv in stand_ins {
                            let j = self.merge.add_stream();
                            debug_assert_eq!(j, self.shares.len());
                            self.shares.push(Share {
                                cv,
                                after: after.clone(),
                                snapshot: 0,
                                fetch,
                            });
                        }
                        return Ok(());
                    }
                }
                Err(e)
            }
        }
    }

    /// Let go of the snapshots vnodes still hold (the query stopped before they ran out).
    pub async fn release(self) {
        let held: Vec<_> = self
            .shares
            .into_iter()
            .filter(|s| s.snapshot != 0)
            .map(|s| (s.cv, s.snapshot))
            .collect();
        if !held.is_empty() {
            self.c.release_snapshots(&self.view, &held).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_round_asks_for_about_one_page_in_all() {
        // (want, vnodes) -> per vnode
        for (want, vnodes, each) in [
            (1000, 22, 46),
            (1000, 1, 1000),
            (13, 22, MIN_FETCH),
            (50_000, 2, MAX_FETCH),
            (100, 0, 100),
        ] {
            assert_eq!(first_fetch(want, vnodes), each, "want {want} of {vnodes}");
        }
    }

    #[test]
    fn a_vnode_used_up_is_asked_for_double_up_to_a_page_or_what_is_left() {
        // (fetch, page, left) -> next
        for (fetch, page, left, next) in [
            (46, 1000, None, 92),
            (600, 1000, None, 1000),
            (46, 1000, Some(50), 50),
            (46, 1000, Some(3), MIN_FETCH),
            (5000, 50_000, None, MAX_FETCH),
            (16, 13, None, MIN_FETCH),
        ] {
            assert_eq!(
                next_fetch(fetch, page, left),
                next,
                "{fetch} {page} {left:?}"
            );
        }
    }
}
