//! The coordinator: any node takes any client request and runs it against the key's replicas —
//! the `n_val` partitions of its preflist, on the members that own them, or on fallbacks for
//! members marked down (`peers.rs`). The decisions are `levee_cluster`'s trackers
//! (`PutTracker`, `GetTracker`); this module sends the replica calls and feeds them the replies.
//!
//! * [`put`] — a write: one replica coordinates it (makes the new clock from the client's
//!   context and stores it), the others merge the stored object; the client is answered once
//!   `w` / `pw` / `dw` are met.
//! * [`get`] — a read, HEAD-then-GET: every replica answers from its ledger, the winners' values
//!   are fetched from one replica each, and stale or missing replicas are repaired afterwards.
//!
//! A replica on this node is called in process (through its vnode's admission, as the `Node`
//! service does for other coordinators); a replica elsewhere through `levee.v1.Node`.

pub mod coverage;
pub mod get;
pub mod index_query;
pub mod put;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{
    decode_siblings, encode_siblings, targets_n, BucketTypeProps, ConflictPolicy, Failure, Member,
    Object, SiblingSet, Target, Targets,
};
use levee_proto::v1 as pb;
use tonic::{Code, Status};

use crate::membership::ClusterView;
use crate::metrics::Metrics;
use crate::peers::Peers;
use crate::replica::{object_of, MergeMode, Replicas, Stored};
use crate::vnodes::Vnodes;

/// How many times a coverage query replaces the vnodes of members that died under it.
pub(crate) const MAX_REPLANS: u32 = 4;

pub struct Coordinator {
    pub vnodes: Arc<Vnodes>,
    pub replicas: Arc<Replicas>,
    pub peers: Arc<Peers>,
    pub metrics: Arc<Metrics>,
    pub bucket_types: BTreeMap<String, BucketTypeProps>,
    /// Largest value a client may write (`max_value_bytes`); the stores take whole replica
    /// objects (every sibling), up to the message limit.
    pub max_value_bytes: usize,
    /// How long tombstones are kept before a read may reap them (`None`: never).
    pub delete_delay: Option<Duration>,
}

/// The replicas of one request: where each goes, and the member list they were chosen from.
pub struct Plan {
    pub view: Arc<ClusterView>,
    /// The key's partition: its preflist starts there.
    pub partition: u32,
    pub n_val: u32,
    pub targets: Targets,
}

/// What a replica's failure counts as in a tracker.
pub fn failure_of(s: &Status) -> Failure {
    match s.code() {
        Code::Unavailable if s.metadata().get("retry-after-ms").is_some() => Failure::Overloaded,
        Code::DeadlineExceeded | Code::Cancelled => Failure::Timeout,
        _ => Failure::Error,
    }
}

/// Errors that say the request itself is wrong: every replica would say the same, so the client
/// gets this one at once instead of a quorum error.
pub fn is_request_error(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::ResourceExhausted
    )
}

fn policy_pb(p: ConflictPolicy) -> i32 {
    match p {
        ConflictPolicy::Lww => pb::ConflictPolicy::Lww as i32,
        ConflictPolicy::Siblings => pb::ConflictPolicy::Siblings as i32,
    }
}

/// The request's remaining time, for a remote call's `grpc-timeout`.
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

impl Coordinator {
    /// The defaults of a bucket type ("default" for an empty name).
    pub fn props(&self, bucket_type: &str) -> Result<BucketTypeProps, Status> {
        let name = if bucket_type.is_empty() {
            "default"
        } else {
            bucket_type
        };
        self.bucket_types.get(name).copied().ok_or_else(|| {
            Status::invalid_argument(format!(
                "unknown bucket type {name:?}; this node knows {:?} (node config [bucket_types.<name>])",
                self.bucket_types.keys().collect::<Vec<_>>()
            ))
        })
    }

