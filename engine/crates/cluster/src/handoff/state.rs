//! One hinted handoff as a resumable state machine: the keys of a fallback vnode go to the
//! primary in batches, and the cursor moves only when the primary acknowledges a batch.
//!
//! The node folds its fallback vnode in key order (a [`KeySource`]); [`HandoffState::next_batch`]
//! takes the next keys above the *send position* (the last key of the newest batch in flight,
//! else the acknowledged cursor). The receiver merges each batch and acknowledges it by id, in
//! order; [`HandoffState::ack`] moves the cursor to the batch's last key. [`HandoffState::fail`]
//! (error, timeout, closed stream) drops that batch and every later one in flight, so the next
//! batch starts again right after the cursor (go-back-N). Acknowledged keys are never sent
//! again; unacknowledged ones are sent until acknowledged.
//!
//! The state persisted ([`HandoffState::encode`], after each ack) is the cursor. After a
//! restart [`HandoffState::decode`] resumes from the last acknowledged batch, in a new
//! *session*: batch ids carry the session, so an acknowledgement from before the restart can
//! never be taken for a batch sent after it. The node persists the resumed state before it
//! sends, so that two restarts in a row do not reuse a session.
//!
//! Keys written to the fallback vnode below the cursor during the transfer are not sent. The
//! primary takes new writes itself once it is up, so only writes in flight at that moment can
//! land there; the node must not drop the fallback vnode unless it took no write since the
//! transfer began (else it runs another transfer from the start).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::ring::Partition;
use crate::wire::{open, put_bytes, put_varint, seal, FormatError};

/// Format version of the persisted state.
pub const HANDOFF_STATE_VERSION: u8 = 1;
const STATE_TAG: u8 = b'H';
/// Longest target name (a member name).
const MAX_TARGET_BYTES: usize = 253;
/// Longest key (the store's limit).
pub const MAX_HANDOFF_KEY_BYTES: usize = 64 * 1024;

/// A key of the fallback vnode and the bytes it will take on the wire (object size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandoffKey {
    pub key: Vec<u8>,
    pub size: u64,
}

/// The fallback vnode's keys in ascending order, as the node's fold reads them.
pub trait KeySource {
    /// Up to `limit` keys strictly above `after` (from the first key when `None`), ascending.
    fn keys_after(&self, after: Option<&[u8]>, limit: usize) -> Vec<HandoffKey>;
}

impl KeySource for BTreeMap<Vec<u8>, u64> {
    fn keys_after(&self, after: Option<&[u8]>, limit: usize) -> Vec<HandoffKey> {
        let range = match after {
            Some(a) => {
                self.range::<[u8], _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
            }
            None => self.range::<[u8], _>(..),
        };
        range
            .take(limit)
            .map(|(k, &size)| HandoffKey {
                key: k.clone(),
                size,
            })
            .collect()
    }
}

impl KeySource for BTreeSet<Vec<u8>> {
    fn keys_after(&self, after: Option<&[u8]>, limit: usize) -> Vec<HandoffKey> {
        let range = match after {
            Some(a) => {
                self.range::<[u8], _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
            }
            None => self.range::<[u8], _>(..),
        };
        range
            .take(limit)
            .map(|k| HandoffKey {
                key: k.clone(),
                size: 0,
            })
            .collect()
    }
}

/// How big a batch is and how many may be unacknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimit {
    /// Keys per batch (taken as at least 1).
    pub max_keys: usize,
    /// A batch ends with the key that reaches this many bytes (it always holds one key).
    pub max_bytes: u64,
    /// Batches sent and not yet acknowledged (taken as at least 1).
    pub max_in_flight: usize,
}

impl Default for BatchLimit {
    /// Riak's handoff batch: 500 objects or 1 MiB; one batch at a time.
    fn default() -> Self {
        BatchLimit {
            max_keys: 500,
            max_bytes: 1 << 20,
            max_in_flight: 1,
        }
    }
}

