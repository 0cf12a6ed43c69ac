//! Coverage queries across members: ListKeys and IndexQuery ask the vnodes of a coverage plan
//! (`levee_cluster::coverage_plan`: each key-partition answered by exactly one live primary
//! vnode, through its filter), page by page, each page one `FoldKeys` / `IndexPage` call —
//! in process for this node's vnodes, through `levee.v1.Node` for the others.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{coverage_plan, CoveragePlan, CoverageVnode, KeyFilter, Role, Target};
use levee_proto::v1 as pb;
use levee_store::Term;
use prometheus::IntCounter;
use tonic::{Code, Status};

use super::{remaining, Coordinator};
use crate::membership::ClusterView;
use crate::replica::{entry_of, entry_pb, index_page_query, IndexPageOut};

/// How long, in all, a page of a ListKeys or IndexQuery stream without a client deadline keeps
/// being asked again after its vnode refused it for overload.
pub(crate) const PAGE_RETRY_BUDGET: Duration = Duration::from_secs(30);

/// Whether a stream's page that failed with `s`, first asked `asked_for` ago, is asked again,
/// and after how long. Only an overload refusal is (`UNAVAILABLE` with a `retry-after-ms` hint:
/// the vnode did nothing), after the hinted wait, while that wait ends before the client's own
/// deadline — or, without one, within [`PAGE_RETRY_BUDGET`] of the first ask. A listing so
/// rides out a queue that clears (many streams reaching one vnode at once) instead of failing
/// part-way — ListKeys has no continuation to resume from — and holds no thread or slot while
/// it waits.
pub fn page_retry(
    s: &Status,
    asked_for: Duration,
    now: Instant,
    client_deadline: Option<Instant>,
) -> Option<Duration> {
    if s.code() != Code::Unavailable {
        return None;
    }
    let hint = s.metadata().get("retry-after-ms")?.to_str().ok()?;
    let wait = Duration::from_millis(hint.parse::<u64>().ok()?.max(1));
    let in_time = match client_deadline {
        Some(d) => now + wait < d,
        None => asked_for + wait <= PAGE_RETRY_BUDGET,
    };
    in_time.then_some(wait)
}

/// One stream page: `ask(start_deadline)`, asked again while [`page_retry`] says so, each retry
/// counted in `retried`. Each attempt's start deadline is the client's, or `default` from the
/// attempt.
pub async fn with_page_retries<T, F, Fut>(
    client_deadline: Option<Instant>,
    default: Duration,
    retried: &IntCounter,
    mut ask: F,
) -> Result<T, Status>
where
    F: FnMut(Instant) -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let first = Instant::now();
    loop {
        let deadline = client_deadline.unwrap_or_else(|| Instant::now() + default);
        match ask(deadline).await {
            Err(s) => {
                let now = Instant::now();
                match page_retry(&s, now - first, now, client_deadline) {
                    Some(wait) => {
                        retried.inc();
                        tokio::time::sleep(wait).await;
                    }
                    None => return Err(s),
                }
            }
            ok => return ok,
        }
    }
}

fn filter_of(cv: &CoverageVnode) -> Vec<u32> {
    match &cv.filter {
        KeyFilter::All => Vec::new(),
        KeyFilter::Only(ps) => ps.clone(),
    }
}

fn target_of(cv: &CoverageVnode) -> Target {
    Target {
        partition: cv.vnode,
        node: cv.node.clone(),
        role: Role::Primary,
    }
}

/// The key-partitions `cv` answers for in a plan of `n_val`.
fn answers_for(cv: &CoverageVnode, n_val: u32, ring: u32) -> Vec<u32> {
    match &cv.filter {
        KeyFilter::All => (0..n_val).map(|i| (cv.vnode + ring - i) % ring).collect(),
        KeyFilter::Only(ps) => ps.clone(),
    }
}

