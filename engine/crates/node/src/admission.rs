//! Overload protection: bounded admission of engine calls per vnode.
//!
//! Every engine call of the KV service (and every page of its streams) first asks its vnode for a
//! slot. A vnode runs at most `limits.vnode_concurrency` calls at once and lets at most
//! `limits.vnode_queue` more wait, first come first served. A call that cannot *start* before its
//! deadline is refused at once with `UNAVAILABLE` and a retry hint instead of joining an
//! unbounded queue; so is a call that finds the queue full. The number of blocking threads the
//! KV service can occupy is therefore at most `ring_size × vnode_concurrency`, and the number of
//! waiting requests at most `ring_size × vnode_queue`.
//!
//! The decision is the pure function [`decide`] (table-tested below); [`Admission`] only keeps
//! the counts, the FIFO of waiters and a moving average of the service time, and runs the timers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tonic::Status;

/// The configured bounds of one vnode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Engine calls running at once.
    pub concurrency: u32,
    /// Calls waiting for a slot; 0 refuses every call that finds all slots busy.
    pub queue: u32,
}

/// What a vnode looks like when a request arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub limits: Limits,
    /// Calls holding a slot.
    pub running: u32,
    /// Calls waiting for a slot.
    pub queued: u32,
    /// Moving average of how long a call holds its slot (zero until one has finished).
    pub service_time: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A slot is free and nobody waits: start now.
    Admit,
    /// Wait in the vnode's queue until a slot frees or the deadline passes.
    Queue,
    Reject(Reason),
}

/// Why a request was refused. The names are stable (they appear in messages and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The deadline had passed when the request arrived.
    Expired,
    /// `queue` requests already wait.
    QueueFull,
    /// At the vnode's recent pace the request would start only after its deadline.
    WouldMissDeadline,
    /// It waited in the queue until its deadline without getting a slot.
    TimedOutInQueue,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::QueueFull => "queue_full",
            Reason::WouldMissDeadline => "would_miss_deadline",
            Reason::TimedOutInQueue => "timed_out_in_queue",
        }
    }
}

/// Expected time until a request that joins the queue now gets a slot: the vnode completes about
/// `concurrency` calls per `service_time`, and `queued + 1` must start before this one has.
pub fn expected_wait(s: &State) -> Duration {
    let ahead = s.queued.saturating_add(1);
    s.service_time.saturating_mul(ahead) / s.limits.concurrency.max(1)
}

/// Whether a call arriving now starts at once: a free slot, and nobody queued ahead of it.
pub fn can_start_now(s: &State) -> bool {
    s.running < s.limits.concurrency && s.queued == 0
}

/// Admit now, queue, or refuse (and why). `deadline` is the latest moment the call may *start*.
///
/// 1. a deadline already passed → `Reject(Expired)`;
/// 2. a free slot and an empty queue → `Admit` (a non-empty queue goes first: FIFO);
/// 3. a full queue → `Reject(QueueFull)`;
/// 4. `now + expected_wait` after the deadline → `Reject(WouldMissDeadline)`;
/// 5. otherwise → `Queue`.
pub fn decide(s: &State, now: Instant, deadline: Instant) -> Verdict {
    if deadline <= now {
        return Verdict::Reject(Reason::Expired);
    }
    if can_start_now(s) {
        return Verdict::Admit;
    }
    if s.queued >= s.limits.queue {
        return Verdict::Reject(Reason::QueueFull);
    }
    if now + expected_wait(s) > deadline {
        return Verdict::Reject(Reason::WouldMissDeadline);
    }
    Verdict::Queue
}

/// The retry hint sent with a refusal: how long the vnode needs to drain what is queued now
/// (at least 1 ms, at most 10 s).
pub fn retry_after(s: &State) -> Duration {
    expected_wait(s).clamp(Duration::from_millis(1), Duration::from_secs(10))
}

/// The latest moment a request that arrived at `arrival` may start. With the client's own
/// timeout, a margin (a tenth of it, at most 100 ms) is kept so the refusal reaches the client
/// before the client gives up; without one, the configured default applies in full.
pub fn start_deadline(
    arrival: Instant,
    client_timeout: Option<Duration>,
    default: Duration,
) -> Instant {
    match client_timeout {
        Some(t) => arrival + t - (t / 10).min(Duration::from_millis(100)),
        None => arrival + default,
    }
}

/// The `grpc-timeout` header's value (gRPC over HTTP/2: up to 8 digits and a unit H M S m u n).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.is_empty() || !v.is_ascii() {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A refused request: which vnode, why, and what the vnode looked like.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub vnode: usize,
    pub reason: Reason,
    pub state: State,
    pub retry_after: Duration,
}

