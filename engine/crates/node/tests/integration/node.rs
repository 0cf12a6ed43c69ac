//! Integration tests against a real `levee serve` process: every RPC through a tonic client,
//! streaming with pagination, error codes, deadlines, concurrent clients, the metrics contract,
//! recovery after a process kill and SIGTERM draining. Servers bind port 0 and report their
//! addresses on stdout.

use crate::common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::{add_int, int_term, put, Node, SIGTERM};
use levee_proto::v1 as pb;
use pb::kv_client::KvClient;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_kv_rpc_with_streaming_pagination_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let mut kv = node.kv().await;

    let sqn = kv
        .put(put("users", "alice", b"v1", vec![add_int("age_int", 31)]))
        .await
        .unwrap()
        .into_inner()
        .sqn;
    assert!(sqn > 0);
    let g = kv
        .get(pb::GetRequest {
            bucket: "users".into(),
            key: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (g.value.as_slice(), g.metadata.as_slice(), g.sqn),
        (&b"v1"[..], &b"vv"[..], sqn)
    );
    let h = kv
        .head(pb::HeadRequest {
            bucket: "users".into(),
            key: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((h.sqn, h.value_size), (sqn, 2));
    kv.delete(pb::DeleteRequest {
        bucket: "users".into(),
        key: "alice".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let e = kv
        .get(pb::GetRequest {
            bucket: "users".into(),
            key: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = kv
        .head(pb::HeadRequest {
            bucket: "users".into(),
            key: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // 300 objects spread over the 8 vnodes; the coverage query merges them in (term, key) order.
    for i in 0..300i64 {
        kv.put(put(
            "people",
            &format!("p{i:03}"),
            b"x",
            vec![add_int("score_int", i % 50)],
        ))
        .await
        .unwrap();
    }
    let req = |page_size, max_results, continuation| pb::IndexQueryRequest {
        bucket: "people".into(),
        field: "score_int".into(),
        start: int_term(10),
        end: int_term(19),
        return_terms: true,
        term_regex: String::new(),
        page_size,
        max_results,
        continuation,
        ..Default::default()
    };
    let mut stream = kv
        .index_query(req(7, 0, vec![]))
        .await
        .unwrap()
        .into_inner();
    let mut all = Vec::new();
    let mut pages = 0;
    while let Some(p) = stream.message().await.unwrap() {
        assert!(p.results.len() <= 7);
        pages += 1;
        all.extend(p.results.into_iter().map(|r| {
            let Some(pb::term::Kind::Int(t)) = r.term.unwrap().kind else {
                panic!()
            };
            (t, String::from_utf8(r.key).unwrap())
        }));
    }
    assert_eq!(all.len(), 60);
    assert!(pages >= 9, "{pages} pages");
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "results in (term, key) order across vnodes");
    // max_results stops with a continuation; resuming gives the rest.
    let mut first = kv
        .index_query(req(10, 25, vec![]))
        .await
        .unwrap()
        .into_inner();
    let (mut got, mut cont) = (Vec::new(), Vec::new());
    while let Some(p) = first.message().await.unwrap() {
        got.extend(p.results.into_iter().map(|r| r.key));
        cont = p.continuation;
    }
    assert_eq!(got.len(), 25);
    assert!(!cont.is_empty());
    let mut rest = kv.index_query(req(10, 0, cont)).await.unwrap().into_inner();
    while let Some(p) = rest.message().await.unwrap() {
        got.extend(p.results.into_iter().map(|r| r.key));
    }
    assert_eq!(got.len(), 60);
    assert_eq!(got.iter().collect::<BTreeSet<_>>().len(), 60);

    // ListKeys streams every key of the bucket.
    let mut keys = kv
        .list_keys(pb::ListKeysRequest {
            bucket: "people".into(),
            page_size: 16,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while let Some(p) = keys.message().await.unwrap() {
        assert!(p.keys.len() <= 16);
        n += p.keys.len();
    }
    assert_eq!(n, 300);

    // Bad input: the right codes, with messages a user can act on.
    let e = kv.put(put("users", "", b"v", vec![])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("key is empty"), "{}", e.message());
    let e = kv.put(put("a\0b", "k", b"v", vec![])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let mut bad = req(10, 0, vec![]);
    bad.start = Some(pb::Term {
        kind: Some(pb::term::Kind::Bin(b"a".to_vec())),
    });
    bad.end = Some(pb::Term {
        kind: Some(pb::term::Kind::Bin(b"z".to_vec())),
    });
    bad.term_regex = "(".into();
    let e = kv.index_query(bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("term_regex"), "{}", e.message());
    let mut bad = req(10, 0, vec![]);
    bad.start = None;
    assert_eq!(
        kv.index_query(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    let bad = pb::PutRequest {
        index_changes: vec![pb::IndexChange {
            op: 0,
            field: "f_int".into(),
            term: int_term(1),
        }],
        ..put("users", "k", b"v", vec![])
    };
    assert_eq!(kv.put(bad).await.unwrap_err().code(), Code::InvalidArgument);
    let e = kv
        .index_query(req(10, 0, b"junk".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // The client's deadline is honoured: with 1 ms the node starts no partition (none would
    // finish in time) and says so — or, if its answer is too late, the call ends with a deadline
    // error; either way nothing runs behind the call.
    for i in 0..3000 {
        kv.put(put("bulk", &format!("b{i}"), b"x", vec![]))
            .await
            .unwrap();
    }
    let rebuilds = |c: &Vec<HashMap<String, f64>>| -> Vec<f64> {
        c.iter().map(|v| v["aae_rebuilds"]).collect()
    };
    let before = rebuilds(&node.vnode_counters().await);
    let mut admin = node.admin().await;
    let mut slow = tonic::Request::new(pb::RebuildAaeRequest {
        partitions: vec![],
        journal_check: true,
    });
    slow.set_timeout(Duration::from_millis(1));
    match admin.rebuild_aae(slow).await {
        Ok(r) => {
            let r = r.into_inner();
            assert_eq!(r.rebuilt, 0, "{r:?}");
            assert_eq!(r.not_started as usize, before.len(), "{r:?}");
            assert!(r.partitions[0].error.contains("deadline"), "{r:?}");
        }
        Err(e) => assert!(
            matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
            "{e:?}"
        ),
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        rebuilds(&node.vnode_counters().await),
        before,
        "no partition is started that the deadline would cut"
    );

    // The CLI sends its --timeout; the node reports every partition. With ample time all are
    // done and it exits 0; with 0.3 s (0.2 s after the node's margin for the answer) the node
    // answers in time with what it did — each partition done or not started, the rebuild counters
    // moved by exactly the done ones — and the CLI exits 1 if any was not started.
    let levee = |timeout: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_levee"))
            .args(["admin", "aae-rebuild", "--journal-check", "--json"])
            .args(["--addr", &node.addr, "--timeout", timeout])
            .output()
            .unwrap()
    };
    let out = levee("60");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vnodes = before.len() as u64;
    assert_eq!(r["rebuilt"], vnodes, "{r}");
    assert_eq!(
        r["partitions"].as_array().unwrap().len() as u64,
        vnodes,
        "{r}"
    );
    let before = rebuilds(&node.vnode_counters().await);
    let out = levee("0.3");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no answer within the deadline ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let parts = r["partitions"].as_array().unwrap();
    let state = |s: &str| parts.iter().filter(|p| p["state"] == s).count() as u64;
    assert_eq!(parts.len() as u64, vnodes, "{r}");
    assert_eq!(state("done") + state("not_started"), vnodes, "{r}");
    assert_eq!(r["rebuilt"], state("done"), "{r}");
    assert_eq!(r["not_started"], state("not_started"), "{r}");
    let after = rebuilds(&node.vnode_counters().await);
    let moved: f64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    assert_eq!(
        moved as u64,
        state("done"),
        "rebuilds per vnode {after:?} vs {before:?}"
    );
    assert_eq!(out.status.success(), state("not_started") == 0, "{r}");
    if state("not_started") > 0 {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not started before the deadline"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_values_are_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("levee.toml");
    std::fs::write(&cfg, "max_value_bytes = 1024\nmax_message_bytes = 4096\n").unwrap();
    let node = Node::start(
        &dir.path().join("data"),
        &["--config", cfg.to_str().unwrap()],
    );
    let mut kv = node.kv().await;
    let e = kv
        .put(put("b", "k", &[0u8; 2048], vec![]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // Over the gRPC message limit tonic itself refuses the message (OUT_OF_RANGE).
    let e = kv
        .put(put("b", "k", &[0u8; 8192], vec![]))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::ResourceExhausted | Code::OutOfRange),
        "message over max_message_bytes: {e:?}"
    );
    assert!(e.message().contains("too large"), "{e:?}");
    kv.put(put("b", "k", &[0u8; 1000], vec![])).await.unwrap();
    // The Admin service has the same limit (tonic's default would take 4 MiB).
    let mut admin = node.admin().await;
    let segment_keys = |n: u32| pb::AaeSegmentKeysRequest {
        partition: 0,
        segments: (0..n).collect(),
    };
    let e = admin
        .aae_segment_keys(segment_keys(3000))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::ResourceExhausted | Code::OutOfRange)
            && e.message().contains("too large"),
        "admin message over max_message_bytes: {e:?}"
    );
    admin.aae_segment_keys(segment_keys(100)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_clients_admin_rpcs_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let addr = node.grpc.clone();
            tokio::spawn(async move {
                let mut kv = KvClient::connect(addr).await.unwrap();
                for round in 0..3 {
                    for i in 0..100 {
                        let key = format!("t{t}-{i}");
                        let value = format!("{round}").repeat(500).into_bytes();
                        kv.put(put("c", &key, &value, vec![])).await.unwrap();
                        let g = kv
                            .get(pb::GetRequest {
                                bucket: "c".into(),
                                key: key.into(),
                                ..Default::default()
                            })
                            .await
                            .unwrap()
                            .into_inner();
                        assert_eq!(g.value, value);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut admin = node.admin().await;
    let st = admin
        .status(pb::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((st.ring_size, st.vnodes), (8, 8));
    let stats = admin.stats(pb::StatsRequest {}).await.unwrap().into_inner();
    assert_eq!(stats.totals["puts"], 2400.0);
    assert_eq!(stats.vnodes.len(), 8);

    // The metrics contract, both ways: every metric docs/metrics.md lists is exported with that
    // name and type, and every `levee_*` metric exported is listed there.
    let contract = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../docs/metrics.md"
    ))
    .unwrap();
    // The node's table: the rows before the operator's section.
    let documented: BTreeMap<String, String> = contract
        .lines()
        .take_while(|l| !l.starts_with("## Operator metrics"))
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| {
            let (name, rest) = l.split_once('`').unwrap();
            let kind = rest
                .trim_start_matches([' ', '|'])
                .split(' ')
                .next()
                .unwrap();
            (name.to_string(), kind.to_string())
        })
        .collect();
    assert!(documented.len() >= 20, "contract parsed: {documented:?}");
    let exported = node.metric_types();
    // This node serves plaintext; the TLS-only gauge is checked by dashboards' TestMetricContract.
    const TLS_ONLY: &str = "levee_tls_cert_expiry_timestamp_seconds";
    assert!(documented.contains_key(TLS_ONLY));
    for (name, kind) in documented.iter().filter(|(n, _)| n.as_str() != TLS_ONLY) {
        assert_eq!(
            exported.get(name),
            Some(kind),
            "metric {name} ({kind}) from docs/metrics.md: exported as {:?}",
            exported.get(name)
        );
    }
    let undocumented: Vec<&String> = exported
        .keys()
        .filter(|n| n.starts_with("levee_") && !documented.contains_key(*n))
        .collect();
    assert!(
        undocumented.is_empty(),
        "exported but not in docs/metrics.md: {undocumented:?}"
    );
    let before = node.scrape();
    assert!(before["levee_requests_total"] >= 4800.0);
    assert!(before["levee_user_bytes_written_total"] >= 2400.0 * 500.0);

    // Flush so the overwritten records are below the persisted SQN, then compaction and an AAE
    // rebuild move their metrics.
    for _ in 0..4 {
        let mut kv = node.kv().await;
        for i in 0..100 {
            kv.put(put("c", &format!("t0-{i}"), &[7u8; 500], vec![]))
                .await
                .unwrap();
        }
    }
    let r = admin
        .compact_journal(pb::CompactJournalRequest { partitions: vec![] })
        .await
        .unwrap()
        .into_inner();
    let a = admin
        .rebuild_aae(pb::RebuildAaeRequest {
            partitions: vec![0, 1],
            journal_check: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.rebuilt, 2);
    let after = node.scrape();
    assert_eq!(
        after["levee_aae_rebuilds_total"],
        before["levee_aae_rebuilds_total"] + 2.0
    );
    assert_eq!(
        after["levee_journal_compaction_runs_total"],
        before["levee_journal_compaction_runs_total"] + r.runs as f64
    );
    let t = admin
        .aae_tree(pb::AaeTreeRequest { partition: 3 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.segment_count, 1024);
    let e = admin
        .aae_tree(pb::AaeTreeRequest { partition: 99 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // Alone, the node is its own (provisional, version 0) member list and owns the whole ring;
    // the membership RPCs are tested in tests/integration/membership.rs.
    let m = admin
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!((m.version, m.members.len(), m.owners.len()), (0, 1, 8));
    assert_eq!(m.members[0].address, node.addr);
}

/// What a process kill shows: after SIGKILL the node recovers every acknowledged put by replaying
/// its journal (nothing was flushed to the ledger, so every value comes back through the replay).
/// A process kill keeps the page cache, so this passes with every fsync removed; that acknowledged
/// `sync` writes survive a power cut is proven on the engine's simulated disk by
/// `engine/crates/store/tests/power_loss.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_puts_survive_a_process_kill() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--sync-on-write", "sync"]);
    let mut kv = node.kv().await;
    for i in 0..500 {
        kv.put(put(
            "d",
            &format!("k{i}"),
            format!("value {i}").as_bytes(),
            vec![],
        ))
        .await
        .unwrap();
    }
    // One after another, each acknowledged write waited for an fdatasync of its own.
    // (That every documented metric is served is `concurrent_clients_admin_rpcs_and_metrics`'s.)
    let text = node.metrics_text();
    let fsyncs = sample(&text, "levee_journal_fsyncs_total");
    assert!(
        fsyncs >= 500.0,
        "{fsyncs} journal fdatasyncs for 500 synced puts"
    );
    assert!(sample(&text, "levee_journal_fsync_seconds_total") > 0.0);
    drop(node); // SIGKILL (Child::kill) and wait
    let node = Node::start(dir.path(), &["--sync-on-write", "sync"]);
    // The restart replayed all 500 records: none had reached the ledger before the kill.
    let sqns: Vec<(f64, f64)> = node
        .vnode_counters()
        .await
        .iter()
        .map(|c| (c["persisted_sqn"], c["last_sqn"]))
        .collect();
    let replayed: f64 = sqns.iter().map(|(persisted, last)| last - persisted).sum();
    assert_eq!(
        replayed, 500.0,
        "(persisted_sqn, last_sqn) per vnode: {sqns:?}"
    );
    let mut kv = node.kv().await;
    for i in 0..500 {
        let g = kv
            .get(pb::GetRequest {
                bucket: "d".into(),
                key: format!("k{i}").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(g.value, format!("value {i}").into_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_in_flight_requests_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--shutdown-timeout-secs", "20"]);
    let addr = node.grpc.clone();
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut kv = KvClient::connect(addr).await.unwrap();
                let mut acked = Vec::new();
                for i in 0.. {
                    match kv
                        .put(put("s", &format!("{t}-{i}"), &[1u8; 4096], vec![]))
                        .await
                    {
                        Ok(_) => acked.push(format!("{t}-{i}")),
                        Err(e) => {
                            // A put the draining node refused, or one whose connection went
                            // away: transport codes only, never a store or argument error. (h2
                            // reports a GOAWAY race as Internal "h2 protocol error".)
                            let transport = matches!(
                                e.code(),
                                Code::Unavailable | Code::Unknown | Code::Cancelled
                            ) || (e.code() == Code::Internal
                                && ["h2", "connection", "stream"]
                                    .iter()
                                    .any(|w| e.message().contains(w)));
                            assert!(transport, "{e:?}");
                            break;
                        }
                    }
                }
                acked
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    node.signal(SIGTERM);
    let status = tokio::task::spawn_blocking(move || {
        let s = node.child.wait().unwrap();
        (s, node)
    })
    .await
    .unwrap();
    let (status, node) = status;
    assert!(status.success(), "exit status {status:?}");
    assert!(start.elapsed() < Duration::from_secs(20));
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(acked.len() > 10);
    let log = std::fs::read_to_string(&node.stderr).unwrap();
    assert!(log.contains("stores flushed and closed"), "{log}");
    drop(node);
    // Reopen: nothing to replay (every vnode's ledger holds its last SQN), no warnings, every
    // acknowledged put present.
    let node = Node::start(dir.path(), &[]);
    let sqns: Vec<(f64, f64)> = node
        .vnode_counters()
        .await
        .iter()
        .map(|c| (c["persisted_sqn"], c["last_sqn"]))
        .collect();
    assert!(
        sqns.iter().all(|(persisted, last)| persisted == last),
        "a clean shutdown left records to replay: (persisted_sqn, last_sqn) per vnode {sqns:?}"
    );
    let last: f64 = sqns.iter().map(|(_, last)| last).sum();
    assert!(
        last >= acked.len() as f64,
        "SQNs {last} for {} acknowledged puts",
        acked.len()
    );
    let mut kv = node.kv().await;
    for k in &acked {
        kv.get(pb::GetRequest {
            bucket: "s".into(),
            key: k.clone().into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let log = std::fs::read_to_string(&node.stderr).unwrap();
    assert!(
        !log.contains("WARN") && !log.contains("ERROR"),
        "reopen logged problems: {log}"
    );
}

/// On SIGTERM gRPC health turns NOT_SERVING (as /readyz does) before the node drains, so a client
/// watching it stops sending. The watch stream is the client's: the node exits once its drain
/// timeout passes even though the stream stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_turns_not_serving_on_sigterm() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), &["--shutdown-timeout-secs", "3"]);
    let channel = tonic::transport::Endpoint::from_shared(node.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "levee.v1.KV".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    node.signal(SIGTERM);
    let next = tokio::time::timeout(Duration::from_secs(2), watch.message())
        .await
        .expect("no health update within 2 s of SIGTERM")
        .unwrap()
        .expect("the watch ended without a status");
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    let status = tokio::task::spawn_blocking(move || node.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
}

/// With `shutdown_delay_secs`, a node that gets SIGTERM reports not ready at once but keeps
/// accepting connections and serving for the delay — a Service still routes new connections to
/// it until its endpoints drop the member — then drains and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_shutdown_delay_serves_new_connections_while_not_ready() {
    // The status code of /readyz; None once the port is closed.
    let readyz = |node: &Node| {
        let r = node.http_get("/readyz").ok()?;
        r.split_whitespace().nth(1).map(str::to_string)
    };
    let dir = tempfile::tempdir().unwrap();
    let delay = Duration::from_secs(3);
    let mut node = Node::start(dir.path(), &["--shutdown-delay-secs", "3"]);
    assert_eq!(readyz(&node).as_deref(), Some("200"));
    let signalled = Instant::now();
    node.signal(SIGTERM);
    while readyz(&node).as_deref() != Some("503") {
        assert!(
            signalled.elapsed() < Duration::from_secs(1),
            "/readyz still not 503 a second after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A new connection, as one routed here before the endpoints change: served.
    let mut kv = node.kv().await;
    kv.put(put("b", "late", b"v", vec![])).await.unwrap();
    let got = kv
        .get(pb::GetRequest {
            bucket: "b".into(),
            key: "late".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.value, b"v");
    assert!(
        signalled.elapsed() < delay,
        "the checks took longer than the delay ({:?}): they prove nothing",
        signalled.elapsed()
    );
    let status = tokio::task::spawn_blocking(move || node.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        signalled.elapsed() >= delay,
        "exited {:?} after SIGTERM, before the delay",
        signalled.elapsed()
    );
}

/// A SIGTERM sent the moment the startup line appears drains the node like any other: the
/// handlers are installed before that line, so the signal never meets the default action (which
/// killed the process with its stores open). Several starts, since a late handler lost the race
/// only now and then.
#[test]
fn sigterm_right_after_the_startup_line_drains_the_node() {
    for _ in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let mut node = Node::start(dir.path(), &[]);
        node.signal(SIGTERM);
        let status = node.child.wait().unwrap();
        let log = std::fs::read_to_string(&node.stderr).unwrap();
        assert!(
            status.success() && log.contains("stores flushed and closed"),
            "exit status {status:?}; log:\n{log}"
        );
    }
}

/// Runs the `levee` CLI against `addr`.
fn cli(addr: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_levee"))
        .args(args)
        .args(["--addr", addr])
        .output()
        .unwrap()
}

/// Runs the `levee` CLI against `addr` with `--json`; its stdout lines.
fn cli_json(addr: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let out = cli(addr, &[args, &["--json"]].concat());
    assert!(
        out.status.success(),
        "levee {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_resumes_a_query_from_its_token_and_lists_keys_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let mut kv = node.kv().await;
    for i in 0..30i64 {
        kv.put(put(
            "cli",
            &format!("k{i:02}"),
            b"v",
            vec![add_int("n_int", i)],
        ))
        .await
        .unwrap();
    }
    let q = ["query", "cli", "n_int", "0", "100"];
    let first = cli_json(&node.addr, &[&q[..], &["--max-results", "10"]].concat());
    assert_eq!(first.len(), 11, "10 results and the token: {first:?}");
    let token = first[10]["continuation"].as_str().unwrap().to_string();
    let rest = cli_json(&node.addr, &[&q[..], &["--continuation", &token]].concat());
    let keys: Vec<&str> = first[..10]
        .iter()
        .chain(&rest)
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    let want: Vec<String> = (0..30).map(|i| format!("k{i:02}")).collect();
    assert_eq!(keys, want, "resumed where the first run stopped");
    // Another query's token is refused.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_levee"))
        .args([
            "query",
            "cli",
            "n_int",
            "0",
            "99",
            "--continuation",
            &token,
            "--addr",
        ])
        .arg(&node.addr)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not belong to this query"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = cli_json(&node.addr, &["list-keys", "cli"]);
    assert_eq!(listed.len(), 1, "one JSON array");
    let mut got: Vec<String> = serde_json::from_value(listed[0].clone()).unwrap();
    got.sort();
    assert_eq!(got, want);
}

/// `--json` never mangles bytes: values and metadata are base64 by default (hex or utf8 on
/// request, and utf8 refuses what is not text), keys are utf8 unless `--key-encoding` says
/// otherwise, and a key that is not text is an error naming the option instead of U+FFFD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_binary_values_and_keys_without_mangling_them() {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let mut kv = node.kv().await;
    let value: Vec<u8> = (0..=255u8).collect();
    let metadata = vec![0xc3, 0x28, 0x00];
    kv.put(pb::PutRequest {
        metadata: metadata.clone(),
        ..put("bin", "k", &value, vec![])
    })
    .await
    .unwrap();
    let binary_key = vec![b'k', 0xff, 0xfe];
    kv.put(pb::PutRequest {
        key: binary_key.clone(),
        ..put("bin", "", b"v", vec![add_int("n_int", 7)])
    })
    .await
    .unwrap();

    let g = &cli_json(&node.addr, &["get", "bin", "k"])[0];
    assert_eq!(g["value_encoding"], "base64");
    assert_eq!(b64.decode(g["value"].as_str().unwrap()).unwrap(), value);
    assert_eq!(
        b64.decode(g["metadata"].as_str().unwrap()).unwrap(),
        metadata
    );
    let s = &g["siblings"][0];
    assert_eq!(b64.decode(s["value"].as_str().unwrap()).unwrap(), value);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let g = &cli_json(&node.addr, &["get", "bin", "k", "--value-encoding", "hex"])[0];
    assert_eq!(g["value"].as_str().unwrap(), hex(&value));
    assert_eq!(g["metadata"].as_str().unwrap(), hex(&metadata));
    let out = cli(
        &node.addr,
        &["get", "bin", "k", "--json", "--value-encoding", "utf8"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not UTF-8") && err.contains("--value-encoding"),
        "{err}"
    );
    // Text output: the raw bytes, or the encoding asked for.
    assert_eq!(
        cli(&node.addr, &["get", "bin", "k"]).stdout,
        [&value[..], b"\n"].concat()
    );
    assert_eq!(
        cli(&node.addr, &["get", "bin", "k", "--value-encoding", "hex"]).stdout,
        format!("{}\n", hex(&value)).into_bytes()
    );

    // Keys.
    let out = cli(&node.addr, &["list-keys", "bin", "--json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--key-encoding"),
        "{err}"
    );
    let listed = cli_json(
        &node.addr,
        &["list-keys", "bin", "--key-encoding", "base64"],
    );
    let mut keys: Vec<Vec<u8>> = listed[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| b64.decode(k.as_str().unwrap()).unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, vec![b"k".to_vec(), binary_key.clone()]);
    let q = cli_json(
        &node.addr,
        &["query", "bin", "n_int", "0", "10", "--key-encoding", "hex"],
    );
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0]["key"].as_str().unwrap(), hex(&binary_key));
}

/// `levee admin aae-tree` and `aae-segment-keys --branch`: every key written is found under a
/// branch that is not zero in its vnode's tree, and each key is listed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_walks_the_aae_trees_down_to_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[]);
    let mut kv = node.kv().await;
    let want: BTreeSet<String> = (0..20).map(|i| format!("key{i}")).collect();
    for k in &want {
        kv.put(put("aae", k, b"v", vec![])).await.unwrap();
    }
    let mut found = Vec::new();
    for p in 0..8u32 {
        let partition = p.to_string();
        let t = &cli_json(
            &node.addr,
            &["admin", "aae-tree", "--partition", &partition],
        )[0];
        let branches = t["branches"].as_array().unwrap();
        assert_eq!(
            t["segments_per_branch"].as_u64().unwrap() * branches.len() as u64,
            t["segment_count"].as_u64().unwrap()
        );
        let root = branches
            .iter()
            .fold(0, |a, b| a ^ b.as_u64().unwrap() as u32);
        assert_eq!(root as u64, t["root"].as_u64().unwrap());
        for (b, h) in branches.iter().enumerate() {
            if h.as_u64() == Some(0) {
                continue;
            }
            let branch = b.to_string();
            let keys = &cli_json(
                &node.addr,
                &[
                    "admin",
                    "aae-segment-keys",
                    "--partition",
                    &partition,
                    "--branch",
                    &branch,
                ],
            )[0];
            let keys = keys.as_array().unwrap();
            assert!(
                !keys.is_empty(),
                "branch {b} of p{p} is {h} but has no keys"
            );
            for k in keys {
                assert_eq!(k["bucket"], "aae");
                found.push(k["key"].as_str().unwrap().to_string());
            }
        }
    }
    found.sort();
    assert_eq!(found, want.into_iter().collect::<Vec<_>>());
}

/// `levee_replica_reads_total{path}` of a node, as (reactor, pool).
fn read_paths(node: &Node) -> (f64, f64) {
    let text = node.metrics_text();
    let of = |path: &str| {
        sample(
            &text,
            &format!("levee_replica_reads_total{{path=\"{path}\"}}"),
        )
    };
    (of("reactor"), of("pool"))
}

/// The value of `series` (a metric name with its labels, as served) in a /metrics text.
fn sample(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// Drop every file under `dir` from the page cache (synced first, so the pages are clean).
fn evict_all(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            evict_all(&p);
            continue;
        }
        let Ok(f) = std::fs::File::open(&p) else {
            continue; // removed meanwhile (a flush or a merge)
        };
        f.sync_all().unwrap();
        // SAFETY: plain syscall on an open descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// A read of data in the page cache is answered on the async runtime; one whose value must come
/// from the disk goes to the blocking pool, and still returns the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_read_runs_on_the_reactor_and_a_read_from_disk_on_the_pool() {
    // In the target directory, not a tmpfs: the test needs a page cache it can empty.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let node = Node::start(dir.path(), &[]);
    let mut kv = node.kv().await;
    let value = vec![0x5au8; 64 << 10];
    kv.put(put("b", "k", &value, vec![])).await.unwrap();
    let get = || pb::GetRequest {
        bucket: "b".into(),
        key: "k".into(),
        ..Default::default()
    };

    let (r0, p0) = read_paths(&node);
    let g = kv.get(get()).await.unwrap().into_inner();
    assert_eq!(g.value, value);
    let (r1, p1) = read_paths(&node);
    assert_eq!(
        (r1 - r0, p1 - p0),
        (1.0, 0.0),
        "a GET of cached data on a node alone (one replica: one read of the object, not a HEAD \
         and then the value) did not run once, on the reactor"
    );

    // The kernel may keep a page that is busy at that moment (a loaded machine): evict again
    // until a read goes to the pool, a few times at most.
    let (mut r1, mut p1) = (r1, p1);
    for _ in 0..10 {
        evict_all(dir.path());
        let g = kv.get(get()).await.unwrap().into_inner();
        assert_eq!(g.value, value, "the value read from disk");
        let (r2, p2) = read_paths(&node);
        assert_eq!(r2 - r1 + p2 - p1, 1.0, "one read of the object");
        if p2 - p1 >= 1.0 {
            return;
        }
        (r1, p1) = (r2, p2);
    }
    panic!("the value's read from an evicted journal was answered on the reactor, 10 times");
}
