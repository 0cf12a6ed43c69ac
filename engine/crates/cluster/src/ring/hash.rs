//! Key → partition. The mapping is part of the on-disk format: a key lives in the store of its
//! partition, so the function below must give the same answer on every platform and in every
//! version of levee for as long as a data directory written with it exists. Frozen vectors in
//! the tests pin it; changing it is a data migration, not a refactoring.
//!
//! # The function, byte by byte
//!
//! `crc32c(data)` is CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected, initial value and
//! final XOR 0xFFFFFFFF — the iSCSI / ext4 checksum; `crc32c("123456789") = 0xE3069283`), and
//! `crc32c_append(c, data)` continues a CRC whose value so far is `c`, so that
//! `crc32c_append(crc32c(a), b) = crc32c(a ‖ b)`.
//!
//! ```text
//! h0 = crc32c(bucket)
//! h1 = crc32c_append(h0 XOR 0xA5A5_5A5A, [0x00])      bucket/key separator, and a twist so that
//!                                                     (b"ab", b"c") and (b"a", b"bc") differ
//! h2 = crc32c_append(h1, key)
//! m  = ((h2 as u64) * 0x9E37_79B9_7F4A_7C15 mod 2^64) >> 32    Fibonacci mixing: every hash bit
//!                                                              reaches the bits a small ring uses
//! partition = m AND (ring_size - 1)
//! ```
//!
//! This is the function levee nodes used before the cluster layer existed (node `ring.rs`), kept
//! bit for bit so existing single-node data directories keep their keys where they are.
//!
//! Why not SHA-1 as Riak does: any unkeyed hash lets a client aim keys at one partition by trying
//! about `ring_size` random keys, so a cryptographic hash buys no protection here; CRC-32C is
//! specified exactly, runs in hardware on x86-64 and aarch64, and spreads the structured keys
//! applications use (`user:1`, `user:2`, ...) evenly (tests below).

use super::{Partition, RingSize};

/// The 32-bit hash of a (bucket, key) before it is reduced to a partition.
pub fn key_hash(bucket: &[u8], key: &[u8]) -> u32 {
    let h = crc32c::crc32c(bucket);
    let h = crc32c::crc32c_append(h ^ 0xA5A5_5A5A, &[0]);
    crc32c::crc32c_append(h, key)
}

/// Partition of a (bucket, key) in a ring of `ring_size` partitions.
pub fn partition_of(bucket: &[u8], key: &[u8], ring_size: RingSize) -> Partition {
    let m = (key_hash(bucket, key) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    (m as u32) & (ring_size.get() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(n: u32) -> RingSize {
        RingSize::new(n).unwrap()
    }

    #[test]
    fn crc32c_is_the_castagnoli_crc() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(
            crc32c::crc32c_append(crc32c::crc32c(b"1234"), b"56789"),
            0xE306_9283
        );
    }

    /// Frozen: computed once with the node's pre-cluster `partition_of` and never to be edited.
    /// A failure here means keys written by an older levee would be looked up in the wrong store.
    #[test]
    fn frozen_vectors() {
        let cases: &[(&[u8], &[u8], u32, u32)] = &[
            // (bucket, key, key_hash, partition in a ring of 4096)
            (b"", b"", 0x681F_04E0, 1210),
            (b"b", b"k", 0xB121_217E, 2841),
            (b"users", b"alice", 0xCFC9_AC82, 3465),
            (b"users", b"bob", 0x6DFB_F4BB, 3247),
            (b"orders", b"2024-06-01/000042", 0xA093_E377, 1643),
            (b"ab", b"c", 0xB23D_70D8, 2874),
            (b"a", b"bc", 0x112E_2B3A, 3592),
            (b"\x00\xff", b"\xff\x00\x01", 0x11EE_C44E, 1398),
        ];
        let mut failures = Vec::new();
        for &(b, k, h, p4096) in cases {
            let got = (key_hash(b, k), partition_of(b, k, ring(4096)));
            if got != (h, p4096) {
                failures.push(format!(
                    "({:?}, {:?}): want ({h:#010X}, {p4096}), got ({:#010X}, {})",
                    String::from_utf8_lossy(b),
                    String::from_utf8_lossy(k),
                    got.0,
                    got.1
                ));
            }
            // A smaller ring keeps the low bits of the same value.
            for r in [1, 2, 8, 64, 256, 1024] {
                assert_eq!(partition_of(b, k, ring(r)), p4096 & (r - 1));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn structured_keys_spread_evenly() {
        for r in [8u32, 64, 256] {
            let mut counts = vec![0u32; r as usize];
            let per = 500;
            for i in 0..r * per {
                counts[partition_of(b"users", format!("user:{i}").as_bytes(), ring(r)) as usize] +=
                    1;
            }
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            // 500 expected per partition; ±20 % is > 4 standard deviations.
            assert!(
                *min > per * 8 / 10 && *max < per * 12 / 10,
                "ring {r}: {min}..{max}"
            );
        }
    }
}
