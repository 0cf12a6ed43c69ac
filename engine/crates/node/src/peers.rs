//! The other members as this node's coordinator sees them: a `levee.v1.Node` client per member
//! (one HTTP/2 connection each, opened on first use, over mTLS when the node serves TLS) and
//! whether the member is up.
//!
//! "Down" is local knowledge, as in Riak: a member is marked down when a call to it fails to
//! connect or gets no answer in time, and up again when a probe (gRPC health, every
//! `PROBE_EVERY`) answers. Requests route a down primary's replica to a fallback
//! (`levee_cluster::targets`), so a dead pod costs one failed call, not one per request.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    tls: Result<Option<ClientTlsConfig>, String>,
    dial: BTreeMap<String, String>,
    max_message: usize,
    /// Channel per dialled address.
    channels: Mutex<HashMap<String, Channel>>,
    /// Members marked down, since when.
    down: Mutex<BTreeMap<String, Instant>>,
}

/// Why a peer could not be reached (its call never got an answer from its node).
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
        let tls = match (cfg.tls_files()?, &cfg.tls) {
            (Some(files), Some(t)) => {
                match &t.ca_file {
                    None => Err(
                        "[tls] serves TLS without ca_file: members reach each other over mutual \
                         TLS, so the node needs the CA that signs the members' certificates (ca_file)"
                            .to_string(),
                    ),
                    Some(ca) => {
                        let ca_pem = crate::tls::read_file("member CA", ca)?;
                        let cert = crate::tls::read_file("member certificate", &files.cert)?;
                        let key = crate::tls::read_file("member key", &files.key)?;
                        Ok(Some(
                            ClientTlsConfig::new()
                                .ca_certificate(Certificate::from_pem(ca_pem))
                                .identity(Identity::from_pem(cert, key)),
                        ))
                    }
                }
            }
            _ => Ok(None),
        };
        Ok(Peers {
            self_name: cfg.node_name.clone(),
            tls,
            dial: cfg.cluster.dial.clone(),
            max_message: cfg.max_message_bytes,
            channels: Mutex::new(HashMap::new()),
            down: Mutex::new(BTreeMap::new()),
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
        let tls = self.tls.as_ref().map_err(|why| {
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

    /// The members marked down.
    pub fn down(&self) -> BTreeSet<String> {
        self.down.lock().keys().cloned().collect()
    }

    /// A call to `name` got `status`: mark it down if the node itself was not reached.
    pub fn observe(&self, name: &str, status: &Status) {
        if name != self.self_name && is_unreachable(status) {
            let mut down = self.down.lock();
            if !down.contains_key(name) {
                log::warn!("member {name} marked down: {}", status.message());
                down.insert(name.to_string(), Instant::now());
            }
        }
    }

    /// Probe the down members until stopped: one that answers a health check is up again.
    pub async fn probe(self: Arc<Self>, membership: Arc<Membership>) {
        loop {
            tokio::time::sleep(PROBE_EVERY).await;
            let down = self.down();
            if down.is_empty() {
                continue;
            }
            let view = membership.view();
            for name in down {
                let Some(member) = view.list.get(&name) else {
                    // No longer a member: nothing routes to it.
                    self.down.lock().remove(&name);
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
                    if let Some(since) = self.down.lock().remove(&name) {
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
