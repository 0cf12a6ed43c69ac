//! The other members as this node's coordinator sees them: a `levee.v1.Node` client per member
//! (one HTTP/2 connection each, opened on first use, over mTLS when the node serves TLS) and
//! whether the member is up.
//!
//! "Down" is local knowledge, as in Riak: a member is marked down when a call to it fails to
//! connect or gets no answer in time, and up again when a probe (gRPC health, every
//! `PROBE_EVERY`) answers. Requests route a down primary's replica to a fallback
//! (`levee_cluster::targets`), so a dead pod costs one failed call, not one per request.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use levee_cluster::Member;
use levee_proto::v1 as pb;
use parking_lot::Mutex;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Status};

use crate::config::NodeConfig;
use crate::membership::Membership;

/// How often down members are probed.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

pub struct Peers {
    /// This node's name: its replicas are served in process, never through a client.
    pub self_name: String,
    /// Client TLS to the other members; `Err` says why there is none while the node serves
    /// TLS (a lone node needs none, so this fails only when a member is dialled).
    tls: Mutex<Result<Option<ClientTlsConfig>, String>>,
    /// The files the client TLS settings come from (member certificate, key, CA) and their
    /// modification times when read: renewed files (cert-manager) replace the settings and the
    /// connections made with the old ones.
    tls_files: Option<(Vec<PathBuf>, Vec<Option<SystemTime>>)>,
    dial: BTreeMap<String, String>,
    max_message: usize,
    /// Channel per dialled address.
    channels: Mutex<HashMap<String, Channel>>,
    /// Members marked down, since when.
    down: Mutex<BTreeMap<String, Instant>>,
    /// When a member was last marked down or seen up again (`None`: never since start).
    last_change: Mutex<Option<Instant>>,
    /// When this node started (it knows nothing of outages before).
    started: Instant,
    /// Set to the number of members marked down whenever it changes (`levee_members_down`).
    down_gauge: std::sync::OnceLock<prometheus::IntGauge>,
}

