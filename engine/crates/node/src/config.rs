//! Node configuration: the `levee.toml` file (the operator renders it into the cluster's ConfigMap;
//! see `operator/internal/controller/configmap.go`), overridden by flags and environment.
//!
//! ```toml
//! # top level: this node
//! node_name = "orders-0"          data_dir = "/var/lib/levee/data"
//! listen = "0.0.0.0:8087"         metrics_listen = "0.0.0.0:8098"
//! max_value_bytes = 52428800      max_message_bytes = 67108864      shutdown_timeout_secs = 30
//! shutdown_delay_secs = 0         on SIGTERM: not ready, but still serving, this long first
//! [cluster]     name, ring_size, n_val (default 3 with a member list, 1 for a node alone),
//!               members_file
//!               delete_delay_secs (3600; 0: never): how long tombstones are kept
//! [cluster.dial] <member name> = "host:port": reach that member here instead of its listed
//!               address (a proxy or NAT in between; the fault tests put one on each link)
//! [bucket_types.<name>]  n_val, r, w, pr, pw, dw, notfound_ok, basic_quorum, conflict
//!               ("siblings" | "lww"): defaults of requests naming that type ("default" when they
//!               name none); n_val defaults to cluster.n_val and may not exceed it. The
//!               "default" type resolves conflicts by last write wins unless it says otherwise
//!               (as Riak's default bucket type: clients that never pass a context back do not
//!               pile up siblings); every other type keeps siblings unless it says "lww"
//! [engine]      sync_on_write (bool), journal_segment_bytes, aae_segments,
//!               compression_method ("none" | "lz4" | "zstd"; default "none"),
//!               compression_point ("on_receipt" | "on_compact"; default "on_receipt"),
//!               journal_spare_segments (0–16; default 0 on a node: each vnode's spare holds a
//!               segment of disk)
//! [compaction]  window_start_hour, window_end_hour, runs_per_day, time_zone, single_file_percent,
//!               max_run_percent, max_run_length, scheduler ("external" | "node"),
//!               busy_percent (100: a run's share of the time; below 100 it waits between batches),
//!               nice (10: the compaction thread's nice value, 0–19; 0: the caller's priority)
//! [tls]         cert_file, key_file, ca_file (client CA: clients must present a certificate),
//!               reload_interval_secs
//! [membership]  members = ["host:port", ...]
//! [handoff]     max_bytes_per_sec (32 MiB/s), busy_percent (BUSY%): the pace of each
//!               hinted-handoff transfer and of each partition a ring transition streams — at most
//!               that many bytes per second, working at most that share of the time (`pacing.rs`)
//! [aae]         exchange_interval_secs (3600; 0: only when asked): how often this member compares
//!               the preflists it leads with their replicas and repairs what differs;
//!               rebuild_busy_percent (10): the share of the time a vnode's tree rebuild works
//! [limits]      vnode_concurrency (4), vnode_queue (64), default_deadline_ms (2000): overload
//!               protection, see `admission.rs` — each vnode runs at most vnode_concurrency engine
//!               calls at once and queues at most vnode_queue more; a request that cannot start
//!               before its deadline (the client's grpc-timeout, else default_deadline_ms) or finds
//!               the queue full fails at once with UNAVAILABLE and a `retry-after-ms` hint
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// Longest `shutdown_delay_secs` accepted: the pod's termination grace period must cover it and
/// the drain, and minutes of serving after SIGTERM would be a typo.
pub const MAX_SHUTDOWN_DELAY_SECS: u64 = 120;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// Name of this node in the membership list (defaults to $POD_NAME, then $HOSTNAME).
    pub node_name: String,
    pub data_dir: PathBuf,
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Metrics and health HTTP listen address.
    pub metrics_listen: SocketAddr,
    /// Largest value accepted (bytes).
    pub max_value_bytes: usize,
    /// Largest gRPC message accepted (bytes).
    pub max_message_bytes: usize,
    /// Seconds to drain in-flight requests on SIGTERM before closing stores.
    pub shutdown_timeout_secs: u64,
    /// Seconds the node keeps accepting connections and serving on SIGTERM, already reporting
    /// not ready, before it stops accepting and drains: long enough for Service endpoints (and
    /// kube-proxy on every node) to drop it, so no new connection meets a closed port.
    pub shutdown_delay_secs: u64,
    pub cluster: ClusterSection,
    pub engine: EngineSection,
    pub compaction: CompactionSection,
    pub tls: Option<TlsSection>,
    pub membership: MembershipSection,
    pub limits: LimitsSection,
    pub handoff: HandoffSection,
    pub aae: AaeSection,
    /// Request defaults per bucket type, as written (see [`NodeConfig::bucket_types`]).
    pub bucket_types: std::collections::BTreeMap<String, toml::Table>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    pub name: String,
    /// Partitions in the ring (power of two).
    pub ring_size: u32,
    /// Replicas per key: the claim keeps every `n_val` consecutive partitions on distinct
    /// members. Unset: 3 when the node has a member list (members_file or [membership]), 1 for
    /// a node alone. Use [`NodeConfig::n_val`].
    pub n_val: Option<u32>,
    /// The member list: JSON `{"version", "members": [{"name", "address", "zone"}]}` (see
    /// docs/cluster.md), or one `host:port` / `name=host:port` per line (version 1). Re-read every
    /// second; see `membership.rs` for what a change does.
    pub members_file: Option<PathBuf>,
    /// Member name → the address this node dials it at, instead of the listed one.
    pub dial: std::collections::BTreeMap<String, String>,
    /// How long a deleted key's tombstones are kept before a read may reap them (cluster.md §6,
    /// "Tombstone reaping"); 0 never reaps.
    pub delete_delay_secs: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    /// fdatasync before acknowledging a write (group commit).
    pub sync_on_write: bool,
    pub journal_segment_bytes: u64,
    /// AAE tree segments per vnode (0 disables the tree).
    pub aae_segments: u32,
    /// How values are compressed in the journal: "none", "lz4" or "zstd".
    pub compression_method: String,
    /// When: "on_receipt" (as writes arrive) or "on_compact" (when journal compaction rewrites).
    pub compression_point: String,
    /// Segment files journal compaction replaced that each vnode keeps for its next rolls to
    /// write over (docs/engine.md, "Reused segments"). 0 on a node unless set: every vnode
    /// would hold its spares' disk space (64 partitions × 256 MiB each).
    pub journal_spare_segments: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionSection {
    pub window_start_hour: u32,
    pub window_end_hour: u32,
    pub runs_per_day: u32,
    /// Time zone of the window; the operator's CronJobs apply it. The node's own scheduler is UTC.
    pub time_zone: String,
    pub single_file_percent: u32,
    pub max_run_percent: u32,
    pub max_run_length: u32,
    /// "external" (default: the operator's CronJobs call `levee admin compact-journal`) or "node"
    /// (each store schedules `runs_per_day` runs inside the window itself, in UTC).
    pub scheduler: String,
    /// Percent of the time a compaction run works (1–100; 100: unpaced); the store's
    /// `compaction_busy_percent`.
    pub busy_percent: u32,
    /// Nice value of the thread a compaction runs on (0–19; default 10; 0: the priority of the
    /// thread that asked); the store's `compaction_nice`.
    pub nice: i32,
}

