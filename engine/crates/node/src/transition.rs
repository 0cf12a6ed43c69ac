//! Ring transitions, as this node takes part in them (docs/cluster.md, "Ring transitions").
//!
//! A member list that moves partitions leaves requests on the routing claim and records a target
//! (`membership.rs`). For each moving partition this node owns, it then
//! 1. *forwards* every write the vnode takes from then on to the next owner, before the write is
//!    acknowledged (`Replicas::write`; a forward that fails is remembered) — and the next owner
//!    forwards the writes it takes to the current owner, so whichever claim a coordinator routes
//!    by while members switch, both owners hold every acknowledged write,
//! 2. *streams* the vnode to the next owner: a fold of a snapshot in acknowledged batches
//!    (`MergeReplica`, the merge a write uses, so nothing newer there is undone), its position
//!    kept in `<data_dir>/TRANSFERS` so a restart or a failed batch resumes where it stopped,
//!    throttled by `[handoff] max_bytes_per_sec`,
//! 3. when a forward failed meanwhile, sends once more every object written since the stream
//!    began (a *catch-up* fold, local reads only), and only then marks the partition sent.
//!
//! Every node polls the moving partitions' current owners (`RingState`); when each reports its
//! partitions sent (or has completed the transition already), the node makes the target its
//! routing claim. Nodes switch within a poll of each other; in between, and until every member
//! has switched (`settle.rs`), both owners hold every object, so a read finds them whichever
//! claim it was routed by. What the old owner still holds afterwards goes to the new owner by
//! handoff (`handoff.rs`), which skips what the stream already delivered.
//!
//! A member that joins with an empty data directory takes its ring from a member that has one
//! ([`take_ring_from_peers`]): the claim a list yields depends on the claims before it, so a
//! joiner cannot compute it from the newest list alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use levee_cluster::{Member, MemberList, Move, Object, Role, Target};
use levee_proto::v1 as pb;
use levee_store::{FoldedObject, SnapshotKind};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::config::NodeConfig;
use crate::coordinator::Coordinator;
use crate::membership::{self, ClusterView, MEMBERS_FILE};
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::progress_file::{load_json, save_json, Throttled};
use crate::replica::Forward;
use crate::settle::{Settle, SETTLE_FILE};

/// Where the progress of this node's outgoing transfers is kept.
pub const TRANSFERS_FILE: &str = "TRANSFERS";
const STEP_EVERY: Duration = Duration::from_millis(500);
const BATCH_OBJECTS: usize = 64;
/// A batch ends once it holds this many bytes (what a failed batch may send again).
const BATCH_BYTES: u64 = 256 << 10;
/// Forwards in flight at once.
const FORWARDS_IN_FLIGHT: usize = 64;
/// Progress is written at most this often while a partition streams (and at every end).
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// One outgoing partition.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionTransfer {
    /// The next owner.
    pub to: String,
    /// The vnode's last sequence number when forwarding began: every object written after it was
    /// forwarded, or is sent by the catch-up fold.
    pub start_sqn: u64,
    /// The last (bucket, key) the next owner acknowledged (`None`: from the start).
    pub after: Option<(Vec<u8>, Vec<u8>)>,
    /// A forward failed (or forwarding was off, across a restart) since the stream began.
    pub forward_failed: bool,
    /// The stream is done and a catch-up fold (objects after `start_sqn` only) runs.
    pub catching_up: bool,
    /// Streamed whole, caught up: the next owner holds every object.
    pub sent: bool,
    pub objects: u64,
    pub bytes: u64,
}

/// What `TRANSFERS` holds: the transition (by member list version) and its partitions.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct Progress {
    version: u64,
    partitions: BTreeMap<u32, PartitionTransfer>,
}

pub struct Transitions {
    coordinator: Arc<Coordinator>,
    /// The byte rate and busy share of this node's partition streams, which run one after
    /// another and share it (`pacing.rs`).
    pacer: Mutex<crate::pacing::Pacer>,
    path: PathBuf,
    progress: Mutex<Progress>,
    /// The last warning and when it was logged (a failing step retries twice a second).
    last_warning: Throttled,
    /// The last switch, while it settles (`settle.rs`): what it gave this node, the members that
    /// left in it, who may still route by the claim before it, and since when.
    settle: Mutex<Option<Settling>>,
    /// Where the settle is kept across restarts.
    settle_path: PathBuf,
    /// The last "still settling" warning.
    settle_warning: Throttled,
    /// Per vnode: the member its writes are forwarded to (set by every step).
    forward_to: Mutex<Vec<Option<String>>>,
    /// The member list version the last step set the forwarding switches for (`RingState`
    /// reports it: nobody switches while a next owner does not forward yet).
    forwarding_version: AtomicU64,
}

/// A switch settling: its [`Settle`], the list before it (parsed), and since when it runs.
struct Settling {
    settle: Settle,
    departed: MemberList,
    since: Instant,
}

/// Warn that a switch is still settling once it has waited this long for members.
const SETTLE_WARN_AFTER: Duration = Duration::from_secs(30);

