//! A coordinated write (PUT or DELETE): the first reachable replica of the preflist — this
//! node's own when it holds one — makes the write's clock from the client's context and stores
//! it (`CoordinatePut`); the stored object goes to every other replica (`MergeReplica`) at once.
//! The client is answered as soon as the `PutTracker` says the quorum is met or out of reach; the
//! remaining replicas still get the object (a reply after the answer is not waited for).

use std::sync::Arc;
use std::time::Instant;

use levee_cluster::{
    encode_context, hint_holders, Clock, Content, PutDecision, PutReply, PutTracker, Replica,
    ReplicaRole, Role, WriteOptions,
};
use levee_proto::v1 as pb;
use tonic::Status;

use super::{failure_of, is_request_error, policy_pb, remaining, Coordinator};
use crate::replica::{object_of, Stored, WriteStamp};

/// What a hint of one write carries.
#[derive(Clone)]
struct Hint {
    view: Arc<crate::membership::ClusterView>,
    partition: u32,
    n_val: u32,
    bucket: Vec<u8>,
    key: Vec<u8>,
    object: Arc<levee_cluster::Object>,
    policy: levee_cluster::ConflictPolicy,
}

/// A client write.
pub struct Write {
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    /// `None`: a delete (a tombstone).
    pub content: Option<Content>,
    /// The client's causal context (empty clock: a blind write).
    pub context: Clock,
    pub index_changes: Vec<pb::IndexChange>,
    pub bucket_type: String,
    pub options: WriteOptions,
}

/// A write the quorum acknowledged: the object as the coordinating replica stored it.
pub struct Written {
    pub stored: Stored,
}

impl Written {
    /// The context to pass with the next write of this key.
    pub fn context(&self) -> Vec<u8> {
        encode_context(&self.stored.object.siblings.context())
    }
}