fn mtimes(paths: &[PathBuf]) -> Vec<Option<SystemTime>> {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// Client TLS to the members from [certificate, key, CA] files, each checked.
fn client_tls(paths: &[PathBuf]) -> anyhow::Result<ClientTlsConfig> {
    let (cert_path, key_path, ca_path) = (&paths[0], &paths[1], &paths[2]);
    let ca_pem = crate::tls::read_file("member CA", ca_path)?;
    crate::tls::parse_roots("member CA", ca_path, &ca_pem)?;
    let cert = crate::tls::read_file("member certificate", cert_path)?;
    let key = crate::tls::read_file("member key", key_path)?;
    crate::tls::certified_key(
        &tokio_rustls::rustls::crypto::ring::default_provider(),
        ("member certificate", cert_path, &cert),
        ("member key", key_path, &key),
    )?;
    Ok(ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .identity(Identity::from_pem(cert, key)))
}

/// Why a peer could not be reached (its call never got an answer from its node).
/// Whether a primary that answered a write with `s` did not take it and would get it back only
/// through read repair or AAE: its node could not be reached, or its vnode was too busy to queue
/// the write (`UNAVAILABLE` with a retry hint). The coordinator keeps a hint for it elsewhere,
/// which hinted handoff brings back once the primary takes writes again.
pub fn needs_hint(s: &Status) -> bool {
    is_unreachable(s)
        || (s.code() == Code::Unavailable && s.metadata().get("retry-after-ms").is_some())
}

pub fn is_unreachable(s: &Status) -> bool {
    match s.code() {
        // An overloaded vnode answers UNAVAILABLE with a retry hint: the node is up.
        Code::Unavailable => s.metadata().get("retry-after-ms").is_none(),
        Code::DeadlineExceeded | Code::Cancelled => true,
        Code::Unknown => s.message().contains("transport error"),
        _ => false,
    }
}

impl Peers {
    pub fn new(cfg: &NodeConfig) -> anyhow::Result<Peers> {
        let (tls, tls_files) = match (cfg.tls_files()?, &cfg.tls) {
            (Some(files), Some(t)) => match &t.ca_file {
                None => (
                    Err(
                        "[tls] serves TLS without ca_file: members reach each other over mutual \
                         TLS, so the node needs the CA that signs the members' certificates (ca_file)"
                            .to_string(),
                    ),
                    None,
                ),
                Some(ca) => {
                    let paths = vec![files.cert.clone(), files.key.clone(), ca.clone()];
                    let stamps = mtimes(&paths);
                    (Ok(Some(client_tls(&paths)?)), Some((paths, stamps)))
                }
            },
            _ => (Ok(None), None),
        };
        Ok(Peers {
            self_name: cfg.node_name.clone(),
            tls: Mutex::new(tls),
            tls_files,
            dial: cfg.cluster.dial.clone(),
            max_message: cfg.max_message_bytes,
            channels: Mutex::new(HashMap::new()),
            down: Mutex::new(BTreeMap::new()),
            last_change: Mutex::new(None),
            started: Instant::now(),
            down_gauge: std::sync::OnceLock::new(),
        })
    }

    /// The address this node dials `member` at.
    fn address_of<'a>(&'a self, member: &'a Member) -> &'a str {
        self.dial
            .get(&member.name)
            .map(String::as_str)
            .unwrap_or(&member.address)
    }

    fn channel(&self, member: &Member) -> Result<Channel, Status> {
        let addr = self.address_of(member).to_string();
        if let Some(c) = self.channels.lock().get(&addr) {
            return Ok(c.clone());
        }
        let tls = self.tls.lock().clone().map_err(|why| {
            Status::failed_precondition(format!("dialling member {}: {why}", member.name))
        })?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut ep = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| Status::internal(format!("member {} address {addr}: {e}", member.name)))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(16 << 20);
        if let Some(tls) = tls {
            let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
            ep = ep
                .tls_config(tls.clone().domain_name(host.trim_matches(['[', ']'])))
                .map_err(|e| Status::internal(format!("TLS to member {}: {e}", member.name)))?;
        }
        let c = ep.connect_lazy();
        self.channels.lock().insert(addr, c.clone());
        Ok(c)
    }

    /// A `Node` client for `member`.
    pub fn client(&self, member: &Member) -> Result<pb::node_client::NodeClient<Channel>, Status> {
        Ok(pb::node_client::NodeClient::new(self.channel(member)?)
            .max_decoding_message_size(self.max_message)
            .max_encoding_message_size(self.max_message))
    }

    /// Keep `gauge` at the number of members marked down.
    pub fn publish_down_to(&self, gauge: prometheus::IntGauge) {
        gauge.set(self.down.lock().len() as i64);
        let _ = self.down_gauge.set(gauge);
    }

    /// The members marked down changed (`down` is the map, still locked): record when, and
    /// publish how many.
    fn down_changed(&self, down: &BTreeMap<String, Instant>) {
        *self.last_change.lock() = Some(Instant::now());
        if let Some(g) = self.down_gauge.get() {
            g.set(down.len() as i64);
        }
    }

    /// The members marked down.
    pub fn down(&self) -> BTreeSet<String> {
        self.down.lock().keys().cloned().collect()
    }

    /// No member is down, none was for `d` (nor since this node started, if that is more
    /// recent): a node that was down may still hold hints for others.
    pub fn quiet_for(&self, d: Duration) -> bool {
        let since = self
            .last_change
            .lock()
            .unwrap_or(self.started)
            .max(self.started);
        self.down.lock().is_empty() && since.elapsed() >= d
    }

    /// A call to `name` got `status`: mark it down if the node itself was not reached.
    pub fn observe(&self, name: &str, status: &Status) {
        if is_unreachable(status) {
            self.mark_down(name, status.message());
        }
    }

    /// What `name` said of itself (`Node.Announce`): shutting down (down until a probe finds
    /// it serving), or serving after a start (up now).
    pub fn heard(&self, name: &str, leaving: bool) {
        if leaving {
            self.mark_down(name, "it is shutting down");
        } else if let Some(since) = self.unmark(name) {
            log::info!(
                "member {name} is up again (down for {:.1} s; it says it serves)",
                since.elapsed().as_secs_f64()
            );
        }
    }

    /// No longer down: since when it was, if it was.
    fn unmark(&self, name: &str) -> Option<Instant> {
        let mut down = self.down.lock();
        let since = down.remove(name)?;
        self.down_changed(&down);
        Some(since)
    }

    fn mark_down(&self, name: &str, why: &str) {
        if name == self.self_name {
            return;
        }
        let mut down = self.down.lock();
        if !down.contains_key(name) {
            log::warn!("member {name} marked down: {why}");
            down.insert(name.to_string(), Instant::now());
            self.down_changed(&down);
        }
    }

    /// Tell every other member of `view` what this node is doing (`Node.Announce`): shutting
    /// down (`leaving`) or serving after a start. At once, each within `timeout`; logs how many
    /// were told. A member not told learns it from the first call this node refuses, or from
    /// its next probe.
    pub async fn announce(
        &self,
        view: &crate::membership::ClusterView,
        leaving: bool,
        timeout: Duration,
    ) {
        let calls: Vec<_> = view
            .all_members()
            .filter(|m| m.name != self.self_name)
            .map(|m| {
                let (client, name) = (self.client(m), m.name.clone());
                let mut req = tonic::Request::new(pb::AnnounceRequest {
                    member: self.self_name.clone(),
                    leaving,
                });
                req.set_timeout(timeout);
                async move {
                    let told = match client {
                        Ok(mut c) => c.announce(req).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = &told {
                        log::debug!("announcing to member {name}: {}", e.message());
                    }
                    told.is_ok()
                }
            })
            .collect();
        if calls.is_empty() {
            return;
        }
        let asked = calls.len();
        let told = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count();
        if leaving {
            log::info!("shutting down: told {told} of {asked} members this node is leaving");
        } else {
            log::info!("told {told} of {asked} members this node serves");
        }
    }

    /// Renewed TLS files: new client settings, and the connections made with the old ones
    /// dropped (the next call reconnects presenting the new certificate).
    fn check_tls_files(&self, last: &mut Vec<Option<SystemTime>>) {
        let Some((paths, _)) = &self.tls_files else {
            return;
        };
        let now = mtimes(paths);
        if now == *last {
            return;
        }
        match client_tls(paths) {
            Ok(cfg) => {
                *self.tls.lock() = Ok(Some(cfg));
                self.channels.lock().clear();
                *last = now;
                log::info!(
                    "member TLS: renewed certificate files loaded for links to other members"
                );
            }
            // Half-written files (a renewal in progress): keep the old settings, retry next time.
            Err(e) => log::warn!("member TLS: renewed files not loaded yet: {e}"),
        }
    }

    /// Probe the down members until stopped: one that answers a health check is up again. Also
    /// picks up renewed TLS files.
    pub async fn probe(self: Arc<Self>, membership: Arc<Membership>) {
        let mut stamps = self
            .tls_files
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            self.check_tls_files(&mut stamps);
            let down = self.down();
            if down.is_empty() {
                continue;
            }
            let view = membership.view();
            for name in down {
                let Some(member) = view.member(&name) else {
                    // No longer a member: nothing routes to it.
                    self.unmark(&name);
                    continue;
                };
                let Ok(channel) = self.channel(member) else {
                    continue;
                };
                let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
                let mut req = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                });
                req.set_timeout(CONNECT_TIMEOUT);
                let serving = matches!(
                    health.check(req).await,
                    Ok(r) if r.get_ref().status
                        == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
                );
                if serving {
                    if let Some(since) = self.unmark(&name) {
                        log::info!(
                            "member {name} is up again (down for {:.1} s)",
                            since.elapsed().as_secs_f64()
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_that_did_not_take_a_write_gets_a_hint() {
        let busy = || {
            let mut s = Status::unavailable("vnode p3 is overloaded");
            s.metadata_mut()
                .insert("retry-after-ms", "40".parse().unwrap());
            s
        };
        // (status, hint kept)
        let cases = [
            (Status::unavailable("connection refused"), true),
            (busy(), true),
            (Status::deadline_exceeded("timed out"), true),
            (Status::cancelled("cancelled"), true),
            (Status::unknown("transport error"), true),
            (Status::invalid_argument("bad key"), false),
            (Status::failed_precondition("p3 is rebuilding"), false),
            (Status::internal("bug"), false),
        ];
        for (s, want) in cases {
            assert_eq!(needs_hint(&s), want, "{s:?}");
        }
        // Only the unreachable ones mark the node down.
        assert!(!is_unreachable(&busy()));
    }
}
