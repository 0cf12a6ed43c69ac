//! AAE exchange (docs/cluster.md §9): replicas that diverged — a newer version, or a key, written
//! to one replica only — are found by comparing the preflist's trees and repaired by one round of
//! exchanges; the repairs are counted in the metrics, and the next round finds nothing.

use crate::common;

use levee_proto::v1 as pb;

use common::cluster::{nodes_of, preflist, replicas, Down};
use common::load::{key, lazy, metric, quorum, sibling_values};

const KEYS: usize = 200;
/// Keys given a newer version on one replica only.
const NEWER: usize = 10;
/// Keys written to one replica only.
const ONLY_ONE: usize = 5;

async fn exchange_all(nodes: &[(String, String, String)]) -> Vec<pb::ExchangeOutcome> {
    let mut out = Vec::new();
    for (_, addr, _) in nodes {
        let mut admin = pb::admin_client::AdminClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        let r = admin
            .aae_exchange(pb::AaeExchangeRequest::default())
            .await
            .unwrap()
            .into_inner();
        out.extend(r.exchanges);
    }
    out
}

async fn metric_sum(nodes: &[(String, String, String)], name: &str) -> f64 {
    let mut sum = 0.0;
    for (_, _, m) in nodes {
        sum += metric(m, name).await;
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exchange_round_repairs_replicas_that_diverged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(dir.clone());
    // No scheduled exchanges: this test runs them.
    let nodes = nodes_of(&common::cluster::up3(
        dir.to_str().unwrap(),
        &["--aae-exchange-secs", "0"],
    ));
    let addrs: Vec<(String, String)> = nodes
        .iter()
        .map(|(n, a, _)| (n.clone(), a.clone()))
        .collect();

    let mut kv = lazy(&nodes[0].1);
    for i in 0..KEYS {
        kv.put(pb::PutRequest {
            bucket: "b".into(),
            key: key(i).into(),
            value: format!("v{i}").into(),
            w: quorum(3),
            ..Default::default()
        })
        .await
        .unwrap();
    }

    // Every preflist in sync: 16 exchanges (each node leads the preflists of its partitions).
    let first = exchange_all(&nodes).await;
    assert_eq!(first.len(), 16, "{first:?}");
    assert!(
        first.iter().all(|e| e.result == "in_sync"),
        "replicas written at w = 3 differ: {first:?}"
    );

    // Diverge: a newer version of NEWER keys on one replica only (coordinated at that vnode,
    // from the context every replica holds), and ONLY_ONE new keys on one replica only.
    for i in 0..NEWER + ONLY_ONE {
        let k = key(if i < NEWER { i } else { KEYS + i });
        let context = if i < NEWER {
            kv.get(pb::GetRequest {
                bucket: "b".into(),
                key: k.clone().into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .context
        } else {
            Vec::new()
        };
        let (p, addr) = preflist(&addrs, &k).await.swap_remove(1);
        let mut node = pb::node_client::NodeClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        node.coordinate_put(pb::CoordinatePutRequest {
            key: Some(pb::ReplicaKey {
                partition: p,
                bucket: "b".into(),
                key: k.clone().into(),
            }),
            context,
            tombstone: false,
            metadata: Vec::new(),
            value: format!("diverged-{k}").into(),
            timestamp_us: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64,
            policy: pb::ConflictPolicy::Lww as i32,
            index_changes: vec![],
        })
        .await
        .unwrap();
        let sets = replicas(&addrs, &k).await;
        assert!(
            sets.iter().any(|s| *s != sets[1]),
            "{k}: the write reached more than one replica: {sets:?}"
        );
    }

    // One round repairs every diverged key, and says so.
    let round = exchange_all(&nodes).await;
    let repaired: u32 = round.iter().map(|e| e.keys_repaired).sum();
    assert!(
        round
            .iter()
            .all(|e| e.result == "in_sync" || e.result == "repaired"),
        "{round:?}"
    );
    let mut still = Vec::new();
    for i in 0..NEWER + ONLY_ONE {
        let k = key(if i < NEWER { i } else { KEYS + i });
        let sets = replicas(&addrs, &k).await;
        if !sets.iter().all(|s| *s == sets[0]) {
            still.push(format!("{k}: {sets:?}"));
        }
    }
    let logs: String = ["n1", "n2", "n3"]
        .iter()
        .map(|n| std::fs::read_to_string(dir.join(n).join("log")).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("")
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        repaired as usize,
        NEWER + ONLY_ONE,
        "not repaired:\n{}\nwarnings:\n{logs}\n{round:?}",
        still.join("\n")
    );
    for i in 0..NEWER + ONLY_ONE {
        let k = key(if i < NEWER { i } else { KEYS + i });
        let sets = replicas(&addrs, &k).await;
        assert!(
            sets.iter().all(|s| *s == sets[0]) && !sets[0].is_empty(),
            "{k}: replicas still differ after the exchange: {sets:?}"
        );
        // Every node, reading one replica (r = 1, its own first), sees the diverged write.
        for (_, addr, _) in &nodes {
            let g = lazy(addr)
                .get(pb::GetRequest {
                    bucket: "b".into(),
                    key: k.clone().into(),
                    r: quorum(1),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(
                sibling_values(&g),
                vec![format!("diverged-{k}")],
                "{k} through {addr}"
            );
        }
    }
    assert_eq!(
        metric_sum(&nodes, "levee_aae_repairs_total").await as usize,
        NEWER + ONLY_ONE
    );
    assert!(
        metric_sum(&nodes, "levee_aae_exchanges_total{result=\"repaired\"}").await >= 1.0,
        "no exchange counted as repaired"
    );

    // The next round finds the replicas equal.
    let again = exchange_all(&nodes).await;
    assert!(
        again.iter().all(|e| e.result == "in_sync"),
        "second round: {again:?}"
    );
    assert_eq!(
        metric_sum(&nodes, "levee_aae_exchanges_total{result=\"in_sync\"}").await as usize,
        16 + (16 - round.iter().filter(|e| e.result == "repaired").count()) + 16
    );

    // Bad input is refused with its reason.
    let mut node = pb::node_client::NodeClient::connect(format!("http://{}", nodes[0].1))
        .await
        .unwrap();
    for (req, want) in [
        (
            pb::ExchangeTreeRequest {
                partition: 0,
                key_partition: 0,
                segment_count: 0,
                segments: vec![],
            },
            "segment_count 0 is outside",
        ),
        (
            pb::ExchangeTreeRequest {
                partition: 0,
                key_partition: 0,
                segment_count: 64,
                segments: vec![64],
            },
            "segment 64 is beyond a tree of 64 segments",
        ),
        (
            pb::ExchangeTreeRequest {
                partition: 16,
                key_partition: 0,
                segment_count: 64,
                segments: vec![],
            },
            "partition 16 is not in this node's ring of 16",
        ),
        (
            pb::ExchangeTreeRequest {
                partition: 0,
                key_partition: 99,
                segment_count: 64,
                segments: vec![],
            },
            "key_partition 99 is not in",
        ),
    ] {
        let e = node.exchange_tree(req).await.unwrap_err();
        assert!(
            e.code() == tonic::Code::InvalidArgument && e.message().contains(want),
            "{e:?}, want INVALID_ARGUMENT with {want:?}"
        );
    }
    let mut admin = pb::admin_client::AdminClient::connect(format!("http://{}", nodes[0].1))
        .await
        .unwrap();
    let e = admin
        .aae_exchange(pb::AaeExchangeRequest {
            key_partitions: vec![16],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    // The CLI runs one exchange and prints its summary.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_levee"))
        .args(["admin", "aae-exchange", "--addr", &nodes[0].1])
        .args(["--partition", "3", "--partition", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("2 exchange(s): 2 in sync"),
        "{out:?}"
    );
}