impl Transitions {
    /// Loads the progress kept in the data directory and sets the forwarding for the member list
    /// the node runs. Forwarding was off while the node was down, so every partition still
    /// streaming gets a catch-up fold.
    pub fn open(coordinator: Arc<Coordinator>, pace: crate::pacing::Pace) -> Result<Transitions> {
        let path = coordinator.vnodes.data_dir.join(TRANSFERS_FILE);
        let mut progress: Progress = load_json(
            &path,
            "remove it (transfers then start again from the beginning)",
        )?;
        for t in progress.partitions.values_mut() {
            if !t.sent {
                t.forward_failed = true;
            }
        }
        // A switch that was settling when the node stopped settles on, the minimum from now.
        let settle_path = coordinator.vnodes.data_dir.join(SETTLE_FILE);
        let settle: Option<Settle> = load_json(
            &settle_path,
            "remove it (the last switch then counts as settled: handoff may empty vnodes that \
             members not switched yet still read)",
        )?;
        let settle = match settle {
            None => None,
            Some(settle) => {
                let departed = MemberList::parse(&settle.departed_list_json)
                    .with_context(|| format!("{} is damaged", settle_path.display()))?;
                log::info!(
                    "transition: the switch to list {} settles on: waiting for {:?} to switch",
                    settle.version,
                    settle.awaiting
                );
                Some(Settling {
                    settle,
                    departed,
                    since: Instant::now(),
                })
            }
        };
        let t = Transitions {
            coordinator,
            pacer: Mutex::new(crate::pacing::Pacer::new(pace)),
            path,
            progress: Mutex::new(progress),
            last_warning: Throttled::default(),
            settle: Mutex::new(settle),
            settle_path,
            settle_warning: Throttled::default(),
            forward_to: Mutex::new(Vec::new()),
            forwarding_version: AtomicU64::new(0),
        };
        let view = t.coordinator.vnodes.membership.view();
        t.set_forwarding(&view, &t.outgoing(&view));
        Ok(t)
    }

    /// Runs the transfers and the completion checks, and delivers forwards, until the process
    /// ends.
    pub async fn run(self: Arc<Self>, forwards: tokio::sync::mpsc::Receiver<Forward>) {
        tokio::spawn(self.clone().deliver_forwards(forwards));
        tokio::spawn(self.clone().watch_settle());
        loop {
            tokio::time::sleep(STEP_EVERY).await;
            if let Err(e) = self.step().await {
                self.last_warning
                    .warn("transition", e.message().to_string());
            }
        }
    }

    /// Whether the last switch still settles (`settle.rs`): handoff keeps what was streamed
    /// away, and writes to the partitions it gave this node are forwarded back.
    pub fn settling(&self) -> bool {
        self.settle.lock().is_some()
    }

    /// The next owner holds every object of vnode `partition` this node had with a sequence
    /// number up to the returned one (handoff drops those without sending them again).
    pub fn sent_through(&self, partition: u32, owner: &str) -> Option<u64> {
        let p = self.progress.lock();
        let t = p.partitions.get(&partition)?;
        (t.sent && t.to == owner).then_some(t.start_sqn)
    }

