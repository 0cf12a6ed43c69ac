//! Prometheus metrics (names per docs/metrics.md) and the health/metrics HTTP endpoint.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::vnodes::Vnodes;

/// Request metrics recorded by the RPC handlers.
pub struct Metrics {
    pub registry: Registry,
    pub requests: IntCounterVec,
    pub duration: HistogramVec,
    /// Replicas a read found missing or stale and sent the merge to, by reason.
    pub read_repairs: IntCounterVec,
    /// Hints of writes stored for unreachable primaries.
    pub hints: IntCounter,
    /// Objects sent to their partition's owner: hinted handoff, and ring transitions.
    pub handoff_objects: IntCounter,
    /// Ring transitions this node completed (switched to the target claim).
    pub transitions_completed: IntCounter,
    /// Writes to a moving vnode whose forward to the next owner failed (a catch-up sends them).
    pub transition_forwards_failed: IntCounter,
    /// Partitions this node still has to send in the ring transition under way (0: none runs).
    pub transition_partitions_to_send: IntGauge,
    /// Bytes this node streamed to next owners in the transition to its newest list.
    pub transition_bytes_sent: IntGauge,
    /// Members this node's last switch still waits to hear routing by its target (0: settled).
    pub transition_settle_awaiting: IntGauge,
    /// Vnodes rebuilding from the other replicas after this member lost its data.
    pub rebuild_partitions_pending: IntGauge,
    /// Objects and bytes pulled from other replicas to rebuild vnodes.
    pub rebuild_objects: IntCounter,
    pub rebuild_bytes: IntCounter,
    /// Replicas of deleted keys dropped once every primary held the tombstones long enough.
    pub reaped: IntCounter,
    /// Bytes of objects sent to their partition's owner (hinted handoff, ring transitions).
    pub handoff_bytes: IntCounter,
    /// Vnodes by state (`active`: this node owns the partition; `handoff`: not owned and holding
    /// objects still to hand to the owner; `idle`: not owned and empty), set by every handoff pass.
    pub vnodes: IntGaugeVec,
    /// AAE exchanges this node led, by result ([`EXCHANGE_RESULTS`]).
    pub aae_exchanges: IntCounterVec,
    /// Keys AAE exchanges found different between replicas and repaired.
    pub aae_repairs: IntCounter,
    /// Entries (index entries, keys) coverage queries this node ran received from vnodes, by
    /// operation ([`COVERAGE_OPS`]): against the results returned, what the queries read past.
    pub coverage_fetched: IntCounterVec,
    /// Pages of coverage queries this node ran that a vnode refused for overload and that were
    /// asked again after its hint, by operation ([`COVERAGE_OPS`]).
    pub coverage_page_retries: IntCounterVec,
    /// Query snapshots this member holds for coverage queries between pages.
    pub query_snapshots_held: IntGauge,
    /// Other members this node has marked down (`peers.rs`).
    pub members_down: IntGauge,
    /// Reads of this node's replicas by where they ran ([`crate::replica::READ_PATHS`]).
    pub replica_reads: IntCounterVec,
    /// Expiry (Unix seconds) of the certificate the gRPC port serves, when TLS is on.
    pub tls_expiry: Arc<parking_lot::RwLock<Option<f64>>>,
}

/// The `result` label values of `levee_aae_exchanges_total` (`aae_exchange.rs`).
pub const EXCHANGE_RESULTS: [&str; 4] = ["in_sync", "repaired", "failed", "skipped"];

/// The `op` label values of `levee_coverage_entries_fetched_total`.
pub const COVERAGE_OPS: [&str; 2] = ["index_query", "list_keys"];

/// The states of `levee_vnodes`.
pub const VNODE_STATES: [&str; 3] = ["active", "handoff", "idle"];

