//! A member that cannot switch to a ring transition's target — it cannot reach one member it
//! must ask, in a partial partition — goes on routing by the claim before, and must still read
//! every write the members that switched acknowledged, however long ago they switched
//! (docs/cluster.md, "Settling"). With n_val 1 which replica a read reaches is not left to
//! chance: the old owner has the latest write only while the new owner forwards writes back to
//! it, and has anything only while its handoff has not emptied the vnode. Both are kept across a
//! restart of either owner.

use crate::common;
use crate::ring_transitions::{members, wait_settled, SERIAL};

use std::time::Duration;

use common::cluster::{nodes_of, run, Down};
use common::load::{lazy, live_values, metric, quorum, until_zero};
use common::proxy::Proxy;
use levee_proto::v1 as pb;

async fn put_w1(addr: &str, key: &str, value: &str) {
    lazy(addr)
        .put(pb::PutRequest {
            bucket: "b".into(),
            key: key.to_string().into(),
            value: value.to_string().into(),
            w: quorum(1),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("put {key}={value} via {addr}: {e:?}"));
}

/// The values a GET at r=1 through `addr` returns (none when the key is not found).
async fn value_r1(addr: &str, key: &str) -> Vec<String> {
    let r = lazy(addr)
        .get(pb::GetRequest {
            bucket: "b".into(),
            key: key.to_string().into(),
            r: quorum(1),
            ..Default::default()
        })
        .await;
    let g = match r {
        Ok(g) => g.into_inner(),
        Err(e) if e.code() == tonic::Code::NotFound => return Vec::new(),
        Err(e) => panic!("get {key} via {addr}: {e:?}"),
    };
    live_values(&g)
        .into_iter()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// Writes `value` to each key through `writer` (w=1), then reads it through `reader` (r=1): the
/// reads that did not return exactly that value.
async fn write_then_read(keys: &[&String], writer: &str, reader: &str, value: &str) -> Vec<String> {
    let mut missed = Vec::new();
    for k in keys {
        put_w1(writer, k, value).await;
        let seen = value_r1(reader, k).await;
        if seen != [value] {
            missed.push(format!("{k}: {seen:?}"));
        }
    }
    missed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_cannot_switch_reads_every_write_the_switched_members_acknowledged() {
    let _one = SERIAL.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let mut nodes = nodes_of(&run(&["up", &d, "3", "--ring-size", "16", "--n-val", "1"]));

    // n3 dials n1 through a proxy the test can cut.
    let proxy = Proxy::start(nodes[0].1.parse().unwrap());
    run(&["kill", &d, "n3", "TERM"]);
    let cfg = dir.join("n3").join("levee.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    // [cluster.dial] must follow [cluster]'s keys: insert it before the next section.
    let at = text.find("[bucket_types").unwrap();
    text.insert_str(at, &format!("[cluster.dial]\nn1 = \"{}\"\n", proxy.addr()));
    std::fs::write(&cfg, text).unwrap();
    nodes[2] = nodes_of(&run(&["start", &d, "n3"])).remove(0);

    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for k in &keys {
        put_w1(&nodes[1].1, k, "v1").await;
    }

    // n3 cannot ask n1 how far it is, so it never switches to list 2; the others do.
    proxy.set_blackhole(true);
    run(&["add", &d, "n4"]);
    run(&["members", &d, "2", "n1", "n2", "n3", "n4"]);
    nodes.extend(nodes_of(&run(&["start", &d, "n4"])));
    let switched: Vec<(String, String)> = [0, 1, 3]
        .iter()
        .map(|&i| (nodes[i].0.clone(), nodes[i].1.clone()))
        .collect();
    wait_settled(&dir, &switched, 2, Duration::from_secs(120)).await;
    let old = members(&nodes[2].1).await.unwrap();
    assert_eq!(old.routing_version, 1, "n3 switched without reaching n1");
    let new = members(&nodes[0].1).await.unwrap();

    // Keys n3 reads from an old owner it can reach, and n1 writes to their new owner.
    let ring = levee_cluster::RingSize::new(old.ring_size).unwrap();
    let moved: Vec<&String> = keys
        .iter()
        .filter(|k| {
            let p = levee_cluster::partition_of(b"b", k.as_bytes(), ring) as usize;
            old.owners[p] != new.owners[p] && old.owners[p] != "n1"
        })
        .collect();
    assert!(
        moved.len() >= 10,
        "only {} keys moved away from n2 or n3 (owners {:?} -> {:?})",
        moved.len(),
        old.owners,
        new.owners
    );

    // Well past the shortest settle and a few handoff passes.
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The switched members say they still wait (for n3 at least).
    for n in [&nodes[0], &nodes[1], &nodes[3]] {
        let awaiting = metric(&n.2, "levee_transition_settle_awaiting_members").await;
        assert!(awaiting >= 1.0, "{} awaits {awaiting} members", n.0);
    }
    let missed = write_then_read(&moved, &nodes[0].1, &nodes[2].1, "v2").await;
    assert!(
        missed.is_empty(),
        "n3, routing by the claim before the switch, missed {} of {} writes acknowledged by n1 \
         after the switch: {}",
        missed.len(),
        moved.len(),
        missed.join(", ")
    );

    // The settle is kept on disk: the old owner n2 and the new owner n4, restarted, still keep
    // the streamed vnodes and forward back.
    for i in [1, 3] {
        run(&["kill", &d, &nodes[i].0, "TERM"]);
        nodes[i] = nodes_of(&run(&["start", &d, &nodes[i].0])).remove(0);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let missed = write_then_read(&moved, &nodes[0].1, &nodes[2].1, "v3").await;
    assert!(
        missed.is_empty(),
        "after n2 and n4 restarted, n3 missed {} of {} writes acknowledged by n1: {}",
        missed.len(),
        moved.len(),
        missed.join(", ")
    );

    // Healed, n3 switches; then every switch settles and handoff empties what was streamed
    // away, and every key reads back its last write through every member.
    proxy.set_blackhole(false);
    let all: Vec<(String, String)> = nodes.iter().map(|n| (n.0.clone(), n.1.clone())).collect();
    wait_settled(&dir, &all, 2, Duration::from_secs(60)).await;
    let start = std::time::Instant::now();
    for n in &nodes {
        let series = [
            "levee_vnodes{state=\"handoff\"}",
            "levee_transition_settle_awaiting_members",
        ];
        let held = until_zero(&n.2, &series, start + Duration::from_secs(60)).await;
        assert_eq!(
            held, 0.0,
            "{} still holds vnodes it does not own: the switch never settled",
            n.0
        );
    }
    for n in &nodes {
        for k in &keys {
            let want = if moved.contains(&k) { "v3" } else { "v1" };
            assert_eq!(value_r1(&n.1, k).await, [want], "{k} via {}", n.0);
        }
    }
}
