//! Drivers: one scenario runs unchanged against each engine. Peer settings follow
//! REFERENCE.md §5: compression off, same durability (no sync / fdatasync per acknowledged
//! write), the same cache budget ([`CACHE_BYTES`]) and values from the same random buffer.
//!
//! Peers have no secondary indexes of their own. They get the scheme Riak used over eleveldb:
//! each index entry is an extra key `\xff2i/<field>/<term>/<key>` written in the same write
//! batch as the object, and a range query is an iterator over those keys ([`index_key`]). Like
//! levee's index changes in the runner, entries are only added, never removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use levee_proto::v1 as pb;

pub trait Driver: Send + Sync {
    /// Whether the key was found.
    fn get(&self, key: &[u8]) -> Result<bool>;
    /// Metadata-only read where the engine has one (levee); a plain read otherwise.
    fn head(&self, key: &[u8]) -> Result<bool>;
    fn put(&self, key: &[u8], value: &[u8], index: &[(String, i64)]) -> Result<()>;
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Number of results of an integer range query.
    fn index_query(&self, field: &str, lo: i64, hi: i64, max: u32) -> Result<usize>;
    fn close(&self) -> Result<()>;
    /// Explicit maintenance the scenario asks for (`compact_journal_every`,
    /// `rebuild_aae_every`): levee compacts its journal (and says the bytes of the segments
    /// before and after) or rebuilds its AAE tree; engines without it return `None`.
    fn maintain(
        &self,
        _kind: crate::maintenance::Kind,
    ) -> Result<Option<crate::maintenance::Outcome>> {
        Ok(None)
    }
    /// Directory whose size is the data set's disk usage (None for remote nodes).
    fn data_dir(&self) -> Option<PathBuf>;
}

const BUCKET: &[u8] = b"bench";

/// Block/blob cache given to peers that have one: levee's memory budget for the ledger, its
/// memtable and the frozen ones waiting to be flushed (3 × 16 MiB). levee has no block cache and
/// relies on the page cache, as the peers also do for everything beyond this budget.
pub const CACHE_BYTES: usize = 48 << 20;

/// Background writeback sync given to RocksDB (`bytes_per_sync`, `wal_bytes_per_sync`): levee's
/// `journal_bytes_per_sync`, so neither engine leaves more dirty pages to the OS than the other.
pub const BYTES_PER_SYNC: u64 = 8 << 20;

/// Prefix of emulated index keys (primary keys are decimal digits, so they never collide).
const INDEX_PREFIX: &[u8] = b"\xff2i/";

/// An emulated index entry for peers: prefix, field, term (big-endian with the sign bit flipped,
/// so byte order is numeric order), key.
pub fn index_key(field: &str, term: i64, key: &[u8]) -> Vec<u8> {
    let mut k = index_term_prefix(field, term);
    k.extend_from_slice(key);
    k
}

fn index_term_prefix(field: &str, term: i64) -> Vec<u8> {
    let mut k = INDEX_PREFIX.to_vec();
    k.extend_from_slice(field.as_bytes());
    k.push(b'/');
    k.extend_from_slice(&((term as u64) ^ (1 << 63)).to_be_bytes());
    k.push(b'/');
    k
}

/// Key range `[from, to)` covering terms `lo..=hi` of `field`.
pub(crate) fn index_range(field: &str, lo: i64, hi: i64) -> (Vec<u8>, Vec<u8>) {
    let from = index_term_prefix(field, lo);
    let to = match hi.checked_add(1) {
        Some(h) => index_term_prefix(field, h),
        None => {
            let mut t = INDEX_PREFIX.to_vec();
            t.extend_from_slice(field.as_bytes());
            t.push(b'/' + 1);
            t
        }
    };
    (from, to)
}