impl Metrics {
    /// `self_name`: this node's member name (the initial `levee_vnodes` split, before the first
    /// handoff pass refines it).
    pub fn new(vnodes: Arc<Vnodes>, self_name: &str) -> Metrics {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "levee_requests_total",
                "Client requests served, by operation and result",
            ),
            &["op", "result"],
        )
        .unwrap();
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "levee_request_duration_seconds",
                "Request latency seen by the node",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
            &["op"],
        )
        .unwrap();
        let read_repairs = IntCounterVec::new(
            Opts::new(
                "levee_read_repairs_total",
                "Replicas a coordinated read found missing or stale and repaired, by reason",
            ),
            &["reason"],
        )
        .unwrap();
        for reason in ["missing", "stale"] {
            read_repairs.with_label_values(&[reason]);
        }
        registry.register(Box::new(read_repairs.clone())).unwrap();
        let hints = IntCounter::new(
            "levee_hints_written_total",
            "Hints of writes this node's coordinator stored on another node for an unreachable primary",
        )
        .unwrap();
        let handoff_objects = IntCounter::new(
            "levee_handoff_objects_total",
            "Objects this node sent to their partition's owner (hinted handoff) or next owner (ring transitions)",
        )
        .unwrap();
        let transitions_completed = IntCounter::new(
            "levee_ring_transitions_completed_total",
            "Ring transitions this node completed: every moving partition was sent, the new claim routes",
        )
        .unwrap();
        registry
            .register(Box::new(transitions_completed.clone()))
            .unwrap();
        let transition_forwards_failed = IntCounter::new(
            "levee_transition_forwards_failed_total",
            "Writes to a moving vnode whose forward to the next owner failed (sent again by a catch-up fold)",
        )
        .unwrap();
        registry
            .register(Box::new(transition_forwards_failed.clone()))
            .unwrap();
        let transition_partitions_to_send = IntGauge::new(
            "levee_transition_partitions_to_send",
            "Partitions this node still has to send to their next owners in the ring transition under way (0: none runs)",
        )
        .unwrap();
        registry
            .register(Box::new(transition_partitions_to_send.clone()))
            .unwrap();
        let transition_settle_awaiting = IntGauge::new(
            "levee_transition_settle_awaiting_members",
            "Members this node's last switch still waits to hear routing by its target; while above 0 it keeps what it streamed away and forwards writes back (0: settled)",
        )
        .unwrap();
        registry
            .register(Box::new(transition_settle_awaiting.clone()))
            .unwrap();
        let transition_bytes_sent = IntGauge::new(
            "levee_transition_bytes_sent",
            "Bytes this node streamed to next owners in the ring transition to its newest member list",
        )
        .unwrap();
        registry
            .register(Box::new(transition_bytes_sent.clone()))
            .unwrap();
        let rebuild_partitions_pending = IntGauge::new(
            "levee_rebuild_partitions_pending",
            "Vnodes rebuilding from the other replicas after this member lost its data (they answer no reads meanwhile)",
        )
        .unwrap();
        let rebuild_objects = IntCounter::new(
            "levee_rebuild_objects_total",
            "Objects pulled from other replicas to rebuild this member's vnodes",
        )
        .unwrap();
        let rebuild_bytes = IntCounter::new(
            "levee_rebuild_bytes_total",
            "Bytes of objects pulled from other replicas to rebuild this member's vnodes",
        )
        .unwrap();
        for c in [rebuild_objects.clone(), rebuild_bytes.clone()] {
            registry.register(Box::new(c)).unwrap();
        }
        registry
            .register(Box::new(rebuild_partitions_pending.clone()))
            .unwrap();
        registry.register(Box::new(hints.clone())).unwrap();
        let reaped = IntCounter::new(
            "levee_tombstones_reaped_total",
            "Replicas of deleted keys this node's coordinator reaped (every primary held the same tombstones for delete_delay_secs)",
        )
        .unwrap();
        registry.register(Box::new(reaped.clone())).unwrap();
        let handoff_bytes = IntCounter::new(
            "levee_handoff_bytes_total",
            "Bytes of objects this node sent to their partition's owner (hinted handoff) or next owner (ring transitions)",
        )
        .unwrap();
        registry.register(Box::new(handoff_bytes.clone())).unwrap();
        let aae_exchanges = IntCounterVec::new(
            Opts::new(
                "levee_aae_exchanges_total",
                "AAE exchanges this node led between the replicas of a preflist, by result",
            ),
            &["result"],
        )
        .unwrap();
        for r in EXCHANGE_RESULTS {
            aae_exchanges.with_label_values(&[r]);
        }
        registry.register(Box::new(aae_exchanges.clone())).unwrap();
        let aae_repairs = IntCounter::new(
            "levee_aae_repairs_total",
            "Keys AAE exchanges found different between replicas and repaired",
        )
        .unwrap();
        registry.register(Box::new(aae_repairs.clone())).unwrap();
        let coverage_fetched = IntCounterVec::new(
            Opts::new(
                "levee_coverage_entries_fetched_total",
                "Entries coverage queries this node ran received from vnodes, by operation",
            ),
            &["op"],
        )
        .unwrap();
        for op in COVERAGE_OPS {
            coverage_fetched.with_label_values(&[op]);
        }
        registry
            .register(Box::new(coverage_fetched.clone()))
            .unwrap();
        let coverage_page_retries = IntCounterVec::new(
            Opts::new(
                "levee_coverage_page_retries_total",
                "Pages of coverage queries this node ran that a vnode refused for overload and that were asked again, by operation",
            ),
            &["op"],
        )
        .unwrap();
        for op in COVERAGE_OPS {
            coverage_page_retries.with_label_values(&[op]);
        }
        registry
            .register(Box::new(coverage_page_retries.clone()))
            .unwrap();
        let query_snapshots_held = IntGauge::new(
            "levee_query_snapshots_held",
            "Vnode snapshots this member holds for coverage queries between their pages",
        )
        .unwrap();
        registry
            .register(Box::new(query_snapshots_held.clone()))
            .unwrap();
        let members_down = IntGauge::new(
            "levee_members_down",
            "Other members this node has marked down: calls to them failed, or they said they were shutting down",
        )
        .unwrap();
        registry.register(Box::new(members_down.clone())).unwrap();
        let replica_reads = IntCounterVec::new(
            Opts::new(
                "levee_replica_reads_total",
                "Reads (HEAD, GET) of this node's replicas by where they ran: reactor (from memory, on the async runtime) or pool (on the blocking pool)",
            ),
            &["path"],
        )
        .unwrap();
        for p in crate::replica::READ_PATHS {
            replica_reads.with_label_values(&[p]);
        }
        registry.register(Box::new(replica_reads.clone())).unwrap();
        let vnode_gauge = IntGaugeVec::new(
            Opts::new(
                "levee_vnodes",
                "Vnodes hosted, by state: active (owned), handoff (not owned, holding objects for the owner), idle (not owned, empty)",
            ),
            &["state"],
        )
        .unwrap();
        {
            let view = vnodes.membership.view();
            let owned = (0..vnodes.stores.len() as u32)
                .filter(|&p| view.claim.owner(p) == self_name)
                .count();
            let holding = (0..vnodes.stores.len())
                .filter(|&p| {
                    view.claim.owner(p as u32) != self_name && vnodes.stores[p].stats().last_sqn > 0
                })
                .count();
            let idle = vnodes.stores.len() - owned - holding;
            for (state, n) in VNODE_STATES.iter().zip([owned, holding, idle]) {
                vnode_gauge.with_label_values(&[state]).set(n as i64);
            }
        }
        registry.register(Box::new(vnode_gauge.clone())).unwrap();
        let tls_expiry = Arc::new(parking_lot::RwLock::new(None));
        registry
            .register(Box::new(handoff_objects.clone()))
            .unwrap();
        registry.register(Box::new(requests.clone())).unwrap();
        registry.register(Box::new(duration.clone())).unwrap();
        // Pre-create the label sets so every op appears from the first scrape.
        for op in ["get", "head", "put", "delete", "index_query", "list_keys"] {
            duration.with_label_values(&[op]);
            requests.with_label_values(&[op, "ok"]);
        }
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .unwrap();
        let device = DiskDevice::for_path(&vnodes.data_dir);
        registry
            .register(Box::new(EngineCollector {
                vnodes,
                device,
                tls_expiry: tls_expiry.clone(),
            }))
            .unwrap();
        Metrics {
            registry,
            requests,
            duration,
            read_repairs,
            hints,
            handoff_objects,
            transitions_completed,
            transition_forwards_failed,
            transition_partitions_to_send,
            transition_bytes_sent,
            transition_settle_awaiting,
            rebuild_partitions_pending,
            rebuild_objects,
            rebuild_bytes,
            reaped,
            handoff_bytes,
            aae_exchanges,
            aae_repairs,
            coverage_fetched,
            coverage_page_retries,
            query_snapshots_held,
            members_down,
            replica_reads,
            vnodes: vnode_gauge,
            tls_expiry,
        }
    }

    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        use prometheus::Encoder;
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .unwrap();
        String::from_utf8(buf).unwrap()
    }
}

