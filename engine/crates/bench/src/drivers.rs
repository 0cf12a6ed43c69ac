//! Drivers: one scenario runs unchanged against each engine. Peer settings follow
//! REFERENCE.md §5: compression off, same durability (no sync / fdatasync per acknowledged
//! write), the same cache budget ([`CACHE_BYTES`]) and values from the same random buffer.
//!
//! Peers have no secondary indexes of their own: they get the scheme Riak used over eleveldb
//! (emulated.rs). levee keeps an object's index entries in its metadata; both remove the entries
//! an update replaces, as a Riak client's GET-then-PUT does.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use levee_proto::v1 as pb;

use crate::emulated::{Emulated, Kv};
use crate::records::{self, Entry, RangeQuery};

pub trait Driver: Send + Sync {
    /// Whether the key was found.
    fn get(&self, key: &[u8]) -> Result<bool>;
    /// Metadata-only read where the engine has one (levee); a plain read otherwise.
    fn head(&self, key: &[u8]) -> Result<bool>;
    /// Write a new object with these index entries, without reading first.
    fn put(&self, key: &[u8], value: &[u8], index: &[Entry]) -> Result<()>;
    /// A GET, then a PUT of `value`: with `Some(entries)` the object's index entries become
    /// exactly these (those it had and they lack are removed); with `None` it keeps its own.
    fn update(&self, key: &[u8], value: &[u8], index: Option<&[Entry]>) -> Result<()>;
    /// Delete the object and its index entries.
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Number of results of a range query with return_terms.
    fn index_query(&self, q: &RangeQuery) -> Result<usize>;
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
/// scenario: `Scenario::validate`). When the scenario indexes objects, peers store each value
/// with a header of its entries (emulated.rs).
pub fn open(s: &crate::scenario::Scenario, dir: &Path) -> Result<Arc<dyn Driver>> {
    let (sync, compression) = (s.sync, s.compression.as_deref().unwrap_or("none"));
    let framed = s.indexed();
    Ok(match s.driver.as_str() {
        "levee" => Arc::new(Levee::open(dir, s)?),
        "rocksdb" => Arc::new(Emulated::new(
            Rocks::open(dir, sync, false, compression)?,
            framed,
        )),
        "rocksdb-blob" => Arc::new(Emulated::new(
            Rocks::open(dir, sync, true, compression)?,
            framed,
        )),
        "fjall" => Arc::new(Emulated::new(Fjall::open(dir, sync)?, framed)),
        "leveldb" => Arc::new(Emulated::new(
            crate::leveldb::LevelDb::open(dir, sync)?,
            framed,
        )),
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
    /// Objects carry index entries (the scenario indexes): a delete reads them to remove them.
    indexed: bool,
}

impl Levee {
    fn open(dir: &Path, s: &crate::scenario::Scenario) -> Result<Levee> {
        let defaults = levee_store::Config::default();
        let cfg = levee_store::Config {
            sync_on_write: if s.sync {
                levee_store::SyncMode::Sync
            } else {
                levee_store::SyncMode::None
            },
            compression_method: s.compression.as_deref().unwrap_or("none").parse()?,
            compression_point: s
                .compression_point
                .as_deref()
                .unwrap_or("on_receipt")
                .parse()?,
            compaction_bytes_per_sec: s.compaction_mb_per_sec.map(|m| m * 1_000_000),
            journal_segment_bytes: s
                .journal_segment_mb
                .map_or(defaults.journal_segment_bytes, |m| m << 20),
            journal_spare_segments: s
                .journal_spare_segments
                .unwrap_or(defaults.journal_spare_segments),
            compaction_busy_percent: s
                .compaction_busy_percent
                .unwrap_or(defaults.compaction_busy_percent),
            aae_rebuild_busy_percent: s
                .aae_rebuild_busy_percent
                .unwrap_or(defaults.aae_rebuild_busy_percent),
            compaction_nice: s.compaction_nice.unwrap_or(defaults.compaction_nice),
            ..defaults
        };
        Ok(Levee {
            store: levee_store::Store::open(dir, cfg)?,
            dir: dir.to_path_buf(),
            indexed: s.indexed(),
        })
    }
}

fn changes(removed: &[Entry], added: &[Entry]) -> Vec<levee_store::IndexChange> {
    let term = |e: &Entry| levee_store::Term::Bin(e.term.clone());
    removed
        .iter()
        .map(|e| levee_store::IndexChange::remove(e.field.as_bytes().to_vec(), term(e)))
        .chain(
            added
                .iter()
                .map(|e| levee_store::IndexChange::add(e.field.as_bytes().to_vec(), term(e))),
        )
        .collect()
}

impl Driver for Levee {
    fn get(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.get(BUCKET, key)?.is_some())
    }
    fn head(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.head(BUCKET, key)?.is_some())
    }
    fn put(&self, key: &[u8], value: &[u8], index: &[Entry]) -> Result<()> {
        records::validate(index)?;
        let metadata = records::encode(index);
        self.store
            .put(BUCKET, key, value, &metadata, &changes(&[], index))?;
        Ok(())
    }
    fn update(&self, key: &[u8], value: &[u8], index: Option<&[Entry]>) -> Result<()> {
        let old = self
            .store
            .get(BUCKET, key)?
            .map(|o| o.metadata)
            .unwrap_or_default();
        match index {
            // The object keeps its metadata, and with it its index entries.
            None => self.store.put(BUCKET, key, value, &old, &[])?,
            Some(new) => {
                records::validate(new)?;
                let (removed, added) = records::diff(&records::decode(&old)?, new);
                self.store.put(
                    BUCKET,
                    key,
                    value,
                    &records::encode(new),
                    &changes(&removed, &added),
                )?
            }
        };
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        // Without indexes the delete is blind, as the peers' is.
        let old = match self
            .indexed
            .then(|| self.store.head(BUCKET, key))
            .transpose()?
        {
            Some(Some(h)) => records::decode(&h.metadata)?,
            _ => Vec::new(),
        };
        self.store.delete(BUCKET, key, b"", &changes(&old, &[]))?;
        Ok(())
    }
    fn index_query(&self, q: &RangeQuery) -> Result<usize> {
        let q = levee_store::IndexQuery {
            bucket: BUCKET.to_vec(),
            field: q.field.as_bytes().to_vec(),
            start: levee_store::Term::Bin(q.lo.clone()),
            end: levee_store::Term::Bin(q.hi.clone()),
            return_terms: true,
            term_regex: q.regex.as_ref().map(|r| r.as_str().to_string()),
            max_results: Some(q.max_results as usize),
            continuation: None,
        };
        Ok(self.store.index_query(&q)?.results.len())
    }
    fn close(&self) -> Result<()> {
        let s = self.store.stats();
        // Bucket bounds, not exact quantiles (the engine keeps a histogram).
        let bound =
            |q: f64| match levee_store::journal_fsync_quantile_bound(&s.journal_fsync_buckets, q) {
                None => "-".to_string(),
                Some(b) if b.is_finite() => format!("≤ {b} s"),
                Some(_) => format!("> {} s", levee_store::JOURNAL_FSYNC_BUCKETS.last().unwrap()),
            };
        eprintln!(
            "levee: write stalls {:.3} s (max {:.3} s), journal rolls {:.3} s (max {:.3} s), \
             {} fdatasyncs {:.3} s (p50 {}, p99 {}, max {:.3} s), {} flushes, {} merges",
            s.write_stall_seconds,
            s.max_write_stall_seconds,
            s.journal_roll_seconds,
            s.max_journal_roll_seconds,
            s.journal_fsyncs,
            s.journal_fsync_seconds,
            bound(0.5),
            bound(0.99),
            s.max_journal_fsync_seconds,
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

impl Kv for Rocks {
    fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.db.get_pinned(key)?.is_some())
    }
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.db.get(key)?)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put_opt(key, value, &self.write)?)
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete_opt(key, &self.write)?)
    }
    fn write(&self, puts: &[(Vec<u8>, Vec<u8>)], deletes: &[Vec<u8>]) -> Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for (k, v) in puts {
            batch.put(k, v);
        }
        for k in deletes {
            batch.delete(k);
        }
        Ok(self.db.write_opt(batch, &self.write)?)
    }
    fn scan(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()> {
        let mut read = rocksdb::ReadOptions::default();
        read.set_iterate_upper_bound(to.to_vec());
        for item in self.db.iterator_opt(
            rocksdb::IteratorMode::From(from, rocksdb::Direction::Forward),
            read,
        ) {
            let (k, _) = item?;
            if !f(&k) {
                break;
            }
        }
        Ok(())
    }
    fn close(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }
    fn data_dir(&self) -> PathBuf {
        self.dir.clone()
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

impl Kv for Fjall {
    fn exists(&self, key: &[u8]) -> Result<bool> {
        Ok(self.ks.get(key)?.is_some())
    }
    fn contains(&self, key: &[u8]) -> Result<bool> {
        Ok(self.ks.contains_key(key)?)
    }
    fn read(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.ks.get(key)?.map(|v| v.to_vec()))
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.ks.insert(key, value)?;
        self.durable()
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.ks.remove(key)?;
        self.durable()
    }
    fn write(&self, puts: &[(Vec<u8>, Vec<u8>)], deletes: &[Vec<u8>]) -> Result<()> {
        let mut batch = self.db.batch();
        for (k, v) in puts {
            batch.insert(&self.ks, k.as_slice(), v.as_slice());
        }
        for k in deletes {
            batch.remove(&self.ks, k.as_slice());
        }
        batch.commit()?;
        self.durable()
    }
    fn scan(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8]) -> bool) -> Result<()> {
        for guard in self.ks.range(from.to_vec()..to.to_vec()) {
            if !f(&guard.key()?) {
                break;
            }
        }
        Ok(())
    }
    fn close(&self) -> Result<()> {
        Ok(self.db.persist(fjall::PersistMode::SyncAll)?)
    }
    fn data_dir(&self) -> PathBuf {
        self.dir.clone()
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

    /// A PUT carrying the metadata, the index changes and the causal context of the GET it
    /// follows (empty for a blind write).
    fn write(
        &self,
        key: &[u8],
        value: &[u8],
        metadata: Vec<u8>,
        removed: &[Entry],
        added: &[Entry],
        context: Vec<u8>,
    ) -> Result<()> {
        let change = |op: pb::index_change::Op, e: &Entry| pb::IndexChange {
            op: op as i32,
            field: e.field.as_bytes().to_vec(),
            term: Some(pb::Term {
                kind: Some(pb::term::Kind::Bin(e.term.clone())),
            }),
        };
        let index_changes = removed
            .iter()
            .map(|e| change(pb::index_change::Op::Remove, e))
            .chain(added.iter().map(|e| change(pb::index_change::Op::Add, e)))
            .collect();
        let req = pb::PutRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            value: value.to_vec(),
            metadata,
            index_changes,
            context,
            ..Default::default()
        };
        let mut c = self.client();
        self.rt
            .block_on(c.put(req))
            .map_err(|s| anyhow!("{:?}", s.code()))?;
        Ok(())
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
    fn put(&self, key: &[u8], value: &[u8], index: &[Entry]) -> Result<()> {
        records::validate(index)?;
        self.write(key, value, records::encode(index), &[], index, Vec::new())
    }
    fn update(&self, key: &[u8], value: &[u8], index: Option<&[Entry]>) -> Result<()> {
        let mut c = self.client();
        let (metadata, context) = match self.rt.block_on(c.get(pb::GetRequest {
            bucket: BUCKET.to_vec(),
            key: key.to_vec(),
            ..Default::default()
        })) {
            Ok(r) => {
                let r = r.into_inner();
                (r.metadata, r.context)
            }
            Err(s) if s.code() == tonic::Code::NotFound => (Vec::new(), Vec::new()),
            Err(s) => return Err(anyhow!("{:?}", s.code())),
        };
        match index {
            None => self.write(key, value, metadata, &[], &[], context),
            Some(new) => {
                records::validate(new)?;
                let (removed, added) = records::diff(&records::decode(&metadata)?, new);
                self.write(key, value, records::encode(new), &removed, &added, context)
            }
        }
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
    fn index_query(&self, q: &RangeQuery) -> Result<usize> {
        let mut c = self.client();
        let bin = |t: &[u8]| pb::Term {
            kind: Some(pb::term::Kind::Bin(t.to_vec())),
        };
        let req = pb::IndexQueryRequest {
            bucket: BUCKET.to_vec(),
            field: q.field.as_bytes().to_vec(),
            start: Some(bin(&q.lo)),
            end: Some(bin(&q.hi)),
            return_terms: true,
            term_regex: q
                .regex
                .as_ref()
                .map(|r| r.as_str().to_string())
                .unwrap_or_default(),
            max_results: q.max_results,
            page_size: q.max_results,
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