impl Coordinator {
    /// Stand-ins for a plan vnode whose member could not be reached (and is now marked down):
    /// the vnodes of a new plan that answer for its key-partitions, each filtered to those. A
    /// query resumes on them where the lost vnode stopped (key and index order do not depend
    /// on which replica answers).
    pub fn replan(&self, n_val: u32, lost: &CoverageVnode) -> Result<Vec<CoverageVnode>, Status> {
        let (view, plan) = self.coverage(n_val)?;
        let ring = view.claim.ring_size().get();
        let wanted = answers_for(lost, n_val, ring);
        let mut out = Vec::new();
        for cv in &plan.vnodes {
            let mut kp: Vec<u32> = answers_for(cv, n_val, ring)
                .into_iter()
                .filter(|p| wanted.contains(p))
                .collect();
            if !kp.is_empty() {
                kp.sort_unstable();
                out.push(CoverageVnode {
                    node: cv.node.clone(),
                    vnode: cv.vnode,
                    filter: KeyFilter::Only(kp),
                });
            }
        }
        if out.iter().any(|cv| cv.node == lost.node) {
            return Err(Status::unavailable(format!(
                "member {} is unreachable and still planned for; retry",
                lost.node
            )));
        }
        Ok(out)
    }

    /// The coverage plan for keys of `n_val` replicas around the members marked down; an
    /// incomplete plan (every replica of some key-partition down) is UNAVAILABLE.
    pub fn coverage(&self, n_val: u32) -> Result<(Arc<ClusterView>, CoveragePlan), Status> {
        let view = self.vnodes.membership.view();
        let plan = coverage_plan(&view.claim, n_val, &self.peers.down())
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        if !plan.is_complete() {
            return Err(Status::unavailable(format!(
                "coverage incomplete: key-partitions {:?} have no reachable replica (their members are down); retry when they are back",
                plan.uncovered
            )));
        }
        Ok((view, plan))
    }

    /// A page of one plan vnode's live keys after `after` (scanning at most `limit`), the last
    /// key scanned when the vnode has more, and the snapshot the vnode holds for the next page
    /// (`snapshot`: the one it returned last time, 0 for the first page).
    #[allow(clippy::too_many_arguments)]
    pub async fn fold_keys_page(
        self: &Arc<Self>,
        view: &ClusterView,
        cv: &CoverageVnode,
        bucket: Vec<u8>,
        after: Vec<u8>,
        limit: u32,
        snapshot: u64,
        deadline: Instant,
    ) -> Result<crate::replica::KeysPageOut, Status> {
        let t = target_of(cv);
        let filter = filter_of(cv);
        if self.is_local(&t) {
            self.replicas.readable(cv.vnode)?;
            let (p, lim) = (cv.vnode, crate::replica::page_limit(limit));
            return self
                .replicas
                .call(p, deadline, move |r| {
                    r.fold_keys_page(p, &bucket, &after, lim, &filter, snapshot)
                })
                .await;
        }
        let mut client = self.peers.client(self.member(view, &t)?)?;
        let mut req = tonic::Request::new(pb::FoldKeysRequest {
            partition: cv.vnode,
            bucket,
            after,
            limit,
            key_partitions: filter,
            snapshot,
        });
        req.set_timeout(remaining(deadline));
        let r = self.observed(&t, client.fold_keys(req).await)?;
        Ok((r.keys, (!r.last.is_empty()).then_some(r.last), r.snapshot))
    }

