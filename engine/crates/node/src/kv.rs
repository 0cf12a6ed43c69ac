//! The `KV` gRPC service. PUT, GET, HEAD and DELETE go to the coordinator (`coordinator/`:
//! the key's replicas across the cluster, quorums, version vectors, read repair). IndexQuery and
//! ListKeys read this node's vnodes — each engine call on the blocking pool after its vnode
//! admitted it (`admission.rs`: bounded concurrency and queue, fail fast with UNAVAILABLE) — and
//! produce their pages one engine call at a time from an async task, so a slow reader holds no
//! blocking thread and no vnode slot. (Coverage across members is not wired yet: in a cluster of
//! several members they answer for this node's vnodes only; docs/cluster.md.)

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_proto::v1 as pb;
use levee_store::{IndexChange, IndexQuery, Store, Term};
use tokio_stream::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use levee_cluster::{
    decode_context, decode_siblings, encode_context, Clock, Content, QuorumValue, ReadOptions,
    SiblingKind, SiblingSet, WriteOptions,
};

use crate::admission::{self, Admission, Rejection};
use crate::coordinator::get::{Read, ReadOutcome};
use crate::coordinator::put::Write;
use crate::coordinator::Coordinator;
use crate::errors::to_status;
use crate::metrics::Metrics;
use crate::vnodes::Vnodes;

pub struct KvService {
    pub coordinator: Arc<Coordinator>,
    pub vnodes: Arc<Vnodes>,
    pub metrics: Arc<Metrics>,
    /// Per-vnode bounded admission of engine calls (overload protection).
    pub admission: Arc<Admission>,
    /// How long a request without a client deadline may wait to start.
    pub default_deadline: Duration,
}

pub fn term_from(t: Option<pb::Term>, what: &str) -> Result<Term, Status> {
    match t.and_then(|t| t.kind) {
        Some(pb::term::Kind::Int(i)) => Ok(Term::Int(i)),
        Some(pb::term::Kind::Bin(b)) => Ok(Term::Bin(b)),
        None => Err(Status::invalid_argument(format!("{what} term is missing"))),
    }
}

pub fn term_to(t: Term) -> pb::Term {
    pb::Term {
        kind: Some(match t {
            Term::Int(i) => pb::term::Kind::Int(i),
            Term::Bin(b) => pb::term::Kind::Bin(b),
        }),
    }
}

pub(crate) fn changes_from(list: Vec<pb::IndexChange>) -> Result<Vec<IndexChange>, Status> {
    list.into_iter()
        .map(|c| {
            let term = term_from(c.term, "index change")?;
            match pb::index_change::Op::try_from(c.op) {
                Ok(pb::index_change::Op::Add) => Ok(IndexChange::add(c.field, term)),
                Ok(pb::index_change::Op::Remove) => Ok(IndexChange::remove(c.field, term)),
                _ => Err(Status::invalid_argument(
                    "index change op must be ADD or REMOVE",
                )),
            }
        })
        .collect()
}

/// A request's quorum option: `None` takes the bucket type's.
fn quorum_of(q: Option<pb::Quorum>, what: &str) -> Result<Option<QuorumValue>, Status> {
    use pb::quorum::{Name, Value};
    Ok(match q.and_then(|q| q.value) {
        None => None,
        Some(Value::Count(n)) => Some(QuorumValue::Count(n)),
        Some(Value::Name(n)) => Some(match Name::try_from(n) {
            Ok(Name::One) => QuorumValue::One,
            Ok(Name::Quorum) => QuorumValue::Quorum,
            Ok(Name::All) => QuorumValue::All,
            _ => {
                return Err(Status::invalid_argument(format!(
                    "{what}: quorum name {n} is not ONE, QUORUM or ALL"
                )))
            }
        }),
    })
}

fn write_options(
    w: Option<pb::Quorum>,
    pw: Option<pb::Quorum>,
    dw: Option<pb::Quorum>,
) -> Result<WriteOptions, Status> {
    Ok(WriteOptions {
        w: quorum_of(w, "w")?,
        pw: quorum_of(pw, "pw")?,
        dw: quorum_of(dw, "dw")?,
    })
}

fn context_of(bytes: &[u8]) -> Result<Clock, Status> {
    if bytes.is_empty() {
        return Ok(Clock::new());
    }
    decode_context(bytes).map_err(|e| {
        Status::invalid_argument(format!(
            "context: {e} (pass back the context bytes of a GetResponse or PutResponse unchanged)"
        ))
    })
}

