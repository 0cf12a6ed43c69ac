//! A loopback TCP proxy that can blackhole traffic, for simulating network partitions between
//! levee nodes: each node dials each peer through its own [`Proxy`] (one per directed pair), and
//! the test partitions a link with [`Proxy::set_blackhole`].
//!
//! While the blackhole is on, the proxy behaves like a network that silently drops packets:
//! bytes arriving in either direction on existing connections are read and discarded (the
//! connections stay open, nothing arrives at the other end), and new connections are accepted
//! but never connected to the target (whatever the client sends is discarded). When the
//! blackhole is lifted, every connection that lived through it is closed (an HTTP/2 stream that
//! lost bytes is corrupt anyway), so clients reconnect cleanly, and new connections are
//! forwarded normally again.
//!
//! The proxy runs on plain std threads (one accept thread, two per forwarded connection), so it
//! works the same from synchronous tests and from inside a tokio runtime. Dropping the proxy
//! closes its listener and all its connections and joins its threads.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a connection to the target may take before the client connection is closed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Write timeout on both sockets, so a blocked write notices the blackhole or shutdown.
const WRITE_POLL: Duration = Duration::from_millis(50);
const BUF: usize = 64 * 1024;

/// Counters of a proxy's traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted on the listener.
    pub accepted: u64,
    /// Bytes forwarded from clients to the target.
    pub to_target: u64,
    /// Bytes forwarded from the target to clients.
    pub to_client: u64,
    /// Bytes read and discarded because of the blackhole (both directions).
    pub dropped: u64,
    /// Connections closed because they lived through a blackhole that was lifted.
    pub closed_on_heal: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    to_target: AtomicU64,
    to_client: AtomicU64,
    dropped: AtomicU64,
    closed_on_heal: AtomicU64,
}

/// One proxied connection.
struct Conn {
    client: TcpStream,
    /// The connection to the target, once made (never, if accepted during a blackhole).
    upstream: Mutex<Option<TcpStream>>,
    /// Set if the connection existed while the blackhole was on: its bytes are dropped, and it is
    /// closed when the blackhole is lifted.
    tainted: AtomicBool,
    closed: AtomicBool,
}

impl Conn {
    fn upstream(&self) -> MutexGuard<'_, Option<TcpStream>> {
        self.upstream.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shuts both sockets down, which wakes the pump threads.
    fn close(&self) {
        let upstream = self.upstream();
        self.closed.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        if let Some(s) = upstream.as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

struct Shared {
    target: SocketAddr,
    addr: SocketAddr,
    stop: AtomicBool,
    /// Guarded by `conns`' lock for writes, so that a connection is tainted iff it was
    /// registered while the blackhole was on or was registered when it was turned on.
    blackhole: AtomicBool,
    conns: Mutex<Vec<Arc<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    counters: Counters,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, Vec<Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spawn(&self, name: &str, f: impl FnOnce() + Send + 'static) {
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(f)
            .expect("spawn proxy thread");
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }
}

/// A TCP proxy on `127.0.0.1:0` forwarding to a target address; see the module docs.
pub struct Proxy {
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.shared.addr)
            .field("target", &self.shared.target)
            .field("blackhole", &self.is_blackholed())
            .finish()
    }
}

