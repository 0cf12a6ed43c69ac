//! Property tests of hinted handoff: random runs of batches, acknowledgements, failures and
//! restarts against a model of what the receiver has.

use std::collections::{BTreeMap, BTreeSet};

use levee_cluster::{
    plan_handoffs, BatchId, BatchLimit, FormatError, HandoffLimits, HandoffState, HandoffStatus,
    Wait,
};
use proptest::prelude::*;

/// CRC-32C (Castagnoli), bitwise: the checksum the formats end with.
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[derive(Clone, Debug)]
enum Op {
    Send,
    AckOldest,
    /// Acknowledge the i-th batch in flight (refused unless it is the oldest).
    AckAny(usize),
    Fail(usize),
    /// Persist, lose everything in flight, resume.
    Restart,
    /// An acknowledgement nobody sent.
    AckBogus(u64),
    /// A late acknowledgement of a batch in flight before a restart.
    AckStale(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Send),
        3 => Just(Op::AckOldest),
        1 => (0usize..4).prop_map(Op::AckAny),
        1 => (0usize..4).prop_map(Op::Fail),
        1 => Just(Op::Restart),
        1 => any::<u64>().prop_map(Op::AckBogus),
        2 => any::<usize>().prop_map(Op::AckStale),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever happens on the way, the keys the receiver acknowledges are the source's keys,
    /// each once, in order (nothing skipped, nothing acknowledged twice); a key is never sent
    /// again once acknowledged; and the state counts what was acknowledged.
    #[test]
    fn no_key_skipped_none_resent_after_ack_order_kept(
        keys in prop::collection::btree_map(prop::collection::vec(any::<u8>(), 0..4), 0u64..100, 0..60),
        max_keys in 1usize..8,
        max_bytes in 1u64..300,
        max_in_flight in 1usize..4,
        ops in prop::collection::vec(op(), 0..120),
    ) {
        let limit = BatchLimit { max_keys, max_bytes, max_in_flight };
        let mut s = HandoffState::new(5, "primary");
        // Model: batches in flight, in send order; keys acknowledged, in ack order.
        let mut flight: Vec<(BatchId, Vec<Vec<u8>>)> = Vec::new();
        let mut delivered: Vec<Vec<u8>> = Vec::new();
        let mut acked: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut sent_once: BTreeSet<Vec<u8>> = BTreeSet::new();
        // Ids of batches that were in flight at a restart.
        let mut stale: Vec<BatchId> = Vec::new();

        let mut send = |s: &mut HandoffState, flight: &mut Vec<(BatchId, Vec<Vec<u8>>)>, acked: &BTreeSet<Vec<u8>>| -> Result<bool, TestCaseError> {
            match s.next_batch(&keys, limit).unwrap() {
                None => Ok(false),
                Some(b) => {
                    prop_assert!(!b.keys.is_empty());
                    prop_assert!(b.keys.windows(2).all(|w| w[0] < w[1]), "batch not ascending");
                    for k in &b.keys {
                        prop_assert!(!acked.contains(k), "key {:?} sent again after its ack", k);
                        sent_once.insert(k.clone());
                    }
                    flight.push((b.id, b.keys));
                    Ok(true)
                }
            }
        };
        let deliver = |flight: &mut Vec<(BatchId, Vec<Vec<u8>>)>, delivered: &mut Vec<Vec<u8>>, acked: &mut BTreeSet<Vec<u8>>| {
            let (_, ks) = flight.remove(0);
            for k in ks {
                acked.insert(k.clone());
                delivered.push(k);
            }
        };

        for op in ops {
            match op {
                Op::Send => {
                    send(&mut s, &mut flight, &acked)?;
                }
                Op::AckOldest => {
                    if let Some(&(id, _)) = flight.first() {
                        s.ack(id).unwrap();
                        deliver(&mut flight, &mut delivered, &mut acked);
                    }
                }
                Op::AckAny(i) => {
                    if let Some(&(id, _)) = flight.get(i) {
                        let r = s.ack(id);
                        if i == 0 {
                            r.unwrap();
                            deliver(&mut flight, &mut delivered, &mut acked);
                        } else {
                            prop_assert!(r.is_err(), "out-of-order ack taken");
                        }
                    }
                }
                Op::Fail(i) => {
                    if let Some(&(id, _)) = flight.get(i) {
                        prop_assert_eq!(s.fail(id).unwrap(), flight.len() - i);
                        flight.truncate(i);
                    }
                }
                Op::Restart => {
                    let old: Vec<BatchId> = flight.iter().map(|(id, _)| *id).collect();
                    s = HandoffState::decode(&s.encode()).unwrap();
                    flight.clear();
                    stale.extend(old);
                }
                Op::AckStale(i) => {
                    if !stale.is_empty() {
                        let id = stale[i % stale.len()];
                        prop_assert!(s.ack(id).is_err(), "an ack from before the restart was taken");
                    }
                }
                Op::AckBogus(seq) => {
                    let id = BatchId { session: s.session().wrapping_add(7), seq };
                    prop_assert!(s.ack(id).is_err());
                }
            }
            prop_assert_eq!(s.acked_keys(), delivered.len() as u64);
            prop_assert_eq!(s.acked_through(), delivered.last().map(Vec::as_slice));
            prop_assert_eq!(s.in_flight(), flight.len());
            if s.status() == HandoffStatus::Done {
                prop_assert_eq!(acked.len(), keys.len(), "done with keys unacknowledged");
            }
        }
        // Drain: send and acknowledge until done.
        let mut rounds = 0;
        while s.status() != HandoffStatus::Done {
            rounds += 1;
            prop_assert!(rounds < 1000, "handoff does not finish");
            if !send(&mut s, &mut flight, &acked)? && !flight.is_empty() {
                let id = flight[0].0;
                s.ack(id).unwrap();
                deliver(&mut flight, &mut delivered, &mut acked);
            }
        }
        let want: Vec<Vec<u8>> = keys.keys().cloned().collect();
        prop_assert_eq!(&delivered, &want, "acknowledged keys differ from the source");
        prop_assert_eq!(s.acked_bytes(), keys.values().sum::<u64>());
        prop_assert_eq!(sent_once.len(), keys.len());
    }