/// The block device holding the data directory, found in /proc/diskstats by major:minor.
struct DiskDevice {
    major: u64,
    minor: u64,
}

impl DiskDevice {
    fn for_path(p: &Path) -> Option<DiskDevice> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(p).ok()?.dev();
        let (major, minor) = (libc::major(dev) as u64, libc::minor(dev) as u64);
        let d = DiskDevice { major, minor };
        if d.read().is_none() {
            log::warn!("data dir {} is on device {major}:{minor}, which /proc/diskstats does not list; disk busyness reads 0", p.display());
        }
        Some(d)
    }

    /// (io_ticks, weighted io_ticks) in seconds.
    fn read(&self) -> Option<(f64, f64)> {
        let text = std::fs::read_to_string("/proc/diskstats").ok()?;
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 14
                && f[0].parse::<u64>().ok()? == self.major
                && f[1].parse::<u64>().ok()? == self.minor
            {
                Some((
                    f[12].parse::<f64>().ok()? / 1000.0,
                    f[13].parse::<f64>().ok()? / 1000.0,
                ))
            } else {
                None
            }
        })
    }
}

/// Engine statistics summed over the vnodes, collected at scrape time.
struct EngineCollector {
    vnodes: Arc<Vnodes>,
    device: Option<DiskDevice>,
    tls_expiry: Arc<parking_lot::RwLock<Option<f64>>>,
}