/// The live siblings of an object (or of a merged set with its fetched contents), for a reply.
fn siblings_of(set: &SiblingSet, contents: &[Content]) -> Vec<pb::Sibling> {
    set.live()
        .zip(contents)
        .map(|(s, c)| pb::Sibling {
            value: c.value.clone(),
            metadata: c.metadata.clone(),
            timestamp_us: s.meta.timestamp_us,
        })
        .collect()
}

/// The label of a coordinated request's outcome in `levee_requests_total`.
fn result_label(r: &Result<(), &Status>) -> &'static str {
    match r {
        Ok(()) => "ok",
        Err(s) if s.code() == tonic::Code::NotFound => "not_found",
        Err(s) if s.metadata().get("retry-after-ms").is_some() => "overloaded",
        Err(s) if s.message().starts_with("quorum not met") => "quorum_failed",
        Err(_) => "error",
    }
}

/// The client's deadline, from its `grpc-timeout` header.
fn client_timeout(meta: &MetadataMap) -> Option<Duration> {
    meta.get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(admission::parse_grpc_timeout)
}

/// When each engine call of a request (each page of a stream) must start by.
#[derive(Clone, Copy)]
struct Deadlines {
    /// The client's, less a margin (`admission::start_deadline`); the same for every page.
    client: Option<Instant>,
    default: Duration,
}

impl Deadlines {
    fn next(&self) -> Instant {
        self.client.unwrap_or_else(|| Instant::now() + self.default)
    }
}

/// Runs engine calls of one request (or stream) on the blocking pool, each holding a slot of its
/// vnode for exactly as long as it runs.
#[derive(Clone)]
struct Engine {
    vnodes: Arc<Vnodes>,
    admission: Arc<Admission>,
    deadlines: Deadlines,
}

/// Why an engine call did not return a value.
enum CallError {
    Overloaded(Rejection),
    Engine(levee_store::Error),
    Panicked(String),
}

impl CallError {
    fn label(&self) -> &'static str {
        match self {
            CallError::Overloaded(_) => "overloaded",
            CallError::Engine(_) | CallError::Panicked(_) => "error",
        }
    }

    fn into_status(self) -> Status {
        match self {
            CallError::Overloaded(r) => r.to_status(),
            CallError::Engine(e) => to_status(e),
            CallError::Panicked(e) => Status::internal(format!("handler failed: {e}")),
        }
    }
}

impl Engine {
    /// Wait for a slot on `vnode` (bounded, see `admission`), then run `f` on its store on the
    /// blocking pool. The slot is given back when `f` has returned.
    async fn call<T: Send + 'static>(
        &self,
        vnode: usize,
        f: impl FnOnce(&Arc<Store>) -> Result<T, levee_store::Error> + Send + 'static,
    ) -> Result<T, CallError> {
        let permit = self
            .admission
            .acquire(vnode, self.deadlines.next())
            .await
            .map_err(CallError::Overloaded)?;
        let store = self.vnodes.stores[vnode].clone();
        // The permit travels with the call's output, so the slot is freed only once the call has
        // finished — by this task, after the blocking thread went back to the pool (the next
        // call then reuses that thread instead of making the pool start another), or by the
        // pool when this request was cancelled meanwhile (the output is dropped there).
        let (res, permit) = tokio::task::spawn_blocking(move || (f(&store), permit))
            .await
            .map_err(|e| CallError::Panicked(e.to_string()))?;
        drop(permit);
        res.map_err(CallError::Engine)
    }
}

#[allow(clippy::too_many_arguments)]
fn read_of(
    bucket: Vec<u8>,
    key: Vec<u8>,
    bucket_type: String,
    r: Option<pb::Quorum>,
    pr: Option<pb::Quorum>,
    notfound_ok: Option<bool>,
    basic_quorum: Option<bool>,
    values: bool,
) -> Result<Read, Status> {
    Ok(Read {
        bucket,
        key,
        bucket_type,
        options: ReadOptions {
            r: quorum_of(r, "r")?,
            pr: quorum_of(pr, "pr")?,
            notfound_ok,
            basic_quorum,
        },
        values,
    })
}

/// Index in `set.live()` of the latest sibling (last-write-wins order).
fn latest_live(set: &SiblingSet) -> Option<usize> {
    set.live()
        .enumerate()
        .max_by(|a, b| a.1.meta.lww_cmp(&b.1.meta))
        .map(|(i, _)| i)
}

/// NOT_FOUND, with a deleted key's context in the `levee-context-bin` trailer.
fn not_found(context: Option<Clock>) -> Status {
    let mut s = Status::not_found("no object under that bucket and key");
    if let Some(c) = context {
        s.metadata_mut().insert_bin(
            "levee-context-bin",
            tonic::metadata::MetadataValue::from_bytes(&encode_context(&c)),
        );
    }
    s
}

