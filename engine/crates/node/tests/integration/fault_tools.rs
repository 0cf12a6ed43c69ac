//! Tests of the fault-test support modules: the history checker (`common/history.rs`) and the
//! blackholing TCP proxy (`common/proxy.rs`).

use crate::common::{history, proxy};

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use history::{
    check, check_converged, check_final, check_ops, report, History, Read, ReadOutcome, Violation,
    Write, WriteOutcome,
};
use proxy::Proxy;

// ---------------------------------------------------------------------------------------------
// history

fn w(
    client: usize,
    key: &str,
    value: &str,
    invoked: u64,
    completed: u64,
    o: WriteOutcome,
) -> Write {
    Write {
        client,
        key: key.to_string(),
        value: value.to_string(),
        invoked,
        completed,
        outcome: o,
    }
}

fn r(client: usize, key: &str, invoked: u64, completed: u64, values: &[&str]) -> Read {
    Read {
        client,
        key: key.to_string(),
        invoked,
        completed,
        outcome: ReadOutcome::Values(values.iter().map(|s| s.to_string()).collect()),
    }
}

fn r_not_found(client: usize, key: &str, invoked: u64, completed: u64) -> Read {
    Read {
        client,
        key: key.to_string(),
        invoked,
        completed,
        outcome: ReadOutcome::NotFound,
    }
}

use WriteOutcome::{Acked, Failed, Unknown};

fn ok(writes: &[Write], reads: &[Read]) -> history::Summary {
    match check_ops(writes, reads) {
        Ok(s) => s,
        Err(v) => panic!("unexpected violations: {}", report(&v, 20)),
    }
}

fn violations(writes: &[Write], reads: &[Read]) -> Vec<Violation> {
    match check_ops(writes, reads) {
        Ok(s) => panic!("expected violations, got {s}"),
        Err(v) => v,
    }
}

#[test]
fn detects_lost_acked_write() {
    let writes = [
        w(0, "k", "c0-0", 10, 20, Acked),
        w(1, "k", "c1-0", 30, 40, Acked),
    ];
    // Read after c1-0 was acked returns only the older c0-0, which completed before c1-0 began.
    let reads = [r(2, "k", 50, 60, &["c0-0"])];
    let v = violations(&writes, &reads);
    assert_eq!(v.len(), 1, "{}", report(&v, 10));
    match &v[0] {
        Violation::LostWrite {
            key,
            write,
            returned,
            others,
            ..
        } => {
            assert_eq!(key, "k");
            assert_eq!(write.value, "c1-0");
            assert_eq!(returned, &["c0-0".to_string()]);
            assert_eq!(*others, 0);
        }
        other => panic!("wrong violation {other}"),
    }
    let text = v[0].to_string();
    for needle in ["\"k\"", "c1-0", "c0-0", "t=30", "t=40", "t=50", "client 2"] {
        assert!(text.contains(needle), "{needle} missing from: {text}");
    }
}

#[test]
fn detects_lost_write_with_count_of_others() {
    let writes = [
        w(0, "k", "a", 10, 20, Acked),
        w(0, "k", "b", 30, 40, Acked),
        w(0, "k", "c", 50, 60, Acked),
    ];
    let v = violations(&writes, &[r(1, "k", 70, 80, &["a"])]);
    assert_eq!(v.len(), 1);
    match &v[0] {
        Violation::LostWrite { write, others, .. } => {
            assert_eq!(write.value, "b");
            assert_eq!(*others, 1);
        }
        other => panic!("wrong violation {other}"),
    }
}

#[test]
fn detects_lost_write_superseded_only_by_a_preceding_write() {
    // The returned value's write (failed, but may have landed) completed before W began, so it
    // cannot supersede W.
    let writes = [
        w(0, "k", "old", 10, 20, Failed),
        w(1, "k", "new", 30, 40, Acked),
    ];
    let v = violations(&writes, &[r(2, "k", 50, 60, &["old"])]);
    assert!(matches!(&v[0], Violation::LostWrite { write, .. } if write.value == "new"));
}

#[test]
fn detects_phantom_value() {
    let writes = [w(0, "k", "c0-0", 10, 20, Acked)];
    let v = violations(&writes, &[r(1, "k", 30, 40, &["c0-0", "bogus"])]);
    assert_eq!(v.len(), 1, "{}", report(&v, 10));
    assert!(
        matches!(&v[0], Violation::PhantomValue { key, value, written_to: None, .. }
            if key == "k" && value == "bogus"),
        "{}",
        v[0]
    );
    assert!(v[0].to_string().contains("bogus"));
}

