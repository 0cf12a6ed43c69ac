//! Table and property tests of the PUT and GET quorum decisions and of the quorum options.

use levee_cluster::{
    Actor, BucketTypeProps, Clock, ConflictPolicy, Failure, GetDecision, GetTracker, HeadReply,
    OptionsError, PutDecision, PutReply, PutTracker, QuorumOption, QuorumValue, ReadOptions,
    ReadQuorum, RepairReason, ReplicaRole, SiblingMeta, SiblingSet, TrackerError, WriteOptions,
    WriteQuorum,
};
use proptest::prelude::*;

fn roles(s: &str) -> Vec<ReplicaRole> {
    s.chars()
        .map(|c| match c {
            'P' => ReplicaRole::Primary,
            'F' => ReplicaRole::Fallback,
            _ => panic!("role {c}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// PUT
// ---------------------------------------------------------------------------------------------

fn put_reply(c: char) -> PutReply {
    match c {
        'W' => PutReply::Written,
        'D' => PutReply::Durable,
        'E' => PutReply::Failed(Failure::Error),
        'O' => PutReply::Failed(Failure::Overloaded),
        'T' => PutReply::Failed(Failure::Timeout),
        _ => panic!("put reply {c}"),
    }
}

fn put_code(d: &PutDecision) -> char {
    match d {
        PutDecision::Wait => '.',
        PutDecision::Succeeded(_) => 'S',
        PutDecision::Failed(e) => match e.option {
            QuorumOption::W => 'w',
            QuorumOption::Pw => 'p',
            QuorumOption::Dw => 'd',
            _ => '?',
        },
    }
}

struct PutCase {
    name: &'static str,
    /// n_val, w, pw, dw
    q: (u32, u32, u32, u32),
    roles: &'static str,
    /// (replica, reply) in arrival order
    replies: &'static [(usize, char)],
    /// The decision before any reply, then after each: `.` wait, `S` success, `w`/`p`/`d` the
    /// option that failed.
    expect: &'static str,
    /// The client message of the last decision, when it fails.
    message: Option<&'static str>,
}

#[test]
fn put_decisions() {
    let cases = [
        PutCase {
            name: "w=2: the second written replica acknowledges the client",
            q: (3, 2, 0, 0),
            roles: "PPP",
            replies: &[(0, 'W'), (1, 'W')],
            expect: "..S",
            message: None,
        },
        PutCase {
            name: "durable counts as written",
            q: (3, 2, 0, 0),
            roles: "PPP",
            replies: &[(2, 'D'), (0, 'D')],
            expect: "..S",
            message: None,
        },
        PutCase {
            name: "w=2: two failures fail at once, without waiting for the third",
            q: (3, 2, 0, 0),
            roles: "PPP",
            replies: &[(0, 'E'), (1, 'T')],
            expect: "..w",
            message: Some("quorum not met: w=2 needed, 0 ok, 2 failed"),
        },
        PutCase {
            name: "w=3: one written and two failed",
            q: (3, 3, 0, 0),
            roles: "PPP",
            replies: &[(0, 'W'), (1, 'E')],
            expect: "..w",
            message: Some("quorum not met: w=3 needed, 1 ok, 1 failed"),
        },
        PutCase {
            name: "w=2: one ok then two failures, the issue's example",
            q: (3, 2, 0, 0),
            roles: "PPP",
            replies: &[(0, 'W'), (1, 'E'), (2, 'O')],
            expect: "...w",
            message: Some("quorum not met: w=2 needed, 1 ok, 2 failed (1 overloaded)"),
        },
        PutCase {
            name: "a fallback's write counts toward w but not pw",
            q: (3, 2, 2, 0),
            roles: "PPF",
            replies: &[(2, 'W'), (0, 'W'), (1, 'W')],
            expect: "...S",
            message: None,
        },
        PutCase {
            name: "pw=2: a failed primary makes pw unreachable",
            q: (3, 2, 2, 0),
            roles: "PPF",
            replies: &[(2, 'W'), (1, 'E')],
            expect: "..p",
            message: Some("quorum not met: pw=2 needed, 0 ok from primaries, 1 failed"),
        },
        PutCase {
            name: "pw=2 with one primary in the targets fails before any reply",
            q: (3, 1, 2, 0),
            roles: "PFF",
            replies: &[],
            expect: "p",
            message: Some(
                "quorum not met: pw=2 needed, 0 ok from primaries, 0 failed; only 1 primaries reachable",
            ),
        },
        PutCase {
            name: "fewer targets than w (uncovered primaries) fails before any reply",
            q: (3, 3, 0, 0),
            roles: "PP",
            replies: &[],
            expect: "w",
            message: Some("quorum not met: w=3 needed, 0 ok, 0 failed; only 2 replicas reachable"),
        },
        PutCase {
            name: "dw=1: written replicas wait for one durable",
            q: (3, 2, 0, 1),
            roles: "PPP",
            replies: &[(0, 'W'), (1, 'W'), (1, 'D')],
            expect: "...S",
            message: None,
        },
        PutCase {
            name: "dw=2: sync failures after writing make dw unreachable while w is met",
            q: (3, 1, 0, 2),
            roles: "PPP",
            replies: &[(0, 'W'), (0, 'E'), (1, 'E')],
            expect: "...d",
            message: Some("quorum not met: dw=2 needed, 0 ok, 2 failed"),
        },
        PutCase {
            name: "n=1 single node: one write is the quorum",
            q: (1, 1, 0, 0),
            roles: "P",
            replies: &[(0, 'W')],
            expect: ".S",
            message: None,
        },
        PutCase {
            name: "failures after success do not undo it",
            q: (3, 1, 0, 0),
            roles: "PPP",
            replies: &[(0, 'W'), (1, 'E'), (2, 'E')],
            expect: ".SSS",
            message: None,
        },
    ];
    for case in cases {
        let q = WriteQuorum::new(case.q.0, case.q.1, case.q.2, case.q.3).unwrap();
        let mut t = PutTracker::new(q, &roles(case.roles));
        let mut got = String::from(put_code(&t.decision()));
        let mut last = t.decision();
        for (replica, reply) in case.replies {
            last = t.add(*replica, put_reply(*reply)).unwrap();
            got.push(put_code(&last));
        }
        assert_eq!(got, case.expect, "{}", case.name);
        if let Some(m) = case.message {
            match last {
                PutDecision::Failed(e) => assert_eq!(e.to_string(), m, "{}", case.name),
                other => panic!("{}: {other:?}", case.name),
            }
        }
    }
}

#[test]
fn put_expire_turns_silence_into_timeouts() {
    let q = WriteQuorum::new(3, 2, 0, 0).unwrap();
    let mut t = PutTracker::new(q, &roles("PPP"));
    assert_eq!(t.add(0, PutReply::Written), Ok(PutDecision::Wait));
    match t.expire() {
        PutDecision::Failed(e) => {
            assert_eq!(e.to_string(), "quorum not met: w=2 needed, 1 ok, 2 failed")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn put_expire_with_dw_fails_replicas_that_never_synced() {
    let q = WriteQuorum::new(3, 2, 0, 2).unwrap();
    let mut t = PutTracker::new(q, &roles("PPP"));
    t.add(0, PutReply::Durable).unwrap();
    t.add(1, PutReply::Written).unwrap();
    t.add(2, PutReply::Written).unwrap();
    match t.expire() {
        PutDecision::Failed(e) => {
            assert_eq!(e.to_string(), "quorum not met: dw=2 needed, 1 ok, 2 failed")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn put_replies_out_of_order_are_errors() {
    let q = WriteQuorum::new(3, 2, 0, 0).unwrap();
    let mut t = PutTracker::new(q, &roles("PPP"));
    assert_eq!(
        t.add(3, PutReply::Written),
        Err(TrackerError::UnknownReplica {
            replica: 3,
            replicas: 3
        })
    );
    t.add(0, PutReply::Durable).unwrap();
    assert_eq!(
        t.add(0, PutReply::Written),
        Err(TrackerError::AlreadyAnswered { replica: 0 })
    );
    t.add(1, PutReply::Written).unwrap();
    assert_eq!(
        t.add(1, PutReply::Written),
        Err(TrackerError::AlreadyAnswered { replica: 1 })
    );
}

// ---------------------------------------------------------------------------------------------
// GET
// ---------------------------------------------------------------------------------------------

const X: Actor = Actor::new(0x11);
const Y: Actor = Actor::new(0x22);

fn value(actor: Actor, n: u64, ts: u64) -> SiblingSet {
    SiblingSet::single(
        Clock::from_parts([(actor, n)], []),
        SiblingMeta::for_value(&ts.to_le_bytes(), ts),
    )
}

fn found(s: SiblingSet, queue_len: u32) -> HeadReply {
    HeadReply::Found {
        siblings: s,
        queue_len,
    }
}

fn head_reply(c: char) -> HeadReply {
    match c {
        'f' => found(value(X, 1, 1), 0),
        't' => found(
            SiblingSet::single(Clock::from_parts([(X, 2)], []), SiblingMeta::tombstone(2)),
            0,
        ),
        'n' => HeadReply::NotFound,
        'e' => HeadReply::Failed(Failure::Error),
        'o' => HeadReply::Failed(Failure::Overloaded),
        _ => panic!("head reply {c}"),
    }
}

fn get_code(d: &GetDecision) -> char {
    match d {
        GetDecision::Wait => '.',
        GetDecision::Found { .. } => 'F',
        GetDecision::NotFound { .. } => 'N',
        GetDecision::Failed(e) => match e.option {
            QuorumOption::R => 'r',
            QuorumOption::Pr => 'p',
            _ => '?',
        },
    }
}

struct GetCase {
    name: &'static str,
    /// n_val, r, pr, notfound_ok, basic_quorum
    q: (u32, u32, u32, bool, bool),
    roles: &'static str,
    /// (replica, reply): `f` found, `t` tombstone, `n` notfound, `e` error, `o` overload
    replies: &'static [(usize, char)],
    /// The decision before any reply, then after each: `.` wait, `F` found, `N` notfound,
    /// `r`/`p` the option that failed.
    expect: &'static str,
    message: Option<&'static str>,
}

#[test]
fn get_decisions() {
    let cases = [
        GetCase {
            name: "r=2: two found heads reply found",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'f'), (1, 'f')],
            expect: "..F",
            message: None,
        },
        GetCase {
            name: "notfound_ok: a notfound counts toward r, found wins the merge",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'f')],
            expect: "..F",
            message: None,
        },
        GetCase {
            name: "notfound_ok: two notfounds reply notfound at once",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'n')],
            expect: "..N",
            message: None,
        },
        GetCase {
            name: "notfound_ok=false, r=1: notfounds do not count, the read waits for the found",
            q: (3, 1, 0, false, false),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'n'), (2, 'f')],
            expect: "...F",
            message: None,
        },
        GetCase {
            name: "notfound_ok=false, r=1, all notfound: notfound once all replied",
            q: (3, 1, 0, false, false),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'n'), (2, 'n')],
            expect: "...N",
            message: None,
        },
        GetCase {
            name: "basic_quorum: a majority of notfounds ends an r=1 read early",
            q: (3, 1, 0, false, true),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'n')],
            expect: "..N",
            message: None,
        },
        GetCase {
            name: "basic_quorum: r=1, two errors fail without waiting for the third",
            q: (3, 1, 0, true, true),
            roles: "PPP",
            replies: &[(0, 'e'), (1, 'e')],
            expect: "..r",
            message: Some("quorum not met: r=1 needed, 0 ok, 2 failed"),
        },
        GetCase {
            name: "without basic_quorum: r=1 waits past two errors for a found",
            q: (3, 1, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'e'), (1, 'e'), (2, 'f')],
            expect: "...F",
            message: None,
        },
        GetCase {
            name: "notfound_ok=false: one found and n-r+1 notfounds is an r error (as Riak)",
            q: (3, 2, 0, false, false),
            roles: "PPP",
            replies: &[(0, 'f'), (1, 'n'), (2, 'n')],
            expect: "...r",
            message: Some("quorum not met: r=2 needed, 1 ok, 2 notfound, 0 failed"),
        },
        GetCase {
            name: "notfound_ok=false: an error among the notfounds makes it an r error",
            q: (3, 2, 0, false, false),
            roles: "PPP",
            replies: &[(0, 'n'), (1, 'e')],
            expect: "..r",
            message: Some("quorum not met: r=2 needed, 0 ok, 1 notfound, 1 failed"),
        },
        GetCase {
            name: "r=3: one error is enough to fail",
            q: (3, 3, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'f'), (1, 'e')],
            expect: "..r",
            message: Some("quorum not met: r=3 needed, 1 ok, 1 failed"),
        },
        GetCase {
            name: "tombstones only reply notfound",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 't'), (1, 't')],
            expect: "..N",
            message: None,
        },
        GetCase {
            name: "a tombstone and a notfound with notfound_ok=false: notfound, not an error",
            q: (3, 2, 0, false, false),
            roles: "PPP",
            replies: &[(0, 't'), (1, 'n'), (2, 'n')],
            expect: "...N",
            message: None,
        },
        GetCase {
            name: "a tombstone dominates the older value: notfound",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'f'), (1, 't')],
            expect: "..N",
            message: None,
        },
        GetCase {
            name: "pr=2: a fallback's found does not count toward pr, the read waits for a primary",
            q: (3, 2, 2, true, false),
            roles: "PPF",
            replies: &[(2, 'f'), (0, 'f'), (1, 'f')],
            expect: "...F",
            message: None,
        },
        GetCase {
            name: "pr=2: r met but the second primary fails: a pr error",
            q: (3, 2, 2, true, false),
            roles: "PPF",
            replies: &[(2, 'f'), (0, 'f'), (1, 'e')],
            expect: "...p",
            message: Some("quorum not met: pr=2 needed, 1 ok from primaries, 1 failed"),
        },
        GetCase {
            name: "pr=2 with one primary in the targets fails before any reply",
            q: (3, 1, 2, true, false),
            roles: "PFF",
            replies: &[],
            expect: "p",
            message: Some(
                "quorum not met: pr=2 needed, 0 ok from primaries, 0 failed; only 1 primaries reachable",
            ),
        },
        GetCase {
            name: "fewer targets than r fails before any reply",
            q: (3, 3, 0, true, false),
            roles: "PP",
            replies: &[],
            expect: "r",
            message: Some("quorum not met: r=3 needed, 0 ok, 0 failed; only 2 replicas reachable"),
        },
        GetCase {
            name: "overloaded replicas are counted so the node can answer UNAVAILABLE",
            q: (3, 2, 0, true, false),
            roles: "PPP",
            replies: &[(0, 'o'), (1, 'o')],
            expect: "..r",
            message: Some("quorum not met: r=2 needed, 0 ok, 2 failed (2 overloaded)"),
        },
        GetCase {
            name: "n=1 single node: the one reply decides",
            q: (1, 1, 0, true, false),
            roles: "P",
            replies: &[(0, 'f')],
            expect: ".F",
            message: None,
        },
    ];
    for case in cases {
        let q = ReadQuorum::new(case.q.0, case.q.1, case.q.2, case.q.3, case.q.4).unwrap();
        let mut t = GetTracker::new(q, ConflictPolicy::Siblings, &roles(case.roles));
        let mut got = String::from(get_code(&t.decision()));
        let mut last = t.decision();
        for (replica, reply) in case.replies {
            last = t.add(*replica, head_reply(*reply)).unwrap();
            got.push(get_code(&last));
        }
        assert_eq!(got, case.expect, "{}", case.name);
        if let Some(m) = case.message {
            match last {
                GetDecision::Failed(e) => assert_eq!(e.to_string(), m, "{}", case.name),
                other => panic!("{}: {other:?}", case.name),
            }
        }
    }
}

