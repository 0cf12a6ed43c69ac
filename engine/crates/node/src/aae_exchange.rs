//! AAE exchange (docs/cluster.md §9): the replicas of a preflist compare Tictac trees of the keys
//! they hold for it, then the keys of the segments that differ, and every key whose replicas
//! differ is repaired the way read repair does it — each replica's object is merged into every
//! replica that holds something else (`MergeReplica`), so afterwards all hold the merge.
//!
//! A vnode holds the keys of `n_val` preflists (those starting at its partition and at the
//! `n_val - 1` before it), so its own tree mixes them and cannot be compared with a neighbour's.
//! An exchange therefore has each replica build the tree of one preflist's share of its vnode by a
//! fold of the ledger (keys and metadata only; no value is read). A key whose value is missing
//! from the journal is left out of that tree, so the exchange repairs it from the other replicas.
//! Keys are grouped by the n_val they were written with (a bucket type may use fewer replicas
//! than the cluster): one tree per group, compared and repaired among that group's replicas only,
//! the first n_val of the preflist.
//!
//! The member that owns a preflist's first partition leads its exchanges: on a schedule
//! (`[aae] exchange_interval_secs`, one exchange at a time, the round started at an offset of the
//! interval that depends on the member's name so members do not start together), and when asked
//! (`levee admin aae-exchange`, the `AAEExchange` admin RPC).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{Object, Target};
use levee_proto::v1 as pb;
use levee_store::{AaeKeyHash, HeadFoldOptions, Store};
use tonic::Status;

use crate::coordinator::Coordinator;
use crate::membership::ClusterView;
use crate::replica::Replicas;

/// Leaves of an exchange tree (16 KiB on the wire).
pub const SEGMENTS: u32 = 4096;
/// Largest `segment_count` an `ExchangeTree` request may ask for.
pub const MAX_SEGMENT_COUNT: u32 = 1 << 20;
/// Differing segments whose keys one exchange lists and repairs; the rest waits for the next
/// exchange (bounds the key lists a large divergence would send at once).
pub const MAX_SEGMENTS_PER_EXCHANGE: usize = 64;
/// How long a replica may take to fold its vnode for one request.
const FOLD_TIMEOUT: Duration = Duration::from_secs(300);

/// One preflist's share of a vnode: its trees by n_val group, or the keys of some segments.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// n_val → the leaves of the keys written with it (only groups that hold keys).
    pub trees: BTreeMap<u32, Vec<u32>>,
    pub keys: Vec<AaeKeyHash>,
}

/// What an `ExchangeTree` request asks a replica for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The trees of every n_val group.
    Trees,
    /// The keys and hashes in `segments` of the keys written with `n_val`.
    Keys { n_val: u32, segments: Vec<u32> },
}

/// Fold vnode `store`'s ledger for the keys whose preflist starts at `key_partition` (in a ring
/// of `ring_size`), grouped by the n_val they were written with (`SiblingSet::n_val` in a cluster
/// of `cluster_n_val`): the trees of `segment_count` leaves, or the keys asked for. Keys whose
/// value is missing from the journal are left out.
pub fn preflist_share(
    store: &Store,
    ring_size: u32,
    cluster_n_val: u32,
    key_partition: u32,
    segment_count: u32,
    asked: &Asked,
) -> levee_store::Result<Share> {
    let snap = store.snapshot(levee_store::SnapshotKind::Fold)?;
    let opts = HeadFoldOptions {
        journal_check: true,
        segments: match asked {
            Asked::Trees => None,
            Asked::Keys { segments, .. } => Some(segments.clone()),
        },
        segment_count,
        ..HeadFoldOptions::default()
    };
    let mut share = Share::default();
    for h in snap.fold_heads(&opts)? {
        let h = h?;
        if crate::ring::partition_of(&h.bucket, &h.key, ring_size) != key_partition {
            continue;
        }
        let n_val = written_n_val(&h.head.metadata, cluster_n_val).map_err(|e| {
            levee_store::Error::Corruption(format!(
                "ledger metadata of {:?}/{:?}: {e}",
                String::from_utf8_lossy(&h.bucket),
                String::from_utf8_lossy(&h.key)
            ))
        })?;
        let hash = levee_store::aae_leaf_hash(&h.bucket, &h.key, &h.head.metadata);
        match asked {
            Asked::Trees => {
                let leaves = share
                    .trees
                    .entry(n_val)
                    .or_insert_with(|| vec![0; segment_count as usize]);
                leaves[levee_store::aae_segment(&h.bucket, &h.key, segment_count) as usize] ^= hash;
            }
            Asked::Keys { n_val: want, .. } if *want == n_val => share.keys.push(AaeKeyHash {
                bucket: h.bucket,
                key: h.key,
                hash,
            }),
            Asked::Keys { .. } => {}
        }
    }
    Ok(share)
}

