//! Key and value generators with basho_bench's semantics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::scenario::{KeyGenSpec, ValueGenSpec};

/// basho_bench pareto: mean 0.2·N, shape 1.5 → ≈80 % of draws in the lowest ≈19 % of keys.
pub fn pareto(rng: &mut SmallRng, n: u64) -> u64 {
    let (mean, shape) = (0.2 * n as f64, 1.5f64);
    let u: f64 = 1.0 - rng.gen::<f64>();
    ((u.powf(-1.0 / shape) - 1.0) * mean * (shape - 1.0)) as u64
}

/// Draws keys for one worker.
pub struct KeyGen {
    spec: KeyGenSpec,
    rng: SmallRng,
    shared: Arc<AtomicU64>,
    worker: u64,
    workers: u64,
    next: u64,
}

impl KeyGen {
    pub fn new(
        spec: &KeyGenSpec,
        worker: u64,
        workers: u64,
        shared: Arc<AtomicU64>,
        seed: u64,
    ) -> KeyGen {
        KeyGen {
            spec: spec.clone(),
            rng: SmallRng::seed_from_u64(seed ^ (worker << 32)),
            shared,
            worker,
            workers,
            next: 0,
        }
    }

    /// The next key number; `None` when a sequential generator is exhausted.
    pub fn next_key(&mut self) -> Option<u64> {
        match self.spec {
            // basho_bench's `random:uniform(N)`: 1..=N, never 0.
            KeyGenSpec::UniformInt { n } => Some(self.rng.gen_range(1..=n.max(1))),
            KeyGenSpec::SequentialInt { n } => {
                let k = self.shared.fetch_add(1, Ordering::Relaxed);
                (k < n).then_some(k)
            }
            KeyGenSpec::PartitionedSequentialInt { n } => {
                let per = n.div_ceil(self.workers);
                let k = self.worker * per + self.next;
                self.next += 1;
                (self.next <= per && k < n).then_some(k)
            }
            KeyGenSpec::ParetoInt { n } => Some(pareto(&mut self.rng, n)),
            KeyGenSpec::TruncatedParetoInt { n } => {
                Some(pareto(&mut self.rng, n).min(n.saturating_sub(1)))
            }
        }
    }
}

/// Key bytes: zero-padded decimal, so lexical order is numeric order (as basho_bench's
/// `int_to_str` keys).
pub fn key_bytes(k: u64) -> Vec<u8> {
    format!("{k:012}").into_bytes()
}

/// Key of the `n`th write-once document (put_unique): `u` and zero-padded decimal, apart from
/// the key generator's keys.
pub fn unique_key(n: u64) -> Vec<u8> {
    format!("u{n:012}").into_bytes()
}

/// Values are slices of one large random buffer: incompressible, and cheap to produce.
pub struct ValueGen {
    spec: ValueGenSpec,
    buf: Arc<Vec<u8>>,
    rng: SmallRng,
}

/// Size of the shared random buffer values are sliced from (basho_bench also uses 96 MiB): large
/// enough that values written close together rarely overlap, so a block compressor finds no
/// repeats across them either.
pub const VALUE_BUFFER_BYTES: usize = 96 << 20;

pub fn random_buffer(bytes: usize, seed: u64) -> Arc<Vec<u8>> {
    value_buffer(bytes, seed, 0.0)
}

/// Bytes per chunk of [`value_buffer`]: every value of a few hundred bytes or more holds about the
/// same share of text.
const CHUNK: usize = 256;

/// The value buffer: random bytes where, with `compressible` > 0, the first `compressible` share
/// of every 256-byte chunk is text — words drawn at random from a small vocabulary, so a
/// compressor finds repeats within a value as it would in documents, not across the buffer.
pub fn value_buffer(bytes: usize, seed: u64, compressible: f64) -> Arc<Vec<u8>> {
    const WORDS: [&str; 16] = [
        "patient ",
        "record ",
        "the ",
        "of ",
        "and ",
        "ward ",
        "admitted ",
        "discharged ",
        "clinic ",
        "referral ",
        "2024-03-01 ",
        "status=",
        "normal ",
        "follow-up ",
        "nhs ",
        "id ",
    ];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut buf = vec![0u8; bytes];
    rng.fill(&mut buf[..]);
    let text = ((CHUNK as f64) * compressible.clamp(0.0, 1.0)).round() as usize;
    if text > 0 {
        for chunk in buf.chunks_mut(CHUNK) {
            let mut at = 0;
            while at < text.min(chunk.len()) {
                let w = WORDS[rng.gen_range(0..WORDS.len())].as_bytes();
                let n = w.len().min(text.min(chunk.len()) - at);
                chunk[at..at + n].copy_from_slice(&w[..n]);
                at += n;
            }
        }
    }
    Arc::new(buf)
}

