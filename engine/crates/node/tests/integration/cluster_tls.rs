//! Mutual TLS between the members of a cluster: three real `levee serve` processes (ring 16,
//! n_val 3), each serving TLS with its own member certificate (server and client auth, SAN
//! 127.0.0.1) and `[tls] ca_file` set, so every connection to it — a client's or another
//! member's — must present a certificate signed by the cluster CA. Certificates are generated at
//! test time (rcgen), as in `tls.rs`.
//!
//! * A write through n1 with w=3 needs both other members to take it over their `Node` service,
//!   i.e. n1 dialled them over TLS and presented its member certificate; reads with r=3 through
//!   n2 and n3 do the same from the other ends. Every replica holds the write.
//! * The `levee.v1.Node` service on a member's port refuses a plaintext client, a TLS client
//!   without a certificate and one with a certificate from another CA; it answers a client
//!   presenting a member certificate.
//! * n3 restarted with a certificate from another CA (it still trusts the cluster CA): writes
//!   with w=3 coordinated by n1 fail with UNAVAILABLE "quorum not met" (n1 refuses n3's server
//!   certificate) while w=2 still succeeds, and n3's own w=3 writes fail too (n1 refuses n3's
//!   client certificate, and says so in its log).
//! * n3's files renewed in place with a cluster-CA certificate: without a restart its links to
//!   the other members present the new one and its w=3 writes succeed again.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::certs::Ca;
use levee_cluster::decode_siblings;
use levee_proto::v1 as pb;
use pb::admin_client::AdminClient;
use pb::kv_client::KvClient;
use pb::node_client::NodeClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};
use tonic::Code;

/// How a test client connects to a member's port.
enum Creds<'a> {
    Plaintext,
    /// TLS trusting `ca`, no client certificate.
    Anonymous {
        ca: &'a Path,
    },
    /// TLS trusting `ca`, presenting `<identity>.crt`/`.key` from the same directory.
    Cert {
        ca: &'a Path,
        identity: &'a Path,
    },
}

/// An error and its whole source chain.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(e) = src {
        s += &format!(": {e}");
        src = e.source();
    }
    s
}

async fn connect(addr: &str, creds: &Creds<'_>) -> Result<Channel, String> {
    let uri = match creds {
        Creds::Plaintext => format!("http://{addr}"),
        _ => format!("https://{addr}"),
    };
    let mut ep = Channel::from_shared(uri)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    let tls = |ca: &Path| {
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
    };
    match creds {
        Creds::Plaintext => {}
        Creds::Anonymous { ca } => ep = ep.tls_config(tls(ca)).unwrap(),
        Creds::Cert { ca, identity } => {
            let id = Identity::from_pem(
                std::fs::read(identity.with_extension("crt")).unwrap(),
                std::fs::read(identity.with_extension("key")).unwrap(),
            );
            ep = ep.tls_config(tls(ca).identity(id)).unwrap();
        }
    }
    ep.connect().await.map_err(|e| chain(&e))
}

/// `levee.v1.Node/HeadReplica` called directly, as another member's coordinator calls it.
async fn head_replica(
    addr: &str,
    creds: &Creds<'_>,
    key: pb::ReplicaKey,
) -> Result<pb::HeadReplicaResponse, String> {
    let ch = connect(addr, creds).await?;
    NodeClient::new(ch)
        .head_replica(key)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| format!("{s:?}: {}", chain(&s)))
}

fn quorum(n: u32) -> Option<pb::Quorum> {
    Some(pb::Quorum {
        value: Some(pb::quorum::Value::Count(n)),
    })
}

fn put(key: &str, value: &str, w: u32) -> pb::PutRequest {
    pb::PutRequest {
        bucket: "b".into(),
        key: key.into(),
        value: value.into(),
        w: quorum(w),
        ..Default::default()
    }
}

fn get(key: &str, r: u32) -> pb::GetRequest {
    pb::GetRequest {
        bucket: "b".into(),
        key: key.into(),
        r: quorum(r),
        ..Default::default()
    }
}

/// A free port on 127.0.0.1 for each of `n` listeners (held together, so they differ).
fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// One member's `levee serve`, SIGKILLed and reaped when stopped or dropped.
struct Member {
    name: String,
    /// `127.0.0.1:port` of its gRPC listener (its listed address).
    addr: String,
    child: Option<Child>,
    /// Its stderr (the log).
    log: PathBuf,
}

