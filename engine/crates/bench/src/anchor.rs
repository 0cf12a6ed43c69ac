//! The node-path anchor: a bare tonic server answering `levee.v1.KV` from memory — no
//! replication, no engine, no admission — with the transport settings `levee serve` uses. The
//! `grpc` driver run against it and against a node, same scenario and same machine, gives the
//! share of the node's throughput that is gRPC and HTTP/2 itself (docs/benchmarks.md, "A levee
//! node over gRPC"). Index queries and key listings answer empty; a GET of an absent key is
//! NOT_FOUND as on a node.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;

use anyhow::{Context, Result};
use levee_proto::v1 as pb;
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

/// Independent maps, so concurrent requests rarely wait on one lock.
const SHARDS: usize = 64;

/// The largest message either way (the node's default `max_message_bytes`).
const MAX_MESSAGE: usize = 64 << 20;

type Stream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// Values by (bucket, key).
type Shard = Mutex<HashMap<(Vec<u8>, Vec<u8>), Vec<u8>>>;

/// Values by (bucket, key), in memory.
pub struct Anchor {
    shards: Vec<Shard>,
}

impl Default for Anchor {
    fn default() -> Self {
        Anchor {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl Anchor {
    fn shard(&self, bucket: &[u8], key: &[u8]) -> &Shard {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (bucket, key).hash(&mut h);
        &self.shards[h.finish() as usize % SHARDS]
    }
}

impl Anchor {
    /// `f` of the value under (bucket, key).
    fn read<T>(&self, bucket: Vec<u8>, key: Vec<u8>, f: impl FnOnce(&Vec<u8>) -> T) -> Option<T> {
        self.shard(&bucket, &key).lock().get(&(bucket, key)).map(f)
    }
}

/// What a node answers for an absent key.
fn not_found() -> Status {
    Status::not_found("no object under that bucket and key")
}

#[tonic::async_trait]
impl pb::kv_server::Kv for Anchor {
    async fn put(&self, req: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        let r = req.into_inner();
        self.shard(&r.bucket, &r.key)
            .lock()
            .insert((r.bucket, r.key), r.value);
        Ok(Response::new(pb::PutResponse::default()))
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let r = req.into_inner();
        let value = self
            .read(r.bucket, r.key, |v| v.clone())
            .ok_or_else(not_found)?;
        Ok(Response::new(pb::GetResponse {
            value,
            ..Default::default()
        }))
    }

    async fn head(
        &self,
        req: Request<pb::HeadRequest>,
    ) -> Result<Response<pb::HeadResponse>, Status> {
        let r = req.into_inner();
        let size = self
            .read(r.bucket, r.key, |v| v.len())
            .ok_or_else(not_found)?;
        Ok(Response::new(pb::HeadResponse {
            value_size: size as u32,
            sibling_count: 1,
            ..Default::default()
        }))
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let r = req.into_inner();
        self.shard(&r.bucket, &r.key)
            .lock()
            .remove(&(r.bucket, r.key));
        Ok(Response::new(pb::DeleteResponse::default()))
    }

    type IndexQueryStream = Stream<pb::IndexQueryResponse>;

    async fn index_query(
        &self,
        _req: Request<pb::IndexQueryRequest>,
    ) -> Result<Response<Self::IndexQueryStream>, Status> {
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(
            pb::IndexQueryResponse::default(),
        )]))))
    }

    type ListKeysStream = Stream<pb::ListKeysResponse>;

    async fn list_keys(
        &self,
        _req: Request<pb::ListKeysRequest>,
    ) -> Result<Response<Self::ListKeysStream>, Status> {
        Ok(Response::new(Box::pin(tokio_stream::empty())))
    }
}

/// Serve the anchor on `listen` until the process is stopped, on a runtime of `threads` worker
/// threads (`levee serve` uses one per core). Prints "anchor listening on ADDR" once bound.
pub fn serve(listen: SocketAddr, threads: usize) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        let addr = listener.local_addr()?;
        println!("anchor listening on {addr}");
        // As `levee serve` listens without TLS: TCP_NODELAY, keepalive after 60 s.
        let incoming = tonic::transport::server::TcpIncoming::from_listener(
            listener,
            true,
            Some(std::time::Duration::from_secs(60)),
        )
        .map_err(|e| anyhow::anyhow!("configuring the listener: {e}"))?;
        tonic::transport::Server::builder()
            .initial_stream_window_size(1 << 20)
            .initial_connection_window_size(16 << 20)
            .add_service(
                pb::kv_server::KvServer::new(Anchor::default())
                    .max_decoding_message_size(MAX_MESSAGE)
                    .max_encoding_message_size(MAX_MESSAGE),
            )
            .serve_with_incoming(incoming)
            .await
            .context("serving the anchor")
    })
}
