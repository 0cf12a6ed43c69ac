//! Operation history recorder and checker for fault tests against a replicated key-value store
//! with sibling semantics (Dynamo/Riak style: a GET may return several concurrent values).
//!
//! A fault test runs concurrent clients against the cluster while it injects faults, and records
//! every operation in a [`History`]: each write with its (unique) value and each read with the
//! values it returned, both with the clock times at which the client invoked the operation and
//! saw its outcome. The clock ([`History::now`]) is shared by all clients and strictly
//! increasing, so "A completed before B was invoked" is a real-time order between operations.
//!
//! [`check`] then verifies the history against these rules, each violation being a
//! [`Violation`]:
//!
//! * **(a) No phantom value** ([`Violation::PhantomValue`], [`Violation::FutureValue`]): every
//!   value a read returns was written to that key by some write, whatever the write's outcome (a
//!   failed or unknown write may still have reached a replica). A value that was never written
//!   (or was written to another key) means the store invented or corrupted data; a value whose
//!   write was invoked only after the read completed means the read returned something from the
//!   future, i.e. the history (or the store) is broken.
//! * **(b) No lost acknowledged write** ([`Violation::LostWrite`], [`Violation::NotFoundAfterAck`]):
//!   for every acknowledged write `W` of key `k` and every successful read `R` of `k` invoked
//!   after `W` completed, `R` returns `W`'s value, or some value written by a write `W'` of `k`
//!   that is not known to precede `W` (i.e. `W'` did not complete before `W` was invoked, so it
//!   is concurrent with or later than `W` and may legitimately have superseded it, by causality
//!   or by last-write-wins). A read violating this shows that an acknowledged write was lost (or
//!   rolled back to an older state). Since these histories have no deletes, `NotFound` after an
//!   acknowledged write of the key is always such a violation. Reads invoked before `W`
//!   completed are concurrent with it and may return the older state.
//!   A write whose outcome is [`WriteOutcome::Unknown`] (timeout, transport error, still in
//!   flight) may take effect at any later time, so it never counts as preceding anything; a
//!   [`WriteOutcome::Failed`] write counts as complete at its recorded completion time. Classify
//!   a write as `Failed` only when the coordinator reported the failure; client-side timeouts
//!   and connection errors are `Unknown`.
//! * **(c) Convergence** ([`check_final`]): after the faults heal and replication settles, the
//!   test reads every key (from every node); each acknowledged write must be present in the
//!   final values or superseded per rule (b), and the final values may contain no phantom.
//!   [`check_converged`] additionally checks that all nodes return the same sibling sets.
//!
//! A history whose values are not unique per write cannot be checked reliably;
//! [`Violation::DuplicateValue`] reports that (it is a bug in the test, not in the store).
//!
//! The checker indexes writes by value and by key and answers each read with a binary search
//! over the key's acknowledged writes, so histories of ~10^5 operations check in milliseconds.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A clock reading: nanoseconds since the [`History`] was created (strictly increasing across
/// all clients), or any logical clock for hand-built histories.
pub type Time = u64;

/// How a write ended, as seen by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteOutcome {
    /// The coordinator acknowledged the write (the write quorum was met).
    Acked,
    /// The coordinator reported a failure. The value may still have reached some replica.
    Failed,
    /// The client does not know (timeout, connection error, or never completed).
    Unknown,
}

/// What a read returned, as seen by the client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ReadOutcome {
    /// The key's sibling values (one value unless there are concurrent writes). An empty list is
    /// treated like `NotFound`.
    Values(Vec<String>),
    /// The store reported that the key does not exist.
    NotFound,
    /// The read failed (error or timeout); it is not checked.
    Failed,
}

/// One recorded write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub client: usize,
    pub key: String,
    /// Must be unique across the whole history (e.g. `"c{client}-{n}"`).
    pub value: String,
    pub invoked: Time,
    /// When the client saw the outcome; `Time::MAX` for a write that never completed.
    pub completed: Time,
    pub outcome: WriteOutcome,
}

