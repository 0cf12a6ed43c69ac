//! Rebuilding vnodes after a member lost its data (docs/cluster.md §8, "Replacing a member").
//!
//! A member that starts without a ring of its own (no `MEMBERS`: a new or wiped volume) and takes
//! one from a member holding data, under which it owns partitions, has lost what it held for
//! them. Those vnodes are marked in `<data_dir>/REBUILD` before the ring is committed, so a crash
//! in between leaves them rebuilding, never taken for complete. A rebuilding vnode takes writes
//! (replicated, handed off, transferred) but answers no read: reads go to the other replicas. It
//! pulls every object of the key partitions it holds from each vnode that shares them
//! (`levee_cluster::rebuild_sources`) with `FoldObjects` on `levee.v1.Node`, in batches merged as
//! a transfer is (a newer value here is never undone), the last (bucket, key) of each source kept
//! in `REBUILD` so a restart resumes. A source that is rebuilding itself (two members lost at
//! once) is skipped when another source gives the same key partitions whole; a key partition no
//! complete source could give is logged (its keys come back by read repair) and the vnode opens.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use levee_cluster::{Claim, Role, Target};
use levee_proto::v1 as pb;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tonic::{Code, Status};

use crate::coordinator::Coordinator;
use crate::progress_file::{load_json, save_json, Throttled};
use crate::replica::object_of;

pub const REBUILD_FILE: &str = "REBUILD";

/// Objects and bytes asked for per `FoldObjects` call.
const BATCH_OBJECTS: u32 = 64;
const BATCH_BYTES: u64 = 256 << 10;
/// Progress is written at most this often while a source streams (and at every end).
const SAVE_EVERY: Duration = Duration::from_secs(1);
const STEP_EVERY: Duration = Duration::from_millis(500);

/// Where a source stands.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub enum SourceState {
    #[default]
    Pending,
    /// Every object of its key partitions was pulled.
    Done,
    /// It has no complete copy to give (it is this member, or it is rebuilding too).
    Skipped,
}

/// One source of a rebuilding vnode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Source {
    pub key_partitions: BTreeSet<u32>,
    pub after: Option<(Vec<u8>, Vec<u8>)>,
    pub state: SourceState,
    pub objects: u64,
    pub bytes: u64,
}

/// What `REBUILD` holds: per rebuilding vnode, its sources by vnode.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Progress {
    pub vnodes: BTreeMap<u32, BTreeMap<u32, Source>>,
}

/// The plan for rebuilding `me`'s vnodes under `claim`.
pub fn plan(claim: &Claim, me: &str) -> Progress {
    let vnodes = levee_cluster::owned_vnodes(claim, me)
        .into_iter()
        .map(|q| {
            let sources = levee_cluster::rebuild_sources(claim, q)
                .into_iter()
                .map(|(v, key_partitions)| {
                    (
                        v,
                        Source {
                            key_partitions,
                            ..Default::default()
                        },
                    )
                })
                .collect();
            (q, sources)
        })
        .collect();
    Progress { vnodes }
}

/// Marks `me`'s vnodes under `claim` for rebuilding (before the ring is committed).
pub fn mark(data_dir: &Path, claim: &Claim, me: &str) -> Result<usize> {
    let p = plan(claim, me);
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    save_json(&data_dir.join(REBUILD_FILE), &p)?;
    Ok(p.vnodes.len())
}

/// A vnode's sources once every one is done or skipped: the key partitions no done source gave.
pub fn uncovered(claim: &Claim, q: u32, sources: &BTreeMap<u32, Source>) -> Option<BTreeSet<u32>> {
    if sources.values().any(|s| s.state == SourceState::Pending) {
        return None;
    }
    let mut missing = levee_cluster::held_partitions(claim, q);
    for s in sources.values().filter(|s| s.state == SourceState::Done) {
        for p in &s.key_partitions {
            missing.remove(p);
        }
    }
    Some(missing)
}

pub struct Rebuild {
    coordinator: Arc<Coordinator>,
    path: PathBuf,
    progress: Mutex<Progress>,
    last_warning: Throttled,
}

impl Rebuild {
    /// Loads `REBUILD` and closes the vnodes it names to reads.
    pub fn open(coordinator: Arc<Coordinator>) -> Result<Arc<Rebuild>> {
        let path = coordinator.vnodes.data_dir.join(REBUILD_FILE);
        let progress: Progress = load_json(
            &path,
            "remove it only if this member's data is complete (its vnodes would open without rebuilding)",
        )?;
        for q in progress.vnodes.keys() {
            if let Some(f) = coordinator.replicas.rebuilding.get(*q as usize) {
                f.store(true, Ordering::SeqCst);
            }
        }
        coordinator
            .metrics
            .rebuild_partitions_pending
            .set(progress.vnodes.len() as i64);
        if !progress.vnodes.is_empty() {
            log::info!(
                "rebuild: {} vnode(s) rebuild from the other replicas before they answer reads: {:?}",
                progress.vnodes.len(),
                progress.vnodes.keys().collect::<Vec<_>>()
            );
        }
        Ok(Arc::new(Rebuild {
            coordinator,
            path,
            progress: Mutex::new(progress),
            last_warning: Throttled::default(),
        }))
    }

    /// Pulls until every vnode is rebuilt.
    pub async fn run(self: Arc<Self>) {
        while !self.progress.lock().vnodes.is_empty() {
            if let Err(e) = self.step().await {
                self.last_warning.warn("rebuild", e.message().to_string());
            }
            tokio::time::sleep(STEP_EVERY).await;
        }
    }

