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

/// The member list and claim the node at `addr` reports (Admin.Members).
async fn members_of(addr: &str) -> pb::MembersResponse {
    let mut admin = pb::admin_client::AdminClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    admin
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// The preflist of (b, key) as the members report their ring: (partition, gRPC address of its
/// owner) for each of its n_val partitions.
pub async fn preflist(addrs: &[(String, String)], key: &str) -> Vec<(u32, String)> {
    let m = members_of(&addrs[0].1).await;
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

/// The index field the tests give their keys: `n_int` = the key's number modulo 50.
pub const INDEX_FIELD: &str = "n_int";

/// The `INDEX_FIELD` change that adds term `t`.
pub fn index_add(t: i64) -> pb::IndexChange {
    index_change(pb::index_change::Op::Add, t)
}

/// The `INDEX_FIELD` change that removes term `t`.
pub fn index_remove(t: i64) -> pb::IndexChange {
    index_change(pb::index_change::Op::Remove, t)
}

fn index_change(op: pb::index_change::Op, t: i64) -> pb::IndexChange {
    pb::IndexChange {
        op: op as i32,
        field: INDEX_FIELD.into(),
        term: Some(pb::Term {
            kind: Some(pb::term::Kind::Int(t)),
        }),
    }
}

type Entries = std::collections::BTreeSet<(i64, String)>;

/// A vnode's `INDEX_FIELD` entries of bucket `b`, from its index (IndexPage).
async fn vnode_index(node: &mut NodeClient<tonic::transport::Channel>, p: u32) -> Entries {
    let int = |i| {
        Some(pb::Term {
            kind: Some(pb::term::Kind::Int(i)),
        })
    };
    let mut entries = Entries::new();
    let mut after = None;
    loop {
        let page = node
            .index_page(pb::IndexPageRequest {
                partition: p,
                bucket: "b".into(),
                field: INDEX_FIELD.into(),
                start: int(i64::MIN),
                end: int(i64::MAX),
                after: after.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for r in page.results {
            let Some(pb::term::Kind::Int(t)) = r.term.and_then(|t| t.kind) else {
                panic!("p{p}: an entry without an integer term");
            };
            entries.insert((t, String::from_utf8(r.key).unwrap()));
        }
        match page.last {
            Some(l) => after = Some(l),
            None => return entries,
        }
    }
}

/// The `INDEX_FIELD` entries of bucket `b` the objects a vnode holds carry (each live sibling's
/// entries, from FoldObjects): what its index must hold.
async fn vnode_object_entries(
    node: &mut NodeClient<tonic::transport::Channel>,
    p: u32,
    ring: u32,
) -> Entries {
    let mut entries = Entries::new();
    let mut after = None;
    loop {
        let page = node
            .fold_objects(pb::FoldObjectsRequest {
                partition: p,
                key_partitions: (0..ring).collect(),
                after: after.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        for o in page.objects.iter().filter(|o| o.bucket == b"b") {
            let key = String::from_utf8(o.key.clone()).unwrap();
            for c in levee_cluster::decode_contents(&o.contents).unwrap() {
                for e in c.index.iter().filter(|e| e.field == INDEX_FIELD.as_bytes()) {
                    let levee_cluster::IndexTerm::Int(t) = e.term else {
                        panic!("{key}: a binary term in {INDEX_FIELD}");
                    };
                    entries.insert((t, key.clone()));
                }
            }
        }
        if page.done {
            return entries;
        }
        after = page.last;
    }
}

/// Checks the index of every vnode of every member in `addrs`:
///
/// * each holds exactly the entries of the objects it holds — none missing (an object that
///   arrived by read repair, handoff, a transfer or a rebuild without its entries) and none extra
///   (an entry left behind by an object that was handed away or superseded);
/// * the replicas of each key in `terms` (the owners in its preflist) hold exactly the terms
///   given for it (those of its live values).
///
/// Returns the differences found, empty when there are none.
pub async fn index_mismatches(
    addrs: &[(String, String)],
    terms: &std::collections::BTreeMap<String, std::collections::BTreeSet<i64>>,
) -> Vec<String> {
    let ring = members_of(&addrs[0].1).await.ring_size;
    let mut out = Vec::new();
    let mut held = std::collections::BTreeMap::new();
    for (name, addr) in addrs {
        let mut node = NodeClient::connect(format!("http://{addr}")).await.unwrap();
        for p in 0..ring {
            let index = vnode_index(&mut node, p).await;
            let implied = vnode_object_entries(&mut node, p, ring).await;
            let missing: Vec<_> = implied.difference(&index).take(3).collect();
            let extra: Vec<_> = index.difference(&implied).take(3).collect();
            if !missing.is_empty() || !extra.is_empty() {
                out.push(format!(
                    "{name} p{p}: index holds {} entries, its objects carry {}; missing e.g. {missing:?}, extra e.g. {extra:?}",
                    index.len(),
                    implied.len()
                ));
            }
            held.insert((addr.clone(), p), index);
        }
    }
    for (k, ts) in terms {
        let want: Entries = ts.iter().map(|t| (*t, k.clone())).collect();
        for (p, addr) in preflist(addrs, k).await {
            let have: Entries = held[&(addr.clone(), p)]
                .iter()
                .filter(|(_, key)| key == k)
                .cloned()
                .collect();
            if have != want {
                out.push(format!(
                    "{k} on {addr} p{p}: entries {have:?}, want {want:?}"
                ));
            }
        }
    }
    out
}