    /// The targets of (bucket, key) for a preflist of `n_val`, around the members marked down.
    pub fn plan(&self, bucket: &[u8], key: &[u8], n_val: u32) -> Result<Plan, Status> {
        let view = self.vnodes.membership.view();
        let partition = levee_cluster::partition_of(bucket, key, view.claim.ring_size());
        let targets = targets_n(&view.claim, partition, n_val, &self.peers.down())
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Plan {
            view,
            partition,
            n_val,
            targets,
        })
    }

    fn is_local(&self, t: &Target) -> bool {
        t.node == self.peers.self_name
    }

    fn member<'a>(&self, plan_view: &'a ClusterView, t: &Target) -> Result<&'a Member, Status> {
        plan_view.member(&t.node).ok_or_else(|| {
            Status::internal(format!(
                "member {} of the claim is not in the member list",
                t.node
            ))
        })
    }

    /// A remote call's outcome, noting an unreachable member.
    fn observed<T>(&self, t: &Target, r: Result<tonic::Response<T>, Status>) -> Result<T, Status> {
        r.map(tonic::Response::into_inner)
            .inspect_err(|s| self.peers.observe(&t.node, s))
    }

    /// A client for the member holding `t`, and the request naming the replica (with the
    /// request's remaining time as its `grpc-timeout`).
    fn remote(
        &self,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        deadline: Instant,
    ) -> Result<
        (
            pb::node_client::NodeClient<tonic::transport::Channel>,
            tonic::Request<pb::ReplicaKey>,
        ),
        Status,
    > {
        let client = self.peers.client(self.member(view, t)?)?;
        let mut req = tonic::Request::new(pb::ReplicaKey {
            partition: t.partition,
            bucket,
            key,
        });
        req.set_timeout(remaining(deadline));
        Ok((client, req))
    }

    /// The replica's sibling set, its vnode's queue length and the object's sequence number.
    pub async fn head_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        deadline: Instant,
    ) -> Result<(SiblingSet, u32, u64), Status> {
        let p = t.partition;
        if self.is_local(t) {
            self.replicas.readable(p)?;
            let queue = self.replicas.queue_len(p);
            let (set, sqn) = self
                .replicas
                .read(p, deadline, move |r| r.head_sqn(p, &bucket, &key))
                .await?;
            return Ok((set, queue, sqn));
        }
        let (mut client, req) = self.remote(view, t, bucket, key, deadline)?;
        let r = self.observed(t, client.head_replica(req).await)?;
        let set = decode_siblings(&r.siblings)
            .map_err(|e| Status::data_loss(format!("member {}: siblings: {e}", t.node)))?;
        Ok((set, r.queue_len, r.sqn))
    }

    /// The replica's object.
    pub async fn get_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        deadline: Instant,
    ) -> Result<Stored, Status> {
        let p = t.partition;
        if self.is_local(t) {
            self.replicas.readable(p)?;
            return self
                .replicas
                .read(p, deadline, move |r| r.get(p, &bucket, &key))
                .await;
        }
        let (mut client, req) = self.remote(view, t, bucket, key, deadline)?;
        let r = self.observed(t, client.get_replica(req).await)?;
        let object = object_of(&r.siblings, &r.contents)
            .map_err(|e| Status::data_loss(format!("member {}: {}", t.node, e.message())))?;
        Ok(Stored {
            object,
            sqn: r.sqn,
            forwarded: None,
        })
    }

    /// Drop a deleted key's replica if it still holds exactly the tombstones `set`.
    pub async fn reap_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        set: SiblingSet,
        deadline: Instant,
    ) -> Result<bool, Status> {
        let p = t.partition;
        if self.is_local(t) {
            return self
                .replicas
                .call(p, deadline, move |r| r.reap(p, &bucket, &key, &set))
                .await;
        }
        let mut client = self.peers.client(self.member(view, t)?)?;
        let mut req = tonic::Request::new(pb::ReapReplicaRequest {
            key: Some(pb::ReplicaKey {
                partition: p,
                bucket,
                key,
            }),
            siblings: encode_siblings(&set),
        });
        req.set_timeout(remaining(deadline));
        Ok(self.observed(t, client.reap_replica(req).await)?.reaped)
    }

    /// Merge `object` into the replica. Returns whether the replica is durable.
    #[allow(clippy::too_many_arguments)]
    pub async fn merge_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        object: Arc<Object>,
        policy: ConflictPolicy,
        deadline: Instant,
    ) -> Result<bool, Status> {
        let o = (object, policy);
        self.merge_into(view, t, bucket, key, o, MergeMode::Write, deadline)
            .await
    }

    /// AAE repair of a replica whose own copy cannot be read (DATA_LOSS: its value is missing from
    /// the journal): `object` is stored there even if the replica holds the same sibling set.
    #[allow(clippy::too_many_arguments)]
    pub async fn rewrite_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        object: Arc<Object>,
        policy: ConflictPolicy,
        deadline: Instant,
    ) -> Result<bool, Status> {
        let o = (object, policy);
        self.merge_into(view, t, bucket, key, o, MergeMode::Rewrite, deadline)
            .await
    }

    /// A ring transition's stream or forward of an object to the vnode's next (or previous)
    /// owner: merged there like a write, and not forwarded on.
    pub async fn transfer_replica(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        object: Arc<Object>,
        deadline: Instant,
    ) -> Result<bool, Status> {
        let o = (object, ConflictPolicy::Siblings);
        self.merge_into(view, t, bucket, key, o, MergeMode::Transfer, deadline)
            .await
    }

    /// The object carries its index entries (`levee_cluster::index_entries`): the replica's
    /// index follows the merge.
    #[allow(clippy::too_many_arguments)]
    async fn merge_into(
        self: &Arc<Self>,
        view: &ClusterView,
        t: &Target,
        bucket: Vec<u8>,
        key: Vec<u8>,
        (object, policy): (Arc<Object>, ConflictPolicy),
        mode: MergeMode,
        deadline: Instant,
    ) -> Result<bool, Status> {
        let p = t.partition;
        if self.is_local(t) {
            self.replicas
                .write(p, deadline, move |r| {
                    r.merge(p, &bucket, &key, &object, policy, mode)
                })
                .await?;
            return Ok(self.replicas.durable);
        }
        let mut client = self.peers.client(self.member(view, t)?)?;
        let mut req = tonic::Request::new(pb::MergeReplicaRequest {
            key: Some(pb::ReplicaKey {
                partition: p,
                bucket,
                key,
            }),
            siblings: encode_siblings(&object.siblings),
            contents: object.encode_contents(),
            policy: policy_pb(policy),
            transfer: mode == MergeMode::Transfer,
            rewrite: mode == MergeMode::Rewrite,
        });
        req.set_timeout(remaining(deadline));
        let r = self.observed(t, client.merge_replica(req).await)?;
        Ok(r.durable)
    }
}