impl KvService {
    /// When a coordinated request must be answered by: the client's deadline (less a margin),
    /// else the node's default.
    fn deadline(&self, meta: &MetadataMap) -> Instant {
        admission::start_deadline(Instant::now(), client_timeout(meta), self.default_deadline)
    }

    /// Count and time a coordinated request.
    fn count(&self, op: &'static str, started: Instant, res: Result<(), &Status>) {
        let result = result_label(&res);
        if result != "overloaded" {
            self.metrics
                .duration
                .with_label_values(&[op])
                .observe(started.elapsed().as_secs_f64());
        }
        self.metrics.requests.with_label_values(&[op, result]).inc();
    }

    fn engine(&self, meta: &MetadataMap) -> Engine {
        let client = client_timeout(meta)
            .map(|t| admission::start_deadline(Instant::now(), Some(t), self.default_deadline));
        Engine {
            vnodes: self.vnodes.clone(),
            admission: self.admission.clone(),
            deadlines: Deadlines {
                client,
                default: self.default_deadline,
            },
        }
    }

    /// Count a finished stream.
    fn stream_done(metrics: &Metrics, op: &str, started: Instant, result: &str) {
        if result != "overloaded" {
            metrics
                .duration
                .with_label_values(&[op])
                .observe(started.elapsed().as_secs_f64());
        }
        metrics.requests.with_label_values(&[op, result]).inc();
    }
}

type PageStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Pages a stream may have produced ahead of a client that has not read them yet. The producer
/// is an async task: while the channel is full it waits without a blocking thread or a slot.
const PAGES_AHEAD: usize = 2;

