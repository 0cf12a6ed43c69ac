//! Client subcommands: `levee put/get/head/delete/query/list-keys` and `levee admin ...`.
//! Readable output by default, `--json` for scripts. These run inside the operator's CronJobs.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use levee_proto::v1 as pb;
use serde_json::json;
use std::path::PathBuf;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::tls;

#[derive(Args, Clone)]
pub struct Conn {
    /// Node address: host:port (TLS when --tls-ca is given), http://host:port or https://host:port.
    #[arg(
        long,
        env = "LEVEE_ADDR",
        default_value = "127.0.0.1:8087",
        global = true
    )]
    addr: String,
    /// Connect with TLS, trusting the node certificates this CA (PEM) signed.
    #[arg(long, env = "LEVEE_TLS_CA", global = true)]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for nodes that require one; needs --tls-key. (Not
    /// LEVEE_TLS_CERT, which client commands no longer read: that name was also `serve`'s.)
    #[arg(long, env = "LEVEE_CLIENT_TLS_CERT", global = true)]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "LEVEE_CLIENT_TLS_KEY", global = true)]
    tls_key: Option<PathBuf>,
    /// Name the node's certificate must carry (default: the host of --addr).
    #[arg(long, env = "LEVEE_TLS_DOMAIN", global = true)]
    tls_domain: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Per-request deadline in seconds. Maintenance commands (compact-journal, aae-rebuild)
    /// send it to the node, which starts no partition it could not finish before it and
    /// reports those as not started.
    #[arg(long, default_value_t = 60.0, global = true)]
    timeout: f64,
    /// Longest wait, in seconds, for the connection to the node (a host that drops packets
    /// would otherwise hold the command for the kernel's TCP timeout, minutes).
    #[arg(long, default_value_t = 10.0, global = true)]
    connect_timeout: f64,
}

/// Options of a write.
#[derive(clap::Args)]
pub struct WriteFlags {
    /// The context (hex) a GET printed: the write supersedes what that GET returned. Without
    /// it the write is blind: concurrent with every value the key holds.
    #[arg(long)]
    context: Option<String>,
    /// Bucket type whose defaults apply (node config [bucket_types.<name>]).
    #[arg(long, default_value = "")]
    bucket_type: String,
    /// Replicas that must acknowledge: a number, one, quorum or all (default: the bucket type's).
    #[arg(long)]
    w: Option<String>,
    /// Of those, primaries.
    #[arg(long)]
    pw: Option<String>,
    /// Of those, durable (fsynced).
    #[arg(long)]
    dw: Option<String>,
}

/// Options of a read.
#[derive(clap::Args)]
pub struct ReadFlags {
    /// Bucket type whose defaults apply (node config [bucket_types.<name>]).
    #[arg(long, default_value = "")]
    bucket_type: String,
    /// Replicas that must answer: a number, one, quorum or all (default: the bucket type's).
    #[arg(long)]
    r: Option<String>,
    /// Of those, primaries.
    #[arg(long)]
    pr: Option<String>,
}

impl WriteFlags {
    fn context(&self) -> Result<Vec<u8>> {
        Ok(self
            .context
            .as_deref()
            .map(|c| from_hex(c, "context"))
            .transpose()?
            .unwrap_or_default())
    }

    /// A put carrying these options (the caller fills in the rest).
    fn request(&self) -> Result<pb::PutRequest> {
        Ok(pb::PutRequest {
            context: self.context()?,
            bucket_type: self.bucket_type.clone(),
            w: quorum_arg(&self.w, "w")?,
            pw: quorum_arg(&self.pw, "pw")?,
            dw: quorum_arg(&self.dw, "dw")?,
            ..Default::default()
        })
    }

    /// A delete carrying these options.
    fn delete_request(&self) -> Result<pb::DeleteRequest> {
        let p = self.request()?;
        Ok(pb::DeleteRequest {
            context: p.context,
            bucket_type: p.bucket_type,
            w: p.w,
            pw: p.pw,
            dw: p.dw,
            ..Default::default()
        })
    }
}

fn quorum_arg(v: &Option<String>, what: &str) -> Result<Option<pb::Quorum>> {
    use pb::quorum::{Name, Value};
    let Some(v) = v else { return Ok(None) };
    let value = match v.as_str() {
        "one" => Value::Name(Name::One as i32),
        "quorum" => Value::Name(Name::Quorum as i32),
        "all" => Value::Name(Name::All as i32),
        n => Value::Count(n.parse().map_err(|_| {
            anyhow::anyhow!("--{what} {n:?}: expected a number, one, quorum or all")
        })?),
    };
    Ok(Some(pb::Quorum { value: Some(value) }))
}

/// How output spells bytes (values, keys, index terms) that may not be text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Encoding {
    /// As text; bytes that are not valid UTF-8 are an error, never replaced.
    Utf8,
    /// Standard base64 with padding (RFC 4648).
    Base64,
    /// Lower-case hexadecimal, two digits per byte.
    Hex,
}

