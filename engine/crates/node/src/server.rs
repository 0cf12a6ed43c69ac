//! Server lifecycle: bind, serve gRPC (KV, Admin, health, reflection) and HTTP (metrics, health),
//! drain on SIGTERM, close the stores.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use levee_proto::v1 as pb;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::AdminService;
use crate::admission::Admission;
use crate::config::NodeConfig;
use crate::coordinator::Coordinator;
use crate::kv::KvService;
use crate::metrics::{serve_http, Metrics};
use crate::peers::Peers;
use crate::replica::{NodeService, Replicas};
use crate::tls::ServerTls;
use crate::vnodes::Vnodes;

/// Open the vnodes, bind both listeners, print the bound addresses (one line on stdout, so tests
/// and scripts can use port 0), serve until `stop` resolves, drain, close the stores.
pub async fn run(cfg: NodeConfig, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    cfg.validate()?;
    // Loaded before the stores open, so bad TLS files stop the node at once.
    let tls = match cfg.tls_files()? {
        Some(files) => {
            let interval = cfg.tls.as_ref().map_or(0, |t| t.reload_interval_secs);
            Some(Arc::new(ServerTls::load(
                files,
                Duration::from_secs(interval),
            )?))
        }
        None => None,
    };
    // Bound before the stores open: a taken port fails at once, and a node alone in its member
    // list advertises the port it really has (port 0 picks one).
    let grpc = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding gRPC on {}", cfg.listen))?;
    let http = TcpListener::bind(cfg.metrics_listen)
        .await
        .with_context(|| format!("binding metrics on {}", cfg.metrics_listen))?;
    let (grpc_addr, http_addr) = (grpc.local_addr()?, http.local_addr()?);
    let peers = Arc::new(Peers::new(&cfg)?);
    crate::transition::take_ring_from_peers(&cfg, &peers).await?;
    let opened = Instant::now();
    let vnodes = {
        let cfg = cfg.clone();
        Arc::new(tokio::task::spawn_blocking(move || Vnodes::open(&cfg, grpc_addr)).await??)
    };
    log::info!(
        "opened {} vnodes in {:.2} s on {} threads",
        vnodes.stores.len(),
        opened.elapsed().as_secs_f64(),
        vnodes.open_threads
    );
    vnodes.membership.clone().watch(Duration::from_secs(1));

    let metrics = Arc::new(Metrics::new(vnodes.clone(), &cfg.node_name));
    peers.publish_down_to(metrics.members_down.clone());
    if let Some(t) = &tls {
        t.publish_expiry(metrics.tls_expiry.clone());
    }
    let ready = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = watch::channel(false);
    let wait_stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let (mut health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<pb::kv_server::KvServer<KvService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .context("building the reflection service")?;
    // One admission per vnode, shared by client streams, this node's coordinator and other
    // members' coordinators.
    let admission = Admission::new(vnodes.stores.len(), cfg.limits.admission());
    let replicas = {
        let (v, a) = (vnodes.clone(), admission.clone());
        let (durable, deadline) = (cfg.engine.sync_on_write, cfg.limits.default_deadline());
        Arc::new(
            tokio::task::spawn_blocking(move || Replicas::open(v, a, durable, deadline)).await??,
        )
    };
    replicas
        .held
        .publish_to(metrics.query_snapshots_held.clone());
    replicas.count_reads_in(&metrics.replica_reads);
    tokio::spawn(peers.clone().probe(vnodes.membership.clone()));
    let coordinator = Arc::new(Coordinator {
        vnodes: vnodes.clone(),
        replicas: replicas.clone(),
        peers,
        metrics: metrics.clone(),
        bucket_types: cfg.bucket_types()?,
        max_value_bytes: cfg.max_value_bytes,
        delete_delay: (cfg.cluster.delete_delay_secs > 0)
            .then(|| Duration::from_secs(cfg.cluster.delete_delay_secs)),
    });
    log::info!(
        "n_val {}; bucket types: {}",
        cfg.n_val(),
        coordinator
            .bucket_types
            .iter()
            .map(|(n, p)| format!(
                "{n} (n_val {}, r {:?}, w {:?}, {:?})",
                p.n_val, p.r, p.w, p.conflict
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let pace = crate::pacing::Pace {
        max_bytes_per_sec: cfg.handoff.max_bytes_per_sec,
        busy_percent: cfg.handoff.busy_percent,
    };
    let transitions = Arc::new(crate::transition::Transitions::open(
        coordinator.clone(),
        pace,
    )?);
    tokio::spawn(transitions.clone().run(replicas.forwards()));
    // Vnodes marked to rebuild (this member lost its data) answer no reads until they have.
    tokio::spawn(crate::rebuild::Rebuild::open(coordinator.clone())?.run());
    tokio::spawn(
        Arc::new(crate::handoff::Handoff::new(
            coordinator.clone(),
            transitions.clone(),
            pace,
        ))
        .run(),
    );
    tokio::spawn(crate::aae_exchange::run_schedule(
        coordinator.clone(),
        Duration::from_secs(cfg.aae.exchange_interval_secs),
    ));
    let peers = coordinator.peers.clone();
    let node = NodeService {
        replicas,
        transitions,
        peers: peers.clone(),
    };
    let kv = KvService {
        coordinator: coordinator.clone(),
        metrics: metrics.clone(),
    };
    log::info!(
        "admission per vnode: {} running, {} queued, default deadline {} ms",
        cfg.limits.vnode_concurrency,
        cfg.limits.vnode_queue,
        cfg.limits.default_deadline_ms
    );
    let admin = AdminService {
        vnodes: vnodes.clone(),
        node_name: cfg.node_name.clone(),
        sync_on_write: if cfg.engine.sync_on_write {
            "sync"
        } else {
            "none"
        }
        .to_string(),
        started: Instant::now(),
        coordinator,
    };
    let max = cfg.max_message_bytes;
    // HTTP/2 windows well above the 64 KiB default: many concurrent 8-16 KB values per
    // connection would otherwise wait on WINDOW_UPDATE round trips.
    let router = tonic::transport::Server::builder()
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(16 << 20)
        .add_service(health_service)
        .add_service(reflection)
        .add_service(
            pb::kv_server::KvServer::new(kv)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(
            pb::node_server::NodeServer::new(node)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        )
        .add_service(
            pb::admin_server::AdminServer::new(admin)
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
        );
    let keepalive = Duration::from_secs(60);
    let grpc_task = match &tls {
        Some(tls) => {
            log::info!("{}", tls.describe());
            tokio::spawn(tls.clone().watch(stop_rx.clone()));
            let incoming = tls.clone().incoming(grpc, keepalive, stop_rx.clone());
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, wait_stop(stop_rx.clone())))
        }
        None => {
            // TCP_NODELAY: without it, small responses wait on delayed ACKs (≈40 ms per request).
            let incoming =
                tonic::transport::server::TcpIncoming::from_listener(grpc, true, Some(keepalive))
                    .map_err(|e| anyhow::anyhow!("configuring the gRPC listener: {e}"))?;
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, wait_stop(stop_rx.clone())))
        }
    };
    let http_task = tokio::spawn(serve_http(
        http,
        metrics.clone(),
        ready.clone(),
        wait_stop(stop_rx.clone()),
    ));

    // Members that marked this node down when it stopped (or could not reach it) route to it
    // again now, not at their next probe. Before readiness: a restart in a rolling update is
    // done, for the next member to stop, only once the others use this one again.
    peers
        .announce(&vnodes.membership.view(), false, ANNOUNCE_TIMEOUT)
        .await;
    ready.store(true, Ordering::Release);
    println!(
        "levee: serving gRPC on {grpc_addr}, metrics on {http_addr}, {} vnodes in {}",
        vnodes.stores.len(),
        cfg.data_dir.display()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();

    stop.await;
    ready.store(false, Ordering::Release);
    // gRPC health says so too (as /readyz does): clients and load balancers watching it stop
    // sending new requests while the in-flight ones drain.
    health_reporter
        .set_not_serving::<pb::kv_server::KvServer<KvService>>()
        .await;
    health_reporter
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    // The other members route this node's replicas to fallbacks from now on, rather than from
    // the first calls it refuses once it stops serving (each of those a failed replica: two of
    // them in a preflist this node holds twice fail a w=2 write).
    peers
        .announce(&vnodes.membership.view(), true, ANNOUNCE_TIMEOUT)
        .await;
    if cfg.shutdown_delay_secs > 0 {
        // Not ready, still serving: the Service's endpoints, and kube-proxy's rules on every
        // node, drop this member a moment after its readiness fails. Closing the port now
        // would refuse the connections still routed here meanwhile.
        log::info!(
            "shutting down: not ready, still serving for {} s (shutdown_delay_secs) so load balancers stop sending",
            cfg.shutdown_delay_secs
        );
        tokio::time::sleep(Duration::from_secs(cfg.shutdown_delay_secs)).await;
    }
    log::info!(
        "shutting down: draining in-flight requests (up to {} s)",
        cfg.shutdown_timeout_secs
    );
    let _ = stop_tx.send(true);
    let drain = async {
        let _ = grpc_task.await;
        let _ = http_task.await;
    };
    if tokio::time::timeout(Duration::from_secs(cfg.shutdown_timeout_secs), drain)
        .await
        .is_err()
    {
        log::warn!(
            "in-flight requests did not finish within {} s; closing anyway",
            cfg.shutdown_timeout_secs
        );
    }
    tokio::task::spawn_blocking(move || vnodes.close()).await??;
    log::info!("stores flushed and closed");
    Ok(())
}

/// How long a node waits for each other member to take its `Announce` (at start, at stop).
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(1);

/// A future that resolves on SIGTERM or SIGINT. The handlers are installed here, before the
/// future is first polled: a signal that arrives between the startup line and the first poll
/// (a test, or Kubernetes, stopping a node that just started) must drain the node, not kill it.
pub fn termination() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
