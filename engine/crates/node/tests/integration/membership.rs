//! The member list through a real `levee serve`: the members file (re-read while running, as a
//! ConfigMap volume changes in place), the SetMembers RPC, the committed list across a restart,
//! and a list that moves partitions starting a ring transition (and one taking it back cancelling
//! it).

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Node;
use levee_proto::v1 as pb;
use tonic::Code;

fn members_json(version: u64, members: &[(&str, &str)]) -> String {
    let m: Vec<String> = members
        .iter()
        .map(|(n, a)| format!(r#"{{"name": "{n}", "address": "{a}", "zone": ""}}"#))
        .collect();
    format!(r#"{{"version": {version}, "members": [{}]}}"#, m.join(", "))
}

fn start(dir: &Path, config: &Path) -> Node {
    Node::start(
        dir,
        &["--node-name", "n1", "--config", config.to_str().unwrap()],
    )
}

async fn members(node: &Node) -> pb::MembersResponse {
    node.admin()
        .await
        .members(pb::MembersRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// Polls until the node runs member list `version` (the watcher re-reads every second).
async fn wait_for_version(node: &Node, version: u64) -> pb::MembersResponse {
    let start = Instant::now();
    loop {
        let m = members(node).await;
        if m.version == version {
            return m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still at version {} after 10 s, waiting for {version}",
            m.version
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn set(version: u64, members: &[(&str, &str)]) -> pb::SetMembersRequest {
    pb::SetMembersRequest {
        version,
        members: members
            .iter()
            .map(|(n, a)| pb::Member {
                name: n.to_string(),
                address: a.to_string(),
                zone: String::new(),
            })
            .collect(),
    }
}

const THREE: [(&str, &str); 3] = [
    ("n1", "10.0.0.1:8087"),
    ("n2", "10.0.0.2:8087"),
    ("n3", "10.0.0.3:8087"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_member_list_is_watched_committed_and_a_join_starts_a_transition() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let file = tmp.path().join("members.json");
    let config = tmp.path().join("levee.toml");
    std::fs::write(
        &config,
        format!(
            "[cluster]\nring_size = 8\nn_val = 3\nmembers_file = \"{}\"\n",
            file.display()
        ),
    )
    .unwrap();
    std::fs::write(&file, members_json(3, &THREE)).unwrap();
    let node = start(&dir, &config);
    let m = members(&node).await;
    assert_eq!(m.version, 3);
    assert_eq!(m.members.len(), 3);
    assert_eq!((m.ring_size, m.n_val), (8, 3));
    let owners = m.owners.clone();
    for n in ["n1", "n2", "n3"] {
        let c = owners.iter().filter(|o| *o == n).count();
        assert!((2..=3).contains(&c), "{n} owns {c} of 8: {owners:?}");
    }

    // A new address under a newer version: adopted while running, same owners.
    let moved = [THREE[0], ("n2", "10.0.9.9:8087"), THREE[2]];
    std::fs::write(&file, members_json(4, &moved)).unwrap();
    let m = wait_for_version(&node, 4).await;
    assert_eq!(m.members[1].address, "10.0.9.9:8087");
    assert_eq!(m.owners, owners);

    // A join moves partitions: a ring transition starts (logged), requests keep the old owners.
    // n4 is never reachable here, so it cannot complete.
    let four = [moved[0], moved[1], moved[2], ("n4", "10.0.0.4:8087")];
    std::fs::write(&file, members_json(5, &four)).unwrap();
    node.wait_for_log("starts a ring transition");
    let m = wait_for_version(&node, 5).await;
    assert_eq!((m.routing_version, &m.owners), (4, &owners));
    assert!(
        m.target_owners.iter().any(|o| o == "n4"),
        "{:?}",
        m.target_owners
    );

    let mut admin = node.admin().await;
    let e = admin.set_members(set(2, &THREE)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = admin
        .set_members(set(7, &[("n1", "no-port")]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // The RPC takes what the file would: the three members again cancel the transition.
    let r = admin
        .set_members(set(8, &moved))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.version, r.owners.clone()), (8, owners.clone()));
    assert!(r.target_owners.is_empty(), "{:?}", r.target_owners);

    // Committed: after a kill, with the file gone, the node comes back with version 8.
    drop(admin);
    drop(node);
    std::fs::remove_file(&file).unwrap();
    let node = start(&dir, &config);
    let m = members(&node).await;
    assert_eq!((m.version, m.owners), (8, owners));
}
