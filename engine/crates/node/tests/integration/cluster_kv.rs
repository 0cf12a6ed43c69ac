//! The client API on a cluster of three real `levee serve` processes (local-cluster harness,
//! n_val 3): any node takes any request for any key, reads see writes made through other nodes,
//! concurrent writes under the `siblings` policy come back as siblings with one context that
//! resolves them, the default (`lww`) type keeps the latest, deletes reach every replica and are
//! reaped after the delete delay, a read repairs a replica that missed a write, and coverage
//! queries answer every key once.

use crate::common;

use common::cluster::{converged, replicas, run, up, Down};
use levee_proto::v1 as pb;
use pb::kv_client::KvClient;
use tonic::transport::Channel;
use tonic::Code;

fn quorum(n: u32) -> Option<pb::Quorum> {
    Some(pb::Quorum {
        value: Some(pb::quorum::Value::Count(n)),
    })
}

fn put(bt: &str, key: &str, value: &str, context: &[u8]) -> pb::PutRequest {
    pb::PutRequest {
        bucket: "b".into(),
        key: key.into(),
        value: value.into(),
        context: context.to_vec(),
        bucket_type: bt.into(),
        ..Default::default()
    }
}

fn get(bt: &str, key: &str) -> pb::GetRequest {
    pb::GetRequest {
        bucket: "b".into(),
        key: key.into(),
        bucket_type: bt.into(),
        ..Default::default()
    }
}

/// Every live value a GET returned (`value` alone when there is one).
fn values(r: &pb::GetResponse) -> Vec<String> {
    if r.siblings.is_empty() {
        return vec![String::from_utf8(r.value.clone()).unwrap()];
    }
    assert!(r.siblings.len() > 1, "a lone sibling was sent twice: {r:?}");
    let mut v: Vec<String> = r
        .siblings
        .iter()
        .map(|s| String::from_utf8(s.value.clone()).unwrap())
        .collect();
    v.sort();
    v
}

async fn kv(addr: &str) -> KvClient<Channel> {
    KvClient::connect(format!("http://{addr}")).await.unwrap()
}

/// The address of the member owning the first partition of (b, key)'s preflist, and that
/// partition.
async fn first_replica(nodes: &[(String, String)], key: &str) -> (String, u32) {
    let m = pb::admin_client::AdminClient::connect(format!("http://{}", nodes[0].1))
        .await
        .unwrap()
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner();
    let ring = levee_cluster::RingSize::new(m.ring_size).unwrap();
    let p = levee_cluster::partition_of(b"b", key.as_bytes(), ring);
    let owner = &m.owners[p as usize];
    let addr = nodes.iter().find(|(n, _)| n == owner).unwrap().1.clone();
    (addr, p)
}