    /// A page of one plan vnode's index entries after `after` (scanning at most `q.limit`), on
    /// the snapshot it holds as `snapshot` (0: a new one); as [`Self::fold_keys_page`].
    pub async fn index_page(
        self: &Arc<Self>,
        view: &ClusterView,
        cv: &CoverageVnode,
        q: &pb::IndexPageRequest,
        after: Option<&(Term, Vec<u8>)>,
        snapshot: u64,
        deadline: Instant,
    ) -> Result<IndexPageOut, Status> {
        let t = target_of(cv);
        let mut q = q.clone();
        q.partition = cv.vnode;
        q.snapshot = snapshot;
        q.key_partitions = filter_of(cv);
        q.after = after.cloned().map(entry_pb);
        if self.is_local(&t) {
            self.replicas.readable(cv.vnode)?;
            let (query, after) = index_page_query(&q)?;
            let lim = crate::replica::page_limit(q.limit);
            let p = cv.vnode;
            return self
                .replicas
                .call(p, deadline, move |r| {
                    r.index_page(
                        p,
                        &query,
                        after.as_ref(),
                        lim,
                        &q.key_partitions,
                        q.snapshot,
                    )
                })
                .await;
        }
        let mut client = self.peers.client(self.member(view, &t)?)?;
        let mut req = tonic::Request::new(q);
        req.set_timeout(remaining(deadline));
        let r = self.observed(&t, client.index_page(req).await)?;
        let results = r
            .results
            .into_iter()
            .map(entry_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((results, r.last.map(entry_of).transpose()?, r.snapshot))
    }

    /// Let go of the snapshots plan vnodes still hold for a query that stopped before they ran
    /// out (best effort: a member that does not answer drops them when they go idle).
    pub async fn release_snapshots(
        self: &Arc<Self>,
        view: &ClusterView,
        held: &[(CoverageVnode, u64)],
    ) {
        let mut remote: std::collections::BTreeMap<&str, (_, Vec<u64>)> = Default::default();
        for (cv, id) in held.iter().filter(|(_, id)| *id != 0) {
            let t = target_of(cv);
            if self.is_local(&t) {
                self.replicas.held.release(*id);
            } else if let Ok(m) = self.member(view, &t) {
                remote
                    .entry(cv.node.as_str())
                    .or_insert((m, Vec::new()))
                    .1
                    .push(*id);
            }
        }
        for (member, snapshots) in remote.into_values() {
            if let Ok(mut client) = self.peers.client(member) {
                let mut req = tonic::Request::new(pb::ReleaseSnapshotsRequest { snapshots });
                req.set_timeout(std::time::Duration::from_secs(2));
                let _ = client.release_snapshots(req).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(hint_ms: Option<&str>) -> Status {
        let mut s = Status::unavailable("vnode 0 is overloaded (would_miss_deadline)");
        if let Some(h) = hint_ms {
            s.metadata_mut()
                .insert("retry-after-ms", h.parse().unwrap());
        }
        s
    }

    #[test]
    fn only_overload_refusals_are_asked_again_in_time() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let budget = PAGE_RETRY_BUDGET;
        let unreachable = Status::unavailable("connection refused");
        let bad = Status::invalid_argument("bad bucket");
        let mut wrong_code = Status::internal("disk");
        wrong_code
            .metadata_mut()
            .insert("retry-after-ms", "5".parse().unwrap());
        // (status, first asked this long ago, client deadline, verdict)
        let cases: Vec<(Status, Duration, Option<Instant>, Option<Duration>)> = vec![
            (refused(Some("40")), ms(0), None, Some(ms(40))),
            (refused(Some("0")), ms(0), None, Some(ms(1))),
            (refused(Some("40")), budget - ms(40), None, Some(ms(40))),
            (refused(Some("40")), budget - ms(39), None, None),
            (refused(Some("40")), budget * 2, None, None),
            // With a client deadline, only it counts.
            (
                refused(Some("40")),
                budget * 2,
                Some(now + ms(41)),
                Some(ms(40)),
            ),
            (refused(Some("40")), ms(0), Some(now + ms(40)), None),
            (refused(Some("40")), ms(0), Some(now + ms(10)), None),
            (refused(Some("soon")), ms(0), None, None),
            (refused(None), ms(0), None, None),
            (unreachable, ms(0), None, None),
            (bad, ms(0), None, None),
            (wrong_code, ms(0), None, None),
        ];
        for (n, (s, asked_for, deadline, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                page_retry(&s, asked_for, now, deadline),
                want,
                "case {n}: {s:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_refused_page_is_asked_again_with_a_fresh_start_deadline() {
        let default = Duration::from_millis(300);
        let retried = IntCounter::new("retried", "retries").unwrap();
        let mut deadlines = Vec::new();
        let out = with_page_retries(None, default, &retried, |d| {
            deadlines.push(d);
            let n = deadlines.len();
            async move {
                if n < 3 {
                    Err(refused(Some("20")))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(out.unwrap(), 3);
        assert_eq!(retried.get(), 2);
        assert!(deadlines[1] - deadlines[0] >= Duration::from_millis(20));
        assert!(deadlines[2] - deadlines[1] >= Duration::from_millis(20));

        // Past the client's deadline nothing is asked again.
        let mut asked = 0;
        let soon = Instant::now() + Duration::from_millis(30);
        let err = with_page_retries(Some(soon), default, &retried, |d| {
            asked += 1;
            assert_eq!(d, soon, "the client's deadline is every attempt's");
            async { Err::<(), _>(refused(Some("20"))) }
        })
        .await
        .unwrap_err();
        assert!(asked <= 2, "asked {asked} times");
        assert!(err.message().contains("overloaded"), "{err:?}");
    }
}