fn quorum2() -> ReadQuorum {
    ReadQuorum::new(3, 2, 0, true, false).unwrap()
}

#[test]
fn concurrent_heads_reply_siblings_fetched_from_the_shortest_queue() {
    let a = value(X, 1, 10);
    let b = value(Y, 1, 20);
    let both = a.sync(&b);
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("PPF"));
    t.add(0, found(both.clone(), 40)).unwrap();
    t.add(1, found(a.clone(), 5)).unwrap();
    let d = t.add(2, found(b.clone(), 50)).unwrap();
    let GetDecision::Found { merged, fetch } = d else {
        panic!("{d:?}")
    };
    assert_eq!(merged, both);
    // Sibling order is the clocks' order: {X:1} (a) before {Y:1} (b).
    assert_eq!(fetch.len(), 2);
    assert_eq!(
        (fetch[0].sibling, fetch[0].sources.clone()),
        (0, vec![1, 0])
    );
    assert_eq!(
        (fetch[1].sibling, fetch[1].sources.clone()),
        (1, vec![0, 2])
    );
}

#[test]
fn equal_queues_prefer_a_primary() {
    let a = value(X, 1, 10);
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("FPP"));
    t.add(0, found(a.clone(), 3)).unwrap();
    let GetDecision::Found { fetch, .. } = t.add(2, found(a, 3)).unwrap() else {
        panic!()
    };
    assert_eq!(fetch[0].sources, vec![2, 0]);
}

