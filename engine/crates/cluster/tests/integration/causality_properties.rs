//! Property tests of clocks, sibling sets, their merge and their encoding.

use std::collections::{BTreeMap, BTreeSet};

use levee_cluster::{
    decode_context, decode_siblings, encode_context, encode_siblings, update, Actor, Clock,
    ConflictPolicy, Dot, Sibling, SiblingKind, SiblingMeta, SiblingSet,
};
use proptest::prelude::*;

/// Clocks over 3 actors with small counters, so that relations between them are common.
fn clock() -> impl Strategy<Value = Clock> {
    (
        prop::collection::vec((0u64..3, 0u64..4), 0..3),
        prop::collection::vec((0u64..3, 1u64..8), 0..3),
    )
        .prop_map(|(vv, dots)| {
            Clock::from_parts(
                vv.into_iter().map(|(a, n)| (Actor::new(a), n)),
                dots.into_iter().map(|(a, n)| Dot::new(Actor::new(a), n)),
            )
        })
}

fn meta() -> impl Strategy<Value = SiblingMeta> {
    (0u64..5, any::<bool>(), 0u32..4, 0u64..3, 0u8..3).prop_map(|(ts, tomb, hash, size, n_val)| {
        SiblingMeta {
            timestamp_us: ts,
            n_val,
            kind: if tomb {
                SiblingKind::Tombstone
            } else {
                SiblingKind::Value { hash, size }
            },
        }
    })
}

fn set() -> impl Strategy<Value = SiblingSet> {
    prop::collection::vec((clock(), meta()), 0..5)
        .prop_map(|v| SiblingSet::from_siblings(v.into_iter().map(|(c, m)| Sibling::new(c, m))))
}

fn policy() -> impl Strategy<Value = ConflictPolicy> {
    prop::sample::select(vec![ConflictPolicy::Siblings, ConflictPolicy::Lww])
}