impl Encoding {
    /// `bytes` spelled in this encoding; `what` and `flag` name them in the error a non-UTF-8
    /// value gets under `utf8`.
    fn spell(self, bytes: &[u8], what: &str, flag: &str) -> Result<String> {
        use base64::Engine;
        match self {
            Encoding::Utf8 => String::from_utf8(bytes.to_vec()).map_err(|_| {
                anyhow::anyhow!(
                    "{what} is not UTF-8 text (hex {}); print it with {flag} base64 or hex",
                    to_hex(&bytes[..bytes.len().min(32)])
                )
            }),
            Encoding::Base64 => Ok(base64::engine::general_purpose::STANDARD.encode(bytes)),
            Encoding::Hex => Ok(to_hex(bytes)),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Encoding::Utf8 => "utf8",
            Encoding::Base64 => "base64",
            Encoding::Hex => "hex",
        }
    }
}

/// How keys and binary index terms are printed.
#[derive(clap::Args)]
pub struct KeyEncoding {
    /// How keys and binary index terms are printed: utf8 (default; a key that is not UTF-8 is
    /// an error instead of being mangled), base64 or hex.
    #[arg(long, value_enum, default_value_t = Encoding::Utf8)]
    key_encoding: Encoding,
}

impl KeyEncoding {
    fn key(&self, key: &[u8]) -> Result<String> {
        self.key_encoding.spell(key, "a key", "--key-encoding")
    }

    fn bucket(&self, bucket: &[u8]) -> Result<String> {
        self.key_encoding
            .spell(bucket, "a bucket", "--key-encoding")
    }

    fn term(&self, t: &Option<pb::Term>) -> Result<String> {
        match t.as_ref().and_then(|t| t.kind.as_ref()) {
            Some(pb::term::Kind::Int(i)) => Ok(i.to_string()),
            Some(pb::term::Kind::Bin(b)) => {
                self.key_encoding
                    .spell(b, "an index term", "--key-encoding")
            }
            None => Ok(String::new()),
        }
    }
}

fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str, what: &str) -> Result<Vec<u8>> {
    let bad = || anyhow::anyhow!("--{what} must be the hex string a GET printed");
    if !s.len().is_multiple_of(2) {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect()
}

#[derive(Subcommand)]
pub enum ClientCmd {
    /// Store a value. Index entries: `--index field_int=42` (integer) or `--index field_bin=text`.
    Put {
        #[command(flatten)]
        conn: Conn,
        /// Bucket of the object.
        bucket: String,
        /// Key of the object.
        key: String,
        /// The value (or use --value-file).
        value: Option<String>,
        /// Read the value from this file (any bytes).
        #[arg(long)]
        value_file: Option<std::path::PathBuf>,
        /// User metadata stored with the value (text); `get --json` prints it back.
        #[arg(long, default_value = "")]
        metadata: String,
        /// An index entry to add: `field_int=42` or `field_bin=text` (repeatable).
        #[arg(long = "index")]
        index: Vec<String>,
        /// Index entries to remove, same syntax as --index.
        #[arg(long = "remove-index")]
        remove_index: Vec<String>,
        #[command(flatten)]
        write: WriteFlags,
    },
    /// Print a value (raw bytes to stdout, or JSON with --json: every sibling and the context).
    Get {
        #[command(flatten)]
        conn: Conn,
        /// Bucket of the object.
        bucket: String,
        /// Key of the object.
        key: String,
        #[command(flatten)]
        read: ReadFlags,
        /// How values and metadata are printed: base64 (the default with --json), hex, or utf8
        /// (a value that is not UTF-8 is an error). Without --json and without this option the
        /// value's raw bytes go to stdout.
        #[arg(long, value_enum)]
        value_encoding: Option<Encoding>,
    },
    /// Print an object's size, hash and context without reading its value.
    Head {
        #[command(flatten)]
        conn: Conn,
        /// Bucket of the object.
        bucket: String,
        /// Key of the object.
        key: String,
        #[command(flatten)]
        read: ReadFlags,
    },
    /// Delete an object (a tombstone; with --context it supersedes what that GET returned, and
    /// its index entries go with it).
    Delete {
        #[command(flatten)]
        conn: Conn,
        /// Bucket of the object.
        bucket: String,
        /// Key of the object.
        key: String,
        #[command(flatten)]
        write: WriteFlags,
    },
    /// Secondary-index range query; fields ending in `_int` take integer terms.
    Query {
        #[command(flatten)]
        conn: Conn,
        /// The bucket queried.
        bucket: String,
        /// Index field, e.g. age_int or city_bin.
        field: String,
        /// First term of the range (inclusive).
        start: String,
        /// Last term of the range (inclusive).
        end: String,
        /// Print each result's term next to its key.
        #[arg(long)]
        return_terms: bool,
        /// Only terms matching this regular expression (binary fields).
        #[arg(long)]
        regex: Option<String>,
        /// Stop after this many results (0: all) and print the continuation token (hex) that
        /// resumes the query.
        #[arg(long, default_value_t = 0)]
        max_results: u32,
        /// Resume a query from the token an earlier run of the same query printed.
        #[arg(long)]
        continuation: Option<String>,
        /// Bucket type whose n_val the query covers (node config [bucket_types.<name>]).
        #[arg(long, default_value = "")]
        bucket_type: String,
        #[command(flatten)]
        keys: KeyEncoding,
    },
    /// Stream every key of a bucket (one per line, or a JSON array with --json).
    ListKeys {
        #[command(flatten)]
        conn: Conn,
        /// The bucket whose keys are listed.
        bucket: String,
        /// Bucket type whose n_val the listing covers (node config [bucket_types.<name>]).
        #[arg(long, default_value = "")]
        bucket_type: String,
        #[command(flatten)]
        keys: KeyEncoding,
    },
    /// Node administration.
    #[command(subcommand)]
    Admin(AdminCmd),
}

#[derive(Subcommand)]
pub enum AdminCmd {
    /// The node's name, version, ring size, vnodes, uptime, data directory and sync mode.
    Status {
        #[command(flatten)]
        conn: Conn,
    },
    /// Engine counters summed over every vnode (puts, gets, bytes, compactions, ...).
    Stats {
        #[command(flatten)]
        conn: Conn,
    },
    /// Compact the journal of every vnode (or the given partitions), one partition at a time.
    /// Prints each partition that failed or was not started before --timeout; exits 1 if any.
    CompactJournal {
        #[command(flatten)]
        conn: Conn,
        /// A partition to compact (repeatable; none: every vnode).
        #[arg(long = "partition")]
        partitions: Vec<u32>,
    },
    /// Rebuild the AAE trees from the ledger, one partition at a time. Prints each partition
    /// that failed or was not started before --timeout; exits 1 if any.
    AaeRebuild {
        #[command(flatten)]
        conn: Conn,
        /// A partition whose tree is rebuilt (repeatable; none: every vnode).
        #[arg(long = "partition")]
        partitions: Vec<u32>,
        /// Also check each object's journal record exists.
        #[arg(long)]
        journal_check: bool,
    },
    /// Run an AAE exchange now: for each preflist given (by the partition it starts at), or every
    /// preflist this node leads, compare the replicas' trees, list the keys of differing segments
    /// and repair every key whose replicas differ. Prints one line per exchange that found
    /// something; exits 1 if any failed.
    AaeExchange {
        #[command(flatten)]
        conn: Conn,
        /// A preflist, by the partition it starts at (repeatable; none: every preflist this node
        /// leads).
        #[arg(long = "partition")]
        partitions: Vec<u32>,
    },
    /// The member list this node runs with (version, name, address, zone, partitions owned).
    Members {
        #[command(flatten)]
        conn: Conn,
    },
    /// Give the node a new member list: a JSON file as in docs/cluster.md ("Member list").
    /// A list that moves partitions starts a ring transition (docs/cluster.md, "Ring
    /// transitions"); refused when its version goes back or is reused for other content.
    SetMembers {
        #[command(flatten)]
        conn: Conn,
        /// The member list (JSON: {"version": N, "members": [{"name", "address", "zone"}]}).
        #[arg(long)]
        file: std::path::PathBuf,
    },
    /// The ring: the owner of each partition under the node's member list.
    Ring {
        #[command(flatten)]
        conn: Conn,
    },
    /// One vnode's AAE tree: its root hash, segment count and the hash of each branch (text:
    /// the branches that are not zero). Compare two replicas' trees to find differing branches,
    /// then list their keys with aae-segment-keys --branch.
    AaeTree {
        #[command(flatten)]
        conn: Conn,
        /// The vnode (partition) whose tree is printed.
        #[arg(long)]
        partition: u32,
    },
    /// The keys of one vnode's AAE segments, with the hash each contributes to its leaf.
    AaeSegmentKeys {
        #[command(flatten)]
        conn: Conn,
        /// The vnode (partition) whose keys are listed.
        #[arg(long)]
        partition: u32,
        /// A segment (repeatable).
        #[arg(long = "segment")]
        segments: Vec<u32>,
        /// Every segment of this branch, as numbered by aae-tree (repeatable).
        #[arg(long = "branch")]
        branches: Vec<u32>,
        #[command(flatten)]
        keys: KeyEncoding,
    },
}

/// The endpoint URI and, when TLS is asked for (an `https://` address or any `--tls-*` option),
/// its client TLS settings. Every file is read and checked here, so a bad one is named.
fn endpoint(c: &Conn) -> Result<(String, Option<ClientTlsConfig>)> {
    let (scheme, rest) = c.addr.split_once("://").unwrap_or(("", c.addr.as_str()));
    let tls_opts =
        c.tls_ca.is_some() || c.tls_cert.is_some() || c.tls_key.is_some() || c.tls_domain.is_some();
    let tls = match scheme {
        "https" => true,
        "http" if tls_opts => bail!(
            "--addr {} is plaintext (http://) but TLS options are given; use https:// or host:port",
            c.addr
        ),
        "http" => false,
        "" => tls_opts,
        other => bail!(
            "--addr {}: unsupported scheme {other}:// (use host:port, http:// or https://)",
            c.addr
        ),
    };
    let uri = format!("{}://{rest}", if tls { "https" } else { "http" });
    if !tls {
        return Ok((uri, None));
    }
    let Some(ca) = &c.tls_ca else {
        bail!("TLS to {} needs --tls-ca FILE: the CA certificate that signed the node's certificate (the client has no system trust store)", c.addr)
    };
    let ca_pem = tls::read_file("server CA", ca)?;
    tls::parse_roots("server CA", ca, &ca_pem)?;
    let mut cfg = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca_pem));
    match (&c.tls_cert, &c.tls_key) {
        (None, None) => {}
        (Some(cert), None) => bail!(tls::TlsError::CertWithoutKey { cert: cert.clone() }),
        (None, Some(key)) => bail!(tls::TlsError::KeyWithoutCert { key: key.clone() }),
        (Some(cert), Some(key)) => {
            let cert_pem = tls::read_file("client certificate", cert)?;
            let key_pem = tls::read_file("client key", key)?;
            tls::certified_key(
                &tokio_rustls::rustls::crypto::ring::default_provider(),
                ("client certificate", cert, &cert_pem),
                ("client key", key, &key_pem),
            )?;
            cfg = cfg.identity(Identity::from_pem(cert_pem, key_pem));
        }
    }
    if let Some(d) = &c.tls_domain {
        cfg = cfg.domain_name(d.clone());
    }
    Ok((uri, Some(cfg)))
}

