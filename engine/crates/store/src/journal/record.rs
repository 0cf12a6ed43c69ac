//! Journal record codec.
//!
//! ```text
//! record   := body_len:u32 crc:u32 body            (crc = CRC32C(body), little-endian ints)
//! body     := sqn:u64 kind:u8 [synced:u64] timestamp:u64 ledger_key:bytes metadata:bytes
//!             n_changes:u32 change* value:bytes
//! kind     := (codec << 4) | synced_flag | (1 put, 2 delete)
//!             codec: 0 raw, 1 lz4, 2 zstd (value_codec.rs); synced_flag 0x08: `synced` follows
//! synced   := the store's synced SQN when the record was written: every record up to it was
//!             fdatasynced before this one was appended (records before the flag have none)
//! change   := op:u8 (1 add, 2 remove) field:bytes term
//! term     := 0x01 i64 | 0x02 bytes
//! bytes    := len:u32 data
//! ```

use crate::codec::{put_bytes, put_u32, put_u64, put_u8, Reader};
use crate::error::{Error, Result};
use crate::keys::{IndexChange, IndexOp, Term};
use crate::value_codec::{self, ValueCodec};

/// Bytes before the body: length and CRC.
pub(crate) const HEADER_BYTES: usize = 8;
/// The kind byte's bit saying the body carries the synced SQN after the kind.
const SYNCED_FLAG: u8 = 0x08;
/// Where the synced SQN sits: after the header, the SQN and the kind byte.
const SYNCED_AT: usize = HEADER_BYTES + 8 + 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Put = 1,
    Delete = 2,
}

/// A decoded record borrowing from the read buffer.
#[derive(Debug)]
pub(crate) struct RecordView<'a> {
    pub sqn: u64,
    pub kind: Kind,
    /// µs since the Unix epoch when the write was accepted.
    pub timestamp: u64,
    pub ledger_key: &'a [u8],
    pub metadata: &'a [u8],
    pub changes: Vec<IndexChange>,
    /// The value as stored (compressed when `codec` says so: [`RecordView::original_value`]).
    pub value: &'a [u8],
    pub codec: ValueCodec,
    /// The store's synced SQN when the record was written (`None`: a record from before the
    /// field). Recovery reads it to tell an unsynced tail from damage to synced records.
    pub synced: Option<u64>,
}

impl RecordView<'_> {
    /// The value as written, decompressed if need be (at most `max_len` bytes).
    pub(crate) fn original_value(&self, max_len: usize) -> Result<std::borrow::Cow<'_, [u8]>> {
        Ok(match self.codec {
            ValueCodec::Raw => std::borrow::Cow::Borrowed(self.value),
            c => std::borrow::Cow::Owned(value_codec::decompress(c, self.value, max_len)?),
        })
    }
}

/// Encode a whole record (header + body) into `out`: the two steps of the write path in one.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode(
    out: &mut Vec<u8>,
    sqn: u64,
    kind: Kind,
    timestamp: u64,
    ledger_key: &[u8],
    metadata: &[u8],
    changes: &[IndexChange],
    value: &[u8],
) {
    let mut rec = Vec::new();
    encode_unsequenced(
        &mut rec,
        kind,
        timestamp,
        ledger_key,
        metadata,
        changes,
        value,
        ValueCodec::Raw,
    );
    seal(&mut rec, sqn, 0);
    out.extend_from_slice(&rec);
}

/// Encode a record into `out` (cleared first) with the SQN and CRC left open: everything else is
/// in place. The write path encodes outside its lock and [`seal`]s under it. `value` is stored
/// as `codec` says it is.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_unsequenced(
    out: &mut Vec<u8>,
    kind: Kind,
    timestamp: u64,
    ledger_key: &[u8],
    metadata: &[u8],
    changes: &[IndexChange],
    value: &[u8],
    codec: ValueCodec,
) {
    out.clear();
    out.extend_from_slice(&[0u8; HEADER_BYTES + 8]);
    put_u8(out, ((codec as u8) << 4) | SYNCED_FLAG | kind as u8);
    put_u64(out, 0); // the synced SQN, written by `seal`
    put_u64(out, timestamp);
    put_bytes(out, ledger_key);
    put_bytes(out, metadata);
    put_u32(out, changes.len() as u32);
    for c in changes {
        put_u8(out, if c.op == IndexOp::Add { 1 } else { 2 });
        put_bytes(out, &c.field);
        match &c.term {
            Term::Int(i) => {
                put_u8(out, 1);
                put_u64(out, *i as u64);
            }
            Term::Bin(b) => {
                put_u8(out, 2);
                put_bytes(out, b);
            }
        }
    }
    put_bytes(out, value);
    let body_len = (out.len() - HEADER_BYTES) as u32;
    out[0..4].copy_from_slice(&body_len.to_le_bytes());
}