/// (size, available to unprivileged users) in bytes of the filesystem holding `p`.
fn filesystem_bytes(p: &Path) -> Option<(f64, f64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frag = st.f_frsize as f64;
    Some((st.f_blocks as f64 * frag, st.f_bavail as f64 * frag))
}

fn family(
    name: &str,
    help: &str,
    kind: MetricType,
    samples: Vec<(Vec<(&str, &str)>, f64)>,
) -> MetricFamily {
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(help.to_string());
    mf.set_field_type(kind);
    for (labels, v) in samples {
        let mut m = Metric::default();
        let pairs: Vec<LabelPair> = labels
            .into_iter()
            .map(|(k, val)| {
                let mut lp = LabelPair::default();
                lp.set_name(k.to_string());
                lp.set_value(val.to_string());
                lp
            })
            .collect();
        m.set_label(pairs.into());
        if kind == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(v);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(v);
            m.set_gauge(g);
        }
        mf.mut_metric().push(m);
    }
    mf
}

impl Collector for EngineCollector {
    fn desc(&self) -> Vec<&Desc> {
        Vec::new()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let stats: Vec<levee_store::Stats> = self.vnodes.stores.iter().map(|s| s.stats()).collect();
        let sum = |f: &dyn Fn(&levee_store::Stats) -> f64| stats.iter().map(f).sum::<f64>();
        let max = |f: &dyn Fn(&levee_store::Stats) -> f64| stats.iter().map(f).fold(0.0, f64::max);
        use MetricType::{COUNTER, GAUGE};
        let one = |v: f64| vec![(vec![], v)];
        let view = self.vnodes.membership.view();
        let (fs_size, fs_avail) = filesystem_bytes(&self.vnodes.data_dir).unwrap_or((0.0, 0.0));
        let (io, weighted) = self
            .device
            .as_ref()
            .and_then(|d| d.read())
            .unwrap_or((0.0, 0.0));
        let mut families = vec![
            family(
                "levee_user_bytes_written_total",
                "Bytes of keys, values and metadata accepted from clients",
                COUNTER,
                one(sum(&|s| s.user_bytes_written as f64)),
            ),
            family(
                "levee_journal_bytes_written_total",
                "Bytes appended to journal segments",
                COUNTER,
                one(sum(&|s| s.journal_bytes_written as f64)),
            ),
            family(
                "levee_ledger_bytes_written_total",
                "Bytes written to ledger SSTs",
                COUNTER,
                one(sum(&|s| s.ledger_bytes_written as f64)),
            ),
            family(
                "levee_journal_disk_bytes",
                "Bytes of journal segments on disk",
                GAUGE,
                one(sum(&|s| s.journal_disk_bytes as f64)),
            ),
            family(
                "levee_ledger_disk_bytes",
                "Bytes of ledger SSTs on disk",
                GAUGE,
                one(sum(&|s| s.ledger_disk_bytes as f64)),
            ),
            family(
                "levee_journal_compaction_runs_total",
                "Journal compaction runs completed",
                COUNTER,
                one(sum(&|s| s.journal_compaction_runs as f64)),
            ),
            family(
                "levee_journal_compaction_reclaimed_bytes_total",
                "Journal bytes freed by compaction",
                COUNTER,
                one(sum(&|s| s.journal_compaction_reclaimed_bytes as f64)),
            ),
            family(
                "levee_journal_compaction_active",
                "1 while a journal compaction runs",
                GAUGE,
                one(max(&|s| s.journal_compaction_active as f64)),
            ),
            family(
                "levee_ledger_merge_backlog",
                "Ledger files over their level targets",
                GAUGE,
                one(sum(&|s| s.ledger_merge_backlog as f64)),
            ),
            family(
                "levee_write_stall_seconds_total",
                "Time writers waited for ledger merges",
                COUNTER,
                one(sum(&|s| s.write_stall_seconds)),
            ),
            family(
                "levee_journal_fsyncs_total",
                "Journal fdatasync calls (group commits, background syncs, rolled-out segments)",
                COUNTER,
                one(sum(&|s| s.journal_fsyncs as f64)),
            ),
            family(
                "levee_journal_fsync_seconds_total",
                "Time spent in journal fdatasync calls",
                COUNTER,
                one(sum(&|s| s.journal_fsync_seconds)),
            ),
            family(
                "levee_journal_spares_made_total",
                "Replaced journal segments kept as spares for later rolls to write over",
                COUNTER,
                one(sum(&|s| s.journal_spares_made as f64)),
            ),
            family(
                "levee_journal_spares_reused_total",
                "Journal segment rolls that wrote over a spare instead of a new file",
                COUNTER,
                one(sum(&|s| s.journal_spares_reused as f64)),
            ),
            family(
                "levee_journal_spares_ready",
                "Spare journal segments ready for the next rolls",
                GAUGE,
                one(sum(&|s| s.journal_spares_ready as f64)),
            ),
            family(
                "levee_journal_roll_seconds_total",
                "Time journal segment rolls held the write lock (every writer of the vnode waits behind one)",
                COUNTER,
                one(sum(&|s| s.journal_roll_seconds)),
            ),
            family(
                "levee_aae_rebuilds_total",
                "AAE tree rebuilds completed",
                COUNTER,
                one(sum(&|s| s.aae_rebuilds as f64)),
            ),
            family(
                "levee_aae_rebuild_duration_seconds",
                "Duration of the longest last AAE rebuild of a vnode",
                GAUGE,
                one(max(&|s| s.aae_rebuild_seconds)),
            ),
            family(
                "levee_members",
                "Members in the member list this node uses",
                GAUGE,
                one(view.list.members().len() as f64),
            ),
            family(
                "levee_member_list_version",
                "Version of the member list this node uses (0: provisional, alone)",
                GAUGE,
                one(view.list.version() as f64),
            ),
            family(
                "levee_ring_routing_list_version",
                "Version of the member list the routing claim was made for (below levee_member_list_version while a ring transition runs)",
                GAUGE,
                one(view.routing_list.version() as f64),
            ),
            family(
                "levee_data_filesystem_size_bytes",
                "Size of the filesystem holding the data directory",
                GAUGE,
                one(fs_size),
            ),
            family(
                "levee_data_filesystem_avail_bytes",
                "Bytes of that filesystem available to the node",
                GAUGE,
                one(fs_avail),
            ),
            family(
                "levee_disk_io_time_seconds_total",
                "Time the data directory's device was busy",
                COUNTER,
                one(io),
            ),
            family(
                "levee_disk_io_weighted_seconds_total",
                "Weighted busy time (queue depth x time) of that device",
                COUNTER,
                one(weighted),
            ),
        ];
        let mut fsync_counts = vec![0u64; levee_store::JOURNAL_FSYNC_BUCKETS.len() + 1];
        for s in &stats {
            for (c, n) in fsync_counts.iter_mut().zip(&s.journal_fsync_buckets) {
                *c += n;
            }
        }
        families.push(histogram_family(
            "levee_journal_fsync_duration_seconds",
            "Journal fdatasync calls by duration (a synced write waits for one or two)",
            &levee_store::JOURNAL_FSYNC_BUCKETS,
            &fsync_counts,
            sum(&|s| s.journal_fsync_seconds),
        ));
        if let Some(t) = *self.tls_expiry.read() {
            families.push(family(
                "levee_tls_cert_expiry_timestamp_seconds",
                "When the certificate the gRPC port serves expires (Unix time); present with TLS only",
                GAUGE,
                one(t),
            ));
        }
        families
    }
}