impl Write {
    /// The time after which the write can no longer take effect, for the "precedes" relation of
    /// rule (b): its completion time, except for an unknown-outcome write which may still be
    /// applied at any later time.
    pub fn effective_completion(&self) -> Time {
        match self.outcome {
            WriteOutcome::Acked | WriteOutcome::Failed => self.completed,
            WriteOutcome::Unknown => Time::MAX,
        }
    }
}

/// One recorded read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub client: usize,
    pub key: String,
    pub invoked: Time,
    pub completed: Time,
    pub outcome: ReadOutcome,
}

/// Any recorded operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Write(Write),
    Read(Read),
}

/// Handle for a write begun with [`History::begin_write`]; pass it to [`History::end_write`].
#[must_use = "end the write with History::end_write"]
#[derive(Debug)]
pub struct WriteToken(usize);

/// Handle for a read begun with [`History::begin_read`]; pass it to [`History::end_read`].
#[must_use = "end the read with History::end_read"]
#[derive(Debug)]
pub struct ReadToken(usize);

struct Inner {
    start: Instant,
    last: Time,
    writes: Vec<Write>,
    write_done: Vec<bool>,
    reads: Vec<Read>,
    read_done: Vec<bool>,
}

impl Inner {
    /// Nanoseconds since start, strictly greater than any earlier reading.
    fn tick(&mut self) -> Time {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(Time::MAX - 1);
        self.last = elapsed.max(self.last + 1);
        self.last
    }
}

/// A shared, thread-safe operation recorder. Clones record into the same history.
#[derive(Clone)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("History")
            .field("writes", &inner.writes.len())
            .field("reads", &inner.reads.len())
            .finish()
    }
}