/// The n_val a stored object was written with (see [`preflist_share`]).
fn written_n_val(meta: &[u8], cluster_n_val: u32) -> Result<u32, String> {
    let set = levee_cluster::index_entries::siblings_bytes(meta).map_err(|e| e.to_string())?;
    let set = levee_cluster::decode_siblings(set).map_err(|e| e.to_string())?;
    Ok(set.n_val(cluster_n_val))
}

/// The replicas that should hold a group's keys: the first `n_val` of the preflist's targets.
pub fn group_targets(targets: &[Target], n_val: u32) -> &[Target] {
    &targets[..targets.len().min(n_val as usize)]
}

/// Segments whose leaves are not the same on every replica, in order.
pub fn differing_segments(trees: &[Vec<u32>]) -> Vec<u32> {
    let Some(first) = trees.first() else {
        return Vec::new();
    };
    (0..first.len())
        .filter(|&s| trees.iter().any(|t| t.get(s) != first.get(s)))
        .map(|s| s as u32)
        .collect()
}

/// Keys that not every replica holds with the same hash (missing on one counts), in key order.
pub fn differing_keys(lists: &[Vec<AaeKeyHash>]) -> Vec<(Vec<u8>, Vec<u8>)> {
    // (bucket, key) -> its hash on each replica (None: not there).
    type Hashes = Vec<Option<u32>>;
    let mut seen: BTreeMap<(&[u8], &[u8]), Hashes> = BTreeMap::new();
    for (i, list) in lists.iter().enumerate() {
        for k in list {
            seen.entry((&k.bucket, &k.key))
                .or_insert_with(|| vec![None; lists.len()])[i] = Some(k.hash);
        }
    }
    seen.into_iter()
        .filter(|(_, hashes)| hashes.iter().any(|h| *h != hashes[0]))
        .map(|((b, k), _)| (b.to_vec(), k.to_vec()))
        .collect()
}

/// What one exchange did (the `AAEExchange` answer and the metrics' `result` label).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub key_partition: u32,
    /// One of [`crate::metrics::EXCHANGE_RESULTS`].
    pub result: &'static str,
    pub segments_differing: u32,
    pub keys_differing: u32,
    /// Differing keys every replica now holds the merge of.
    pub keys_repaired: u32,
    pub replicas_repaired: u32,
    pub message: String,
    pub seconds: f64,
}

impl Outcome {
    fn new(key_partition: u32, result: &'static str, message: impl Into<String>) -> Outcome {
        Outcome {
            key_partition,
            result,
            segments_differing: 0,
            keys_differing: 0,
            keys_repaired: 0,
            replicas_repaired: 0,
            message: message.into(),
            seconds: 0.0,
        }
    }

    pub fn to_pb(&self) -> pb::ExchangeOutcome {
        pb::ExchangeOutcome {
            key_partition: self.key_partition,
            result: self.result.to_string(),
            segments_differing: self.segments_differing,
            keys_differing: self.keys_differing,
            keys_repaired: self.keys_repaired,
            replicas_repaired: self.replicas_repaired,
            message: self.message.clone(),
            seconds: self.seconds,
        }
    }
}

/// The preflists this member leads: those whose first partition it owns.
pub fn led_by(view: &ClusterView, me: &str) -> Vec<u32> {
    (0..view.claim.ring_size().get())
        .filter(|p| view.claim.owner(*p) == me)
        .collect()
}

/// Run one exchange for the preflist starting at `key_partition`, counted in the metrics.
pub async fn exchange(c: &Arc<Coordinator>, key_partition: u32) -> Outcome {
    let started = Instant::now();
    let mut o = match exchange_once(c, key_partition).await {
        Ok(o) => o,
        Err(e) => Outcome::new(key_partition, "failed", e.message()),
    };
    o.seconds = started.elapsed().as_secs_f64();
    c.metrics.aae_exchanges.with_label_values(&[o.result]).inc();
    c.metrics.aae_repairs.inc_by(o.keys_repaired as u64);
    o
}