/// A batch's identity: the session (one per start or restart of the transfer) and a sequence
/// number within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId {
    pub session: u32,
    pub seq: u64,
}

/// Keys to send now, ascending; the receiver acknowledges `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub id: BatchId,
    pub keys: Vec<Vec<u8>>,
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct InFlight {
    id: BatchId,
    last: Vec<u8>,
    keys: u64,
    bytes: u64,
}

/// Where a transfer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffStatus {
    /// The last read found keys to send (or none was made yet).
    Sending,
    /// Nothing more to send; batches are waiting for acknowledgements.
    AwaitingAcks,
    /// Every key found was acknowledged and the last read found nothing more.
    Done,
}

/// Errors of acknowledgements and sources that break the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandoffError {
    #[error("batch {0:?} is not in flight (acknowledged, failed, or from an earlier session)")]
    UnknownBatch(BatchId),
    #[error("batch {got:?} acknowledged before {expected:?}: acknowledgements come in order")]
    OutOfOrderAck { got: BatchId, expected: BatchId },
    #[error("the key source returned keys out of order or not above the send position")]
    SourceUnsorted,
}

/// One transfer of a fallback vnode to its primary; see the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandoffState {
    partition: Partition,
    target: String,
    session: u32,
    next_seq: u64,
    acked_through: Option<Vec<u8>>,
    acked_keys: u64,
    acked_bytes: u64,
    in_flight: VecDeque<InFlight>,
    /// The last read at the send position found nothing.
    exhausted: bool,
}

impl HandoffState {
    /// A transfer of fallback vnode `partition` to `target`, from the first key.
    pub fn new(partition: Partition, target: impl Into<String>) -> HandoffState {
        HandoffState {
            partition,
            target: target.into(),
            session: 0,
            next_seq: 0,
            acked_through: None,
            acked_keys: 0,
            acked_bytes: 0,
            in_flight: VecDeque::new(),
            exhausted: false,
        }
    }

    pub fn partition(&self) -> Partition {
        self.partition
    }

    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn session(&self) -> u32 {
        self.session
    }

    /// Every key up to this one (inclusive) is acknowledged.
    pub fn acked_through(&self) -> Option<&[u8]> {
        self.acked_through.as_deref()
    }

    pub fn acked_keys(&self) -> u64 {
        self.acked_keys
    }

    pub fn acked_bytes(&self) -> u64 {
        self.acked_bytes
    }