async fn channel(c: &Conn) -> Result<Channel> {
    let (uri, tls) = endpoint(c)?;
    let mut ep = Channel::from_shared(uri.clone())
        .with_context(|| format!("bad address {uri}"))?
        .timeout(std::time::Duration::from_secs_f64(c.timeout))
        .connect_timeout(std::time::Duration::from_secs_f64(c.connect_timeout));
    if let Some(tls) = tls {
        ep = ep
            .tls_config(tls)
            .with_context(|| format!("TLS settings for {uri}"))?;
    }
    ep.connect()
        .await
        .with_context(|| format!("cannot connect to {uri}"))
}

/// `field_int=42` → integer term; anything else binary.
pub fn term_for(field: &str, text: &str) -> Result<pb::Term> {
    let kind = if field.ends_with("_int") {
        pb::term::Kind::Int(
            text.parse()
                .with_context(|| format!("{field} needs an integer term, got `{text}`"))?,
        )
    } else {
        pb::term::Kind::Bin(text.as_bytes().to_vec())
    };
    Ok(pb::Term { kind: Some(kind) })
}

fn index_changes(add: &[String], remove: &[String]) -> Result<Vec<pb::IndexChange>> {
    let mut out = Vec::new();
    for (list, op) in [
        (add, pb::index_change::Op::Add),
        (remove, pb::index_change::Op::Remove),
    ] {
        for entry in list {
            let Some((field, term)) = entry.split_once('=') else {
                bail!("index entry `{entry}` must look like field=term")
            };
            out.push(pb::IndexChange {
                op: op as i32,
                field: field.as_bytes().to_vec(),
                term: Some(term_for(field, term)?),
            });
        }
    }
    Ok(out)
}

/// A request carrying the command's --timeout as its `grpc-timeout`, so the node knows it.
fn with_deadline<T>(conn: &Conn, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(std::time::Duration::from_secs_f64(conn.timeout));
    req
}

/// The partitions a maintenance command asked for, in words.
fn which(partitions: &[u32]) -> String {
    if partitions.is_empty() {
        "every vnode".to_string()
    } else {
        format!("partitions {partitions:?}")
    }
}

/// Every partition of a maintenance answer, for --json.
fn outcomes_json(parts: &[pb::PartitionOutcome]) -> serde_json::Value {
    parts
        .iter()
        .map(|o| {
            let mut v = json!({
                "partition": o.partition,
                "state": o.state().as_str_name().to_ascii_lowercase(),
                "seconds": o.seconds,
            });
            if !o.error.is_empty() {
                v["error"] = json!(o.error);
            }
            v
        })
        .collect()
}

/// The partitions that failed or did not start, one line each (empty when all were done).
fn outcomes_text(parts: &[pb::PartitionOutcome]) -> String {
    parts
        .iter()
        .filter(|o| o.state() != pb::partition_outcome::State::Done)
        .map(|o| format!("\n  partition {}: {}", o.partition, o.error))
        .collect()
}

fn incomplete(what: &str, failed: u32, not_started: u32) -> Result<()> {
    if failed + not_started > 0 {
        bail!("{what} incomplete: {failed} partition(s) failed, {not_started} not started before the deadline");
    }
    Ok(())
}

fn print(conn: &Conn, value: serde_json::Value, text: String) {
    if conn.json {
        println!("{value}");
    } else {
        println!("{text}");
    }
}

impl ClientCmd {
    fn conn(&self) -> &Conn {
        match self {
            ClientCmd::Put { conn, .. }
            | ClientCmd::Get { conn, .. }
            | ClientCmd::Head { conn, .. }
            | ClientCmd::Delete { conn, .. }
            | ClientCmd::Query { conn, .. }
            | ClientCmd::ListKeys { conn, .. } => conn,
            ClientCmd::Admin(
                AdminCmd::Status { conn }
                | AdminCmd::Stats { conn }
                | AdminCmd::CompactJournal { conn, .. }
                | AdminCmd::AaeRebuild { conn, .. }
                | AdminCmd::AaeExchange { conn, .. }
                | AdminCmd::Members { conn }
                | AdminCmd::SetMembers { conn, .. }
                | AdminCmd::Ring { conn }
                | AdminCmd::AaeTree { conn, .. }
                | AdminCmd::AaeSegmentKeys { conn, .. },
            ) => conn,
        }
    }
}

