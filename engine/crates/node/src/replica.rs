//! The vnode side of replication: a key's replica in one partition's store, read and written as an
//! object (sibling set in the ledger metadata, contents in the journal value; see
//! `levee_cluster::object`), and the `levee.v1.Node` service that exposes it to coordinators.
//!
//! Every write to a key's replica (a coordinated put, a merge) runs under that key's lock (striped
//! per vnode), so the read-merge-write is atomic against other writes to the key on this node.
//! Each vnode has an *actor* id for the clocks of the writes it coordinates, drawn at random when
//! its store is empty (a vnode that lost its data must not reuse its old counters) and kept in
//! `<data_dir>/actors/p<partition>`.
//!
//! Every replica operation — from the `Node` service or from this node's own coordinator — runs
//! on the blocking pool once its vnode admitted it ([`Replicas::call`], `admission.rs`), so a
//! vnode's queue is bounded whoever sends the work.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use levee_cluster::causality::{
    decode_siblings, encode_siblings, update, Actor, Clock, ConflictPolicy, SiblingMeta, SiblingSet,
};
use levee_cluster::index_entries::{
    apply_edits, decode_ledger_meta, encode_ledger_meta, siblings_bytes, IndexDiff, IndexEdit,
    KeyIndexEntry,
};
use levee_cluster::object::{self, decode_contents, merge_needs_local_contents, Content, Object};
use levee_proto::v1 as pb;
use levee_store::{SnapshotKind, Store};
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use crate::admission::{self, Admission, Permit};
use crate::errors::to_status;
use crate::held_snapshots::{self, HeldSnapshots, HoldError};
use crate::vnodes::Vnodes;

const STRIPES: usize = 256;

/// The most a key's secondary-index entries may take, encoded (they are stored in its ledger
/// metadata, which every HEAD reads).
pub const MAX_KEY_INDEX_BYTES: usize = 256 << 10;

/// Per-vnode actors and key locks.
pub struct Replicas {
    vnodes: Arc<Vnodes>,
    actors: Vec<Actor>,
    locks: Vec<Vec<Mutex<()>>>,
    admission: Arc<Admission>,
    /// Every write is fsynced before it is acknowledged (`engine.sync_on_write`).
    pub durable: bool,
    /// How long a request without a deadline of its own may wait to start.
    pub default_deadline: Duration,
    /// Per vnode: writes are forwarded to its next owner (a ring transition moves it away).
    pub forwarding: Vec<AtomicBool>,
    /// Per vnode: a forward was lost (queue full, or the next owner refused it) since it was
    /// last looked at.
    pub forward_lost: Vec<AtomicBool>,
    /// Per vnode: rebuilding after this member lost its data (`rebuild.rs`): it takes writes and
    /// answers no reads.
    pub rebuilding: Vec<AtomicBool>,
    forward_tx: OnceLock<tokio::sync::mpsc::Sender<Forward>>,
    /// Snapshots coverage queries read page after page (`held_snapshots.rs`).
    pub held: HeldSnapshots<levee_store::Snapshot>,
    /// `levee_replica_reads_total` by path, once the metrics are set up.
    read_paths: OnceLock<[prometheus::IntCounter; 2]>,
}

/// Where a replica read ran (`Replicas::read`).
#[derive(Clone, Copy)]
enum ReadPath {
    Reactor = 0,
    Pool = 1,
}

/// The `path` label values of `levee_replica_reads_total`, indexed by [`ReadPath`].
pub const READ_PATHS: [&str; 2] = ["reactor", "pool"];

/// A write to forward to the next owner of its vnode (`transition.rs`).
pub struct Forward {
    pub partition: u32,
    pub bucket: Vec<u8>,
    pub key: Vec<u8>,
    pub object: Object,
    /// Told `true` once the next owner has it (or no longer needs it), `false` when the forward
    /// failed; dropped counts as failed.
    pub done: tokio::sync::oneshot::Sender<bool>,
}

/// Forwards queued before the transfer task takes them; beyond this they are lost (and caught
/// up by the transfer).
const FORWARD_QUEUE: usize = 4096;

/// An index entry: term and key.
pub type Entry = (levee_store::Term, Vec<u8>);

/// Index entries kept, and the last entry scanned when the vnode may hold more.
pub type IndexPageOut = (Vec<Entry>, Option<Entry>, u64);

/// Keys kept, and the last key scanned when the vnode may hold more.
pub type KeysPageOut = (Vec<Vec<u8>>, Option<Vec<u8>>, u64);

/// A stored object and the journal sequence number of the write that stored it (for a read, of
/// the stored object; 0 when a merge wrote nothing).
pub struct Stored {
    pub object: Object,
    pub sqn: u64,
    /// Resolves once the write reached the vnode's next owner (`true`) or could not (`false`),
    /// when it is forwarded there (`Replicas::write` waits for it).
    pub forwarded: Option<tokio::sync::oneshot::Receiver<bool>>,
}

impl Replicas {
    /// Load (or draw) every vnode's actor. Runs after the stores are open.
    pub fn open(
        vnodes: Arc<Vnodes>,
        admission: Arc<Admission>,
        durable: bool,
        default_deadline: Duration,
    ) -> Result<Replicas> {
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
        let n = vnodes.stores.len();
        Ok(Replicas {
            vnodes,
            actors,
            locks,
            admission,
            durable,
            default_deadline,
            forwarding: (0..n).map(|_| AtomicBool::new(false)).collect(),
            forward_lost: (0..n).map(|_| AtomicBool::new(false)).collect(),
            rebuilding: (0..n).map(|_| AtomicBool::new(false)).collect(),
            forward_tx: OnceLock::new(),
            held: HeldSnapshots::new(held_snapshots::IDLE, held_snapshots::MAX_HELD, id_seed()),
            read_paths: OnceLock::new(),
        })
    }