    /// Batches sent and not acknowledged.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn send_position(&self) -> Option<&[u8]> {
        match self.in_flight.back() {
            Some(b) => Some(&b.last),
            None => self.acked_through.as_deref(),
        }
    }

    pub fn status(&self) -> HandoffStatus {
        match (self.exhausted, self.in_flight.is_empty()) {
            (false, _) => HandoffStatus::Sending,
            (true, false) => HandoffStatus::AwaitingAcks,
            (true, true) => HandoffStatus::Done,
        }
    }

    /// The next batch to send, read from `source` above the send position; `None` when
    /// `max_in_flight` batches are unacknowledged or the source has nothing more (then
    /// [`status`](Self::status) says whether acknowledgements are still awaited). A source that
    /// breaks its contract is an error and changes nothing.
    pub fn next_batch(
        &mut self,
        source: &impl KeySource,
        limit: BatchLimit,
    ) -> Result<Option<Batch>, HandoffError> {
        if self.in_flight.len() >= limit.max_in_flight.max(1) {
            return Ok(None);
        }
        let read = source.keys_after(self.send_position(), limit.max_keys.max(1));
        let mut prev = self.send_position();
        let mut bytes = 0u64;
        let mut take = 0;
        for k in &read {
            if prev.is_some_and(|p| k.key.as_slice() <= p) {
                return Err(HandoffError::SourceUnsorted);
            }
            prev = Some(&k.key);
            take += 1;
            bytes = bytes.saturating_add(k.size);
            if take >= limit.max_keys.max(1) || bytes >= limit.max_bytes {
                break;
            }
        }
        if take == 0 {
            self.exhausted = true;
            return Ok(None);
        }
        self.exhausted = false;
        let keys: Vec<Vec<u8>> = read.into_iter().take(take).map(|k| k.key).collect();
        let id = BatchId {
            session: self.session,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.in_flight.push_back(InFlight {
            id,
            last: keys.last().expect("take > 0").clone(),
            keys: keys.len() as u64,
            bytes,
        });
        Ok(Some(Batch { id, keys, bytes }))
    }

    /// The receiver acknowledged batch `id`, the oldest in flight: the cursor moves to its last
    /// key.
    pub fn ack(&mut self, id: BatchId) -> Result<(), HandoffError> {
        let Some(front) = self.in_flight.front() else {
            return Err(HandoffError::UnknownBatch(id));
        };
        if front.id != id {
            if self.in_flight.iter().any(|b| b.id == id) {
                return Err(HandoffError::OutOfOrderAck {
                    got: id,
                    expected: front.id,
                });
            }
            return Err(HandoffError::UnknownBatch(id));
        }
        let b = self.in_flight.pop_front().expect("front exists");
        self.acked_keys += b.keys;
        self.acked_bytes = self.acked_bytes.saturating_add(b.bytes);
        self.acked_through = Some(b.last);
        Ok(())
    }

    /// Batch `id` failed: it and every later batch in flight are dropped, and sending goes on
    /// after the last batch before it. Returns how many batches were dropped.
    pub fn fail(&mut self, id: BatchId) -> Result<usize, HandoffError> {
        let at = self
            .in_flight
            .iter()
            .position(|b| b.id == id)
            .ok_or(HandoffError::UnknownBatch(id))?;
        let dropped = self.in_flight.len() - at;
        self.in_flight.truncate(at);
        self.exhausted = false;
        Ok(dropped)
    }

    /// The state to persist: the cursor and counts (batches in flight are not kept: after a
    /// restart they are sent again).
    ///
    /// ```text
    /// state = 'H' 0x01  partition:u32le  varint target_len  target  session:u32le
    ///         cursor:u8 (0 = none, 1 = some)  [varint key_len  key]
    ///         varint acked_keys  varint acked_bytes  crc32c:u32le
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.target.len());
        out.push(STATE_TAG);
        out.push(HANDOFF_STATE_VERSION);
        out.extend_from_slice(&self.partition.to_le_bytes());
        put_bytes(&mut out, self.target.as_bytes());
        out.extend_from_slice(&self.session.to_le_bytes());
        match &self.acked_through {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                put_bytes(&mut out, k);
            }
        }
        put_varint(&mut out, self.acked_keys);
        put_varint(&mut out, self.acked_bytes);
        seal(&mut out);
        out
    }

    /// Resumes a persisted transfer: same cursor, nothing in flight, the next session. Any
    /// bytes decode to a state or a typed error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<HandoffState, FormatError> {
        let mut r = open(bytes, STATE_TAG, HANDOFF_STATE_VERSION, "handoff state")?;
        let partition = r.u32le("partition")?;
        let at = r.pos();
        let target = String::from_utf8(r.bytes("target", MAX_TARGET_BYTES)?).map_err(|_| {
            FormatError::BadValue {
                at,
                what: "target (not UTF-8)",
            }
        })?;
        let session = r.u32le("session")?;
        let at = r.pos();
        let acked_through = match r.u8("cursor flag")? {
            0 => None,
            1 => Some(r.bytes("cursor key", MAX_HANDOFF_KEY_BYTES)?),
            _ => {
                return Err(FormatError::BadValue {
                    at,
                    what: "cursor flag",
                })
            }
        };
        let acked_keys = r.varint("acked keys")?;
        let acked_bytes = r.varint("acked bytes")?;
        r.end()?;
        Ok(HandoffState {
            partition,
            target,
            session: session.wrapping_add(1),
            next_seq: 0,
            acked_through,
            acked_keys,
            acked_bytes,
            in_flight: VecDeque::new(),
            exhausted: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(keys: &[(&str, u64)]) -> BTreeMap<Vec<u8>, u64> {
        keys.iter()
            .map(|&(k, s)| (k.as_bytes().to_vec(), s))
            .collect()
    }

    fn names(b: &Batch) -> Vec<String> {
        b.keys
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    }

    const KEYS3: BatchLimit = BatchLimit {
        max_keys: 3,
        max_bytes: 1 << 20,
        max_in_flight: 2,
    };

    #[test]
    fn batches_advance_on_ack_and_rewind_on_failure() {
        let src = source(&[
            ("a", 1),
            ("b", 1),
            ("c", 1),
            ("d", 1),
            ("e", 1),
            ("f", 1),
            ("g", 1),
        ]);
        let mut s = HandoffState::new(7, "n1");
        let b1 = s.next_batch(&src, KEYS3).unwrap().unwrap();
        let b2 = s.next_batch(&src, KEYS3).unwrap().unwrap();
        assert_eq!(
            (names(&b1), names(&b2)),
            (
                vec!["a".into(), "b".into(), "c".into()],
                vec!["d".into(), "e".into(), "f".into()]
            )
        );
        // Window full.
        assert_eq!(s.next_batch(&src, KEYS3).unwrap(), None);
        assert_eq!(s.status(), HandoffStatus::Sending);
        // Acks in order only.
        assert_eq!(
            s.ack(b2.id),
            Err(HandoffError::OutOfOrderAck {
                got: b2.id,
                expected: b1.id
            })
        );
        s.ack(b1.id).unwrap();
        assert_eq!(s.acked_through(), Some(&b"c"[..]));
        // b2 fails: the next batch starts after c again.
        assert_eq!(s.fail(b2.id), Ok(1));
        assert_eq!(s.ack(b2.id), Err(HandoffError::UnknownBatch(b2.id)));
        let b3 = s.next_batch(&src, KEYS3).unwrap().unwrap();
        assert_eq!(names(&b3), ["d", "e", "f"]);
        assert_ne!(b3.id, b2.id);
        let b4 = s.next_batch(&src, KEYS3).unwrap().unwrap();
        assert_eq!(names(&b4), ["g"]);
        assert_eq!(s.next_batch(&src, KEYS3).unwrap(), None);
        assert_eq!(
            s.status(),
            HandoffStatus::Sending,
            "window full: no read was made"
        );
        s.ack(b3.id).unwrap();
        assert_eq!(s.next_batch(&src, KEYS3).unwrap(), None);
        assert_eq!(s.status(), HandoffStatus::AwaitingAcks);
        s.ack(b4.id).unwrap();
        assert_eq!(s.status(), HandoffStatus::Done);
        assert_eq!((s.acked_keys(), s.acked_bytes()), (7, 7));
        // A key written later shows up on the next read.
        let mut more = src.clone();
        more.insert(b"h".to_vec(), 1);
        assert_eq!(names(&s.next_batch(&more, KEYS3).unwrap().unwrap()), ["h"]);
        assert_eq!(s.status(), HandoffStatus::Sending);
    }

    #[test]
    fn byte_limit_cuts_batches_but_always_sends_one_key() {
        let src = source(&[("a", 600), ("b", 600), ("c", 5000), ("d", 10)]);
        let lim = BatchLimit {
            max_keys: 10,
            max_bytes: 1000,
            max_in_flight: 4,
        };
        let mut s = HandoffState::new(0, "n");
        let got: Vec<Vec<String>> = std::iter::from_fn(|| s.next_batch(&src, lim).unwrap())
            .map(|b| names(&b))
            .collect();
        assert_eq!(got, [vec!["a", "b"], vec!["c"], vec!["d"]]);
    }

    #[test]
    fn restart_resumes_after_the_last_ack_in_a_new_session() {
        let src = source(&[("a", 1), ("b", 1), ("c", 1), ("d", 1)]);
        let lim = BatchLimit {
            max_keys: 2,
            max_bytes: 1 << 20,
            max_in_flight: 2,
        };
        let mut s = HandoffState::new(3, "n2");
        let b1 = s.next_batch(&src, lim).unwrap().unwrap();
        let b2 = s.next_batch(&src, lim).unwrap().unwrap();
        s.ack(b1.id).unwrap();
        let saved = s.encode();
        let mut r = HandoffState::decode(&saved).unwrap();
        assert_eq!((r.partition(), r.target(), r.session()), (3, "n2", 1));
        assert_eq!(
            (r.acked_through(), r.acked_keys(), r.in_flight()),
            (Some(&b"b"[..]), 2, 0)
        );
        // The ack of b2 from before the restart is refused; c and d are sent again.
        assert_eq!(r.ack(b2.id), Err(HandoffError::UnknownBatch(b2.id)));
        let b3 = r.next_batch(&src, lim).unwrap().unwrap();
        assert_eq!(names(&b3), ["c", "d"]);
        assert_eq!(b3.id, BatchId { session: 1, seq: 0 });
        assert_eq!(b2.id, BatchId { session: 0, seq: 1 });
    }

    #[test]
    fn golden_state_bytes() {
        let src = source(&[("k", 9)]);
        let mut s = HandoffState::new(0x0102_0304, "ab");
        let b = s.next_batch(&src, BatchLimit::default()).unwrap().unwrap();
        s.ack(b.id).unwrap();
        let bytes = s.encode();
        let hex: String = bytes[..bytes.len() - 4]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect();
        assert_eq!(
            hex,
            "4801".to_owned() + "04030201" + "026162" + "00000000" + "01016b" + "01" + "09"
        );
        assert_eq!(
            &bytes[bytes.len() - 4..],
            &crc32c::crc32c(&bytes[..bytes.len() - 4]).to_le_bytes()
        );
        let fresh = HandoffState::new(1, "x").encode();
        assert_eq!(HandoffState::decode(&fresh).unwrap().acked_through(), None);
    }

    #[test]
    fn bad_states_are_typed_errors() {
        let reseal = |body: &[u8]| {
            let mut v = body.to_vec();
            seal(&mut v);
            v
        };
        assert!(matches!(
            HandoffState::decode(b""),
            Err(FormatError::Truncated { .. })
        ));
        assert!(matches!(
            HandoffState::decode(b"Q\x01...."),
            Err(FormatError::WrongTag { .. })
        ));
        let mut body = b"H\x01\0\0\0\0\x01x\0\0\0\0".to_vec();
        body.push(2);
        assert!(matches!(
            HandoffState::decode(&reseal(&body)),
            Err(FormatError::BadValue {
                what: "cursor flag",
                ..
            })
        ));
        let body = b"H\x01\0\0\0\0\x02\xff\xfe\0\0\0\0\0\0\0";
        assert!(matches!(
            HandoffState::decode(&reseal(body)),
            Err(FormatError::BadValue { .. })
        ));
        let mut ok = HandoffState::new(1, "x").encode();
        ok[3] ^= 0x40;
        assert!(matches!(
            HandoffState::decode(&ok),
            Err(FormatError::Checksum { .. })
        ));
    }

    #[test]
    fn a_source_out_of_order_is_refused() {
        struct Bad;
        impl KeySource for Bad {
            fn keys_after(&self, _: Option<&[u8]>, _: usize) -> Vec<HandoffKey> {
                vec![
                    HandoffKey {
                        key: b"b".to_vec(),
                        size: 1,
                    },
                    HandoffKey {
                        key: b"a".to_vec(),
                        size: 1,
                    },
                ]
            }
        }
        let mut s = HandoffState::new(0, "n");
        assert_eq!(
            s.next_batch(&Bad, BatchLimit::default()),
            Err(HandoffError::SourceUnsorted)
        );
        assert_eq!(s.in_flight(), 0);
    }
}
