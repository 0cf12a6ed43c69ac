//! A coordinated read, HEAD-then-GET: every replica of the preflist is asked for its sibling set
//! (a ledger read); once the `GetTracker` decides, each winning value is fetched from one replica
//! that holds it (shortest queue first). The answer does not wait for the slower replicas: a
//! background task collects their HEADs and then repairs every replica that answered with less
//! than the merge (read repair). A GET with a single replica reads its object once instead: the
//! HEAD would only repeat the object's sibling set.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use levee_cluster::{
    Clock, ConflictPolicy, Content, GetDecision, GetTracker, HeadReply, Object, ReadOptions,
    ReplicaRole, SiblingMeta, SiblingSet, Target, ValueFetch,
};
use tonic::Status;

use super::{failure_of, Coordinator};
use crate::membership::ClusterView;
use crate::replica::Stored;

/// A client read.
pub struct Read {
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    pub bucket_type: String,
    pub options: ReadOptions,
    /// Fetch the values (GET); without, answer from the HEADs alone (HEAD).
    pub values: bool,
}

/// What a read found.
pub enum ReadOutcome {
    /// `contents[i]` is the content of `merged.live()[i]` (empty when values were not asked for).
    Found {
        merged: SiblingSet,
        contents: Vec<Content>,
        /// The journal sequence number on the replica the first value came from.
        sqn: u64,
    },
    /// No live value. `context` is the delete's when the key holds tombstones.
    NotFound { context: Option<Clock> },
}

/// How many times a read starts again when the value moved on under it.
const READ_ATTEMPTS: u32 = 4;

/// The value moved on between HEAD and fetch (internal: the read starts again).
fn moved() -> Status {
    let mut s = Status::aborted("the value changed between HEAD and fetch");
    s.metadata_mut()
        .insert("levee-moved", "1".parse().expect("ascii"));
    s
}

fn is_moved(s: &Status) -> bool {
    s.code() == tonic::Code::Aborted && s.metadata().get("levee-moved").is_some()
}

/// A replica's HEAD: target index, reply, the object's sequence number, the error if it failed.
type HeadMessage = (usize, HeadReply, u64, Option<Status>);

/// The HEADs of a read still under way, polled by the read itself and then by its read repair
/// (no task per replica: a local HEAD answered from memory completes on its first poll).
type Heads =
    FuturesUnordered<std::pin::Pin<Box<dyn std::future::Future<Output = HeadMessage> + Send>>>;

/// Replica objects fetched during a read, by target index.
type Fetched = HashMap<usize, Stored>;

/// Target `i`'s answer as a HEAD: its sibling set (none: not found), queue length and sequence
/// number.
fn head_message(i: usize, siblings: SiblingSet, queue_len: u32, sqn: u64) -> HeadMessage {
    if siblings.is_empty() {
        return (i, HeadReply::NotFound, 0, None);
    }
    let reply = HeadReply::Found {
        siblings,
        queue_len,
    };
    (i, reply, sqn, None)
}

impl Coordinator {
    /// A read. When a value the HEADs agreed on is gone by the time it is fetched (a write
    /// replaced it in between), the read starts again from the HEADs, up to `READ_ATTEMPTS`
    /// times.
    pub async fn get(self: &Arc<Self>, r: Read, deadline: Instant) -> Result<ReadOutcome, Status> {
        let mut attempt = 1;
        loop {
            match self.get_once(&r, deadline).await {
                Err(s) if is_moved(&s) && attempt < READ_ATTEMPTS => attempt += 1,
                Err(s) if is_moved(&s) => {
                    return Err(Status::unavailable(format!(
                        "the key changed between the replicas' HEADs and the value's fetch on \
                         {READ_ATTEMPTS} attempts in a row (heavy concurrent writes); retry"
                    )))
                }
                other => return other,
            }
        }
    }