#[test]
fn detects_value_of_another_key_as_phantom() {
    let writes = [w(0, "a", "c0-0", 10, 20, Acked)];
    let v = violations(&writes, &[r(1, "b", 30, 40, &["c0-0"])]);
    assert!(matches!(&v[0], Violation::PhantomValue { written_to: Some(k), .. } if k == "a"));
}

#[test]
fn detects_value_from_the_future() {
    let writes = [w(0, "k", "later", 50, 60, Unknown)];
    let v = violations(&writes, &[r(1, "k", 10, 20, &["later"])]);
    assert!(matches!(&v[0], Violation::FutureValue { .. }), "{}", v[0]);
}

#[test]
fn detects_not_found_after_acked_write() {
    let writes = [w(0, "k", "c0-0", 10, 20, Acked)];
    let v = violations(&writes, &[r_not_found(1, "k", 30, 40)]);
    assert_eq!(v.len(), 1);
    assert!(
        matches!(&v[0], Violation::NotFoundAfterAck { key, write, .. }
            if key == "k" && write.value == "c0-0"),
        "{}",
        v[0]
    );
    // An empty value list is the same as not found.
    let v = violations(&writes, &[r(1, "k", 30, 40, &[])]);
    assert!(matches!(&v[0], Violation::NotFoundAfterAck { .. }));
}

#[test]
fn accepts_not_found_before_or_during_the_first_write() {
    let writes = [
        w(0, "k", "c0-0", 10, 20, Acked),
        w(0, "j", "x", 1, 2, Failed),
    ];
    let reads = [
        r_not_found(1, "k", 1, 5),
        r_not_found(1, "k", 15, 25),
        r_not_found(1, "j", 15, 25),
    ];
    let s = ok(&writes, &reads);
    assert_eq!(s.reads_not_found, 3);
}

#[test]
fn accepts_concurrent_writes_returned_as_siblings() {
    let writes = [
        w(0, "k", "c0-0", 10, 30, Acked),
        w(1, "k", "c1-0", 15, 25, Acked),
    ];
    let reads = [
        r(2, "k", 40, 50, &["c0-0", "c1-0"]),
        // Either sibling alone also satisfies both writes (each is concurrent with the other,
        // e.g. resolved by last-write-wins).
        r(2, "k", 60, 70, &["c1-0"]),
        r(2, "k", 80, 90, &["c0-0"]),
    ];
    let s = ok(&writes, &reads);
    assert_eq!(s.max_siblings, 2);
    assert_eq!(s.reads_with_siblings, 1);
    assert_eq!(s.writes_acked, 2);
    assert_eq!(s.reads_ok, 3);
}

#[test]
fn accepts_later_write_superseding_an_earlier_one() {
    let writes = [
        w(0, "k", "c0-0", 10, 20, Acked),
        w(0, "k", "c0-1", 30, 40, Acked),
        // A later write whose outcome is unknown may also supersede.
        w(1, "k", "c1-0", 50, 60, Unknown),
    ];
    let reads = [r(1, "k", 45, 48, &["c0-1"]), r(1, "k", 70, 80, &["c1-0"])];
    ok(&writes, &reads);
}

#[test]
fn accepts_failed_write_value_appearing() {
    let writes = [
        w(0, "k", "c0-0", 10, 20, Acked),
        w(1, "k", "c1-0", 30, 40, Failed),
    ];
    let reads = [
        r(2, "k", 50, 60, &["c1-0"]),
        r(2, "k", 70, 80, &["c0-0", "c1-0"]),
    ];
    let s = ok(&writes, &reads);
    assert_eq!(s.writes_failed, 1);
}

#[test]
fn accepts_unknown_write_that_was_invoked_before_the_acked_one() {
    // An unknown-outcome write may be applied late, so it never "precedes" anything.
    let writes = [
        w(0, "k", "maybe", 10, 20, Unknown),
        w(1, "k", "sure", 30, 40, Acked),
    ];
    ok(&writes, &[r(2, "k", 50, 60, &["maybe"])]);
}

#[test]
fn accepts_reads_concurrent_with_the_write_returning_the_old_value() {
    let writes = [
        w(0, "k", "old", 10, 20, Acked),
        w(0, "k", "new", 30, 60, Acked),
    ];
    let reads = [
        // Invoked before "new" completed: concurrent with it, the old value is fine.
        r(1, "k", 35, 45, &["old"]),
        r(1, "k", 55, 70, &["old"]),
        r(1, "k", 40, 50, &["new"]),
        r(1, "k", 65, 75, &["new"]),
    ];
    ok(&writes, &reads);
}