/// TLS on the gRPC port (see `tls.rs`). The operator mounts its cert-manager Secret at
/// `/etc/levee/tls` and renders `tls.crt`, `tls.key` and `ca.crt` here.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSection {
    /// Certificate chain (PEM), leaf first.
    pub cert_file: Option<PathBuf>,
    /// Private key of the certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) of the clients: when set, every client must present a certificate
    /// signed by one of them.
    pub ca_file: Option<PathBuf>,
    /// How often the files are re-read (cert-manager renews them in place); 0 never re-reads.
    pub reload_interval_secs: u64,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            cert_file: None,
            key_file: None,
            ca_file: None,
            reload_interval_secs: 60,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MembershipSection {
    /// Member addresses (`host:port`, or `name=host:port`).
    pub members: Vec<String>,
}

/// The default `[handoff] busy_percent` (measured: docs/cluster.md §7, "Cost").
pub const DEFAULT_BUSY_PERCENT: u32 = 10;

/// Hinted handoff and ring-transition streams (see `handoff.rs`, `transition.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HandoffSection {
    /// Bytes per second one transfer sends to a returning owner, or one partition to its next
    /// owner in a ring transition (0: no byte limit).
    pub max_bytes_per_sec: u64,
    /// Percent of wall time such a stream may spend on its batches (1-100; 100: no limit): the
    /// bound on what it takes from requests whatever a byte costs on this machine.
    pub busy_percent: u32,
}