impl Coordinator {
    pub async fn put(self: &Arc<Self>, mut w: Write, deadline: Instant) -> Result<Written, Status> {
        levee_store::validate_object_key(&w.bucket, &w.key).map_err(crate::errors::to_status)?;
        // Checked here too, so a bad change fails before any replica is written.
        let changes = crate::kv::edits_from(w.index_changes.clone())?;
        if let Some(c) = &w.content {
            if c.value.len() > self.max_value_bytes {
                return Err(crate::errors::to_status(
                    levee_store::Error::ValueTooLarge {
                        size: c.value.len(),
                        limit: self.max_value_bytes,
                    },
                ));
            }
            let limit = levee_store::Config::default().max_metadata_bytes;
            if c.metadata.len() > limit {
                return Err(crate::errors::to_status(
                    levee_store::Error::MetadataTooLarge {
                        size: c.metadata.len(),
                        limit,
                    },
                ));
            }
        }
        let props = self.props(&w.bucket_type)?;
        let quorum = props
            .write(&w.options)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let policy = props.conflict;
        if w.content.is_none()
            && w.context.is_empty()
            && policy == levee_cluster::ConflictPolicy::Siblings
        {
            // A delete without a context deletes what the key holds now (as Riak's client
            // does): its context is read first, so the tombstone supersedes those values
            // instead of becoming one more sibling.
            let read = super::get::Read {
                bucket: w.bucket.clone(),
                key: w.key.clone(),
                bucket_type: w.bucket_type.clone(),
                options: levee_cluster::ReadOptions::default(),
                values: false,
            };
            w.context = match self.get(read, deadline).await? {
                super::get::ReadOutcome::Found { merged, .. } => merged.context(),
                super::get::ReadOutcome::NotFound { context } => context.unwrap_or_default(),
            };
        }
        let plan = self.plan(&w.bucket, &w.key, props.n_val)?;
        let targets = plan.targets.targets.clone();
        let roles = ReplicaRole::of_targets(&plan.targets);
        let mut tracker = PutTracker::new(quorum, &roles);
        if let PutDecision::Failed(e) = tracker.decision() {
            return Err(quorum_status(&e, None));
        }
        let mut overload = LastOverload::default();
        let timestamp_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        let context = encode_context(&w.context);
        let stamp = WriteStamp {
            timestamp_us,
            n_val: levee_cluster::causality::recorded_n_val(props.n_val, plan.view.claim.n_val()),
        };
        // Coordinate on this node's replica if it has one, else on the first target; never first
        // on a vnode rebuilding here (it lacks the object to merge with).
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if let Some(i) = targets.iter().position(|t| self.is_local(t)) {
            order.remove(i);
            if self.replicas.readable(targets[i].partition).is_ok() {
                order.insert(0, i);
            } else {
                order.push(i);
            }
        }
        let mut coordinated: Option<(usize, Stored)> = None;
        let mut refused = Vec::new();
        // Primaries whose node could not be reached or whose vnode was too busy: they get a hint
        // (below).
        let mut to_hint = Vec::new();
        for &i in &order {
            let t = &targets[i];
            let res = if self.is_local(t) {
                let (p, b, k, ctx) = (
                    t.partition,
                    w.bucket.clone(),
                    w.key.clone(),
                    w.context.clone(),
                );
                let (content, changes) = (w.content.clone(), changes.clone());
                self.replicas
                    .write(p, deadline, move |r| {
                        r.coordinate_put(p, &b, &k, &ctx, content, stamp, policy, &changes)
                    })
                    .await
                    .map(|s| (s, self.replicas.durable))
            } else {
                self.coordinate_remote(&plan.view, t, &w, &context, stamp, policy, deadline)
                    .await
            };
            match res {
                Ok((stored, durable)) => {
                    let reply = if durable {
                        PutReply::Durable
                    } else {
                        PutReply::Written
                    };
                    let _ = tracker.add(i, reply);
                    coordinated = Some((i, stored));
                    break;
                }
                Err(s) if is_request_error(&s) => return Err(s),
                Err(s) => {
                    log::debug!(
                        "coordinating a put on {} p{} failed: {s}",
                        t.node,
                        t.partition
                    );
                    refused.push(i);
                    if crate::peers::needs_hint(&s) && targets[i].role == Role::Primary {
                        to_hint.push(i);
                    }
                    overload.note(&s);
                    if let Ok(PutDecision::Failed(e)) =
                        tracker.add(i, PutReply::Failed(failure_of(&s)))
                    {
                        return Err(quorum_status(&e, overload.0.as_ref()));
                    }
                }
            }
        }
        let Some((coordinator, stored)) = coordinated else {
            return match tracker.decision() {
                PutDecision::Failed(e) => Err(quorum_status(&e, overload.0.as_ref())),
                _ => Err(Status::internal("no replica coordinated the write")),
            };
        };
        let object = Arc::new(stored.object.clone());
        let hint = Hint {
            view: plan.view.clone(),
            partition: plan.partition,
            n_val: plan.n_val,
            bucket: w.bucket.clone(),
            key: w.key.clone(),
            object: object.clone(),
            policy,
        };
        let mut missed = plan.targets.uncovered.clone();
        missed.extend(to_hint.iter().map(|&i| Replica {
            partition: targets[i].partition,
            node: targets[i].node.clone(),
        }));
        if !missed.is_empty() {
            tokio::spawn(self.clone().send_hints(hint.clone(), missed));
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for &i in &order {
            if i == coordinator || refused.contains(&i) {
                continue;
            }
            let (me, view, t, tx) = (
                self.clone(),
                plan.view.clone(),
                targets[i].clone(),
                tx.clone(),
            );
            let (b, k, o) = (w.bucket.clone(), w.key.clone(), object.clone());
            let hint = hint.clone();
            tokio::spawn(async move {
                let (reply, err) =
                    match me.merge_replica(&view, &t, b, k, o, policy, deadline).await {
                        Ok(true) => (PutReply::Durable, None),
                        Ok(false) => (PutReply::Written, None),
                        Err(s) => {
                            log::debug!(
                                "replicating a put to {} p{} failed: {s}",
                                t.node,
                                t.partition
                            );
                            // Its node could not be reached or its vnode was too busy: keep a
                            // hint of the write elsewhere.
                            if crate::peers::needs_hint(&s) && t.role == Role::Primary {
                                let missed = vec![Replica {
                                    partition: t.partition,
                                    node: t.node.clone(),
                                }];
                                tokio::spawn(me.clone().send_hints(hint, missed));
                            }
                            (PutReply::Failed(failure_of(&s)), Some(s))
                        }
                    };
                let _ = tx.send((i, reply, err));
            });
        }
        drop(tx);
        let mut decision = tracker.decision();
        while decision == PutDecision::Wait {
            decision = match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
                Ok(Some((i, reply, err))) => {
                    if let Some(s) = &err {
                        overload.note(s);
                    }
                    tracker.add(i, reply).unwrap_or(PutDecision::Wait)
                }
                Ok(None) | Err(_) => tracker.expire(),
            };
        }
        match decision {
            PutDecision::Succeeded(_) => Ok(Written { stored }),
            PutDecision::Failed(e) => Err(quorum_status(&e, overload.0.as_ref())),
            PutDecision::Wait => unreachable!("the loop runs until a decision"),
        }
    }

