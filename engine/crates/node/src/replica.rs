//! The vnode side of replication: a key's replica in one partition's store, read and written as an
//! object (sibling set in the ledger metadata, contents in the journal value; see
//! `levee_cluster::object`), and the `levee.v1.Node` service that exposes it to coordinators.
//!
//! Every write to a key's replica (a coordinated put, a merge) runs under that key's lock (striped
//! per vnode), so the read-merge-write is atomic against other writes to the key on this node.
//! Each vnode has an *actor* id for the clocks of the writes it coordinates, drawn at random when
//! its store is empty (a vnode that lost its data must not reuse its old counters) and kept in
//! `<data_dir>/actors/p<partition>`.

use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use levee_cluster::causality::{
    decode_context, decode_siblings, encode_siblings, update, Actor, Clock, ConflictPolicy,
    SiblingMeta, SiblingSet,
};
use levee_cluster::object::{self, decode_contents, merge_needs_local_contents, Content, Object};
use levee_proto::v1 as pb;
use levee_store::{IndexChange, Store};
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use crate::errors::to_status;
use crate::vnodes::Vnodes;

const STRIPES: usize = 256;

/// Per-vnode actors and key locks.
pub struct Replicas {
    vnodes: Arc<Vnodes>,
    actors: Vec<Actor>,
    locks: Vec<Vec<Mutex<()>>>,
}

impl Replicas {
    /// Load (or draw) every vnode's actor. Runs after the stores are open.
    pub fn open(vnodes: Arc<Vnodes>) -> Result<Replicas> {
        let dir = vnodes.data_dir.join("actors");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let actors = vnodes
            .stores
            .iter()
            .enumerate()
            .map(|(p, store)| actor_of(&dir, p as u32, store))
            .collect::<Result<Vec<_>>>()?;
        let locks = (0..vnodes.stores.len())
            .map(|_| (0..STRIPES).map(|_| Mutex::new(())).collect())
            .collect();
        Ok(Replicas {
            vnodes,
            actors,
            locks,
        })
    }

    fn store(&self, partition: u32) -> Result<&Arc<Store>, Status> {
        self.vnodes.stores.get(partition as usize).ok_or_else(|| {
            Status::invalid_argument(format!(
                "partition {partition} is not in this node's ring of {}",
                self.vnodes.stores.len()
            ))
        })
    }

    fn lock(&self, partition: u32, bucket: &[u8], key: &[u8]) -> &Mutex<()> {
        let h = crc32c::crc32c_append(crc32c::crc32c(bucket), key) as usize;
        &self.locks[partition as usize][h % STRIPES]
    }

    /// The replica's sibling set (ledger only).
    pub fn head(&self, partition: u32, bucket: &[u8], key: &[u8]) -> Result<SiblingSet, Status> {
        let store = self.store(partition)?;
        match store.head(bucket, key).map_err(to_status)? {
            None => Ok(SiblingSet::new()),
            Some(h) => decode_siblings(&h.metadata).map_err(|e| damaged(partition, e)),
        }
    }

    /// The replica's object.
    pub fn get(&self, partition: u32, bucket: &[u8], key: &[u8]) -> Result<Object, Status> {
        let store = self.store(partition)?;
        match store.get(bucket, key).map_err(to_status)? {
            None => Ok(Object::default()),
            Some(o) => {
                let siblings = decode_siblings(&o.metadata).map_err(|e| damaged(partition, e))?;
                let contents = decode_contents(&o.value).map_err(|e| damaged(partition, e))?;
                Object::new(siblings, contents).map_err(|e| damaged(partition, e))
            }
        }
    }

    /// Merge `incoming` into the replica and store the result (nothing is written when the replica
    /// already covers it). Returns the object as stored.
    pub fn merge(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        incoming: &Object,
        policy: ConflictPolicy,
        index_changes: &[IndexChange],
    ) -> Result<Object, Status> {
        let _key = self.lock(partition, bucket, key).lock();
        let local_set = self.head(partition, bucket, key)?;
        self.merge_locked(
            partition,
            bucket,
            key,
            &local_set,
            incoming,
            policy,
            index_changes,
        )
    }

    /// The merge, with the key's lock held and the replica's sibling set already read.
    #[allow(clippy::too_many_arguments)]
    fn merge_locked(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        local_set: &SiblingSet,
        incoming: &Object,
        policy: ConflictPolicy,
        index_changes: &[IndexChange],
    ) -> Result<Object, Status> {
        let local = if merge_needs_local_contents(local_set, &incoming.siblings, policy) {
            Some(self.get(partition, bucket, key)?)
        } else {
            None
        };
        let merged = object::merge(local_set, local.as_ref(), incoming, policy)
            .map_err(|e| Status::internal(format!("merging a replica: {e}")))?;
        if merged.siblings == *local_set && index_changes.is_empty() {
            return Ok(merged);
        }
        let store = self.store(partition)?;
        store
            .put(
                bucket,
                key,
                &merged.encode_contents(),
                &encode_siblings(&merged.siblings),
                index_changes,
            )
            .map_err(to_status)?;
        Ok(merged)
    }

