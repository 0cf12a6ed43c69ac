//! A recorded client load for the cluster tests: read-modify-write cycles (GET at r=2, then a PUT
//! of a unique value with the GET's context at w=2) on random keys of bucket "b" under the
//! "siblings" type, every operation recorded in a `history::History`; and the final reads and
//! metric scrapes the tests check it with.
//!
//! Each PUT also moves the key's index entry: it removes every `n_int` term but its own (the
//! value's write number modulo 50, [`term_of`]) and adds that one, so a replica's entries must
//! follow exactly the values it holds ([`expected_terms`], `cluster::index_mismatches`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use levee_proto::v1 as pb;
use pb::kv_client::KvClient;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::history::{History, ReadOutcome, WriteOutcome};

pub const TYPE: &str = "siblings";

/// The load's shape.
#[derive(Clone, Copy)]
pub struct Load {
    /// Keys `k000`.. to pick from.
    pub keys: usize,
    /// Bytes of padding after each value (the history holds values unpadded).
    pub pad: usize,
}

pub fn key(i: usize) -> String {
    format!("k{i:03}")
}

/// The `n_int` term of a load value `c<client>-<n>` (padding removed): n modulo 50.
pub fn term_of(value: &str) -> i64 {
    let n: i64 = value
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("{value:?} is not a load value"));
    n % 50
}

/// The index changes of the load's write number `n`: every other term removed, its own added.
fn index_changes_of(n: u64) -> Vec<pb::IndexChange> {
    let own = (n % 50) as i64;
    let mut out: Vec<pb::IndexChange> = (0..50)
        .filter(|t| *t != own)
        .map(super::cluster::index_remove)
        .collect();
    out.push(super::cluster::index_add(own));
    out
}

/// The `n_int` terms each key's replicas must hold, from its values as read at the end.
pub fn expected_terms(
    values: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, std::collections::BTreeSet<i64>> {
    values
        .iter()
        .map(|(k, vs)| (k.clone(), vs.iter().map(|v| term_of(v)).collect()))
        .collect()
}

pub fn quorum(n: u32) -> Option<pb::Quorum> {
    Some(pb::Quorum {
        value: Some(pb::quorum::Value::Count(n)),
    })
}

/// A client that connects when first used, with short connect and request timeouts.
pub fn lazy(addr: &str) -> KvClient<Channel> {
    KvClient::new(
        Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_secs(5))
            .connect_lazy(),
    )
}