#[test]
fn failed_reads_are_not_checked() {
    let writes = [w(0, "k", "v", 10, 20, Acked)];
    let reads = [Read {
        client: 1,
        key: "k".into(),
        invoked: 30,
        completed: 40,
        outcome: ReadOutcome::Failed,
    }];
    let s = ok(&writes, &reads);
    assert_eq!(s.reads_failed, 1);
}

#[test]
fn detects_duplicate_values() {
    let writes = [w(0, "k", "v", 10, 20, Acked), w(1, "j", "v", 30, 40, Acked)];
    let v = violations(&writes, &[]);
    assert!(matches!(&v[0], Violation::DuplicateValue { value, .. } if value == "v"));
}

#[test]
fn final_reads_check_presence_supersession_and_phantoms() {
    let h = History::new();
    h.push_write(w(0, "a", "a0", 10, 20, Acked));
    h.push_write(w(0, "a", "a1", 30, 40, Acked));
    h.push_write(w(1, "b", "b0", 10, 20, Acked));
    h.push_write(w(2, "b", "b1", 15, 25, Acked));
    h.push_write(w(1, "c", "c0", 10, 20, Failed));

    let mut fin = BTreeMap::new();
    fin.insert("a".to_string(), vec!["a1".to_string()]);
    fin.insert("b".to_string(), vec!["b0".to_string(), "b1".to_string()]);
    check_final(&h, &fin).unwrap_or_else(|v| panic!("{}", report(&v, 10)));

    // "a" rolled back to a0, "b" missing entirely, "c" has a phantom.
    let mut bad = BTreeMap::new();
    bad.insert("a".to_string(), vec!["a0".to_string()]);
    bad.insert("c".to_string(), vec!["c0".to_string(), "zz".to_string()]);
    let v = check_final(&h, &bad).unwrap_err();
    assert_eq!(v.len(), 3, "{}", report(&v, 10));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::LostWrite { key, write, .. } if key == "a" && write.value == "a1")));
    assert!(v
        .iter()
        .any(|v| matches!(v, Violation::NotFoundAfterAck { key, .. } if key == "b")));
    assert!(v.iter().any(
        |v| matches!(v, Violation::PhantomValue { key, value, .. } if key == "c" && value == "zz")
    ));
    assert!(report(&v, 10).contains("final read"));
}

#[test]
fn converged_compares_sibling_sets_across_nodes() {
    let node = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(k, vs)| (k.to_string(), vs.iter().map(|s| s.to_string()).collect()))
            .collect()
    };
    let n0 = node(&[("a", &["x", "y"]), ("b", &["z"])]);
    let n1 = node(&[("a", &["y", "x"]), ("b", &["z"])]);
    check_converged(&[n0.clone(), n1.clone()]).unwrap();
    let n2 = node(&[("a", &["x"])]);
    let v = check_converged(&[n0, n1, n2]).unwrap_err();
    assert_eq!(v.len(), 2, "{}", report(&v, 10));
    assert!(v[0].to_string().contains("node 2"));
}