impl Member {
    /// Spawns `name` with `config`, its data in `dir/<name>/data`, listening on `port`. Returns
    /// at once; [`Member::ready`] waits for its startup line.
    fn spawn(dir: &Path, name: &str, port: u16, config: &Path) -> Member {
        let nd = dir.join(name);
        std::fs::create_dir_all(&nd).unwrap();
        let addr = format!("127.0.0.1:{port}");
        // Appended to, so a restart keeps the earlier log.
        let log = nd.join("log");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_levee"))
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--data-dir")
            .arg(nd.join("data"))
            .args(["--node-name", name, "--listen", &addr])
            .args(["--metrics-listen", "127.0.0.1:0", "--aae-segments", "1024"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Member {
            name: name.to_string(),
            addr,
            child: Some(child),
            log,
        }
    }

    /// Waits for the startup line (printed once the gRPC port serves).
    fn ready(&mut self) {
        let child = self.child.as_mut().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains(&format!("serving gRPC on {}", self.addr)),
            "{} did not start: {line:?}; log:\n{}",
            self.name,
            self.log_text()
        );
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (up to 5 s) until the log, after its first `from` bytes, contains `text`.
    fn wait_for_log(&self, from: usize, text: &str) {
        let start = Instant::now();
        loop {
            let log = self.log_text();
            if log.get(from..).is_some_and(|l| l.contains(text)) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "`{text}` not in {}'s log:\n{log}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A levee.toml: the cluster section shared by every member, and `[tls]` with these files.
fn write_config(path: &Path, members: &Path, cert: &Path, key: &Path, ca: &Path) {
    std::fs::write(
        path,
        format!(
            "[cluster]\nring_size = 16\nn_val = 3\nmembers_file = {members:?}\n\
             [tls]\ncert_file = {cert:?}\nkey_file = {key:?}\nca_file = {ca:?}\n\
             reload_interval_secs = 0\n"
        ),
    )
    .unwrap();
}

async fn kv(addr: &str, creds: &Creds<'_>) -> KvClient<Channel> {
    KvClient::new(connect(addr, creds).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_replicate_over_mutual_tls_and_refuse_strangers() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let pki = dir.join("pki");
    std::fs::create_dir(&pki).unwrap();
    let ca = Ca::new(&pki, "ca");
    for name in ["n1", "n2", "n3", "client"] {
        ca.issue(&pki, name, &["127.0.0.1", "localhost"]);
    }
    let other = Ca::new(&pki, "other-ca");
    other.issue(&pki, "intruder", &["127.0.0.1", "localhost"]);
    let ca_crt = pki.join("ca.crt");

    // The member list, then one config per member, then the members (started together).
    let names = ["n1", "n2", "n3"];
    let ports = free_ports(3);
    let members_file = dir.join("members.json");
    let list: Vec<String> = names
        .iter()
        .zip(&ports)
        .map(|(n, p)| format!(r#"{{"name": "{n}", "address": "127.0.0.1:{p}", "zone": ""}}"#))
        .collect();
    std::fs::write(
        &members_file,
        format!(r#"{{"version": 1, "members": [{}]}}"#, list.join(", ")),
    )
    .unwrap();
    let mut nodes: Vec<Member> = Vec::new();
    for (name, port) in names.iter().zip(&ports) {
        let cfg = dir.join(format!("{name}.toml"));
        let id = pki.join(name);
        write_config(
            &cfg,
            &members_file,
            &id.with_extension("crt"),
            &id.with_extension("key"),
            &ca_crt,
        );
        nodes.push(Member::spawn(dir, name, *port, &cfg));
    }
    for n in nodes.iter_mut() {
        n.ready();
    }
    let client_id = pki.join("client");
    let client = Creds::Cert {
        ca: &ca_crt,
        identity: &client_id,
    };

    // 1. w=3 through n1: n1 stores it and both other members take it over mTLS; r=3 through n2
    //    and n3 hears from all three replicas.
    let mut kv1 = kv(&nodes[0].addr, &client).await;
    kv1.put(put("k", "over-mtls", 3)).await.unwrap();
    for n in &nodes[1..] {
        let g = kv(&n.addr, &client)
            .await
            .get(get("k", 3))
            .await
            .unwrap_or_else(|e| panic!("r=3 through {}: {e:?}", n.name))
            .into_inner();
        assert_eq!(g.value, b"over-mtls", "through {}", n.name);
        assert!(g.siblings.is_empty(), "a lone value is sent once");
    }

    // Each replica of the key, asked on its owner's `Node` service with a member certificate,
    // holds the write.
    let n1_id = pki.join("n1");
    let member = Creds::Cert {
        ca: &ca_crt,
        identity: &n1_id,
    };
    let m = AdminClient::new(connect(&nodes[1].addr, &member).await.unwrap())
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((m.ring_size, m.n_val, m.members.len()), (16, 3, 3));
    let ring = levee_cluster::RingSize::new(m.ring_size).unwrap();
    let first = levee_cluster::partition_of(b"b", b"k", ring);
    let replica = |p: u32| pb::ReplicaKey {
        partition: p,
        bucket: "b".into(),
        key: "k".into(),
    };
    let mut owners = Vec::new();
    for i in 0..m.n_val {
        let p = (first + i) % m.ring_size;
        let owner = m.owners[p as usize].clone();
        let n = nodes.iter().find(|n| n.name == owner).unwrap();
        let h = head_replica(&n.addr, &member, replica(p))
            .await
            .unwrap_or_else(|e| panic!("HeadReplica p{p} on {owner}: {e}"));
        assert!(h.found, "p{p} on {owner}");
        assert_eq!(decode_siblings(&h.siblings).unwrap().len(), 1);
        owners.push((p, owner));
    }
    let mut distinct: Vec<&str> = owners.iter().map(|(_, o)| o.as_str()).collect();
    distinct.sort();
    assert_eq!(distinct, names, "one replica on each member");

    // 2. The member port requires a client certificate from the cluster CA, also for `Node`
    //    calls: asked of n2's replica of the key.
    let n2 = &nodes[1];
    let (p2, _) = owners.iter().find(|(_, o)| o == "n2").unwrap();
    let n2_log = n2.log_text().len();
    let e = head_replica(&n2.addr, &Creds::Plaintext, replica(*p2))
        .await
        .unwrap_err();
    eprintln!("plaintext client: {e}");
    n2.wait_for_log(n2_log, "InvalidContentType");
    let n2_log = n2.log_text().len();
    let e = head_replica(&n2.addr, &Creds::Anonymous { ca: &ca_crt }, replica(*p2))
        .await
        .unwrap_err();
    eprintln!("client without a certificate: {e}");
    n2.wait_for_log(n2_log, "peer sent no certificates");
    let intruder = pki.join("intruder");
    let n2_log = n2.log_text().len();
    let e = head_replica(
        &n2.addr,
        &Creds::Cert {
            ca: &ca_crt,
            identity: &intruder,
        },
        replica(*p2),
    )
    .await
    .unwrap_err();
    eprintln!("client with a foreign certificate: {e}");
    n2.wait_for_log(n2_log, "invalid peer certificate: UnknownIssuer");
    // Any member's certificate is accepted (n3's here), as is n1's above.
    let n3_id = pki.join("n3");
    let h = head_replica(
        &n2.addr,
        &Creds::Cert {
            ca: &ca_crt,
            identity: &n3_id,
        },
        replica(*p2),
    )
    .await
    .unwrap();
    assert!(h.found);

    // 3. n3 comes back with a certificate from another CA (trusting the cluster CA still): the
    //    other members refuse it both as a server and as a client.
    let bad_cfg = dir.join("n3-bad.toml");
    write_config(
        &bad_cfg,
        &members_file,
        &intruder.with_extension("crt"),
        &intruder.with_extension("key"),
        &ca_crt,
    );
    nodes[2].stop();
    nodes[2] = Member::spawn(dir, "n3", ports[2], &bad_cfg);
    nodes[2].ready();

    // Coordinated on n1: n3's replica cannot be written, so w=3 fails (twice: the first finds
    // n3's certificate refused, the next finds n3 marked down), while w=2 is met by n1 and n2.
    for attempt in 0..2 {
        let e = kv1
            .put(put(&format!("bad{attempt}"), "v", 3))
            .await
            .unwrap_err();
        eprintln!("w=3 through n1, attempt {attempt}: {}", e.message());
        assert_eq!(e.code(), Code::Unavailable, "attempt {attempt}: {e:?}");
        assert!(
            e.message().starts_with("quorum not met: w=3 needed"),
            "attempt {attempt}: {e:?}"
        );
    }
    nodes[0].wait_for_log(0, "member n3 marked down");
    kv1.put(put("w2", "v", 2)).await.unwrap();

    // Coordinated on n3 (a client reaches it trusting the other CA; n3 still accepts the cluster
    // CA's client certificates): it stores its own replica (w=1 is met) but no other member
    // accepts its certificate, so w=3 fails, and n1 logs why.
    let other_ca = pki.join("other-ca.crt");
    let mut kv3 = kv(
        &nodes[2].addr,
        &Creds::Cert {
            ca: &other_ca,
            identity: &client_id,
        },
    )
    .await;
    let n1_log = nodes[0].log_text().len();
    let e = kv3.put(put("from-n3", "v", 3)).await.unwrap_err();
    eprintln!("w=3 through n3: {}", e.message());
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().starts_with("quorum not met: w=3 needed"),
        "{e:?}"
    );
    nodes[0].wait_for_log(n1_log, "invalid peer certificate: UnknownIssuer");
    kv3.put(put("n3-alone", "v", 1)).await.unwrap();

    // 4. cert-manager renews n3's files in place with a certificate from the cluster CA: without
    //    a restart, n3 presents it on its links to the other members within a second or two,
    //    and its w=3 writes succeed again.
    std::fs::copy(n3_id.with_extension("crt"), intruder.with_extension("crt")).unwrap();
    std::fs::copy(n3_id.with_extension("key"), intruder.with_extension("key")).unwrap();
    let renewed = Instant::now();
    loop {
        match kv3.put(put("renewed", "v", 3)).await {
            Ok(_) => break,
            Err(e) => assert!(
                renewed.elapsed() < Duration::from_secs(10),
                "n3's links never took the renewed certificate: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    nodes[2].wait_for_log(0, "renewed certificate files loaded");

    for n in nodes.iter_mut() {
        n.stop();
    }
    eprintln!("cluster_tls took {:.1} s", started.elapsed().as_secs_f64());
}
