//! TLS on the gRPC port (rustls, ring provider).
//!
//! The node serves TLS when `[tls] cert_file` and `key_file` are set (or `--tls-cert`/`--tls-key`);
//! with `ca_file` (`--tls-client-ca`) every client must present a certificate signed by that CA
//! (mutual TLS). The files are checked before the node opens anything: a missing, unreadable or
//! unparsable file, a certificate without its key (or the reverse), or a key that does not belong
//! to the certificate stops the node with a [`TlsError`] naming the file.
//!
//! The operator mounts a cert-manager Secret, which cert-manager renews in place (kubelet swaps the
//! files atomically). The node re-reads the files every `reload_interval_secs` and uses the new
//! certificate, key and client CA for new connections; established connections keep theirs. A
//! renewed set that fails the checks is logged and ignored: the node keeps serving the last good one.
//!
//! The same file checks serve the CLI's client side (`--tls-ca`, `--tls-cert`, `--tls-key`).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_rustls::rustls::{
    self,
    crypto::CryptoProvider,
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    sign::{CertifiedKey, SingleCertAndKey},
    RootCertStore, ServerConfig,
};
use tokio_rustls::server::TlsStream;

/// A client that opens a connection and sends nothing is dropped after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a set of TLS files cannot be used. Every variant names the file (or files) at fault.
#[derive(Debug)]
pub enum TlsError {
    /// A certificate is configured without its private key.
    CertWithoutKey { cert: PathBuf },
    /// A private key is configured without its certificate.
    KeyWithoutCert { key: PathBuf },
    /// A client CA is configured, but the node has no certificate to serve TLS with.
    ClientCaWithoutCert { ca: PathBuf },
    /// The file cannot be read.
    Unreadable {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The file is not valid PEM.
    BadPem {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
    /// The file is PEM but holds nothing of the expected kind.
    NothingFound {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    /// The private key is not the key of the certificate.
    KeyMismatch { cert: PathBuf, key: PathBuf },
    /// The contents parse but rustls cannot use them (unsupported key type, not a CA certificate…).
    Unusable {
        what: &'static str,
        path: PathBuf,
        detail: String,
    },
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::CertWithoutKey { cert } => write!(
                f,
                "TLS certificate {} is configured without a private key (set [tls] key_file or --tls-key)",
                cert.display()
            ),
            TlsError::KeyWithoutCert { key } => write!(
                f,
                "TLS private key {} is configured without a certificate (set [tls] cert_file or --tls-cert)",
                key.display()
            ),
            TlsError::ClientCaWithoutCert { ca } => write!(
                f,
                "TLS client CA {} is configured, but no certificate and key to serve TLS with \
                 (set [tls] cert_file and key_file, or --tls-cert and --tls-key)",
                ca.display()
            ),
            TlsError::Unreadable { what, path, source } => {
                write!(f, "cannot read TLS {what} file {}: {source}", path.display())
            }
            TlsError::BadPem { what, path, detail } => {
                write!(f, "TLS {what} file {} is not valid PEM: {detail}", path.display())
            }
            TlsError::NothingFound {
                what,
                path,
                expected,
            } => write!(
                f,
                "TLS {what} file {} holds no {expected}",
                path.display()
            ),
            TlsError::KeyMismatch { cert, key } => write!(
                f,
                "TLS private key {} does not belong to the certificate {}",
                key.display(),
                cert.display()
            ),
            TlsError::Unusable { what, path, detail } => {
                write!(f, "TLS {what} file {} cannot be used: {detail}", path.display())
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsError::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The files a TLS endpoint uses (already checked to come as a pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA of the clients' certificates; `Some` makes client certificates mandatory.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// Pairs up optional settings: `Ok(None)` when none is set (plaintext).
    pub fn from_parts(
        cert: Option<&Path>,
        key: Option<&Path>,
        client_ca: Option<&Path>,
    ) -> Result<Option<TlsFiles>, TlsError> {
        match (cert, key, client_ca) {
            (None, None, None) => Ok(None),
            (Some(cert), None, _) => Err(TlsError::CertWithoutKey { cert: cert.into() }),
            (None, Some(key), _) => Err(TlsError::KeyWithoutCert { key: key.into() }),
            (None, None, Some(ca)) => Err(TlsError::ClientCaWithoutCert { ca: ca.into() }),
            (Some(cert), Some(key), ca) => Ok(Some(TlsFiles {
                cert: cert.into(),
                key: key.into(),
                client_ca: ca.map(Into::into),
            })),
        }
    }
}

/// Reads a file, naming it in the error.
pub fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Unreadable {
        what,
        path: path.into(),
        source,
    })
}

/// Every certificate of a PEM file (at least one).
pub fn parse_certs(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            what,
            path: path.into(),
            detail: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NothingFound {
            what,
            path: path.into(),
            expected: "certificate (-----BEGIN CERTIFICATE-----)",
        });
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1; not encrypted).
pub fn parse_key(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NothingFound {
            what,
            path: path.into(),
            expected: "unencrypted private key (PKCS#8, PKCS#1 or SEC1 PEM)",
        },
        e => TlsError::BadPem {
            what,
            path: path.into(),
            detail: e.to_string(),
        },
    })
}