/// A node that closes the connection right away is, most often, a TLS/plaintext mismatch or a
/// missing client certificate; the transport error alone ("connection closed") does not say so.
fn transport_hint(conn: &Conn, e: &anyhow::Error) -> Option<&'static str> {
    let transport = e.chain().any(|c| {
        c.is::<tonic::transport::Error>()
            || c.downcast_ref::<tonic::Status>().is_some_and(|s| {
                std::error::Error::source(s).is_some_and(|x| x.is::<tonic::transport::Error>())
            })
    });
    let text = format!("{e:#}").to_lowercase();
    if !transport
        || ["refused", "dns error", "invalid peer certificate"]
            .iter()
            .any(|t| text.contains(t))
    {
        return None;
    }
    match endpoint(conn) {
        Ok((_, None)) => Some("if the node serves TLS, connect with --tls-ca FILE (docs/node.md)"),
        Ok((_, Some(_))) if conn.tls_cert.is_none() => {
            if std::env::var_os("LEVEE_TLS_CERT").is_some() {
                Some("if the node requires client certificates, add --tls-cert FILE --tls-key FILE (client commands read LEVEE_CLIENT_TLS_CERT and LEVEE_CLIENT_TLS_KEY, not LEVEE_TLS_CERT, which is `levee serve`'s former name for its own certificate)")
            } else {
                Some("if the node requires client certificates, add --tls-cert FILE --tls-key FILE")
            }
        }
        _ => None,
    }
}

/// Runs a client command; a failure comes with a hint for the user when one applies.
pub async fn run(cmd: ClientCmd) -> std::result::Result<(), (anyhow::Error, Option<&'static str>)> {
    let conn = cmd.conn().clone();
    run_cmd(cmd).await.map_err(|e| {
        let hint = transport_hint(&conn, &e);
        (e, hint)
    })
}

