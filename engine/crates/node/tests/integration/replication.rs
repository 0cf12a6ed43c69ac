//! The vnode side of replication (`levee.v1.Node`) between two real nodes from the local-cluster
//! harness: a write coordinated on one node and merged into the other, concurrent writes kept as
//! siblings (or resolved by last-write-wins), a write with the read context superseding them, a
//! delete as a tombstone, bad objects refused, and a vnode's actor kept across a SIGKILL.
//!
//! Each node is asked about a partition it owns: a copy in a vnode its node does not own would
//! be handed off to the owner (and dropped) within a second of that owner being seen up.

use crate::common;

use common::cluster::{run, Down};
use levee_cluster::causality::{decode_siblings, encode_context, Clock, SiblingSet};
use levee_cluster::object::decode_contents;
use levee_proto::v1 as pb;
use pb::node_client::NodeClient;
use tonic::transport::Channel;
use tonic::Code;

/// A node's client and the partition it owns that the test uses there.
struct Vnode {
    c: NodeClient<Channel>,
    p: u32,
}

impl Vnode {
    async fn connect(addr: &str, name: &str) -> Vnode {
        let mut admin = pb::admin_client::AdminClient::connect(addr.to_string())
            .await
            .unwrap();
        let owners = admin
            .members(pb::MembersRequest {})
            .await
            .unwrap()
            .into_inner()
            .owners;
        let p = owners.iter().position(|o| o == name).unwrap() as u32;
        let c = NodeClient::connect(addr.to_string()).await.unwrap();
        Vnode { c, p }
    }

    /// A replica key of this vnode.
    fn key(&self, k: &str) -> pb::ReplicaKey {
        pb::ReplicaKey {
            partition: self.p,
            ..key(k)
        }
    }

    async fn coordinate_put(
        &mut self,
        mut req: pb::CoordinatePutRequest,
    ) -> Result<tonic::Response<pb::ReplicaObject>, tonic::Status> {
        req.key.as_mut().unwrap().partition = self.p;
        self.c.coordinate_put(req).await
    }

    async fn merge_replica(
        &mut self,
        mut req: pb::MergeReplicaRequest,
    ) -> Result<tonic::Response<pb::HeadReplicaResponse>, tonic::Status> {
        req.key.as_mut().unwrap().partition = self.p;
        self.c.merge_replica(req).await
    }
}

/// A replica key; the partition is the asked vnode's (set by [`Vnode`]).
fn key(k: &str) -> pb::ReplicaKey {
    pb::ReplicaKey {
        partition: 0,
        bucket: b"b".to_vec(),
        key: k.as_bytes().to_vec(),
    }
}

fn put(k: &str, ctx: &Clock, value: Option<&str>, ts: u64, lww: bool) -> pb::CoordinatePutRequest {
    pb::CoordinatePutRequest {
        key: Some(key(k)),
        context: if ctx.is_empty() {
            vec![]
        } else {
            encode_context(ctx)
        },
        tombstone: value.is_none(),
        metadata: b"m".to_vec(),
        value: value.unwrap_or("").as_bytes().to_vec(),
        timestamp_us: ts,
        policy: if lww {
            pb::ConflictPolicy::Lww as i32
        } else {
            pb::ConflictPolicy::Siblings as i32
        },
        index_changes: vec![],
        n_val: 0,
    }
}

fn merge_req(k: &str, o: &pb::ReplicaObject, lww: bool) -> pb::MergeReplicaRequest {
    pb::MergeReplicaRequest {
        key: Some(key(k)),
        siblings: o.siblings.clone(),
        contents: o.contents.clone(),
        policy: if lww {
            pb::ConflictPolicy::Lww as i32
        } else {
            pb::ConflictPolicy::Siblings as i32
        },
        transfer: false,
        rewrite: false,
    }
}

/// The values a replica holds for `k`, sorted.
async fn values(v: &mut Vnode, k: &str) -> Vec<String> {
    let o = v.c.get_replica(v.key(k)).await.unwrap().into_inner();
    let mut v: Vec<String> = decode_contents(&o.contents)
        .unwrap()
        .into_iter()
        .map(|c| String::from_utf8(c.value).unwrap())
        .collect();
    v.sort();
    v
}

