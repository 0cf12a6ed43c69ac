//! Hinted handoff, the sending side: what this node holds in vnodes it does not own — hints a
//! coordinator left here for an unreachable primary (`coordinator/put.rs`), or writes it took as
//! a fallback — goes back to the partition's owner once the owner is up, and is then dropped
//! here.
//!
//! Every `PASS_EVERY`, each vnode this node does not own and that changed since it was last seen
//! empty is folded (one snapshot per pass) in batches of `BATCH_OBJECTS`: each object is merged
//! into the owner's replica (`MergeReplica`, the same merge a write uses, so a handoff never
//! undoes a newer write there), and once the whole batch is acknowledged each object is dropped
//! here if no write changed it meanwhile. A batch that fails stops the vnode's transfer until
//! the next pass, which starts again from what is still here — the transfer resumes, it never
//! restarts from scratch, and nothing is dropped before its owner has it. Transfers are
//! throttled to `max_bytes_per_sec` (config `[handoff]`).
//!
//! After a ring transition the old owner's vnode goes the same way; objects the transition
//! already streamed to the new owner (written no later than the stream's start) are dropped
//! without being sent again. A vnode this node is about to own (the next owner in a transition
//! under way) is not handed off: it is receiving.

use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{Object, Role, SiblingSet, Target};
use levee_store::{FoldOrder, FoldedObject, SnapshotKind};
use parking_lot::Mutex;
use tonic::Status;

use crate::coordinator::Coordinator;

const PASS_EVERY: Duration = Duration::from_secs(1);
const BATCH_OBJECTS: usize = 64;

/// A fold kept between batches: its snapshot and iterator.
type Fold = (
    levee_store::Snapshot,
    Box<dyn Iterator<Item = Result<FoldedObject, levee_store::Error>> + Send>,
);

pub struct Handoff {
    pub coordinator: Arc<Coordinator>,
    transitions: Arc<crate::transition::Transitions>,
    /// The byte rate and busy share of transfers, which run one after another and share it
    /// (`pacing.rs`).
    pacer: Mutex<crate::pacing::Pacer>,
    /// Per vnode: its last journal sequence number when a pass found nothing to hand off.
    clean: Mutex<Vec<Option<u64>>>,
}

/// One object to hand off: its place, the object and the sibling set it was read with.
struct Item {
    bucket: Vec<u8>,
    key: Vec<u8>,
    object: Arc<Object>,
    set: SiblingSet,
    bytes: u64,
    /// False: the owner has it already (a ring transition streamed it); only dropped here.
    send: bool,
}

impl Handoff {
    pub fn new(
        coordinator: Arc<Coordinator>,
        transitions: Arc<crate::transition::Transitions>,
        pace: crate::pacing::Pace,
    ) -> Handoff {
        let n = coordinator.vnodes.stores.len();
        Handoff {
            coordinator,
            transitions,
            pacer: Mutex::new(crate::pacing::Pacer::new(pace)),
            clean: Mutex::new(vec![None; n]),
        }
    }

    pub async fn run(self: Arc<Self>) {
        loop {
            tokio::time::sleep(PASS_EVERY).await;
            self.pass().await;
        }
    }

    /// One look at every vnode this node does not own.
    async fn pass(&self) {
        let c = &self.coordinator;
        let view = c.vnodes.membership.view();
        let me = &c.peers.self_name;
        let down = c.peers.down();
        let (mut active, mut holding) = (0i64, 0i64);
        for (p, store) in c.vnodes.stores.iter().enumerate() {
            let owner = view.claim.owner(p as u32);
            if owner == me || view.next_owner(p as u32) == Some(me.as_str()) {
                active += 1;
                continue;
            }
            let sqn = store.stats().last_sqn;
            if self.clean.lock()[p] == Some(sqn) {
                continue;
            }
            if self.transitions.settling()
                && self.transitions.sent_through(p as u32, owner).is_some()
            {
                // Just streamed to its new owner: kept a moment for reads not yet rerouted.
                holding += 1;
                continue;
            }
            holding += 1;
            if down.contains(owner) {
                continue;
            }
            let target = Target {
                partition: p as u32,
                node: owner.to_string(),
                role: Role::Primary,
            };
            // Marked clean only by a pass that found nothing: objects written below the fold's
            // position during a transfer, or changed before they could be dropped, are found
            // by the next pass.
            let before = store.stats().last_sqn;
            match self.transfer(&view, &target).await {
                Ok(Transferred { seen: 0, .. }) => {
                    self.clean.lock()[p] = Some(before);
                    holding -= 1;
                }
                Ok(t) => {
                    log::info!(
                        "handoff: p{p}: {} objects handed to {owner} ({} seen)",
                        t.handed,
                        t.seen
                    );
                }
                Err(e) => log::info!("handoff: p{p} to {owner} stopped, retried later: {e}"),
            }
        }
        let total = c.vnodes.stores.len() as i64;
        let g = &c.metrics.vnodes;
        g.with_label_values(&["active"]).set(active);
        g.with_label_values(&["handoff"]).set(holding);
        g.with_label_values(&["idle"]).set(total - active - holding);
    }

