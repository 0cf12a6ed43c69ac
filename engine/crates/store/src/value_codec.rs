//! Value compression in journal records, as leveled has it: a `compression_method` (none, lz4,
//! zstd) and a `compression_point` (on receipt, or only when journal compaction rewrites a
//! record).
//!
//! ```text
//! compressed value := original_len:u32le  payload      (an lz4 block or a zstd frame)
//! ```
//!
//! Each record says how its value is stored (the codec, in the high bits of its kind byte:
//! `journal/record.rs`), so records written raw before compression was turned on, or with another
//! method, stay readable. A value that does not shrink by at least an eighth is stored raw: random
//! or already compressed data costs one compression attempt, never a decompression on each read.
//! The ledger keeps the original value's length and CRC-32C, so every read checks the value after
//! decompression, and compaction may recompress a record without touching the ledger.

use crate::error::{Error, Result};

/// How new values are compressed (config `compression_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    Lz4,
    /// zstd at level [`ZSTD_LEVEL`].
    Zstd,
}

impl std::str::FromStr for Compression {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(Error::InvalidConfig(format!(
                "compression_method must be `none`, `lz4` or `zstd`, not `{other}`"
            ))),
        }
    }
}

/// When values are compressed (config `compression_point`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionPoint {
    /// When the write arrives (outside the write lock, on the writer's thread).
    #[default]
    OnReceipt,
    /// Only when journal compaction rewrites a record: writes stay as cheap as without
    /// compression, and the journal shrinks as it is compacted.
    OnCompact,
}

impl std::str::FromStr for CompressionPoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "on_receipt" => Ok(CompressionPoint::OnReceipt),
            "on_compact" => Ok(CompressionPoint::OnCompact),
            other => Err(Error::InvalidConfig(format!(
                "compression_point must be `on_receipt` or `on_compact`, not `{other}`"
            ))),
        }
    }
}

/// zstd's level: its default, a balance of speed and ratio.
pub const ZSTD_LEVEL: i32 = 3;

/// How one record's value is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueCodec {
    Raw = 0,
    Lz4 = 1,
    Zstd = 2,
}

impl ValueCodec {
    pub(crate) fn from_bits(b: u8) -> Option<ValueCodec> {
        match b {
            0 => Some(ValueCodec::Raw),
            1 => Some(ValueCodec::Lz4),
            2 => Some(ValueCodec::Zstd),
            _ => None,
        }
    }
}

const PREFIX: usize = 4;

/// Compress `value` with `method` into `out` (cleared first). Returns the codec the value is to be
/// stored with: [`ValueCodec::Raw`] (and `out` unused) when the method is none or the value does
/// not shrink by at least an eighth.
pub(crate) fn compress(method: Compression, value: &[u8], out: &mut Vec<u8>) -> ValueCodec {
    out.clear();
    // The length prefix is a u32; larger values (beyond any configured limit) stay raw.
    if value.len() < 64 || u32::try_from(value.len()).is_err() {
        return ValueCodec::Raw;
    }
    let worth = value.len() - value.len() / 8;
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    let codec = match method {
        Compression::None => return ValueCodec::Raw,
        Compression::Lz4 => {
            out.resize(
                PREFIX + lz4_flex::block::get_maximum_output_size(value.len()),
                0,
            );
            match lz4_flex::block::compress_into(value, &mut out[PREFIX..]) {
                Ok(n) => out.truncate(PREFIX + n),
                Err(_) => return ValueCodec::Raw,
            }
            ValueCodec::Lz4
        }
        Compression::Zstd => {
            out.resize(PREFIX + zstd::zstd_safe::compress_bound(value.len()), 0);
            match zstd::bulk::compress_to_buffer(value, &mut out[PREFIX..], ZSTD_LEVEL) {
                Ok(n) => out.truncate(PREFIX + n),
                Err(_) => return ValueCodec::Raw,
            }
            ValueCodec::Zstd
        }
    };
    if out.len() > worth {
        out.clear();
        return ValueCodec::Raw;
    }
    codec
}

