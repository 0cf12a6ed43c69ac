//! Bloom filter over ledger keys, one per SST, held in memory. Double hashing of two CRC32C-based
//! hashes; `k = round(bits_per_key · ln 2)` probes.

pub(crate) struct Bloom {
    bits: Vec<u8>,
    k: u32,
}

fn hashes(key: &[u8]) -> (u32, u32) {
    let h1 = crc32c::crc32c(key);
    let h2 = crc32c::crc32c_append(0x9E37_79B9, key).rotate_left(15) | 1;
    (h1, h2)
}

impl Bloom {
    /// Build a filter sized for `keys`.
    pub(crate) fn build<'a>(
        keys: impl ExactSizeIterator<Item = &'a [u8]>,
        bits_per_key: u32,
    ) -> Bloom {
        let n = keys.len().max(1);
        let nbits = (n * bits_per_key as usize).max(64);
        let nbytes = nbits.div_ceil(8);
        let k = ((bits_per_key as f64) * std::f64::consts::LN_2)
            .round()
            .clamp(1.0, 30.0) as u32;
        let mut bits = vec![0u8; nbytes];
        let m = (nbytes * 8) as u32;
        for key in keys {
            let (mut h, d) = hashes(key);
            for _ in 0..k {
                let b = h % m;
                bits[(b / 8) as usize] |= 1 << (b % 8);
                h = h.wrapping_add(d);
            }
        }
        Bloom { bits, k }
    }

    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        let m = (self.bits.len() * 8) as u32;
        if m == 0 {
            return true;
        }
        let (mut h, d) = hashes(key);
        for _ in 0..self.k {
            let b = h % m;
            if self.bits[(b / 8) as usize] & (1 << (b % 8)) == 0 {
                return false;
            }
            h = h.wrapping_add(d);
        }
        true
    }

    /// `k:u32` then the bit array.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.k.to_le_bytes());
        out.extend_from_slice(&self.bits);
    }

    pub(crate) fn decode(buf: &[u8]) -> Option<Bloom> {
        if buf.len() < 4 {
            return None;
        }
        let k = u32::from_le_bytes(buf[..4].try_into().unwrap());
        if k == 0 || k > 30 {
            return None;
        }
        Some(Bloom {
            bits: buf[4..].to_vec(),
            k,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_false_positive_rate() {
        let keys: Vec<Vec<u8>> = (0..10_000u32)
            .map(|i| format!("key-{i}").into_bytes())
            .collect();
        let bloom = Bloom::build(keys.iter().map(|k| k.as_slice()), 10);
        for k in &keys {
            assert!(bloom.may_contain(k));
        }
        let fp = (0..10_000u32)
            .filter(|i| bloom.may_contain(format!("other-{i}").as_bytes()))
            .count();
        assert!(fp < 300, "false positive rate too high: {fp} / 10000");
        let mut enc = Vec::new();
        bloom.encode(&mut enc);
        let back = Bloom::decode(&enc).unwrap();
        assert!(keys.iter().all(|k| back.may_contain(k)));
    }
}