    /// A write coordinated at this vnode: a new clock from the client's context and this vnode's
    /// actor, merged with the replica, stored. Returns the object as stored.
    #[allow(clippy::too_many_arguments)]
    pub fn coordinate_put(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        context: &Clock,
        content: Option<Content>,
        timestamp_us: u64,
        policy: ConflictPolicy,
        index_changes: &[IndexChange],
    ) -> Result<Object, Status> {
        self.store(partition)?; // checks the partition
        let actor = self.actors[partition as usize];
        let _key = self.lock(partition, bucket, key).lock();
        let local_set = self.head(partition, bucket, key)?;
        let clock = update(context, &local_set, actor)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let meta = match &content {
            Some(c) => SiblingMeta::for_value(&c.value, timestamp_us),
            None => SiblingMeta::tombstone(timestamp_us),
        };
        let new = Object::single(SiblingSet::single(clock, meta), content)
            .map_err(|e| Status::internal(e.to_string()))?;
        self.merge_locked(
            partition,
            bucket,
            key,
            &local_set,
            &new,
            policy,
            index_changes,
        )
    }
}

fn damaged(partition: u32, e: impl std::fmt::Display) -> Status {
    Status::data_loss(format!(
        "partition {partition}: the stored object is not a replica object: {e}"
    ))
}

/// The vnode's actor: kept while its store holds data, drawn anew when the store is empty.
fn actor_of(dir: &Path, partition: u32, store: &Store) -> Result<Actor> {
    let path = dir.join(format!("p{partition:04}"));
    let empty = store.stats().last_sqn == 0;
    if !empty {
        if let Ok(text) = std::fs::read_to_string(&path) {
            let id = u64::from_str_radix(text.trim(), 16)
                .with_context(|| format!("{} is damaged", path.display()))?;
            return Ok(Actor::new(id));
        }
    }
    let id = loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(partition);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        let id = h.finish();
        if id != 0 {
            break id;
        }
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{id:016x}\n"))
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|_| std::fs::rename(&tmp, &path))
        .and_then(|_| std::fs::File::open(dir)?.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Actor::new(id))
}

fn policy(p: i32) -> ConflictPolicy {
    match pb::ConflictPolicy::try_from(p) {
        Ok(pb::ConflictPolicy::Lww) => ConflictPolicy::Lww,
        _ => ConflictPolicy::Siblings,
    }
}

fn object_of(siblings: &[u8], contents: &[u8]) -> Result<Object, Status> {
    let set = decode_siblings(siblings)
        .map_err(|e| Status::invalid_argument(format!("siblings: {e}")))?;
    let contents =
        decode_contents(contents).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Object::new(set, contents).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn reply_head(set: &SiblingSet) -> pb::HeadReplicaResponse {
    pb::HeadReplicaResponse {
        found: !set.is_empty(),
        siblings: encode_siblings(set),
    }
}

fn reply_object(o: &Object) -> pb::ReplicaObject {
    pb::ReplicaObject {
        found: !o.siblings.is_empty(),
        siblings: encode_siblings(&o.siblings),
        contents: o.encode_contents(),
    }
}

/// `levee.v1.Node`: the replica operations above, each on the blocking pool.
pub struct NodeService {
    pub replicas: Arc<Replicas>,
}

fn key_of(k: Option<pb::ReplicaKey>) -> Result<pb::ReplicaKey, Status> {
    k.ok_or_else(|| Status::invalid_argument("a replica key (partition, bucket, key) is required"))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(e.to_string()))?
}

#[tonic::async_trait]
impl pb::node_server::Node for NodeService {
    async fn head_replica(
        &self,
        req: Request<pb::ReplicaKey>,
    ) -> Result<Response<pb::HeadReplicaResponse>, Status> {
        let k = req.into_inner();
        let r = self.replicas.clone();
        let set = blocking(move || r.head(k.partition, &k.bucket, &k.key)).await?;
        Ok(Response::new(reply_head(&set)))
    }

    async fn get_replica(
        &self,
        req: Request<pb::ReplicaKey>,
    ) -> Result<Response<pb::ReplicaObject>, Status> {
        let k = req.into_inner();
        let r = self.replicas.clone();
        let o = blocking(move || r.get(k.partition, &k.bucket, &k.key)).await?;
        Ok(Response::new(reply_object(&o)))
    }

    async fn coordinate_put(
        &self,
        req: Request<pb::CoordinatePutRequest>,
    ) -> Result<Response<pb::ReplicaObject>, Status> {
        let q = req.into_inner();
        let k = key_of(q.key)?;
        let context = if q.context.is_empty() {
            Clock::new()
        } else {
            decode_context(&q.context)
                .map_err(|e| Status::invalid_argument(format!("context: {e}")))?
        };
        let content = (!q.tombstone).then_some(Content {
            metadata: q.metadata,
            value: q.value,
        });
        let changes = crate::kv::changes_from(q.index_changes)?;
        let policy = policy(q.policy);
        let r = self.replicas.clone();
        let o = blocking(move || {
            r.coordinate_put(
                k.partition,
                &k.bucket,
                &k.key,
                &context,
                content,
                q.timestamp_us,
                policy,
                &changes,
            )
        })
        .await?;
        Ok(Response::new(reply_object(&o)))
    }

    async fn merge_replica(
        &self,
        req: Request<pb::MergeReplicaRequest>,
    ) -> Result<Response<pb::HeadReplicaResponse>, Status> {
        let q = req.into_inner();
        let k = key_of(q.key)?;
        let incoming = object_of(&q.siblings, &q.contents)?;
        let changes = crate::kv::changes_from(q.index_changes)?;
        let policy = policy(q.policy);
        let r = self.replicas.clone();
        let o =
            blocking(move || r.merge(k.partition, &k.bucket, &k.key, &incoming, policy, &changes))
                .await?;
        Ok(Response::new(reply_head(&o.siblings)))
    }
}