    /// The queue writes to forward go to (taken once, by the transition task).
    pub fn forwards(&self) -> tokio::sync::mpsc::Receiver<Forward> {
        let (tx, rx) = tokio::sync::mpsc::channel(FORWARD_QUEUE);
        self.forward_tx
            .set(tx)
            .expect("the forward queue is taken once");
        rx
    }

    /// Queue a stored write for the vnode's next owner when it is moving (or just moved): the
    /// receiver resolves once it is there, or with `false` at once when the queue is full.
    fn forward(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        object: &Object,
    ) -> Option<tokio::sync::oneshot::Receiver<bool>> {
        if !self.forwarding[partition as usize].load(Ordering::SeqCst) {
            return None;
        }
        let (done, rx) = tokio::sync::oneshot::channel();
        let f = Forward {
            partition,
            bucket: bucket.to_vec(),
            key: key.to_vec(),
            object: object.clone(),
            done,
        };
        let refused = match self.forward_tx.get() {
            Some(tx) => tx.try_send(f).err().map(|e| e.into_inner()),
            None => Some(f),
        };
        if let Some(f) = refused {
            self.forward_lost[partition as usize].store(true, Ordering::SeqCst);
            let _ = f.done.send(false);
        }
        Some(rx)
    }

    /// A write ([`Replicas::call`] of a closure that stores): when its vnode is moving (or just
    /// moved here, while the switch settles), the answer waits (up to the default deadline) until
    /// the partition's other owner has the write too, so a read routed by either claim finds it. When the forward fails or
    /// times out the write stays stored here but this replica answers with an error: counted as
    /// an acknowledgement it would let a quorum form that a read by the other claim can miss
    /// (old owner and one member that stays, against new owner and the other member that stays).
    /// The members that own the partition in both claims still acknowledge.
    pub async fn write(
        self: &Arc<Self>,
        partition: u32,
        deadline: Instant,
        f: impl FnOnce(&Replicas) -> Result<Stored, Status> + Send + 'static,
    ) -> Result<Stored, Status> {
        let mut s = self.call(partition, deadline, f).await?;
        if let Some(rx) = s.forwarded.take() {
            let failed = match tokio::time::timeout(self.default_deadline, rx).await {
                Ok(Ok(true)) => None,
                Ok(Ok(false)) | Ok(Err(_)) => Some("failed".to_string()),
                Err(_) => Some(format!("did not finish in {:?}", self.default_deadline)),
            };
            if let Some(why) = failed {
                // Aborted, not Unavailable: this member answered, and must not be marked down.
                return Err(Status::aborted(format!(
                    "p{partition}: stored here, but the forward to the partition's other owner \
                     {why}: not acknowledged while the ring moves or a switch settles"
                )));
            }
        }
        Ok(s)
    }

    /// Partitions in this node's ring.
    pub fn ring_size(&self) -> u32 {
        self.vnodes.stores.len() as u32
    }

    /// The cluster's n_val (its claim's; bucket types may use fewer replicas).
    pub fn cluster_n_val(&self) -> u32 {
        self.vnodes.membership.view().claim.n_val()
    }

    /// Requests waiting for `partition`'s vnode (0 for a partition not in the ring).
    pub fn queue_len(&self, partition: u32) -> u32 {
        if (partition as usize) < self.vnodes.stores.len() {
            self.admission.snapshot(partition as usize).queued
        } else {
            0
        }
    }