impl Default for HandoffSection {
    fn default() -> Self {
        HandoffSection {
            max_bytes_per_sec: 32 << 20,
            busy_percent: DEFAULT_BUSY_PERCENT,
        }
    }
}

/// AAE exchanges between replicas (see `aae_exchange.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AaeSection {
    /// Seconds between the starts of this member's exchange rounds (each round compares every
    /// preflist this member leads with its replicas, one at a time); 0: only when asked.
    pub exchange_interval_secs: u64,
    /// Percent of the time a vnode's AAE tree rebuild works (1–100; 100: unpaced); the store's
    /// `aae_rebuild_busy_percent`.
    pub rebuild_busy_percent: u32,
}

impl Default for AaeSection {
    fn default() -> Self {
        AaeSection {
            exchange_interval_secs: 3600,
            rebuild_busy_percent: levee_store::Config::default().aae_rebuild_busy_percent,
        }
    }
}

/// Overload protection (see `admission.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// Engine calls (and stream pages) running at once on one vnode.
    pub vnode_concurrency: u32,
    /// Requests waiting for a slot on one vnode; more are refused at once (UNAVAILABLE).
    pub vnode_queue: u32,
    /// Longest a request without a client deadline (`grpc-timeout`) may wait to start.
    pub default_deadline_ms: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            vnode_concurrency: 4,
            vnode_queue: 64,
            default_deadline_ms: 2000,
        }
    }
}

impl LimitsSection {
    pub fn admission(&self) -> crate::admission::Limits {
        crate::admission::Limits {
            concurrency: self.vnode_concurrency,
            queue: self.vnode_queue,
        }
    }

    pub fn default_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.default_deadline_ms)
    }
}

impl Default for ClusterSection {
    fn default() -> Self {
        ClusterSection {
            name: "levee".into(),
            ring_size: 64,
            n_val: None,
            members_file: None,
            dial: Default::default(),
            delete_delay_secs: 3600,
        }
    }
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            sync_on_write: false,
            journal_segment_bytes: 256 << 20,
            aae_segments: levee_store::Config::default().aae_segments,
            compression_method: "none".into(),
            compression_point: "on_receipt".into(),
            journal_spare_segments: 0,
        }
    }
}

impl Default for CompactionSection {
    fn default() -> Self {
        let t = levee_store::CompactionThresholds::default();
        CompactionSection {
            window_start_hour: 0,
            window_end_hour: 6,
            runs_per_day: 4,
            time_zone: "UTC".into(),
            single_file_percent: t.single_file as u32,
            max_run_percent: t.run as u32,
            max_run_length: t.max_run as u32,
            scheduler: "external".into(),
            busy_percent: levee_store::Config::default().compaction_busy_percent,
            nice: levee_store::DEFAULT_COMPACTION_NICE,
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            node_name: std::env::var("POD_NAME")
                .or_else(|_| std::env::var("HOSTNAME"))
                .unwrap_or_else(|_| "levee-0".into()),
            data_dir: PathBuf::from("/var/lib/levee/data"),
            listen: "0.0.0.0:8087".parse().unwrap(),
            metrics_listen: "0.0.0.0:8098".parse().unwrap(),
            max_value_bytes: 50 << 20,
            max_message_bytes: 64 << 20,
            shutdown_timeout_secs: 30,
            shutdown_delay_secs: 0,
            cluster: ClusterSection::default(),
            engine: EngineSection::default(),
            compaction: CompactionSection::default(),
            tls: None,
            membership: MembershipSection::default(),
            limits: LimitsSection::default(),
            handoff: HandoffSection::default(),
            aae: AaeSection::default(),
            bucket_types: Default::default(),
        }
    }
}