/// The original value of a stored one. A compressed value claiming more than `max_len` bytes, or
/// whose payload does not decompress to exactly its claimed length, is corruption.
pub(crate) fn decompress(codec: ValueCodec, stored: &[u8], max_len: usize) -> Result<Vec<u8>> {
    let bad = |m: String| Error::Corruption(format!("compressed value ({codec:?}): {m}"));
    if codec == ValueCodec::Raw {
        return Ok(stored.to_vec());
    }
    if stored.len() < PREFIX {
        return Err(bad(format!(
            "{} bytes, shorter than its length",
            stored.len()
        )));
    }
    let len = u32::from_le_bytes(stored[..PREFIX].try_into().unwrap()) as usize;
    if len > max_len {
        return Err(bad(format!(
            "claims {len} bytes, more than the largest value ({max_len})"
        )));
    }
    let payload = &stored[PREFIX..];
    let mut out = vec![0u8; len];
    let n =
        match codec {
            ValueCodec::Raw => unreachable!(),
            ValueCodec::Lz4 => lz4_flex::block::decompress_into(payload, &mut out)
                .map_err(|e| bad(e.to_string()))?,
            ValueCodec::Zstd => zstd::bulk::decompress_to_buffer(payload, &mut out)
                .map_err(|e| bad(e.to_string()))?,
        };
    if n != len {
        return Err(bad(format!("decompressed to {n} bytes, {len} expected")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(n: usize) -> Vec<u8> {
        let words = ["alpha ", "beta ", "gamma ", "delta ", "levee "];
        let mut v = Vec::new();
        let mut i = 0;
        while v.len() < n {
            v.extend_from_slice(words[(i * 7 + i / 3) % words.len()].as_bytes());
            i += 1;
        }
        v.truncate(n);
        v
    }

    fn random(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn each_method_round_trips_and_incompressible_values_stay_raw() {
        // (method, value, codec expected)
        let cases = [
            (Compression::None, text(8192), ValueCodec::Raw),
            (Compression::Lz4, text(8192), ValueCodec::Lz4),
            (Compression::Zstd, text(8192), ValueCodec::Zstd),
            (Compression::Lz4, random(8192), ValueCodec::Raw),
            (Compression::Zstd, random(8192), ValueCodec::Raw),
            // Too small to be worth it.
            (Compression::Zstd, text(40), ValueCodec::Raw),
        ];
        let mut out = Vec::new();
        for (method, value, want) in cases {
            let codec = compress(method, &value, &mut out);
            assert_eq!(codec, want, "{method:?} of {} bytes", value.len());
            if codec == ValueCodec::Raw {
                continue;
            }
            assert!(
                out.len() < value.len() / 2,
                "{method:?}: {} bytes",
                out.len()
            );
            assert_eq!(decompress(codec, &out, value.len()).unwrap(), value);
        }
    }

    #[test]
    fn damaged_compressed_values_are_corruption_not_a_panic() {
        let value = text(4096);
        let mut out = Vec::new();
        for method in [Compression::Lz4, Compression::Zstd] {
            let codec = compress(method, &value, &mut out);
            let mut cases: Vec<(&str, Vec<u8>, usize)> = vec![
                ("empty", vec![], 1 << 20),
                ("cut short", out[..out.len() / 2].to_vec(), 1 << 20),
                ("over the limit", out.clone(), 4095),
            ];
            let mut longer = out.clone();
            longer[..4].copy_from_slice(&5000u32.to_le_bytes());
            cases.push(("claims more than it holds", longer, 1 << 20));
            let mut flipped = out.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0xff;
            cases.push(("a byte flipped", flipped, 1 << 20));
            for (name, bytes, max) in cases {
                match decompress(codec, &bytes, max) {
                    Err(Error::Corruption(_)) => {}
                    // A flipped literal byte may still decompress; the ledger's CRC catches it.
                    Ok(v) if name == "a byte flipped" => assert_ne!(v, value),
                    other => panic!("{method:?} {name}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn names_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!("lz4".parse::<Compression>().unwrap(), Compression::Lz4);
        assert_eq!(
            "on_compact".parse::<CompressionPoint>().unwrap(),
            CompressionPoint::OnCompact
        );
        let e = "gzip".parse::<Compression>().unwrap_err().to_string();
        assert!(e.contains("`none`, `lz4` or `zstd`"), "{e}");
        let e = "later".parse::<CompressionPoint>().unwrap_err().to_string();
        assert!(e.contains("on_receipt"), "{e}");
    }
}