#[test]
fn lww_replies_the_latest_and_fetches_it_where_it_is() {
    let old = value(X, 1, 10);
    let new = value(Y, 1, 20);
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Lww, &roles("PPP"));
    t.add(0, found(old, 0)).unwrap();
    let GetDecision::Found { merged, fetch } = t.add(1, found(new.clone(), 9)).unwrap() else {
        panic!()
    };
    assert_eq!(merged.len(), 1);
    assert_eq!(merged.siblings()[0].meta, new.siblings()[0].meta);
    assert_eq!(
        merged.context(),
        Clock::from_parts([(X, 1), (Y, 1)], []),
        "the winner supersedes the loser"
    );
    assert_eq!(fetch[0].sources, vec![1]);
}

#[test]
fn a_deleted_key_replies_notfound_with_the_delete_context() {
    let t_set = SiblingSet::single(Clock::from_parts([(X, 3)], []), SiblingMeta::tombstone(5));
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("PPP"));
    t.add(0, found(t_set.clone(), 0)).unwrap();
    assert_eq!(
        t.add(1, HeadReply::NotFound).unwrap(),
        GetDecision::NotFound {
            context: Some(t_set.context())
        }
    );
}

#[test]
fn read_repair_targets_stale_and_missing_replicas_only() {
    let old = value(X, 1, 10);
    let new = SiblingSet::single(
        Clock::from_parts([(X, 2)], []),
        SiblingMeta::for_value(b"new", 11),
    );
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("PPPF"));
    t.add(0, found(new.clone(), 0)).unwrap();
    t.add(1, found(old, 0)).unwrap();
    t.add(2, HeadReply::NotFound).unwrap();
    t.add(3, HeadReply::Failed(Failure::Timeout)).unwrap();
    assert!(t.complete());
    let plan = t.read_repair();
    assert_eq!(plan.merged, new);
    assert_eq!(
        plan.targets,
        vec![(1, RepairReason::Stale), (2, RepairReason::Missing)]
    );
}

