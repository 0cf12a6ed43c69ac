//! The `Admin` gRPC service: status, statistics, and the maintenance the operator's Jobs run.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use levee_proto::v1 as pb;
use tonic::{Request, Response, Status};

use crate::errors::to_status;
use crate::kv::client_timeout;
use crate::maintenance::{answer_by, each_partition, Outcome, PartitionRun};
use crate::membership::{ApplyError, ClusterView};
use crate::vnodes::Vnodes;
use levee_cluster::{Member, MemberList};

pub struct AdminService {
    pub vnodes: Arc<Vnodes>,
    pub node_name: String,
    pub sync_on_write: String,
    pub started: Instant,
    /// Runs AAE exchanges (`AAEExchange`).
    pub coordinator: Arc<crate::coordinator::Coordinator>,
}

/// Engine statistics as name → value (the names the `Stats` RPC and `levee admin stats` show).
pub fn stats_map(s: &levee_store::Stats) -> HashMap<String, f64> {
    let mut m = HashMap::new();
    let mut put = |k: &str, v: f64| {
        m.insert(k.to_string(), v);
    };
    put("puts", s.puts as f64);
    put("gets", s.gets as f64);
    put("heads", s.heads as f64);
    put("deletes", s.deletes as f64);
    put("user_bytes_written", s.user_bytes_written as f64);
    put("journal_bytes_written", s.journal_bytes_written as f64);
    put("ledger_bytes_written", s.ledger_bytes_written as f64);
    put("journal_disk_bytes", s.journal_disk_bytes as f64);
    put("ledger_disk_bytes", s.ledger_disk_bytes as f64);
    put("journal_reads", s.journal_reads as f64);
    put("flushes", s.flushes as f64);
    put("merges", s.merges as f64);
    put("write_stall_seconds", s.write_stall_seconds);
    put("ledger_merge_backlog", s.ledger_merge_backlog as f64);
    put("journal_fsyncs", s.journal_fsyncs as f64);
    put("aae_rebuilds", s.aae_rebuilds as f64);
    put("aae_rebuild_seconds", s.aae_rebuild_seconds);
    put("aae_rebuild_paced_seconds", s.aae_rebuild_paced_seconds);
    put("journal_compaction_runs", s.journal_compaction_runs as f64);
    put(
        "journal_compaction_reclaimed_bytes",
        s.journal_compaction_reclaimed_bytes as f64,
    );
    put("journal_spares_made", s.journal_spares_made as f64);
    put("journal_spares_reused", s.journal_spares_reused as f64);
    put("journal_spares_ready", s.journal_spares_ready as f64);
    put("live_snapshots", s.live_snapshots as f64);
    // SQNs: equal right after an open that had nothing to replay. Per vnode only (see `PER_VNODE`).
    put("persisted_sqn", s.persisted_sqn as f64);
    put("last_sqn", s.last_sqn as f64);
    m
}

/// Entries of `stats_map` that mean nothing summed over vnodes: left out of the totals.
const PER_VNODE: [&str; 2] = ["persisted_sqn", "last_sqn"];

/// A partition's outcome as the proto reports it (the kind-specific fields left for the caller).
fn outcome<R>(r: &PartitionRun<R>) -> pb::PartitionOutcome {
    use pb::partition_outcome::State;
    let (state, error) = match &r.outcome {
        Outcome::Done(_) => (State::Done, String::new()),
        Outcome::Failed(e) => (State::Failed, e.clone()),
        Outcome::NotStarted(e) => (State::NotStarted, e.clone()),
    };
    pb::PartitionOutcome {
        partition: r.partition,
        state: state as i32,
        error,
        seconds: r.elapsed.as_secs_f64(),
        ..Default::default()
    }
}

fn count(o: &pb::PartitionOutcome, failed: &mut u32, not_started: &mut u32) {
    use pb::partition_outcome::State;
    match o.state() {
        State::Failed => *failed += 1,
        State::NotStarted => *not_started += 1,
        _ => {}
    }
}