    async fn get_once(
        self: &Arc<Self>,
        r: &Read,
        deadline: Instant,
    ) -> Result<ReadOutcome, Status> {
        levee_store::validate_object_key(&r.bucket, &r.key).map_err(crate::errors::to_status)?;
        let props = self.props(&r.bucket_type)?;
        let quorum = props
            .read(&r.options)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let plan = self.plan(&r.bucket, &r.key, props.n_val)?;
        let targets = plan.targets.targets.clone();
        let roles = ReplicaRole::of_targets(&plan.targets);
        let mut tracker = GetTracker::new(quorum, props.conflict, &roles);
        let mut heads = Heads::new();
        let mut fetched = Fetched::new();
        let one_read = r.values && targets.len() == 1;
        if one_read {
            // One replica: its HEAD would be the sibling set of the object its GET returns, so
            // the object is read once (one engine read, or one RPC, where HEAD-then-GET made two)
            // and `fetch` finds the values in `fetched`. Past the deadline nothing is pushed and
            // the tracker expires.
            let t = &targets[0];
            let got = self.get_replica(&plan.view, t, r.bucket.clone(), r.key.clone(), deadline);
            if let Ok(got) = tokio::time::timeout_at(deadline.into(), got).await {
                let message = match got {
                    Ok(s) => {
                        // One source: no queue length to choose by.
                        let message = head_message(0, s.object.siblings.clone(), 0, s.sqn);
                        fetched.insert(0, s);
                        message
                    }
                    Err(s) => {
                        log::debug!("GET of {} p{} failed: {s}", t.node, t.partition);
                        (0, HeadReply::Failed(failure_of(&s)), 0, Some(s))
                    }
                };
                heads.push(Box::pin(std::future::ready(message)));
            }
        }
        let to_head = if one_read { &[][..] } else { &targets[..] };
        for (i, t) in to_head.iter().enumerate() {
            let (me, view, t) = (self.clone(), plan.view.clone(), t.clone());
            let (b, k) = (r.bucket.clone(), r.key.clone());
            heads.push(Box::pin(async move {
                match me.head_replica(&view, &t, b, k, deadline).await {
                    Ok((siblings, queue_len, sqn)) => head_message(i, siblings, queue_len, sqn),
                    Err(s) => {
                        log::debug!("HEAD of {} p{} failed: {s}", t.node, t.partition);
                        (i, HeadReply::Failed(failure_of(&s)), 0, Some(s))
                    }
                }
            }));
        }
        let mut sqns = vec![0u64; targets.len()];
        let mut overload = super::put::LastOverload::default();
        let mut decision = tracker.decision();
        while decision == GetDecision::Wait {
            decision = match tokio::time::timeout_at(deadline.into(), heads.next()).await {
                Ok(Some((i, reply, sqn, err))) => {
                    if let Some(s) = &err {
                        overload.note(s);
                    }
                    sqns[i] = sqn;
                    tracker.add(i, reply).unwrap_or(GetDecision::Wait)
                }
                Ok(None) | Err(_) => tracker.expire(),
            };
        }
        let outcome = match decision {
            GetDecision::Failed(e) => {
                return Err(super::put::quorum_status(&e, overload.0.as_ref()));
            }
            GetDecision::NotFound { context } => ReadOutcome::NotFound { context },
            GetDecision::Found { merged, fetch } => {
                let contents = if r.values {
                    self.fetch(
                        &plan.view,
                        &targets,
                        r,
                        &merged,
                        &fetch,
                        &mut fetched,
                        deadline,
                    )
                    .await?
                } else {
                    Vec::new()
                };
                // The sequence number on the replica the first value came from (for a HEAD, on
                // the replica it would have come from).
                let sqn = fetch.first().map_or(0, |f| {
                    f.sources
                        .iter()
                        .find_map(|s| fetched.get(s).map(|o| o.sqn))
                        .unwrap_or(sqns[f.sources[0]])
                });
                ReadOutcome::Found {
                    merged,
                    contents,
                    sqn,
                }
            }
            GetDecision::Wait => unreachable!("the loop runs until a decision"),
        };
        let repair = Repair {
            view: plan.view,
            targets,
            bucket: r.bucket.clone(),
            key: r.key.clone(),
            policy: props.conflict,
            deadline,
        };
        // Run the repair here as far as it goes without waiting (all HEADs in and nothing to
        // repair: done); only a repair that waits gets a task of its own.
        let mut repair = Box::pin(self.clone().read_repair(repair, tracker, heads, fetched));
        if (&mut repair).now_or_never().is_none() {
            tokio::spawn(repair);
        }
        Ok(outcome)
    }

    /// The content of each live sibling of `merged`, fetched as `fetch` says (next source on a
    /// failure). Objects fetched are kept in `fetched` for the read repair.
    #[allow(clippy::too_many_arguments)]
    async fn fetch(
        self: &Arc<Self>,
        view: &ClusterView,
        targets: &[Target],
        r: &Read,
        merged: &SiblingSet,
        fetch: &[ValueFetch],
        fetched: &mut Fetched,
        deadline: Instant,
    ) -> Result<Vec<Content>, Status> {
        let mut contents = Vec::with_capacity(fetch.len());
        for f in fetch {
            let meta = merged.siblings()[f.sibling].meta;
            let mut last_err = None;
            let mut found = None;
            for &src in &f.sources {
                if let Some(c) = content_in(fetched.get(&src), &meta) {
                    found = Some(c);
                    break;
                }
                if fetched.contains_key(&src) {
                    continue; // fetched already, without this sibling (it changed since its HEAD)
                }
                match self
                    .get_replica(
                        view,
                        &targets[src],
                        r.bucket.clone(),
                        r.key.clone(),
                        deadline,
                    )
                    .await
                {
                    Ok(s) => {
                        let c = content_in(Some(&s), &meta);
                        fetched.insert(src, s);
                        if c.is_some() {
                            found = c;
                            break;
                        }
                    }
                    Err(s) => last_err = Some(s),
                }
            }
            match found {
                Some(c) => contents.push(c),
                // Every source answered, none holds it any more: a write replaced it.
                None if last_err.is_none() => return Err(moved()),
                None => {
                    return Err(Status::unavailable(format!(
                        "the value the replicas agreed on could not be read from any of the {} replicas that listed it{}",
                        f.sources.len(),
                        last_err.map(|e| format!(": {}", e.message())).unwrap_or_default()
                    )))
                }
            }
        }
        Ok(contents)
    }

