//! TLS on the gRPC port, against a real `levee serve` process: certificates (a CA, the node's
//! certificate, client certificates, and a second CA nobody trusts) are generated at test time.
//! Plain TLS, client-certificate verification, the CLI's TLS options, bad files stopping the node
//! before it opens anything, and renewed files picked up without a restart.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::certs::Ca;
use common::{put, Node};
use levee_proto::v1 as pb;
use pb::kv_client::KvClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// `ca.crt`, `node.crt/key` (localhost, 127.0.0.1), `client.crt/key` from `ca`; `other-ca.crt` and
/// `intruder.crt/key` from a CA the node does not trust.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new(dir.path(), "ca");
        ca.issue(dir.path(), "node", &["localhost", "127.0.0.1"]);
        ca.issue(dir.path(), "client", &["levee-client"]);
        let other = Ca::new(dir.path(), "other-ca");
        other.issue(dir.path(), "intruder", &["localhost", "127.0.0.1"]);
        Pki { dir }
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn s(&self, name: &str) -> String {
        self.p(name).to_str().unwrap().to_string()
    }
}

/// How a test client connects.
#[derive(Default)]
struct Client<'a> {
    ca: Option<&'a Path>,
    identity: Option<(&'a Path, &'a Path)>,
    domain: Option<&'a str>,
}

/// Connects, puts and reads back one object; any failure as its whole error chain.
async fn roundtrip(addr: &str, c: Client<'_>) -> Result<(), String> {
    let chain = |e: &dyn std::error::Error| {
        let mut s = e.to_string();
        let mut src = e.source();
        while let Some(e) = src {
            s += &format!(": {e}");
            src = e.source();
        }
        s
    };
    let uri = match c.ca {
        Some(_) => format!("https://{addr}"),
        None => format!("http://{addr}"),
    };
    let mut ep = Channel::from_shared(uri)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    if let Some(ca) = c.ca {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()));
        if let Some((cert, key)) = c.identity {
            tls = tls.identity(Identity::from_pem(
                std::fs::read(cert).unwrap(),
                std::fs::read(key).unwrap(),
            ));
        }
        if let Some(d) = c.domain {
            tls = tls.domain_name(d);
        }
        ep = ep.tls_config(tls).unwrap();
    }
    let ch = ep.connect().await.map_err(|e| chain(&e))?;
    let mut kv = KvClient::new(ch);
    kv.put(put("tls", "k", b"secret", vec![]))
        .await
        .map_err(|e| format!("put: {e:?}"))?;
    let g = kv
        .get(pb::GetRequest {
            bucket: "tls".into(),
            key: "k".into(),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("get: {e:?}"))?
        .into_inner();
    assert_eq!(g.value, b"secret");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_clients_need_the_ca_plaintext_and_strangers_are_refused() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let node = Node::start(
        data.path(),
        &[
            "--tls-cert",
            &pki.s("node.crt"),
            "--tls-key",
            &pki.s("node.key"),
        ],
    );
    let ca = pki.p("ca.crt");
    // Trusting the CA: by IP (the certificate carries 127.0.0.1) and by name.
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            domain: Some("localhost"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A client certificate is accepted but not needed without a client CA.
    let (cc, ck) = (pki.p("client.crt"), pki.p("client.key"));
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            identity: Some((&cc, &ck)),
            ..Default::default()
        },
    )
    .await
    .unwrap();

    // Plaintext gRPC to the TLS port fails.
    roundtrip(&node.addr, Client::default()).await.unwrap_err();
    // A client trusting another CA refuses the node's certificate.
    let other = pki.p("other-ca.crt");
    let e = roundtrip(
        &node.addr,
        Client {
            ca: Some(&other),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("UnknownIssuer") || e.contains("certificate"),
        "{e}"
    );
    // A name the certificate does not carry.
    let e = roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            domain: Some("elsewhere.example"),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("NotValidForName") || e.contains("certificate"),
        "{e}"
    );

    // The node logged its TLS setup and keeps serving after the failed handshakes.
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    node.wait_for_log("no client certificates");

    // SIGTERM drains and exits 0 over TLS as over plaintext.
    let mut node = node;
    node.signal(common::SIGTERM);
    let status = node.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    node.wait_for_log("stores flushed and closed");
}