#[test]
fn recorder_is_shared_monotonic_and_checkable() {
    let h = History::new();
    let t0 = h.now();
    let threads: Vec<_> = (0..4)
        .map(|c| {
            let h = h.clone();
            std::thread::spawn(move || {
                for n in 0..200 {
                    // Each client its own keys, so its read of its own write is the latest.
                    let key = format!("c{c}-k{}", n % 3);
                    let value = format!("c{c}-{n}");
                    let t = h.begin_write(c, &key, &value);
                    h.end_write(t, Acked);
                    let t = h.begin_read(c, &key);
                    h.end_read(t, ReadOutcome::Values(vec![value]));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // A write in flight at snapshot time counts as unknown.
    let _pending = h.begin_write(9, "c0-k0", "pending");
    let _pending_read = h.begin_read(9, "c0-k0");
    assert!(h.now() > t0);
    assert_eq!(h.len(), 4 * 400 + 2);
    let writes = h.writes();
    let pending = writes.iter().find(|w| w.value == "pending").unwrap();
    assert_eq!(pending.outcome, Unknown);
    assert_eq!(pending.completed, u64::MAX);
    assert_eq!(h.reads().len(), 800, "reads in flight are left out");
    let mut times: Vec<u64> = writes
        .iter()
        .flat_map(|w| [w.invoked, w.completed])
        .chain(h.reads().iter().flat_map(|r| [r.invoked, r.completed]))
        .collect();
    times.sort_unstable();
    let n = times.len();
    times.dedup();
    assert_eq!(times.len(), n, "clock readings are unique");
    let s = check(&h).unwrap_or_else(|v| panic!("{}", report(&v, 10)));
    assert_eq!(s.writes_acked, 800);
    assert_eq!(s.writes_unknown, 1);
    assert_eq!(s.reads_ok, 800);
    assert_eq!(s.keys, 12);
}

/// xorshift64*: deterministic randomness without dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A linearizable (hence valid) history: each operation takes effect at a point between its
/// invocation and completion; some writes fail (taking effect or not) or end unknown.
fn simulated_history(ops: usize, keys: usize, seed: u64) -> (Vec<Write>, Vec<Read>) {
    let mut rng = Rng(seed);
    let mut current: Vec<Option<String>> = vec![None; keys];
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for i in 0..ops {
        let point = 1_000 + i as u64 * 10;
        let invoked = point - rng.below(200);
        let completed = point + rng.below(200);
        let client = rng.below(16) as usize;
        let k = rng.below(keys as u64) as usize;
        let key = format!("k{k}");
        if rng.below(2) == 0 {
            let value = format!("c{client}-{i}");
            let outcome = match rng.below(20) {
                0 => Failed,
                1 => Unknown,
                _ => Acked,
            };
            // Failed writes reach a replica half the time.
            if outcome != Failed || rng.below(2) == 0 {
                current[k] = Some(value.clone());
            }
            writes.push(w(client, &key, &value, invoked, completed, outcome));
        } else {
            let outcome = match (&current[k], rng.below(50)) {
                (_, 0) => ReadOutcome::Failed,
                (None, _) => ReadOutcome::NotFound,
                (Some(v), _) => ReadOutcome::Values(vec![v.clone()]),
            };
            reads.push(Read {
                client,
                key,
                invoked,
                completed,
                outcome,
            });
        }
    }
    (writes, reads)
}

#[test]
fn large_history_checks_quickly_and_finds_an_injected_bug() {
    let (writes, mut reads) = simulated_history(60_000, 8, 0x5eed);
    let start = Instant::now();
    let s = ok(&writes, &reads);
    let elapsed = start.elapsed();
    eprintln!("checked 60000 ops in {elapsed:?}: {s}");
    assert!(elapsed < Duration::from_secs(5), "too slow: {elapsed:?}");
    assert_eq!(
        s.writes_acked + s.writes_failed + s.writes_unknown,
        writes.len()
    );

    // Make one late read of a busy key return the key's first acked value: a rollback.
    let first = writes.iter().find(|w| w.outcome == Acked).unwrap().clone();
    let victim = reads
        .iter_mut()
        .rev()
        .find(|r| r.key == first.key && matches!(r.outcome, ReadOutcome::Values(_)))
        .unwrap();
    victim.outcome = ReadOutcome::Values(vec![first.value.clone()]);
    let v = violations(&writes, &reads);
    assert_eq!(v.len(), 1, "{}", report(&v, 10));
    match &v[0] {
        Violation::LostWrite { key, others, .. } => {
            assert_eq!(key, &first.key);
            assert!(
                *others > 100,
                "most of the key's acked writes are lost: {others}"
            );
        }
        other => panic!("wrong violation {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// proxy

/// An echo server on 127.0.0.1:0 (a thread per connection; lives until the test exits).
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn roundtrip(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).unwrap();
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, msg);
}

/// Asserts nothing arrives on `s` within `wait`.
fn assert_silent(s: &mut TcpStream, wait: Duration) {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected silence, got {other:?}"),
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
}

/// Asserts `s` gets closed (EOF or reset) within a few seconds.
fn assert_closed(s: &mut TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => {}
        Err(e) if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn proxy_forwards_both_directions() {
    let proxy = Proxy::start(echo_server());
    assert_ne!(proxy.addr(), proxy.target());
    let mut s = connect(proxy.addr());
    roundtrip(&mut s, b"hello");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut reader = s.try_clone().unwrap();
    let expect = big.clone();
    let echo = std::thread::spawn(move || {
        let mut got = vec![0u8; expect.len()];
        reader.read_exact(&mut got).unwrap();
        assert!(got == expect, "echoed bytes differ");
    });
    s.write_all(&big).unwrap();
    echo.join().unwrap();
    // The proxy counts a chunk after writing it: the client may read it first.
    let n = 5 + big.len() as u64;
    wait_until("the proxy to count every byte", || {
        let st = proxy.stats();
        st.to_target >= n && st.to_client >= n
    });
    let stats = proxy.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.to_target, 5 + big.len() as u64);
    assert_eq!(stats.to_client, 5 + big.len() as u64);
    assert_eq!(proxy.bytes_forwarded(), 2 * (5 + big.len() as u64));
    assert_eq!(proxy.bytes_dropped(), 0);
    assert_eq!(proxy.open_connections(), 1);
}

#[test]
fn blackhole_drops_bytes_then_heal_closes_old_and_forwards_new() {
    let proxy = Proxy::start(echo_server());
    let mut old = connect(proxy.addr());
    roundtrip(&mut old, b"before");

    proxy.set_blackhole(true);
    assert!(proxy.is_blackholed());
    old.write_all(b"into the void").unwrap();
    assert_silent(&mut old, Duration::from_millis(300));
    wait_until("bytes dropped", || proxy.bytes_dropped() >= 13);

    // A new connection is accepted but nothing is forwarded.
    let mut during = connect(proxy.addr());
    during.write_all(b"anyone?").unwrap();
    assert_silent(&mut during, Duration::from_millis(300));
    wait_until("bytes dropped", || proxy.bytes_dropped() >= 20);
    let forwarded = proxy.bytes_forwarded();

    proxy.set_blackhole(false);
    assert_closed(&mut old);
    assert_closed(&mut during);
    assert_eq!(proxy.stats().closed_on_heal, 2);
    assert_eq!(
        proxy.bytes_forwarded(),
        forwarded,
        "nothing forwarded during blackhole"
    );

    let mut fresh = connect(proxy.addr());
    roundtrip(&mut fresh, b"after");
    assert_eq!(proxy.open_connections(), 1);
}

#[test]
fn blackhole_drops_the_return_direction_too() {
    // A target that writes unprompted: with the blackhole on, nothing reaches the client.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let target = listener.local_addr().unwrap();
    let proxy = Proxy::start(target);
    let mut client = connect(proxy.addr());
    let (mut server, _) = listener.accept().unwrap();
    server.write_all(b"ping").unwrap();
    let mut buf = [0u8; 4];
    client.read_exact(&mut buf).unwrap();
    proxy.set_blackhole(true);
    server.write_all(b"pong").unwrap();
    assert_silent(&mut client, Duration::from_millis(300));
    wait_until("bytes dropped", || proxy.bytes_dropped() >= 4);
    // And the server gets nothing from the client.
    client.write_all(b"hi").unwrap();
    assert_silent(&mut server, Duration::from_millis(300));
    proxy.set_blackhole(false);
    assert_closed(&mut client);
    assert_closed(&mut server);
}

#[test]
fn unreachable_target_closes_the_client() {
    let target = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let proxy = Proxy::start(target);
    let mut s = connect(proxy.addr());
    assert_closed(&mut s);
    assert_eq!(proxy.stats().accepted, 1);
}

#[test]
fn reset_and_drop_close_connections() {
    let proxy = Proxy::start(echo_server());
    let mut a = connect(proxy.addr());
    roundtrip(&mut a, b"x");
    proxy.reset_connections();
    assert_closed(&mut a);
    let mut b = connect(proxy.addr());
    roundtrip(&mut b, b"y");
    let addr = proxy.addr();
    let start = Instant::now();
    drop(proxy);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "drop took {:?}",
        start.elapsed()
    );
    assert_closed(&mut b);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

#[tokio::test]
async fn proxy_works_inside_a_tokio_runtime() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let proxy = Proxy::start(echo_server());
    let mut s = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(b"async").await.unwrap();
    let mut buf = [0u8; 5];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"async");

    proxy.set_blackhole(true);
    s.write_all(b"lost").await.unwrap();
    let mut one = [0u8; 1];
    let res = tokio::time::timeout(Duration::from_millis(300), s.read(&mut one)).await;
    assert!(res.is_err(), "expected no echo, got {res:?}");
    proxy.set_blackhole(false);
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut one))
        .await
        .expect("closed on heal")
        .unwrap_or(0);
    assert_eq!(n, 0);

    let mut s = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(b"again").await.unwrap();
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"again");
    drop(proxy);
}