    /// Keep a hint of the write for each replica in `missed` on another live node
    /// (`levee_cluster::hint_holders`), which hands it to the primary when it is back
    /// (`handoff.rs`). Best effort: a hint counts toward no quorum.
    async fn send_hints(self: Arc<Self>, h: Hint, missed: Vec<Replica>) {
        let mut down = self.peers.down();
        down.extend(missed.iter().map(|m| m.node.clone()));
        let holders = hint_holders(&h.view.claim, h.partition, h.n_val, &down, &missed);
        let deadline = Instant::now() + self.replicas.default_deadline;
        for (m, holder) in missed.iter().zip(holders) {
            let Some(t) = holder else {
                log::debug!(
                    "no live node can hold a hint for {} p{}",
                    m.node,
                    m.partition
                );
                continue;
            };
            let res = self
                .merge_replica(
                    &h.view,
                    &t,
                    h.bucket.clone(),
                    h.key.clone(),
                    h.object.clone(),
                    h.policy,
                    deadline,
                )
                .await;
            match res {
                Ok(_) => self.metrics.hints.inc(),
                Err(e) => log::debug!(
                    "hint for {} p{} on {} failed: {e}",
                    m.node,
                    m.partition,
                    t.node
                ),
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn coordinate_remote(
        self: &Arc<Self>,
        view: &crate::membership::ClusterView,
        t: &levee_cluster::Target,
        w: &Write,
        context: &[u8],
        stamp: WriteStamp,
        policy: levee_cluster::ConflictPolicy,
        deadline: Instant,
    ) -> Result<(Stored, bool), Status> {
        let mut client = self.peers.client(self.member(view, t)?)?;
        let (metadata, value, tombstone) = match &w.content {
            Some(c) => (c.metadata.clone(), c.value.clone(), false),
            None => (Vec::new(), Vec::new(), true),
        };
        let mut req = tonic::Request::new(pb::CoordinatePutRequest {
            key: Some(pb::ReplicaKey {
                partition: t.partition,
                bucket: w.bucket.clone(),
                key: w.key.clone(),
            }),
            context: context.to_vec(),
            tombstone,
            metadata,
            value,
            timestamp_us: stamp.timestamp_us,
            policy: policy_pb(policy),
            index_changes: w.index_changes.clone(),
            n_val: u32::from(stamp.n_val),
        });
        req.set_timeout(remaining(deadline));
        let r = self.observed(t, client.coordinate_put(req).await)?;
        let object = object_of(&r.siblings, &r.contents)
            .map_err(|e| Status::data_loss(format!("member {}: {}", t.node, e.message())))?;
        Ok((
            Stored {
                object,
                sqn: r.sqn,
                forwarded: None,
            },
            r.durable,
        ))
    }
}

/// The client's error for a quorum that was not met: UNAVAILABLE (the replicas may answer on a
/// retry), the counts in the message and — when replicas refused for overload — the last
/// refusal's words and its retry hint.
pub fn quorum_status(e: &levee_cluster::QuorumError, overload: Option<&Status>) -> Status {
    match overload.filter(|_| e.is_overload()) {
        Some(o) => {
            let mut s = Status::unavailable(format!("{e}: {}", o.message()));
            if let Some(hint) = o.metadata().get("retry-after-ms") {
                s.metadata_mut().insert("retry-after-ms", hint.clone());
            }
            s
        }
        None => Status::unavailable(e.to_string()),
    }
}

/// The last overload refusal among replica replies, for [`quorum_status`].
#[derive(Default, Clone)]
pub struct LastOverload(pub Option<Status>);

impl LastOverload {
    pub fn note(&mut self, s: &Status) {
        if failure_of(s) == levee_cluster::Failure::Overloaded {
            self.0 = Some(s.clone());
        }
    }
}
