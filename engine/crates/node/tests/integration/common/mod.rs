//! Helpers shared by the integration tests: a real `levee serve` process on port 0 and request
//! builders.
#![allow(dead_code)] // each test crate uses its own subset

pub mod certs;
pub mod cluster;
pub mod history;
pub mod load;
pub mod proxy;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use levee_proto::v1 as pb;
use pb::admin_client::AdminClient;
use pb::kv_client::KvClient;
use tonic::transport::Channel;

/// A running `levee serve`, killed (SIGKILL) and reaped on drop.
pub struct Node {
    pub child: Child,
    /// `http://host:port` of the gRPC listener.
    pub grpc: String,
    /// `host:port` of the gRPC listener (for TLS clients and the CLI).
    pub addr: String,
    /// `host:port` of the metrics listener.
    pub metrics: String,
    /// File holding the server's stderr (its log).
    pub stderr: PathBuf,
}

impl Node {
    /// Starts a node on port 0 (8 vnodes, 1024 AAE segments) with data in `dir` and waits for its
    /// startup line.
    pub fn start(dir: &Path, extra: &[&str]) -> Node {
        Node::start_with_env(dir, extra, &[])
    }

    /// As `start`, with these environment variables set for the server.
    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let stderr = dir.with_extension(format!("stderr.{}", std::process::id()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_levee"))
            .envs(env.iter().copied())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--ring-size",
                "8",
            ])
            .args(["--aae-segments", "1024", "--data-dir"])
            .arg(dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grab = |after: &str| {
            let rest = line.split(after).nth(1).unwrap_or_else(|| {
                panic!(
                    "no `{after}` in startup line {line:?}; stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
            rest.split([',', ' ']).next().unwrap().to_string()
        };
        let addr = grab("gRPC on ");
        Node {
            grpc: format!("http://{addr}"),
            addr,
            metrics: grab("metrics on "),
            child,
            stderr,
        }
    }

    pub async fn kv(&self) -> KvClient<Channel> {
        KvClient::connect(self.grpc.clone()).await.unwrap()
    }

    pub async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::connect(self.grpc.clone()).await.unwrap()
    }

    /// The body of `/metrics` (Prometheus text).
    pub fn metrics_text(&self) -> String {
        self.http_get("/metrics").unwrap()
    }

    /// The whole HTTP/1.0 response (status line, headers, body) to a GET of `path` on the
    /// metrics port.
    pub fn http_get(&self, path: &str) -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&self.metrics)?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
        let mut response = String::new();
        s.read_to_string(&mut response)?;
        Ok(response)
    }

    /// Every metric family the node exports, name → type, from the `# TYPE` lines.
    pub fn metric_types(&self) -> BTreeMap<String, String> {
        self.metrics_text()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').unwrap();
                (name.to_string(), kind.to_string())
            })
            .collect()
    }

    /// The `Stats` RPC's counters of each vnode, in partition order.
    pub async fn vnode_counters(&self) -> Vec<HashMap<String, f64>> {
        let r = self
            .admin()
            .await
            .stats(pb::StatsRequest {})
            .await
            .unwrap()
            .into_inner();
        let mut v: Vec<(u32, HashMap<String, f64>)> = r
            .vnodes
            .into_iter()
            .map(|s| (s.partition, s.counters))
            .collect();
        v.sort_by_key(|(p, _)| *p);
        v.into_iter().map(|(_, c)| c).collect()
    }

    pub fn scrape(&self) -> HashMap<String, f64> {
        let body = self.metrics_text();
        let mut out = HashMap::new();
        for l in body
            .lines()
            .filter(|l| l.starts_with("levee_") || l.starts_with("process_"))
        {
            if let Some((name, value)) = l.rsplit_once(' ') {
                let name = name.split('{').next().unwrap().to_string();
                *out.entry(name).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        out
    }

    /// Waits (up to 5 s) until the node's log contains `text`; panics with the log otherwise.
    pub fn wait_for_log(&self, text: &str) {
        let start = std::time::Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            if log.contains(text) {
                return;
            }
            if start.elapsed() > std::time::Duration::from_secs(5) {
                panic!("`{text}` not in the node's log:\n{log}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: i32) {
        unsafe {
            libc_kill(self.child.id() as i32, sig);
        }
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}
pub const SIGTERM: i32 = 15;

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The log lives beside the data directory, outside its temporary directory: removed
        // here, or the runs leave one file per node in /tmp. Kept when the test failed.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.stderr);
        }
    }
}

pub fn put(bucket: &str, key: &str, value: &[u8], idx: Vec<pb::IndexChange>) -> pb::PutRequest {
    pb::PutRequest {
        bucket: bucket.into(),
        key: key.into(),
        value: value.to_vec(),
        metadata: b"vv".to_vec(),
        index_changes: idx,
        ..Default::default()
    }
}

pub fn int_term(i: i64) -> Option<pb::Term> {
    Some(pb::Term {
        kind: Some(pb::term::Kind::Int(i)),
    })
}

pub fn add_int(field: &str, i: i64) -> pb::IndexChange {
    pb::IndexChange {
        op: pb::index_change::Op::Add as i32,
        field: field.into(),
        term: int_term(i),
    }
}
