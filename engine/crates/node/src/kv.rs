//! The `KV` gRPC service. PUT, GET, HEAD and DELETE go to the coordinator (`coordinator/`:
//! the key's replicas across the cluster, quorums, version vectors, read repair). IndexQuery and
//! ListKeys read this node's vnodes — each engine call on the blocking pool after its vnode
//! admitted it (`admission.rs`: bounded concurrency and queue, fail fast with UNAVAILABLE) — and
//! produce their pages one engine call at a time from an async task, so a slow reader holds no
//! blocking thread and no vnode slot. (Coverage across members is not wired yet: in a cluster of
//! several members they answer for this node's vnodes only; docs/cluster.md.)

use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use levee_cluster::{IndexDiff, IndexEdit, IndexTerm, KeyIndexEntry};
use levee_proto::v1 as pb;
use levee_store::{IndexChange, IndexOp, Term};
use tokio_stream::Stream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use levee_cluster::{
    decode_context, encode_context, query_hash, Clock, Content, Continuation, ContinuationError,
    QuorumValue, ReadOptions, SiblingKind, SiblingSet, WriteOptions,
};

use crate::admission;
use crate::coordinator::coverage::with_page_retries;
use crate::coordinator::get::{Read, ReadOutcome};
use crate::coordinator::index_query::IndexReader;
use crate::coordinator::put::Write;
use crate::coordinator::{Coordinator, MAX_REPLANS};
use crate::metrics::Metrics;