/// A histogram family of one unlabelled metric: `bounds` with the number of observations in each
/// bucket (not cumulative; one more entry than bounds, for those above the last), and the sum.
fn histogram_family(
    name: &str,
    help: &str,
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
) -> MetricFamily {
    let mut h = Histogram::default();
    let mut below = 0u64;
    for (&bound, &n) in bounds.iter().zip(counts) {
        below += n;
        let mut b = Bucket::default();
        b.set_upper_bound(bound);
        b.set_cumulative_count(below);
        h.mut_bucket().push(b);
    }
    h.set_sample_count(counts.iter().sum());
    h.set_sample_sum(sum);
    let mut m = Metric::default();
    m.set_histogram(h);
    let mut mf = MetricFamily::default();
    mf.set_name(name.to_string());
    mf.set_help(help.to_string());
    mf.set_field_type(MetricType::HISTOGRAM);
    mf.mut_metric().push(m);
    mf
}

/// Serve `/metrics`, `/healthz` and `/readyz`.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get({
                let m = metrics.clone();
                move || {
                    let m = m.clone();
                    async move {
                        let body = tokio::task::spawn_blocking(move || m.render())
                            .await
                            .unwrap_or_default();
                        ([("content-type", "text/plain; version=0.0.4")], body)
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Acquire) {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