    /// Encode then decode keeps the cursor and counts, and starts the next session.
    #[test]
    fn state_round_trips(
        partition in any::<u32>(),
        target in "[a-z0-9.-]{1,40}",
        keys in prop::collection::btree_map(prop::collection::vec(any::<u8>(), 0..6), 0u64..1000, 0..20),
        acks in 0usize..10,
    ) {
        let mut s = HandoffState::new(partition, target.clone());
        let lim = BatchLimit { max_keys: 2, max_bytes: u64::MAX, max_in_flight: 1 };
        for _ in 0..acks {
            if let Some(b) = s.next_batch(&keys, lim).unwrap() {
                s.ack(b.id).unwrap();
            }
        }
        let r = HandoffState::decode(&s.encode()).unwrap();
        prop_assert_eq!(r.partition(), partition);
        prop_assert_eq!(r.target(), target.as_str());
        prop_assert_eq!(r.acked_through(), s.acked_through());
        prop_assert_eq!((r.acked_keys(), r.acked_bytes()), (s.acked_keys(), s.acked_bytes()));
        prop_assert_eq!(r.session(), s.session() + 1);
        prop_assert_eq!(r.encode().len(), s.encode().len());
    }

    /// Any bytes decode to a state or a typed error, never a panic; a saved state with one byte
    /// changed is refused.
    #[test]
    fn state_decoding_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..80),
        at in any::<usize>(),
        flip in 1u8..=255,
    ) {
        let _ = HandoffState::decode(&bytes);
        let mut prefixed = b"H\x01".to_vec();
        prefixed.extend_from_slice(&bytes);
        let _ = HandoffState::decode(&prefixed);
        // Random bodies with a valid header and checksum reach the parser.
        let mut sealed = b"H\x01".to_vec();
        sealed.extend_from_slice(&bytes);
        let crc = crc32c(&sealed);
        sealed.extend_from_slice(&crc.to_le_bytes());
        let _ = HandoffState::decode(&sealed);
        let mut good = HandoffState::new(9, "node-1").encode();
        let i = at % good.len();
        good[i] ^= flip;
        let r: Result<HandoffState, FormatError> = HandoffState::decode(&good);
        prop_assert!(r.is_err());
    }

    /// The plan starts at most max_concurrent transfers (running ones included), only to up
    /// primaries, never one already running, and leaves no slot idle while a transfer waits
    /// only for a slot.
    #[test]
    fn handoff_plan_respects_the_throttle(
        held in prop::collection::btree_map(0u32..64, 0usize..5, 0..20),
        up_mask in any::<u8>(),
        running in prop::collection::btree_set(0u32..64, 0..4),
        k in 1usize..5,
    ) {
        let held: BTreeMap<u32, String> = held.into_iter().map(|(p, n)| (p, format!("n{n}"))).collect();
        let up: BTreeSet<String> = (0..5).filter(|i| up_mask >> i & 1 == 1).map(|i| format!("n{i}")).collect();
        let plan = plan_handoffs(&held, &up, &running, HandoffLimits { max_concurrent: k });
        prop_assert!(plan.start.len() + running.len() <= k.max(running.len()));
        if !plan.start.is_empty() {
            prop_assert!(plan.start.len() + running.len() <= k);
        }
        for h in &plan.start {
            prop_assert!(up.contains(&h.target));
            prop_assert!(!running.contains(&h.partition));
            prop_assert_eq!(held.get(&h.partition), Some(&h.target));
        }
        prop_assert_eq!(plan.start.len() + plan.waiting.len(), held.len());
        let throttled = plan.waiting.iter().filter(|(_, w)| *w == Wait::Throttled).count();
        if throttled > 0 {
            prop_assert_eq!(plan.start.len() + running.len(), k.max(running.len()));
        }
        prop_assert_eq!(&plan, &plan_handoffs(&held, &up, &running, HandoffLimits { max_concurrent: k }));
    }
}