/// Term of an emulated index key (return_terms).
fn index_term(k: &[u8], field: &str) -> Option<i64> {
    let at = INDEX_PREFIX.len() + field.len() + 1;
    let b: [u8; 8] = k.get(at..at + 8)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

/// Names accepted by [`open`].
pub const NAMES: &[&str] = &[
    "levee",
    "rocksdb",
    "rocksdb-blob",
    "fjall",
    "leveldb",
    "grpc",
];

/// Open the scenario's driver on `dir` with its durability and compression settings (a checked
/// scenario: `Scenario::validate`).
pub fn open(s: &crate::scenario::Scenario, dir: &Path) -> Result<Arc<dyn Driver>> {
    let (sync, compression) = (s.sync, s.compression.as_deref().unwrap_or("none"));
    Ok(match s.driver.as_str() {
        "levee" => Arc::new(Levee::open(
            dir,
            sync,
            compression,
            s.compression_point.as_deref().unwrap_or("on_receipt"),
            s.compaction_mb_per_sec,
        )?),
        "rocksdb" => Arc::new(Rocks::open(dir, sync, false, compression)?),
        "rocksdb-blob" => Arc::new(Rocks::open(dir, sync, true, compression)?),
        "fjall" => Arc::new(Fjall::open(dir, sync)?),
        "leveldb" => Arc::new(crate::leveldb::LevelDb::open(dir, sync)?),
        "grpc" => Arc::new(Grpc::connect(
            s.address
                .as_deref()
                .context("grpc driver needs an address")?,
        )?),
        other => bail!("unknown driver {other}"),
    })
}

pub struct Levee {
    store: levee_store::Store,
    dir: PathBuf,
}

impl Levee {
    fn open(
        dir: &Path,
        sync: bool,
        compression: &str,
        point: &str,
        compaction_mb_per_sec: Option<u64>,
    ) -> Result<Levee> {
        let cfg = levee_store::Config {
            sync_on_write: if sync {
                levee_store::SyncMode::Sync
            } else {
                levee_store::SyncMode::None
            },
            compression_method: compression.parse()?,
            compression_point: point.parse()?,
            compaction_bytes_per_sec: compaction_mb_per_sec.map(|m| m * 1_000_000),
            ..levee_store::Config::default()
        };
        Ok(Levee {
            store: levee_store::Store::open(dir, cfg)?,
            dir: dir.to_path_buf(),
        })
    }
}

fn changes(index: &[(String, i64)]) -> Vec<levee_store::IndexChange> {
    index
        .iter()
        .map(|(f, t)| {
            levee_store::IndexChange::add(f.as_bytes().to_vec(), levee_store::Term::Int(*t))
        })
        .collect()
}

impl Driver for Levee {
    fn get(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.get(BUCKET, key)?.is_some())
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.head(BUCKET, key)?.is_some())
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[(String, i64)]) -> Result<()> {
        self.store.put(BUCKET, key, value, b"", &changes(index))?;
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.store.delete(BUCKET, key, b"", &[])?;
        Ok(())
    }
    fn index_query(&self, field: &str, lo: i64, hi: i64, max: u32) -> Result<usize> {
        let q = levee_store::IndexQuery {
            bucket: BUCKET.to_vec(),
            field: field.as_bytes().to_vec(),
            start: levee_store::Term::Int(lo),
            end: levee_store::Term::Int(hi),
            return_terms: true,
            term_regex: None,
            max_results: Some(max as usize),
            continuation: None,
        };
        Ok(self.store.index_query(&q)?.results.len())
    }
    fn close(&self) -> Result<()> {
        let s = self.store.stats();
        eprintln!(
            "levee: write stalls {:.3} s (max {:.3} s), journal rolls {:.3} s (max {:.3} s), \
             {} fdatasyncs {:.3} s, {} flushes, {} merges",
            s.write_stall_seconds,
            s.max_write_stall_seconds,
            s.journal_roll_seconds,
            s.max_journal_roll_seconds,
            s.journal_fsyncs,
            s.journal_fsync_seconds,
            s.flushes,
            s.merges
        );
        Ok(self.store.close()?)
    }
    fn maintain(
        &self,
        kind: crate::maintenance::Kind,
    ) -> Result<Option<crate::maintenance::Outcome>> {
        use crate::maintenance::{Kind, Outcome};
        Ok(Some(match kind {
            Kind::JournalCompaction => {
                let r = self.store.compact_journal()?;
                Outcome {
                    bytes_before: r.bytes_before,
                    bytes_after: r.bytes_after,
                }
            }
            Kind::AaeRebuild | Kind::AaeRebuildJournalCheck => {
                self.store
                    .rebuild_aae(kind == Kind::AaeRebuildJournalCheck)?;
                Outcome::default()
            }
        }))
    }
    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
}

/// RocksDB (Debian's librocksdb 7.8), plain leveled or with BlobDB value separation.
pub struct Rocks {
    db: rocksdb::DB,
    write: rocksdb::WriteOptions,
    dir: PathBuf,
}

impl Rocks {
    fn open(dir: &Path, sync: bool, blob: bool, compression: &str) -> Result<Rocks> {
        let kind = match compression {
            "lz4" => rocksdb::DBCompressionType::Lz4,
            "zstd" => rocksdb::DBCompressionType::Zstd,
            _ => rocksdb::DBCompressionType::None,
        };
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(kind);
        opts.set_bottommost_compression_type(kind);
        opts.set_bytes_per_sync(BYTES_PER_SYNC);
        opts.set_wal_bytes_per_sync(BYTES_PER_SYNC);
        opts.increase_parallelism(2);
        // levee has no block cache and relies on the page cache; give RocksDB a small one.
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(&rocksdb::Cache::new_lru_cache(CACHE_BYTES)?);
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);
        if blob {
            opts.set_enable_blob_files(true);
            opts.set_min_blob_size(256);
            opts.set_blob_compression_type(kind);
            opts.set_enable_blob_gc(true);
        }
        let db = rocksdb::DB::open(&opts, dir)
            .with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        let mut write = rocksdb::WriteOptions::default();
        write.set_sync(sync);
        Ok(Rocks {
            db,
            write,
            dir: dir.to_path_buf(),
        })
    }
}

