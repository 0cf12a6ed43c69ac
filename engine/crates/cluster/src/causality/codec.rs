//! The binary encoding of sibling-set metadata and of client contexts, version 1.
//!
//! ```text
//! sibling set  = 0x53 ('S')  0x01 (version)  varint count  sibling × count
//! context      = 0x43 ('C')  0x01 (version)  clock
//! sibling      = clock  kind:u8  varint timestamp_us  [n_val:u8]  [value: hash:u32le  varint size]
//!                kind 0 = value (hash and size follow), 1 = tombstone (nothing follows),
//!                2 / 3 = value / tombstone written at a smaller n_val than the cluster's
//!                (the n_val byte, 1..=255, follows the timestamp)
//! clock        = varint v  (actor:u64le  varint counter) × v     the version vector
//!                varint d  (actor:u64le  varint counter) × d     the dots beyond it
//! varint       = unsigned LEB128, at most 10 bytes, shortest form
//! ```
//!
//! Only the canonical form is accepted, so `encode(decode(bytes)) == bytes` for every input that
//! decodes: a sibling without a recorded n_val uses kind 0 or 1; vector actors strictly ascending with counters ≥ 1; dots strictly ascending by
//! (actor, counter), each more than one past its actor's vector counter; siblings strictly
//! ascending in (clock, metadata) order and none dominated by another; no byte after the last
//! sibling. Every other input is a [`DecodeError`] naming the offset — never a panic, and
//! no allocation larger than the input allows.
//!
//! A new version gets a new version byte; a decoder of this version refuses it
//! ([`DecodeError::UnsupportedVersion`]) rather than misread it.

use super::clock::{Actor, Clock, Dot};
use super::siblings::{Sibling, SiblingKind, SiblingMeta, SiblingSet};

const TAG_SIBLINGS: u8 = b'S';
const TAG_CONTEXT: u8 = b'C';
/// The encoding version this code writes and reads.
pub const FORMAT_VERSION: u8 = 1;

const KIND_VALUE: u8 = 0;
const KIND_TOMBSTONE: u8 = 1;
/// The kinds above plus this: the sibling records the n_val it was written with.
const KIND_WITH_N_VAL: u8 = 2;