    /// Run `f` on the blocking pool once `partition`'s vnode admits it (a slot that starts no
    /// later than `deadline`, else UNAVAILABLE with a retry hint). The slot is held while `f` runs.
    pub async fn call<T: Send + 'static>(
        self: &Arc<Self>,
        partition: u32,
        deadline: Instant,
        f: impl FnOnce(&Replicas) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        self.store(partition)?;
        let permit = self
            .admission
            .acquire(partition as usize, deadline)
            .await
            .map_err(|r| r.to_status())?;
        self.run_blocking(permit, f).await
    }

    /// Run `f` on the blocking pool, holding `permit` (its vnode's slot) until it returns.
    async fn run_blocking<T: Send + 'static>(
        self: &Arc<Self>,
        permit: Permit,
        f: impl FnOnce(&Replicas) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let me = self.clone();
        let (res, permit) = tokio::task::spawn_blocking(move || (f(&me), permit))
            .await
            .map_err(|e| Status::internal(format!("replica call failed: {e}")))?;
        drop(permit);
        res
    }

    /// A read-only engine call (a replica's HEAD or GET). When its vnode has a free slot and
    /// nobody queued, it runs right here, on the async runtime's thread, with every file read
    /// made so that it may not wait for the disk (`levee_store::storage::without_waiting`): a
    /// read of data in the page cache so costs no hand-off to the blocking pool and back (two
    /// thread wake-ups). A read that would wait for the disk, or finds its vnode busy, runs as
    /// [`Replicas::call`] does. `levee_replica_reads_total{path}` counts where reads ran.
    pub async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        partition: u32,
        deadline: Instant,
        f: impl Fn(&Replicas) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        self.store(partition)?;
        if deadline > Instant::now() {
            if let Some(permit) = self.admission.try_acquire(partition as usize) {
                if let Some(res) = levee_store::storage::without_waiting(|| f(self)) {
                    drop(permit);
                    self.count_read(ReadPath::Reactor);
                    return res;
                }
                self.count_read(ReadPath::Pool);
                return self.run_blocking(permit, f).await;
            }
        }
        self.count_read(ReadPath::Pool);
        self.call(partition, deadline, f).await
    }

    fn count_read(&self, path: ReadPath) {
        if let Some(c) = self.read_paths.get() {
            c[path as usize].inc();
        }
    }

    /// Count reads in `levee_replica_reads_total` (its label values [`READ_PATHS`], in order).
    pub fn count_reads_in(&self, metric: &prometheus::IntCounterVec) {
        let _ = self
            .read_paths
            .set(READ_PATHS.map(|p| metric.with_label_values(&[p])));
    }

    pub(crate) fn store(&self, partition: u32) -> Result<&Arc<Store>, Status> {
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

    /// UNAVAILABLE while vnode `partition` rebuilds (its data is not complete): a read goes to the
    /// other replicas.
    pub fn readable(&self, partition: u32) -> Result<(), Status> {
        if self
            .rebuilding
            .get(partition as usize)
            .is_some_and(|r| r.load(Ordering::SeqCst))
        {
            return Err(Status::unavailable(format!(
                "p{partition} on this member is rebuilding from the other replicas after its data was lost; read another replica"
            )));
        }
        Ok(())
    }

    /// A batch of vnode `partition`'s objects whose keys belong to `key_partitions`, after
    /// `after` in key order (at most `max_objects` objects and about `max_bytes`; the scan stops
    /// after `16 × max_objects` keys), for a member rebuilding (`FoldObjects`).
    pub fn fold_objects(
        &self,
        partition: u32,
        key_partitions: &BTreeSet<u32>,
        after: Option<(Vec<u8>, Vec<u8>)>,
        max_objects: usize,
        max_bytes: u64,
    ) -> Result<pb::FoldObjectsResponse, Status> {
        let store = self.store(partition)?;
        let ring = self.ring_size();
        let snap = store.snapshot(SnapshotKind::Fold).map_err(to_status)?;
        let fold = snap
            .fold_objects_after(after.as_ref().map(|(b, k)| (b.as_slice(), k.as_slice())))
            .map_err(to_status)?;
        let mut out = pb::FoldObjectsResponse::default();
        let (mut bytes, mut scanned) = (0u64, 0usize);
        for o in fold {
            let o = o.map_err(to_status)?;
            scanned += 1;
            out.last = Some(pb::ObjectKey {
                bucket: o.bucket.clone(),
                key: o.key.clone(),
            });
            if key_partitions.contains(&crate::ring::partition_of(&o.bucket, &o.key, ring)) {
                // As stored: the sibling set from the ledger metadata, the value the encoded
                // contents, with each sibling's index entries (`merge` writes them so); the
                // receiver decodes and checks them.
                bytes += (o.object.metadata.len() + o.object.value.len()) as u64;
                let siblings = siblings_bytes(&o.object.metadata)
                    .map_err(|e| damaged(partition, e))?
                    .to_vec();
                out.objects.push(pb::FoldedObject {
                    bucket: o.bucket,
                    key: o.key,
                    siblings,
                    contents: o.object.value,
                });
            }
            if out.objects.len() >= max_objects || bytes >= max_bytes || scanned >= 16 * max_objects
            {
                return Ok(out);
            }
        }
        out.done = true;
        Ok(out)
    }

    /// The replica's sibling set and the journal sequence number of its object (0: none).
    pub fn head_sqn(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
    ) -> Result<(SiblingSet, u64), Status> {
        self.head_entries(partition, bucket, key)
            .map(|(set, _, sqn)| (set, sqn))
    }

    /// The replica's sibling set, the key's index entries on this replica and the journal
    /// sequence number of its object (ledger only).
    fn head_entries(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
    ) -> Result<(SiblingSet, Vec<KeyIndexEntry>, u64), Status> {
        let store = self.store(partition)?;
        match store.head(bucket, key).map_err(to_status)? {
            None => Ok((SiblingSet::new(), Vec::new(), 0)),
            Some(h) => {
                let (set, entries) =
                    decode_ledger_meta(&h.metadata).map_err(|e| damaged(partition, e))?;
                Ok((set, entries, h.sqn))
            }
        }
    }

    /// The replica's object.
    pub fn get(&self, partition: u32, bucket: &[u8], key: &[u8]) -> Result<Stored, Status> {
        let store = self.store(partition)?;
        match store.get(bucket, key).map_err(to_status)? {
            None => Ok(Stored {
                object: Object::default(),
                sqn: 0,
                forwarded: None,
            }),
            Some(o) => {
                let (siblings, _) =
                    decode_ledger_meta(&o.metadata).map_err(|e| damaged(partition, e))?;
                let contents = decode_contents(&o.value).map_err(|e| damaged(partition, e))?;
                Ok(Stored {
                    object: Object::new(siblings, contents).map_err(|e| damaged(partition, e))?,
                    sqn: o.sqn,
                    forwarded: None,
                })
            }
        }
    }

    /// Merge `incoming` into the replica and store the result (nothing is written when the replica
    /// already covers it, unless `mode` is `Rewrite`). Returns the object as stored.
    #[allow(clippy::too_many_arguments)]
    pub fn merge(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        incoming: &Object,
        policy: ConflictPolicy,
        mode: MergeMode,
    ) -> Result<Stored, Status> {
        let _key = self.lock(partition, bucket, key).lock();
        let (local_set, local_entries, _) = self.head_entries(partition, bucket, key)?;
        let local = (&local_set, local_entries.as_slice());
        self.merge_locked(partition, bucket, key, local, incoming, policy, mode)
    }

    /// The merge, with the key's lock held and the replica's sibling set and index entries
    /// already read. The replica's index follows the merged object: entries of siblings the merge
    /// drops are removed, those of siblings it brings are added (`levee_cluster::index_entries`).
    /// A stored write is forwarded when its vnode is moving, unless it is a ring transition's own
    /// traffic (`MergeMode::Transfer`).
    #[allow(clippy::too_many_arguments)]
    fn merge_locked(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        (local_set, local_entries): (&SiblingSet, &[KeyIndexEntry]),
        incoming: &Object,
        policy: ConflictPolicy,
        mode: MergeMode,
    ) -> Result<Stored, Status> {
        let local = if merge_needs_local_contents(local_set, &incoming.siblings, policy) {
            match self.get(partition, bucket, key) {
                Ok(s) => Some(s.object),
                // Repairing a copy whose value is lost: what the replica held cannot take part.
                Err(e) if mode == MergeMode::Rewrite && e.code() == tonic::Code::DataLoss => None,
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let merged = object::merge(local_set, local.as_ref(), incoming, policy)
            .map_err(|e| Status::internal(format!("merging a replica: {e}")))?;
        let entries = merged.index_entries();
        let diff = IndexDiff::between(local_entries, &entries);
        if merged.siblings == *local_set && diff.is_empty() && mode != MergeMode::Rewrite {
            return Ok(Stored {
                object: merged,
                sqn: 0,
                forwarded: None,
            });
        }
        let store = self.store(partition)?;
        let sqn = store
            .put(
                bucket,
                key,
                &merged.encode_contents(),
                &encode_ledger_meta(&merged.siblings, &entries),
                &crate::kv::store_changes(diff),
            )
            .map_err(to_status)?;
        let forwarded = if mode != MergeMode::Transfer {
            self.forward(partition, bucket, key, &merged)
        } else {
            None
        };
        Ok(Stored {
            object: merged,
            sqn,
            forwarded,
        })
    }

    /// A write coordinated at this vnode: a new clock from the client's context and this vnode's
    /// actor, merged with the replica, stored. The new sibling's index entries are this replica's
    /// entries for the key with `edits` applied (a tombstone has none). Returns the object as
    /// stored.
    #[allow(clippy::too_many_arguments)]
    pub fn coordinate_put(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        context: &Clock,
        mut content: Option<Content>,
        stamp: WriteStamp,
        policy: ConflictPolicy,
        edits: &[IndexEdit],
    ) -> Result<Stored, Status> {
        self.store(partition)?; // checks the partition
        let actor = self.actors[partition as usize];
        let _key = self.lock(partition, bucket, key).lock();
        let (local_set, local_entries, _) = self.head_entries(partition, bucket, key)?;
        if let Some(c) = &mut content {
            c.index = apply_edits(&local_entries, edits);
            let size: usize = c.index.iter().map(KeyIndexEntry::encoded_len).sum();
            if size > MAX_KEY_INDEX_BYTES {
                return Err(Status::invalid_argument(format!(
                    "the key's index entries would take {size} bytes ({} entries); the limit is {MAX_KEY_INDEX_BYTES}: remove entries in the same write",
                    c.index.len()
                )));
            }
        }
        let clock = update(context, &local_set, actor)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let meta = match &content {
            Some(c) => SiblingMeta::for_value(&c.value, stamp.timestamp_us),
            None => SiblingMeta::tombstone(stamp.timestamp_us),
        };
        let meta = SiblingMeta {
            n_val: stamp.n_val,
            ..meta
        };
        let new = Object::single(SiblingSet::single(clock, meta), content)
            .map_err(|e| Status::internal(e.to_string()))?;
        let local = (&local_set, local_entries.as_slice());
        self.merge_locked(
            partition,
            bucket,
            key,
            local,
            &new,
            policy,
            MergeMode::Write,
        )
    }
}

/// What the coordinator stamps on a new sibling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteStamp {
    /// The coordinator's wall clock, microseconds since the Unix epoch (orders last-write-wins).
    pub timestamp_us: u64,
    /// The n_val the write was coordinated at when smaller than the cluster's, else 0
    /// ([`SiblingMeta::written_at`]).
    pub n_val: u8,
}

/// How a replica takes a merged object (`Replicas::merge`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeMode {
    /// A write, read repair or AAE repair: stored only when it adds to what the replica holds;
    /// forwarded to the vnode's next owner while it moves.
    Write,
    /// A ring transition's stream or forward: stored like a write, not forwarded on.
    Transfer,
    /// An AAE repair of a replica whose own copy cannot be read (its value missing from the
    /// journal): stored even when the replica holds the same sibling set, so the value is back.
    Rewrite,
}

