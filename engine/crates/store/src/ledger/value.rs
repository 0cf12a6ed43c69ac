//! The ledger's value for a key: where the object's value lives (its SQN) and what HEAD returns.
//!
//! ```text
//! ledger_value := sqn:u64 status:u8 (1 active, 2 tombstone) value_size:u32 value_hash:u32
//!                 last_modified:u64 (µs since the Unix epoch) metadata:bytes
//! ```

use crate::codec::{put_bytes, put_u32, put_u64, put_u8, Reader};
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LedgerValue {
    pub sqn: u64,
    pub tombstone: bool,
    pub value_size: u32,
    /// CRC32C of the value, checked again on GET.
    pub value_hash: u32,
    /// When the write was accepted, µs since the Unix epoch.
    pub last_modified: u64,
    pub metadata: Vec<u8>,
}

impl LedgerValue {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_u64(out, self.sqn);
        put_u8(out, if self.tombstone { 2 } else { 1 });
        put_u32(out, self.value_size);
        put_u32(out, self.value_hash);
        put_u64(out, self.last_modified);
        put_bytes(out, &self.metadata);
    }

    pub(crate) fn encoded_len(&self) -> usize {
        8 + 1 + 4 + 4 + 8 + 4 + self.metadata.len()
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<Self> {
        let mut r = Reader::new(buf, "ledger value");
        let sqn = r.u64()?;
        let tombstone = match r.u8()? {
            1 => false,
            2 => true,
            s => {
                return Err(Error::Corruption(format!(
                    "ledger value has unknown status {s}"
                )))
            }
        };
        let value_size = r.u32()?;
        let value_hash = r.u32()?;
        let last_modified = r.u64()?;
        let metadata = r.bytes()?.to_vec();
        r.expect_end()?;
        Ok(LedgerValue {
            sqn,
            tombstone,
            value_size,
            value_hash,
            last_modified,
            metadata,
        })
    }

    /// Read the tombstone flag of an encoded value without decoding it.
    pub(crate) fn encoded_is_tombstone(buf: &[u8]) -> bool {
        buf.get(8) == Some(&2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tombstone_peek() {
        let v = LedgerValue {
            sqn: 9,
            tombstone: true,
            value_size: 3,
            value_hash: 7,
            last_modified: 11,
            metadata: b"m".to_vec(),
        };
        let mut b = Vec::new();
        v.encode(&mut b);
        assert_eq!(b.len(), v.encoded_len());
        assert!(LedgerValue::encoded_is_tombstone(&b));
        assert_eq!(LedgerValue::decode(&b).unwrap(), v);
        b[8] = 9;
        assert!(LedgerValue::decode(&b).is_err());
    }
}