impl AdminService {
    fn partitions(&self, asked: &[u32]) -> Result<Vec<u32>, Status> {
        if asked.is_empty() {
            return Ok((0..self.vnodes.stores.len() as u32).collect());
        }
        for p in asked {
            if *p as usize >= self.vnodes.stores.len() {
                return Err(Status::invalid_argument(format!(
                    "partition {p} is not hosted here (ring of {})",
                    self.vnodes.stores.len()
                )));
            }
        }
        Ok(asked.to_vec())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Vnodes) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let v = self.vnodes.clone();
        tokio::task::spawn_blocking(move || f(&v))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
    }
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn status(
        &self,
        _: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        Ok(Response::new(pb::StatusResponse {
            node: self.node_name.clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            ring_size: self.vnodes.ring_size,
            vnodes: self.vnodes.stores.len() as u32,
            uptime_seconds: self.started.elapsed().as_secs(),
            data_dir: self.vnodes.data_dir.display().to_string(),
            sync_on_write: self.sync_on_write.clone(),
        }))
    }

    async fn stats(
        &self,
        _: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        let resp = self
            .blocking(|v| {
                let mut totals: HashMap<String, f64> = HashMap::new();
                let mut vnodes = Vec::new();
                for (p, s) in v.stores.iter().enumerate() {
                    let m = stats_map(&s.stats());
                    for (k, val) in m.iter().filter(|(k, _)| !PER_VNODE.contains(&k.as_str())) {
                        *totals.entry(k.clone()).or_default() += val;
                    }
                    vnodes.push(pb::VnodeStats {
                        partition: p as u32,
                        counters: m,
                    });
                }
                Ok(pb::StatsResponse { totals, vnodes })
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn compact_journal(
        &self,
        req: Request<pb::CompactJournalRequest>,
    ) -> Result<Response<pb::CompactJournalResponse>, Status> {
        let deadline = answer_by(Instant::now(), client_timeout(req.metadata()));
        let parts = self.partitions(&req.into_inner().partitions)?;
        let resp = self
            .blocking(move |v| {
                let start = Instant::now();
                let runs = each_partition(&parts, deadline, Instant::now, |p| {
                    v.stores[p as usize]
                        .compact_journal()
                        .map_err(|e| e.to_string())
                });
                let mut out = pb::CompactJournalResponse::default();
                for r in runs {
                    let mut o = outcome(&r);
                    if let Outcome::Done(c) = &r.outcome {
                        o.ran = !c.compacted_segments.is_empty();
                        o.bytes_reclaimed = c.bytes_before.saturating_sub(c.bytes_after);
                        o.records_dropped = c.records_dropped;
                        out.runs += c.runs;
                        out.bytes_reclaimed += o.bytes_reclaimed;
                        out.records_dropped += o.records_dropped;
                    }
                    count(&o, &mut out.failed, &mut out.not_started);
                    out.partitions.push(o);
                }
                out.seconds = start.elapsed().as_secs_f64();
                Ok(out)
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn rebuild_aae(
        &self,
        req: Request<pb::RebuildAaeRequest>,
    ) -> Result<Response<pb::RebuildAaeResponse>, Status> {
        let deadline = answer_by(Instant::now(), client_timeout(req.metadata()));
        let r = req.into_inner();
        let parts = self.partitions(&r.partitions)?;
        let resp = self
            .blocking(move |v| {
                let start = Instant::now();
                let runs = each_partition(&parts, deadline, Instant::now, |p| {
                    v.stores[p as usize]
                        .rebuild_aae(r.journal_check)
                        .map_err(|e| e.to_string())
                });
                let mut out = pb::RebuildAaeResponse::default();
                for r in runs {
                    let mut o = outcome(&r);
                    o.ran = matches!(r.outcome, Outcome::Done(_));
                    out.rebuilt += o.ran as u32;
                    count(&o, &mut out.failed, &mut out.not_started);
                    out.partitions.push(o);
                }
                out.seconds = start.elapsed().as_secs_f64();
                Ok(out)
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn aae_tree(
        &self,
        req: Request<pb::AaeTreeRequest>,
    ) -> Result<Response<pb::AaeTreeResponse>, Status> {
        let p = self.partitions(&[req.into_inner().partition])?[0];
        // The tree is cloned out of the store (4 MiB of segments by default) and folded into its
        // root and branches on the blocking pool: the reactor only sees the small answer.
        let resp = self
            .blocking(move |v| {
                v.stores[p as usize]
                    .aae_tree()
                    .map(|t| tree_response(&t))
                    .map_err(to_status)
            })
            .await?;
        Ok(Response::new(resp))
    }

    async fn aae_segment_keys(
        &self,
        req: Request<pb::AaeSegmentKeysRequest>,
    ) -> Result<Response<pb::AaeSegmentKeysResponse>, Status> {
        let r = req.into_inner();
        let p = self.partitions(&[r.partition])?[0];
        let keys = self
            .blocking(move |v| {
                v.stores[p as usize]
                    .aae_keys_in_segments(&r.segments)
                    .map_err(to_status)
            })
            .await?;
        Ok(Response::new(segment_keys_response(keys)))
    }

    async fn aae_exchange(
        &self,
        req: Request<pb::AaeExchangeRequest>,
    ) -> Result<Response<pb::AaeExchangeResponse>, Status> {
        let c = &self.coordinator;
        let ring = c.replicas.ring_size();
        let mut partitions = req.into_inner().key_partitions;
        if let Some(bad) = partitions.iter().find(|p| **p >= ring) {
            return Err(Status::invalid_argument(format!(
                "partition {bad} is not in this node's ring of {ring}"
            )));
        }
        if partitions.is_empty() {
            partitions =
                crate::aae_exchange::led_by(&self.vnodes.membership.view(), &c.peers.self_name);
        }
        let mut exchanges = Vec::with_capacity(partitions.len());
        for p in partitions {
            exchanges.push(crate::aae_exchange::exchange(c, p).await.to_pb());
        }
        Ok(Response::new(pb::AaeExchangeResponse { exchanges }))
    }

    async fn members(
        &self,
        _: Request<pb::MembersRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        Ok(Response::new(members_response(
            &self.vnodes.membership.view(),
        )))
    }

    async fn set_members(
        &self,
        req: Request<pb::SetMembersRequest>,
    ) -> Result<Response<pb::MembersResponse>, Status> {
        let req = req.into_inner();
        let list = MemberList::new(
            req.version,
            req.members
                .into_iter()
                .map(|m| Member::new(m.name, m.address, m.zone))
                .collect(),
        )
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let membership = self.vnodes.membership.clone();
        tokio::task::spawn_blocking(move || membership.apply(list))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(|e| match e {
                ApplyError::Refused(r) => Status::failed_precondition(r.to_string()),
                ApplyError::Commit(c) => Status::internal(format!("{c:#}")),
            })?;
        Ok(Response::new(members_response(
            &self.vnodes.membership.view(),
        )))
    }
}

fn members_response(v: &ClusterView) -> pb::MembersResponse {
    pb::MembersResponse {
        version: v.list.version(),
        members: v
            .list
            .members()
            .iter()
            .map(|x| pb::Member {
                name: x.name.clone(),
                address: x.address.clone(),
                zone: x.zone.clone(),
            })
            .collect(),
        owners: v.claim.owners().map(String::from).collect(),
        ring_size: v.claim.ring_size().get(),
        n_val: v.claim.n_val(),
        target_owners: v
            .target
            .as_ref()
            .map(|t| t.owners().map(String::from).collect())
            .unwrap_or_default(),
        routing_version: v.routing_list.version(),
    }
}

/// An AAE tree on the wire (Admin and Node services).
pub fn tree_response(t: &levee_store::AaeTree) -> pb::AaeTreeResponse {
    pb::AaeTreeResponse {
        root: t.root(),
        branches: t.branches(),
        segment_count: t.segment_count(),
    }
}

/// Segment keys on the wire (Admin and Node services).
pub fn segment_keys_response(keys: Vec<levee_store::AaeKeyHash>) -> pb::AaeSegmentKeysResponse {
    pb::AaeSegmentKeysResponse {
        keys: keys
            .into_iter()
            .map(|k| pb::AaeKey {
                bucket: k.bucket,
                key: k.key,
                hash: k.hash,
            })
            .collect(),
    }
}