async fn exchange_once(c: &Arc<Coordinator>, key_partition: u32) -> Result<Outcome, Status> {
    let view = c.vnodes.membership.view();
    let ring = view.claim.ring_size().get();
    if key_partition >= ring {
        return Err(Status::invalid_argument(format!(
            "partition {key_partition} is not in this node's ring of {ring}"
        )));
    }
    if view.target.is_some() {
        return Ok(Outcome::new(
            key_partition,
            "skipped",
            "a ring transition is under way (partitions are moving between members)",
        ));
    }
    let defaults = c.props("")?;
    let cluster_n = view.claim.n_val();
    let targets = levee_cluster::targets_n(&view.claim, key_partition, cluster_n, &BTreeSet::new())
        .map_err(|e| Status::failed_precondition(e.to_string()))?
        .targets;
    let down = c.peers.down();
    if let Some(t) = targets.iter().find(|t| down.contains(&t.node)) {
        return Ok(Outcome::new(
            key_partition,
            "skipped",
            format!("member {} of the preflist is down", t.node),
        ));
    }
    if targets.len() < 2 {
        return Ok(Outcome::new(key_partition, "in_sync", "one replica"));
    }

    let shares = futures_util::future::join_all(
        targets
            .iter()
            .map(|t| share_of(c, &view, t, key_partition, Asked::Trees)),
    )
    .await;
    let trees = shares
        .into_iter()
        .map(|s| s.map(|s| s.trees))
        .collect::<Result<Vec<_>, _>>()?;
    let mut o = Outcome::new(key_partition, "in_sync", "");
    let mut failures = Vec::new();
    // Each n_val group among the replicas that should hold it; the trees of replicas beyond
    // (a copy left from before a smaller n_val's write, say) are not compared.
    let groups: BTreeSet<u32> = trees.iter().flat_map(|t| t.keys().copied()).collect();
    for n_val in groups {
        let replicas = group_targets(&targets, n_val);
        if replicas.len() < 2 {
            continue;
        }
        let empty = vec![0; SEGMENTS as usize];
        let leaves: Vec<Vec<u32>> = trees[..replicas.len()]
            .iter()
            .map(|t| t.get(&n_val).unwrap_or(&empty).clone())
            .collect();
        let segments = differing_segments(&leaves);
        o.segments_differing += segments.len() as u32;
        if segments.is_empty() {
            continue;
        }
        let asked = Asked::Keys {
            n_val,
            segments: segments
                .into_iter()
                .take(MAX_SEGMENTS_PER_EXCHANGE)
                .collect(),
        };
        let shares = futures_util::future::join_all(
            replicas
                .iter()
                .map(|t| share_of(c, &view, t, key_partition, asked.clone())),
        )
        .await;
        let lists = shares
            .into_iter()
            .map(|s| s.map(|s| s.keys))
            .collect::<Result<Vec<_>, _>>()?;
        let keys = differing_keys(&lists);
        o.keys_differing += keys.len() as u32;
        o.result = "repaired";
        for (bucket, key) in keys {
            match repair(c, &view, replicas, &bucket, &key, defaults.conflict).await {
                Ok(n) => {
                    o.keys_repaired += 1;
                    o.replicas_repaired += n;
                }
                Err(e) => failures.push(e.message().to_string()),
            }
        }
    }
    if !failures.is_empty() {
        o.result = "failed";
        o.message = format!(
            "{} of {} key(s) not repaired; first: {}",
            failures.len(),
            o.keys_differing,
            failures[0]
        );
    }
    Ok(o)
}