/// A KV client of each node.
async fn clients(nodes: &[(String, String)]) -> Vec<KvClient<Channel>> {
    let mut c = Vec::new();
    for (_, a) in nodes {
        c.push(kv(a).await);
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_serves_any_key_with_siblings_contexts_lww_deletes_and_read_repair() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(dir.clone());
    let nodes = up(&dir);
    let mut c = clients(&nodes).await;

    // Written through n1, read through n2 and n3; every replica holds it.
    let p = c[0]
        .put(put("", "k", "v1", &[]))
        .await
        .unwrap()
        .into_inner();
    assert!(!p.context.is_empty());
    for kvc in c.iter_mut() {
        let g = kvc.get(get("", "k")).await.unwrap().into_inner();
        assert_eq!((g.value.as_slice(), values(&g).len()), (&b"v1"[..], 1));
    }
    assert_eq!(converged(&nodes, "k").await.len(), 1);

    // The AAE tree and segment keys of a vnode, from its owner's Node service (what replicas
    // exchange), agree with its Admin service; the key is in its segment.
    let (owner, p) = first_replica(&nodes, "k").await;
    let mut node = pb::node_client::NodeClient::connect(format!("http://{owner}"))
        .await
        .unwrap();
    let mut admin = pb::admin_client::AdminClient::connect(format!("http://{owner}"))
        .await
        .unwrap();
    // (the store folds writes into its tree in the background: wait for it)
    let since = std::time::Instant::now();
    let t = loop {
        let t = node
            .aae_tree(pb::AaeTreeRequest { partition: p })
            .await
            .unwrap()
            .into_inner();
        if t.root != 0 || since.elapsed() > std::time::Duration::from_secs(5) {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let a = admin
        .aae_tree(pb::AaeTreeRequest { partition: p })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((t.root, t.segment_count), (a.root, a.segment_count));
    assert_ne!(t.root, 0, "the vnode holds k");
    let seg = levee_store::aae_segment(b"b", b"k", t.segment_count);
    let keys = node
        .aae_segment_keys(pb::AaeSegmentKeysRequest {
            partition: p,
            segments: vec![seg],
        })
        .await
        .unwrap()
        .into_inner()
        .keys;
    assert!(keys.iter().any(|k| k.key == b"k"), "{keys:?}");
    // A segment beyond the tree (a caller assuming a bigger tree) is refused, not answered empty.
    let err = node
        .aae_segment_keys(pb::AaeSegmentKeysRequest {
            partition: p,
            segments: vec![seg, t.segment_count],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("is beyond this tree's"), "{err}");

    // Default type (lww): blind writes through two nodes leave one value, the later one.
    c[1].put(put("", "k", "v2", &[])).await.unwrap();
    c[2].put(put("", "k", "v3", &[])).await.unwrap();
    let g = c[0].get(get("", "k")).await.unwrap().into_inner();
    assert_eq!(values(&g), ["v3"]);

    // "siblings" type: blind writes through three nodes are concurrent: all three come back,
    // through any node, with one context; a write with that context replaces them all.
    for (i, v) in ["a", "b", "c"].iter().enumerate() {
        c[i].put(put("siblings", "s", v, &[])).await.unwrap();
    }
    let g = c[1].get(get("siblings", "s")).await.unwrap().into_inner();
    assert_eq!(values(&g), ["a", "b", "c"], "{g:?}");
    let r = c[2]
        .put(pb::PutRequest {
            return_body: true,
            ..put("siblings", "s", "resolved", &g.context)
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.siblings.len(), 1);
    for kvc in c.iter_mut() {
        let g = kvc.get(get("siblings", "s")).await.unwrap().into_inner();
        assert_eq!(values(&g), ["resolved"]);
    }
    // A write with a stale context (it saw only "a"... here: the first GET's) is concurrent with
    // the resolution: a sibling, not a silent overwrite.
    c[0].put(put("siblings", "s", "stale", &g.context))
        .await
        .unwrap();
    let g2 = c[0].get(get("siblings", "s")).await.unwrap().into_inner();
    assert_eq!(values(&g2), ["resolved", "stale"]);

    // A delete (blind: it reads the context first) reaches every node; the NOT_FOUND carries
    // the delete's context.
    c[1].delete(pb::DeleteRequest {
        bucket: "b".into(),
        key: "s".into(),
        bucket_type: "siblings".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    for kvc in c.iter_mut() {
        let e = kvc.get(get("siblings", "s")).await.unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(e.metadata().get_bin("levee-context-bin").is_some());
    }
    assert!(converged(&nodes, "s").await.is_tombstone_only());
    // Tombstone reaping: once the tombstones are older than delete_delay_secs (1 s here) and
    // every primary holds them, a read has every primary drop the key.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let e = c[0].get(get("siblings", "s")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let since = std::time::Instant::now();
    while !replicas(&nodes, "s").await.iter().all(|s| s.is_empty()) {
        assert!(
            since.elapsed() < std::time::Duration::from_secs(5),
            "tombstones of s never reaped: {:?}",
            replicas(&nodes, "s").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let e = c[1].get(get("siblings", "s")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "a reaped key reads as not found");

    // Quorum options are checked: w above n_val is refused before anything is written.
    let e = c[0]
        .put(pb::PutRequest {
            w: quorum(4),
            ..put("", "q", "x", &[])
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("w=4"), "{e:?}");
    let e = c[0].get(get("nosuch", "q")).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(c[0].get(get("", "q")).await.unwrap_err().code() == Code::NotFound);

    // Read repair: a write that reached one replica only (coordinated on it directly, as a
    // coordinator that died before sending it on would leave it) reaches the other two with the
    // next read, through any node.
    c[0].put(put("", "rr", "old", &[])).await.unwrap();
    converged(&nodes, "rr").await;
    let (owner, p) = first_replica(&nodes, "rr").await;
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    pb::node_client::NodeClient::connect(format!("http://{owner}"))
        .await
        .unwrap()
        .coordinate_put(pb::CoordinatePutRequest {
            key: Some(pb::ReplicaKey {
                partition: p,
                bucket: "b".into(),
                key: "rr".into(),
            }),
            value: "new".into(),
            timestamp_us: now_us,
            policy: pb::ConflictPolicy::Lww as i32,
            ..Default::default()
        })
        .await
        .unwrap();
    let sets = replicas(&nodes, "rr").await;
    assert_eq!(
        sets.iter().filter(|s| **s == sets[0]).count(),
        1,
        "only the first replica took the write: {sets:?}"
    );
    // (r=3: at r=2 the two replicas without it may answer first, and rightly win)
    let g = c[2]
        .get(pb::GetRequest {
            r: quorum(3),
            ..get("", "rr")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(g.value, b"new");
    // (under lww the merge may carry both clocks joined; the value is the newest)
    let set = converged(&nodes, "rr").await;
    assert_eq!(set.len(), 1);
    assert_eq!(
        set.siblings()[0].meta,
        sets[0].siblings()[0].meta,
        "repaired to the newest"
    );
}

async fn list(kv: &mut KvClient<Channel>) -> Vec<String> {
    let mut s = kv
        .list_keys(pb::ListKeysRequest {
            bucket: "b".into(),
            page_size: 17,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut keys = Vec::new();
    while let Some(p) = s.message().await.unwrap() {
        keys.extend(p.keys.into_iter().map(|k| String::from_utf8(k).unwrap()));
    }
    keys
}

fn iq(max_results: u32, continuation: Vec<u8>, end: i64) -> pb::IndexQueryRequest {
    let t = |i| {
        Some(pb::Term {
            kind: Some(pb::term::Kind::Int(i)),
        })
    };
    pb::IndexQueryRequest {
        bucket: "b".into(),
        field: "n_int".into(),
        start: t(0),
        end: t(end),
        return_terms: true,
        page_size: 13,
        max_results,
        continuation,
        ..Default::default()
    }
}

/// (term, key) pairs of an index query, and the last page's continuation.
async fn query(
    kv: &mut KvClient<Channel>,
    req: pb::IndexQueryRequest,
) -> (Vec<(i64, String)>, Vec<u8>) {
    let mut s = kv.index_query(req).await.unwrap().into_inner();
    let (mut out, mut cont) = (Vec::new(), Vec::new());
    while let Some(p) = s.message().await.unwrap() {
        for r in p.results {
            let Some(pb::term::Kind::Int(t)) = r.term.unwrap().kind else {
                panic!("int term")
            };
            out.push((t, String::from_utf8(r.key).unwrap()));
        }
        cont = p.continuation;
    }
    (out, cont)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coverage_queries_answer_every_key_once_through_any_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(dir.clone());
    let nodes = up(&dir);
    let mut c = clients(&nodes).await;
    // 150 keys written through the three nodes, each with an index entry n_int = i % 50; and
    // 10 more deleted again (their tombstones must not be listed).
    let mut want = Vec::new();
    for i in 0..160 {
        let k = format!("key{i:03}");
        c[i % 3]
            .put(pb::PutRequest {
                index_changes: vec![pb::IndexChange {
                    op: pb::index_change::Op::Add as i32,
                    field: "n_int".into(),
                    term: Some(pb::Term {
                        kind: Some(pb::term::Kind::Int((i % 50) as i64)),
                    }),
                }],
                w: Some(pb::Quorum {
                    value: Some(pb::quorum::Value::Count(3)),
                }),
                ..put("", &k, "v", &[])
            })
            .await
            .unwrap();
        if i >= 150 {
            c[0].delete(pb::DeleteRequest {
                bucket: "b".into(),
                key: k.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        } else {
            want.push(k);
        }
    }
    for kvc in c.iter_mut() {
        let mut keys = list(kvc).await;
        keys.sort();
        assert_eq!(keys, want, "ListKeys: every live key once");
    }
    // IndexQuery through each node: (term, key) order across the members' vnodes, each entry
    // once; paged with max_results and resumed with the token.
    for kvc in c.iter_mut() {
        let (all, cont) = query(kvc, iq(0, vec![], 49)).await;
        assert!(cont.is_empty());
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(all, sorted, "in order, no duplicates");
        assert!(all.len() >= 150, "{} entries", all.len());
        let (mut first, cont) = query(kvc, iq(40, vec![], 49)).await;
        assert_eq!(first.len(), 40);
        assert!(!cont.is_empty());
        let (rest, _) = query(kvc, iq(0, cont.clone(), 49)).await;
        first.extend(rest);
        assert_eq!(first, all, "resumed from the token");
        // The token is bound to its query.
        let e = kvc.index_query(iq(0, cont, 48)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    }
    // A member dies: its vnodes' share of the very next queries (made before anything marked
    // it down) is answered by other replicas, from where it stopped.
    run(&["kill", dir.to_str().unwrap(), "n3"]);
    let mut keys = list(&mut c[0]).await;
    keys.sort();
    assert_eq!(keys, want, "ListKeys with n3 dead");
    run(&["start", dir.to_str().unwrap(), "n3"]);
    run(&["kill", dir.to_str().unwrap(), "n3"]);
    let (all, _) = query(&mut c[1], iq(0, vec![], 49)).await;
    assert!(
        all.len() >= 150,
        "IndexQuery with n3 dead: {} entries",
        all.len()
    );
}

/// `levee_query_snapshots_held` summed over the nodes, once it is 0 (releases after a query are
/// sent after its last page); panics if it stays above 0 for 5 s.
async fn snapshots_released(metrics: &[String]) {
    let start = std::time::Instant::now();
    loop {
        let mut held = 0.0;
        for m in metrics {
            held += common::load::metric(m, "levee_query_snapshots_held").await;
        }
        if held == 0.0 {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "{held} query snapshots still held"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_query_reads_about_what_it_returns_on_one_snapshot_per_vnode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(dir.clone());
    let nodes = common::cluster::nodes_of(&common::cluster::up3(dir.to_str().unwrap(), &[]));
    let metrics: Vec<String> = nodes.iter().map(|n| n.2.clone()).collect();
    let addrs: Vec<(String, String)> = nodes.iter().map(|n| (n.0.clone(), n.1.clone())).collect();
    let mut c = clients(&addrs).await;
    // 1,200 keys, key i with term i: spread over every vnode of the coverage plan.
    let tagged = |i: usize, t: i64| pb::PutRequest {
        index_changes: vec![common::cluster::index_add(t)],
        w: quorum(3),
        ..put("", &format!("key{i:04}"), "v", &[])
    };
    for i in 0..1200 {
        c[i % 3].put(tagged(i, i as i64)).await.unwrap();
    }
    let all: Vec<(i64, String)> = (0..1200)
        .map(|i| (i as i64, format!("key{i:04}")))
        .collect();
    let q = |page_size, max_results| pb::IndexQueryRequest {
        page_size,
        max_results,
        ..iq(0, vec![], 5000)
    };
    // Two pages of 100 out of 1,200: the vnodes are asked for about that, not for a page each
    // per page sent (the plan of a ring of 16 has six vnodes: that read ~1,200).
    let fetched = || async {
        common::load::metric(
            &metrics[0],
            "levee_coverage_entries_fetched_total{op=\"index_query\"}",
        )
        .await
    };
    let before = fetched().await;
    let (got, cont) = query(&mut c[0], q(100, 200)).await;
    let read = fetched().await - before;
    assert_eq!(got, all[..200], "the first 200 in (term, key) order");
    assert!(!cont.is_empty(), "more follow");
    eprintln!(
        "IndexQuery read {read} entries from vnodes to return {}",
        got.len()
    );
    assert!(
        read <= 2.0 * got.len() as f64,
        "read {read} entries from vnodes to return {}",
        got.len()
    );
    snapshots_released(&metrics).await;
    // A query in pages of 10 is one snapshot per vnode: writes made after its first page —
    // a new entry in range, a deleted one, one moved from a term already sent to one not yet
    // sent — are not seen; every entry of the start comes once.
    let mut s = c[1].index_query(q(10, 0)).await.unwrap().into_inner();
    let mut got = Vec::new();
    let first = s.message().await.unwrap().unwrap();
    got.extend(first.results);
    assert_eq!(got.len(), 10);
    c[2].put(tagged(5000, 1100)).await.unwrap();
    c[2].delete(pb::DeleteRequest {
        bucket: "b".into(),
        key: "key1150".into(),
        w: quorum(3),
        ..Default::default()
    })
    .await
    .unwrap();
    let moved = c[2]
        .get(get("", "key0001"))
        .await
        .unwrap()
        .into_inner()
        .context;
    c[2].put(pb::PutRequest {
        index_changes: vec![
            common::cluster::index_remove(1),
            common::cluster::index_add(1199),
        ],
        w: quorum(3),
        ..put("", "key0001", "v", &moved)
    })
    .await
    .unwrap();
    while let Some(p) = s.message().await.unwrap() {
        got.extend(p.results);
    }
    let got: Vec<(i64, String)> = got
        .into_iter()
        .map(|r| {
            let Some(pb::term::Kind::Int(t)) = r.term.unwrap().kind else {
                panic!("int term")
            };
            (t, String::from_utf8(r.key).unwrap())
        })
        .collect();
    assert_eq!(
        got, all,
        "the index as of the query's start, each entry once"
    );
    snapshots_released(&metrics).await;
    // A new query sees the writes.
    let (now, _) = query(&mut c[0], q(100, 0)).await;
    assert!(now.contains(&(1100, "key5000".into())));
    assert!(now.contains(&(1199, "key0001".into())));
    assert!(!now.contains(&(1, "key0001".into())));
    assert!(!now.iter().any(|(_, k)| k == "key1150"));
    snapshots_released(&metrics).await;
}