    /// This node's ring and sent partitions, for `RingState`.
    pub fn ring_state(&self) -> pb::RingStateResponse {
        let c = &self.coordinator;
        let view = c.vnodes.membership.view();
        let committed = view.list.version() != membership::PROVISIONAL;
        let progress = self.progress.lock();
        let transferred = if progress.version == view.list.version() {
            progress
                .partitions
                .iter()
                .filter(|(p, t)| t.sent && view.next_owner(**p) == Some(t.to.as_str()))
                .map(|(p, t)| pb::Transferred {
                    partition: *p,
                    to: t.to.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        pb::RingStateResponse {
            list_json: view.list.to_json(),
            routing_list_json: view.routing_list.to_json(),
            routing_owners: view.claim.owners().map(String::from).collect(),
            target_owners: view
                .target
                .as_ref()
                .map(|t| t.owners().map(String::from).collect())
                .unwrap_or_default(),
            transferred,
            committed,
            holds_data: c.vnodes.stores.iter().any(|s| s.stats().last_sqn > 0),
            forwarding_version: self.forwarding_version.load(Ordering::SeqCst),
        }
    }

    /// The moving partitions this node owns under the routing claim, with their next owner.
    fn outgoing(&self, view: &ClusterView) -> BTreeMap<u32, String> {
        let me = self.coordinator.peers.self_name.as_str();
        match &view.target {
            None => BTreeMap::new(),
            Some(_) => (0..view.claim.ring_size().get())
                .filter(|p| view.claim.owner(*p) == me)
                .filter_map(|p| view.next_owner(p).map(|to| (p, to.to_string())))
                .collect(),
        }
    }

    /// Where each vnode's writes are forwarded, set for `view` (at every step, and once when the
    /// node opens, before it serves: a restarted next owner must not take a write unforwarded).
    /// Members switch to the target within a poll or two of each other, and meanwhile a write
    /// may be coordinated by the old claim and read by the new one, or the other way round: so a
    /// moving vnode's writes reach both owners whichever gets them — the current owner forwards
    /// to the next (during the transition, and after it for writes that still land there), the
    /// next owner forwards to the current one (during the transition, and after its switch until
    /// that settles: `settle.rs`). The transition's own traffic is not forwarded on.
    fn set_forwarding(&self, view: &ClusterView, outgoing: &BTreeMap<u32, String>) {
        let c = &self.coordinator;
        let me = c.peers.self_name.as_str();
        let forward_to: Vec<Option<String>> = {
            let progress = self.progress.lock();
            let settle = self.settle.lock();
            (0..view.claim.ring_size().get())
                .map(|p| {
                    if let Some(to) = outgoing.get(&p) {
                        return Some(to.clone());
                    }
                    if view.next_owner(p) == Some(me) {
                        // Writes a switched coordinator sends here reach the current owner too.
                        return Some(view.claim.owner(p).to_string());
                    }
                    if view.target.is_none() {
                        let owner = view.claim.owner(p);
                        if progress
                            .partitions
                            .get(&p)
                            .is_some_and(|t| t.sent && t.to == owner)
                        {
                            return Some(owner.to_string());
                        }
                    }
                    settle
                        .as_ref()
                        .and_then(|s| s.settle.received_from.get(&p).cloned())
                })
                .collect()
        };
        // Destinations before switches: a write that finds its vnode's switch on must find where
        // to forward it (a forward with no destination counts as not needed).
        let on: Vec<bool> = forward_to.iter().map(Option::is_some).collect();
        *self.forward_to.lock() = forward_to;
        for (flag, on) in c.replicas.forwarding.iter().zip(on) {
            flag.store(on, Ordering::SeqCst);
        }
        // Only now may others switch on this node's word that it forwards for this list.
        self.forwarding_version
            .store(view.list.version(), Ordering::SeqCst);
    }

    /// One look at the transition: forwarding switched on for what this node gives up, its
    /// transfers advanced, and the target taken once every owner has sent its partitions.
    async fn step(&self) -> Result<(), Status> {
        let c = &self.coordinator;
        let me = c.peers.self_name.as_str();
        let view = c.vnodes.membership.view();
        let outgoing = self.outgoing(&view);
        self.report(&view);
        self.set_forwarding(&view, &outgoing);
        if view.target.is_none() {
            return Ok(());
        }
        self.start(&view, &outgoing)?;
        for (&p, to) in &outgoing {
            self.transfer(&view, p, to).await?;
        }
        if !self.all_sent(&view).await {
            return Ok(());
        }
        // Until every member routes by the target, the partitions this switch gives this node
        // keep forwarding back to their previous owner (`set_forwarding` reads this from the
        // next step on; in this step it already forwards them there, as their next owner), and
        // handoff keeps what this node streamed away. Kept before the switch is committed.
        let moves = view.ring().moves();
        let received: BTreeMap<u32, String> = moves
            .iter()
            .filter(|m| m.to == me)
            .map(|m| (m.partition, m.from.clone()))
            .collect();
        let moved_away: BTreeSet<u32> = moves
            .iter()
            .filter(|m| m.from == me)
            .map(|m| m.partition)
            .collect();
        {
            let mut settling = self.settle.lock();
            let settle = Settle::after_switch(
                me,
                &view.routing_list,
                &view.list,
                received,
                &moved_away,
                settling.as_ref().map(|s| &s.settle),
            );
            save_json(&self.settle_path, &Some(&settle))
                .map_err(|e| Status::internal(format!("{e:#}")))?;
            *settling = Some(Settling {
                settle,
                departed: view.routing_list.clone(),
                since: Instant::now(),
            });
        }
        if c.vnodes
            .membership
            .complete(view.list.version())
            .map_err(|e| Status::internal(format!("{e:#}")))?
        {
            c.metrics.transitions_completed.inc();
        }
        Ok(())
    }

    /// The transition gauges, at every step (see [`publish`]).
    fn report(&self, view: &ClusterView) {
        let p = self.progress.lock();
        let current = p.version == view.list.version();
        publish(
            &self.coordinator.metrics,
            &p,
            current,
            view.target.is_some(),
        );
    }

    /// Progress for the transition to `view`'s list: what was sent to the same next owner is
    /// kept (a list that retargets a transition keeps what still holds); each new partition
    /// starts at the vnode's current sequence number (forwarding is on already).
    fn start(&self, view: &ClusterView, outgoing: &BTreeMap<u32, String>) -> Result<(), Status> {
        let mut p = self.progress.lock();
        let before = p.clone();
        if p.version != view.list.version() {
            p.version = view.list.version();
            p.partitions.retain(|q, t| outgoing.get(q) == Some(&t.to));
        }
        for (&q, to) in outgoing {
            if p.partitions.get(&q).is_none_or(|t| &t.to != to) {
                let start_sqn = self.coordinator.vnodes.stores[q as usize].stats().last_sqn;
                p.partitions.insert(
                    q,
                    PartitionTransfer {
                        to: to.clone(),
                        start_sqn,
                        ..Default::default()
                    },
                );
                log::info!(
                    "transition: p{q}: streaming to {to} (forwarding writes after sqn {start_sqn})"
                );
            }
        }
        if *p != before {
            save_json(&self.path, &*p).map_err(|e| Status::internal(format!("{e:#}")))?;
        }
        Ok(())
    }

    /// Stream vnode `partition` to `to` from where it stopped, then catch up if a forward failed.
    async fn transfer(
        &self,
        view: &Arc<ClusterView>,
        partition: u32,
        to: &str,
    ) -> Result<(), Status> {
        let c = &self.coordinator;
        let Some(t) = self.progress.lock().partitions.get(&partition).cloned() else {
            return Ok(());
        };
        if t.sent {
            return Ok(());
        }
        let target = Target {
            partition,
            node: to.to_string(),
            role: Role::Primary,
        };
        let store = c.vnodes.stores[partition as usize].clone();
        let mut saved = Instant::now();
        // The stream (from `after`), then — after a failed forward — a catch-up of everything
        // written since `start_sqn`.
        loop {
            let (after, start_sqn, catch_up) = {
                let p = self.progress.lock();
                let t = &p.partitions[&partition];
                (t.after.clone(), t.start_sqn, t.catching_up)
            };
            let snap = store
                .snapshot(SnapshotKind::Fold)
                .map_err(crate::errors::to_status)?;
            let mut fold = snap
                .fold_objects_after(after.as_ref().map(|(b, k)| (b.as_slice(), k.as_slice())))
                .map_err(crate::errors::to_status)?;
            loop {
                let paced = crate::pacing::Batch::start(&self.pacer);
                let (batch, last, end) = tokio::task::block_in_place(|| {
                    next_batch(&mut fold, partition, catch_up.then_some(start_sqn))
                })?;
                let deadline = Instant::now() + c.replicas.default_deadline;
                let bytes: u64 = batch.iter().map(|it| it.bytes).sum();
                let sends = batch.iter().map(|it| {
                    c.transfer_replica(
                        view,
                        &target,
                        it.bucket.clone(),
                        it.key.clone(),
                        it.object.clone(),
                        deadline,
                    )
                });
                for r in futures_util::future::join_all(sends).await {
                    r?;
                }
                c.metrics.handoff_objects.inc_by(batch.len() as u64);
                c.metrics.handoff_bytes.inc_by(bytes);
                {
                    let mut p = self.progress.lock();
                    let t = p
                        .partitions
                        .get_mut(&partition)
                        .expect("kept while streaming");
                    t.objects += batch.len() as u64;
                    t.bytes += bytes;
                    if last.is_some() {
                        t.after = last;
                    }
                    if end {
                        let lost = c.replicas.forward_lost[partition as usize]
                            .swap(false, Ordering::SeqCst);
                        if t.forward_failed || lost {
                            // Everything written since the stream began goes once more.
                            t.forward_failed = false;
                            t.after = None;
                            t.catching_up = true;
                            log::info!("transition: p{partition}: a forward to {to} failed; catching up on writes after sqn {}", t.start_sqn);
                        } else {
                            t.sent = true;
                            t.catching_up = false;
                            log::info!(
                                "transition: p{partition}: sent to {to} ({} objects, {} bytes)",
                                t.objects,
                                t.bytes
                            );
                        }
                        save_json(&self.path, &*p)
                            .map_err(|e| Status::internal(format!("{e:#}")))?;
                    } else if saved.elapsed() >= SAVE_EVERY {
                        save_json(&self.path, &*p)
                            .map_err(|e| Status::internal(format!("{e:#}")))?;
                        saved = Instant::now();
                    }
                    publish(&c.metrics, &p, true, true);
                }
                paced.done(bytes).await;
                if end {
                    break;
                }
            }
            let p = self.progress.lock();
            if p.partitions.get(&partition).is_none_or(|t| t.sent) {
                return Ok(());
            }
        }
    }

    /// Whether this node may switch to the target ([`ready_to_switch`]), from the `RingState` of
    /// every member a partition moves from or to (this node's own without asking).
    async fn all_sent(&self, view: &ClusterView) -> bool {
        let moves = view.ring().moves();
        let target: Vec<&str> = view
            .target
            .as_ref()
            .map(|t| t.owners().collect())
            .unwrap_or_default();
        let me = self.coordinator.peers.self_name.as_str();
        let names: BTreeSet<&str> = moves
            .iter()
            .flat_map(|m| [m.from.as_str(), m.to.as_str()])
            .collect();
        let mut states = BTreeMap::new();
        for name in names {
            let state = if name == me {
                self.ring_state()
            } else {
                let Some(member) = view.member(name) else {
                    return false;
                };
                match ring_state_of(&self.coordinator.peers, member).await {
                    Ok(s) => s,
                    Err(e) => {
                        log::debug!("transition: asking {name} how far it is: {e}");
                        return false;
                    }
                }
            };
            let Some(p) = MemberProgress::of(&state, &target) else {
                return false;
            };
            states.insert(name.to_string(), p);
        }
        ready_to_switch(&moves, view.list.version(), &states)
    }

    /// Ends the last switch's settle (`settle.rs`) once it has run its minimum and every member
    /// it waits for has been heard routing by the target's list or a newer one: polls them twice
    /// a second, apart from the steps (a member that does not answer holds a poll 3 s).
    async fn watch_settle(self: Arc<Self>) {
        loop {
            tokio::time::sleep(STEP_EVERY).await;
            if let Err(e) = self.settle_step().await {
                self.last_warning.warn("transition", format!("{e:#}"));
            }
        }
    }

    async fn settle_step(&self) -> Result<()> {
        let view = self.coordinator.vnodes.membership.view();
        let (awaiting, departed, mut changed) = {
            let mut g = self.settle.lock();
            let Some(s) = g.as_mut() else {
                return Ok(());
            };
            let changed = s.settle.newer_lists(&view.list, &view.routing_list);
            (s.settle.awaiting.clone(), s.departed.clone(), changed)
        };
        let peers = &self.coordinator.peers;
        let asks = awaiting.iter().map(|name| {
            let member = view.member(name).or_else(|| departed.get(name)).cloned();
            async move {
                let answer = match member {
                    None => Err("in none of this node's member lists".to_string()),
                    Some(m) => match ring_state_of(peers, &m).await {
                        Err(e) => Err(e.message().to_string()),
                        Ok(s) => MemberList::parse(&s.routing_list_json)
                            .map(|l| l.version())
                            .map_err(|e| format!("its routing list: {e}")),
                    },
                };
                (name, answer)
            }
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut g = self.settle.lock();
        let Some(s) = g.as_mut() else {
            return Ok(());
        };
        let mut behind = Vec::new();
        for (name, answer) in answers {
            match answer {
                Ok(v) if s.settle.heard(name, v) => changed = true,
                Ok(v) if s.settle.awaiting.contains(name) => {
                    behind.push(format!("{name} (routes by list {v})"))
                }
                Ok(_) => {}
                Err(e) => behind.push(format!("{name} ({e})")),
            }
        }
        // The gauge's one writer: it follows the settle within a poll (0 once it is over).
        self.coordinator
            .metrics
            .transition_settle_awaiting
            .set(s.settle.awaiting.len() as i64);
        if s.settle.over(s.since.elapsed()) {
            save_json(&self.settle_path, &None::<Settle>)?;
            log::info!(
                "transition: the switch to list {} settled: handoff may hand over what was \
                 streamed away",
                s.settle.version
            );
            *g = None;
            return Ok(());
        }
        if changed {
            save_json(&self.settle_path, &Some(&s.settle))?;
        }
        if s.since.elapsed() >= SETTLE_WARN_AFTER && !behind.is_empty() {
            self.settle_warning.warn(
                "transition",
                // No elapsed time in the text: `Throttled` logs a changed message at once.
                format!(
                    "the switch to list {} has settled for over {} s and waits for members that \
                     may still route by the claim before it, so this node keeps what it streamed \
                     away and forwards writes back: {}",
                    s.settle.version,
                    SETTLE_WARN_AFTER.as_secs(),
                    behind.join(", ")
                ),
            );
        }
        Ok(())
    }

    /// Deliver the writes `Replicas` forwards to the next owner of their partition.
    /// `view` with the members that left in the last switch findable (as leaving members are
    /// during a transition), when `to` is one of them and the switch is still settling.
    fn departed_view(&self, view: &Arc<ClusterView>, to: &str) -> Option<Arc<ClusterView>> {
        let departed = self.settle.lock().as_ref()?.departed.clone();
        departed.get(to)?;
        Some(Arc::new(ClusterView {
            routing_list: departed,
            ..(**view).clone()
        }))
    }

    async fn deliver_forwards(self: Arc<Self>, mut rx: tokio::sync::mpsc::Receiver<Forward>) {
        let slots = Arc::new(tokio::sync::Semaphore::new(FORWARDS_IN_FLIGHT));
        while let Some(f) = rx.recv().await {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let me = self.clone();
            tokio::spawn(async move {
                let c = &me.coordinator;
                let view = c.vnodes.membership.view();
                let to = me
                    .forward_to
                    .lock()
                    .get(f.partition as usize)
                    .cloned()
                    .flatten();
                // Not to itself or a member marked down. A member that left in the last switch
                // gets the writes this node took for its old vnodes while the switch settles:
                // a member that has not switched yet still reads from it (after that it serves
                // nothing, and is no longer in the lists).
                let to = to.filter(|to| *to != c.peers.self_name);
                let target_down = to.as_ref().is_some_and(|to| c.peers.down().contains(to));
                if target_down {
                    c.replicas.forward_lost[f.partition as usize].store(true, Ordering::SeqCst);
                }
                let to = to.filter(|_| !target_down);
                let view = match &to {
                    Some(to) if view.member(to).is_none() => me.departed_view(&view, to),
                    Some(_) => Some(view),
                    None => None,
                };
                // No forward needed: the vnode no longer moves, or the next owner is this node.
                // A next owner marked down cannot take it: the write is not acknowledged here.
                let (Some(to), Some(view)) = (to, view) else {
                    let _ = f.done.send(!target_down);
                    return;
                };
                let t = Target {
                    partition: f.partition,
                    node: to,
                    role: Role::Primary,
                };
                let deadline = Instant::now() + c.replicas.default_deadline;
                let r = c
                    .transfer_replica(&view, &t, f.bucket, f.key, Arc::new(f.object), deadline)
                    .await;
                if let Err(e) = &r {
                    log::debug!("transition: forward to {} failed: {e}", t.node);
                    c.metrics.transition_forwards_failed.inc();
                    c.replicas.forward_lost[f.partition as usize].store(true, Ordering::SeqCst);
                }
                let _ = f.done.send(r.is_ok());
                drop(permit);
            });
        }
    }
}

/// What switching needs to know of one member's `RingState` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MemberProgress {
    /// The newest member list it runs.
    list_version: u64,
    /// The list its write forwarding was last set for.
    forwarding_version: u64,
    /// It routes by the target already (it switched).
    completed: bool,
    /// (partition, next owner) it has sent whole.
    sent: BTreeSet<(u32, String)>,
}

impl MemberProgress {
    /// `None` when the answer's member list does not parse.
    fn of(s: &pb::RingStateResponse, target: &[&str]) -> Option<MemberProgress> {
        let list = MemberList::parse(&s.list_json).ok()?;
        Some(MemberProgress {
            list_version: list.version(),
            forwarding_version: s.forwarding_version,
            completed: s.target_owners.is_empty() && s.routing_owners == target,
            sent: s
                .transferred
                .iter()
                .map(|t| (t.partition, t.to.clone()))
                .collect(),
        })
    }
}

/// Whether a node may make the target of list `version` its routing claim, given what the
/// members a partition moves from or to report (`states`; a member missing is unreachable):
/// - every next owner runs list `version` *and forwards for it* — a partition never moves to a
///   member that has not started, and a write a switched member sends a next owner must reach
///   the current owner too, which members not switched yet still read (a next owner that had
///   the list but had not set its forwarding yet lost writes acknowledged at w=2);
/// - every current owner runs list `version` and has sent each of its moving partitions whole,
///   or has switched already.
fn ready_to_switch(
    moves: &[Move],
    version: u64,
    states: &BTreeMap<String, MemberProgress>,
) -> bool {
    moves.iter().all(|m| {
        let receiver = states
            .get(&m.to)
            .is_some_and(|s| s.list_version == version && s.forwarding_version == version);
        let sender = states.get(&m.from).is_some_and(|s| {
            s.list_version == version
                && (s.completed || s.sent.contains(&(m.partition, m.to.clone())))
        });
        receiver && sender
    })
}

/// The transition gauges from `p`: partitions still to send (0 when no transition runs, or `p`
/// is for another list) and bytes streamed for the newest list (`current`: `p` is for it).
/// Set at every step and after every batch (a partition streams within one step).
fn publish(m: &Metrics, p: &Progress, current: bool, running: bool) {
    let to_send = if current && running {
        p.partitions.values().filter(|t| !t.sent).count()
    } else {
        0
    };
    let bytes: u64 = if current {
        p.partitions.values().map(|t| t.bytes).sum()
    } else {
        0
    };
    m.transition_partitions_to_send.set(to_send as i64);
    m.transition_bytes_sent.set(bytes as i64);
}

/// An object to send: its place, the object, and its size.
struct Item {
    bucket: Vec<u8>,
    key: Vec<u8>,
    object: Arc<Object>,
    bytes: u64,
}

/// The next batch of the fold (only objects written after `newer_than`, when given), the last
/// (bucket, key) it read, and whether the fold is at its end.
#[allow(clippy::type_complexity)]
fn next_batch(
    fold: &mut impl Iterator<Item = Result<FoldedObject, levee_store::Error>>,
    partition: u32,
    newer_than: Option<u64>,
) -> Result<(Vec<Item>, Option<(Vec<u8>, Vec<u8>)>, bool), Status> {
    let mut batch = Vec::new();
    let mut last = None;
    let mut read = 0;
    let mut bytes_in = 0;
    while batch.len() < BATCH_OBJECTS && bytes_in < BATCH_BYTES && read < 16 * BATCH_OBJECTS {
        let Some(o) = fold.next() else {
            return Ok((batch, last, true));
        };
        let o = o.map_err(crate::errors::to_status)?;
        read += 1;
        last = Some((o.bucket.clone(), o.key.clone()));
        if newer_than.is_some_and(|s| o.object.sqn <= s) {
            continue;
        }
        let object = crate::replica::stored_object_of(&o.object, "transition", partition)?;
        let bytes = (o.object.value.len() + o.object.metadata.len()) as u64;
        bytes_in += bytes;
        batch.push(Item {
            bucket: o.bucket,
            key: o.key,
            object: Arc::new(object),
            bytes,
        });
    }
    Ok((batch, last, false))
}

/// A member's `RingState`, within a few seconds.
async fn ring_state_of(peers: &Peers, member: &Member) -> Result<pb::RingStateResponse, Status> {
    let mut client = peers.client(member)?;
    let mut req = tonic::Request::new(pb::RingStateRequest {});
    req.set_timeout(Duration::from_secs(3));
    // The deadline header alone does not end a call whose connection never completes (a member
    // that has bound its port but serves nothing yet, as while it asks the others in turn).
    match tokio::time::timeout(Duration::from_secs(3), client.ring_state(req)).await {
        Ok(r) => Ok(r?.into_inner()),
        Err(_) => Err(Status::unavailable(format!(
            "{} did not answer RingState within 3 s",
            member.name
        ))),
    }
}

/// A ring reported by a member, as a view of this node's ring parameters.
fn view_of_state(cfg: &NodeConfig, s: &pb::RingStateResponse) -> Result<ClusterView> {
    let params = levee_cluster::RingParams::new(
        levee_cluster::RingSize::new(cfg.cluster.ring_size)?,
        cfg.n_val(),
    )?;
    let list = MemberList::parse(&s.list_json).context("its member list")?;
    let routing_list = MemberList::parse(&s.routing_list_json).context("its routing list")?;
    membership::view_of(
        params,
        list,
        routing_list,
        &s.routing_owners,
        Some(&s.target_owners),
    )
}

/// A node with no committed ring takes the ring of a member that has one before it opens its
/// stores: the claims of a list depend on the lists before it. When that member holds data and
/// this one owns partitions in its ring, this member lost its data: its vnodes are marked to
/// rebuild (`rebuild.rs`). With a list above version 1 it waits (logging every 10 s) while a
/// member that might have a ring cannot be reached; it starts from the list when every other
/// member answers that it has no committed ring (a cluster formed at once), answers with
/// something that is not a ring, or — with the first list — after one round of asking.
pub async fn take_ring_from_peers(cfg: &NodeConfig, peers: &Peers) -> Result<()> {
    if cfg.data_dir.join(MEMBERS_FILE).exists() {
        return Ok(());
    }
    let Some(file) = &cfg.cluster.members_file else {
        return Ok(());
    };
    let Ok(text) = std::fs::read_to_string(file) else {
        return Ok(());
    };
    let Ok(list) = membership::parse_members_text(&text) else {
        return Ok(()); // the members file's error is reported where it is loaded
    };
    let others: Vec<&Member> = list
        .members()
        .iter()
        .filter(|m| m.name != cfg.node_name)
        .collect();
    let began = Instant::now();
    let mut told = Instant::now();
    loop {
        let mut uncommitted = Vec::new();
        let mut unreachable = Vec::new();
        // Asked all at once: a member that cannot answer costs its timeout once, not in turn.
        let answers =
            futures_util::future::join_all(others.iter().map(|m| ring_state_of(peers, m))).await;
        for (m, answer) in others.iter().zip(answers) {
            match answer {
                Ok(s) if s.committed => match view_of_state(cfg, &s) {
                    Ok(v) => {
                        std::fs::create_dir_all(&cfg.data_dir)
                            .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
                        // Owning partitions in a ring whose members hold data, with no ring of
                        // its own: this member lost what it held (a new volume under its name).
                        // Marked before the ring is committed, so a crash in between leaves the
                        // vnodes rebuilding, never taken for complete.
                        if s.holds_data {
                            let n = crate::rebuild::mark(&cfg.data_dir, &v.claim, &cfg.node_name)?;
                            if n > 0 {
                                log::warn!(
                                    "membership: this member owns {n} partition(s) in {}'s ring but has no data: \
                                     they rebuild from the other replicas before they answer reads",
                                    m.name
                                );
                            }
                        }
                        membership::commit_peer_view(&cfg.data_dir, &v)?;
                        log::info!(
                            "membership: no ring of its own yet; took {}'s (member list version {}{})",
                            m.name,
                            v.list.version(),
                            if v.target.is_some() { ", transition under way" } else { "" }
                        );
                        return Ok(());
                    }
                    Err(e) => log::warn!("membership: {}'s ring is not usable here: {e:#}", m.name),
                },
                Ok(_) => uncommitted.push(m.name.as_str()),
                // It answered, but not with a ring (not a levee that has one): nothing to take.
                Err(e) if !crate::peers::is_unreachable(&e) => uncommitted.push(m.name.as_str()),
                Err(e) => unreachable.push(format!("{} ({})", m.name, e.message())),
            }
        }
        // The first list: members forming a cluster start together, and none serves before it
        // has its ring, so one round of asking is all (a member that lost its data while every
        // other was down starts from the list, and read repair refills it).
        if uncommitted.len() == others.len() || list.version() <= 1 {
            log::info!(
                "membership: no member has a committed ring{}: starting from member list version {}",
                if unreachable.is_empty() { String::new() } else { format!(" (unreachable: {})", unreachable.join(", ")) },
                list.version()
            );
            return Ok(());
        }
        if told.elapsed() >= Duration::from_secs(10) {
            log::warn!(
                "membership: joining with member list version {}: waiting {:.0} s for a member's ring; \
                 unreachable: {}",
                list.version(),
                began.elapsed().as_secs_f64(),
                unreachable.join(", ")
            );
            told = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(partition: u32, from: &str, to: &str) -> Move {
        Move {
            partition,
            from: from.into(),
            to: to.into(),
        }
    }

    /// A member on list `v`, forwarding for it, having sent `sent`.
    fn on(v: u64, sent: &[(u32, &str)]) -> MemberProgress {
        MemberProgress {
            list_version: v,
            forwarding_version: v,
            completed: false,
            sent: sent.iter().map(|(p, to)| (*p, to.to_string())).collect(),
        }
    }

    #[test]
    fn a_node_switches_only_when_every_source_sent_and_every_receiver_forwards() {
        // List 2 moves p0 n1 -> n4 and p1 n2 -> n4.
        let moves = [mv(0, "n1", "n4"), mv(1, "n2", "n4")];
        let all = |n1: MemberProgress, n2: MemberProgress, n4: Option<MemberProgress>| {
            let mut m = BTreeMap::from([("n1".to_string(), n1), ("n2".to_string(), n2)]);
            if let Some(n4) = n4 {
                m.insert("n4".to_string(), n4);
            }
            m
        };
        let sent1 = || on(2, &[(0, "n4")]);
        let sent2 = || on(2, &[(1, "n4")]);
        let cases: Vec<(&str, BTreeMap<String, MemberProgress>, bool)> = vec![
            (
                "everything sent, receiver forwards",
                all(sent1(), sent2(), Some(on(2, &[]))),
                true,
            ),
            (
                "receiver runs the list but has not set its forwarding for it yet",
                all(
                    sent1(),
                    sent2(),
                    Some(MemberProgress {
                        forwarding_version: 1,
                        ..on(2, &[])
                    }),
                ),
                false,
            ),
            (
                "receiver just started: forwarding never set",
                all(
                    sent1(),
                    sent2(),
                    Some(MemberProgress {
                        forwarding_version: 0,
                        ..on(2, &[])
                    }),
                ),
                false,
            ),
            ("receiver unreachable", all(sent1(), sent2(), None), false),
            (
                "receiver on an older list",
                all(sent1(), sent2(), Some(on(1, &[]))),
                false,
            ),
            (
                "receiver on a newer list",
                all(sent1(), sent2(), Some(on(3, &[]))),
                false,
            ),
            (
                "one source still streaming",
                all(sent1(), on(2, &[]), Some(on(2, &[]))),
                false,
            ),
            (
                "a source sent the partition to another member",
                all(sent1(), on(2, &[(1, "n5")]), Some(on(2, &[]))),
                false,
            ),
            (
                "a source that switched already counts as sent",
                all(
                    sent1(),
                    MemberProgress {
                        completed: true,
                        ..on(2, &[])
                    },
                    Some(on(2, &[])),
                ),
                true,
            ),
            (
                "a source on an older list (has not started the transition)",
                all(sent1(), on(1, &[(1, "n4")]), Some(on(2, &[]))),
                false,
            ),
        ];
        for (name, states, want) in cases {
            assert_eq!(ready_to_switch(&moves, 2, &states), want, "{name}");
        }
        // No moves: nothing to wait for.
        assert!(ready_to_switch(&[], 2, &BTreeMap::new()));
    }

    #[test]
    fn member_progress_reads_a_ring_state_answer() {
        let list = MemberList::parse(
            r#"{"version": 3, "members": [{"name": "n1", "address": "n1:7070"}]}"#,
        );
        let Ok(list) = list else {
            panic!("test list: {list:?}")
        };
        let s = pb::RingStateResponse {
            list_json: list.to_json(),
            routing_owners: vec!["n1".into(), "n2".into()],
            target_owners: vec![],
            transferred: vec![pb::Transferred {
                partition: 5,
                to: "n2".into(),
            }],
            forwarding_version: 3,
            ..Default::default()
        };
        let p = MemberProgress::of(&s, &["n1", "n2"]).unwrap();
        assert_eq!(
            p,
            MemberProgress {
                list_version: 3,
                forwarding_version: 3,
                completed: true,
                sent: BTreeSet::from([(5, "n2".to_string())]),
            }
        );
        // Routing by another claim with a target: not switched.
        let p = MemberProgress::of(
            &pb::RingStateResponse {
                target_owners: vec!["n2".into(), "n2".into()],
                ..s.clone()
            },
            &["n2", "n2"],
        )
        .unwrap();
        assert!(!p.completed);
        assert!(MemberProgress::of(
            &pb::RingStateResponse {
                list_json: "{".into(),
                ..s
            },
            &[]
        )
        .is_none());
    }

    #[test]
    fn progress_round_trips_through_its_file() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(TRANSFERS_FILE);
        let mut p = Progress {
            version: 4,
            ..Default::default()
        };
        p.partitions.insert(
            7,
            PartitionTransfer {
                to: "n4".into(),
                start_sqn: 99,
                after: Some((b"b".to_vec(), b"k\x00\xff".to_vec())),
                objects: 3,
                bytes: 300,
                ..Default::default()
            },
        );
        save_json(&path, &p).unwrap();
        let back: Progress = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