    /// Collect the remaining HEADs (until all answered or the deadline), then send the merge to
    /// every replica that answered with less.
    async fn read_repair(
        self: Arc<Self>,
        repair: Repair,
        mut tracker: GetTracker,
        mut heads: Heads,
        mut fetched: Fetched,
    ) {
        while !tracker.complete() {
            match tokio::time::timeout_at(repair.deadline.into(), heads.next()).await {
                Ok(Some((i, reply, _, _))) => {
                    let _ = tracker.add(i, reply);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let plan = tracker.read_repair();
        if plan.targets.is_empty() {
            self.reap(&repair, &tracker, plan.merged).await;
            return;
        }
        // The merge needs the content of each of its live siblings.
        let fetch = tracker.fetch_plan(&plan.merged);
        let deadline = Instant::now() + self.replicas.default_deadline;
        let r = Read {
            bucket: repair.bucket.clone(),
            key: repair.key.clone(),
            bucket_type: String::new(),
            options: ReadOptions::default(),
            values: true,
        };
        let contents = match self
            .fetch(
                &repair.view,
                &repair.targets,
                &r,
                &plan.merged,
                &fetch,
                &mut fetched,
                deadline,
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                log::debug!("read repair skipped: {e}");
                return;
            }
        };
        let object = match Object::new(plan.merged.clone(), contents) {
            Ok(o) => Arc::new(o),
            Err(e) => {
                log::warn!("read repair skipped: {e}");
                return;
            }
        };
        for (i, reason) in plan.targets {
            let t = &repair.targets[i];
            let res = self
                .merge_replica(
                    &repair.view,
                    t,
                    repair.bucket.clone(),
                    repair.key.clone(),
                    object.clone(),
                    repair.policy,
                    deadline,
                )
                .await;
            let reason = match reason {
                levee_cluster::RepairReason::Missing => "missing",
                levee_cluster::RepairReason::Stale => "stale",
            };
            match res {
                Ok(_) => self.metrics.read_repairs.with_label_values(&[reason]).inc(),
                Err(e) => log::debug!("read repair of {} p{} failed: {e}", t.node, t.partition),
            }
        }
    }
}

impl Coordinator {
    /// Tombstone reaping: when every primary answered with the same tombstones, no fallback
    /// took part, the newest tombstone is `delete_delay` old (`GetTracker::reapable`), and no
    /// member has been down for that long (a member that was down may hold hints of older
    /// writes, which a handoff after the reap would bring back), each primary drops its replica
    /// — if it still holds exactly those tombstones.
    async fn reap(self: &Arc<Self>, repair: &Repair, tracker: &GetTracker, merged: SiblingSet) {
        let Some(delay) = self.delete_delay else {
            return;
        };
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        if merged.is_empty()
            || !tracker.reapable(now_us, delay.as_micros() as u64)
            || !self.peers.quiet_for(delay)
        {
            return;
        }
        let deadline = Instant::now() + self.replicas.default_deadline;
        for t in &repair.targets {
            match self
                .reap_replica(
                    &repair.view,
                    t,
                    repair.bucket.clone(),
                    repair.key.clone(),
                    merged.clone(),
                    deadline,
                )
                .await
            {
                Ok(true) => self.metrics.reaped.inc(),
                Ok(false) => {} // written since: not a tombstone to reap any more
                Err(e) => log::debug!("reaping {} p{} failed: {e}", t.node, t.partition),
            }
        }
    }
}

/// What a read repair needs once the client has its answer.
struct Repair {
    view: Arc<ClusterView>,
    targets: Vec<Target>,
    bucket: Vec<u8>,
    key: Vec<u8>,
    policy: ConflictPolicy,
    deadline: Instant,
}

fn content_in(s: Option<&Stored>, meta: &SiblingMeta) -> Option<Content> {
    s.and_then(|s| s.object.content_of(meta)).cloned()
}