    /// Hand every object of vnode `t.partition` to `t.node`.
    async fn transfer(
        &self,
        view: &Arc<crate::membership::ClusterView>,
        t: &Target,
    ) -> Result<Transferred, Status> {
        let c = &self.coordinator;
        let store = c.replicas.vnode_store(t.partition)?;
        let mut fold: Option<Fold> = None;
        let (mut handed, mut seen) = (0u64, 0u64);
        let sent_through = self.transitions.sent_through(t.partition, &t.node);
        loop {
            let paced = crate::pacing::Batch::start(&self.pacer);
            let st = store.clone();
            let partition = t.partition;
            let (batch, rest) =
                tokio::task::spawn_blocking(move || next_batch(&st, fold, partition, sent_through))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))??;
            fold = rest;
            if batch.is_empty() {
                return Ok(Transferred { seen, handed });
            }
            seen += batch.len() as u64;
            let mut bytes = 0u64;
            let deadline = Instant::now() + c.replicas.default_deadline;
            let sends = batch.iter().filter(|it| it.send).map(|it| {
                c.merge_replica(
                    view,
                    t,
                    it.bucket.clone(),
                    it.key.clone(),
                    it.object.clone(),
                    levee_cluster::ConflictPolicy::Siblings,
                    deadline,
                )
            });
            for r in futures_util::future::join_all(sends).await {
                r?;
            }
            for it in batch {
                let (b, k, set, p) = (it.bucket, it.key, it.set, t.partition);
                let dropped = c
                    .replicas
                    .call(p, deadline, move |r| r.remove_if_unchanged(p, &b, &k, &set))
                    .await?;
                if dropped {
                    handed += 1;
                }
                if it.send {
                    c.metrics.handoff_objects.inc();
                    bytes += it.bytes;
                    c.metrics.handoff_bytes.inc_by(it.bytes);
                }
            }
            paced.done(bytes).await;
        }
    }
}

/// What one transfer did: objects it found in the vnode, and those it dropped once the owner
/// had them (an object changed meanwhile stays for the next pass).
struct Transferred {
    seen: u64,
    handed: u64,
}

/// The next batch of objects of a vnode's fold (started on the first call).
fn next_batch(
    store: &levee_store::Store,
    fold: Option<Fold>,
    partition: u32,
    sent_through: Option<u64>,
) -> Result<(Vec<Item>, Option<Fold>), Status> {
    let (snap, mut objects) = match fold {
        Some(f) => f,
        None => {
            let snap = store
                .snapshot(SnapshotKind::Fold)
                .map_err(crate::errors::to_status)?;
            let objects = Box::new(
                snap.fold_objects(None, FoldOrder::Key)
                    .map_err(crate::errors::to_status)?,
            );
            (snap, objects as _)
        }
    };
    let mut batch = Vec::new();
    while batch.len() < BATCH_OBJECTS {
        let Some(o) = objects.next() else {
            return Ok((batch, None));
        };
        let o = o.map_err(crate::errors::to_status)?;
        let object = crate::replica::stored_object_of(&o.object, "handoff", partition)?;
        let set = object.siblings.clone();
        let bytes = (o.object.value.len() + o.object.metadata.len()) as u64;
        batch.push(Item {
            bucket: o.bucket,
            key: o.key,
            object: Arc::new(object),
            set,
            bytes,
            send: sent_through.is_none_or(|s| o.object.sqn > s),
        });
    }
    Ok((batch, Some((snap, objects))))
}