impl ValueGen {
    pub fn new(spec: &ValueGenSpec, buf: Arc<Vec<u8>>, seed: u64) -> ValueGen {
        ValueGen {
            spec: spec.clone(),
            buf,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The size of the next value for key number `key`.
    pub fn size(&mut self, key: u64) -> usize {
        match self.spec {
            ValueGenSpec::FixedBin { size } => size,
            ValueGenSpec::HotScaledBin {
                size,
                hot_keys,
                hot_factor,
            } => {
                let heat = hot_keys.saturating_sub(key) as f64 / hot_keys as f64;
                (size as f64 * (1.0 + (hot_factor - 1.0) * heat)).round() as usize
            }
            ValueGenSpec::UniformBin { min, max } => self.rng.gen_range(min..=max.max(min)),
            ValueGenSpec::ExponentialBin { min, mean } => {
                let u: f64 = 1.0 - self.rng.gen::<f64>();
                min + (-(u.ln()) * mean as f64) as usize
            }
        }
        .min(self.buf.len())
    }

    /// A value for key number `key` (only `hot_scaled_bin` sizes depend on it).
    pub fn next_value(&mut self, key: u64) -> &[u8] {
        let size = self.size(key);
        let off = self.rng.gen_range(0..=self.buf.len() - size);
        &self.buf[off..off + size]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pareto_puts_80_percent_of_draws_in_the_lowest_19_percent() {
        let mut rng = SmallRng::seed_from_u64(1);
        let n = 1_000_000u64;
        let draws = 400_000;
        let low = (0..draws)
            .filter(|_| pareto(&mut rng, n) < n * 19 / 100)
            .count();
        let frac = low as f64 / draws as f64;
        assert!((0.77..0.83).contains(&frac), "{frac}");
    }

    #[test]
    fn uniform_int_draws_1_to_n_as_basho_bench() {
        let mut g = KeyGen::new(
            &KeyGenSpec::UniformInt { n: 5 },
            0,
            1,
            Arc::new(AtomicU64::new(0)),
            3,
        );
        let drawn: std::collections::BTreeSet<u64> =
            (0..1000).filter_map(|_| g.next_key()).collect();
        assert_eq!(drawn, (1..=5).collect());
    }

    #[test]
    fn sequential_generators_cover_the_keyspace_once() {
        let shared = Arc::new(AtomicU64::new(0));
        let mut seen = Vec::new();
        for w in 0..3 {
            let mut g = KeyGen::new(
                &KeyGenSpec::PartitionedSequentialInt { n: 10 },
                w,
                3,
                shared.clone(),
                0,
            );
            while let Some(k) = g.next_key() {
                seen.push(k);
            }
        }
        seen.sort();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        let mut g = KeyGen::new(
            &KeyGenSpec::SequentialInt { n: 3 },
            0,
            1,
            Arc::new(AtomicU64::new(0)),
            0,
        );
        assert_eq!(
            (g.next_key(), g.next_key(), g.next_key(), g.next_key()),
            (Some(0), Some(1), Some(2), None)
        );
        assert_eq!(key_bytes(42), b"000000000042");
    }

    #[test]
    fn value_sizes_follow_their_generators() {
        let buf = random_buffer(1 << 20, 7);
        let mut f = ValueGen::new(&ValueGenSpec::FixedBin { size: 8192 }, buf.clone(), 1);
        assert!((0..100).all(|_| f.next_value(0).len() == 8192));
        let mut u = ValueGen::new(
            &ValueGenSpec::UniformBin { min: 10, max: 20 },
            buf.clone(),
            1,
        );
        assert!((0..1000).all(|_| (10..=20).contains(&u.next_value(0).len())));
        let mut e = ValueGen::new(
            &ValueGenSpec::ExponentialBin {
                min: 100,
                mean: 1000,
            },
            buf.clone(),
            1,
        );
        let mean = (0..20_000).map(|_| e.next_value(0).len()).sum::<usize>() as f64 / 20_000.0;
        assert!((1000.0..1200.0).contains(&mean), "{mean}");
        let mut h = ValueGen::new(
            &ValueGenSpec::HotScaledBin {
                size: 1000,
                hot_keys: 100,
                hot_factor: 5.0,
            },
            buf,
            1,
        );
        let sizes: Vec<usize> = [0, 50, 99, 100, 5000]
            .iter()
            .map(|&k| h.next_value(k).len())
            .collect();
        assert_eq!(sizes, [5000, 3000, 1040, 1000, 1000]);
    }
}