/// Replica `t`'s share of the preflist (its tree, or the keys of `segments`).
async fn share_of(
    c: &Arc<Coordinator>,
    view: &ClusterView,
    t: &Target,
    key_partition: u32,
    asked: Asked,
) -> Result<Share, Status> {
    if t.node == c.peers.self_name {
        return local_share(&c.replicas, t.partition, key_partition, SEGMENTS, asked).await;
    }
    let member = view
        .member(&t.node)
        .ok_or_else(|| Status::internal(format!("member {} is not in the member list", t.node)))?;
    let mut client = c.peers.client(member)?;
    let mut req = tonic::Request::new(pb::ExchangeTreeRequest {
        partition: t.partition,
        key_partition,
        segment_count: SEGMENTS,
        segments: match &asked {
            Asked::Trees => Vec::new(),
            Asked::Keys { segments, .. } => segments.clone(),
        },
        n_val: match asked {
            Asked::Trees => 0,
            Asked::Keys { n_val, .. } => n_val,
        },
    });
    req.set_timeout(FOLD_TIMEOUT);
    let r = client
        .exchange_tree(req)
        .await
        .map_err(|s| {
            Status::new(
                s.code(),
                format!("{} p{}: {}", t.node, t.partition, s.message()),
            )
        })?
        .into_inner();
    let mut trees = BTreeMap::new();
    for tree in r.trees {
        let n_val = tree.n_val;
        if tree.leaves.len() != SEGMENTS as usize || trees.insert(n_val, tree.leaves).is_some() {
            return Err(Status::internal(format!(
                "{} p{}: its answer holds a malformed or repeated tree for n_val {n_val}",
                t.node, t.partition
            )));
        }
    }
    Ok(Share {
        trees,
        keys: r
            .keys
            .into_iter()
            .map(|k| AaeKeyHash {
                bucket: k.bucket,
                key: k.key,
                hash: k.hash,
            })
            .collect(),
    })
}

/// This node's share of vnode `partition` (the `ExchangeTree` RPC's work), folded on the blocking
/// pool (a fold of a large vnode takes a while; it reads a snapshot and holds no vnode slot).
pub async fn local_share(
    replicas: &Replicas,
    partition: u32,
    key_partition: u32,
    segment_count: u32,
    asked: Asked,
) -> Result<Share, Status> {
    let ring = replicas.ring_size();
    let cluster_n = replicas.cluster_n_val();
    for (what, p) in [("partition", partition), ("key_partition", key_partition)] {
        if p >= ring {
            return Err(Status::invalid_argument(format!(
                "{what} {p} is not in this node's ring of {ring}"
            )));
        }
    }
    if segment_count == 0 || segment_count > MAX_SEGMENT_COUNT {
        return Err(Status::invalid_argument(format!(
            "segment_count {segment_count} is outside 1..={MAX_SEGMENT_COUNT}"
        )));
    }
    if let Asked::Keys { n_val, segments } = &asked {
        if let Some(bad) = segments.iter().find(|&&s| s >= segment_count) {
            return Err(Status::invalid_argument(format!(
                "segment {bad} is beyond a tree of {segment_count} segments (0..={})",
                segment_count - 1
            )));
        }
        if *n_val == 0 || *n_val > cluster_n {
            return Err(Status::invalid_argument(format!(
                "n_val {n_val} is outside 1..={cluster_n} (the cluster's n_val)"
            )));
        }
    }
    if replicas.readable(partition).is_err() {
        return Err(Status::failed_precondition(format!(
            "p{partition} on this member is rebuilding itself: it has no complete copy to compare"
        )));
    }
    let store = replicas.store(partition)?.clone();
    tokio::task::spawn_blocking(move || {
        preflist_share(
            &store,
            ring,
            cluster_n,
            key_partition,
            segment_count,
            &asked,
        )
    })
    .await
    .map_err(|e| Status::internal(format!("exchange fold: {e}")))?
    .map_err(crate::errors::to_status)
}

/// Bring every replica of (bucket, key) up to the merge of all of them: each replica's object is
/// merged into every replica whose sibling set differs. A replica whose object cannot be read
/// only receives; when it answered DATA_LOSS (its value is missing from the journal) the first
/// object it receives is rewritten there even if its sibling set is the same, so the value is
/// back. Returns the replicas sent to.
async fn repair(
    c: &Arc<Coordinator>,
    view: &ClusterView,
    targets: &[Target],
    bucket: &[u8],
    key: &[u8],
    policy: levee_cluster::ConflictPolicy,
) -> Result<u32, Status> {
    let deadline = Instant::now() + c.replicas.default_deadline;
    let fetched = futures_util::future::join_all(
        targets
            .iter()
            .map(|t| c.get_replica(view, t, bucket.to_vec(), key.to_vec(), deadline)),
    )
    .await;
    let lost: Vec<bool> = fetched
        .iter()
        .map(|r| matches!(r, Err(s) if s.code() == tonic::Code::DataLoss))
        .collect();
    let objects: Vec<Option<Arc<Object>>> = fetched
        .into_iter()
        .map(|r| r.ok().map(|s| Arc::new(s.object)))
        .collect();
    if objects.iter().all(Option::is_none) {
        return Err(Status::unavailable(format!(
            "no replica of {:?}/{:?} could be read",
            String::from_utf8_lossy(bucket),
            String::from_utf8_lossy(key)
        )));
    }
    let mut sent = 0;
    for (j, t) in targets.iter().enumerate() {
        let mut rewrite = lost[j];
        for (i, from) in objects.iter().enumerate() {
            let Some(from) = from else { continue };
            if i == j || from.siblings.is_empty() {
                continue;
            }
            if objects[j]
                .as_ref()
                .is_some_and(|o| o.siblings == from.siblings)
            {
                continue;
            }
            let (b, k) = (bucket.to_vec(), key.to_vec());
            if std::mem::take(&mut rewrite) {
                c.rewrite_replica(view, t, b, k, from.clone(), policy, deadline)
                    .await?;
            } else {
                c.merge_replica(view, t, b, k, from.clone(), policy, deadline)
                    .await?;
            }
            sent += 1;
        }
    }
    Ok(sent)
}

