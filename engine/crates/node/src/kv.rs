//! The `KV` gRPC service: thin handlers that run engine calls on the blocking pool.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use levee_proto::v1 as pb;
use levee_store::{IndexChange, IndexQuery, Term};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::errors::{label, to_status};
use crate::metrics::Metrics;
use crate::vnodes::Vnodes;

pub struct KvService {
    pub vnodes: Arc<Vnodes>,
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

impl KvService {
    /// Run `f` on the blocking pool, recording the request's metrics.
    async fn run<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Vnodes) -> Result<Option<T>, levee_store::Error> + Send + 'static,
    ) -> Result<T, Status> {
        let vnodes = self.vnodes.clone();
        let start = Instant::now();
        let res = tokio::task::spawn_blocking(move || f(&vnodes))
            .await
            .map_err(|e| Status::internal(format!("handler failed: {e}")))?;
        self.metrics
            .duration
            .with_label_values(&[op])
            .observe(start.elapsed().as_secs_f64());
        let result = match &res {
            Ok(Some(_)) => "ok",
            Ok(None) => "not_found",
            Err(e) => label(e),
        };
        self.metrics
            .requests
            .with_label_values(&[
                op,
                if result == "ok" || result == "not_found" {
                    result
                } else {
                    "error"
                },
            ])
            .inc();
        match res {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(Status::not_found("no object under that bucket and key")),
            Err(e) => Err(to_status(e)),
        }
    }
}

type PageStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl pb::kv_server::Kv for KvService {
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let r = req.into_inner();
        let changes = changes_from(r.index_changes)?;
        let sqn = self
            .run("put", move |v| {
                v.store_for(&r.bucket, &r.key)
                    .put(&r.bucket, &r.key, &r.value, &r.metadata, &changes)
                    .map(Some)
            })
            .await?;
        Ok(Response::new(pb::PutResponse { sqn }))
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let r = req.into_inner();
        let o = self
            .run("get", move |v| {
                v.store_for(&r.bucket, &r.key).get(&r.bucket, &r.key)
            })
            .await?;
        Ok(Response::new(pb::GetResponse {
            sqn: o.sqn,
            value: o.value,
            metadata: o.metadata,
        }))
    }

    async fn head(
        &self,
        req: Request<pb::HeadRequest>,
    ) -> Result<Response<pb::HeadResponse>, Status> {
        let r = req.into_inner();
        let h = self
            .run("head", move |v| {
                v.store_for(&r.bucket, &r.key).head(&r.bucket, &r.key)
            })
            .await?;
        Ok(Response::new(pb::HeadResponse {
            sqn: h.sqn,
            value_size: h.value_size,
            value_hash: h.value_hash,
            metadata: h.metadata,
        }))
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let r = req.into_inner();
        let changes = changes_from(r.index_changes)?;
        let sqn = self
            .run("delete", move |v| {
                v.store_for(&r.bucket, &r.key)
                    .delete(&r.bucket, &r.key, &r.metadata, &changes)
                    .map(Some)
            })
            .await?;
        Ok(Response::new(pb::DeleteResponse { sqn }))
    }

    type IndexQueryStream = PageStream<pb::IndexQueryResponse>;

    /// A coverage query: every vnode is asked for its next page from one global (term, key)
    /// position; the pages are merged in (term, key) order.
    async fn index_query(
        &self,
        req: Request<pb::IndexQueryRequest>,
    ) -> Result<Response<Self::IndexQueryStream>, Status> {
        let r = req.into_inner();
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
        // Validate once up front so a bad query fails the call instead of the stream.
        {
            let q = IndexQuery {
                max_results: Some(1),
                ..base.clone()
            };
            let vnodes = self.vnodes.clone();
            tokio::task::spawn_blocking(move || vnodes.stores[0].index_query(&q))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(to_status)?;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let vnodes = self.vnodes.clone();
        let metrics = self.metrics.clone();
        let return_terms = r.return_terms;
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut sent = 0usize;
            let outcome = loop {
                let mut merged: Vec<(Term, Vec<u8>)> = Vec::new();
                let mut more = false;
                let mut failed = None;
                for store in &vnodes.stores {
                    let mut q = base.clone();
                    q.continuation = after
                        .as_ref()
                        .map(|(t, k)| levee_store::index_continuation(&q.bucket, &q.field, t, k));
                    match store.index_query(&q) {
                        Ok(page) => {
                            more |= page.continuation.is_some();
                            merged.extend(
                                page.results
                                    .into_iter()
                                    .map(|(t, k)| (t.expect("terms requested"), k)),
                            );
                        }
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                if let Some(e) = failed {
                    let _ = tx.blocking_send(Err(to_status(e)));
                    break "error";
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
                if tx
                    .blocking_send(Ok(pb::IndexQueryResponse {
                        results,
                        continuation,
                    }))
                    .is_err()
                {
                    break "cancelled";
                }
                if last_page {
                    break "ok";
                }
            };
            metrics
                .duration
                .with_label_values(&["index_query"])
                .observe(started.elapsed().as_secs_f64());
            metrics
                .requests
                .with_label_values(&["index_query", if outcome == "ok" { "ok" } else { "error" }])
                .inc();
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    type ListKeysStream = PageStream<pb::ListKeysResponse>;

    async fn list_keys(
        &self,
        req: Request<pb::ListKeysRequest>,
    ) -> Result<Response<Self::ListKeysStream>, Status> {
        let r = req.into_inner();
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
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let vnodes = self.vnodes.clone();
        let metrics = self.metrics.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut ok = true;
            'stores: for store in &vnodes.stores {
                let snap = match store.snapshot(levee_store::SnapshotKind::Fold) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(to_status(e)));
                        ok = false;
                        break;
                    }
                };
                let keys = match snap.fold_keys(&r.bucket, None, None) {
                    Ok(k) => k,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(to_status(e)));
                        ok = false;
                        break;
                    }
                };
                let mut page = Vec::with_capacity(page_size);
                for k in keys {
                    match k {
                        Ok(k) => page.push(k),
                        Err(e) => {
                            let _ = tx.blocking_send(Err(to_status(e)));
                            ok = false;
                            break 'stores;
                        }
                    }
                    if page.len() == page_size
                        && tx
                            .blocking_send(Ok(pb::ListKeysResponse {
                                keys: std::mem::take(&mut page),
                            }))
                            .is_err()
                    {
                        break 'stores;
                    }
                }
                if !page.is_empty()
                    && tx
                        .blocking_send(Ok(pb::ListKeysResponse { keys: page }))
                        .is_err()
                {
                    break;
                }
            }
            metrics
                .duration
                .with_label_values(&["list_keys"])
                .observe(started.elapsed().as_secs_f64());
            metrics
                .requests
                .with_label_values(&["list_keys", if ok { "ok" } else { "error" }])
                .inc();
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
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