impl History {
    pub fn new() -> Self {
        History {
            inner: Arc::new(Mutex::new(Inner {
                start: Instant::now(),
                last: 0,
                writes: Vec::new(),
                write_done: Vec::new(),
                reads: Vec::new(),
                read_done: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared clock: nanoseconds since the history was created, strictly increasing across
    /// all callers (two readings never compare equal).
    pub fn now(&self) -> Time {
        self.lock().tick()
    }

    /// Records the invocation of a write; call it just before sending the request.
    pub fn begin_write(
        &self,
        client: usize,
        key: impl Into<String>,
        value: impl Into<String>,
    ) -> WriteToken {
        let mut inner = self.lock();
        let invoked = inner.tick();
        inner.writes.push(Write {
            client,
            key: key.into(),
            value: value.into(),
            invoked,
            completed: Time::MAX,
            outcome: WriteOutcome::Unknown,
        });
        inner.write_done.push(false);
        WriteToken(inner.writes.len() - 1)
    }

    /// Records the outcome of a write; call it just after the response (or error) arrived.
    pub fn end_write(&self, token: WriteToken, outcome: WriteOutcome) {
        let mut inner = self.lock();
        let completed = inner.tick();
        assert!(!inner.write_done[token.0], "write ended twice");
        inner.write_done[token.0] = true;
        let w = &mut inner.writes[token.0];
        w.completed = completed;
        w.outcome = outcome;
    }

    /// Records the invocation of a read; call it just before sending the request.
    pub fn begin_read(&self, client: usize, key: impl Into<String>) -> ReadToken {
        let mut inner = self.lock();
        let invoked = inner.tick();
        inner.reads.push(Read {
            client,
            key: key.into(),
            invoked,
            completed: Time::MAX,
            outcome: ReadOutcome::Failed,
        });
        inner.read_done.push(false);
        ReadToken(inner.reads.len() - 1)
    }

    /// Records what a read returned; call it just after the response (or error) arrived.
    pub fn end_read(&self, token: ReadToken, outcome: ReadOutcome) {
        let mut inner = self.lock();
        let completed = inner.tick();
        assert!(!inner.read_done[token.0], "read ended twice");
        inner.read_done[token.0] = true;
        let r = &mut inner.reads[token.0];
        r.completed = completed;
        r.outcome = outcome;
    }

    /// Adds a complete write with explicit times (for hand-built histories).
    pub fn push_write(&self, w: Write) {
        let mut inner = self.lock();
        inner.writes.push(w);
        inner.write_done.push(true);
    }

    /// Adds a complete read with explicit times (for hand-built histories).
    pub fn push_read(&self, r: Read) {
        let mut inner = self.lock();
        inner.reads.push(r);
        inner.read_done.push(true);
    }

    /// Adds complete operations with explicit times.
    pub fn extend(&self, ops: impl IntoIterator<Item = Op>) {
        for op in ops {
            match op {
                Op::Write(w) => self.push_write(w),
                Op::Read(r) => self.push_read(r),
            }
        }
    }

    /// Snapshot of the writes in invocation-recording order. A write not yet ended appears with
    /// outcome `Unknown` and completion `Time::MAX`.
    pub fn writes(&self) -> Vec<Write> {
        self.lock().writes.clone()
    }

    /// Snapshot of the ended reads (reads still in flight are left out).
    pub fn reads(&self) -> Vec<Read> {
        let inner = self.lock();
        inner
            .reads
            .iter()
            .zip(&inner.read_done)
            .filter(|(_, done)| **done)
            .map(|(r, _)| r.clone())
            .collect()
    }

    /// Snapshot of all operations: the writes, then the ended reads.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops: Vec<Op> = self.writes().into_iter().map(Op::Write).collect();
        ops.extend(self.reads().into_iter().map(Op::Read));
        ops
    }

    /// Number of recorded operations (including ones in flight).
    pub fn len(&self) -> usize {
        let inner = self.lock();
        inner.writes.len() + inner.reads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A write, as named in a violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRef {
    pub client: usize,
    pub value: String,
    pub invoked: Time,
    pub completed: Time,
    pub outcome: WriteOutcome,
}

impl From<&Write> for WriteRef {
    fn from(w: &Write) -> Self {
        WriteRef {
            client: w.client,
            value: w.value.clone(),
            invoked: w.invoked,
            completed: w.completed,
            outcome: w.outcome,
        }
    }
}

impl fmt::Display for WriteRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write {:?} by client {} (invoked t={}, completed t={}, {:?})",
            self.value,
            self.client,
            self.invoked,
            fmt_time(self.completed),
            self.outcome
        )
    }
}

/// A read, as named in a violation: a client's read or the final convergence read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadRef {
    Client {
        client: usize,
        invoked: Time,
        completed: Time,
    },
    /// A read passed to [`check_final`] (after every write).
    Final,
}

impl From<&Read> for ReadRef {
    fn from(r: &Read) -> Self {
        ReadRef::Client {
            client: r.client,
            invoked: r.invoked,
            completed: r.completed,
        }
    }
}

impl fmt::Display for ReadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadRef::Client {
                client,
                invoked,
                completed,
            } => write!(
                f,
                "read by client {client} (invoked t={invoked}, completed t={})",
                fmt_time(*completed)
            ),
            ReadRef::Final => write!(f, "final read"),
        }
    }
}

fn fmt_time(t: Time) -> String {
    if t == Time::MAX {
        "never".to_string()
    } else {
        t.to_string()
    }
}