impl MergeMode {
    /// The mode a `MergeReplica` request asks for.
    pub fn of_request(transfer: bool, rewrite: bool) -> Result<Self, Status> {
        match (transfer, rewrite) {
            (false, false) => Ok(MergeMode::Write),
            (true, false) => Ok(MergeMode::Transfer),
            (false, true) => Ok(MergeMode::Rewrite),
            (true, true) => Err(Status::invalid_argument(
                "a MergeReplica request is either a transfer or a rewrite, not both",
            )),
        }
    }
}

impl Replicas {
    /// Drop the replica if it still holds exactly `set` (it was handed to its primary and no
    /// write came in since). Returns whether it was dropped.
    pub fn remove_if_unchanged(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        set: &SiblingSet,
    ) -> Result<bool, Status> {
        let _key = self.lock(partition, bucket, key).lock();
        let (local_set, entries, _) = self.head_entries(partition, bucket, key)?;
        if local_set != *set {
            return Ok(false);
        }
        // The key's index entries go with it (a handed-off replica leaves none behind).
        let changes = crate::kv::store_changes(IndexDiff::between(&entries, &[]));
        self.store(partition)?
            .delete(bucket, key, &[], &changes)
            .map_err(to_status)?;
        Ok(true)
    }

    /// A page of the vnode's live keys of `bucket` after `after`, scanning at most `limit` keys,
    /// keeping those whose own partition is in `key_partitions` (all when empty), read on the held
    /// snapshot `snapshot` (0: a new one). Returns the keys kept, the last key scanned when the
    /// vnode may hold more, and the snapshot held for the next page (0 when done).
    pub fn fold_keys_page(
        &self,
        partition: u32,
        bucket: &[u8],
        after: &[u8],
        limit: usize,
        key_partitions: &[u32],
        snapshot: u64,
    ) -> Result<KeysPageOut, Status> {
        let snap = self.query_snapshot(partition, snapshot)?;
        let start = (!after.is_empty()).then(|| {
            let mut s = after.to_vec();
            s.push(0); // the smallest key above `after`
            s
        });
        let keys = snap
            .fold_keys(bucket, start.as_deref(), None)
            .map_err(to_status)?;
        let ring = self.vnodes.ring_size;
        let (mut kept, mut scanned, mut last) = (Vec::new(), 0usize, None);
        for k in keys {
            let k = k.map_err(to_status)?;
            scanned += 1;
            let p = crate::ring::partition_of(bucket, &k, ring);
            let wanted = key_partitions.is_empty() || key_partitions.contains(&p);
            if wanted {
                let live = match snap.head(bucket, &k).map_err(to_status)? {
                    Some(h) => !decode_ledger_meta(&h.metadata)
                        .map_err(|e| damaged(partition, e))?
                        .0
                        .is_tombstone_only(),
                    None => false,
                };
                if live {
                    kept.push(k.clone());
                }
            }
            if scanned >= limit {
                last = Some(k);
                break;
            }
        }
        let held = self.keep_snapshot(partition, snapshot, snap, last.is_some())?;
        Ok((kept, last, held))
    }

