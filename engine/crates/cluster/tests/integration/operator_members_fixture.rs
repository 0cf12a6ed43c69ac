//! Contract with the operator: `fixtures/operator-members.json` is what the operator writes as
//! `members.json` into a KVCluster's ConfigMap (KVCluster default/orders, ring settled at 3
//! members, ring version 7). A Go test (operator/internal/controller/members_test.go,
//! `TestMembersJSONFixture`) fails when the operator's output for that cluster differs from
//! this file, so both sides are tied to it.

use levee_cluster::MemberList;

const FIXTURE: &str = include_str!("../fixtures/operator-members.json");

#[test]
fn the_operators_member_list_is_accepted() {
    let list = MemberList::parse(FIXTURE).expect("the node must accept the operator's member list");
    assert_eq!(list.version(), 7);
    let got: Vec<(&str, &str, &str)> = list
        .members()
        .iter()
        .map(|m| (m.name.as_str(), m.address.as_str(), m.zone.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("orders-0", "orders-0.orders-headless.default.svc:8087", ""),
            ("orders-1", "orders-1.orders-headless.default.svc:8087", ""),
            ("orders-2", "orders-2.orders-headless.default.svc:8087", ""),
        ]
    );
    assert_eq!(MemberList::parse(&list.to_json()).unwrap(), list);
}
