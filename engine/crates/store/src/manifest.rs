//! The store manifest: which journal segments exist with their SQN ranges, which ledger tables make
//! up each level, and the highest SQN the ledger has persisted.
//!
//! ```text
//! manifest := "LVMF" version:u32 generation:u64 persisted_sqn:u64 next_file_id:u64
//!             n_segments:u32 (id:u64 first_sqn:u64 last_sqn:u64 closed:u8)*
//!             n_tables:u32 (level:u8 id:u64 size:u64 entries:u64 smallest:bytes largest:bytes)*
//!             crc:u32
//! ```
//! Each update writes `MANIFEST-<generation>` through a temp file (write, fsync, rename, fsync dir).
//! The newest `KEEP` generations are kept; on open the newest valid one whose files all exist wins.

use std::path::{Path, PathBuf};

use crate::codec::{put_bytes, put_u32, put_u64, put_u8, seal, unseal, Reader};
use crate::config::NUM_LEVELS;
use crate::error::{Error, IoContext, Result};
use crate::fsutil::{remove_if_exists, write_atomic};
use crate::ledger::sst::{sst_path, TableMeta};
use crate::storage::Storage;

const MAGIC: &[u8; 4] = b"LVMF";
const VERSION: u32 = 1;
/// Manifest generations kept on disk (the newest plus fallbacks).
pub(crate) const KEEP: u64 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentEntry {
    pub id: u64,
    pub first_sqn: u64,
    pub last_sqn: u64,
    pub closed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Manifest {
    pub generation: u64,
    pub persisted_sqn: u64,
    pub next_file_id: u64,
    pub segments: Vec<SegmentEntry>,
    /// Tables per level; L0 oldest first.
    pub levels: Vec<Vec<TableMeta>>,
}

pub(crate) fn manifest_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{generation:020}"))
}

impl Manifest {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        put_u32(&mut out, VERSION);
        put_u64(&mut out, self.generation);
        put_u64(&mut out, self.persisted_sqn);
        put_u64(&mut out, self.next_file_id);
        put_u32(&mut out, self.segments.len() as u32);
        for s in &self.segments {
            put_u64(&mut out, s.id);
            put_u64(&mut out, s.first_sqn);
            put_u64(&mut out, s.last_sqn);
            put_u8(&mut out, s.closed as u8);
        }
        let n: usize = self.levels.iter().map(|l| l.len()).sum();
        put_u32(&mut out, n as u32);
        for (level, tables) in self.levels.iter().enumerate() {
            for t in tables {
                put_u8(&mut out, level as u8);
                put_u64(&mut out, t.id);
                put_u64(&mut out, t.size);
                put_u64(&mut out, t.entries);
                put_bytes(&mut out, &t.smallest);
                put_bytes(&mut out, &t.largest);
            }
        }
        seal(&mut out, 0);
        out
    }

    pub(crate) fn decode(buf: &[u8]) -> Result<Manifest> {
        let payload = unseal(buf, "manifest")?;
        let mut r = Reader::new(payload, "manifest");
        if r.raw(4)? != MAGIC {
            return Err(Error::Corruption("manifest: bad magic".into()));
        }
        let v = r.u32()?;
        if v != VERSION {
            return Err(Error::Corruption(format!(
                "manifest: unsupported version {v}"
            )));
        }
        let mut m = Manifest {
            generation: r.u64()?,
            persisted_sqn: r.u64()?,
            next_file_id: r.u64()?,
            segments: Vec::new(),
            levels: vec![Vec::new(); NUM_LEVELS],
        };
        for _ in 0..r.u32()? {
            m.segments.push(SegmentEntry {
                id: r.u64()?,
                first_sqn: r.u64()?,
                last_sqn: r.u64()?,
                closed: r.u8()? != 0,
            });
        }
        for _ in 0..r.u32()? {
            let level = r.u8()? as usize;
            if level >= NUM_LEVELS {
                return Err(Error::Corruption(format!(
                    "manifest: table at level {level}"
                )));
            }
            let t = TableMeta {
                id: r.u64()?,
                size: r.u64()?,
                entries: r.u64()?,
                smallest: r.bytes()?.to_vec(),
                largest: r.bytes()?.to_vec(),
            };
            m.levels[level].push(t);
        }
        r.expect_end()?;
        Ok(m)
    }

    /// Write this manifest durably and drop generations older than `KEEP`.
    pub(crate) fn store(&self, disk: &dyn Storage, dir: &Path) -> Result<()> {
        write_atomic(
            disk,
            dir,
            &manifest_path(dir, self.generation),
            &self.encode(),
        )?;
        if self.generation >= KEEP {
            remove_if_exists(disk, &manifest_path(dir, self.generation - KEEP))?;
        }
        Ok(())
    }
}