/// The operator's layout: `[tls]` in levee.toml naming tls.crt, tls.key and ca.crt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_certificates_are_required_when_a_client_ca_is_configured() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    let cfg = data.path().join("levee.toml");
    std::fs::write(
        &cfg,
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nca_file = {:?}\n",
            pki.s("node.crt"),
            pki.s("node.key"),
            pki.s("ca.crt")
        ),
    )
    .unwrap();
    let node = Node::start(
        &data.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let ca = pki.p("ca.crt");

    let e = roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    // The client sees the refusal as an alert or a closed connection, whichever comes first; the
    // node's log says why.
    eprintln!("client without a certificate: {e}");
    node.wait_for_log("peer sent no certificates");
    let (cc, ck) = (pki.p("client.crt"), pki.p("client.key"));
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            identity: Some((&cc, &ck)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A member's own certificate works as a client certificate too (the operator's CronJobs).
    let (nc, nk) = (pki.p("node.crt"), pki.p("node.key"));
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            identity: Some((&nc, &nk)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A certificate from another CA is refused.
    let (ic, ik) = (pki.p("intruder.crt"), pki.p("intruder.key"));
    let e = roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            identity: Some((&ic, &ik)),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    eprintln!("client with a foreign certificate: {e}");
    node.wait_for_log("invalid peer certificate: UnknownIssuer");
    node.wait_for_log("client certificates required");
}

fn levee(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_levee"))
        .args(args)
        .env_remove("LEVEE_ADDR")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_speaks_tls_and_presents_client_certificates() {
    let pki = Pki::new();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (cert, key, ca) = (pki.s("node.crt"), pki.s("node.key"), pki.s("ca.crt"));
    let tls = Node::start(d1.path(), &["--tls-cert", &cert, "--tls-key", &key]);
    let mtls = Node::start(
        d2.path(),
        &[
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
        ],
    );

    // host:port + --tls-ca means TLS.
    let (ok, out, err) = levee(&[
        "put", "b", "k", "hello", "--addr", &tls.addr, "--tls-ca", &ca,
    ]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = levee(&["get", "b", "k", "--addr", &tls.addr, "--tls-ca", &ca]);
    assert!(ok && out == "hello\n", "{out}{err}");
    // https:// with a name override.
    let port = tls.addr.rsplit(':').next().unwrap();
    let https = format!("https://localhost:{port}");
    let (ok, out, err) = levee(&[
        "admin", "status", "--addr", &https, "--tls-ca", &ca, "--json",
    ]);
    assert!(ok && out.contains("\"vnodes\":8"), "{out}{err}");
    let (ok, out, err) = levee(&[
        "get",
        "b",
        "k",
        "--addr",
        &tls.addr,
        "--tls-ca",
        &ca,
        "--tls-domain",
        "localhost",
    ]);
    assert!(ok && out == "hello\n", "{out}{err}");

    // Refusals, exit 1 with a reason.
    let (ok, _, err) = levee(&["get", "b", "k", "--addr", &tls.addr, "--timeout", "5"]);
    assert!(
        !ok && err.contains("hint: if the node serves TLS"),
        "plaintext client against a TLS node: {err}"
    );
    let (ok, _, err) = levee(&["get", "b", "k", "--addr", &https]);
    assert!(!ok && err.contains("--tls-ca"), "{err}");
    let (ok, _, err) = levee(&[
        "get",
        "b",
        "k",
        "--addr",
        &format!("http://{}", tls.addr),
        "--tls-ca",
        &ca,
    ]);
    assert!(!ok && err.contains("http://"), "{err}");
    let other = pki.s("other-ca.crt");
    let (ok, _, err) = levee(&["get", "b", "k", "--addr", &tls.addr, "--tls-ca", &other]);
    assert!(!ok && err.contains("cannot connect"), "{err}");
    let (ok, _, err) = levee(&[
        "get",
        "b",
        "k",
        "--addr",
        &tls.addr,
        "--tls-ca",
        "/nonexistent/ca.crt",
    ]);
    assert!(!ok && err.contains("/nonexistent/ca.crt"), "{err}");
    let (ok, _, err) = levee(&[
        "get",
        "b",
        "k",
        "--addr",
        &tls.addr,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cert,
    ]);
    assert!(!ok && err.contains("without a private key"), "{err}");

    // Mutual TLS: a client certificate is needed, and the CLI presents one.
    let (cc, ck) = (pki.s("client.crt"), pki.s("client.key"));
    let (ok, _, err) = levee(&["put", "b", "k", "v", "--addr", &mtls.addr, "--tls-ca", &ca]);
    assert!(
        !ok && err.contains("add --tls-cert"),
        "no client certificate: {err}"
    );
    let (ok, out, err) = levee(&[
        "put",
        "b",
        "k",
        "v",
        "--addr",
        &mtls.addr,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &cc,
        "--tls-key",
        &ck,
    ]);
    assert!(ok, "{out}{err}");
    // Through the environment, as a CronJob would set it.
    let stats = |cert_var: &str, key_var: &str| {
        Command::new(env!("CARGO_BIN_EXE_levee"))
            .args(["admin", "stats", "--timeout", "5"])
            .env("LEVEE_ADDR", &mtls.addr)
            .env("LEVEE_TLS_CA", &ca)
            .env(cert_var, &cc)
            .env(key_var, &ck)
            .output()
            .unwrap()
    };
    let out = stats("LEVEE_CLIENT_TLS_CERT", "LEVEE_CLIENT_TLS_KEY");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("puts"));
    // LEVEE_TLS_CERT named `serve`'s certificate as well; client commands no longer read it,
    // and say which variables they do read.
    let out = stats("LEVEE_TLS_CERT", "LEVEE_TLS_KEY");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("LEVEE_CLIENT_TLS_CERT"),
        "{err}"
    );
}

/// `serve` takes its certificate from LEVEE_SERVER_TLS_CERT / _KEY, and still from the former
/// LEVEE_TLS_CERT / _KEY, with a deprecation warning in its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_reads_its_certificate_from_the_server_variables() {
    let pki = Pki::new();
    let (cert, key) = (pki.s("node.crt"), pki.s("node.key"));
    for (cert_var, key_var, deprecated) in [
        ("LEVEE_SERVER_TLS_CERT", "LEVEE_SERVER_TLS_KEY", false),
        ("LEVEE_TLS_CERT", "LEVEE_TLS_KEY", true),
    ] {
        let data = tempfile::tempdir().unwrap();
        let node = Node::start_with_env(
            data.path(),
            &[],
            &[(cert_var, cert.as_str()), (key_var, key.as_str())],
        );
        let client = Client {
            ca: Some(&pki.p("ca.crt")),
            ..Default::default()
        };
        roundtrip(&node.addr, client)
            .await
            .unwrap_or_else(|e| panic!("TLS from {cert_var}: {e}"));
        let log = std::fs::read_to_string(&node.stderr).unwrap();
        assert_eq!(
            log.contains("LEVEE_TLS_CERT is deprecated")
                && log.contains("LEVEE_TLS_KEY is deprecated"),
            deprecated,
            "{log}"
        );
    }
}