    async fn step(&self) -> Result<(), Status> {
        let c = &self.coordinator;
        let view = c.vnodes.membership.view();
        let me = c.peers.self_name.clone();
        let vnodes: Vec<(u32, BTreeMap<u32, Source>)> = self
            .progress
            .lock()
            .vnodes
            .iter()
            .map(|(q, s)| (*q, s.clone()))
            .collect();
        let mut first_err = None;
        for (q, sources) in vnodes {
            for (v, s) in &sources {
                if s.state != SourceState::Pending {
                    continue;
                }
                if view.claim.owner(*v) == me {
                    self.set_state(q, *v, SourceState::Skipped)?;
                    continue;
                }
                match self.pull(&view, q, *v).await {
                    Ok(()) => {}
                    Err(e) if e.code() == Code::FailedPrecondition => {
                        log::warn!(
                            "rebuild: p{q}: source p{v} on {} has no complete copy ({}); skipped",
                            view.claim.owner(*v),
                            e.message()
                        );
                        self.set_state(q, *v, SourceState::Skipped)?;
                    }
                    Err(e) => {
                        first_err.get_or_insert(Status::new(
                            e.code(),
                            format!(
                                "p{q}: pulling from p{v} on {}: {}",
                                view.claim.owner(*v),
                                e.message()
                            ),
                        ));
                    }
                }
            }
            let sources = self
                .progress
                .lock()
                .vnodes
                .get(&q)
                .cloned()
                .unwrap_or_default();
            if let Some(missing) = uncovered(&view.claim, q, &sources) {
                if !missing.is_empty() {
                    log::error!(
                        "rebuild: p{q}: no member could give a complete copy of the keys of partition(s) {missing:?} (every other replica is lost or rebuilding too); \
                         they come back by read repair where a replica still has them"
                    );
                }
                let (objects, bytes) = sources
                    .values()
                    .fold((0, 0), |(o, b), s| (o + s.objects, b + s.bytes));
                let mut p = self.progress.lock();
                p.vnodes.remove(&q);
                save_json(&self.path, &*p).map_err(|e| Status::internal(format!("{e:#}")))?;
                c.replicas.rebuilding[q as usize].store(false, Ordering::SeqCst);
                c.metrics
                    .rebuild_partitions_pending
                    .set(p.vnodes.len() as i64);
                log::info!("rebuild: p{q} rebuilt ({objects} objects, {bytes} bytes pulled); it answers reads again");
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn set_state(&self, q: u32, v: u32, state: SourceState) -> Result<(), Status> {
        let mut p = self.progress.lock();
        if let Some(s) = p.vnodes.get_mut(&q).and_then(|s| s.get_mut(&v)) {
            s.state = state;
        }
        save_json(&self.path, &*p).map_err(|e| Status::internal(format!("{e:#}")))
    }

    /// Pull source vnode `v` into vnode `q`, from where it stopped.
    async fn pull(
        &self,
        view: &Arc<crate::membership::ClusterView>,
        q: u32,
        v: u32,
    ) -> Result<(), Status> {
        let c = &self.coordinator;
        let owner = view.claim.owner(v).to_string();
        let member = view
            .member(&owner)
            .ok_or_else(|| Status::unavailable(format!("{owner} is not in the member list")))?
            .clone();
        let here = Target {
            partition: q,
            node: c.peers.self_name.clone(),
            role: Role::Primary,
        };
        let mut saved = Instant::now();
        loop {
            let (after, key_partitions) = {
                let p = self.progress.lock();
                let s = &p.vnodes[&q][&v];
                (
                    s.after.clone(),
                    s.key_partitions.iter().copied().collect::<Vec<_>>(),
                )
            };
            let mut client = c.peers.client(&member)?;
            let mut req = tonic::Request::new(pb::FoldObjectsRequest {
                partition: v,
                key_partitions,
                after: after.map(|(bucket, key)| pb::ObjectKey { bucket, key }),
                max_objects: BATCH_OBJECTS,
                max_bytes: BATCH_BYTES,
            });
            req.set_timeout(c.replicas.default_deadline * 4);
            let r = client.fold_objects(req).await?.into_inner();
            let deadline = Instant::now() + c.replicas.default_deadline;
            let mut bytes = 0u64;
            let mut merges = Vec::with_capacity(r.objects.len());
            for o in r.objects {
                bytes += (o.siblings.len() + o.contents.len()) as u64;
                let object = object_of(&o.siblings, &o.contents).map_err(|e| {
                    Status::data_loss(format!("an object from {owner}: {}", e.message()))
                })?;
                merges.push(c.transfer_replica(
                    view,
                    &here,
                    o.bucket,
                    o.key,
                    Arc::new(object),
                    deadline,
                ));
            }
            let n = merges.len() as u64;
            for m in futures_util::future::join_all(merges).await {
                m?;
            }
            c.metrics.rebuild_objects.inc_by(n);
            c.metrics.rebuild_bytes.inc_by(bytes);
            let mut p = self.progress.lock();
            let s = p
                .vnodes
                .get_mut(&q)
                .and_then(|s| s.get_mut(&v))
                .expect("kept while pulling");
            s.objects += n;
            s.bytes += bytes;
            if let Some(last) = r.last {
                s.after = Some((last.bucket, last.key));
            }
            if r.done {
                s.state = SourceState::Done;
                save_json(&self.path, &*p).map_err(|e| Status::internal(format!("{e:#}")))?;
                return Ok(());
            }
            if saved.elapsed() >= SAVE_EVERY {
                save_json(&self.path, &*p).map_err(|e| Status::internal(format!("{e:#}")))?;
                saved = Instant::now();
            }
        }
    }
}