impl Driver for Rocks {
    fn get(&self, key: &[u8]) -> Result<bool> {
        Ok(self.db.get_pinned(key)?.is_some())
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        self.get(key)
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[(String, i64)]) -> Result<()> {
        if index.is_empty() {
            return Ok(self.db.put_opt(key, value, &self.write)?);
        }
        let mut batch = rocksdb::WriteBatch::default();
        batch.put(key, value);
        for (field, term) in index {
            batch.put(index_key(field, *term, key), b"");
        }
        Ok(self.db.write_opt(batch, &self.write)?)
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete_opt(key, &self.write)?)
    }
    fn index_query(&self, field: &str, lo: i64, hi: i64, max: u32) -> Result<usize> {
        let (from, to) = index_range(field, lo, hi);
        let mut read = rocksdb::ReadOptions::default();
        read.set_iterate_upper_bound(to);
        let mut n = 0;
        for item in self.db.iterator_opt(
            rocksdb::IteratorMode::From(&from, rocksdb::Direction::Forward),
            read,
        ) {
            let (k, _) = item?;
            index_term(&k, field).context("malformed index key")?;
            n += 1;
            if n >= max as usize {
                break;
            }
        }
        Ok(n)
    }
    fn close(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }
    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
}

/// fjall 3 with key-value separation (values ≥ 1 KiB go to blob files), compression off.
pub struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
    sync: bool,
    dir: PathBuf,
}

impl Fjall {
    fn open(dir: &Path, sync: bool) -> Result<Fjall> {
        let db = fjall::Database::builder(dir)
            .cache_size(CACHE_BYTES as u64)
            .worker_threads(2)
            .open()
            .with_context(|| format!("opening fjall in {}", dir.display()))?;
        let ks = db.keyspace("bench", || {
            fjall::KeyspaceCreateOptions::default()
                .data_block_compression_policy(fjall::config::CompressionPolicy::disabled())
                .index_block_compression_policy(fjall::config::CompressionPolicy::disabled())
                .with_kv_separation(Some(
                    fjall::KvSeparationOptions::default()
                        .compression(fjall::CompressionType::None)
                        .separation_threshold(1024),
                ))
        })?;
        Ok(Fjall {
            db,
            ks,
            sync,
            dir: dir.to_path_buf(),
        })
    }

    fn durable(&self) -> Result<()> {
        if self.sync {
            self.db.persist(fjall::PersistMode::SyncData)?;
        }
        Ok(())
    }
}

impl Driver for Fjall {
    fn get(&self, key: &[u8]) -> Result<bool> {
        Ok(self.ks.get(key)?.is_some())
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        Ok(self.ks.contains_key(key)?)
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[(String, i64)]) -> Result<()> {
        if index.is_empty() {
            self.ks.insert(key, value)?;
        } else {
            let mut batch = self.db.batch();
            batch.insert(&self.ks, key, value);
            for (field, term) in index {
                batch.insert(&self.ks, index_key(field, *term, key), b"");
            }
            batch.commit()?;
        }
        self.durable()
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.ks.remove(key)?;
        self.durable()
    }
    fn index_query(&self, field: &str, lo: i64, hi: i64, max: u32) -> Result<usize> {
        let (from, to) = index_range(field, lo, hi);
        let mut n = 0;
        for guard in self.ks.range(from..to).take(max as usize) {
            let k = guard.key()?;
            index_term(&k, field).context("malformed index key")?;
            n += 1;
        }
        Ok(n)
    }
    fn close(&self) -> Result<()> {
        Ok(self.db.persist(fjall::PersistMode::SyncAll)?)
    }
    fn data_dir(&self) -> Option<PathBuf> {
        Some(self.dir.clone())
    }
}

/// A running levee node — or several members of one cluster — over gRPC.
pub struct Grpc {
    rt: tokio::runtime::Runtime,
    /// A few HTTP/2 connections; each worker thread sticks to one, so one connection's flow
    /// control and framing do not serialise every worker.
    clients: Vec<pb::kv_client::KvClient<tonic::transport::Channel>>,
}

/// Connections the grpc driver opens.
const GRPC_CONNECTIONS: usize = 4;