impl Rejection {
    /// `UNAVAILABLE`, the reason in words, and the hint as `retry-after-ms` metadata.
    pub fn to_status(&self) -> Status {
        let why = match self.reason {
            Reason::Expired => "the request's deadline had passed on arrival".to_string(),
            Reason::QueueFull => format!("its queue is full ({} waiting)", self.state.queued),
            Reason::WouldMissDeadline => format!(
                "the request would not start before its deadline ({} waiting, about {} ms)",
                self.state.queued,
                expected_wait(&self.state).as_millis()
            ),
            Reason::TimedOutInQueue => format!(
                "the request waited until its deadline without starting ({} waiting)",
                self.state.queued
            ),
        };
        let ms = self.retry_after.as_millis().max(1);
        let mut st = Status::unavailable(format!(
            "vnode {} is overloaded ({}): {why}, {} running (limit {}), queue limit {}; retry after {ms} ms",
            self.vnode,
            self.reason.name(),
            self.state.running,
            self.state.limits.concurrency,
            self.state.limits.queue,
        ));
        st.metadata_mut()
            .insert("retry-after-ms", ms.to_string().parse().expect("digits"));
        st
    }
}

struct Waiter {
    id: u64,
    grant: oneshot::Sender<()>,
}

struct Slot {
    running: u32,
    waiters: VecDeque<Waiter>,
    next_id: u64,
    /// Moving average (1/8 weight per sample) of the time a slot is held.
    service: Duration,
}

/// The admission state of every vnode of the node.
pub struct Admission {
    limits: Limits,
    vnodes: Vec<Mutex<Slot>>,
}

/// A slot on one vnode, held while the engine call runs; dropping it hands the slot to the
/// oldest waiter (or frees it) and records how long it was held.
pub struct Permit {
    admission: Arc<Admission>,
    vnode: usize,
    since: Instant,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.admission
            .release(self.vnode, Some(self.since.elapsed()));
    }
}

/// A queued request's place; if the request goes away (the client cancelled) it leaves the queue,
/// and a slot granted in the meantime is passed on.
struct Place {
    admission: Arc<Admission>,
    vnode: usize,
    id: u64,
    grant: Option<oneshot::Receiver<()>>,
}

impl Place {
    /// Leave the queue; true if a slot had been granted (the caller then owns it).
    fn leave(&mut self) -> bool {
        let mut slot = self.admission.vnodes[self.vnode].lock();
        if let Some(i) = slot.waiters.iter().position(|w| w.id == self.id) {
            slot.waiters.remove(i);
            self.grant = None;
            return false;
        }
        // Not queued any more: a release popped it and sent the grant under the same lock.
        drop(slot);
        matches!(self.grant.take().map(|mut g| g.try_recv()), Some(Ok(())))
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.grant.is_some() && self.leave() {
            self.admission.release(self.vnode, None);
        }
    }
}