impl NodeConfig {
    pub fn load(path: Option<&std::path::Path>) -> Result<NodeConfig> {
        match path {
            None => Ok(NodeConfig::default()),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("parsing config file {}", p.display()))
            }
        }
    }

    pub fn validate(&self) -> Result<()> {
        let ring = self.cluster.ring_size;
        if ring == 0 || !ring.is_power_of_two() || ring > 4096 {
            bail!("cluster.ring_size must be a power of two between 1 and 4096, got {ring}");
        }
        let n_val = self.n_val();
        if n_val == 0 || n_val > levee_cluster::ring::MAX_N_VAL {
            bail!(
                "cluster.n_val must be between 1 and {}, got {n_val}",
                levee_cluster::ring::MAX_N_VAL
            );
        }
        self.bucket_types()?;
        if self.shutdown_delay_secs > MAX_SHUTDOWN_DELAY_SECS {
            bail!(
                "shutdown_delay_secs must be at most {MAX_SHUTDOWN_DELAY_SECS}, got {}",
                self.shutdown_delay_secs
            );
        }
        if self.max_message_bytes < self.max_value_bytes {
            bail!(
                "max_message_bytes ({}) must be at least max_value_bytes ({})",
                self.max_message_bytes,
                self.max_value_bytes
            );
        }
        if !["external", "node"].contains(&self.compaction.scheduler.as_str()) {
            bail!(
                "compaction.scheduler must be \"external\" or \"node\", not {:?}",
                self.compaction.scheduler
            );
        }
        if self.compaction.scheduler == "node"
            && !matches!(self.compaction.time_zone.as_str(), "" | "UTC" | "Etc/UTC")
        {
            bail!("compaction.scheduler = \"node\" runs in UTC; set time_zone = \"UTC\" or let the operator schedule");
        }
        let l = &self.limits;
        if l.vnode_concurrency == 0 || l.vnode_concurrency > 1024 {
            bail!(
                "limits.vnode_concurrency must be between 1 and 1024, got {}",
                l.vnode_concurrency
            );
        }
        if l.vnode_queue > 1_000_000 {
            bail!(
                "limits.vnode_queue must be at most 1000000, got {}",
                l.vnode_queue
            );
        }
        if l.default_deadline_ms == 0 || l.default_deadline_ms > 3_600_000 {
            bail!(
                "limits.default_deadline_ms must be between 1 and 3600000, got {}",
                l.default_deadline_ms
            );
        }
        if !(1..=100).contains(&self.compaction.busy_percent) {
            bail!(
                "compaction.busy_percent must be between 1 and 100 (100: unpaced), got {}",
                self.compaction.busy_percent
            );
        }
        if !(0..=19).contains(&self.compaction.nice) {
            bail!(
                "compaction.nice must be between 0 and 19 (0: the priority of the thread that \
                 asks), got {}",
                self.compaction.nice
            );
        }
        if !(1..=100).contains(&self.aae.rebuild_busy_percent) {
            bail!(
                "aae.rebuild_busy_percent must be between 1 and 100 (100: unpaced), got {}",
                self.aae.rebuild_busy_percent
            );
        }
        if !(1..=100).contains(&self.handoff.busy_percent) {
            bail!(
                "handoff.busy_percent must be between 1 and 100 (100: no limit), got {}",
                self.handoff.busy_percent
            );
        }
        if let Some(files) = self.tls_files()? {
            crate::tls::load_server_config(&files)?;
        }
        self.store_config()?;
        Ok(())
    }

    /// Replicas per key (see [`ClusterSection::n_val`]).
    pub fn n_val(&self) -> u32 {
        self.cluster.n_val.unwrap_or(
            if self.cluster.members_file.is_some() || !self.membership.members.is_empty() {
                3
            } else {
                1
            },
        )
    }

    /// Every bucket type's request defaults, "default" always among them. A type's `n_val`
    /// defaults to the cluster's and may not exceed it (the claim only keeps `cluster.n_val`
    /// consecutive partitions on distinct members).
    pub fn bucket_types(
        &self,
    ) -> Result<std::collections::BTreeMap<String, levee_cluster::BucketTypeProps>> {
        let n_val = self.n_val();
        let mut out = std::collections::BTreeMap::new();
        let mut raw = self.bucket_types.clone();
        raw.entry("default".to_string()).or_default();
        for (name, table) in raw {
            let mut table = table;
            table
                .entry("n_val")
                .or_insert(toml::Value::Integer(n_val.into()));
            if name == "default" {
                table
                    .entry("conflict")
                    .or_insert(toml::Value::String("lww".into()));
            }
            let props: levee_cluster::BucketTypeProps = toml::Value::Table(table)
                .try_into()
                .with_context(|| format!("[bucket_types.{name}]"))?;
            props
                .validate()
                .with_context(|| format!("[bucket_types.{name}]"))?;
            if props.n_val > n_val {
                bail!(
                    "[bucket_types.{name}] n_val {} is more than cluster.n_val {n_val}: the ring keeps only {n_val} consecutive partitions on distinct members",
                    props.n_val
                );
            }
            out.insert(name, props);
        }
        Ok(out)
    }

    /// The TLS files of the gRPC port, `None` for plaintext. A `[tls]` section that names no
    /// certificate is an error rather than a silent fallback to plaintext.
    pub fn tls_files(&self) -> Result<Option<crate::tls::TlsFiles>> {
        let Some(t) = &self.tls else { return Ok(None) };
        match crate::tls::TlsFiles::from_parts(
            t.cert_file.as_deref(),
            t.key_file.as_deref(),
            t.ca_file.as_deref(),
        )? {
            Some(files) => Ok(Some(files)),
            None => bail!("[tls] is present but sets neither cert_file nor key_file; remove the section to serve plaintext"),
        }
    }

    /// Engine settings for one vnode.
    pub fn store_config(&self) -> Result<levee_store::Config> {
        let c = &self.compaction;
        let cfg = levee_store::Config {
            sync_on_write: if self.engine.sync_on_write {
                levee_store::SyncMode::Sync
            } else {
                levee_store::SyncMode::None
            },
            journal_segment_bytes: self.engine.journal_segment_bytes,
            journal_spare_segments: self.engine.journal_spare_segments,
            aae_segments: self.engine.aae_segments,
            aae_rebuild_busy_percent: self.aae.rebuild_busy_percent,
            aae_branch_width: if self.engine.aae_segments.is_multiple_of(256) {
                256
            } else {
                1
            },
            // A vnode stores replica objects: every sibling's value and metadata, which the
            // coordinator bounds one by one (max_value_bytes); the object as a whole must fit a
            // message between members.
            max_value_bytes: self.max_message_bytes,
            compaction: levee_store::CompactionThresholds {
                single_file: c.single_file_percent as f64,
                run: c.max_run_percent as f64,
                max_run: c.max_run_length as usize,
            },
            compaction_window: (c.window_start_hour, c.window_end_hour),
            compaction_busy_percent: c.busy_percent,
            compaction_nice: c.nice,
            compaction_runs_per_day: if c.scheduler == "node" {
                c.runs_per_day
            } else {
                0
            },
            compression_method: self
                .engine
                .compression_method
                .parse()
                .map_err(|e| anyhow::anyhow!("[engine] {e}"))?,
            compression_point: self
                .engine
                .compression_point
                .parse()
                .map_err(|e| anyhow::anyhow!("[engine] {e}"))?,
            ..levee_store::Config::default()
        };
        // Let the engine check ranges now, with its own messages.
        cfg.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact layout the operator renders (operator/internal/controller/configmap.go).
    const OPERATOR_TOML: &str = r#"
# Generated by the levee operator from KVCluster default/orders; edits are overwritten.
[cluster]
name = "orders"
ring_size = 64
n_val = 3
members_file = "/etc/levee/members.json"

[engine]
sync_on_write = true
journal_segment_bytes = 268435456
compression_method = "lz4"
compression_point = "on_compact"

[compaction]
window_start_hour = 22
window_end_hour = 4
runs_per_day = 4
time_zone = "Europe/London"
single_file_percent = 25
max_run_percent = 75
max_run_length = 4

[membership]
members = [
  "orders-0.orders-headless.default.svc:8087",
  "orders-1.orders-headless.default.svc:8087",
]
"#;

    #[test]
    fn parses_the_operator_config_and_maps_it_to_the_engine() {
        let c: NodeConfig = toml::from_str(OPERATOR_TOML).unwrap();
        c.validate().unwrap();
        assert_eq!(c.cluster.ring_size, 64);
        let e = c.store_config().unwrap();
        assert_eq!(e.sync_on_write, levee_store::SyncMode::Sync);
        assert_eq!(e.compression_method, levee_store::Compression::Lz4);
        assert_eq!(
            e.compression_point,
            levee_store::CompressionPoint::OnCompact
        );
        assert_eq!(e.compaction.single_file, 25.0);
        assert_eq!(e.compaction.max_run, 4);
        assert_eq!(
            e.compaction_runs_per_day, 0,
            "the operator's CronJobs schedule compaction"
        );
        assert_eq!(c.membership.members.len(), 2);
    }

    #[test]
    fn bad_settings_are_refused_with_reasons() {
        let bad = |toml: &str| {
            NodeConfig::load_str(toml)
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string()
        };
        assert!(bad("[cluster]\nring_size = 100\n").contains("power of two"));
        assert!(bad("[compaction]\nscheduler = \"cron\"\n").contains("scheduler"));
        assert!(
            bad("[compaction]\nscheduler = \"node\"\ntime_zone = \"Asia/Tokyo\"\n").contains("UTC")
        );
        assert!(
            bad("[compaction]\nsingle_file_percent = 80\nmax_run_percent = 70\n")
                .contains("threshold")
        );
        assert!(bad("bogus = 1\n").contains("unknown field"));
        assert!(bad("[limits]\nvnode_concurrency = 0\n").contains("vnode_concurrency"));
        assert!(bad("[limits]\ndefault_deadline_ms = 0\n").contains("default_deadline_ms"));
        assert!(bad("[limits]\nqueue = 3\n").contains("unknown field"));
        assert!(bad("shutdown_delay_secs = 121\n")
            .contains("shutdown_delay_secs must be at most 120, got 121"));
        let ok = NodeConfig::load_str("shutdown_delay_secs = 120\n").unwrap();
        ok.validate().unwrap();
        assert_eq!(ok.shutdown_delay_secs, 120);
        assert_eq!(NodeConfig::default().shutdown_delay_secs, 0);
    }

    #[test]
    fn limits_have_defaults_and_can_be_set() {
        let c = NodeConfig::load_str(OPERATOR_TOML).unwrap();
        assert_eq!(
            (
                c.limits.vnode_concurrency,
                c.limits.vnode_queue,
                c.limits.default_deadline_ms
            ),
            (4, 64, 2000)
        );
        let c = NodeConfig::load_str(
            "[limits]\nvnode_concurrency = 1\nvnode_queue = 0\ndefault_deadline_ms = 250\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.limits.admission(),
            crate::admission::Limits {
                concurrency: 1,
                queue: 0
            }
        );
        assert_eq!(
            c.limits.default_deadline(),
            std::time::Duration::from_millis(250)
        );
    }

    /// The `[tls]` section the operator appends when `spec.tls.enabled` (configmap.go), with the
    /// cert-manager Secret mounted at /etc/levee/tls.
    const OPERATOR_TLS: &str = r#"
[tls]
cert_file = "/etc/levee/tls/tls.crt"
key_file = "/etc/levee/tls/tls.key"
ca_file = "/etc/levee/tls/ca.crt"
"#;

    #[test]
    fn parses_the_operator_tls_section_and_checks_its_files() {
        let c = NodeConfig::load_str(&format!("{OPERATOR_TOML}{OPERATOR_TLS}")).unwrap();
        let files = c.tls_files().unwrap().unwrap();
        assert_eq!(files.cert, PathBuf::from("/etc/levee/tls/tls.crt"));
        assert_eq!(files.key, PathBuf::from("/etc/levee/tls/tls.key"));
        assert_eq!(
            files.client_ca,
            Some(PathBuf::from("/etc/levee/tls/ca.crt"))
        );
        assert_eq!(c.tls.as_ref().unwrap().reload_interval_secs, 60);
        // Not mounted here: the node refuses to start and names the file.
        let e = c.validate().unwrap_err();
        assert!(
            matches!(
                e.downcast_ref::<crate::tls::TlsError>(),
                Some(crate::tls::TlsError::Unreadable { .. })
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("/etc/levee/tls/tls.crt"), "{e}");

        // With real files in place it validates.
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["orders".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        std::fs::write(dir.path().join("tls.crt"), leaf.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        let toml = OPERATOR_TLS.replace("/etc/levee/tls", dir.path().to_str().unwrap());
        NodeConfig::load_str(&format!("{OPERATOR_TOML}{toml}"))
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn incomplete_tls_sections_are_refused_with_reasons() {
        let bad = |toml: &str| {
            NodeConfig::load_str(toml)
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string()
        };
        let e = bad("[tls]\ncert_file = \"/c.crt\"\n");
        assert!(
            e.contains("/c.crt") && e.contains("without a private key"),
            "{e}"
        );
        let e = bad("[tls]\nkey_file = \"/k.key\"\n");
        assert!(
            e.contains("/k.key") && e.contains("without a certificate"),
            "{e}"
        );
        let e = bad("[tls]\nca_file = \"/ca.crt\"\n");
        assert!(
            e.contains("/ca.crt") && e.contains("no certificate and key"),
            "{e}"
        );
        let e = bad("[tls]\n");
        assert!(e.contains("neither cert_file nor key_file"), "{e}");
        let e = bad("[tls]\ncert_file = \"/nonexistent/c.crt\"\nkey_file = \"/k\"\n");
        assert!(e.contains("/nonexistent/c.crt"), "{e}");
        assert!(bad("[tls]\ncert = \"/c\"\n").contains("unknown field"));
    }

    #[test]
    fn the_busy_shares_are_percentages() {
        let load = |toml: &str| NodeConfig::load_str(toml).and_then(|c| c.validate().map(|_| c));
        let c = load("[aae]\nrebuild_busy_percent = 100\n").unwrap();
        assert_eq!(c.store_config().unwrap().aae_rebuild_busy_percent, 100);
        assert_eq!(
            load("")
                .unwrap()
                .store_config()
                .unwrap()
                .aae_rebuild_busy_percent,
            10
        );
        let c = load("[compaction]\nbusy_percent = 30\n").unwrap();
        assert_eq!(c.store_config().unwrap().compaction_busy_percent, 30);
        assert!(load("[compaction]\nbusy_percent = 101\n").is_err());
        let c = load("[compaction]\nnice = 0\n").unwrap();
        assert_eq!(c.store_config().unwrap().compaction_nice, 0);
        assert_eq!(
            load("").unwrap().store_config().unwrap().compaction_nice,
            levee_store::DEFAULT_COMPACTION_NICE
        );
        for bad in ["-1", "20"] {
            let e = load(&format!("[compaction]\nnice = {bad}\n")).unwrap_err();
            assert!(format!("{e:#}").contains("compaction.nice"), "{e:#}");
        }
        let e = load("[aae]\nrebuild_busy_percent = 0\n").unwrap_err();
        assert!(format!("{e:#}").contains("rebuild_busy_percent"), "{e:#}");
        let c = load("[handoff]\nbusy_percent = 40\n").unwrap();
        assert_eq!(c.handoff.busy_percent, 40);
        assert_eq!(c.handoff.max_bytes_per_sec, 32 << 20);
        assert_eq!(load("").unwrap().handoff.busy_percent, DEFAULT_BUSY_PERCENT);
        for bad in [0, 101] {
            let e = load(&format!("[handoff]\nbusy_percent = {bad}\n")).unwrap_err();
            assert!(e.to_string().contains("between 1 and 100"), "{bad}: {e}");
        }
    }

    #[test]
    fn compression_is_named_and_bad_names_say_what_is_accepted() {
        let load = |toml: &str| NodeConfig::load_str(toml).and_then(|c| c.validate().map(|_| c));
        let e = load("").unwrap().store_config().unwrap();
        assert_eq!(e.compression_method, levee_store::Compression::None);
        let c =
            load("[engine]\ncompression_method = \"zstd\"\ncompression_point = \"on_compact\"\n")
                .unwrap();
        let e = c.store_config().unwrap();
        assert_eq!(e.compression_method, levee_store::Compression::Zstd);
        assert_eq!(
            e.compression_point,
            levee_store::CompressionPoint::OnCompact
        );
        let e = load("[engine]\ncompression_method = \"gzip\"\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("[engine] invalid configuration: compression_method must be `none`, `lz4` or `zstd`, not `gzip`"),
            "{e:#}"
        );
        let e = load("[engine]\ncompression_point = \"later\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("compression_point"), "{e:#}");
    }

    /// A node keeps no spare segments unless told (each vnode's would hold a segment of disk);
    /// a count is passed to every vnode's store, and one out of the engine's range is refused
    /// with the engine's message.
    #[test]
    fn spare_segments_are_off_on_a_node_unless_set() {
        let load = |toml: &str| NodeConfig::load_str(toml).and_then(|c| c.store_config());
        assert_eq!(
            load("[engine]\nsync_on_write = true\n")
                .unwrap()
                .journal_spare_segments,
            0
        );
        assert_eq!(
            load("[engine]\njournal_spare_segments = 2\n")
                .unwrap()
                .journal_spare_segments,
            2
        );
        let e = load("[engine]\njournal_spare_segments = 17\n").unwrap_err();
        assert!(
            format!("{e:#}").contains("journal_spare_segments must be at most 16"),
            "{e:#}"
        );
    }

    impl NodeConfig {
        fn load_str(s: &str) -> Result<NodeConfig> {
            Ok(toml::from_str(s)?)
        }
    }
}
