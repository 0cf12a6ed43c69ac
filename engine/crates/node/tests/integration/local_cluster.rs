//! Three real `levee serve` processes started by the local-cluster harness (hack/local-cluster.sh,
//! also behind `make cluster-demo`): every node computes the same claim from the shared members
//! file, a member killed with SIGKILL comes back with the same claim, a new address reaches every
//! node while they run, and a join starts the same ring transition on every node (and taking it
//! back cancels it everywhere).

use crate::common;

use common::cluster::{run, Down};
use std::time::{Duration, Instant};

use levee_proto::v1 as pb;
use pb::admin_client::AdminClient;

async fn members(addr: &str) -> pb::MembersResponse {
    AdminClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner()
}

async fn wait_for_version(addr: &str, version: u64) -> pb::MembersResponse {
    let start = Instant::now();
    loop {
        let m = members(addr).await;
        if m.version == version || start.elapsed() > Duration::from_secs(10) {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_local_nodes_share_one_claim_across_kills_and_member_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _down = Down(dir.clone());
    let up = run(&["up", d, "3", "--ring-size", "16", "--n-val", "3"]);
    // "name address metrics pid" per node
    let nodes: Vec<(String, String)> = up
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    assert_eq!(nodes.len(), 3, "{up}");

    let first = members(&nodes[0].1).await;
    assert_eq!((first.version, first.members.len()), (1, 3));
    assert_eq!(first.owners.len(), 16);
    for (name, addr) in &nodes {
        let m = members(addr).await;
        assert_eq!(m.owners, first.owners, "{name} computes another claim");
        let owned = m.owners.iter().filter(|o| *o == name).count();
        assert!((5..=6).contains(&owned), "{name} owns {owned} of 16");
    }

    // SIGKILL one member and start it again: it comes back with the committed list and claim.
    run(&["kill", d, "n2"]);
    run(&["start", d, "n2"]);
    assert_eq!(members(&nodes[1].1).await.owners, first.owners);

    // A newer version of the same members reaches every running node; nothing moves.
    run(&["members", d, "2", "n1", "n2", "n3"]);
    for (name, addr) in &nodes {
        let m = wait_for_version(addr, 2).await;
        assert_eq!(m.version, 2, "{name} did not take version 2");
        assert_eq!(m.owners, first.owners);
    }

    // A fourth member moves partitions: every node starts the same ring transition (same target
    // claim) and keeps routing with the claim it has; n4 never comes, so it cannot complete
    // (even though every vnode to move is empty).
    std::fs::create_dir_all(dir.join("n4")).unwrap();
    std::fs::write(dir.join("n4/ports"), "1 2\n").unwrap();
    run(&["members", d, "3", "n1", "n2", "n3", "n4"]);
    let mut target = None;
    for (name, addr) in &nodes {
        let m = wait_for_version(addr, 3).await;
        assert_eq!(m.version, 3, "{name} did not take version 3");
        assert_eq!((m.routing_version, &m.owners), (2, &first.owners), "{name}");
        assert!(
            m.target_owners.iter().any(|o| o == "n4"),
            "{name}: {:?}",
            m.target_owners
        );
        let t = target.get_or_insert_with(|| m.target_owners.clone());
        assert_eq!(*t, m.target_owners, "{name} computes another target");
    }
    // Taken back (the first three again): the transition is cancelled everywhere, nothing moved.
    run(&["members", d, "4", "n1", "n2", "n3"]);
    for (name, addr) in &nodes {
        let m = wait_for_version(addr, 4).await;
        assert_eq!(m.version, 4, "{name} did not take version 4");
        assert!(
            m.target_owners.is_empty(),
            "{name} still moves: {:?}",
            m.target_owners
        );
        assert_eq!((m.routing_version, &m.owners), (4, &first.owners), "{name}");
    }
}