#[test]
fn nothing_found_nothing_to_repair() {
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("PPP"));
    t.add(0, HeadReply::NotFound).unwrap();
    t.add(1, HeadReply::NotFound).unwrap();
    assert!(t.read_repair().targets.is_empty());
}

#[test]
fn tombstone_reap_needs_every_primary_with_the_same_tombstone() {
    let tomb = SiblingSet::single(Clock::from_parts([(X, 3)], []), SiblingMeta::tombstone(100));
    let q = quorum2();
    let mut all = GetTracker::new(q, ConflictPolicy::Siblings, &roles("PPP"));
    for i in 0..3 {
        all.add(i, found(tomb.clone(), 0)).unwrap();
    }
    assert!(all.reapable(1_100, 1_000));
    assert!(!all.reapable(1_099, 1_000), "too young");

    let mut one_missing = GetTracker::new(q, ConflictPolicy::Siblings, &roles("PPP"));
    one_missing.add(0, found(tomb.clone(), 0)).unwrap();
    one_missing.add(1, found(tomb.clone(), 0)).unwrap();
    assert!(
        !one_missing.reapable(u64::MAX, 0),
        "a primary has not answered"
    );
    one_missing.add(2, HeadReply::NotFound).unwrap();
    assert!(!one_missing.reapable(u64::MAX, 0), "a primary lacks it");

    let mut fallback = GetTracker::new(q, ConflictPolicy::Siblings, &roles("PPF"));
    for i in 0..3 {
        fallback.add(i, found(tomb.clone(), 0)).unwrap();
    }
    assert!(!fallback.reapable(u64::MAX, 0), "a fallback took part");
}