pub struct KvService {
    pub coordinator: Arc<Coordinator>,
    pub metrics: Arc<Metrics>,
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

/// A client's index changes as edits of the key's entries (`levee_cluster::index_entries`),
/// after the store's checks of each field and term.
pub(crate) fn edits_from(list: Vec<pb::IndexChange>) -> Result<Vec<IndexEdit>, Status> {
    let changes = changes_from(list)?;
    levee_store::validate_index_changes(&changes).map_err(crate::errors::to_status)?;
    Ok(changes
        .into_iter()
        .map(|c| {
            let e = KeyIndexEntry::new(c.field, cluster_term(c.term));
            match c.op {
                IndexOp::Add => IndexEdit::Add(e),
                IndexOp::Remove => IndexEdit::Remove(e),
            }
        })
        .collect())
}

fn cluster_term(t: Term) -> IndexTerm {
    match t {
        Term::Int(i) => IndexTerm::Int(i),
        Term::Bin(b) => IndexTerm::Bin(b),
    }
}

/// The store's changes that take a replica's index from one set of a key's entries to another.
pub(crate) fn store_changes(diff: IndexDiff) -> Vec<IndexChange> {
    let term = |t: IndexTerm| match t {
        IndexTerm::Int(i) => Term::Int(i),
        IndexTerm::Bin(b) => Term::Bin(b),
    };
    let removes = diff
        .remove
        .into_iter()
        .map(|e| IndexChange::remove(e.field, term(e.term)));
    let adds = diff
        .add
        .into_iter()
        .map(|e| IndexChange::add(e.field, term(e.term)));
    removes.chain(adds).collect()
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

pub(crate) fn context_of(bytes: &[u8]) -> Result<Clock, Status> {
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
pub(crate) fn client_timeout(meta: &MetadataMap) -> Option<Duration> {
    meta.get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(admission::parse_grpc_timeout)
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
        admission::start_deadline(
            Instant::now(),
            client_timeout(meta),
            self.coordinator.replicas.default_deadline,
        )
    }

    /// Count and time a coordinated request.
    fn count(&self, op: &'static str, started: Instant, res: Result<(), &Status>) {
        Self::stream_done(&self.metrics, op, started, result_label(&res));
    }

    /// Count and time a finished request or stream (refusals are counted, not timed: the
    /// histogram is the latency of admitted requests).
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
                    index: Vec::new(),
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
                    mut contents,
                    sqn,
                } => {
                    // Siblings only when there are several: a lone value is `value` alone.
                    let siblings = if contents.len() > 1 {
                        siblings_of(&merged, &contents)
                    } else {
                        Vec::new()
                    };
                    let latest = latest_live(&merged).filter(|&i| i < contents.len());
                    let timestamp_us = latest
                        .and_then(|i| merged.live().nth(i))
                        .map_or(0, |s| s.meta.timestamp_us);
                    let (value, metadata) = latest
                        .map(|i| {
                            let c = contents.swap_remove(i);
                            (c.value, c.metadata)
                        })
                        .unwrap_or_default();
                    Ok(pb::GetResponse {
                        sqn,
                        value,
                        metadata,
                        context: encode_context(&merged.context()),
                        siblings,
                        timestamp_us,
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

    /// A coverage query: each round asks every vnode of the coverage plan (this node's and other
    /// members') for its next page after one global (term, key) position, and emits the merge
    /// in (term, key) order up to the smallest position a vnode with more stopped at — so no
    /// vnode's later entry can sort before an emitted one. Between pages nothing is held.
    async fn index_query(
        &self,
        req: Request<pb::IndexQueryRequest>,
    ) -> Result<Response<Self::IndexQueryStream>, Status> {
        let (meta, _, r) = req.into_parts();
        let page_size = if r.page_size == 0 {
            1000
        } else {
            r.page_size as usize
        };
        // 0: no limit.
        let max_results = NonZeroUsize::new(r.max_results as usize);
        let c = self.coordinator.clone();
        let props = c.props(&r.bucket_type)?;
        let started = Instant::now();
        let (view, plan) = c.coverage(props.n_val).inspect_err(|e| {
            Self::stream_done(&self.metrics, "index_query", started, result_label(&Err(e)));
        })?;
        let enc = |t: &Option<pb::Term>| {
            t.as_ref()
                .map(prost::Message::encode_to_vec)
                .unwrap_or_default()
        };
        let qhash = query_hash(
            b"index_query",
            &[
                &r.bucket,
                &r.field,
                &enc(&r.start),
                &enc(&r.end),
                r.term_regex.as_bytes(),
                &[u8::from(r.return_terms)],
                r.bucket_type.as_bytes(),
            ],
        );
        let ring_version = view.list.version();
        let mut after: Option<crate::replica::Entry> = None;
        if !r.continuation.is_empty() {
            let e = Continuation::resume(&r.continuation, qhash, ring_version).map_err(
                |e| match e {
                    ContinuationError::RingChanged { .. } => Status::failed_precondition(format!(
                        "continuation token: {e}; start the query again"
                    )),
                    e => Status::invalid_argument(format!(
                        "continuation token does not belong to this query: {e}"
                    )),
                },
            )?;
            let term = <pb::Term as prost::Message>::decode(&e.term[..])
                .map_err(|_| Status::invalid_argument("continuation token: bad term"))?;
            after = Some((term_from(Some(term), "continuation")?, e.key));
        }
        let base = pb::IndexPageRequest {
            partition: 0,
            bucket: r.bucket,
            field: r.field,
            start: r.start,
            end: r.end,
            term_regex: r.term_regex,
            after: None,
            limit: page_size as u32,
            key_partitions: Vec::new(),
            snapshot: 0,
        };
        // Checked once here (on this node's first vnode) so a bad query fails the call, not the
        // stream.
        {
            let first = levee_cluster::CoverageVnode {
                node: c.peers.self_name.clone(),
                vnode: 0,
                filter: levee_cluster::KeyFilter::All,
            };
            let checked = c
                .index_page(
                    &view,
                    &first,
                    &pb::IndexPageRequest {
                        limit: 1,
                        ..base.clone()
                    },
                    None,
                    0,
                    self.deadline(&meta),
                )
                .await;
            if let Ok((_, _, held)) = &checked {
                c.replicas.held.release(*held);
            }
            if let Err(e) = checked {
                Self::stream_done(
                    &self.metrics,
                    "index_query",
                    started,
                    result_label(&Err(&e)),
                );
                return Err(e);
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let return_terms = r.return_terms;
        let metrics = self.metrics.clone();
        let default_deadline = self.coordinator.replicas.default_deadline;
        let client_deadline = client_timeout(&meta)
            .map(|t| admission::start_deadline(Instant::now(), Some(t), default_deadline));
        let mut reader = IndexReader::new(
            c,
            view,
            plan.vnodes.clone(),
            base,
            props.n_val,
            after,
            page_size,
            max_results,
        );
        tokio::spawn(async move {
            let outcome = loop {
                let page = match reader.next_page(client_deadline).await {
                    Ok(p) => p,
                    Err(e) => {
                        let label = result_label(&Err(&e));
                        let _ = tx.send(Err(e)).await;
                        break label;
                    }
                };
                let continuation = match &page.end {
                    Some(Some((t, k))) => Continuation::new(
                        qhash,
                        ring_version,
                        levee_cluster::IndexEntry::new(
                            prost::Message::encode_to_vec(&term_to(t.clone())),
                            k.clone(),
                        ),
                    )
                    .map(|t| t.encode())
                    .unwrap_or_default(),
                    _ => Vec::new(),
                };
                let results = page
                    .entries
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
                if page.end.is_some() {
                    break "ok";
                }
            };
            reader.release().await;
            Self::stream_done(&metrics, "index_query", started, outcome);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    type ListKeysStream = PageStream<pb::ListKeysResponse>;

    /// Every live key of a bucket: the coverage plan's vnodes one after the other, each in pages
    /// of one `FoldKeys` call (in process or on the member that owns the vnode). Between pages —
    /// in particular while a slow client has not read the last ones — the stream holds neither
    /// a blocking thread nor a slot.
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
        let page_size = if r.page_size == 0 { 1000 } else { r.page_size };
        let c = self.coordinator.clone();
        let props = c.props(&r.bucket_type)?;
        let started = Instant::now();
        let (view, plan) = c.coverage(props.n_val).inspect_err(|e| {
            Self::stream_done(&self.metrics, "list_keys", started, result_label(&Err(e)));
        })?;
        let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let metrics = self.metrics.clone();
        let default_deadline = self.coordinator.replicas.default_deadline;
        let client_deadline = client_timeout(&meta)
            .map(|t| admission::start_deadline(Instant::now(), Some(t), default_deadline));
        tokio::spawn(async move {
            let mut outcome = "ok";
            // (vnode, key to resume after); a vnode whose member dies is replaced by stand-ins
            // that resume where it stopped.
            let mut work: std::collections::VecDeque<(levee_cluster::CoverageVnode, Vec<u8>)> =
                plan.vnodes
                    .iter()
                    .map(|cv| (cv.clone(), Vec::new()))
                    .collect();
            let mut replans = 0;
            let retried = c
                .metrics
                .coverage_page_retries
                .with_label_values(&["list_keys"]);
            'vnodes: while let Some((cv, mut after)) = work.pop_front() {
                // The snapshot the vnode holds for its next page.
                let mut held = 0u64;
                let stopped = loop {
                    let page = with_page_retries(
                        client_deadline,
                        default_deadline,
                        &retried,
                        |deadline| {
                            c.fold_keys_page(
                                &view,
                                &cv,
                                r.bucket.clone(),
                                after.clone(),
                                page_size,
                                held,
                                deadline,
                            )
                        },
                    )
                    .await;
                    let (keys, last) = match page {
                        Ok((keys, last, snapshot)) => {
                            held = snapshot;
                            c.metrics
                                .coverage_fetched
                                .with_label_values(&["list_keys"])
                                .inc_by(keys.len() as u64);
                            (keys, last)
                        }
                        Err(e) => {
                            if crate::peers::is_unreachable(&e) && replans < MAX_REPLANS {
                                if let Ok(stand_ins) = c.replan(props.n_val, &cv) {
                                    replans += 1;
                                    for s in stand_ins.into_iter().rev() {
                                        work.push_front((s, after.clone()));
                                    }
                                    continue 'vnodes;
                                }
                            }
                            outcome = result_label(&Err(&e));
                            let _ = tx.send(Err(e)).await;
                            break true;
                        }
                    };
                    // Waits here, on no thread and with no slot, while the client is slow.
                    if !keys.is_empty() && tx.send(Ok(pb::ListKeysResponse { keys })).await.is_err()
                    {
                        outcome = "error"; // the client went away
                        break true;
                    }
                    match last {
                        Some(l) => after = l,
                        None => break false,
                    }
                };
                if stopped {
                    // Inside a vnode: let go of its snapshot.
                    c.release_snapshots(&view, &[(cv, held)]).await;
                    break;
                }
            }
            Self::stream_done(&metrics, "list_keys", started, outcome);
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
