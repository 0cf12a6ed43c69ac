//! Ring transitions on real `levee serve` processes (local-cluster harness, n_val 3, w = r = 2)
//! under a recorded read-modify-write load checked by `common::history`: three members grow to
//! five (two join with empty data directories and take their ring from the others) and shrink
//! back to three (the two hand everything off before they are stopped). No write acknowledged at
//! w=2 is lost, no value appears that was never written, and every key reads back the same from
//! every remaining member. Foreground throughput per phase and the bytes moved are printed.

use crate::common;
use common::cluster::nodes_of;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::{index_mismatches, run, Down};
use common::history::{self, History};
use common::load::{expected_terms, final_reads, metric, spawn_clients, until_zero, Load};
use levee_proto::v1 as pb;
use pb::admin_client::AdminClient;

const LOAD: Load = Load {
    keys: 300,
    pad: 2048,
};
const CLIENTS: usize = 4;

pub async fn members(addr: &str) -> Option<pb::MembersResponse> {
    let mut c = AdminClient::connect(format!("http://{addr}")).await.ok()?;
    Some(c.members(pb::MembersRequest {}).await.ok()?.into_inner())
}

/// Waits until every node in `addrs` routes with member list `version` (transition complete).
/// On timeout the failure carries the tail of each unreachable member's log (`dir/<name>/log`):
/// whether it died, and why.
pub async fn wait_settled(
    dir: &std::path::Path,
    addrs: &[(String, String)],
    version: u64,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let mut pending = Vec::new();
        for (name, a) in addrs {
            match members(a).await {
                Some(m) if m.routing_version == version && m.target_owners.is_empty() => {}
                Some(m) => pending.push(format!(
                    "{name} (version {}, routing {}, {} target owners)",
                    m.version,
                    m.routing_version,
                    m.target_owners.len()
                )),
                None => pending.push(format!("{name} (unreachable)")),
            }
        }
        if pending.is_empty() {
            return start.elapsed();
        }
        if start.elapsed() >= limit {
            let mut logs = String::new();
            for (name, _) in addrs {
                if pending
                    .iter()
                    .any(|p| p == &format!("{name} (unreachable)"))
                {
                    let text = std::fs::read_to_string(dir.join(name).join("log"))
                        .unwrap_or_else(|e| format!("(no log: {e})"));
                    let lines: Vec<&str> = text.lines().collect();
                    logs += &format!(
                        "--- last lines of {name}'s log:\n{}\n",
                        lines[lines.len().saturating_sub(40)..].join("\n")
                    );
                }
            }
            panic!(
                "transition to version {version} not complete after {limit:?}: {}\n{logs}",
                pending.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Bytes n1..n3 sent to other members' vnodes (`levee_handoff_bytes_total`).
async fn sent_by_first_three(nodes: &[(String, String, String)]) -> f64 {
    let mut b = 0.0;
    for n in &nodes[..3] {
        b += metric(&n.2, "levee_handoff_bytes_total").await;
    }
    b
}

/// One test at a time: each runs up to five members on a small machine, and a member starved of
/// CPU long enough to be marked down turns quorums sloppy.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The members' log lines about membership, transitions and peers marked down or up, for a
/// failure message.
fn ring_log(dir: &std::path::Path, nodes: &[(String, String, String)]) -> String {
    let mut out = String::new();
    for n in nodes {
        let text = std::fs::read_to_string(dir.join(&n.0).join("log")).unwrap_or_default();
        for l in text.lines().filter(|l| {
            l.contains("membership:")
                || l.contains("transition:")
                || l.contains("marked down")
                || l.contains("up again")
                || l.contains("ring transition")
        }) {
            out += &format!("{}: {l}\n", n.0);
        }
    }
    out
}

struct Phase {
    name: &'static str,
    secs: f64,
    acked: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_to_five_to_three_members_under_w2_load_loses_no_acknowledged_write() {
    let _one = SERIAL.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let mut nodes = nodes_of(&common::cluster::up3(&d, &[]));
    let addrs: Vec<String> = nodes.iter().map(|n| n.1.clone()).collect();

    let h = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let clients = spawn_clients(CLIENTS, LOAD, &addrs, &h, &stop, &acked);
    let mut phases = Vec::new();
    let mut phase_start = (Instant::now(), 0u64);
    let mut end_phase = |name: &'static str, phases: &mut Vec<Phase>| {
        let now = (Instant::now(), acked.load(Ordering::Relaxed));
        phases.push(Phase {
            name,
            secs: (now.0 - phase_start.0).as_secs_f64(),
            acked: now.1 - phase_start.1,
        });
        phase_start = now;
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    end_phase("3 members", &mut phases);
    let bytes_before = sent_by_first_three(&nodes).await;

    // Join: two new members, named in version 2 before they start (they take the ring from a
    // member that has one), then started.
    for name in ["n4", "n5"] {
        run(&["add", &d, name]);
    }
    run(&["members", &d, "2", "n1", "n2", "n3", "n4", "n5"]);
    for name in ["n4", "n5"] {
        nodes.extend(nodes_of(&run(&["start", &d, name])));
    }
    let named: Vec<(String, String)> = nodes.iter().map(|n| (n.0.clone(), n.1.clone())).collect();
    let join = wait_settled(&dir, &named, 2, Duration::from_secs(180)).await;
    end_phase("3 -> 5 (transition)", &mut phases);
    let five = members(&addrs[0]).await.unwrap();
    for (name, a) in &named {
        assert_eq!(
            members(a).await.unwrap().owners,
            five.owners,
            "{name} routes with another claim"
        );
    }
    for name in ["n4", "n5"] {
        assert!(
            five.owners.iter().any(|o| o == name),
            "{name} owns nothing after the join: {:?}",
            five.owners
        );
    }
    // Only n1..n3 send in a join (n4 and n5 had nothing).
    let moved_join = sent_by_first_three(&nodes).await - bytes_before;
    tokio::time::sleep(Duration::from_secs(3)).await;
    end_phase("5 members", &mut phases);

    // Leave: version 3 names the first three again. n4 and n5 stream what they own back, the
    // target routes, and they hold nothing afterwards.
    run(&["members", &d, "3", "n1", "n2", "n3"]);
    let leave = wait_settled(&dir, &named, 3, Duration::from_secs(180)).await;
    end_phase("5 -> 3 (transition)", &mut phases);
    // What the operator follows a transition by (docs/operator.md, "Scaling"): every member
    // routes by list 3 with nothing left to send, and the leaving ones report what they streamed.
    for n in &nodes {
        tokio::time::sleep(Duration::from_millis(600)).await; // the gauges follow the 0.5 s step
        assert_eq!(
            metric(&n.2, "levee_ring_routing_list_version").await,
            3.0,
            "{}",
            n.0
        );
        assert_eq!(
            metric(&n.2, "levee_transition_partitions_to_send").await,
            0.0,
            "{}",
            n.0
        );
    }
    for n in &nodes[3..] {
        assert!(
            metric(&n.2, "levee_transition_bytes_sent").await > 0.0,
            "{} streamed its partitions away but reports no bytes",
            n.0
        );
    }
    let three = members(&addrs[0]).await.unwrap();
    assert!(three
        .owners
        .iter()
        .all(|o| ["n1", "n2", "n3"].contains(&o.as_str())));
    let start = Instant::now();
    for n in &nodes[3..] {
        let series = [
            "levee_vnodes{state=\"handoff\"}",
            "levee_vnodes{state=\"active\"}",
        ];
        let holding = until_zero(&n.2, &series, start + Duration::from_secs(60)).await;
        assert_eq!(
            holding, 0.0,
            "{} still holds vnodes 60 s after leaving",
            n.0
        );
        run(&["kill", &d, &n.0, "TERM"]);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    end_phase("3 members again", &mut phases);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let moved_total = sent_by_first_three(&nodes).await;

    for p in &phases {
        eprintln!(
            "phase {:<22} {:>6.1} s  {:>7.0} acknowledged writes/s",
            p.name,
            p.secs,
            p.acked as f64 / p.secs
        );
    }
    eprintln!(
        "join took {:.1} s, moving {:.1} MB ({:.1} MB/s); leave took {:.1} s",
        join.as_secs_f64(),
        moved_join / 1e6,
        moved_join / 1e6 / join.as_secs_f64(),
        leave.as_secs_f64()
    );
    eprintln!(
        "bytes sent by the three that stayed, whole run: {:.1} MB",
        moved_total / 1e6
    );
    assert!(
        moved_join > (LOAD.keys * LOAD.pad) as f64 / 4.0,
        "the join moved only {moved_join} bytes"
    );
    for p in &phases {
        assert!(p.acked > 0, "no write acknowledged during {}", p.name);
    }

    let summary = match history::check(&h) {
        Ok(s) => s,
        Err(v) => panic!(
            "history violations:\n{}\nwhat the members logged about members and the ring:\n{}",
            history::report(&v, 20),
            ring_log(&dir, &nodes)
        ),
    };
    eprintln!("history: {summary}");

    // Every key, read at r=3 from each member that stayed, is the same and holds what the
    // history allows.
    let per_node = final_reads(LOAD, &addrs).await;
    if let Err(v) = history::check_final(&h, &per_node[0]) {
        panic!("after the transitions:\n{}", history::report(&v, 20));
    }
    if let Err(v) = history::check_converged(&per_node) {
        panic!("members disagree:\n{}", history::report(&v, 20));
    }
    // Index entries moved with the objects: every vnode of the three that stayed holds the
    // entries of what it holds, and the owners hold those of the keys' final values.
    let bad = index_mismatches(&named[..3], &expected_terms(&per_node[0])).await;
    assert!(
        bad.is_empty(),
        "indexes after the transitions:\n{}",
        bad.join("\n")
    );
}

/// Bytes of value in each object of the resume test.
const BIG: usize = 8 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transfer_resumes_after_the_receiver_is_killed_without_sending_much_again() {
    let _one = SERIAL.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    // Transfers throttled to 1 MiB/s per source, so the kill lands mid-stream.
    let nodes = nodes_of(&common::cluster::up3(
        &d,
        &["--handoff-bytes-per-sec", "1048576"],
    ));
    let keys = 1500usize;
    let mut kv = common::load::lazy(&nodes[0].1);
    let value = vec![b'v'; BIG];
    for i in 0..keys {
        kv.put(pb::PutRequest {
            bucket: "b".into(),
            key: format!("r{i:05}").into(),
            value: value.clone(),
            bucket_type: "siblings".into(),
            w: common::load::quorum(3),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let before = members(&nodes[0].1).await.unwrap();
    let sent_before = sent_by_first_three(&nodes).await;

    run(&["add", &d, "n4"]);
    run(&["members", &d, "2", "n1", "n2", "n3", "n4"]);
    let mut nodes = nodes;
    nodes.extend(nodes_of(&run(&["start", &d, "n4"])));
    // n1 reads the members file within a second; the throttled streams take several.
    let after = {
        let start = Instant::now();
        let m = loop {
            let m = members(&nodes[0].1).await.unwrap();
            if m.version == 2 || start.elapsed() > Duration::from_secs(10) {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(!m.target_owners.is_empty(), "no transition started: {m:?}");
        m.target_owners
    };
    // What the moving vnodes hold: vnode q holds the keys of partitions q-2..q (n_val 3).
    let ring = levee_cluster::RingSize::new(16).unwrap();
    let moving: Vec<u32> = (0..16u32)
        .filter(|&q| before.owners[q as usize] != after[q as usize])
        .collect();
    let per_partition = |p: u32| {
        (0..keys)
            .filter(|i| levee_cluster::partition_of(b"b", format!("r{i:05}").as_bytes(), ring) == p)
            .count()
    };
    let objects: usize = moving
        .iter()
        .map(|&q| {
            (0..3)
                .map(|i| per_partition((q + 16 - i) % 16))
                .sum::<usize>()
        })
        .sum();
    let size = (objects * BIG) as f64;

    // Kill n4 once 40 % has been sent (each source well into its first partition: a transfer
    // that started again instead of resuming would send that part twice), start it again two
    // seconds later.
    let start = Instant::now();
    while sent_by_first_three(&nodes).await - sent_before < size * 0.4 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the transfer never got going"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let at_kill = sent_by_first_three(&nodes).await - sent_before;
    // Mid-transition, what the operator follows: the sources still route by list 1 and have
    // partitions left to send, and report bytes streamed for list 2.
    let (mut to_send, mut streamed) = (0.0, 0.0);
    for n in &nodes[..3] {
        assert_eq!(
            metric(&n.2, "levee_ring_routing_list_version").await,
            1.0,
            "{}",
            n.0
        );
        to_send += metric(&n.2, "levee_transition_partitions_to_send").await;
        streamed += metric(&n.2, "levee_transition_bytes_sent").await;
    }
    assert!(
        to_send > 0.0 && streamed > 0.0,
        "mid-transition: {to_send} partitions to send, {streamed} bytes streamed"
    );
    run(&["kill", &d, "n4"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    run(&["start", &d, "n4"]);
    let named: Vec<(String, String)> = nodes.iter().map(|n| (n.0.clone(), n.1.clone())).collect();
    let took = wait_settled(&dir, &named, 2, Duration::from_secs(120)).await;
    let total = sent_by_first_three(&nodes).await - sent_before;
    eprintln!(
        "{} partitions moved holding {:.1} MB; killed n4 after {:.1} MB; sent {:.1} MB in all \
         ({:.3} x the partitions' size); the rest took {:.1} s after the restart",
        moving.len(),
        size / 1e6,
        at_kill / 1e6,
        total / 1e6,
        total / size,
        took.as_secs_f64()
    );
    assert!(total >= size, "sent {total} bytes of {size}");
    assert!(
        total < 1.2 * size,
        "the transfer started again instead of resuming: {total} bytes sent for {size}"
    );
    // Every replica of every key, n4's included (asked of each preflist owner's Node service):
    // present and the same.
    for i in (0..keys).step_by(5) {
        let k = format!("r{i:05}");
        let sets = common::cluster::replicas(&named, &k).await;
        assert!(
            sets.iter().all(|s| *s == sets[0] && !s.is_empty()),
            "{k}: {sets:?}"
        );
    }
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Foreground throughput while a join moves data (a measurement, not a check: run it with
/// `cargo test --release -p levee-node --test integration ring_transitions:: -- --ignored --nocapture`). Four
/// processes run throughout — n4 idle and outside the list until the join — so the phases
/// compare the same CPU contention. `LEVEE_BENCH_KEYS` (20000 keys of 4 KiB) sizes the transfer;
/// `LEVEE_BENCH_RATE` (bytes per second per source; default: the node's, 32 MiB/s) and
/// `LEVEE_BENCH_BUSY` (`[handoff] busy_percent`; default: the node's) pace it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore]
async fn foreground_throughput_while_a_join_moves_data() {
    let _one = SERIAL.lock().await;
    let keys = env_or("LEVEE_BENCH_KEYS", 20_000);
    let rate = env_or("LEVEE_BENCH_RATE", 32 << 20);
    let busy = env_or("LEVEE_BENCH_BUSY", 0);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap().to_string();
    let _down = Down(dir.clone());
    let (rate_s, busy_s) = (rate.to_string(), busy.to_string());
    let mut opts = vec!["--handoff-bytes-per-sec", &rate_s];
    if busy > 0 {
        opts.extend(["--handoff-busy-percent", &busy_s]);
    }
    let mut nodes = nodes_of(&common::cluster::up3(&d, &opts));
    run(&["add", &d, "n4"]);
    nodes.extend(nodes_of(&run(&["start", &d, "n4"])));
    let addrs: Vec<String> = nodes[..3].iter().map(|n| n.1.clone()).collect();

    // Preload, 16 writers.
    let started = Instant::now();
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let a = addrs[w % 3].clone();
            tokio::spawn(async move {
                let mut kv = common::load::lazy(&a);
                for i in (w..keys).step_by(16) {
                    kv.put(pb::PutRequest {
                        bucket: "b".into(),
                        key: format!("p{i:06}").into(),
                        value: vec![b'p'; 4096],
                        bucket_type: "siblings".into(),
                        w: common::load::quorum(2),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    eprintln!(
        "preloaded {keys} keys of 4 KiB in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let h = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let load = Load {
        keys: 300,
        pad: 1024,
    };
    let clients = spawn_clients(CLIENTS, load, &addrs, &h, &stop, &acked);
    let sample = |secs: u64| {
        let acked = acked.clone();
        async move {
            let (t0, a0) = (Instant::now(), acked.load(Ordering::Relaxed));
            tokio::time::sleep(Duration::from_secs(secs)).await;
            (acked.load(Ordering::Relaxed) - a0) as f64 / t0.elapsed().as_secs_f64()
        }
    };
    tokio::time::sleep(Duration::from_secs(2)).await; // warm-up
    let before = sample(15).await;
    let sent0 = sent_by_first_three(&nodes).await;
    run(&["members", &d, "2", "n1", "n2", "n3", "n4"]);
    let named: Vec<(String, String)> = nodes.iter().map(|n| (n.0.clone(), n.1.clone())).collect();
    let (t0, a0) = (Instant::now(), acked.load(Ordering::Relaxed));
    // Acknowledged writes sampled through the join, for its second half.
    let joined = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (acked, joined) = (acked.clone(), joined.clone());
        tokio::spawn(async move {
            let mut v = vec![(Instant::now(), acked.load(Ordering::Relaxed))];
            while !joined.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(250)).await;
                v.push((Instant::now(), acked.load(Ordering::Relaxed)));
            }
            v
        })
    };
    let took = wait_settled(&dir, &named, 2, Duration::from_secs(600)).await;
    joined.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    let during = (acked.load(Ordering::Relaxed) - a0) as f64 / t0.elapsed().as_secs_f64();
    let late = samples
        .iter()
        .find(|(at, _)| *at >= t0 + took / 2)
        .zip(samples.last())
        .filter(|((a, _), (b, _))| b > a)
        .map(|((a, x), (b, y))| (y - x) as f64 / (*b - *a).as_secs_f64());
    let moved = sent_by_first_three(&nodes).await - sent0;
    let after = sample(15).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let late = late.map_or("too short to split".to_string(), |l| {
        format!("{l:.0} ({:+.1} %)", (l / before - 1.0) * 100.0)
    });
    eprintln!(
        "acknowledged writes/s: before {before:.0}, during the join {during:.0} ({:+.1} %; its second half {late}), after {after:.0}",
        (during / before - 1.0) * 100.0
    );
    let busy = if busy == 0 {
        "the default busy share".to_string()
    } else {
        format!("busy at most {busy} %")
    };
    let throttle = if rate == 0 {
        format!("no byte limit, {busy}")
    } else {
        format!("at most {:.1} MB/s per source, {busy}", rate as f64 / 1e6)
    };
    eprintln!(
        "join moved {:.1} MB in {:.1} s: {:.1} MB/s ({throttle})",
        moved / 1e6,
        took.as_secs_f64(),
        moved / 1e6 / took.as_secs_f64(),
    );
    if let Err(v) = history::check(&h) {
        panic!("history violations:\n{}", history::report(&v, 20));
    }
}
