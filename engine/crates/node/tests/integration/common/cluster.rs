//! The local-cluster harness (hack/local-cluster.sh) from the tests: run its commands with this
//! build's `levee`, and stop the cluster however a test ends.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use levee_cluster::{decode_siblings, SiblingSet};
use levee_proto::v1 as pb;
use pb::node_client::NodeClient;

fn harness() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../hack/local-cluster.sh")
}

/// Runs `local-cluster.sh args...`; its stdout (for `up`/`start`: one "name address metrics pid"
/// line per node). Panics with its output when it fails.
pub fn run(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(harness())
        .args(args)
        .env("LEVEE_BIN", env!("CARGO_BIN_EXE_levee"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "local-cluster.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Stops the cluster in this directory when dropped.
pub struct Down(pub PathBuf);
impl Drop for Down {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(harness())
            .args(["down", self.0.to_str().unwrap()])
            .status();
    }
}

/// The preflist of (b, key) as the members report their ring: (partition, gRPC address of its
/// owner) for each of its n_val partitions.
pub async fn preflist(addrs: &[(String, String)], key: &str) -> Vec<(u32, String)> {
    let mut admin = pb::admin_client::AdminClient::connect(format!("http://{}", addrs[0].1))
        .await
        .unwrap();
    let m = admin
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner();
    let ring = levee_cluster::RingSize::new(m.ring_size).unwrap();
    let first = levee_cluster::partition_of(b"b", key.as_bytes(), ring);
    (0..m.n_val)
        .map(|i| {
            let p = (first + i) % m.ring_size;
            let owner = &m.owners[p as usize];
            (p, addrs.iter().find(|(n, _)| n == owner).unwrap().1.clone())
        })
        .collect()
}

/// Every replica's sibling set of (b, key), through each node's `Node` service: the preflist
/// partitions of the key, each asked of the node that owns it.
pub async fn replicas(addrs: &[(String, String)], key: &str) -> Vec<SiblingSet> {
    let mut out = Vec::new();
    for (p, addr) in preflist(addrs, key).await {
        let mut node = NodeClient::connect(format!("http://{addr}")).await.unwrap();
        let h = node
            .head_replica(pb::ReplicaKey {
                partition: p,
                bucket: "b".into(),
                key: key.into(),
            })
            .await
            .unwrap()
            .into_inner();
        out.push(decode_siblings(&h.siblings).unwrap());
    }
    out
}

/// Polls until every replica of `key` holds the same non-empty sibling set.
pub async fn converged(addrs: &[(String, String)], key: &str) -> SiblingSet {
    let start = Instant::now();
    loop {
        let sets = replicas(addrs, key).await;
        if !sets[0].is_empty() && sets.iter().all(|s| *s == sets[0]) {
            return sets[0].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "replicas of {key} never converged: {sets:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (name, gRPC address, metrics address) of each node, from the harness's "name address metrics
/// pid" lines.
pub fn nodes_of(out: &str) -> Vec<(String, String, String)> {
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect()
}

/// `up` three nodes in `dir` with ring 16 and n_val 3, and `extra` options: the script's output
/// (a line per node: name, gRPC address, metrics address).
pub fn up3(dir: &str, extra: &[&str]) -> String {
    let mut args = vec!["up", dir, "3", "--ring-size", "16", "--n-val", "3"];
    args.extend_from_slice(extra);
    run(&args)
}

/// `up` three nodes (ring 16, n_val 3, tombstones reapable after 1 s) in `dir`: (name, gRPC
/// address) of each.
pub fn up(dir: &std::path::Path) -> Vec<(String, String)> {
    let out = up3(dir.to_str().unwrap(), &["--delete-delay-secs", "1"]);
    out.lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect()
}