#[test]
fn get_replies_twice_are_errors() {
    let mut t = GetTracker::new(quorum2(), ConflictPolicy::Siblings, &roles("PPP"));
    t.add(0, HeadReply::NotFound).unwrap();
    assert_eq!(
        t.add(0, HeadReply::NotFound),
        Err(TrackerError::AlreadyAnswered { replica: 0 })
    );
    assert_eq!(
        t.add(7, HeadReply::NotFound),
        Err(TrackerError::UnknownReplica {
            replica: 7,
            replicas: 3
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------------

#[test]
fn option_validation_table() {
    let d = BucketTypeProps::default();
    let cases: Vec<(
        &str,
        BucketTypeProps,
        ReadOptions,
        WriteOptions,
        Option<OptionsError>,
    )> = vec![
        (
            "defaults are valid",
            d,
            ReadOptions::default(),
            WriteOptions::default(),
            None,
        ),
        (
            "r above n_val",
            d,
            ReadOptions {
                r: Some(QuorumValue::Count(4)),
                ..Default::default()
            },
            WriteOptions::default(),
            Some(OptionsError::AboveNVal {
                option: QuorumOption::R,
                value: 4,
                n_val: 3,
            }),
        ),
        (
            "r = 0",
            d,
            ReadOptions {
                r: Some(QuorumValue::Count(0)),
                ..Default::default()
            },
            WriteOptions::default(),
            Some(OptionsError::Zero {
                option: QuorumOption::R,
            }),
        ),
        (
            "pr above n_val",
            d,
            ReadOptions {
                pr: Some(QuorumValue::Count(5)),
                ..Default::default()
            },
            WriteOptions::default(),
            Some(OptionsError::AboveNVal {
                option: QuorumOption::Pr,
                value: 5,
                n_val: 3,
            }),
        ),
        (
            "w = 0",
            d,
            ReadOptions::default(),
            WriteOptions {
                w: Some(QuorumValue::Count(0)),
                ..Default::default()
            },
            Some(OptionsError::Zero {
                option: QuorumOption::W,
            }),
        ),
        (
            "dw above n_val",
            d,
            ReadOptions::default(),
            WriteOptions {
                dw: Some(QuorumValue::Count(4)),
                ..Default::default()
            },
            Some(OptionsError::AboveNVal {
                option: QuorumOption::Dw,
                value: 4,
                n_val: 3,
            }),
        ),
        (
            "pw = all is n_val",
            d,
            ReadOptions::default(),
            WriteOptions {
                pw: Some(QuorumValue::All),
                ..Default::default()
            },
            None,
        ),
        (
            "n_val 0",
            BucketTypeProps { n_val: 0, ..d },
            ReadOptions::default(),
            WriteOptions::default(),
            Some(OptionsError::BadNVal(0)),
        ),
        (
            "a default r above a lowered n_val",
            BucketTypeProps {
                n_val: 1,
                r: QuorumValue::Count(2),
                ..d
            },
            ReadOptions::default(),
            WriteOptions::default(),
            Some(OptionsError::AboveNVal {
                option: QuorumOption::R,
                value: 2,
                n_val: 1,
            }),
        ),
        (
            "quorum follows n_val: n_val 1 means r = w = 1",
            BucketTypeProps { n_val: 1, ..d },
            ReadOptions::default(),
            WriteOptions::default(),
            None,
        ),
    ];
    for (name, props, ro, wo, want) in cases {
        let got = props.read(&ro).and_then(|_| props.write(&wo)).err();
        assert_eq!(got, want, "{name}");
    }
    let q = d.read(&ReadOptions::default()).unwrap();
    assert_eq!(
        (q.n_val(), q.r(), q.pr(), q.notfound_ok(), q.basic_quorum()),
        (3, 2, 0, true, false)
    );
    let w = BucketTypeProps { n_val: 5, ..d }
        .write(&WriteOptions::default())
        .unwrap();
    assert_eq!((w.n_val(), w.w(), w.pw(), w.dw()), (5, 3, 0, 0));
    assert_eq!(
        OptionsError::AboveNVal {
            option: QuorumOption::R,
            value: 4,
            n_val: 3
        }
        .to_string(),
        "r=4 is more than n_val=3: it could never be met"
    );
}

#[test]
fn bucket_type_props_serde() {
    let p: BucketTypeProps = serde_json::from_str(
        r#"{"n_val": 5, "r": "one", "w": "all", "pw": 2, "dw": "quorum", "conflict": "lww"}"#,
    )
    .unwrap();
    assert_eq!(p.n_val, 5);
    assert_eq!(p.r, QuorumValue::One);
    assert_eq!(p.w, QuorumValue::All);
    assert_eq!(p.pw, QuorumValue::Count(2));
    assert_eq!(p.dw.resolve(5), 3);
    assert_eq!(p.conflict, ConflictPolicy::Lww);
    assert!(p.notfound_ok, "unset fields take the defaults");
    let back: BucketTypeProps = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(back, p);
    assert_eq!(
        serde_json::from_str::<BucketTypeProps>("{}").unwrap(),
        BucketTypeProps::default()
    );
    let unknown = serde_json::from_str::<BucketTypeProps>(r#"{"nval": 3}"#).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `nval`"),
        "{unknown}"
    );
    let bad = serde_json::from_str::<BucketTypeProps>(r#"{"r": "most"}"#).unwrap_err();
    assert!(
        bad.to_string().contains("unknown quorum value \"most\""),
        "{bad}"
    );
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

fn put_reply_s() -> impl Strategy<Value = PutReply> {
    prop::sample::select(vec!['W', 'D', 'E', 'O', 'T']).prop_map(put_reply)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A PUT succeeds exactly when the counts meet w, pw, dw; fails exactly when no completion of
    /// the pending replies could; and a success is never taken back.
    #[test]
    fn put_fails_early_exactly_when_success_is_impossible(
        n in 1u32..=5, w in 1u32..=5, pw in 0u32..=5, dw in 0u32..=5,
        role_bits in any::<u8>(), targets in 0usize..=5,
        replies in prop::collection::vec((0usize..5, put_reply_s()), 0..12),
    ) {
        prop_assume!(w <= n && pw <= n && dw <= n);
        let targets = targets.min(n as usize);
        let rs: Vec<ReplicaRole> = (0..targets)
            .map(|i| if role_bits >> i & 1 == 1 { ReplicaRole::Primary } else { ReplicaRole::Fallback })
            .collect();
        let q = WriteQuorum::new(n, w, pw, dw).unwrap();
        let mut t = PutTracker::new(q, &rs);
        let mut succeeded = false;
        for (replica, reply) in replies {
            let Ok(d) = t.add(replica, reply) else { continue };
            // Best case from here: every replica that can still become durable does.
            let mut best = t.clone();
            for i in 0..targets {
                let _ = best.add(i, PutReply::Durable);
            }
            let possible = matches!(best.decision(), PutDecision::Succeeded(_));
            let s = t.summary();
            let met = s.written >= w && s.primaries_written >= pw && s.durable >= dw;
            match d {
                PutDecision::Succeeded(_) => prop_assert!(met),
                PutDecision::Failed(_) => prop_assert!(!possible && !succeeded),
                PutDecision::Wait => prop_assert!(possible && !met && !succeeded),
            }
            succeeded |= met;
        }
    }

    /// A GET never replies found or notfound-by-quorum without its quorum: `Found` means r oks
    /// and pr primary oks; every live sibling of the reply has a source that holds it; and read
    /// repair brings every answering replica to the merged state.
    #[test]
    fn get_found_only_with_quorum_and_repair_converges(
        r in 1u32..=3, pr in 0u32..=3, notfound_ok in any::<bool>(), basic in any::<bool>(),
        lww in any::<bool>(), role_bits in any::<u8>(),
        replies in prop::collection::vec((0usize..3, 0u8..6, 0u64..3, 0u32..9), 0..6),
    ) {
        let q = ReadQuorum::new(3, r, pr, notfound_ok, basic).unwrap();
        let rs: Vec<ReplicaRole> = (0..3)
            .map(|i| if role_bits >> i & 1 == 1 { ReplicaRole::Primary } else { ReplicaRole::Fallback })
            .collect();
        let policy = if lww { ConflictPolicy::Lww } else { ConflictPolicy::Siblings };
        let mut t = GetTracker::new(q, policy, &rs);
        // What each replica answered: its set if found, an empty set if notfound, None if failed.
        let mut answers: Vec<Option<Option<SiblingSet>>> = vec![None; 3];
        for (replica, kind, n, queue) in replies {
            let reply = match kind {
                0 => HeadReply::NotFound,
                1 => HeadReply::Failed(Failure::Error),
                2 => found(value(X, n + 1, n), queue),
                3 => found(value(Y, n + 1, 10 + n), queue),
                4 => found(value(X, n + 1, n).sync(&value(Y, 1, 10)), queue),
                _ => found(SiblingSet::single(Clock::from_parts([(X, n + 1)], []), SiblingMeta::tombstone(n)), queue),
            };
            let answer = match &reply {
                HeadReply::Found { siblings, .. } => Some(siblings.clone()),
                HeadReply::NotFound => Some(SiblingSet::new()),
                HeadReply::Failed(_) => None,
            };
            let Ok(d) = t.add(replica, reply) else { continue };
            answers[replica] = Some(answer);
            let mut ok = 0;
            let mut pok = 0;
            for (i, a) in answers.iter().enumerate() {
                let counts = match a {
                    Some(Some(s)) => !s.is_empty() || notfound_ok,
                    _ => false,
                };
                ok += u32::from(counts);
                pok += u32::from(counts && rs[i] == ReplicaRole::Primary);
            }
            if let GetDecision::Found { merged, fetch } = &d {
                prop_assert!(ok >= r && pok >= pr, "found with ok {} pok {}", ok, pok);
                prop_assert!(merged.live().next().is_some());
                for f in fetch {
                    prop_assert!(!f.sources.is_empty());
                    let meta = merged.siblings()[f.sibling].meta;
                    for src in &f.sources {
                        let Some(Some(held)) = &answers[*src] else { panic!("source {src} did not find") };
                        prop_assert!(held.siblings().iter().any(|s| s.meta == meta));
                    }
                }
            }
        }
        let plan = t.read_repair();
        let mut states: Vec<Option<SiblingSet>> = answers.into_iter().map(Option::flatten).collect();
        for (i, reason) in plan.targets {
            let before = states[i].clone().expect("only answering replicas are repaired");
            prop_assert_eq!(reason == RepairReason::Missing, before.is_empty());
            states[i] = Some(before.merge(&plan.merged, policy));
        }
        if !plan.merged.is_empty() {
            for s in states.iter().flatten() {
                prop_assert_eq!(s, &plan.merged);
            }
        }
    }
}