/// A trust store from a PEM file of CA certificates.
pub fn parse_roots(what: &'static str, path: &Path, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(what, path, pem)? {
        roots.add(cert).map_err(|e| TlsError::Unusable {
            what,
            path: path.into(),
            detail: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// A certificate chain and its private key, checked to belong together.
pub fn certified_key(
    provider: &CryptoProvider,
    (cert_what, cert_path, cert_pem): (&'static str, &Path, &[u8]),
    (key_what, key_path, key_pem): (&'static str, &Path, &[u8]),
) -> Result<CertifiedKey, TlsError> {
    let chain = parse_certs(cert_what, cert_path, cert_pem)?;
    let key = parse_key(key_what, key_path, key_pem)?;
    let signing_key =
        provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| TlsError::Unusable {
                what: key_what,
                path: key_path.into(),
                detail: e.to_string(),
            })?;
    let ck = CertifiedKey::new(chain, signing_key);
    match ck.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch {
                cert: cert_path.into(),
                key: key_path.into(),
            })
        }
        Err(e) => Err(TlsError::Unusable {
            what: cert_what,
            path: cert_path.into(),
            detail: e.to_string(),
        }),
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The current contents of the files (the reload compares them).
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Contents {
    fn read(files: &TlsFiles) -> Result<Contents, TlsError> {
        Ok(Contents {
            cert: read_file("certificate", &files.cert)?,
            key: read_file("private key", &files.key)?,
            client_ca: files
                .client_ca
                .as_deref()
                .map(|p| read_file("client CA", p))
                .transpose()?,
        })
    }

    fn server_config(&self, files: &TlsFiles) -> Result<ServerConfig, TlsError> {
        let provider = provider();
        let ck = certified_key(
            &provider,
            ("certificate", &files.cert, &self.cert),
            ("private key", &files.key, &self.key),
        )?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Unusable {
                what: "certificate",
                path: files.cert.clone(),
                detail: e.to_string(),
            })?;
        let builder = match (&files.client_ca, &self.client_ca) {
            (Some(path), Some(pem)) => {
                let roots = parse_roots("client CA", path, pem)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| TlsError::Unusable {
                            what: "client CA",
                            path: path.clone(),
                            detail: e.to_string(),
                        })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(ck)));
        // gRPC is HTTP/2; tonic's client insists on negotiating it.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// Reads and checks the files, returning the server configuration they make.
pub fn load_server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    Contents::read(files)?.server_config(files)
}

/// Expiry (Unix seconds) of the first certificate in a PEM chain: the one the node presents.
pub fn leaf_expiry(pem: &[u8]) -> Option<f64> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let cert = block.parse_x509().ok()?;
    Some(cert.validity().not_after.timestamp() as f64)
}

/// Where the expiry of the served certificate is published (the metrics' gauge).
pub type ExpirySink = Arc<RwLock<Option<f64>>>;

/// The node's TLS state: the configuration new connections get, refreshed from the files.
pub struct ServerTls {
    files: TlsFiles,
    reload_interval: Duration,
    current: RwLock<(Arc<ServerConfig>, Arc<Contents>)>,
    expiry_sink: RwLock<Option<ExpirySink>>,
}

impl ServerTls {
    pub fn load(files: TlsFiles, reload_interval: Duration) -> Result<ServerTls, TlsError> {
        let contents = Contents::read(&files)?;
        let config = contents.server_config(&files)?;
        Ok(ServerTls {
            files,
            reload_interval,
            current: RwLock::new((Arc::new(config), Arc::new(contents))),
            expiry_sink: RwLock::new(None),
        })
    }

    /// Keep `sink` set to the expiry of the certificate served now (and after every reload).
    pub fn publish_expiry(&self, sink: ExpirySink) {
        *sink.write() = leaf_expiry(&self.current.read().1.cert);
        *self.expiry_sink.write() = Some(sink);
    }

    pub fn describe(&self) -> String {
        let f = &self.files;
        let clients = match &f.client_ca {
            Some(ca) => format!("client certificates required (CA {})", ca.display()),
            None => "no client certificates".to_string(),
        };
        let reload = if self.reload_interval.is_zero() {
            "not reloaded".to_string()
        } else {
            format!("re-read every {} s", self.reload_interval.as_secs())
        };
        format!(
            "TLS on gRPC: certificate {}, key {}, {clients}; files {reload}",
            f.cert.display(),
            f.key.display()
        )
    }

    fn config(&self) -> Arc<ServerConfig> {
        self.current.read().0.clone()
    }

    /// Re-reads the files; swaps in a new configuration when they changed and pass the checks.
    /// Returns whether the configuration changed.
    fn reload(&self) -> Result<bool, TlsError> {
        let contents = Contents::read(&self.files)?;
        if *self.current.read().1 == contents {
            return Ok(false);
        }
        let config = contents.server_config(&self.files)?;
        if let Some(sink) = &*self.expiry_sink.read() {
            *sink.write() = leaf_expiry(&contents.cert);
        }
        *self.current.write() = (Arc::new(config), Arc::new(contents));
        Ok(true)
    }

    /// Re-reads the files every `reload_interval` until `stop`.
    pub async fn watch(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        if self.reload_interval.is_zero() {
            return;
        }
        let mut last_error = String::new();
        loop {
            tokio::select! {
                _ = stopped(&mut stop) => return,
                _ = tokio::time::sleep(self.reload_interval) => {}
            }
            let this = self.clone();
            let result = tokio::task::spawn_blocking(move || this.reload()).await;
            match result {
                Ok(Ok(true)) => {
                    last_error.clear();
                    log::info!(
                        "TLS files changed: new connections use the certificate in {}",
                        self.files.cert.display()
                    );
                }
                Ok(Ok(false)) => last_error.clear(),
                Ok(Err(e)) => {
                    let msg = e.to_string();
                    if msg != last_error {
                        log::warn!("{msg}; still serving the previous TLS certificate");
                        last_error = msg;
                    }
                }
                Err(e) => log::warn!("TLS reload task failed: {e}"),
            }
        }
    }

    /// Accepts TCP connections on `listener` and yields them once their TLS handshake completed,
    /// until `stop` (or until the receiver is dropped). Handshakes run concurrently, each bounded by
    /// a timeout, so a slow or silent client does not hold up the others.
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
        keepalive: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> tokio_stream::wrappers::ReceiverStream<io::Result<TlsStream<TcpStream>>> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    _ = stopped(&mut stop) => return,
                    _ = tx.closed() => return,
                    r = listener.accept() => match r {
                        Ok(c) => c,
                        Err(e) => {
                            // Out of file descriptors and the like: wait rather than spin.
                            log::warn!("accepting a gRPC connection: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                // As tonic does for plaintext: no Nagle delay on small responses, TCP keepalive.
                let _ = tcp.set_nodelay(true);
                let _ = socket2::SockRef::from(&tcp)
                    .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(keepalive));
                let acceptor = tokio_rustls::TlsAcceptor::from(self.config());
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send(Ok(stream)).await;
                        }
                        // Port probes and clients that hang up: not worth an INFO line each.
                        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                            log::debug!("TLS handshake with {peer}: {e}")
                        }
                        Ok(Err(e)) => log::info!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => log::debug!("TLS handshake with {peer} timed out"),
                    }
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pki {
        dir: tempfile::TempDir,
    }

    /// Writes `ca.crt`, `tls.crt`, `tls.key` (the cert-manager Secret's names), a second CA
    /// `other-ca.crt` and `other.key` (a key of another certificate) into a temp dir.
    fn pki() -> Pki {
        pki_until(4096)
    }

    /// `pki()` whose leaf certificate expires on 1 January of `year`.
    fn pki_until(year: i32) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let mut leaf = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        leaf.not_after = rcgen::date_time_ymd(year, 1, 1);
        let leaf = leaf.signed_by(&leaf_key, &ca, &ca_key).unwrap();
        let other_key = rcgen::KeyPair::generate().unwrap();
        let w = |name: &str, s: String| std::fs::write(dir.path().join(name), s).unwrap();
        w("ca.crt", ca.pem());
        w("tls.crt", leaf.pem());
        w("tls.key", leaf_key.serialize_pem());
        w("other.key", other_key.serialize_pem());
        Pki { dir }
    }

    impl Pki {
        fn p(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
        fn files(&self, ca: bool) -> TlsFiles {
            TlsFiles {
                cert: self.p("tls.crt"),
                key: self.p("tls.key"),
                client_ca: ca.then(|| self.p("ca.crt")),
            }
        }
    }

    #[test]
    fn good_files_make_a_server_config_with_h2() {
        let pki = pki();
        for ca in [false, true] {
            let c = load_server_config(&pki.files(ca)).unwrap();
            assert_eq!(c.alpn_protocols, vec![b"h2".to_vec()]);
        }
    }

    #[test]
    fn pairs_are_checked() {
        let (c, k, a) = (Path::new("/c"), Path::new("/k"), Path::new("/a"));
        assert_eq!(TlsFiles::from_parts(None, None, None).unwrap(), None);
        assert!(matches!(
            TlsFiles::from_parts(Some(c), None, None),
            Err(TlsError::CertWithoutKey { cert }) if cert == c
        ));
        assert!(matches!(
            TlsFiles::from_parts(None, Some(k), Some(a)),
            Err(TlsError::KeyWithoutCert { key }) if key == k
        ));
        assert!(matches!(
            TlsFiles::from_parts(None, None, Some(a)),
            Err(TlsError::ClientCaWithoutCert { ca }) if ca == a
        ));
        assert!(TlsFiles::from_parts(Some(c), Some(k), None)
            .unwrap()
            .is_some());
    }

    #[test]
    fn bad_files_are_named_in_typed_errors() {
        let pki = pki();
        let err = |f: TlsFiles| {
            let e = load_server_config(&f).unwrap_err();
            (e.to_string(), e)
        };
        // Missing file.
        let (msg, e) = err(TlsFiles {
            key: pki.p("nope.key"),
            ..pki.files(false)
        });
        assert!(
            matches!(
                e,
                TlsError::Unreadable {
                    what: "private key",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            msg.contains("nope.key") && msg.contains("No such file"),
            "{msg}"
        );
        // A directory instead of a file.
        let (msg, e) = err(TlsFiles {
            cert: pki.p(""),
            ..pki.files(false)
        });
        assert!(
            matches!(
                e,
                TlsError::Unreadable {
                    what: "certificate",
                    ..
                }
            ),
            "{msg}"
        );
        // Not PEM at all, and PEM without a certificate.
        std::fs::write(pki.p("garbage.crt"), "hello, not a certificate\n").unwrap();
        let (msg, e) = err(TlsFiles {
            cert: pki.p("garbage.crt"),
            ..pki.files(false)
        });
        assert!(matches!(e, TlsError::NothingFound { .. }), "{e:?}");
        assert!(
            msg.contains("garbage.crt") && msg.contains("no certificate"),
            "{msg}"
        );
        let (msg, e) = err(TlsFiles {
            cert: pki.p("tls.key"),
            ..pki.files(false)
        });
        assert!(
            matches!(
                e,
                TlsError::NothingFound {
                    what: "certificate",
                    ..
                }
            ),
            "{msg}"
        );
        // A certificate where the key should be.
        let (msg, e) = err(TlsFiles {
            key: pki.p("tls.crt"),
            ..pki.files(false)
        });
        assert!(
            matches!(
                e,
                TlsError::NothingFound {
                    what: "private key",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("tls.crt") && msg.contains("private key"),
            "{msg}"
        );
        // Broken base64 inside the markers.
        std::fs::write(
            pki.p("broken.crt"),
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let (msg, e) = err(TlsFiles {
            cert: pki.p("broken.crt"),
            ..pki.files(false)
        });
        assert!(matches!(e, TlsError::BadPem { .. }), "{e:?}");
        assert!(
            msg.contains("broken.crt") && msg.contains("not valid PEM"),
            "{msg}"
        );
        // The key of another certificate.
        let (msg, e) = err(TlsFiles {
            key: pki.p("other.key"),
            ..pki.files(false)
        });
        assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e:?}");
        assert!(
            msg.contains("other.key") && msg.contains("tls.crt"),
            "{msg}"
        );
        // An empty client CA file.
        std::fs::write(pki.p("empty.crt"), "").unwrap();
        let (msg, e) = err(TlsFiles {
            client_ca: Some(pki.p("empty.crt")),
            ..pki.files(true)
        });
        assert!(
            matches!(
                e,
                TlsError::NothingFound {
                    what: "client CA",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(msg.contains("empty.crt"), "{msg}");
    }

    #[test]
    fn reload_swaps_in_changed_files_and_keeps_the_old_ones_when_bad() {
        let pki = pki();
        let tls = ServerTls::load(pki.files(false), Duration::from_secs(1)).unwrap();
        assert!(!tls.reload().unwrap(), "unchanged files: nothing to do");
        let before = tls.config();
        // A half-written renewal (new certificate, old key): refused, the old config stays.
        let fresh = self::pki();
        std::fs::copy(fresh.p("tls.crt"), pki.p("tls.crt")).unwrap();
        assert!(matches!(tls.reload(), Err(TlsError::KeyMismatch { .. })));
        assert!(Arc::ptr_eq(&before, &tls.config()));
        // The key arrives: swapped.
        std::fs::copy(fresh.p("tls.key"), pki.p("tls.key")).unwrap();
        assert!(tls.reload().unwrap());
        assert!(!Arc::ptr_eq(&before, &tls.config()));
    }

    #[test]
    fn the_served_certificates_expiry_is_published_and_follows_a_renewal() {
        // 2030-01-01 and 2031-01-01 00:00:00 UTC.
        let (y2030, y2031) = (1_893_456_000.0, 1_924_992_000.0);
        let pki = pki_until(2030);
        let tls = ServerTls::load(pki.files(false), Duration::from_secs(1)).unwrap();
        let sink: ExpirySink = Arc::new(RwLock::new(None));
        tls.publish_expiry(sink.clone());
        assert_eq!(*sink.read(), Some(y2030));
        // A renewal (certificate and key replaced) moves the published expiry with it.
        let renewed = pki_until(2031);
        for f in ["tls.crt", "tls.key"] {
            std::fs::copy(renewed.p(f), pki.p(f)).unwrap();
        }
        assert!(tls.reload().unwrap());
        assert_eq!(*sink.read(), Some(y2031));
        assert_eq!(leaf_expiry(b"not a certificate"), None);
    }
}