/// Why bytes are not a valid encoding. `at` is the byte offset where the problem was found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated at byte {at}: {what} expected")]
    Truncated { at: usize, what: &'static str },
    #[error("not a {expected}: first byte is {found:#04x}")]
    WrongTag { expected: &'static str, found: u8 },
    #[error("encoding version {0} is not supported (this build reads version {FORMAT_VERSION})")]
    UnsupportedVersion(u8),
    #[error("varint at byte {at} is longer than 64 bits")]
    VarintOverflow { at: usize },
    #[error("varint at byte {at} is not in its shortest form")]
    VarintNotShortest { at: usize },
    #[error("counter 0 at byte {at} (counters start at 1)")]
    ZeroCounter { at: usize },
    #[error("version vector actors not strictly ascending at byte {at}")]
    VectorNotAscending { at: usize },
    #[error("dots not strictly ascending at byte {at}")]
    DotsNotAscending { at: usize },
    #[error("dot at byte {at} is held by or contiguous with the version vector")]
    DotNotBeyondVector { at: usize },
    #[error("n_val 0 recorded at byte {at} (a sibling without one uses kind 0 or 1)")]
    ZeroNVal { at: usize },
    #[error("unknown sibling kind {kind} at byte {at}")]
    UnknownKind { at: usize, kind: u8 },
    #[error("siblings not strictly ascending at byte {at}")]
    SiblingsNotAscending { at: usize },
    #[error("sibling {index} is dominated by another sibling")]
    DominatedSibling { index: usize },
    #[error("{count} bytes after the end, at byte {at}")]
    TrailingBytes { at: usize, count: usize },
}

use crate::wire::{get_varint, put_varint, VarintError};

fn put_clock(out: &mut Vec<u8>, clock: &Clock) {
    let vv: Vec<(Actor, u64)> = clock.vector().collect();
    put_varint(out, vv.len() as u64);
    for (a, n) in vv {
        out.extend_from_slice(&a.get().to_le_bytes());
        put_varint(out, n);
    }
    let dots: Vec<Dot> = clock.dots().collect();
    put_varint(out, dots.len() as u64);
    for d in dots {
        out.extend_from_slice(&d.actor.get().to_le_bytes());
        put_varint(out, d.counter);
    }
}

fn put_sibling(out: &mut Vec<u8>, s: &Sibling) {
    put_clock(out, &s.clock);
    let kind = match s.meta.kind {
        SiblingKind::Value { .. } => KIND_VALUE,
        SiblingKind::Tombstone => KIND_TOMBSTONE,
    };
    let recorded = s.meta.n_val != 0;
    out.push(if recorded {
        kind + KIND_WITH_N_VAL
    } else {
        kind
    });
    put_varint(out, s.meta.timestamp_us);
    if recorded {
        out.push(s.meta.n_val);
    }
    if let SiblingKind::Value { hash, size } = s.meta.kind {
        out.extend_from_slice(&hash.to_le_bytes());
        put_varint(out, size);
    }
}

/// Encodes a sibling set (the per-key metadata a replica stores and a HEAD returns).
pub fn encode_siblings(set: &SiblingSet) -> Vec<u8> {
    let mut out = vec![TAG_SIBLINGS, FORMAT_VERSION];
    put_varint(&mut out, set.len() as u64);
    for s in set.siblings() {
        put_sibling(&mut out, s);
    }
    out
}

/// Encodes a clock as a client context (opaque bytes to the client).
pub fn encode_context(clock: &Clock) -> Vec<u8> {
    let mut out = vec![TAG_CONTEXT, FORMAT_VERSION];
    put_clock(&mut out, clock);
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or(DecodeError::Truncated { at: self.pos, what })?;
        self.pos += 1;
        Ok(b)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let end = self.pos.checked_add(N).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or(DecodeError::Truncated { at: self.pos, what })?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes[self.pos..end]);
        self.pos = end;
        Ok(a)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let (v, next) = get_varint(self.bytes, self.pos).map_err(|e| match e {
            VarintError::Truncated { at } => DecodeError::Truncated { at, what },
            VarintError::Overflow { at } => DecodeError::VarintOverflow { at },
            VarintError::NotShortest { at } => DecodeError::VarintNotShortest { at },
        })?;
        self.pos = next;
        Ok(v)
    }

    /// A count of items each at least `min_size` bytes long: refused if the input cannot hold
    /// them, so a forged count never drives an allocation.
    fn count(&mut self, what: &'static str, min_size: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.varint(what)?;
        let fits = self.remaining() / min_size.max(1);
        if n > fits as u64 {
            return Err(DecodeError::Truncated { at, what });
        }
        Ok(n as usize)
    }

    fn header(&mut self, tag: u8, expected: &'static str) -> Result<(), DecodeError> {
        let found = self.u8("tag byte")?;
        if found != tag {
            return Err(DecodeError::WrongTag { expected, found });
        }
        let version = self.u8("version byte")?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        Ok(())
    }

    fn end(&self) -> Result<(), DecodeError> {
        if self.pos != self.bytes.len() {
            return Err(DecodeError::TrailingBytes {
                at: self.pos,
                count: self.bytes.len() - self.pos,
            });
        }
        Ok(())
    }

    fn clock(&mut self) -> Result<Clock, DecodeError> {
        let v = self.count("version vector length", 9)?;
        let mut vv: Vec<(Actor, u64)> = Vec::with_capacity(v);
        for _ in 0..v {
            let at = self.pos;
            let actor = Actor::new(u64::from_le_bytes(self.array("actor")?));
            let counter = self.varint("counter")?;
            if counter == 0 {
                return Err(DecodeError::ZeroCounter { at });
            }
            if vv.last().is_some_and(|(prev, _)| *prev >= actor) {
                return Err(DecodeError::VectorNotAscending { at });
            }
            vv.push((actor, counter));
        }
        let d = self.count("dot count", 9)?;
        let mut dots: Vec<Dot> = Vec::with_capacity(d);
        for _ in 0..d {
            let at = self.pos;
            let actor = Actor::new(u64::from_le_bytes(self.array("actor")?));
            let counter = self.varint("counter")?;
            if counter == 0 {
                return Err(DecodeError::ZeroCounter { at });
            }
            let dot = Dot::new(actor, counter);
            if dots.last().is_some_and(|prev| *prev >= dot) {
                return Err(DecodeError::DotsNotAscending { at });
            }
            let base = vv
                .binary_search_by(|(a, _)| a.cmp(&actor))
                .map_or(0, |i| vv[i].1);
            if counter <= base.saturating_add(1) {
                return Err(DecodeError::DotNotBeyondVector { at });
            }
            dots.push(dot);
        }
        // Already canonical: from_parts keeps it as it is.
        Ok(Clock::from_parts(vv, dots))
    }

    fn sibling(&mut self) -> Result<Sibling, DecodeError> {
        let clock = self.clock()?;
        let at = self.pos;
        let mut kind = self.u8("sibling kind")?;
        let timestamp_us = self.varint("timestamp")?;
        let mut n_val = 0;
        if (KIND_WITH_N_VAL..KIND_WITH_N_VAL * 2).contains(&kind) {
            let n_at = self.pos;
            n_val = self.u8("n_val")?;
            if n_val == 0 {
                return Err(DecodeError::ZeroNVal { at: n_at });
            }
            kind -= KIND_WITH_N_VAL;
        }
        let kind = match kind {
            KIND_VALUE => {
                let hash = u32::from_le_bytes(self.array("value hash")?);
                let size = self.varint("value size")?;
                SiblingKind::Value { hash, size }
            }
            KIND_TOMBSTONE => SiblingKind::Tombstone,
            kind => return Err(DecodeError::UnknownKind { at, kind }),
        };
        Ok(Sibling::new(
            clock,
            SiblingMeta {
                timestamp_us,
                kind,
                n_val,
            },
        ))
    }
}