/// `s` survives in `merged`, or a sibling there strictly dominates it.
fn kept_or_dominated(s: &Sibling, merged: &SiblingSet) -> bool {
    merged
        .siblings()
        .iter()
        .any(|m| m == s || m.clock.dominates(&s.clock))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn descends_is_a_partial_order(a in clock(), b in clock(), c in clock()) {
        prop_assert!(a.descends(&a));
        if a.descends(&b) && b.descends(&a) {
            prop_assert_eq!(&a, &b);
        }
        if a.descends(&b) && b.descends(&c) {
            prop_assert!(a.descends(&c));
        }
        prop_assert_eq!(a.concurrent(&b), !a.descends(&b) && !b.descends(&a));
        prop_assert_eq!(a.dominates(&b), a.descends(&b) && a != b);
    }

    #[test]
    fn join_is_the_least_upper_bound(a in clock(), b in clock(), c in clock()) {
        let j = a.join(&b);
        prop_assert!(j.descends(&a) && j.descends(&b));
        prop_assert_eq!(&j, &b.join(&a));
        if c.descends(&a) && c.descends(&b) {
            prop_assert!(c.descends(&j));
        }
        prop_assert_eq!(j.events(), {
            // Count events by brute force over the small counter range.
            let mut n = 0u64;
            for actor in 0..3 {
                for k in 1..16 {
                    let d = Dot::new(Actor::new(actor), k);
                    n += u64::from(a.contains(d) || b.contains(d));
                }
            }
            n
        });
    }

    #[test]
    fn merge_is_commutative(a in set(), b in set(), p in policy()) {
        prop_assert_eq!(a.merge(&b, p), b.merge(&a, p));
    }

    #[test]
    fn merge_is_associative(a in set(), b in set(), c in set(), p in policy()) {
        prop_assert_eq!(a.merge(&b, p).merge(&c, p), a.merge(&b.merge(&c, p), p));
    }

    #[test]
    fn merge_is_idempotent(a in set(), b in set(), p in policy()) {
        let m = a.merge(&b, p);
        prop_assert_eq!(m.merge(&m, p), m.clone());
        prop_assert_eq!(m.merge(&a, p), m);
    }

    /// No acknowledged write lost: every sibling of either input is in the merge or dominated by
    /// a sibling of the merge.
    #[test]
    fn sync_keeps_every_sibling_not_dominated(a in set(), b in set()) {
        let m = a.sync(&b);
        for s in a.siblings().iter().chain(b.siblings()) {
            prop_assert!(kept_or_dominated(s, &m), "{:?} lost from {:?}", s, m);
        }
        prop_assert!(m.covers(&a) && m.covers(&b));
    }

    /// Never invents values, never keeps a dominated one, never twice the same.
    #[test]
    fn sync_never_invents_or_keeps_dominated_siblings(a in set(), b in set()) {
        let m = a.sync(&b);
        let sib = m.siblings();
        for (i, s) in sib.iter().enumerate() {
            prop_assert!(a.siblings().contains(s) || b.siblings().contains(s), "invented {:?}", s);
            for (j, o) in sib.iter().enumerate() {
                prop_assert!(!o.clock.dominates(&s.clock), "{:?} dominated by {:?}", s, o);
                prop_assert!(i == j || s != o);
            }
        }
        prop_assert_eq!(m.context(), a.context().join(&b.context()));
    }

    /// LWW keeps one sibling, written by someone, with the greatest metadata, and a clock that
    /// supersedes every input.
    #[test]
    fn lww_keeps_the_latest_written_value(a in set(), b in set()) {
        let m = a.merge(&b, ConflictPolicy::Lww);
        let all: Vec<&Sibling> = a.siblings().iter().chain(b.siblings()).collect();
        if all.is_empty() {
            prop_assert!(m.is_empty());
        } else {
            prop_assert_eq!(m.len(), 1);
            let w = &m.siblings()[0];
            prop_assert!(all.iter().any(|s| s.meta == w.meta));
            prop_assert!(all.iter().all(|s| s.meta <= w.meta));
            prop_assert!(all.iter().all(|s| w.clock.descends(&s.clock)));
        }
    }

    /// A put's clock descends the context it was given, is an event no local sibling has seen,
    /// and storing it drops exactly the local siblings the context covers.
    #[test]
    fn update_descends_its_context_and_is_new(ctx in clock(), local in set(), actor in 0u64..4, m in meta()) {
        let actor = Actor::new(actor);
        let c = update(&ctx, &local, actor).unwrap();
        prop_assert!(c.dominates(&ctx));
        for s in local.siblings() {
            prop_assert!(!s.clock.descends(&c), "{:?} already holds the new event of {:?}", s, c);
        }
        let stored = local.put(c.clone(), m);
        prop_assert!(stored.siblings().iter().any(|s| s.clock == c && s.meta == m));
        for s in local.siblings() {
            let kept = stored.siblings().contains(s);
            prop_assert_eq!(kept, !ctx.descends(&s.clock), "{:?}", s);
        }
    }

    #[test]
    fn context_descends_every_sibling(a in set()) {
        let ctx = a.context();
        for s in a.siblings() {
            prop_assert!(ctx.descends(&s.clock));
        }
    }

    #[test]
    fn encoding_round_trips(a in set(), c in clock()) {
        prop_assert_eq!(decode_siblings(&encode_siblings(&a)), Ok(a));
        prop_assert_eq!(decode_context(&encode_context(&c)), Ok(c));
    }

    /// Random bytes never panic; what decodes is canonical (re-encodes to the same bytes). Half
    /// the bytes come from the values the format gives meaning to (counts, kinds, varint
    /// continuation bits), so that many inputs get deep into the decoder.
    #[test]
    fn decoding_random_bytes_never_panics(bytes in prop::collection::vec(
        prop_oneof![any::<u8>(), prop::sample::select(vec![0u8, 1, 2, 3, 0x7f, 0x80, 0x81, 0xff])],
        0..96,
    )) {
        for tagged in [bytes.clone(), [vec![b'S', 1], bytes.clone()].concat(), [vec![b'C', 1], bytes.clone()].concat()] {
            if let Ok(s) = decode_siblings(&tagged) {
                prop_assert_eq!(encode_siblings(&s), tagged.clone());
            }
            if let Ok(c) = decode_context(&tagged) {
                prop_assert_eq!(encode_context(&c), tagged.clone());
            }
        }
    }

    /// Valid encodings damaged once — a byte changed, the input cut, a byte inserted, or a byte
    /// widened into a two-byte varint of the same value (`b | 0x80, 0x00`): an error, or a
    /// canonical set (re-encodes to the same bytes).
    #[test]
    fn decoding_damaged_encodings_never_panics(a in set(), at in any::<prop::sample::Index>(), byte in any::<u8>(), how in 0u8..4) {
        let mut bytes = encode_siblings(&a);
        let i = at.index(bytes.len());
        match how {
            0 => bytes[i] = byte,
            1 => bytes.truncate(i),
            2 => bytes.insert(i, byte),
            _ => {
                bytes[i] |= 0x80;
                bytes.insert(i + 1, 0);
            }
        }
        if let Ok(s) = decode_siblings(&bytes) {
            prop_assert_eq!(encode_siblings(&s), bytes);
        }
    }
}

