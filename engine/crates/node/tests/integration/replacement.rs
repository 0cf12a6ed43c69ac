//! A member that loses its data directory and comes back under its name (a new local volume)
//! rebuilds its vnodes from the other replicas before it answers reads for them
//! (docs/cluster.md §8).

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::{index_add, index_mismatches, replicas, run, Down};
use common::load::{get_r1, key, lazy, metric, quorum, sibling_values};
use levee_proto::v1 as pb;

const KEYS: usize = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_lost_its_data_rebuilds_before_it_answers_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let nodes = common::cluster::up(&dir);

    // Every key on all three replicas (w = 3), through n1.
    let mut kv = lazy(&nodes[0].1);
    for i in 0..KEYS {
        kv.put(pb::PutRequest {
            bucket: "b".into(),
            key: key(i).into(),
            value: format!("v{i}-x{}", "p".repeat(1024)).into(),
            w: quorum(3),
            index_changes: vec![index_add((i % 50) as i64)],
            ..Default::default()
        })
        .await
        .unwrap();
    }

    // FoldObjects refuses bad input with typed errors.
    let mut node = pb::node_client::NodeClient::connect(format!("http://{}", nodes[0].1))
        .await
        .unwrap();
    for (req, want) in [
        (
            pb::FoldObjectsRequest {
                partition: 99,
                key_partitions: vec![0],
                ..Default::default()
            },
            "not in this node's ring of 16",
        ),
        (
            pb::FoldObjectsRequest {
                partition: 0,
                ..Default::default()
            },
            "key_partitions is empty",
        ),
        (
            pb::FoldObjectsRequest {
                partition: 0,
                key_partitions: vec![16],
                ..Default::default()
            },
            "key partition 16 is not in",
        ),
        (
            pb::FoldObjectsRequest {
                partition: 0,
                key_partitions: vec![0],
                max_objects: 5000,
                ..Default::default()
            },
            "at most 1024 objects",
        ),
    ] {
        let e = node.fold_objects(req).await.unwrap_err();
        assert!(
            e.code() == tonic::Code::InvalidArgument && e.message().contains(want),
            "{e:?}, want INVALID_ARGUMENT with {want:?}"
        );
    }
    assert!(
        node.ring_state(pb::RingStateRequest {})
            .await
            .unwrap()
            .into_inner()
            .holds_data
    );

    // n2's volume is lost: killed, its data directory removed, started again under its name.
    run(&["kill", &d, "n2"]);
    std::fs::remove_dir_all(dir.join("n2/data")).unwrap();
    let started = run(&["start", &d, "n2"]);
    let metrics = started.split_whitespace().nth(2).unwrap().to_string();
    let start = Instant::now();
    loop {
        let pending = metric(&metrics, "levee_rebuild_partitions_pending").await;
        let pulled = metric(&metrics, "levee_rebuild_objects_total").await;
        if pending == 0.0 && pulled > 0.0 {
            eprintln!(
                "n2 rebuilt in {:.1} s: {pulled} objects, {:.1} MB pulled",
                start.elapsed().as_secs_f64(),
                metric(&metrics, "levee_rebuild_bytes_total").await / 1e6
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "n2 not rebuilt after 120 s: {pending} vnodes pending, {pulled} objects pulled"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every replica of every key — n2's vnodes included — holds the same versions again, and a
    // read at r = 1 coordinated by n2 returns every value.
    for i in 0..KEYS {
        let sets = replicas(&nodes, &key(i)).await;
        assert!(
            !sets[0].is_empty() && sets.iter().all(|s| *s == sets[0]),
            "{}: replicas differ after the rebuild: {sets:?}",
            key(i)
        );
        let g = get_r1(&nodes[1].1, &key(i)).await;
        assert_eq!(sibling_values(&g), vec![format!("v{i}")], "{}", key(i));
    }
    // The rebuilt vnodes' indexes hold their keys' entries (they came with the objects).
    let terms = (0..KEYS)
        .map(|i| (key(i), [(i % 50) as i64].into()))
        .collect();
    let bad = index_mismatches(&nodes, &terms).await;
    assert!(
        bad.is_empty(),
        "indexes after the rebuild:\n{}",
        bad.join("\n")
    );
}