/// A vnode's key fold, kept between the pages of a ListKeys stream.
type KeyFold = (
    levee_store::Snapshot,
    Box<dyn Iterator<Item = Result<Vec<u8>, levee_store::Error>> + Send>,
);

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let (meta, _, r) = req.into_parts();
        let started = Instant::now();
        let res = async {
            let w = Write {
                context: context_of(&r.context)?,
                bucket: r.bucket,
                key: r.key,
                content: Some(Content {
                    metadata: r.metadata,
                    value: r.value,
                }),
                index_changes: r.index_changes,
                bucket_type: r.bucket_type,
                options: write_options(r.w, r.pw, r.dw)?,
            };
            let written = self.coordinator.put(w, self.deadline(&meta)).await?;
            let o = &written.stored.object;
            Ok(pb::PutResponse {
                sqn: written.stored.sqn,
                context: written.context(),
                siblings: if r.return_body {
                    siblings_of(&o.siblings, &o.contents)
                } else {
                    Vec::new()
                },
            })
        }
        .await;
        self.count("put", started, res.as_ref().map(|_| ()));
        res.map(Response::new)
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let (meta, _, r) = req.into_parts();
        let started = Instant::now();
        let res = async {
            let read = read_of(
                r.bucket,
                r.key,
                r.bucket_type,
                r.r,
                r.pr,
                r.notfound_ok,
                r.basic_quorum,
                true,
            )?;
            match self.coordinator.get(read, self.deadline(&meta)).await? {
                ReadOutcome::Found {
                    merged,
                    contents,
                    sqn,
                } => {
                    let siblings = siblings_of(&merged, &contents);
                    let latest = latest_live(&merged);
                    let (value, metadata) = latest
                        .and_then(|i| contents.get(i))
                        .map(|c| (c.value.clone(), c.metadata.clone()))
                        .unwrap_or_default();
                    Ok(pb::GetResponse {
                        sqn,
                        value,
                        metadata,
                        context: encode_context(&merged.context()),
                        siblings,
                    })
                }
                ReadOutcome::NotFound { context } => Err(not_found(context)),
            }
        }
        .await;
        self.count("get", started, res.as_ref().map(|_| ()));
        res.map(Response::new)
    }

    async fn head(
        &self,
        req: Request<pb::HeadRequest>,
    ) -> Result<Response<pb::HeadResponse>, Status> {
        let (meta, _, r) = req.into_parts();
        let started = Instant::now();
        let res = async {
            let read = read_of(
                r.bucket,
                r.key,
                r.bucket_type,
                r.r,
                r.pr,
                r.notfound_ok,
                r.basic_quorum,
                false,
            )?;
            match self.coordinator.get(read, self.deadline(&meta)).await? {
                ReadOutcome::Found { merged, sqn, .. } => {
                    let live: Vec<_> = merged.live().collect();
                    let latest = latest_live(&merged).map(|i| live[i]);
                    let (value_size, value_hash) = match latest.map(|s| s.meta.kind) {
                        Some(SiblingKind::Value { hash, size }) => (size as u32, hash),
                        _ => (0, 0),
                    };
                    Ok(pb::HeadResponse {
                        sqn,
                        value_size,
                        value_hash,
                        metadata: Vec::new(),
                        context: encode_context(&merged.context()),
                        sibling_count: live.len() as u32,
                        timestamp_us: latest.map_or(0, |s| s.meta.timestamp_us),
                    })
                }
                ReadOutcome::NotFound { context } => Err(not_found(context)),
            }
        }
        .await;
        self.count("head", started, res.as_ref().map(|_| ()));
        res.map(Response::new)
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let (meta, _, r) = req.into_parts();
        let started = Instant::now();
        let res = async {
            let w = Write {
                context: context_of(&r.context)?,
                bucket: r.bucket,
                key: r.key,
                content: None,
                index_changes: r.index_changes,
                bucket_type: r.bucket_type,
                options: write_options(r.w, r.pw, r.dw)?,
            };
            let written = self.coordinator.put(w, self.deadline(&meta)).await?;
            Ok(pb::DeleteResponse {
                sqn: written.stored.sqn,
                context: written.context(),
            })
        }
        .await;
        self.count("delete", started, res.as_ref().map(|_| ()));
        res.map(Response::new)
    }

    type IndexQueryStream = PageStream<pb::IndexQueryResponse>;

    /// A coverage query: every vnode is asked for its next page from one global (term, key)
    /// position; the pages are merged in (term, key) order. Each vnode's page is one engine call
    /// (one slot, one blocking-pool task); between pages nothing is held.
    async fn index_query(
        &self,
        req: Request<pb::IndexQueryRequest>,
    ) -> Result<Response<Self::IndexQueryStream>, Status> {
        let (meta, _, r) = req.into_parts();
        let start = term_from(r.start, "start")?;
        let end = term_from(r.end, "end")?;
        let page_size = if r.page_size == 0 {
            1000
        } else {
            r.page_size as usize
        };
        let limit = if r.max_results == 0 {
            usize::MAX
        } else {
            r.max_results as usize
        };
        let mut after: Option<(Term, Vec<u8>)> = None;
        if !r.continuation.is_empty() {
            let pos: (pb::Term, Vec<u8>) = decode_position(&r.continuation).ok_or_else(|| {
                Status::invalid_argument("continuation token does not belong to this query")
            })?;
            after = Some((term_from(Some(pos.0), "continuation")?, pos.1));
        }
        let base = IndexQuery {
            bucket: r.bucket,
            field: r.field,
            start,
            end,
            return_terms: true,
            term_regex: (!r.term_regex.is_empty()).then_some(r.term_regex),
            max_results: Some(page_size),
            continuation: None,
        };
        let engine = self.engine(&meta);
        let metrics = self.metrics.clone();
        let started = Instant::now();
        // Validate once up front so a bad query fails the call instead of the stream.
        {
            let q = IndexQuery {
                max_results: Some(1),
                ..base.clone()
            };
            if let Err(e) = engine.call(0, move |s| s.index_query(&q)).await {
                if let CallError::Overloaded(_) = e {
                    Self::stream_done(&metrics, "index_query", started, "overloaded");
                }
                return Err(e.into_status());
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let return_terms = r.return_terms;
        let vnodes = engine.vnodes.stores.len();
        tokio::spawn(async move {
            let mut sent = 0usize;
            let outcome = 'pages: loop {
                let mut merged: Vec<(Term, Vec<u8>)> = Vec::new();
                let mut more = false;
                for vnode in 0..vnodes {
                    let mut q = base.clone();
                    q.continuation = after
                        .as_ref()
                        .map(|(t, k)| levee_store::index_continuation(&q.bucket, &q.field, t, k));
                    match engine.call(vnode, move |s| s.index_query(&q)).await {
                        Ok(page) => {
                            more |= page.continuation.is_some();
                            merged.extend(
                                page.results
                                    .into_iter()
                                    .map(|(t, k)| (t.expect("terms requested"), k)),
                            );
                        }
                        Err(e) => {
                            let label = e.label();
                            let _ = tx.send(Err(e.into_status())).await;
                            break 'pages label;
                        }
                    }
                }
                merged.sort();
                let want = page_size.min(limit - sent);
                more |= merged.len() > want;
                merged.truncate(want);
                sent += merged.len();
                after = merged.last().cloned();
                let last_page = !more || sent >= limit;
                let continuation = if last_page && sent >= limit && more {
                    after
                        .as_ref()
                        .map(|(t, k)| encode_position(t, k))
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
                let results = merged
                    .into_iter()
                    .map(|(t, k)| pb::IndexQueryResult {
                        term: return_terms.then(|| term_to(t)),
                        key: k,
                    })
                    .collect();
                // Waits here, on no thread, while the client is slow to read.
                if tx
                    .send(Ok(pb::IndexQueryResponse {
                        results,
                        continuation,
                    }))
                    .await
                    .is_err()
                {
                    break "error"; // the client went away
                }
                if last_page {
                    break "ok";
                }
            };
            Self::stream_done(&metrics, "index_query", started, outcome);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    type ListKeysStream = PageStream<pb::ListKeysResponse>;

    /// Every key of a bucket, vnode after vnode, in pages. Each vnode's keys come from one fold
    /// snapshot; each page is one engine call (one slot, one blocking-pool task) that advances
    /// the fold by `page_size` keys. Between pages — in particular while a slow client has not
    /// read the last ones — the stream holds neither a blocking thread nor a slot.
    async fn list_keys(
        &self,
        req: Request<pb::ListKeysRequest>,
    ) -> Result<Response<Self::ListKeysStream>, Status> {
        let (meta, _, r) = req.into_parts();
        if r.bucket.is_empty() || r.bucket.contains(&0) {
            return Err(Status::invalid_argument(
                "bucket must be 1-255 bytes without 0x00",
            ));
        }
        let page_size = if r.page_size == 0 {
            1000
        } else {
            r.page_size as usize
        };
        let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let engine = self.engine(&meta);
        let metrics = self.metrics.clone();
        let bucket = Arc::new(r.bucket);
        let ring_size = self.vnodes.ring_size;
        tokio::spawn(async move {
            let started = Instant::now();
            let vnodes = engine.vnodes.stores.len();
            let mut outcome = "ok";
            'vnodes: for vnode in 0..vnodes {
                let mut fold: Option<KeyFold> = None;
                loop {
                    let bucket = bucket.clone();
                    let page = engine
                        .call(vnode, move |s| {
                            let (snap, mut keys) = match fold {
                                Some(f) => f,
                                None => {
                                    let snap = s.snapshot(levee_store::SnapshotKind::Fold)?;
                                    let keys = Box::new(snap.fold_keys(&bucket, None, None)?);
                                    (snap, keys as _)
                                }
                            };
                            let mut page = Vec::with_capacity(page_size);
                            while page.len() < page_size {
                                match keys.next() {
                                    Some(k) => {
                                        let k = k?;
                                        if listed_here(&snap, &bucket, &k, vnode, ring_size)? {
                                            page.push(k);
                                        }
                                    }
                                    None => return Ok((page, None)),
                                }
                            }
                            Ok((page, Some((snap, keys))))
                        })
                        .await;
                    let (keys, rest) = match page {
                        Ok(p) => p,
                        Err(e) => {
                            outcome = e.label();
                            let _ = tx.send(Err(e.into_status())).await;
                            break 'vnodes;
                        }
                    };
                    // Waits here, on no thread and with no slot, while the client is slow.
                    if !keys.is_empty() && tx.send(Ok(pb::ListKeysResponse { keys })).await.is_err()
                    {
                        outcome = "error"; // the client went away
                        break 'vnodes;
                    }
                    match rest {
                        Some(f) => fold = Some(f),
                        None => break,
                    }
                }
            }
            Self::stream_done(&metrics, "list_keys", started, outcome);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}

/// Whether vnode `vnode` lists `key`: the key is live (not only tombstones) and `vnode` is the
/// first partition of its preflist, so a node holding several of a key's replicas lists it once.
fn listed_here(
    snap: &levee_store::Snapshot,
    bucket: &[u8],
    key: &[u8],
    vnode: usize,
    ring_size: u32,
) -> Result<bool, levee_store::Error> {
    if crate::ring::partition_of(bucket, key, ring_size) as usize != vnode {
        return Ok(false);
    }
    Ok(match snap.head(bucket, key)? {
        Some(h) => decode_siblings(&h.metadata).map_or(true, |s| !s.is_tombstone_only()),
        None => false,
    })
}

/// Continuation of a coverage query: the last (term, key) returned, as a protobuf-encoded result.
fn encode_position(t: &Term, k: &[u8]) -> Vec<u8> {
    use prost::Message;
    pb::IndexQueryResult {
        term: Some(term_to(t.clone())),
        key: k.to_vec(),
    }
    .encode_to_vec()
}

fn decode_position(b: &[u8]) -> Option<(pb::Term, Vec<u8>)> {
    use prost::Message;
    let r = pb::IndexQueryResult::decode(b).ok()?;
    Some((r.term?, r.key))
}
