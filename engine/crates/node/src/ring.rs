//! The ring: which partition a (bucket, key) belongs to. One engine store per partition (vnode).

/// Partition of a (bucket, key) in a ring of `ring_size` partitions (a power of two, checked by
/// the config). The function itself, frozen, is `levee_cluster::ring::hash`.
pub fn partition_of(bucket: &[u8], key: &[u8], ring_size: u32) -> u32 {
    let ring = levee_cluster::RingSize::new(ring_size).expect("ring_size is validated at startup");
    levee_cluster::partition_of(bucket, key, ring)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_stable_in_range_and_balanced() {
        let mut counts = vec![0u32; 64];
        for i in 0..64_000u32 {
            let p = partition_of(b"b", &i.to_le_bytes(), 64);
            assert_eq!(p, partition_of(b"b", &i.to_le_bytes(), 64));
            counts[p as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 800 && *max < 1200, "unbalanced: {min}..{max}");
        assert_eq!(partition_of(b"b", b"k", 1), 0);
    }

    /// The node's function before levee-cluster, kept to prove the move changed no key's place.
    fn pre_cluster_partition_of(bucket: &[u8], key: &[u8], ring_size: u32) -> u32 {
        let mut h = crc32c::crc32c(bucket);
        h = crc32c::crc32c_append(h ^ 0xA5A5_5A5A, &[0]);
        h = crc32c::crc32c_append(h, key);
        let h = (h as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (h as u32) & (ring_size - 1)
    }

    #[test]
    fn existing_data_directories_keep_their_partitions() {
        for i in 0..20_000u32 {
            let (b, k) = (format!("b{}", i % 7), i.to_be_bytes());
            for r in [1, 8, 64, 1024] {
                assert_eq!(
                    partition_of(b.as_bytes(), &k, r),
                    pre_cluster_partition_of(b.as_bytes(), &k, r)
                );
            }
        }
    }
}