/// A broken rule; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Rule (a): a read returned a value no write of this key wrote. `written_to` names the key
    /// the value was written to, if it was written to another key.
    PhantomValue {
        key: String,
        value: String,
        read: ReadRef,
        written_to: Option<String>,
    },
    /// Rule (a): a read returned a value whose write was invoked only after the read completed.
    FutureValue {
        key: String,
        read: ReadRef,
        write: WriteRef,
    },
    /// Rule (b)/(c): a successful read invoked after `write` was acknowledged returned neither
    /// its value nor any value that may supersede it. `others` counts further acknowledged
    /// writes of the key lost by the same read.
    LostWrite {
        key: String,
        write: WriteRef,
        read: ReadRef,
        returned: Vec<String>,
        others: usize,
    },
    /// Rule (b)/(c): the key was not found (or returned no values) after `write` was
    /// acknowledged. `others` counts further acknowledged writes of the key.
    NotFoundAfterAck {
        key: String,
        write: WriteRef,
        read: ReadRef,
        others: usize,
    },
    /// Rule (c): two nodes returned different sibling sets for a key after convergence.
    Diverged {
        key: String,
        node_a: usize,
        values_a: Vec<String>,
        node_b: usize,
        values_b: Vec<String>,
    },
    /// The history is not checkable: two writes wrote the same value (a test bug).
    DuplicateValue {
        value: String,
        first_key: String,
        first: WriteRef,
        second_key: String,
        second: WriteRef,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::PhantomValue {
                key,
                value,
                read,
                written_to,
            } => {
                write!(f, "phantom value: key {key:?}: {read} returned {value:?}, ")?;
                match written_to {
                    Some(other) => write!(f, "which was written to key {other:?}, not this key"),
                    None => write!(f, "which no write ever wrote"),
                }
            }
            Violation::FutureValue { key, read, write } => write!(
                f,
                "value from the future: key {key:?}: {read} returned the value of {write}, \
                 invoked after the read completed"
            ),
            Violation::LostWrite {
                key,
                write,
                read,
                returned,
                others,
            } => {
                write!(
                    f,
                    "lost acknowledged write: key {key:?}: acked {write}; {read} returned \
                     {returned:?}, none of which is that value or a write not known to precede it"
                )?;
                if *others > 0 {
                    write!(
                        f,
                        " ({others} more acked writes of the key lost by this read)"
                    )?;
                }
                Ok(())
            }
            Violation::NotFoundAfterAck {
                key,
                write,
                read,
                others,
            } => {
                write!(
                    f,
                    "not found after acknowledged write: key {key:?}: acked {write}; {read} \
                     returned not-found"
                )?;
                if *others > 0 {
                    write!(
                        f,
                        " ({others} more acked writes of the key lost by this read)"
                    )?;
                }
                Ok(())
            }
            Violation::Diverged {
                key,
                node_a,
                values_a,
                node_b,
                values_b,
            } => write!(
                f,
                "not converged: key {key:?}: node {node_a} returned {values_a:?} but node \
                 {node_b} returned {values_b:?}"
            ),
            Violation::DuplicateValue {
                value,
                first_key,
                first,
                second_key,
                second,
            } => write!(
                f,
                "uncheckable history: value {value:?} written twice: {first} to key \
                 {first_key:?} and {second} to key {second_key:?}"
            ),
        }
    }
}

/// Formats up to `limit` violations, one per line, with a count of the rest.
pub fn report(violations: &[Violation], limit: usize) -> String {
    let mut out = format!("{} violation(s):\n", violations.len());
    for v in violations.iter().take(limit) {
        out.push_str("  ");
        out.push_str(&v.to_string());
        out.push('\n');
    }
    if violations.len() > limit {
        out.push_str(&format!("  ... and {} more\n", violations.len() - limit));
    }
    out
}

/// Counts over a checked history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub keys: usize,
    pub writes_acked: usize,
    pub writes_failed: usize,
    pub writes_unknown: usize,
    /// Reads that returned at least one value.
    pub reads_ok: usize,
    pub reads_failed: usize,
    /// Reads that returned `NotFound` (or an empty value list).
    pub reads_not_found: usize,
    /// Reads that returned more than one sibling.
    pub reads_with_siblings: usize,
    pub max_siblings: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} keys; writes: {} acked, {} failed, {} unknown; reads: {} ok, {} not found, {} \
             failed; {} reads with siblings (max {})",
            self.keys,
            self.writes_acked,
            self.writes_failed,
            self.writes_unknown,
            self.reads_ok,
            self.reads_not_found,
            self.reads_failed,
            self.reads_with_siblings,
            self.max_siblings
        )
    }
}