#[test]
fn bad_tls_files_stop_the_node_before_it_opens_anything() {
    let pki = Pki::new();
    std::fs::write(pki.p("garbage.crt"), "not a certificate\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let serve = |tls: &[&str]| {
        let mut args = vec![
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ];
        args.extend(["--data-dir", d]);
        args.extend(tls);
        let (ok, out, err) = levee(&args);
        assert!(
            !ok && !out.contains("serving"),
            "started with {tls:?}: {out}{err}"
        );
        err
    };
    let (cert, key) = (pki.s("node.crt"), pki.s("node.key"));
    let err = serve(&["--tls-cert", &cert]);
    assert!(
        err.contains(&cert) && err.contains("without a private key"),
        "{err}"
    );
    let err = serve(&["--tls-key", &key]);
    assert!(
        err.contains(&key) && err.contains("without a certificate"),
        "{err}"
    );
    let err = serve(&["--tls-cert", &cert, "--tls-key", "/nonexistent/tls.key"]);
    assert!(
        err.contains("cannot read TLS private key file /nonexistent/tls.key"),
        "{err}"
    );
    let garbage = pki.s("garbage.crt");
    let err = serve(&["--tls-cert", &garbage, "--tls-key", &key]);
    assert!(
        err.contains(&garbage) && err.contains("no certificate"),
        "{err}"
    );
    let err = serve(&["--tls-cert", &cert, "--tls-key", &pki.s("intruder.key")]);
    assert!(err.contains("does not belong to the certificate"), "{err}");
    let err = serve(&[
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &garbage,
    ]);
    assert!(err.contains("client CA") && err.contains(&garbage), "{err}");
    assert!(!data.exists(), "no store was created");
}

/// Replace `to` with a copy of `from` in one rename.
fn replace_file(from: &Path, to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn renewed_certificates_are_served_without_a_restart() {
    let pki = Pki::new();
    let data = tempfile::tempdir().unwrap();
    // The files the node reads, as in the operator's mounted Secret.
    let tls = data.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    std::fs::copy(pki.p("node.crt"), tls.join("tls.crt")).unwrap();
    std::fs::copy(pki.p("node.key"), tls.join("tls.key")).unwrap();
    let cfg = data.path().join("levee.toml");
    std::fs::write(
        &cfg,
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nreload_interval_secs = 1\n",
            tls.join("tls.crt"),
            tls.join("tls.key")
        ),
    )
    .unwrap();
    let node = Node::start(
        &data.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let (ca, other) = (pki.p("ca.crt"), pki.p("other-ca.crt"));
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // A connection made before the renewal.
    let before = Channel::from_shared(format!("https://{}", node.addr))
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(std::fs::read(&ca).unwrap())),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();

    // Renewal by another CA, key first. Each file is replaced by a rename, as the kubelet swaps a
    // mounted Secret, so the node never reads a half-written file. The node sees a key that does
    // not match its certificate, says so, and keeps serving the previous certificate.
    replace_file(&pki.p("intruder.key"), &tls.join("tls.key"));
    node.wait_for_log("does not belong to the certificate");
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        },
    )
    .await
    .expect("the previous certificate is served while the pair does not match");
    replace_file(&pki.p("intruder.crt"), &tls.join("tls.crt"));
    // The reload logs this line once it has swapped the configuration in.
    node.wait_for_log("TLS files changed");
    roundtrip(
        &node.addr,
        Client {
            ca: Some(&other),
            ..Default::default()
        },
    )
    .await
    .expect("the renewed certificate is served after the reload");
    // New connections get the new certificate; the old connection keeps working.
    assert!(roundtrip(
        &node.addr,
        Client {
            ca: Some(&ca),
            ..Default::default()
        }
    )
    .await
    .is_err());
    KvClient::new(before)
        .put(put("tls", "old-connection", b"v", vec![]))
        .await
        .unwrap();
}