/// Write `sqn`, the store's `synced` SQN (when the record has the field) and the record's CRC
/// into `buf` (what [`encode_unsequenced`] filled). The CRC covers the SQN, which comes first, so
/// it is computed here, over the whole body. (Combining a CRC of the rest computed earlier with
/// the SQN's costs more than the hardware CRC of a 16 KiB body: measured, a zlib-style combine
/// under the write lock cut `16k_nosync` by 17 %.)
pub(crate) fn seal(buf: &mut [u8], sqn: u64, synced: u64) {
    buf[HEADER_BYTES..HEADER_BYTES + 8].copy_from_slice(&sqn.to_le_bytes());
    if buf[HEADER_BYTES + 8] & SYNCED_FLAG != 0 {
        buf[SYNCED_AT..SYNCED_AT + 8].copy_from_slice(&synced.to_le_bytes());
    }
    let crc = levee_checksum::crc32c(&buf[HEADER_BYTES..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Parse the 8-byte header: (body length, crc).
pub(crate) fn header(buf: &[u8]) -> (usize, u32) {
    let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().unwrap());
    (len, crc)
}

/// The kind and value codec a record's kind byte says, or `None` for a byte no record carries.
/// The one reading of that byte: the decoder and the scanner's search for valid records after
/// damage both use it (a search that knew only uncompressed kinds took damage followed by
/// compressed records for a torn tail and cut them).
pub(crate) fn parse_kind(kind_byte: u8) -> Option<(Kind, ValueCodec)> {
    let codec = ValueCodec::from_bits(kind_byte >> 4)?;
    match kind_byte & !(0xf0 | SYNCED_FLAG) {
        1 => Some((Kind::Put, codec)),
        2 => Some((Kind::Delete, codec)),
        _ => None,
    }
}

/// Check the CRC of `body` and decode it.
pub(crate) fn decode_body(body: &[u8], crc: u32) -> Result<RecordView<'_>> {
    let got = levee_checksum::crc32c(body);
    if got != crc {
        return Err(Error::Corruption(format!(
            "journal record checksum mismatch (stored {crc:08x}, computed {got:08x})"
        )));
    }
    let mut r = Reader::new(body, "journal record");
    let sqn = r.u64()?;
    let kind_byte = r.u8()?;
    let Some((kind, codec)) = parse_kind(kind_byte) else {
        return Err(Error::Corruption(format!(
            "journal record has unknown kind {kind_byte:#04x}"
        )));
    };
    let synced = if kind_byte & SYNCED_FLAG != 0 {
        Some(r.u64()?)
    } else {
        None
    };
    let timestamp = r.u64()?;
    let ledger_key = r.bytes()?;
    let metadata = r.bytes()?;
    let n = r.u32()? as usize;
    if n > body.len() {
        return Err(Error::Corruption(
            "journal record: index change count too large".into(),
        ));
    }
    let mut changes = Vec::with_capacity(n);
    for _ in 0..n {
        let op = match r.u8()? {
            1 => IndexOp::Add,
            2 => IndexOp::Remove,
            o => {
                return Err(Error::Corruption(format!(
                    "journal record: bad index op {o}"
                )))
            }
        };
        let field = r.bytes()?.to_vec();
        let term = match r.u8()? {
            1 => Term::Int(r.u64()? as i64),
            2 => Term::Bin(r.bytes()?.to_vec()),
            t => {
                return Err(Error::Corruption(format!(
                    "journal record: bad term kind {t}"
                )))
            }
        };
        changes.push(IndexChange { op, field, term });
    }
    let value = r.bytes()?;
    r.expect_end()?;
    Ok(RecordView {
        sqn,
        kind,
        timestamp,
        ledger_key,
        metadata,
        changes,
        value,
        codec,
        synced,
    })
}

/// Decode a full record (header + body) held in `buf`.
pub(crate) fn decode(buf: &[u8]) -> Result<RecordView<'_>> {
    if buf.len() < HEADER_BYTES {
        return Err(Error::Corruption(
            "journal record shorter than its header".into(),
        ));
    }
    let (len, crc) = header(buf);
    if buf.len() != HEADER_BYTES + len {
        return Err(Error::Corruption(format!(
            "journal record length {} does not match the {} bytes read",
            len,
            buf.len() - HEADER_BYTES
        )));
    }
    decode_body(&buf[HEADER_BYTES..], crc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut out = Vec::new();
        let changes = vec![
            IndexChange::add(b"age_int".to_vec(), Term::Int(-42)),
            IndexChange::remove(b"name_bin".to_vec(), Term::Bin(b"bob\0".to_vec())),
        ];
        encode(
            &mut out,
            77,
            Kind::Put,
            1234,
            b"\x01b\0k",
            b"vv",
            &changes,
            b"value!",
        );
        out
    }

    #[test]
    fn a_record_sealed_after_encoding_decodes_with_its_sqn_and_fields() {
        let changes = [
            IndexChange::add(b"age_int".to_vec(), Term::Int(-42)),
            IndexChange::remove(b"name_bin".to_vec(), Term::Bin(b"bob\0".to_vec())),
        ];
        for (sqn, value, changes, codec) in [
            (77u64, &b"value!"[..], &changes[..], ValueCodec::Raw),
            (1, &b""[..], &[][..], ValueCodec::Lz4),
            (
                u64::MAX - 3,
                &[0xAB; 70_000][..],
                &changes[..1],
                ValueCodec::Zstd,
            ),
        ] {
            let mut buf = vec![9u8; 3]; // cleared first
            encode_unsequenced(
                &mut buf,
                Kind::Delete,
                99,
                b"\x01b\0k",
                b"vv",
                changes,
                value,
                codec,
            );
            seal(&mut buf, sqn, sqn / 2);
            let r = decode(&buf).unwrap(); // checks the CRC over the SQN and the rest
            assert_eq!(r.synced, Some(sqn / 2));
            assert_eq!(
                (
                    r.sqn,
                    r.kind,
                    r.timestamp,
                    r.ledger_key,
                    r.metadata,
                    r.value
                ),
                (sqn, Kind::Delete, 99, &b"\x01b\0k"[..], &b"vv"[..], value)
            );
            assert_eq!(r.changes, changes);
            assert_eq!(r.codec, codec);
            // Sealed again with another SQN: the CRC follows.
            seal(&mut buf, sqn ^ 1, 5);
            assert_eq!(decode(&buf).unwrap().sqn, sqn ^ 1);
            assert_eq!(decode(&buf).unwrap().synced, Some(5));
        }
    }

    /// A record written before the synced SQN existed (no flag, no field) reads as it did, with
    /// no synced SQN.
    #[test]
    fn a_record_without_the_synced_field_still_decodes() {
        let new = sample();
        let mut old = new[..SYNCED_AT].to_vec();
        old[HEADER_BYTES + 8] &= !SYNCED_FLAG;
        old.extend_from_slice(&new[SYNCED_AT + 8..]);
        let body_len = (old.len() - HEADER_BYTES) as u32;
        old[0..4].copy_from_slice(&body_len.to_le_bytes());
        seal(&mut old, 77, 12345); // no field: the synced SQN is not written
        let r = decode(&old).unwrap();
        assert_eq!(
            (r.sqn, r.synced, r.timestamp, r.value),
            (77, None, 1234, &b"value!"[..])
        );
        assert_eq!(r.changes.len(), 2);
    }

    #[test]
    fn an_unknown_kind_or_codec_is_corruption() {
        for kind_byte in [0x00u8, 0x03, 0x31, 0xf2] {
            let mut buf = sample();
            buf[HEADER_BYTES + 8] = kind_byte;
            seal(&mut buf, 77, 0);
            match decode(&buf) {
                Err(Error::Corruption(m)) => assert!(m.contains("unknown kind"), "{m}"),
                other => panic!("{kind_byte:#04x}: {other:?}"),
            }
        }
    }

    #[test]
    fn round_trip() {
        let buf = sample();
        let r = decode(&buf).unwrap();
        assert_eq!(r.sqn, 77);
        assert_eq!(r.kind, Kind::Put);
        assert_eq!(r.timestamp, 1234);
        assert_eq!(r.ledger_key, b"\x01b\0k");
        assert_eq!(r.metadata, b"vv");
        assert_eq!(r.value, b"value!");
        assert_eq!(r.changes.len(), 2);
        assert_eq!(r.changes[0].term, Term::Int(-42));
        assert_eq!(r.changes[1].op, IndexOp::Remove);
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let buf = sample();
        for i in 0..buf.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = buf.clone();
                b[i] ^= bit;
                let res = decode(&b);
                assert!(
                    res.is_err(),
                    "flip of bit {bit:#x} at byte {i} went unnoticed"
                );
            }
        }
    }

    #[test]
    fn truncation_is_detected() {
        let buf = sample();
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err());
        }
    }
}