/// The lowest `persisted_sqn` among the readable manifests in `dir`: any of them could be the one a
/// later open falls back to, so no journal record above this may be dropped.
pub(crate) fn persisted_floor(disk: &dyn Storage, dir: &Path) -> Result<u64> {
    let mut floor: Option<u64> = None;
    for g in list(disk, dir)? {
        if let Some(m) = disk
            .read(&manifest_path(dir, g))
            .ok()
            .and_then(|b| Manifest::decode(&b).ok())
        {
            floor = Some(floor.map_or(m.persisted_sqn, |f| f.min(m.persisted_sqn)));
        }
    }
    Ok(floor.unwrap_or(0))
}

/// Generations of the manifests present in `dir`, newest first.
pub(crate) fn list(disk: &dyn Storage, dir: &Path) -> Result<Vec<u64>> {
    let mut gens = Vec::new();
    for name in disk
        .list_dir(dir)
        .ctx(|| format!("listing {}", dir.display()))?
    {
        if let Some(g) = name
            .strip_prefix("MANIFEST-")
            .and_then(|g| g.parse::<u64>().ok())
        {
            gens.push(g);
        }
    }
    gens.sort_unstable_by(|a, b| b.cmp(a));
    Ok(gens)
}

/// Load the newest valid manifest whose tables all exist in `ledger_dir`.
/// `Ok(None)` when there is no manifest at all (a new store).
pub(crate) fn load(disk: &dyn Storage, dir: &Path, ledger_dir: &Path) -> Result<Option<Manifest>> {
    let gens = list(disk, dir)?;
    if gens.is_empty() {
        return Ok(None);
    }
    let mut problems = Vec::new();
    for g in gens {
        let path = manifest_path(dir, g);
        let attempt = disk
            .read(&path)
            .ctx(|| format!("reading {}", path.display()))
            .and_then(|b| Manifest::decode(&b))
            .and_then(|m| {
                if m.generation != g {
                    return Err(Error::Corruption(format!(
                        "generation {} in a file named {g}",
                        m.generation
                    )));
                }
                for t in m.levels.iter().flatten() {
                    if !disk.exists(&sst_path(ledger_dir, t.id)) {
                        return Err(Error::Corruption(format!("its table {} is missing", t.id)));
                    }
                }
                Ok(m)
            });
        match attempt {
            Ok(m) => {
                if !problems.is_empty() {
                    log::warn!(
                        "using manifest generation {g}; newer ones are unusable: {}",
                        problems.join("; ")
                    );
                }
                return Ok(Some(m));
            }
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    Err(Error::Corruption(format!(
        "no usable manifest in {}: {}",
        dir.display(),
        problems.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(generation: u64) -> Manifest {
        let mut levels = vec![Vec::new(); NUM_LEVELS];
        levels[0].push(TableMeta {
            id: 7,
            size: 100,
            entries: 3,
            smallest: b"a".to_vec(),
            largest: b"c".to_vec(),
        });
        levels[2].push(TableMeta {
            id: 9,
            size: 200,
            entries: 5,
            smallest: b"d".to_vec(),
            largest: b"z".to_vec(),
        });
        Manifest {
            generation,
            persisted_sqn: 42,
            next_file_id: 10,
            segments: vec![SegmentEntry {
                id: 1,
                first_sqn: 1,
                last_sqn: 40,
                closed: true,
            }],
            levels,
        }
    }

    #[test]
    fn round_trip_and_every_flip_detected() {
        let m = sample(5);
        let b = m.encode();
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x04;
            assert!(Manifest::decode(&c).is_err(), "flip at {i} unnoticed");
        }
    }

    #[test]
    fn falls_back_to_older_generation_and_fails_clearly_when_none_is_valid() {
        let disk = crate::storage::RealStorage;
        let d = tempfile::tempdir().unwrap();
        let ledger = d.path().join("ledger");
        std::fs::create_dir(&ledger).unwrap();
        for id in [7, 9] {
            std::fs::write(sst_path(&ledger, id), b"x").unwrap();
        }
        assert!(load(&disk, d.path(), &ledger).unwrap().is_none());
        sample(1).store(&disk, d.path()).unwrap();
        sample(2).store(&disk, d.path()).unwrap();
        assert_eq!(
            load(&disk, d.path(), &ledger).unwrap().unwrap().generation,
            2
        );
        // Damage the newest: the older one is used.
        let p2 = manifest_path(d.path(), 2);
        let mut b = std::fs::read(&p2).unwrap();
        b[10] ^= 1;
        std::fs::write(&p2, &b).unwrap();
        assert_eq!(
            load(&disk, d.path(), &ledger).unwrap().unwrap().generation,
            1
        );
        // Damage the older one too: a clear error naming both.
        let p1 = manifest_path(d.path(), 1);
        std::fs::write(&p1, b"garbage").unwrap();
        let err = load(&disk, d.path(), &ledger).unwrap_err();
        assert!(err.is_corruption());
        let msg = err.to_string();
        assert!(
            msg.contains("no usable manifest") && msg.contains("MANIFEST-"),
            "{msg}"
        );
        // Generations beyond KEEP are pruned.
        for g in 3..=6 {
            sample(g).store(&disk, d.path()).unwrap();
        }
        assert_eq!(list(&disk, d.path()).unwrap(), vec![6, 5, 4]);
    }
}
