//! `levee`: the levee node (`levee serve`) and its command-line client.

// tonic::Status is the error type of every gRPC handler; boxing it everywhere buys nothing.
#![allow(clippy::result_large_err)]

mod aae_exchange;
mod admin;
mod admission;
mod cli;
mod config;
mod coordinator;
mod errors;
mod handoff;
mod held_snapshots;
mod kv;
mod maintenance;
mod membership;
mod metrics;
mod pacing;
mod peers;
mod progress_file;
mod rebuild;
mod replica;
mod ring;
mod server;
mod settle;
mod tls;
mod transition;
mod vnodes;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "levee", version, about = "levee key-value node and client")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a node. Flags and LEVEE_* environment variables override the config file.
    Serve(ServeArgs),
    #[command(flatten)]
    Client(cli::ClientCmd),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file (see docs/node.md); every setting has a default.
    #[arg(long, env = "LEVEE_CONFIG")]
    config: Option<PathBuf>,
    /// Directory holding one store per vnode (`p<partition>`) and the committed member list.
    #[arg(long, env = "LEVEE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// gRPC listen address (port 0 picks a free port; the bound address is printed).
    #[arg(long, env = "LEVEE_LISTEN")]
    listen: Option<std::net::SocketAddr>,
    /// Metrics and health HTTP listen address.
    #[arg(long, env = "LEVEE_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Partitions in the ring (a power of two; recorded at first start, fixed afterwards).
    #[arg(long, env = "LEVEE_RING_SIZE")]
    ring_size: Option<u32>,
    /// Replicas per key (default: 3 with a member list, 1 for a node alone).
    #[arg(long, env = "LEVEE_N_VAL")]
    n_val: Option<u32>,
    /// Write durability: none (the OS flushes) or sync (fsync before a write is acknowledged).
    #[arg(long, env = "LEVEE_SYNC_ON_WRITE")]
    sync_on_write: Option<String>,
    /// This member's name in the member list (default: $POD_NAME, else $HOSTNAME).
    #[arg(long, env = "LEVEE_NODE_NAME")]
    node_name: Option<String>,
    /// Leaves of each vnode's AAE tree.
    #[arg(long, env = "LEVEE_AAE_SEGMENTS")]
    aae_segments: Option<u32>,
    /// Longest wait, on SIGTERM, for in-flight requests before the stores close.
    #[arg(long, env = "LEVEE_SHUTDOWN_TIMEOUT_SECS")]
    shutdown_timeout_secs: Option<u64>,
    /// On SIGTERM, keep accepting and serving this long (already reporting not ready) before
    /// draining, so load balancers stop sending first (the operator sets 5).
    #[arg(long, env = "LEVEE_SHUTDOWN_DELAY_SECS")]
    shutdown_delay_secs: Option<u64>,
    /// Serve gRPC over TLS with this certificate chain (PEM); needs --tls-key. Overrides [tls]
    /// cert_file. The former LEVEE_TLS_CERT is still read, with a warning.
    #[arg(long, env = "LEVEE_SERVER_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert. Overrides [tls] key_file. The former LEVEE_TLS_KEY is
    /// still read, with a warning.
    #[arg(long, env = "LEVEE_SERVER_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM). Overrides [tls] ca_file.
    #[arg(long, env = "LEVEE_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = match args.cmd {
        Cmd::Serve(s) => rt.block_on(serve(s)).map_err(|e| (e, None)),
        Cmd::Client(c) => rt.block_on(cli::run(c)),
    };
    if let Err((e, hint)) = result {
        match e.downcast_ref::<tonic::Status>() {
            Some(s) => {
                // Transport failures (TLS refusals among them) carry their cause as the source.
                let mut msg = format!("levee: {:?}: {}", s.code(), s.message());
                let mut cause = std::error::Error::source(s);
                while let Some(c) = cause {
                    msg += &format!(": {c}");
                    cause = c.source();
                }
                eprintln!("{msg}")
            }
            None => eprintln!("levee: {e:#}"),
        }
        if let Some(hint) = hint {
            eprintln!("levee: hint: {hint}");
        }
        std::process::exit(1);
    }
}

/// `old`, the variable `serve` read before `new` replaced it, when `new` is not set: still
/// honoured, with a warning. (Client commands never read it: it named their certificate too.)
fn deprecated_env(old: &str, new: &str) -> Option<PathBuf> {
    let v = std::env::var_os(old)?;
    log::warn!("{old} is deprecated for `levee serve`: set {new} instead");
    Some(PathBuf::from(v))
}

async fn serve(mut a: ServeArgs) -> anyhow::Result<()> {
    if a.tls_cert.is_none() {
        a.tls_cert = deprecated_env("LEVEE_TLS_CERT", "LEVEE_SERVER_TLS_CERT");
    }
    if a.tls_key.is_none() {
        a.tls_key = deprecated_env("LEVEE_TLS_KEY", "LEVEE_SERVER_TLS_KEY");
    }
    let mut cfg = config::NodeConfig::load(a.config.as_deref())?;
    if let Some(v) = a.data_dir {
        cfg.data_dir = v;
    }
    if let Some(v) = a.listen {
        cfg.listen = v;
    }
    if let Some(v) = a.metrics_listen {
        cfg.metrics_listen = v;
    }
    if let Some(v) = a.ring_size {
        cfg.cluster.ring_size = v;
    }
    if let Some(v) = a.n_val {
        cfg.cluster.n_val = Some(v);
    }
    if let Some(v) = a.sync_on_write {
        cfg.engine.sync_on_write = match v.as_str() {
            "sync" | "true" | "on" => true,
            "none" | "false" | "off" => false,
            other => anyhow::bail!("--sync-on-write must be `none` or `sync`, not `{other}`"),
        };
    }
    if let Some(v) = a.node_name {
        cfg.node_name = v;
    }
    if let Some(v) = a.aae_segments {
        cfg.engine.aae_segments = v;
    }
    if let Some(v) = a.shutdown_timeout_secs {
        cfg.shutdown_timeout_secs = v;
    }
    if let Some(v) = a.shutdown_delay_secs {
        cfg.shutdown_delay_secs = v;
    }
    if a.tls_cert.is_some() || a.tls_key.is_some() || a.tls_client_ca.is_some() {
        let t = cfg.tls.get_or_insert_with(Default::default);
        if let Some(v) = a.tls_cert {
            t.cert_file = Some(v);
        }
        if let Some(v) = a.tls_key {
            t.key_file = Some(v);
        }
        if let Some(v) = a.tls_client_ca {
            t.ca_file = Some(v);
        }
    }
    server::run(cfg, server::termination()?).await
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::CommandFactory;

    /// Every subcommand and every option or argument a user can give says what it is in --help.
    #[test]
    fn every_command_and_option_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let p = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(p.clone());
                }
                walk(sub, &p, missing);
            }
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() {
                    missing.push(format!("{path} <{}>", arg.get_id()));
                }
            }
        }
        let mut missing = Vec::new();
        walk(&Args::command(), "levee", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