    /// The snapshot a coverage query's page reads: the held one `id`, or (0) a new one — when
    /// this member has room to hold it, so a query that cannot be held fails on its first page.
    fn query_snapshot(
        &self,
        partition: u32,
        id: u64,
    ) -> Result<Arc<levee_store::Snapshot>, Status> {
        let store = self.store(partition)?;
        let now = Instant::now();
        if id != 0 {
            return self
                .held
                .get(partition, id, now)
                .map_err(|e| Status::failed_precondition(e.to_string()));
        }
        self.held.room(now).map_err(hold_refused)?;
        Ok(Arc::new(
            store
                .snapshot(levee_store::SnapshotKind::Query)
                .map_err(to_status)?,
        ))
    }

    /// After a page read on `snap` (held as `id`, or new when 0): hold it while the vnode has
    /// more, let it go when done. The id to pass with the next page (0: none).
    fn keep_snapshot(
        &self,
        partition: u32,
        id: u64,
        snap: Arc<levee_store::Snapshot>,
        more: bool,
    ) -> Result<u64, Status> {
        match (more, id) {
            (true, 0) => self
                .held
                .hold(partition, snap, Instant::now())
                .map_err(hold_refused),
            (true, id) => Ok(id),
            (false, id) => {
                self.held.release(id);
                Ok(0)
            }
        }
    }

    /// A page of the vnode's entries of the index query `q` after `after`, scanning at most
    /// `limit` entries, keeping those whose key's partition is in `key_partitions` (all when
    /// empty), read on the held snapshot `snapshot` (0: a new one). Returns the entries kept, the
    /// last entry scanned when the vnode may hold more, and the snapshot held for the next page.
    pub fn index_page(
        &self,
        partition: u32,
        q: &levee_store::IndexQuery,
        after: Option<&(levee_store::Term, Vec<u8>)>,
        limit: usize,
        key_partitions: &[u32],
        snapshot: u64,
    ) -> Result<IndexPageOut, Status> {
        let snap = self.query_snapshot(partition, snapshot)?;
        let mut q = q.clone();
        q.return_terms = true;
        q.max_results = Some(limit.max(1));
        q.continuation =
            after.map(|(t, k)| levee_store::index_continuation(&q.bucket, &q.field, t, k));
        let page = snap.index_query(&q).map_err(to_status)?;
        let more = page.continuation.is_some();
        let ring = self.vnodes.ring_size;
        let results: Vec<(levee_store::Term, Vec<u8>)> = page
            .results
            .into_iter()
            .map(|(t, k)| (t.expect("terms requested"), k))
            .collect();
        let last = if more { results.last().cloned() } else { None };
        let kept = results
            .into_iter()
            .filter(|(_, k)| {
                key_partitions.is_empty()
                    || key_partitions.contains(&crate::ring::partition_of(&q.bucket, k, ring))
            })
            .collect();
        let held = self.keep_snapshot(partition, snapshot, snap, more)?;
        Ok((kept, last, held))
    }