impl Proxy {
    /// Starts a proxy listening on `127.0.0.1:0` that forwards each connection to `target`.
    /// The target need not be up yet: a connection is made per accepted client (a client whose
    /// target connection fails is closed).
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy listener");
        let addr = listener.local_addr().expect("proxy local addr");
        let shared = Arc::new(Shared {
            target,
            addr,
            stop: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            counters: Counters::default(),
        });
        let s = shared.clone();
        let accept_thread = std::thread::Builder::new()
            .name(format!("proxy-accept-{}", addr.port()))
            .spawn(move || accept_loop(s, listener))
            .expect("spawn proxy accept thread");
        Proxy {
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// The address clients should dial instead of the target.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// The address connections are forwarded to.
    pub fn target(&self) -> SocketAddr {
        self.shared.target
    }

    /// Turns the blackhole on (drop all bytes, both directions, on existing and new connections)
    /// or off (close every connection that lived through the blackhole; forward new ones).
    pub fn set_blackhole(&self, on: bool) {
        let mut conns = self.shared.conns();
        conns.retain(|c| !c.is_closed());
        self.shared.blackhole.store(on, Ordering::SeqCst);
        for c in conns.iter() {
            if on {
                c.tainted.store(true, Ordering::SeqCst);
            } else if c.tainted.load(Ordering::SeqCst) {
                c.close();
                self.shared
                    .counters
                    .closed_on_heal
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if !on {
            conns.retain(|c| !c.is_closed());
        }
    }

    pub fn is_blackholed(&self) -> bool {
        self.shared.blackhole.load(Ordering::SeqCst)
    }

    /// Closes every current connection (like a connection reset), leaving the blackhole state
    /// as it is.
    pub fn reset_connections(&self) {
        let mut conns = self.shared.conns();
        for c in conns.iter() {
            c.close();
        }
        conns.clear();
    }

    /// Number of connections currently open through the proxy.
    pub fn open_connections(&self) -> usize {
        let mut conns = self.shared.conns();
        conns.retain(|c| !c.is_closed());
        conns.len()
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        ProxyStats {
            accepted: c.accepted.load(Ordering::Relaxed),
            to_target: c.to_target.load(Ordering::Relaxed),
            to_client: c.to_client.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            closed_on_heal: c.closed_on_heal.load(Ordering::Relaxed),
        }
    }

    /// Bytes forwarded in both directions.
    pub fn bytes_forwarded(&self) -> u64 {
        let s = self.stats();
        s.to_target + s.to_client
    }

    /// Bytes discarded by the blackhole in both directions.
    pub fn bytes_dropped(&self) -> u64 {
        self.stats().dropped
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.shared.addr, Duration::from_secs(1));
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        // No new connections can be registered now.
        self.reset_connections();
        // A connection thread may spawn its second pump while we join, so repeat until none is
        // left.
        loop {
            let threads = std::mem::take(
                &mut *self
                    .shared
                    .threads
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()),
            );
            if threads.is_empty() {
                break;
            }
            for t in threads {
                let _ = t.join();
            }
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = stream else {
            // Transient accept errors (e.g. EMFILE): back off briefly.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        let _ = client.set_write_timeout(Some(WRITE_POLL));
        let conn = Arc::new(Conn {
            client,
            upstream: Mutex::new(None),
            tainted: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        {
            let mut conns = shared.conns();
            conns.retain(|c| !c.is_closed());
            conn.tainted
                .store(shared.blackhole.load(Ordering::SeqCst), Ordering::SeqCst);
            conns.push(conn.clone());
        }
        let s = shared.clone();
        shared.spawn("proxy-conn", move || serve(s, conn));
    }
}

/// Connects to the target (unless blackholed) and pumps both directions until the connection
/// closes.
fn serve(shared: Arc<Shared>, conn: Arc<Conn>) {
    let Ok(client_read) = conn.client.try_clone() else {
        conn.close();
        return;
    };
    if conn.tainted.load(Ordering::SeqCst) {
        // Accepted during the blackhole: swallow everything until closed.
        pump(&shared, &conn, client_read, None, Direction::ToTarget);
        conn.close();
        return;
    }
    let upstream = match TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(_) => {
            conn.close();
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let _ = upstream.set_write_timeout(Some(WRITE_POLL));
    let (Ok(upstream_read), Ok(upstream_write), Ok(client_write)) = (
        upstream.try_clone(),
        upstream.try_clone(),
        conn.client.try_clone(),
    ) else {
        conn.close();
        return;
    };
    {
        let mut slot = conn.upstream();
        if conn.is_closed() {
            let _ = upstream.shutdown(Shutdown::Both);
            return;
        }
        *slot = Some(upstream);
    }
    let (s, c) = (shared.clone(), conn.clone());
    shared.spawn("proxy-pump", move || {
        pump(
            &s,
            &c,
            upstream_read,
            Some(client_write),
            Direction::ToClient,
        );
        c.close();
    });
    pump(
        &shared,
        &conn,
        client_read,
        Some(upstream_write),
        Direction::ToTarget,
    );
    conn.close();
}

#[derive(Clone, Copy)]
enum Direction {
    ToTarget,
    ToClient,
}

/// Copies `from` to `to` until EOF or error; drops the bytes while the connection is tainted
/// and the blackhole is on, and stops if it is tainted and the blackhole is off.
fn pump(
    shared: &Shared,
    conn: &Conn,
    mut from: TcpStream,
    mut to: Option<TcpStream>,
    dir: Direction,
) {
    let mut buf = vec![0u8; BUF];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if conn.is_closed() || shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if conn.tainted.load(Ordering::SeqCst) {
            if shared.blackhole.load(Ordering::SeqCst) {
                shared
                    .counters
                    .dropped
                    .fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            return;
        }
        let Some(out) = to.as_mut() else {
            return;
        };
        match write_chunk(shared, conn, out, &buf[..n]) {
            WriteResult::Written => {
                let counter = match dir {
                    Direction::ToTarget => &shared.counters.to_target,
                    Direction::ToClient => &shared.counters.to_client,
                };
                counter.fetch_add(n as u64, Ordering::Relaxed);
            }
            WriteResult::Dropped(rest) => {
                shared
                    .counters
                    .dropped
                    .fetch_add(rest as u64, Ordering::Relaxed);
            }
            WriteResult::Closed => return,
        }
    }
}

enum WriteResult {
    Written,
    /// The blackhole came on mid-write; this many bytes were not written.
    Dropped(usize),
    Closed,
}

/// Writes all of `data`, polling (via the write timeout) for the blackhole and shutdown so a
/// peer that stopped reading cannot wedge the thread.
fn write_chunk(shared: &Shared, conn: &Conn, out: &mut TcpStream, mut data: &[u8]) -> WriteResult {
    while !data.is_empty() {
        if conn.is_closed() || shared.stop.load(Ordering::SeqCst) {
            return WriteResult::Closed;
        }
        if conn.tainted.load(Ordering::SeqCst) {
            return if shared.blackhole.load(Ordering::SeqCst) {
                WriteResult::Dropped(data.len())
            } else {
                WriteResult::Closed
            };
        }
        match out.write(data) {
            Ok(0) => return WriteResult::Closed,
            Ok(n) => data = &data[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return WriteResult::Closed,
        }
    }
    WriteResult::Written
}