/// The acknowledged writes of one key, sorted by invocation, with suffix minima of completion.
struct AckedIndex<'a> {
    /// Sorted by `invoked`.
    writes: Vec<&'a Write>,
    /// `suffix_min[i]` = min `completed` over `writes[i..]` (`Time::MAX` past the end).
    suffix_min: Vec<Time>,
}

impl<'a> AckedIndex<'a> {
    fn new(mut writes: Vec<&'a Write>) -> Self {
        writes.sort_by_key(|w| w.invoked);
        let mut suffix_min = vec![Time::MAX; writes.len() + 1];
        for i in (0..writes.len()).rev() {
            suffix_min[i] = suffix_min[i + 1].min(writes[i].completed);
        }
        AckedIndex { writes, suffix_min }
    }

    /// The acknowledged writes lost by a read invoked at `read_invoked` whose returned values'
    /// writes have maximal effective completion `newest` (`None` if it returned nothing): those
    /// completed before the read was invoked and invoked after `newest`. (Every returned write
    /// completed no later than `newest`, so such a write precedes all of them, and is not among
    /// them.) Returns the earliest-invoked one and the count of the others.
    fn lost(&self, read_invoked: Time, newest: Option<Time>) -> Option<(&'a Write, usize)> {
        let from = match newest {
            None => 0,
            Some(m) => self.writes.partition_point(|w| w.invoked <= m),
        };
        if self.suffix_min[from] >= read_invoked {
            return None;
        }
        let mut lost = self.writes[from..]
            .iter()
            .filter(|w| w.completed < read_invoked);
        let first = lost.next()?;
        Some((first, lost.count()))
    }
}

struct Index<'a> {
    by_value: HashMap<&'a str, &'a Write>,
    acked: HashMap<&'a str, AckedIndex<'a>>,
    keys: BTreeSet<&'a str>,
}

fn index<'a>(writes: &'a [Write], violations: &mut Vec<Violation>) -> Index<'a> {
    let mut by_value: HashMap<&str, &Write> = HashMap::with_capacity(writes.len());
    let mut acked: HashMap<&str, Vec<&Write>> = HashMap::new();
    let mut keys = BTreeSet::new();
    for w in writes {
        keys.insert(w.key.as_str());
        if let Some(first) = by_value.insert(&w.value, w) {
            violations.push(Violation::DuplicateValue {
                value: w.value.clone(),
                first_key: first.key.clone(),
                first: first.into(),
                second_key: w.key.clone(),
                second: w.into(),
            });
        }
        if w.outcome == WriteOutcome::Acked {
            acked.entry(&w.key).or_default().push(w);
        }
    }
    Index {
        by_value,
        acked: acked
            .into_iter()
            .map(|(k, ws)| (k, AckedIndex::new(ws)))
            .collect(),
        keys,
    }
}

/// Checks rules (a) and (b) for `values` read from `key` by `read` (invoked at `invoked`,
/// completed at `completed`), pushing violations.
fn check_read(
    idx: &Index<'_>,
    key: &str,
    values: &[String],
    read: ReadRef,
    invoked: Time,
    completed: Time,
    violations: &mut Vec<Violation>,
) {
    let mut newest: Option<Time> = None;
    for value in values {
        match idx.by_value.get(value.as_str()) {
            Some(w) if w.key == key => {
                if w.invoked > completed {
                    violations.push(Violation::FutureValue {
                        key: key.to_string(),
                        read: read.clone(),
                        write: (*w).into(),
                    });
                } else {
                    let c = w.effective_completion();
                    newest = Some(newest.map_or(c, |m| m.max(c)));
                }
            }
            other => violations.push(Violation::PhantomValue {
                key: key.to_string(),
                value: value.clone(),
                read: read.clone(),
                written_to: other.map(|w| w.key.clone()),
            }),
        }
    }
    let Some(acked) = idx.acked.get(key) else {
        return;
    };
    if let Some((w, others)) = acked.lost(invoked, newest) {
        violations.push(if values.is_empty() {
            Violation::NotFoundAfterAck {
                key: key.to_string(),
                write: w.into(),
                read,
                others,
            }
        } else {
            Violation::LostWrite {
                key: key.to_string(),
                write: w.into(),
                read,
                returned: values.to_vec(),
                others,
            }
        });
    }
}