impl Grpc {
    /// `addrs`: one address, or several separated by commas (members of one cluster: each
    /// gets `GRPC_CONNECTIONS` connections and the workers spread over all of them, as clients
    /// behind a Service would).
    fn connect(addrs: &str) -> Result<Grpc> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let mut clients = Vec::with_capacity(GRPC_CONNECTIONS);
        let every = (0..GRPC_CONNECTIONS).flat_map(|_| addrs.split(',').map(str::trim));
        for addr in every {
            let uri = if addr.contains("://") {
                addr.to_string()
            } else {
                format!("http://{addr}")
            };
            // Windows well above the 64 KiB HTTP/2 default: 16 workers moving 8-16 KB values
            // over one connection would otherwise wait for WINDOW_UPDATEs.
            let endpoint = tonic::transport::Endpoint::from_shared(uri.clone())
                .with_context(|| format!("bad address {uri}"))?
                .tcp_nodelay(true)
                .initial_stream_window_size(Some(1 << 20))
                .initial_connection_window_size(Some(16 << 20));
            let channel = rt
                .block_on(endpoint.connect())
                .with_context(|| format!("connecting to {uri}"))?;
            clients.push(pb::kv_client::KvClient::new(channel).max_decoding_message_size(64 << 20));
        }
        Ok(Grpc { rt, clients })
    }

    /// This worker thread's connection.
    fn client(&self) -> pb::kv_client::KvClient<tonic::transport::Channel> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::thread::current().id().hash(&mut h);
        self.clients[h.finish() as usize % self.clients.len()].clone()
    }

    fn found<T>(r: std::result::Result<tonic::Response<T>, tonic::Status>) -> Result<bool> {
        match r {
            Ok(_) => Ok(true),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(false),
            Err(s) => Err(anyhow!("{:?}", s.code())),
        }
    }
}

impl Driver for Grpc {
    fn get(&self, key: &[u8]) -> Result<bool> {
        let mut c = self.client();
        Self::found(self.rt.block_on(c.get(pb::GetRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            ..Default::default()
        })))
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        let mut c = self.client();
        Self::found(self.rt.block_on(c.head(pb::HeadRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            ..Default::default()
        })))
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[(String, i64)]) -> Result<()> {
        let mut c = self.client();
        let index_changes = index
            .iter()
            .map(|(f, t)| pb::IndexChange {
                op: pb::index_change::Op::Add as i32,
                field: f.as_bytes().to_vec(),
                term: Some(pb::Term {
                    kind: Some(pb::term::Kind::Int(*t)),
                }),
            })
            .collect();
        let req = pb::PutRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            value: value.to_vec(),
            metadata: vec![],
            index_changes,
            ..Default::default()
        };
        self.rt
            .block_on(c.put(req))
            .map_err(|s| anyhow!("{:?}", s.code()))?;
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut c = self.client();
        let req = pb::DeleteRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            ..Default::default()
        };
        self.rt
            .block_on(c.delete(req))
            .map_err(|s| anyhow!("{:?}", s.code()))?;
        Ok(())
    }
    fn index_query(&self, field: &str, lo: i64, hi: i64, max: u32) -> Result<usize> {
        let mut c = self.client();
        let req = pb::IndexQueryRequest {
            bucket: BUCKET.to_vec(),
            field: field.as_bytes().to_vec(),
            start: Some(pb::Term {
                kind: Some(pb::term::Kind::Int(lo)),
            }),
            end: Some(pb::Term {
                kind: Some(pb::term::Kind::Int(hi)),
            }),
            return_terms: true,
            max_results: max,
            page_size: max,
            ..Default::default()
        };
        self.rt.block_on(async move {
            let mut s = c
                .index_query(req)
                .await
                .map_err(|s| anyhow!("{:?}", s.code()))?
                .into_inner();
            let mut n = 0;
            while let Some(p) = s.message().await.map_err(|s| anyhow!("{:?}", s.code()))? {
                n += p.results.len();
            }
            Ok(n)
        })
    }
    fn close(&self) -> Result<()> {
        Ok(())
    }
    fn data_dir(&self) -> Option<PathBuf> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_index_keys_sort_by_term_then_key_and_decode() {
        let terms = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        let keys: Vec<Vec<u8>> = terms
            .iter()
            .map(|t| index_key("f0_int", *t, b"000000000001"))
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "byte order = numeric order"
        );
        for (k, t) in keys.iter().zip(terms) {
            assert_eq!(index_term(k, "f0_int"), Some(t));
        }
        let (from, to) = index_range("f0_int", -1, 1);
        let inside: Vec<i64> = terms
            .iter()
            .copied()
            .filter(|t| {
                let k = index_key("f0_int", *t, b"9");
                k >= from && k < to
            })
            .collect();
        assert_eq!(inside, vec![-1, 0, 1]);
        let (_, to) = index_range("f0_int", 0, i64::MAX);
        assert!(index_key("f0_int", i64::MAX, b"999") < to);
        assert!(
            index_key("f1_int", i64::MIN, b"0") >= to,
            "other fields stay outside"
        );
    }
}