async fn siblings(v: &mut Vnode, k: &str) -> SiblingSet {
    decode_siblings(
        &v.c.head_replica(v.key(k))
            .await
            .unwrap()
            .into_inner()
            .siblings,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_merge_siblings_resolve_and_keep_their_actor_across_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _down = Down(dir.clone());
    let up = run(&["up", d, "2", "--ring-size", "8", "--n-val", "2"]);
    let addrs: Vec<String> = up
        .lines()
        .map(|l| format!("http://{}", l.split_whitespace().nth(1).unwrap()))
        .collect();
    let mut n1 = Vnode::connect(&addrs[0], "n1").await;
    let mut n2 = Vnode::connect(&addrs[1], "n2").await;

    // A write coordinated at n1, merged into n2: both hold the same object.
    let o1 = n1
        .coordinate_put(put("k", &Clock::new(), Some("v1"), 1, false))
        .await
        .unwrap()
        .into_inner();
    n2.merge_replica(merge_req("k", &o1, false)).await.unwrap();
    assert_eq!(siblings(&mut n2, "k").await, siblings(&mut n1, "k").await);
    assert_eq!(values(&mut n2, "k").await, ["v1"]);

    // A blind write at n2 is concurrent with v1: siblings, on both replicas after a merge.
    let o2 = n2
        .coordinate_put(put("k", &Clock::new(), Some("v2"), 2, false))
        .await
        .unwrap()
        .into_inner();
    n1.merge_replica(merge_req("k", &o2, false)).await.unwrap();
    assert_eq!(values(&mut n1, "k").await, ["v1", "v2"]);
    assert_eq!(values(&mut n2, "k").await, ["v1", "v2"]);

    // A write with the context of what was read supersedes both siblings.
    let ctx = siblings(&mut n1, "k").await.context();
    let o3 = n1
        .coordinate_put(put("k", &ctx, Some("v3"), 3, false))
        .await
        .unwrap()
        .into_inner();
    n2.merge_replica(merge_req("k", &o3, false)).await.unwrap();
    assert_eq!(values(&mut n2, "k").await, ["v3"]);
    // Merging the stale v2 object again changes nothing: v3 dominates it.
    n1.merge_replica(merge_req("k", &o2, false)).await.unwrap();
    assert_eq!(values(&mut n1, "k").await, ["v3"]);

    // Last-write-wins: the later timestamp wins whatever the order of merges.
    let a = n1
        .coordinate_put(put("lww", &Clock::new(), Some("late"), 200, true))
        .await
        .unwrap()
        .into_inner();
    let b = n2
        .coordinate_put(put("lww", &Clock::new(), Some("early"), 100, true))
        .await
        .unwrap()
        .into_inner();
    n1.merge_replica(merge_req("lww", &b, true)).await.unwrap();
    n2.merge_replica(merge_req("lww", &a, true)).await.unwrap();
    assert_eq!(values(&mut n1, "lww").await, ["late"]);
    assert_eq!(values(&mut n2, "lww").await, ["late"]);

    // A delete is a tombstone that supersedes what it read.
    let ctx = siblings(&mut n1, "k").await.context();
    let del = n1
        .coordinate_put(put("k", &ctx, None, 4, false))
        .await
        .unwrap()
        .into_inner();
    n2.merge_replica(merge_req("k", &del, false)).await.unwrap();
    assert!(siblings(&mut n2, "k").await.is_tombstone_only());
    assert!(values(&mut n2, "k").await.is_empty());

    // Bad input is refused and changes nothing.
    let mut bad = merge_req("k", &o1, false);
    bad.contents = merge_req("k", &o2, false).contents; // v2's value under v1's sibling
    assert_eq!(
        n2.merge_replica(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let mut far = key("k");
    far.partition = 99;
    assert_eq!(
        n2.c.get_replica(far).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    assert!(siblings(&mut n2, "k").await.is_tombstone_only());

    // The vnode's actor survives a kill: after a restart, a write coordinated at n1 with the read
    // context still carries one event per actor that wrote (n1's, n2's), not a third actor.
    run(&["kill", d, "n1"]);
    run(&["start", d, "n1"]);
    let mut n1 = Vnode::connect(&addrs[0], "n1").await;
    let ctx = siblings(&mut n1, "k").await.context();
    let o5 = n1
        .coordinate_put(put("k", &ctx, Some("v5"), 5, false))
        .await
        .unwrap()
        .into_inner();
    let set = decode_siblings(&o5.siblings).unwrap();
    assert_eq!(set.len(), 1);
    let actors = set.siblings()[0].clock.vector().count() + set.siblings()[0].clock.dots().count();
    assert_eq!(actors, 2, "a new actor after the restart: {set:?}");
}