/// Checks rules (a) and (b) over the recorded history (see the module docs).
pub fn check(history: &History) -> Result<Summary, Vec<Violation>> {
    check_ops(&history.writes(), &history.reads())
}

/// [`check`] over explicit operation lists.
pub fn check_ops(writes: &[Write], reads: &[Read]) -> Result<Summary, Vec<Violation>> {
    let mut violations = Vec::new();
    let idx = index(writes, &mut violations);
    let mut summary = Summary::default();
    let mut keys = idx.keys.clone();
    for w in writes {
        match w.outcome {
            WriteOutcome::Acked => summary.writes_acked += 1,
            WriteOutcome::Failed => summary.writes_failed += 1,
            WriteOutcome::Unknown => summary.writes_unknown += 1,
        }
    }
    for r in reads {
        keys.insert(&r.key);
        let values: &[String] = match &r.outcome {
            ReadOutcome::Failed => {
                summary.reads_failed += 1;
                continue;
            }
            ReadOutcome::NotFound => &[],
            ReadOutcome::Values(v) => v,
        };
        if values.is_empty() {
            summary.reads_not_found += 1;
        } else {
            summary.reads_ok += 1;
            if values.len() > 1 {
                summary.reads_with_siblings += 1;
            }
            summary.max_siblings = summary.max_siblings.max(values.len());
        }
        check_read(
            &idx,
            &r.key,
            values,
            r.into(),
            r.invoked,
            r.completed,
            &mut violations,
        );
    }
    summary.keys = keys.len();
    if violations.is_empty() {
        Ok(summary)
    } else {
        Err(violations)
    }
}

/// Rule (c): checks the values read after the faults healed (`final_reads`: key -> sibling
/// values; a key absent from the map counts as not found). Every acknowledged write must be
/// present or superseded by a write not known to precede it, and no value may be a phantom.
/// Call it once per node, or once with the union of all nodes' values.
pub fn check_final(
    history: &History,
    final_reads: &BTreeMap<String, Vec<String>>,
) -> Result<(), Vec<Violation>> {
    let writes = history.writes();
    let mut violations = Vec::new();
    let idx = index(&writes, &mut violations);
    let mut keys: BTreeSet<&str> = idx.acked.keys().copied().collect();
    keys.extend(final_reads.keys().map(String::as_str));
    for key in keys {
        let values = final_reads.get(key).map(Vec::as_slice).unwrap_or(&[]);
        check_read(
            &idx,
            key,
            values,
            ReadRef::Final,
            Time::MAX,
            Time::MAX,
            &mut violations,
        );
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// Rule (c), convergence: every node (index into `per_node`) returned the same set of values
/// for every key (order of siblings ignored; a key absent on a node counts as no values).
pub fn check_converged(per_node: &[BTreeMap<String, Vec<String>>]) -> Result<(), Vec<Violation>> {
    let mut violations = Vec::new();
    let keys: BTreeSet<&String> = per_node.iter().flat_map(|m| m.keys()).collect();
    for key in keys {
        let sets: Vec<BTreeSet<&String>> = per_node
            .iter()
            .map(|m| m.get(key).map(|v| v.iter().collect()).unwrap_or_default())
            .collect();
        if let Some(b) = (1..sets.len()).find(|&i| sets[i] != sets[0]) {
            let get = |i: usize| per_node[i].get(key).cloned().unwrap_or_default();
            violations.push(Violation::Diverged {
                key: key.clone(),
                node_a: 0,
                values_a: get(0),
                node_b: b,
                values_b: get(b),
            });
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}
