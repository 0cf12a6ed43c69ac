//! Faults on a cluster of three real `levee serve` processes (local-cluster harness, n_val 3,
//! w = r = 2), with a recorded client history checked by `common::history`: no write
//! acknowledged at w=2 is lost, no value appears that was never written, and every replica
//! converges once the fault heals.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{index_mismatches, replicas, run, Down};
use common::history::{self, History, ReadOutcome, WriteOutcome};
use common::load::{
    expected_terms, final_reads, key, lazy, metric, quorum, sibling_values, spawn_clients, Load,
};
use levee_proto::v1 as pb;

const LOAD: Load = Load { keys: 40, pad: 0 };
const CLIENTS: usize = 6;

/// `up3` in `d`: each node's [name, gRPC address, metrics address, pid], and (name, gRPC
/// address) of each.
fn up3_nodes(d: &str) -> (Vec<Vec<String>>, Vec<(String, String)>) {
    let nodes: Vec<Vec<String>> = common::cluster::up3(d, &[])
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    let named = nodes.iter().map(|n| (n[0].clone(), n[1].clone())).collect();
    (nodes, named)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_w2_load_loses_no_acknowledged_write_and_handoff_converges() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let (nodes, named) = up3_nodes(&d);
    let addrs: Vec<String> = nodes.iter().map(|n| n[1].clone()).collect();
    let metrics: Vec<String> = nodes.iter().map(|n| n[2].clone()).collect();

    let h = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = spawn_clients(
        CLIENTS,
        LOAD,
        &addrs,
        &h,
        &stop,
        &Arc::new(AtomicU64::new(0)),
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed_at = h.now();
    run(&["kill", &d, "n3"]); // SIGKILL
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restarted_at = h.now();
    run(&["start", &d, "n3"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    // While n3 was down, writes were acknowledged at w=2 and reads answered at r=2.
    let during = |t: u64| t > killed_at && t < restarted_at;
    let acked_down = h
        .writes()
        .iter()
        .filter(|w| w.outcome == WriteOutcome::Acked && during(w.invoked))
        .count();
    let reads_down = h
        .reads()
        .iter()
        .filter(|r| !matches!(r.outcome, ReadOutcome::Failed) && during(r.invoked))
        .count();
    assert!(
        acked_down > 50,
        "only {acked_down} writes acknowledged while n3 was down"
    );
    assert!(
        reads_down > 50,
        "only {reads_down} reads answered while n3 was down"
    );

    let summary = match history::check(&h) {
        Ok(s) => s,
        Err(v) => panic!("history violations:\n{}", history::report(&v, 20)),
    };
    eprintln!("history: {summary}");

    // The writes n3 missed were kept as hints on n1/n2 and handed back (and reads after the
    // restart repaired what they saw): every replica of every key converges.
    let start = Instant::now();
    'keys: for i in 0..LOAD.keys {
        loop {
            let sets = replicas(&named, &key(i)).await;
            if sets.iter().all(|s| *s == sets[0]) {
                continue 'keys;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "replicas of {} never converged: {sets:?}",
                key(i)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let hints = metric(&metrics[0], "levee_hints_written_total").await
        + metric(&metrics[1], "levee_hints_written_total").await;
    let handed = metric(&metrics[0], "levee_handoff_objects_total").await
        + metric(&metrics[1], "levee_handoff_objects_total").await;
    let handed_bytes = metric(&metrics[0], "levee_handoff_bytes_total").await
        + metric(&metrics[1], "levee_handoff_bytes_total").await;
    eprintln!("hints written {hints}, objects handed off {handed} ({handed_bytes} bytes)");
    assert!(
        hints > 0.0 && handed > 0.0 && handed_bytes > 0.0,
        "hints {hints}, handed off {handed} objects, {handed_bytes} bytes"
    );
    // Everything handed back: no member holds objects for another (levee_vnodes{state="handoff"}).
    let start = Instant::now();
    loop {
        let mut holding = 0.0;
        for m in &metrics {
            holding += metric(m, "levee_vnodes{state=\"handoff\"}").await;
        }
        if holding == 0.0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{holding} vnodes still in state handoff 15 s after the replicas converged"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let per_node = final_reads(LOAD, &addrs).await;
    let union: BTreeMap<String, Vec<String>> = per_node[0].clone();
    if let Err(v) = history::check_final(&h, &union) {
        panic!("after healing:\n{}", history::report(&v, 20));
    }
    if let Err(v) = history::check_converged(&per_node) {
        panic!("nodes disagree:\n{}", history::report(&v, 20));
    }
    // Index entries followed the values: hints carried them, the handoff delivered them and the
    // fallbacks dropped theirs with the objects.
    let bad = index_mismatches(&named, &expected_terms(&per_node[0])).await;
    assert!(bad.is_empty(), "indexes after healing:\n{}", bad.join("\n"));
}

/// Puts through `addr` (w given), the value as the key's only change since `context`.
async fn put_via(addr: &str, bt: &str, k: &str, v: &str, context: Vec<u8>, w: u32) {
    lazy(addr)
        .put(pb::PutRequest {
            bucket: "b".into(),
            key: k.into(),
            value: v.into(),
            context,
            bucket_type: bt.into(),
            w: quorum(w),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("put {k}={v} via {addr}: {e:?}"));
}

/// GET at r=3 through `addr`, retried until every replica answers (members marked down during
/// the partition are probed up again within a second).
async fn read_all(addr: &str, bt: &str, k: &str) -> pb::GetResponse {
    let start = Instant::now();
    loop {
        let r = lazy(addr)
            .get(pb::GetRequest {
                bucket: "b".into(),
                key: k.into(),
                bucket_type: bt.into(),
                r: quorum(3),
                ..Default::default()
            })
            .await;
        match r {
            Ok(g) => return g.into_inner(),
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(20),
                "read of {k} via {addr} at r=3: {e:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_gives_siblings_or_the_later_write_never_silent_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let up = common::cluster::up3(&d, &[]);
    let nodes: Vec<(String, std::net::SocketAddr)> = up
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].parse().unwrap())
        })
        .collect();
    // One proxy per directed link i -> j; each node dials its peers through its own proxies.
    let mut links = BTreeMap::new();
    for (i, (from, _)) in nodes.iter().enumerate() {
        let mut dial = String::from("\n[cluster.dial]\n");
        for (j, (to, addr)) in nodes.iter().enumerate() {
            if i != j {
                let p = common::proxy::Proxy::start(*addr);
                dial += &format!("{to} = \"{}\"\n", p.addr());
                links.insert((from.clone(), to.clone()), p);
            }
        }
        run(&["kill", &d, from, "TERM"]);
        let cfg = dir.join(from).join("levee.toml");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        // [cluster.dial] must follow [cluster]'s keys: insert it before the next section.
        let at = text.find("[bucket_types").unwrap();
        text.insert_str(at, dial.trim_start());
        std::fs::write(&cfg, text).unwrap();
        run(&["start", &d, from]);
    }
    let addr: Vec<String> = nodes.iter().map(|(_, a)| a.to_string()).collect();
    let cut = |on: bool| {
        for ((from, to), p) in &links {
            if (from == "n1") != (to == "n1") {
                p.set_blackhole(on);
            }
        }
    };

    for (bt, k) in [("siblings", "s"), ("", "l")] {
        put_via(&addr[0], bt, k, "before", Vec::new(), 3).await;
    }
    let before_s = read_all(&addr[0], "siblings", "s").await.context;
    let before_l = read_all(&addr[0], "", "l").await.context;

    // {n1} | {n2, n3}: each side takes a write of the same key from the same context.
    cut(true);
    put_via(&addr[0], "siblings", "s", "left", before_s.clone(), 1).await;
    put_via(&addr[1], "siblings", "s", "right", before_s, 2).await;
    put_via(&addr[0], "", "l", "left", before_l.clone(), 1).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    put_via(&addr[1], "", "l", "right", before_l, 2).await;
    let dropped: u64 = links.values().map(|p| p.bytes_dropped()).sum();
    assert!(dropped > 0, "the partition dropped nothing");
    cut(false);

    // Healed: under "siblings" both writes come back from every node; under lww the later one.
    for a in &addr {
        let g = read_all(a, "siblings", "s").await;
        let mut v = sibling_values(&g);
        v.sort();
        assert_eq!(v, ["left", "right"], "via {a}");
        let g = read_all(a, "", "l").await;
        assert_eq!(sibling_values(&g), ["right"], "via {a}");
    }
}

/// A member told to stop (SIGTERM) tells the others before it stops serving, so they route its
/// replicas to fallbacks at once; started again, it tells them it serves. Without the first
/// notice, the first write after it stopped that reached it failed on every replica it holds:
/// with 3 members and a ring size not a multiple of 3, some preflists hold one member twice, and
/// a w=2 write there failed ("1 ok, 2 failed", as `make e2e`'s rolling restart once saw).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_member_is_routed_around_before_it_refuses_calls() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let (nodes, named) = up3_nodes(&d);
    // A key whose preflist holds one member twice.
    let mut found = None;
    for i in 0..5000 {
        let k = format!("wrap{i}");
        let pf = common::cluster::preflist(&named, &k).await;
        let twice = pf
            .iter()
            .find(|(_, a)| pf.iter().filter(|(_, b)| b == a).count() == 2);
        if let Some((_, a)) = twice {
            found = Some((k, a.clone()));
            break;
        }
    }
    let (k, doubled) = found.expect("some preflist holds a member twice (3 members, ring 16)");
    let stopping = named.iter().find(|(_, a)| *a == doubled).unwrap().0.clone();
    let via = named.iter().find(|(_, a)| *a != doubled).unwrap().clone();
    let via_metrics = nodes.iter().find(|n| n[0] == via.0).unwrap()[2].clone();
    // The coordinator has reached the member since it started: nothing marks it down but the
    // notice (or a failed call).
    put_via(&via.1, "", &k, "before", Vec::new(), 3).await;

    assert_eq!(metric(&via_metrics, "levee_members_down").await, 0.0);
    run(&["kill", &d, &stopping, "TERM"]); // waits for it to exit
    assert_eq!(metric(&via_metrics, "levee_members_down").await, 1.0);
    put_via(&via.1, "", &k, "after", Vec::new(), 2).await;
    let log = std::fs::read_to_string(dir.join(&via.0).join("log")).unwrap();
    assert!(
        log.contains(&format!(
            "member {stopping} marked down: it is shutting down"
        )),
        "{} was not told {stopping} was leaving:\n{log}",
        via.0
    );
    let log = std::fs::read_to_string(dir.join(&stopping).join("log")).unwrap();
    assert!(
        log.contains("told 2 of 2 members this node is leaving"),
        "{stopping}'s log:\n{log}"
    );

    // Started again, it tells the others it serves before it reports ready: they use it at
    // once, not only after their next probe (a w=3 write needs all three).
    run(&["start", &d, &stopping]);
    assert_eq!(metric(&via_metrics, "levee_members_down").await, 0.0);
    put_via(&via.1, "", &k, "back", Vec::new(), 3).await;
    let log = std::fs::read_to_string(dir.join(&stopping).join("log")).unwrap();
    assert!(
        log.contains("told 2 of 2 members this node serves"),
        "{stopping}'s log:\n{log}"
    );
}