/// A read of `b`/`key` through the node at `addr` at r = 1 (the coordinator's own replica first).
pub async fn get_r1(addr: &str, key: &str) -> pb::GetResponse {
    lazy(addr)
        .get(pb::GetRequest {
            bucket: "b".into(),
            key: key.to_string().into(),
            r: quorum(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// The values of a read, without their padding.
/// Every live value a GET returned: `value` alone when the key holds one, else the siblings.
pub fn live_values(g: &pb::GetResponse) -> Vec<&[u8]> {
    if g.siblings.is_empty() {
        vec![g.value.as_slice()]
    } else {
        g.siblings.iter().map(|s| s.value.as_slice()).collect()
    }
}

pub fn sibling_values(g: &pb::GetResponse) -> Vec<String> {
    live_values(g)
        .into_iter()
        .map(|b| {
            let v = String::from_utf8(b.to_vec()).unwrap();
            v.split_once("-x")
                .map_or(v.clone(), |(head, _)| head.to_string())
        })
        .collect()
}

/// `n` clients of the load (see [`client`]), spawned.
pub fn spawn_clients(
    n: usize,
    load: Load,
    addrs: &[String],
    h: &History,
    stop: &Arc<AtomicBool>,
    acked: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|c| {
            tokio::spawn(client(
                c,
                load,
                addrs.to_vec(),
                h.clone(),
                stop.clone(),
                acked.clone(),
            ))
        })
        .collect()
}

/// Client `c` of the load, through `addrs` (starting at `c % len`, moving to the next address
/// when its node cannot be reached), until `stop`. Acknowledged writes are counted in `acked`.
pub async fn client(
    c: usize,
    load: Load,
    addrs: Vec<String>,
    h: History,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
) {
    let mut node = c % addrs.len();
    let mut conns: Vec<KvClient<Channel>> = addrs.iter().map(|a| lazy(a)).collect();
    let mut n = 0u64;
    let mut rng = 0x9E37_79B9u64.wrapping_mul(c as u64 + 1);
    let pad = "x".repeat(load.pad);
    while !stop.load(Ordering::Relaxed) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = key(rng as usize % load.keys);
        let t = h.begin_read(c, &k);
        let r = conns[node]
            .get(pb::GetRequest {
                bucket: "b".into(),
                key: k.clone().into(),
                bucket_type: TYPE.into(),
                r: quorum(2),
                ..Default::default()
            })
            .await;
        let context = match r {
            Ok(g) => {
                let g = g.into_inner();
                h.end_read(t, ReadOutcome::Values(sibling_values(&g)));
                g.context
            }
            Err(e) if e.code() == Code::NotFound => {
                h.end_read(t, ReadOutcome::NotFound);
                Vec::new()
            }
            Err(_) => {
                h.end_read(t, ReadOutcome::Failed);
                node = (node + 1) % addrs.len();
                continue;
            }
        };
        n += 1;
        let value = format!("c{c}-{n}");
        let t = h.begin_write(c, &k, &value);
        let value = if load.pad > 0 {
            format!("{value}-{pad}")
        } else {
            value
        };
        let r = conns[node]
            .put(pb::PutRequest {
                bucket: "b".into(),
                key: k.clone().into(),
                value: value.into_bytes(),
                context,
                bucket_type: TYPE.into(),
                w: quorum(2),
                index_changes: index_changes_of(n),
                ..Default::default()
            })
            .await;
        match r {
            Ok(_) => {
                h.end_write(t, WriteOutcome::Acked);
                acked.fetch_add(1, Ordering::Relaxed);
            }
            // The coordinator said the quorum was not met: the write may still be on a replica.
            Err(e) if e.message().starts_with("quorum not met") => {
                h.end_write(t, WriteOutcome::Failed)
            }
            Err(_) => {
                h.end_write(t, WriteOutcome::Unknown);
                node = (node + 1) % addrs.len();
                conns[node] = lazy(&addrs[node]);
            }
        }
    }
}

/// Every key of the load read at r=3 through each address (retried for up to 20 s while a
/// member is still marked down): key -> sorted values, per address.
pub async fn final_reads(load: Load, addrs: &[String]) -> Vec<BTreeMap<String, Vec<String>>> {
    let mut per_node = Vec::new();
    for a in addrs {
        let mut kv = lazy(a);
        let mut m = BTreeMap::new();
        for i in 0..load.keys {
            let start = std::time::Instant::now();
            loop {
                let r = kv
                    .get(pb::GetRequest {
                        bucket: "b".into(),
                        key: key(i).into(),
                        bucket_type: TYPE.into(),
                        r: quorum(3),
                        ..Default::default()
                    })
                    .await;
                match r {
                    Ok(g) => {
                        let mut v = sibling_values(&g.into_inner());
                        v.sort();
                        m.insert(key(i), v);
                        break;
                    }
                    Err(e) if e.code() == Code::NotFound => break,
                    Err(e) => assert!(
                        start.elapsed() < Duration::from_secs(20),
                        "final read of {} via {a}: {e:?}",
                        key(i)
                    ),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        per_node.push(m);
    }
    per_node
}

/// GET /metrics over a plain TCP connection (HTTP/1.0).
pub async fn scrape(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// The sum of the samples of every series whose line starts with `name`.
pub async fn metric(addr: &str, name: &str) -> f64 {
    scrape(addr)
        .await
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls the sum of `series` at `addr` until it is 0 or `deadline` passes: the last sum (0 when
/// it got there).
pub async fn until_zero(addr: &str, series: &[&str], deadline: std::time::Instant) -> f64 {
    loop {
        let mut sum = 0.0;
        for s in series {
            sum += metric(addr, s).await;
        }
        if sum == 0.0 || std::time::Instant::now() >= deadline {
            return sum;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
