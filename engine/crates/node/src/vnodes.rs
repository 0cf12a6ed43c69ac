//! The vnodes hosted by this node: one `levee_store::Store` per partition, opened in parallel
//! under `<data_dir>/p<partition>`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use levee_store::Store;

use crate::config::NodeConfig;
use crate::membership::Membership;

pub struct Vnodes {
    pub ring_size: u32,
    pub stores: Vec<Arc<Store>>,
    pub data_dir: PathBuf,
    /// The member list and claim this node runs with.
    pub membership: Arc<Membership>,
    /// How many threads opened the stores (`open_threads`), logged at startup.
    pub open_threads: usize,
}

/// At most this many threads open vnodes, however many cores the machine has.
const MAX_OPEN_THREADS: usize = 8;

/// How many threads open a ring of `ring_size` vnodes on a machine with `cores` available (`None`
/// when unknown, taken as 2): one per core, at most `MAX_OPEN_THREADS`, never more than there are
/// partitions, at least one. Each thread takes the next partition until none is left, so this is
/// also the most stores opened at once, whatever the ring size.
fn open_threads(ring_size: u32, cores: Option<usize>) -> usize {
    cores
        .unwrap_or(2)
        .min(MAX_OPEN_THREADS)
        .min(ring_size as usize)
        .max(1)
}

/// Record the ring size at first start, refuse a different one later (levee_cluster::ring::ring_file).
/// A directory written before the size was recorded holds `p0000`..`p<ring_size-1>`: its size is
/// taken from the highest partition directory.
fn check_ring_size(data_dir: &std::path::Path, ring_size: u32) -> Result<()> {
    use levee_cluster::ring::ring_file::{ensure_ring_size, read_ring_size};
    let configured = levee_cluster::RingSize::new(ring_size)?;
    if read_ring_size(data_dir)?.is_none() {
        let highest = std::fs::read_dir(data_dir)
            .with_context(|| format!("listing {}", data_dir.display()))?
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix('p')?
                    .parse::<u32>()
                    .ok()
            })
            .max();
        if let Some(h) = highest.filter(|&h| h + 1 != ring_size) {
            anyhow::bail!(
                "data directory {} holds partitions p0000..p{h:04} (ring_size {}) and cannot be opened with ring_size {ring_size}: every key would be looked up in the wrong partition",
                data_dir.display(),
                h + 1
            );
        }
    }
    if ensure_ring_size(data_dir, configured)? == levee_cluster::RingSizeCheck::Recorded {
        log::info!("recorded ring_size {ring_size} in {}", data_dir.display());
    }
    Ok(())
}

/// The file that says how the stores hold objects.
const FORMAT_FILE: &str = "FORMAT";
/// Replica objects: sibling set in the ledger metadata, contents in the journal value
/// (`levee_cluster::object`).
const OBJECT_FORMAT: &str = "replica-objects 1";

/// Record that the stores hold replica objects, or refuse stores written by a levee from before
/// replication (raw values), which this node would misread.
fn check_object_format<'a>(
    data_dir: &std::path::Path,
    mut stores: impl Iterator<Item = &'a Arc<Store>>,
) -> Result<()> {
    let path = data_dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim() == OBJECT_FORMAT => return Ok(()),
        Ok(text) => anyhow::bail!(
            "{} says the stores hold {:?}; this levee reads {OBJECT_FORMAT:?}",
            path.display(),
            text.trim()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    if stores.any(|s| s.stats().last_sqn > 0) {
        anyhow::bail!(
            "data directory {} holds values written by a levee from before replication (no {FORMAT_FILE} file): \
             this version stores replica objects and would misread them. Read them out with the \
             levee that wrote them and write them into a new data directory",
            data_dir.display()
        );
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{OBJECT_FORMAT}\n"))
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|_| std::fs::rename(&tmp, &path))
        .and_then(|_| std::fs::File::open(data_dir)?.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

impl Vnodes {
    /// Open every partition's store. Requests are not yet routed by the claim (the coordinator
    /// comes next), so this node still serves the whole ring; `membership` holds the claim.
    pub fn open(cfg: &NodeConfig, listening: std::net::SocketAddr) -> Result<Vnodes> {
        let store_cfg = cfg.store_config()?;
        std::fs::create_dir_all(&cfg.data_dir)
            .with_context(|| format!("creating {}", cfg.data_dir.display()))?;
        check_ring_size(&cfg.data_dir, cfg.cluster.ring_size)?;
        let membership = Arc::new(Membership::load(cfg, listening)?);
        let ring_size = cfg.cluster.ring_size;
        let threads = open_threads(
            ring_size,
            std::thread::available_parallelism().ok().map(|n| n.get()),
        );
        let next = std::sync::atomic::AtomicU32::new(0);
        type Opened = Result<(u32, Arc<Store>)>;
        let results: Vec<Vec<Opened>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let p = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if p >= ring_size {
                                return out;
                            }
                            let dir = cfg.data_dir.join(format!("p{p:04}"));
                            out.push(
                                Store::open(&dir, store_cfg.clone())
                                    .map(|st| (p, Arc::new(st)))
                                    .with_context(|| {
                                        format!("opening vnode {p} in {}", dir.display())
                                    }),
                            );
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|h| h.join().expect("vnode open panicked"))
                .collect()
        });
        // The threads that actually ran, for the startup log (a node test holds it to the plan).
        let spawned = results.len();
        let mut opened: Vec<(u32, Arc<Store>)> = Vec::new();
        for r in results.into_iter().flatten() {
            opened.push(r?);
        }
        opened.sort_by_key(|(p, _)| *p);
        check_object_format(&cfg.data_dir, opened.iter().map(|(_, s)| s))?;
        Ok(Vnodes {
            ring_size: cfg.cluster.ring_size,
            stores: opened.into_iter().map(|(_, s)| s).collect(),
            data_dir: cfg.data_dir.clone(),
            membership,
            open_threads: spawned,
        })
    }

    /// Flush and close every store.
    pub fn close(&self) -> Result<()> {
        let mut first_err = None;
        for (p, s) in self.stores.iter().enumerate() {
            if let Err(e) = s.close() {
                log::error!("closing vnode {p}: {e}");
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnodes_open_on_at_most_one_thread_per_core_and_eight_in_all() {
        // (ring size, cores, threads): the old plan started ring_size / cores threads per batch,
        // 2,048 for a 4,096 ring on 2 cores.
        let cases = [
            (4096, Some(2), 2),
            (4096, Some(1), 1),
            (4096, Some(64), MAX_OPEN_THREADS),
            (4096, None, 2),
            (64, Some(2), 2),
            (64, Some(8), 8),
            (64, Some(16), MAX_OPEN_THREADS),
            (8, Some(2), 2),
            (2, Some(8), 2),
            (1, Some(8), 1),
            (1, None, 1),
        ];
        for (ring, cores, want) in cases {
            assert_eq!(
                open_threads(ring, cores),
                want,
                "ring {ring}, cores {cores:?}"
            );
        }
    }
}