/// Decodes [`encode_siblings`] output.
pub fn decode_siblings(bytes: &[u8]) -> Result<SiblingSet, DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    r.header(TAG_SIBLINGS, "sibling set")?;
    // The smallest sibling: two empty counts, kind, timestamp.
    let n = r.count("sibling count", 4)?;
    let mut siblings: Vec<Sibling> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = r.pos;
        let s = r.sibling()?;
        if siblings.last().is_some_and(|prev| *prev >= s) {
            return Err(DecodeError::SiblingsNotAscending { at });
        }
        siblings.push(s);
    }
    r.end()?;
    for (index, s) in siblings.iter().enumerate() {
        if siblings.iter().any(|o| o.clock.dominates(&s.clock)) {
            return Err(DecodeError::DominatedSibling { index });
        }
    }
    Ok(SiblingSet::from_canonical(siblings))
}

/// Decodes [`encode_context`] output.
pub fn decode_context(bytes: &[u8]) -> Result<Clock, DecodeError> {
    let mut r = Reader { bytes, pos: 0 };
    r.header(TAG_CONTEXT, "context")?;
    let c = r.clock()?;
    r.end()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn golden_set() -> SiblingSet {
        let a = Actor::new(0x0102_0304_0506_0708);
        let b = Actor::new(0xffff_0000_0000_0001);
        SiblingSet::from_siblings([
            Sibling::new(
                Clock::from_parts([(a, 3)], [Dot::new(b, 200)]),
                SiblingMeta {
                    n_val: 0,
                    timestamp_us: 1_700_000_000_000_000,
                    kind: SiblingKind::Value {
                        hash: 0xdead_beef,
                        size: 8192,
                    },
                },
            ),
            Sibling::new(
                Clock::from_parts([(b, 1)], []),
                SiblingMeta::tombstone(1_700_000_000_000_001),
            ),
        ])
    }

    /// Frozen bytes: if this test fails, the stored format changed — add a version instead.
    #[test]
    fn golden_sibling_set_bytes() {
        let bytes = encode_siblings(&golden_set());
        assert_eq!(
            hex(&bytes),
            concat!(
                "5301",
                "02",
                // sibling 1 (the clocks order the siblings): vector {a:3}, dot b:200, a value
                "01",
                "0807060504030201",
                "03",
                "01",
                "010000000000ffff",
                "c801",
                "00",
                "8080f9c0c1c48203",
                "efbeadde",
                "8040",
                // sibling 2: vector {b:1}, no dot, a tombstone
                "01",
                "010000000000ffff",
                "01",
                "00",
                "01",
                "8180f9c0c1c48203",
            )
        );
        assert_eq!(decode_siblings(&bytes), Ok(golden_set()));
    }

    /// A sibling written at a smaller n_val than the cluster's carries it after its timestamp.
    #[test]
    fn golden_bytes_of_siblings_that_record_their_n_val() {
        let b = Actor::new(0xffff_0000_0000_0001);
        let set = SiblingSet::from_siblings([
            Sibling::new(
                Clock::from_parts([(b, 1)], []),
                SiblingMeta::tombstone(5).written_at(2, 3),
            ),
            Sibling::new(
                Clock::from_parts([], [Dot::new(b, 3)]),
                SiblingMeta::for_value(b"", 6).written_at(1, 3),
            ),
        ]);
        let bytes = encode_siblings(&set);
        assert_eq!(
            hex(&bytes),
            concat!(
                "5301",
                "02",
                // no vector, dot b:3, a value at n_val 1 (kind 0 + 2)
                "00",
                "01",
                "010000000000ffff",
                "03",
                "02",
                "06",
                "01",
                "00000000",
                "00",
                // vector {b:1}, a tombstone at n_val 2 (kind 1 + 2)
                "01",
                "010000000000ffff",
                "01",
                "00",
                "03",
                "05",
                "02",
            )
        );
        assert_eq!(decode_siblings(&bytes), Ok(set));
    }

    #[test]
    fn golden_context_bytes() {
        let c = Clock::from_parts([(Actor::new(1), 5)], [Dot::new(Actor::new(1), 7)]);
        let bytes = encode_context(&c);
        assert_eq!(hex(&bytes), "43010101000000000000000501010000000000000007");
        assert_eq!(decode_context(&bytes), Ok(c));
        assert_eq!(
            hex(&encode_context(&Clock::new())),
            "43010000",
            "the empty context"
        );
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        let good = encode_siblings(&golden_set());
        let cases: Vec<(&str, Vec<u8>, DecodeError)> = vec![
            (
                "empty input",
                vec![],
                DecodeError::Truncated {
                    at: 0,
                    what: "tag byte",
                },
            ),
            (
                "a context where a sibling set is expected",
                vec![b'C', 1, 0],
                DecodeError::WrongTag {
                    expected: "sibling set",
                    found: b'C',
                },
            ),
            (
                "a future version",
                vec![b'S', 2, 0],
                DecodeError::UnsupportedVersion(2),
            ),
            (
                "cut in the middle",
                good[..good.len() - 3].to_vec(),
                DecodeError::Truncated {
                    at: good.len() - 3,
                    what: "timestamp",
                },
            ),
            ("one byte too many", [good.clone(), vec![0]].concat(), {
                DecodeError::TrailingBytes {
                    at: good.len(),
                    count: 1,
                }
            }),
            (
                "a count the input cannot hold",
                vec![b'S', 1, 0xff, 0xff, 0x03],
                DecodeError::Truncated {
                    at: 2,
                    what: "sibling count",
                },
            ),
            (
                "an overlong varint",
                vec![b'S', 1, 0x80, 0x00],
                DecodeError::VarintNotShortest { at: 2 },
            ),
            (
                "a varint past 64 bits",
                [vec![b'S', 1], vec![0xff; 9], vec![0x02]].concat(),
                DecodeError::VarintOverflow { at: 2 },
            ),
            (
                "an unknown kind",
                vec![b'S', 1, 1, 0, 0, 7, 0],
                DecodeError::UnknownKind { at: 5, kind: 7 },
            ),
            (
                "a recorded n_val of 0",
                vec![b'S', 1, 1, 0, 0, 3, 0, 0],
                DecodeError::ZeroNVal { at: 7 },
            ),
            (
                "a recorded n_val cut off",
                vec![b'S', 1, 1, 0, 0, 3, 0],
                DecodeError::Truncated {
                    at: 7,
                    what: "n_val",
                },
            ),
            (
                "a zero counter",
                [vec![b'S', 1, 1, 1], vec![0; 8], vec![0, 0, 1, 0]].concat(),
                DecodeError::ZeroCounter { at: 4 },
            ),
            (
                "the same sibling twice",
                vec![b'S', 1, 2, 0, 0, 1, 0, 0, 0, 1, 0],
                DecodeError::SiblingsNotAscending { at: 7 },
            ),
            (
                "a dot contiguous with the vector",
                [
                    vec![b'C', 1, 1],
                    vec![1, 0, 0, 0, 0, 0, 0, 0, 2],
                    vec![1],
                    vec![1, 0, 0, 0, 0, 0, 0, 0, 3],
                ]
                .concat(),
                DecodeError::DotNotBeyondVector { at: 13 },
            ),
        ];
        for (name, bytes, want) in cases {
            // Cases built as contexts (a 'C' tag at byte 2 of a 3+ byte input) go to that decoder.
            let got = if bytes.len() > 3 && bytes[0] == b'C' {
                decode_context(&bytes).map(|_| ())
            } else {
                decode_siblings(&bytes).map(|_| ())
            };
            assert_eq!(got, Err(want), "{name}");
        }
    }

    #[test]
    fn a_dominated_sibling_is_refused() {
        let x = Actor::new(9);
        let old = Sibling::new(Clock::from_parts([(x, 1)], []), SiblingMeta::tombstone(1));
        let new = Sibling::new(Clock::from_parts([(x, 2)], []), SiblingMeta::tombstone(2));
        // Bypass from_siblings (which would drop `old`) to forge such an encoding.
        let bytes = encode_siblings(&SiblingSet::from_canonical(vec![old, new]));
        assert_eq!(
            decode_siblings(&bytes),
            Err(DecodeError::DominatedSibling { index: 0 })
        );
    }
}