/// A history of clients reading and writing through three replicas, with replication to a
/// random subset and anti-entropy between random pairs.
#[derive(Clone, Debug)]
enum Op {
    /// Client `client` reads replica `replica` (r = 1).
    Read { client: usize, replica: usize },
    /// Client `client` writes (or deletes) through `coordinator` with the context of its last
    /// read, and the coordinator sends its new state to the replicas in `to` (bit mask).
    Write {
        client: usize,
        coordinator: usize,
        to: u8,
        delete: bool,
    },
    /// Anti-entropy / read repair: `to` merges `from`'s state.
    Exchange { from: usize, to: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0usize..3).prop_map(|(client, replica)| Op::Read { client, replica }),
        (0usize..3, 0usize..3, any::<u8>(), prop::bool::weighted(0.2)).prop_map(
            |(client, coordinator, to, delete)| Op::Write {
                client,
                coordinator,
                to,
                delete
            }
        ),
        (0usize..3, 0usize..3).prop_map(|(from, to)| Op::Exchange { from, to }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the interleaving, once every replica has exchanged with every other: every write
    /// is still there, unless a client who had read it wrote after it; no value appears that was
    /// never written; every replica holds the same set.
    #[test]
    fn random_histories_lose_no_acknowledged_write(ops in prop::collection::vec(op(), 1..40)) {
        let actors = [Actor::new(0xa), Actor::new(0xb), Actor::new(0xc)];
        let mut replicas = vec![SiblingSet::new(); 3];
        // Per client: the context and the write ids it last read.
        let mut reads: Vec<(Clock, BTreeSet<u32>)> = vec![(Clock::new(), BTreeSet::new()); 3];
        // Write id → the ids its client had read (and so superseded).
        let mut writes: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for (t, op) in ops.iter().enumerate() {
            match *op {
                Op::Read { client, replica } => {
                    let s = &replicas[replica];
                    reads[client] = (s.context(), s.siblings().iter().map(|x| id_of(&x.meta)).collect());
                }
                Op::Write { client, coordinator, to, delete } => {
                    let id = t as u32;
                    let meta = SiblingMeta {
                        timestamp_us: t as u64,
                        n_val: 0,
                        kind: if delete { SiblingKind::Tombstone } else { SiblingKind::Value { hash: id, size: 0 } },
                    };
                    let (ctx, seen) = reads[client].clone();
                    let local = &replicas[coordinator];
                    let clock = update(&ctx, local, actors[coordinator]).unwrap();
                    let stored = local.put(clock, meta);
                    for (i, r) in replicas.iter_mut().enumerate() {
                        if i == coordinator || to >> i & 1 == 1 {
                            *r = r.sync(&stored);
                        }
                    }
                    writes.insert(id, seen);
                }
                Op::Exchange { from, to } => {
                    let s = replicas[from].clone();
                    replicas[to] = replicas[to].sync(&s);
                }
            }
        }
        for from in 0..3 {
            for to in 0..3 {
                let s = replicas[from].clone();
                replicas[to] = replicas[to].sync(&s);
            }
        }
        let last = replicas[2].clone();
        for r in &replicas {
            prop_assert_eq!(r, &last);
        }
        let present: BTreeSet<u32> = last.siblings().iter().map(|s| id_of(&s.meta)).collect();
        for id in &present {
            prop_assert!(writes.contains_key(id), "value {} never written", id);
        }
        for id in writes.keys() {
            let superseded = writes.values().any(|seen| seen.contains(id));
            prop_assert!(present.contains(id) || superseded, "write {} lost: final {:?}", id, present);
        }
    }
}

/// Write ids are the timestamps (unique per write in the history test).
fn id_of(m: &SiblingMeta) -> u32 {
    m.timestamp_us as u32
}