/// Exchanges on a schedule: every `every`, one round over the preflists this member leads, one
/// exchange at a time. Runs until the process ends; `every` zero turns it off.
pub async fn run_schedule(c: Arc<Coordinator>, every: Duration) {
    if every.is_zero() {
        return;
    }
    // Members start their rounds at different offsets of the interval.
    let offset = every
        .mul_f64((crc32c::crc32c(c.peers.self_name.as_bytes()) as f64) / (u32::MAX as f64 + 1.0));
    tokio::time::sleep(offset).await;
    loop {
        let started = Instant::now();
        let view = c.vnodes.membership.view();
        let (mut repaired, mut failed) = (0u32, 0u32);
        for p in led_by(&view, &c.peers.self_name) {
            let o = exchange(&c, p).await;
            repaired += o.keys_repaired;
            if o.result == "failed" {
                failed += 1;
                log::warn!("aae exchange of p{p} failed: {}", o.message);
            }
        }
        if repaired > 0 || failed > 0 {
            log::info!(
                "aae exchange round: {repaired} key(s) repaired, {failed} exchange(s) failed, {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(key: &str, hash: u32) -> AaeKeyHash {
        AaeKeyHash {
            bucket: b"b".to_vec(),
            key: key.as_bytes().to_vec(),
            hash,
        }
    }

    #[test]
    fn differing_segments_table() {
        let cases: Vec<(Vec<Vec<u32>>, Vec<u32>)> = vec![
            (vec![], vec![]),
            (vec![vec![1, 2, 3]], vec![]),
            (vec![vec![1, 2, 3], vec![1, 2, 3], vec![1, 2, 3]], vec![]),
            (vec![vec![1, 2, 3], vec![1, 9, 3]], vec![1]),
            // The first equal to the second, the third differs: still found.
            (
                vec![vec![1, 2, 3], vec![1, 2, 3], vec![0, 2, 4]],
                vec![0, 2],
            ),
            (vec![vec![0, 0], vec![5, 5]], vec![0, 1]),
        ];
        for (trees, want) in cases {
            assert_eq!(differing_segments(&trees), want, "{trees:?}");
        }
    }

    #[test]
    fn differing_keys_table() {
        let cases: Vec<(Vec<Vec<AaeKeyHash>>, Vec<&str>)> = vec![
            (
                vec![vec![k("a", 1)], vec![k("a", 1)], vec![k("a", 1)]],
                vec![],
            ),
            // Another hash on one replica.
            (
                vec![vec![k("a", 1)], vec![k("a", 2)], vec![k("a", 1)]],
                vec!["a"],
            ),
            // Missing on one replica (the first, too).
            (vec![vec![], vec![k("a", 1)], vec![k("a", 1)]], vec!["a"]),
            (vec![vec![k("a", 1)], vec![k("a", 1)], vec![]], vec!["a"]),
            // Several keys, in key order, only the differing ones.
            (
                vec![
                    vec![k("c", 3), k("a", 1), k("b", 2)],
                    vec![k("a", 1), k("b", 7), k("c", 3)],
                    vec![k("a", 1), k("b", 2), k("c", 3), k("d", 4)],
                ],
                vec!["b", "d"],
            ),
        ];
        for (lists, want) in cases {
            let got: Vec<String> = differing_keys(&lists)
                .into_iter()
                .map(|(_, key)| String::from_utf8(key).unwrap())
                .collect();
            assert_eq!(got, want, "{lists:?}");
        }
    }
}
