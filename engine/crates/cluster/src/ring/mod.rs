//! The ring: `ring_size` partitions (a power of two), the hash that maps a (bucket, key) to one
//! of them, the claim that gives every partition an owner, and the preflists built on the claim.

pub mod claim;
pub mod hash;
pub mod preflist;
pub mod rebuild;
pub mod ring_file;
mod spacing;

use std::fmt;

/// Index of a partition, `0..ring_size`.
pub type Partition = u32;

/// Largest ring accepted. Each partition is one store (vnode) on its owner, so a ring much larger
/// than this would mean thousands of open stores per node.
pub const MAX_RING_SIZE: u32 = 4096;

/// Largest `n_val` accepted (the operator allows 1–7).
pub const MAX_N_VAL: u32 = 16;

/// The number of partitions in the ring: a power of two in `1..=MAX_RING_SIZE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RingSize(u32);

impl RingSize {
    pub fn new(partitions: u32) -> Result<RingSize, RingError> {
        if partitions == 0 || !partitions.is_power_of_two() || partitions > MAX_RING_SIZE {
            return Err(RingError::BadRingSize(partitions));
        }
        Ok(RingSize(partitions))
    }

    pub fn get(self) -> u32 {
        self.0
    }

    pub(crate) fn len(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for RingSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a claim is computed for: the ring and the number of replicas of every key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingParams {
    ring_size: RingSize,
    n_val: u32,
}

impl RingParams {
    /// `n_val` must be between 1 and [`MAX_N_VAL`], and at most `ring_size` (a preflist is
    /// `n_val` distinct partitions).
    pub fn new(ring_size: RingSize, n_val: u32) -> Result<RingParams, RingError> {
        if n_val == 0 || n_val > MAX_N_VAL {
            return Err(RingError::BadNVal(n_val));
        }
        if n_val > ring_size.get() {
            return Err(RingError::NValLargerThanRing { n_val, ring_size });
        }
        Ok(RingParams { ring_size, n_val })
    }

    pub fn ring_size(&self) -> RingSize {
        self.ring_size
    }

    pub fn n_val(&self) -> u32 {
        self.n_val
    }
}

/// Errors of the ring's pure functions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    #[error("ring_size must be a power of two between 1 and {MAX_RING_SIZE}, got {0}")]
    BadRingSize(u32),
    #[error("n_val must be between 1 and {MAX_N_VAL}, got {0}")]
    BadNVal(u32),
    #[error("n_val {n_val} is larger than the ring ({ring_size} partitions): a preflist is n_val distinct partitions")]
    NValLargerThanRing { n_val: u32, ring_size: RingSize },
    #[error("a preflist of {n_val} replicas on a ring laid out for n_val {claim_n_val}: it must be 1..={claim_n_val}")]
    PreflistLongerThanClaim { n_val: u32, claim_n_val: u32 },
    #[error("a claim needs at least one member")]
    NoMembers,
    #[error("member {0:?} is listed twice")]
    DuplicateMember(String),
    #[error("a claim of {ring_size} partitions cannot have {owners} owners")]
    OwnerCount { ring_size: RingSize, owners: usize },
    #[error("partition {partition} is owned by {owner:?}, which is not a member")]
    UnknownOwner { partition: Partition, owner: String },
    #[error("partition {partition} is outside the ring of {ring_size}")]
    NoSuchPartition {
        partition: Partition,
        ring_size: RingSize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_powers_of_two_within_bounds() {
        for ok in [1, 2, 8, 64, 256, 1024, 4096] {
            assert_eq!(RingSize::new(ok).unwrap().get(), ok);
        }
        for bad in [0, 3, 48, 100, 8192, u32::MAX] {
            let e = RingSize::new(bad).unwrap_err();
            assert_eq!(e, RingError::BadRingSize(bad));
            assert!(e.to_string().contains("power of two"), "{e}");
            assert!(e.to_string().contains(&bad.to_string()), "{e}");
        }
    }

    #[test]
    fn n_val_must_fit_the_ring() {
        let r8 = RingSize::new(8).unwrap();
        assert_eq!(RingParams::new(r8, 0).unwrap_err(), RingError::BadNVal(0));
        let r64 = RingSize::new(64).unwrap();
        assert_eq!(
            RingParams::new(r64, 17).unwrap_err(),
            RingError::BadNVal(17)
        );
        assert_eq!(RingParams::new(r64, 16).unwrap().n_val(), 16);
        assert_eq!(
            RingParams::new(r8, 9).unwrap_err(),
            RingError::NValLargerThanRing {
                n_val: 9,
                ring_size: r8
            }
        );
        assert_eq!(RingParams::new(r8, 8).unwrap().n_val(), 8);
    }
}