async fn run_cmd(cmd: ClientCmd) -> Result<()> {
    use pb::admin_client::AdminClient;
    use pb::kv_client::KvClient;
    match cmd {
        ClientCmd::Put {
            conn,
            bucket,
            key,
            value,
            value_file,
            metadata,
            index,
            remove_index,
            write,
        } => {
            let value = match (value, value_file) {
                (Some(v), None) => v.into_bytes(),
                (None, Some(f)) => {
                    std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?
                }
                _ => bail!("give the value either as an argument or with --value-file"),
            };
            let req = pb::PutRequest {
                bucket: bucket.into_bytes(),
                key: key.into_bytes(),
                value,
                metadata: metadata.into_bytes(),
                index_changes: index_changes(&index, &remove_index)?,
                ..write.request()?
            };
            let r = KvClient::new(channel(&conn).await?)
                .put(req)
                .await?
                .into_inner();
            print(
                &conn,
                json!({"sqn": r.sqn, "context": to_hex(&r.context)}),
                format!("stored (sqn {})", r.sqn),
            );
        }
        ClientCmd::Get {
            conn,
            bucket,
            key,
            read,
            value_encoding,
        } => {
            let r = KvClient::new(channel(&conn).await?)
                .get(pb::GetRequest {
                    bucket: bucket.into_bytes(),
                    key: key.into_bytes(),
                    bucket_type: read.bucket_type.clone(),
                    r: quorum_arg(&read.r, "r")?,
                    pr: quorum_arg(&read.pr, "pr")?,
                    notfound_ok: None,
                    basic_quorum: None,
                })
                .await?
                .into_inner();
            if conn.json {
                let enc = value_encoding.unwrap_or(Encoding::Base64);
                let spell = |b: &[u8], what| enc.spell(b, what, "--value-encoding");
                // One live value comes as `value` alone; the JSON lists it as the one sibling.
                let lone = [pb::Sibling {
                    value: r.value.clone(),
                    metadata: r.metadata.clone(),
                    timestamp_us: r.timestamp_us,
                }];
                let all = if r.siblings.is_empty() {
                    &lone[..]
                } else {
                    &r.siblings[..]
                };
                let siblings = all
                    .iter()
                    .map(|s| {
                        Ok(json!({"value": spell(&s.value, "a sibling's value")?, "metadata": spell(&s.metadata, "a sibling's metadata")?, "timestamp_us": s.timestamp_us}))
                    })
                    .collect::<Result<Vec<_>>>()?;
                print(
                    &conn,
                    json!({"sqn": r.sqn, "value_encoding": enc.name(), "value": spell(&r.value, "the value")?, "metadata": spell(&r.metadata, "the metadata")?, "context": to_hex(&r.context), "siblings": siblings}),
                    String::new(),
                );
            } else {
                use std::io::Write;
                match value_encoding {
                    Some(enc) => {
                        print!("{}", enc.spell(&r.value, "the value", "--value-encoding")?)
                    }
                    None => std::io::stdout().write_all(&r.value)?,
                }
                println!();
                if r.siblings.len() > 1 {
                    eprintln!(
                        "note: {} concurrent values (siblings); this is the latest. `--json` prints them all and the context that resolves them",
                        r.siblings.len()
                    );
                }
            }
        }
        ClientCmd::Head {
            conn,
            bucket,
            key,
            read,
        } => {
            let r = KvClient::new(channel(&conn).await?)
                .head(pb::HeadRequest {
                    bucket: bucket.into_bytes(),
                    key: key.into_bytes(),
                    bucket_type: read.bucket_type.clone(),
                    r: quorum_arg(&read.r, "r")?,
                    pr: quorum_arg(&read.pr, "pr")?,
                    notfound_ok: None,
                    basic_quorum: None,
                })
                .await?
                .into_inner();
            print(
                &conn,
                json!({"sqn": r.sqn, "value_size": r.value_size, "value_hash": r.value_hash, "siblings": r.sibling_count, "timestamp_us": r.timestamp_us, "context": to_hex(&r.context)}),
                format!(
                    "size {}  hash {:08x}  siblings {}  timestamp_us {}",
                    r.value_size, r.value_hash, r.sibling_count, r.timestamp_us
                ),
            );
        }
        ClientCmd::Delete {
            conn,
            bucket,
            key,
            write,
        } => {
            let r = KvClient::new(channel(&conn).await?)
                .delete(pb::DeleteRequest {
                    bucket: bucket.into_bytes(),
                    key: key.into_bytes(),
                    index_changes: Vec::new(),
                    metadata: Vec::new(),
                    ..write.delete_request()?
                })
                .await?
                .into_inner();
            print(
                &conn,
                json!({"sqn": r.sqn, "context": to_hex(&r.context)}),
                format!("deleted (sqn {})", r.sqn),
            );
        }
        ClientCmd::Query {
            conn,
            bucket,
            field,
            start,
            end,
            return_terms,
            regex,
            max_results,
            continuation,
            bucket_type,
            keys,
        } => {
            let req = pb::IndexQueryRequest {
                start: Some(term_for(&field, &start)?),
                end: Some(term_for(&field, &end)?),
                bucket: bucket.into_bytes(),
                field: field.into_bytes(),
                return_terms,
                term_regex: regex.unwrap_or_default(),
                page_size: 1000,
                max_results,
                continuation: continuation
                    .as_deref()
                    .map(|c| from_hex(c, "continuation"))
                    .transpose()?
                    .unwrap_or_default(),
                bucket_type,
            };
            let mut stream = KvClient::new(channel(&conn).await?)
                .index_query(req)
                .await?
                .into_inner();
            let mut n = 0;
            while let Some(page) = stream.message().await? {
                for r in page.results {
                    n += 1;
                    let key = keys.key(&r.key)?;
                    if conn.json {
                        println!("{}", json!({"term": keys.term(&r.term)?, "key": key}));
                    } else if return_terms {
                        println!("{}\t{key}", keys.term(&r.term)?);
                    } else {
                        println!("{key}");
                    }
                }
                if !page.continuation.is_empty() {
                    let token = to_hex(&page.continuation);
                    if conn.json {
                        println!("{}", json!({ "continuation": token }));
                    } else {
                        eprintln!(
                            "(more results: stopped at --max-results {max_results}; resume with --continuation {token})"
                        );
                    }
                }
            }
            if !conn.json {
                eprintln!("{n} result(s)");
            }
        }
        ClientCmd::ListKeys {
            conn,
            bucket,
            bucket_type,
            keys,
        } => {
            let mut stream = KvClient::new(channel(&conn).await?)
                .list_keys(pb::ListKeysRequest {
                    bucket: bucket.into_bytes(),
                    page_size: 1000,
                    bucket_type,
                })
                .await?
                .into_inner();
            let mut all = Vec::new();
            while let Some(page) = stream.message().await? {
                for k in page.keys {
                    let k = keys.key(&k)?;
                    if conn.json {
                        all.push(k);
                    } else {
                        println!("{k}");
                    }
                }
            }
            if conn.json {
                println!("{}", json!(all));
            }
        }
        ClientCmd::Admin(a) => match a {
            AdminCmd::Status { conn } => {
                let r = AdminClient::new(channel(&conn).await?)
                    .status(pb::StatusRequest {})
                    .await?
                    .into_inner();
                print(
                    &conn,
                    json!({"node": r.node, "version": r.version, "ring_size": r.ring_size, "vnodes": r.vnodes, "uptime_seconds": r.uptime_seconds, "data_dir": r.data_dir, "sync_on_write": r.sync_on_write}),
                    format!(
                        "node {}  version {}  ring {}  vnodes {}  up {} s  data {}  sync_on_write {}",
                        r.node, r.version, r.ring_size, r.vnodes, r.uptime_seconds, r.data_dir, r.sync_on_write
                    ),
                );
            }
            AdminCmd::Stats { conn } => {
                let r = AdminClient::new(channel(&conn).await?)
                    .stats(pb::StatsRequest {})
                    .await?
                    .into_inner();
                let mut names: Vec<_> = r.totals.iter().collect();
                names.sort_by(|a, b| a.0.cmp(b.0));
                let text = names
                    .iter()
                    .map(|(k, v)| format!("{k:40} {v}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                print(&conn, json!(r.totals), text);
            }
            AdminCmd::CompactJournal { conn, partitions } => {
                eprintln!(
                    "compacting the journal of {} (deadline {} s) …",
                    which(&partitions),
                    conn.timeout
                );
                let r = AdminClient::new(channel(&conn).await?)
                    .compact_journal(with_deadline(
                        &conn,
                        pb::CompactJournalRequest { partitions },
                    ))
                    .await?
                    .into_inner();
                let done = r.partitions.len() as u32 - r.failed - r.not_started;
                print(
                    &conn,
                    json!({"runs": r.runs, "bytes_reclaimed": r.bytes_reclaimed, "records_dropped": r.records_dropped, "seconds": r.seconds,
                           "done": done, "failed": r.failed, "not_started": r.not_started, "partitions": outcomes_json(&r.partitions)}),
                    format!(
                        "{} of {} partition(s) done, {} compaction run(s), {} bytes reclaimed, {} records dropped, {:.2} s{}",
                        done,
                        r.partitions.len(),
                        r.runs,
                        r.bytes_reclaimed,
                        r.records_dropped,
                        r.seconds,
                        outcomes_text(&r.partitions)
                    ),
                );
                incomplete("journal compaction", r.failed, r.not_started)?;
            }
            AdminCmd::AaeRebuild {
                conn,
                partitions,
                journal_check,
            } => {
                eprintln!(
                    "rebuilding the AAE trees of {} (deadline {} s) …",
                    which(&partitions),
                    conn.timeout
                );
                let r = AdminClient::new(channel(&conn).await?)
                    .rebuild_aae(with_deadline(
                        &conn,
                        pb::RebuildAaeRequest {
                            partitions,
                            journal_check,
                        },
                    ))
                    .await?
                    .into_inner();
                print(
                    &conn,
                    json!({"rebuilt": r.rebuilt, "seconds": r.seconds, "journal_check": journal_check,
                           "failed": r.failed, "not_started": r.not_started, "partitions": outcomes_json(&r.partitions)}),
                    format!(
                        "rebuilt {} of {} AAE tree(s) in {:.2} s{}{}",
                        r.rebuilt,
                        r.partitions.len(),
                        r.seconds,
                        if journal_check {
                            " (with journal check)"
                        } else {
                            ""
                        },
                        outcomes_text(&r.partitions)
                    ),
                );
                incomplete("AAE rebuild", r.failed, r.not_started)?;
            }
            AdminCmd::AaeExchange { conn, partitions } => {
                eprintln!(
                    "AAE exchange of {} (deadline {} s) …",
                    if partitions.is_empty() {
                        "every preflist this node leads".to_string()
                    } else {
                        which(&partitions)
                    },
                    conn.timeout
                );
                let r = AdminClient::new(channel(&conn).await?)
                    .aae_exchange(with_deadline(
                        &conn,
                        pb::AaeExchangeRequest {
                            key_partitions: partitions,
                        },
                    ))
                    .await?
                    .into_inner();
                let count = |res: &str| r.exchanges.iter().filter(|e| e.result == res).count();
                let (in_sync, repaired, failed, skipped) = (
                    count("in_sync"),
                    count("repaired"),
                    count("failed"),
                    count("skipped"),
                );
                let keys: u32 = r.exchanges.iter().map(|e| e.keys_repaired).sum();
                let mut text = format!(
                    "{} exchange(s): {in_sync} in sync, {repaired} repaired ({keys} key(s)), {failed} failed, {skipped} skipped",
                    r.exchanges.len()
                );
                for e in r.exchanges.iter().filter(|e| e.result != "in_sync") {
                    text.push_str(&format!(
                        "\n  p{}: {}: {} segment(s) differ, {} key(s) differ, {} repaired ({} replica(s) sent a merge) in {:.2} s{}",
                        e.key_partition,
                        e.result,
                        e.segments_differing,
                        e.keys_differing,
                        e.keys_repaired,
                        e.replicas_repaired,
                        e.seconds,
                        if e.message.is_empty() { String::new() } else { format!(": {}", e.message) }
                    ));
                }
                let exchanges: Vec<_> = r
                    .exchanges
                    .iter()
                    .map(|e| {
                        json!({"partition": e.key_partition, "result": e.result,
                               "segments_differing": e.segments_differing, "keys_differing": e.keys_differing,
                               "keys_repaired": e.keys_repaired, "replicas_repaired": e.replicas_repaired,
                               "message": e.message, "seconds": e.seconds})
                    })
                    .collect();
                print(
                    &conn,
                    json!({"in_sync": in_sync, "repaired": repaired, "failed": failed, "skipped": skipped,
                           "keys_repaired": keys, "exchanges": exchanges}),
                    text,
                );
                if failed > 0 {
                    bail!("{failed} AAE exchange(s) failed");
                }
            }
            AdminCmd::Members { conn } => {
                let r = AdminClient::new(channel(&conn).await?)
                    .members(pb::MembersRequest {})
                    .await?
                    .into_inner();
                print_members(&conn, &r);
            }
            AdminCmd::SetMembers { conn, file } => {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                let list = levee_cluster::MemberList::parse(&text)
                    .with_context(|| format!("member list {}", file.display()))?;
                let r = AdminClient::new(channel(&conn).await?)
                    .set_members(pb::SetMembersRequest {
                        version: list.version(),
                        members: list
                            .members()
                            .iter()
                            .map(|m| pb::Member {
                                name: m.name.clone(),
                                address: m.address.clone(),
                                zone: m.zone.clone(),
                            })
                            .collect(),
                    })
                    .await?
                    .into_inner();
                print_members(&conn, &r);
            }
            AdminCmd::AaeTree { conn, partition } => {
                let t = AdminClient::new(channel(&conn).await?)
                    .aae_tree(pb::AaeTreeRequest { partition })
                    .await?
                    .into_inner();
                let nonzero: Vec<String> = t
                    .branches
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| **h != 0)
                    .map(|(b, h)| format!("{b:6} {h:08x}"))
                    .collect();
                print(
                    &conn,
                    json!({"partition": partition, "root": t.root, "segment_count": t.segment_count,
                           "segments_per_branch": branch_width(&t), "branches": t.branches}),
                    format!(
                        "partition {partition}: root {:08x}, {} segments in {} branches of {}, {} branch(es) not zero\nbranch hash\n{}",
                        t.root,
                        t.segment_count,
                        t.branches.len(),
                        branch_width(&t),
                        nonzero.len(),
                        nonzero.join("\n")
                    ),
                );
            }
            AdminCmd::AaeSegmentKeys {
                conn,
                partition,
                mut segments,
                branches,
                keys,
            } => {
                let mut admin = AdminClient::new(channel(&conn).await?);
                if !branches.is_empty() {
                    let t = admin
                        .aae_tree(pb::AaeTreeRequest { partition })
                        .await?
                        .into_inner();
                    let w = branch_width(&t);
                    for b in branches {
                        if b as usize >= t.branches.len() {
                            bail!(
                                "--branch {b}: partition {partition}'s tree has {} branches",
                                t.branches.len()
                            );
                        }
                        segments.extend(b * w..(b + 1) * w);
                    }
                }
                if segments.is_empty() {
                    bail!("name the segments with --segment N or --branch N");
                }
                let r = admin
                    .aae_segment_keys(pb::AaeSegmentKeysRequest {
                        partition,
                        segments,
                    })
                    .await?
                    .into_inner();
                let rows = r
                    .keys
                    .iter()
                    .map(|k| Ok((keys.bucket(&k.bucket)?, keys.key(&k.key)?, k.hash)))
                    .collect::<Result<Vec<_>>>()?;
                print(
                    &conn,
                    json!(rows
                        .iter()
                        .map(|(b, k, h)| json!({"bucket": b, "key": k, "hash": h}))
                        .collect::<Vec<_>>()),
                    rows.iter()
                        .map(|(b, k, h)| format!("{h:08x} {b}\t{k}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
            AdminCmd::Ring { conn } => {
                let r = AdminClient::new(channel(&conn).await?)
                    .members(pb::MembersRequest {})
                    .await?
                    .into_inner();
                let text = r
                    .owners
                    .iter()
                    .enumerate()
                    .map(|(p, o)| format!("{p:5} {o}"))
                    .collect::<Vec<_>>()
                    .join("\n");
                print(
                    &conn,
                    json!({"version": r.version, "ring_size": r.ring_size, "n_val": r.n_val, "owners": r.owners}),
                    format!(
                        "member list version {}, ring_size {}, n_val {}\npartition owner\n{text}",
                        r.version, r.ring_size, r.n_val
                    ),
                );
            }
        },
    }
    Ok(())
}

/// Segments per branch of a tree (the segment count is a multiple of the branch width).
fn branch_width(t: &pb::AaeTreeResponse) -> u32 {
    t.segment_count / (t.branches.len() as u32).max(1)
}

fn print_members(conn: &Conn, r: &pb::MembersResponse) {
    let owned = |name: &str| r.owners.iter().filter(|o| *o == name).count();
    let target = |name: &str| r.target_owners.iter().filter(|o| *o == name).count();
    let moving = r
        .owners
        .iter()
        .zip(&r.target_owners)
        .filter(|(a, b)| a != b)
        .count();
    let transition = if r.target_owners.is_empty() {
        String::new()
    } else {
        format!(
            "ring transition under way: {moving} partitions move; requests still go by the claim of version {}\n",
            r.routing_version
        )
    };
    let rows: Vec<String> = r
        .members
        .iter()
        .map(|m| {
            let parts = if r.target_owners.is_empty() {
                owned(&m.name).to_string()
            } else {
                format!("{} -> {}", owned(&m.name), target(&m.name))
            };
            format!(
                "{:30} {:40} {:15} {}",
                m.name,
                m.address,
                if m.zone.is_empty() { "-" } else { &m.zone },
                parts
            )
        })
        .collect();
    print(
        conn,
        json!({
            "version": r.version,
            "ring_size": r.ring_size,
            "n_val": r.n_val,
            "routing_version": r.routing_version,
            "moving_partitions": moving,
            "members": r.members.iter().map(|m| json!({"name": m.name, "address": m.address, "zone": m.zone, "partitions": owned(&m.name), "target_partitions": target(&m.name)})).collect::<Vec<_>>(),
        }),
        format!(
            "member list version {} ({} members, ring_size {}, n_val {})\n{transition}{:30} {:40} {:15} partitions\n{}",
            r.version,
            r.members.len(),
            r.ring_size,
            r.n_val,
            "name",
            "address",
            "zone",
            rows.join("\n")
        ),
    );
}