impl Admission {
    pub fn new(vnodes: usize, limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            vnodes: (0..vnodes)
                .map(|_| {
                    Mutex::new(Slot {
                        running: 0,
                        waiters: VecDeque::new(),
                        next_id: 0,
                        service: Duration::ZERO,
                    })
                })
                .collect(),
        })
    }

    fn state(&self, slot: &Slot) -> State {
        State {
            limits: self.limits,
            running: slot.running,
            queued: slot.waiters.len() as u32,
            service_time: slot.service,
        }
    }

    /// The current state of one vnode (for logs and tests).
    pub fn snapshot(&self, vnode: usize) -> State {
        self.state(&self.vnodes[vnode].lock())
    }

    fn reject(&self, vnode: usize, reason: Reason, state: State) -> Rejection {
        log::debug!("refused a request on vnode {vnode}: {}", reason.name());
        Rejection {
            vnode,
            reason,
            state,
            retry_after: retry_after(&state),
        }
    }

    /// A slot on `vnode` now, when one is free and nobody waits for one (for a call that will
    /// not queue: a read answered on the reactor from memory; it goes the queued way otherwise).
    pub fn try_acquire(self: &Arc<Self>, vnode: usize) -> Option<Permit> {
        let mut slot = self.vnodes[vnode].lock();
        if !can_start_now(&self.state(&slot)) {
            return None;
        }
        slot.running += 1;
        Some(Permit {
            admission: self.clone(),
            vnode,
            since: Instant::now(),
        })
    }

    /// A slot on `vnode` that starts no later than `deadline`, or the reason there is none.
    pub async fn acquire(
        self: &Arc<Self>,
        vnode: usize,
        deadline: Instant,
    ) -> Result<Permit, Rejection> {
        let permit = |a: &Arc<Admission>| Permit {
            admission: a.clone(),
            vnode,
            since: Instant::now(),
        };
        let mut place = {
            let mut slot = self.vnodes[vnode].lock();
            let state = self.state(&slot);
            match decide(&state, Instant::now(), deadline) {
                Verdict::Admit => {
                    slot.running += 1;
                    return Ok(permit(self));
                }
                Verdict::Reject(reason) => return Err(self.reject(vnode, reason, state)),
                Verdict::Queue => {
                    let (tx, rx) = oneshot::channel();
                    let id = slot.next_id;
                    slot.next_id += 1;
                    slot.waiters.push_back(Waiter { id, grant: tx });
                    Place {
                        admission: self.clone(),
                        vnode,
                        id,
                        grant: Some(rx),
                    }
                }
            }
        };
        let grant = place.grant.as_mut().expect("queued");
        match tokio::time::timeout_at(deadline.into(), grant).await {
            Ok(Ok(())) => {
                place.grant = None;
                Ok(permit(self))
            }
            // Timed out (or, impossibly, the sender vanished): leave the queue, unless a slot
            // was granted at the last moment, which this request then uses.
            _ => {
                if place.leave() {
                    return Ok(permit(self));
                }
                let state = self.snapshot(vnode);
                Err(self.reject(vnode, Reason::TimedOutInQueue, state))
            }
        }
    }

    /// Give a slot back: to the oldest waiter, or free it.
    fn release(&self, vnode: usize, held: Option<Duration>) {
        let mut slot = self.vnodes[vnode].lock();
        if let Some(h) = held {
            slot.service = if slot.service.is_zero() {
                h
            } else {
                (slot.service * 7 + h) / 8
            };
        }
        while let Some(w) = slot.waiters.pop_front() {
            if w.grant.send(()).is_ok() {
                return; // the slot passes on; `running` is unchanged
            }
        }
        slot.running = slot.running.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn st(concurrency: u32, queue: u32, running: u32, queued: u32, svc_ms: u64) -> State {
        State {
            limits: Limits { concurrency, queue },
            running,
            queued,
            service_time: MS * svc_ms as u32,
        }
    }

    #[test]
    fn decide_table() {
        use Reason::*;
        use Verdict::*;
        let now = Instant::now();
        // (case, state, deadline from now in ms (negative: passed), verdict)
        let cases: &[(&str, State, i64, Verdict)] = &[
            ("idle vnode", st(4, 8, 0, 0, 0), 100, Admit),
            ("last free slot", st(4, 8, 3, 0, 50), 100, Admit),
            ("free slot, short deadline", st(4, 8, 3, 0, 500), 1, Admit),
            ("deadline passed", st(4, 8, 0, 0, 0), -1, Reject(Expired)),
            ("deadline is now", st(4, 8, 0, 0, 0), 0, Reject(Expired)),
            ("all busy, room, no history", st(4, 8, 4, 0, 0), 100, Queue),
            ("all busy, room, fast vnode", st(4, 8, 4, 3, 10), 100, Queue),
            // 4 ahead + this one over 4 slots at 80 ms each: about 100 ms.
            ("wait exactly the deadline", st(4, 8, 4, 4, 80), 100, Queue),
            (
                "wait past the deadline",
                st(4, 8, 4, 5, 80),
                100,
                Reject(WouldMissDeadline),
            ),
            (
                "one slot, slow calls",
                st(1, 8, 1, 0, 200),
                100,
                Reject(WouldMissDeadline),
            ),
            ("queue full", st(4, 8, 4, 8, 0), 10_000, Reject(QueueFull)),
            (
                "queue over full",
                st(4, 8, 4, 9, 0),
                10_000,
                Reject(QueueFull),
            ),
            (
                "no queue allowed",
                st(4, 0, 4, 0, 0),
                10_000,
                Reject(QueueFull),
            ),
            // A free slot but others waiting (a slot being handed over): join the queue.
            ("free slot but a queue", st(4, 8, 3, 1, 10), 100, Queue),
            (
                "a passed deadline before a full queue",
                st(4, 8, 4, 8, 0),
                -5,
                Reject(Expired),
            ),
        ];
        for (name, s, in_ms, want) in cases {
            let deadline = if *in_ms >= 0 {
                now + MS * *in_ms as u32
            } else {
                now - MS * (-*in_ms) as u32
            };
            assert_eq!(decide(s, now, deadline), *want, "{name}: {s:?}");
        }
    }

    #[test]
    fn expected_wait_and_retry_hint() {
        assert_eq!(expected_wait(&st(4, 8, 4, 3, 10)), MS * 10);
        assert_eq!(expected_wait(&st(1, 8, 1, 0, 7)), MS * 7);
        assert_eq!(expected_wait(&st(2, 8, 2, 5, 10)), MS * 30);
        assert_eq!(retry_after(&st(4, 8, 4, 0, 0)), MS, "at least 1 ms");
        assert_eq!(retry_after(&st(4, 8, 4, 7, 40)), MS * 80);
        assert_eq!(
            retry_after(&st(1, 100, 1, 99, 1000)),
            Duration::from_secs(10),
            "at most 10 s"
        );
    }

    #[test]
    fn start_deadline_keeps_a_margin_before_the_clients_deadline() {
        let t = Instant::now();
        let d = Duration::from_secs(2);
        let cases: &[(Option<u64>, u64)] = &[
            (None, 2000),          // the default in full
            (Some(50), 45),        // a tenth
            (Some(1000), 900),     // a tenth
            (Some(10_000), 9_900), // at most 100 ms
            (Some(0), 0),          // already due
        ];
        for (client, want) in cases {
            let got = start_deadline(t, client.map(|ms| MS * ms as u32), d);
            assert_eq!(got - t, MS * *want as u32, "client timeout {client:?}");
        }
    }

    #[test]
    fn grpc_timeout_values() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("100m", Some(MS * 100)),
            ("3S", Some(Duration::from_secs(3))),
            ("2M", Some(Duration::from_secs(120))),
            ("1H", Some(Duration::from_secs(3600))),
            ("250u", Some(Duration::from_micros(250))),
            ("99999999n", Some(Duration::from_nanos(99_999_999))),
            ("123456789m", None),
            ("m", None),
            ("", None),
            ("10x", None),
            ("-1S", None),
            ("1.5S", None),
        ];
        for (v, want) in cases {
            assert_eq!(parse_grpc_timeout(v), *want, "{v:?}");
        }
    }

    #[test]
    fn rejection_status_names_the_vnode_and_carries_a_hint() {
        let r = Rejection {
            vnode: 5,
            reason: Reason::QueueFull,
            state: st(2, 3, 2, 3, 20),
            retry_after: MS * 40,
        };
        let s = r.to_status();
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(s.message().contains("vnode 5"), "{}", s.message());
        assert!(s.message().contains("queue_full"), "{}", s.message());
        assert!(s.message().contains("3 waiting"), "{}", s.message());
        assert_eq!(s.metadata().get("retry-after-ms").unwrap(), "40");
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    /// The executing part: slots, FIFO hand-over, queue limit, time-outs and cancellation leave
    /// the counts right.
    #[test]
    fn slots_are_handed_over_in_order_and_never_leak() {
        rt().block_on(async {
            let a = Admission::new(
                1,
                Limits {
                    concurrency: 1,
                    queue: 2,
                },
            );
            let far = Instant::now() + Duration::from_secs(30);
            let p1 = a.acquire(0, far).await.unwrap();
            assert_eq!(a.snapshot(0).running, 1);
            // Two wait; the third finds the queue full.
            let (a2, a3) = (a.clone(), a.clone());
            let w2 = tokio::spawn(async move { a2.acquire(0, far).await.map(|_p| 2) });
            tokio::task::yield_now().await;
            let w3 = tokio::spawn(async move { a3.acquire(0, far).await.map(|_p| 3) });
            tokio::task::yield_now().await;
            assert_eq!(a.snapshot(0).queued, 2);
            let e = a.acquire(0, far).await.err().unwrap();
            assert_eq!(e.reason, Reason::QueueFull);
            drop(p1);
            assert_eq!(w2.await.unwrap().unwrap(), 2);
            assert_eq!(w3.await.unwrap().unwrap(), 3);
            let s = a.snapshot(0);
            assert_eq!((s.running, s.queued), (0, 0));

            // A waiter whose deadline passes leaves the queue with TimedOutInQueue.
            let p = a.acquire(0, far).await.unwrap();
            let soon = Instant::now() + MS * 20;
            let e = a.acquire(0, soon).await.err().unwrap();
            assert_eq!(e.reason, Reason::TimedOutInQueue);
            assert_eq!(a.snapshot(0).queued, 0);
            // A waiter that is dropped (client cancelled) leaves the queue too.
            let a4 = a.clone();
            let w = tokio::spawn(async move { a4.acquire(0, far).await.map(|_| ()) });
            tokio::task::yield_now().await;
            assert_eq!(a.snapshot(0).queued, 1);
            w.abort();
            let _ = w.await;
            assert_eq!(a.snapshot(0).queued, 0);
            drop(p);
            let s = a.snapshot(0);
            assert_eq!((s.running, s.queued), (0, 0));
            assert!(s.service_time > Duration::ZERO);
        });
    }
}