    /// Reap a deleted key's replica: drop it if it still holds exactly the tombstones `set`.
    pub fn reap(
        &self,
        partition: u32,
        bucket: &[u8],
        key: &[u8],
        set: &SiblingSet,
    ) -> Result<bool, Status> {
        if set.is_empty() || !set.is_tombstone_only() {
            return Err(Status::failed_precondition(
                "only a set of tombstones is reaped",
            ));
        }
        self.remove_if_unchanged(partition, bucket, key, set)
    }

    /// The store of `partition` (for folds).
    pub fn vnode_store(&self, partition: u32) -> Result<Arc<Store>, Status> {
        self.store(partition).cloned()
    }
}

fn damaged(partition: u32, e: impl std::fmt::Display) -> Status {
    Status::data_loss(format!(
        "partition {partition}: the stored object is not a replica object: {e}"
    ))
}

/// The vnode's actor: kept while its store holds data, drawn anew when the store is empty.
/// A random start for this process's held-snapshot ids.
fn id_seed() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A member that cannot hold one more query snapshot: UNAVAILABLE with a retry hint, as overload.
fn hold_refused(e: HoldError) -> Status {
    let mut st = Status::unavailable(e.to_string());
    st.metadata_mut()
        .insert("retry-after-ms", "1000".parse().expect("digits"));
    st
}

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

pub(crate) fn policy(p: i32) -> ConflictPolicy {
    match pb::ConflictPolicy::try_from(p) {
        Ok(pb::ConflictPolicy::Lww) => ConflictPolicy::Lww,
        _ => ConflictPolicy::Siblings,
    }
}

/// A vnode's stored object (from a fold) as a replica object; DATA_LOSS naming `what` and the
/// partition when it is not one. Handoff and ring transitions read vnodes this way.
pub(crate) fn stored_object_of(
    o: &levee_store::Object,
    what: &str,
    partition: u32,
) -> Result<Object, Status> {
    let damaged = |e: String| {
        Status::data_loss(format!(
            "{what}: p{partition}: an object is not a replica object: {e}"
        ))
    };
    let (set, _) = decode_ledger_meta(&o.metadata).map_err(|e| damaged(e.to_string()))?;
    let contents = decode_contents(&o.value).map_err(|e| damaged(e.to_string()))?;
    Object::new(set, contents).map_err(|e| damaged(e.to_string()))
}

pub(crate) fn object_of(siblings: &[u8], contents: &[u8]) -> Result<Object, Status> {
    let set = decode_siblings(siblings)
        .map_err(|e| Status::invalid_argument(format!("siblings: {e}")))?;
    let contents =
        decode_contents(contents).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Object::new(set, contents).map_err(|e| Status::invalid_argument(e.to_string()))
}

fn reply_head(
    set: &SiblingSet,
    durable: bool,
    queue_len: u32,
    sqn: u64,
) -> pb::HeadReplicaResponse {
    pb::HeadReplicaResponse {
        found: !set.is_empty(),
        siblings: encode_siblings(set),
        durable,
        queue_len,
        sqn,
    }
}

fn reply_object(s: &Stored, durable: bool) -> pb::ReplicaObject {
    pb::ReplicaObject {
        found: !s.object.siblings.is_empty(),
        siblings: encode_siblings(&s.object.siblings),
        contents: s.object.encode_contents(),
        durable,
        sqn: s.sqn,
    }
}

/// `levee.v1.Node`: the replica operations above, each admitted by its vnode.
pub struct NodeService {
    pub replicas: Arc<Replicas>,
    pub transitions: Arc<crate::transition::Transitions>,
    pub peers: Arc<crate::peers::Peers>,
}

fn key_of(k: Option<pb::ReplicaKey>) -> Result<pb::ReplicaKey, Status> {
    k.ok_or_else(|| Status::invalid_argument("a replica key (partition, bucket, key) is required"))
}

/// A page size asked for: 1..=10,000 (0: 1,000).
pub(crate) fn page_limit(limit: u32) -> usize {
    match limit {
        0 => 1000,
        n => n.min(10_000) as usize,
    }
}

/// An index entry on the wire.
pub(crate) fn entry_pb((t, k): (levee_store::Term, Vec<u8>)) -> pb::IndexQueryResult {
    pb::IndexQueryResult {
        term: Some(crate::kv::term_to(t)),
        key: k,
    }
}

/// An index entry from the wire.
pub(crate) fn entry_of(e: pb::IndexQueryResult) -> Result<(levee_store::Term, Vec<u8>), Status> {
    Ok((crate::kv::term_from(e.term, "position")?, e.key))
}

/// The store query and resume position of an `IndexPage` request.
pub(crate) fn index_page_query(
    q: &pb::IndexPageRequest,
) -> Result<(levee_store::IndexQuery, Option<Entry>), Status> {
    let query = levee_store::IndexQuery {
        bucket: q.bucket.clone(),
        field: q.field.clone(),
        start: crate::kv::term_from(q.start.clone(), "start")?,
        end: crate::kv::term_from(q.end.clone(), "end")?,
        return_terms: true,
        term_regex: (!q.term_regex.is_empty()).then(|| q.term_regex.clone()),
        max_results: None,
        continuation: None,
    };
    let after = q.after.clone().map(entry_of).transpose()?;
    Ok((query, after))
}

