//! levee-checksum: the CRC32C (Castagnoli) of the bytes levee stores and checks — the engine's
//! journal records, sealed blocks and value hashes, and the cluster layer's objects, sibling
//! hashes and sealed state files. Hashes for placement (memtable shards, bloom probes, ring and
//! lock stripes) stay on the `crc32c` crate; they see only keys.
//!
//! A GET checks the CRC of every record it reads, a PUT computes two (the value's hash and the
//! record's), so on large values the checksum is a fixed share of each operation: 11 % of a
//! 16 KB GET-heavy run's CPU with the `crc32c` crate (docs/benchmarks.md). `crc-fast` folds with
//! carry-less multiplies (PCLMULQDQ, VPCLMULQDQ where the CPU has it, chosen at run time) and
//! computes the same function several times as fast on large buffers (a 16 KB GET-heavy run
//! went 6 % faster over its second half: docs/benchmarks.md).

use crc_fast::CrcAlgorithm;

/// CRC32C of `data`, as stored in every checksummed structure of the engine.
pub fn crc32c(data: &[u8]) -> u32 {
    // The algorithm's checksum is 32 bits wide; crc-fast returns every width as a u64.
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check value of CRC-32C ("123456789"), from the algorithm's catalogue entry.
    #[test]
    fn the_check_value_is_crc32c() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    /// The stored format is CRC-32C: every length and alignment the folding code treats
    /// differently (short tails, 16/64/256-byte blocks, unaligned starts) gives what the
    /// `crc32c` crate, the engine's checksum before, gives.
    #[test]
    fn agrees_with_the_crc32c_crate_at_every_length_and_alignment() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let data: Vec<u8> = (0..70_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let lens = (0..=1100).chain([4095, 4096, 4097, 8191, 8192, 16384, 16400, 65_536]);
        for len in lens {
            for off in [0usize, 1, 3, 8, 13, 63] {
                let s = &data[off..off + len];
                assert_eq!(crc32c(s), crc32c::crc32c(s), "length {len}, offset {off}");
            }
        }
    }
}