/// When a replica call of this request must start by: the caller's `grpc-timeout` (less a
/// margin), else the node's default.
fn deadline_of<T>(req: &Request<T>, default: Duration) -> Instant {
    let timeout = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(admission::parse_grpc_timeout);
    admission::start_deadline(Instant::now(), timeout, default)
}

#[tonic::async_trait]
impl pb::node_server::Node for NodeService {
    async fn head_replica(
        &self,
        req: Request<pb::ReplicaKey>,
    ) -> Result<Response<pb::HeadReplicaResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let k = req.into_inner();
        self.replicas.readable(k.partition)?;
        let queue_len = self.replicas.queue_len(k.partition);
        let (set, sqn) = self
            .replicas
            .read(k.partition, deadline, move |r| {
                r.head_sqn(k.partition, &k.bucket, &k.key)
            })
            .await?;
        Ok(Response::new(reply_head(&set, false, queue_len, sqn)))
    }

    async fn get_replica(
        &self,
        req: Request<pb::ReplicaKey>,
    ) -> Result<Response<pb::ReplicaObject>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let k = req.into_inner();
        self.replicas.readable(k.partition)?;
        let s = self
            .replicas
            .read(k.partition, deadline, move |r| {
                r.get(k.partition, &k.bucket, &k.key)
            })
            .await?;
        Ok(Response::new(reply_object(&s, false)))
    }

    async fn coordinate_put(
        &self,
        req: Request<pb::CoordinatePutRequest>,
    ) -> Result<Response<pb::ReplicaObject>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let k = key_of(q.key)?;
        let context = crate::kv::context_of(&q.context)?;
        let content = (!q.tombstone).then_some(Content {
            metadata: q.metadata,
            value: q.value,
            index: Vec::new(),
        });
        let edits = crate::kv::edits_from(q.index_changes)?;
        let policy = policy(q.policy);
        let stamp = WriteStamp {
            timestamp_us: q.timestamp_us,
            n_val: u8::try_from(q.n_val).map_err(|_| {
                Status::invalid_argument(format!("n_val {} is more than 255", q.n_val))
            })?,
        };
        let s = self
            .replicas
            .write(k.partition, deadline, move |r| {
                r.coordinate_put(
                    k.partition,
                    &k.bucket,
                    &k.key,
                    &context,
                    content,
                    stamp,
                    policy,
                    &edits,
                )
            })
            .await?;
        Ok(Response::new(reply_object(&s, self.replicas.durable)))
    }

    async fn fold_keys(
        &self,
        req: Request<pb::FoldKeysRequest>,
    ) -> Result<Response<pb::FoldKeysResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let limit = page_limit(q.limit);
        self.replicas.readable(q.partition)?;
        let (keys, last, snapshot) = self
            .replicas
            .call(q.partition, deadline, move |r| {
                r.fold_keys_page(
                    q.partition,
                    &q.bucket,
                    &q.after,
                    limit,
                    &q.key_partitions,
                    q.snapshot,
                )
            })
            .await?;
        Ok(Response::new(pb::FoldKeysResponse {
            keys,
            last: last.unwrap_or_default(),
            snapshot,
        }))
    }

    async fn index_page(
        &self,
        req: Request<pb::IndexPageRequest>,
    ) -> Result<Response<pb::IndexPageResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let (query, after) = index_page_query(&q)?;
        let limit = page_limit(q.limit);
        self.replicas.readable(q.partition)?;
        let (results, last, snapshot) = self
            .replicas
            .call(q.partition, deadline, move |r| {
                r.index_page(
                    q.partition,
                    &query,
                    after.as_ref(),
                    limit,
                    &q.key_partitions,
                    q.snapshot,
                )
            })
            .await?;
        Ok(Response::new(pb::IndexPageResponse {
            results: results.into_iter().map(entry_pb).collect(),
            last: last.map(entry_pb),
            snapshot,
        }))
    }

    async fn release_snapshots(
        &self,
        req: Request<pb::ReleaseSnapshotsRequest>,
    ) -> Result<Response<pb::ReleaseSnapshotsResponse>, Status> {
        for id in req.into_inner().snapshots {
            self.replicas.held.release(id);
        }
        Ok(Response::new(pb::ReleaseSnapshotsResponse {}))
    }

    async fn reap_replica(
        &self,
        req: Request<pb::ReapReplicaRequest>,
    ) -> Result<Response<pb::ReapReplicaResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let k = key_of(q.key)?;
        let set = decode_siblings(&q.siblings)
            .map_err(|e| Status::invalid_argument(format!("siblings: {e}")))?;
        let reaped = self
            .replicas
            .call(k.partition, deadline, move |r| {
                r.reap(k.partition, &k.bucket, &k.key, &set)
            })
            .await?;
        Ok(Response::new(pb::ReapReplicaResponse { reaped }))
    }

    async fn aae_tree(
        &self,
        req: Request<pb::AaeTreeRequest>,
    ) -> Result<Response<pb::AaeTreeResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let p = req.into_inner().partition;
        self.replicas.readable(p)?;
        // Cloned and folded on the blocking pool, as in the Admin service.
        let resp = self
            .replicas
            .call(p, deadline, move |r| {
                r.vnode_store(p)?
                    .aae_tree()
                    .map(|t| crate::admin::tree_response(&t))
                    .map_err(to_status)
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn aae_segment_keys(
        &self,
        req: Request<pb::AaeSegmentKeysRequest>,
    ) -> Result<Response<pb::AaeSegmentKeysResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let p = q.partition;
        self.replicas.readable(p)?;
        let keys = self
            .replicas
            .call(p, deadline, move |r| {
                r.vnode_store(p)?
                    .aae_keys_in_segments(&q.segments)
                    .map_err(to_status)
            })
            .await?;
        Ok(Response::new(crate::admin::segment_keys_response(keys)))
    }

    async fn announce(
        &self,
        req: Request<pb::AnnounceRequest>,
    ) -> Result<Response<pb::AnnounceResponse>, Status> {
        let a = req.into_inner();
        if a.member.is_empty() {
            return Err(Status::invalid_argument(
                "Announce needs the announcing member's name",
            ));
        }
        self.peers.heard(&a.member, a.leaving);
        Ok(Response::new(pb::AnnounceResponse {}))
    }

    async fn ring_state(
        &self,
        _: Request<pb::RingStateRequest>,
    ) -> Result<Response<pb::RingStateResponse>, Status> {
        Ok(Response::new(self.transitions.ring_state()))
    }

    async fn fold_objects(
        &self,
        req: Request<pb::FoldObjectsRequest>,
    ) -> Result<Response<pb::FoldObjectsResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let ring = self.replicas.ring_size();
        if q.partition >= ring {
            return Err(Status::invalid_argument(format!(
                "partition {} is not in this node's ring of {ring}",
                q.partition
            )));
        }
        if q.key_partitions.is_empty() {
            return Err(Status::invalid_argument(
                "key_partitions is empty: name the partitions whose keys to fold",
            ));
        }
        if let Some(bad) = q.key_partitions.iter().find(|p| **p >= ring) {
            return Err(Status::invalid_argument(format!(
                "key partition {bad} is not in this node's ring of {ring}"
            )));
        }
        if q.max_objects > 1024 || q.max_bytes > 16 << 20 {
            return Err(Status::invalid_argument(
                "at most 1024 objects and 16 MiB per FoldObjects call",
            ));
        }
        if self.replicas.readable(q.partition).is_err() {
            return Err(Status::failed_precondition(format!(
                "p{} on this member is rebuilding itself: it has no complete copy to give",
                q.partition
            )));
        }
        let set: BTreeSet<u32> = q.key_partitions.into_iter().collect();
        let after = q.after.map(|a| (a.bucket, a.key));
        let max_objects = if q.max_objects == 0 {
            64
        } else {
            q.max_objects as usize
        };
        let max_bytes = if q.max_bytes == 0 {
            256 << 10
        } else {
            q.max_bytes
        };
        let p = q.partition;
        let out = self
            .replicas
            .call(p, deadline, move |r| {
                r.fold_objects(p, &set, after, max_objects, max_bytes)
            })
            .await?;
        Ok(Response::new(out))
    }

    async fn exchange_tree(
        &self,
        req: Request<pb::ExchangeTreeRequest>,
    ) -> Result<Response<pb::ExchangeTreeResponse>, Status> {
        let q = req.into_inner();
        let asked = if q.segments.is_empty() {
            crate::aae_exchange::Asked::Trees
        } else {
            crate::aae_exchange::Asked::Keys {
                n_val: q.n_val,
                segments: q.segments,
            }
        };
        let share = crate::aae_exchange::local_share(
            &self.replicas,
            q.partition,
            q.key_partition,
            q.segment_count,
            asked,
        )
        .await?;
        Ok(Response::new(pb::ExchangeTreeResponse {
            trees: share
                .trees
                .into_iter()
                .map(|(n_val, leaves)| pb::PreflistTree { n_val, leaves })
                .collect(),
            keys: crate::admin::segment_keys_response(share.keys).keys,
        }))
    }

    async fn merge_replica(
        &self,
        req: Request<pb::MergeReplicaRequest>,
    ) -> Result<Response<pb::HeadReplicaResponse>, Status> {
        let deadline = deadline_of(&req, self.replicas.default_deadline);
        let q = req.into_inner();
        let k = key_of(q.key)?;
        let incoming = object_of(&q.siblings, &q.contents)?;
        let policy = policy(q.policy);
        let mode = MergeMode::of_request(q.transfer, q.rewrite)?;
        let s = self
            .replicas
            .write(k.partition, deadline, move |r| {
                r.merge(k.partition, &k.bucket, &k.key, &incoming, policy, mode)
            })
            .await?;
        Ok(Response::new(reply_head(
            &s.object.siblings,
            self.replicas.durable,
            0,
            s.sqn,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::MergeMode;

    #[test]
    fn a_merge_request_is_a_write_a_transfer_or_a_rewrite() {
        assert_eq!(
            MergeMode::of_request(false, false).unwrap(),
            MergeMode::Write
        );
        assert_eq!(
            MergeMode::of_request(true, false).unwrap(),
            MergeMode::Transfer
        );
        assert_eq!(
            MergeMode::of_request(false, true).unwrap(),
            MergeMode::Rewrite
        );
        let e = MergeMode::of_request(true, true).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("not both"), "{e:?}");
    }
}
