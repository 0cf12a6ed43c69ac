//! Merging the sorted streams of a coverage query's vnodes into one answer in (term, key)
//! order, without duplicates, stopping at `max_results` with the position to resume after.
//!
//! Each vnode streams its entries in strictly increasing (term, key) order (bytes compared
//! lexicographically: the node encodes terms so that byte order is term order; a ListKeys
//! entry has an empty term). [`Merge`] holds what each stream sent and not yet merged, and
//! emits an entry only when every stream that has not ended has something buffered: only then
//! is the smallest buffered entry the smallest there will ever be. A stream that sends an entry
//! not above its previous one is refused (typed error), never merged out of order.

use std::collections::VecDeque;
use std::num::NonZeroUsize;

/// One result: an index term (empty for ListKeys) and a key. Ordered by term, then key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IndexEntry {
    pub term: Vec<u8>,
    pub key: Vec<u8>,
}

impl IndexEntry {
    pub fn new(term: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> IndexEntry {
        IndexEntry {
            term: term.into(),
            key: key.into(),
        }
    }
}

/// What the merge can do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MergeStep<E = IndexEntry> {
    /// The next entry of the answer.
    Entry(E),
    /// Nothing can be emitted until these streams (ascending) send more or end.
    Need(Vec<usize>),
    /// The answer is complete, or has `max_results` entries.
    Done {
        /// Where to resume: the last entry emitted, when the answer stopped at `max_results`
        /// and more may follow. `None` when every stream ended and nothing is left.
        continuation: Option<E>,
    },
}

/// Errors of a stream that breaks the merge's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    #[error("no stream {source_index} (the merge has {streams})")]
    NoSuchStream { source_index: usize, streams: usize },
    #[error("stream {source_index} sent an entry not above its previous one (streams must be strictly increasing)")]
    Unsorted { source_index: usize },
    #[error("stream {source_index} sent entries after its end")]
    AfterEnd { source_index: usize },
}

#[derive(Clone, Debug)]
struct Stream<E> {
    buffered: VecDeque<E>,
    /// The last entry the stream sent (buffered or not), to check order.
    last: Option<E>,
    ended: bool,
}

impl<E> Default for Stream<E> {
    fn default() -> Self {
        Stream {
            buffered: VecDeque::new(),
            last: None,
            ended: false,
        }
    }
}

/// A k-way merge of sorted streams; see the module documentation. Entries are [`IndexEntry`]
/// (byte-ordered) or any other totally ordered type (the node merges typed index terms).
#[derive(Clone, Debug)]
pub struct Merge<E = IndexEntry> {
    streams: Vec<Stream<E>>,
    /// Entries at or below this are dropped: the continuation the query resumes from.
    after: Option<E>,
    /// The last entry emitted.
    last: Option<E>,
    max_results: Option<NonZeroUsize>,
    emitted: usize,
}

impl<E: Ord + Clone> Merge<E> {
    /// A merge of `streams` streams (numbered `0..streams`), emitting only entries above
    /// `after` and at most `max_results` of them (`None`: no limit).
    pub fn new(streams: usize, after: Option<E>, max_results: Option<NonZeroUsize>) -> Merge<E> {
        Merge {
            streams: (0..streams).map(|_| Stream::default()).collect(),
            after,
            last: None,
            max_results,
            emitted: 0,
        }
    }

    /// One more stream (numbered next after the others): one that takes over part of an ended
    /// stream's answer from where it stopped. Its index.
    pub fn add_stream(&mut self) -> usize {
        self.streams.push(Stream::default());
        self.streams.len() - 1
    }

    /// Streams in the merge (ended ones included).
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    fn stream(&mut self, source_index: usize) -> Result<&mut Stream<E>, MergeError> {
        let streams = self.streams.len();
        self.streams
            .get_mut(source_index)
            .ok_or(MergeError::NoSuchStream {
                source_index,
                streams,
            })
    }

    /// Entries from stream `source_index`, in strictly increasing order continuing what it sent
    /// before. On error nothing of this call is kept.
    pub fn push(
        &mut self,
        source_index: usize,
        entries: impl IntoIterator<Item = E>,
    ) -> Result<(), MergeError> {
        let after = self.after.clone();
        let floor = self.last.clone();
        let s = self.stream(source_index)?;
        if s.ended {
            return Err(MergeError::AfterEnd { source_index });
        }
        let mut last = s.last.clone();
        let mut keep = Vec::new();
        for e in entries {
            if last.as_ref().is_some_and(|l| e <= *l) {
                return Err(MergeError::Unsorted { source_index });
            }
            last = Some(e.clone());
            let below = |b: &Option<E>| b.as_ref().is_some_and(|b| e <= *b);
            if !below(&after) && !below(&floor) {
                keep.push(e);
            }
        }
        s.last = last;
        s.buffered.extend(keep);
        Ok(())
    }

    /// Stream `source_index` has nothing more.
    pub fn end(&mut self, source_index: usize) -> Result<(), MergeError> {
        self.stream(source_index)?.ended = true;
        Ok(())
    }

    /// Streams that must send more (or end) before the merge can go on, ascending.
    pub fn starved(&self) -> Vec<usize> {
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.ended && s.buffered.is_empty())
            .map(|(i, _)| i)
            .collect()
    }

    /// The next step; see [`MergeStep`].
    pub fn step(&mut self) -> MergeStep<E> {
        if self.max_results.is_some_and(|m| self.emitted >= m.get()) {
            let more = self
                .streams
                .iter()
                .any(|s| !s.ended || !s.buffered.is_empty());
            return MergeStep::Done {
                continuation: if more { self.last.clone() } else { None },
            };
        }
        let starved = self.starved();
        if !starved.is_empty() {
            return MergeStep::Need(starved);
        }
        let Some(min) = self
            .streams
            .iter()
            .filter_map(|s| s.buffered.front())
            .min()
            .cloned()
        else {
            return MergeStep::Done { continuation: None };
        };
        for s in &mut self.streams {
            // Streams are strictly increasing: at most the head equals the minimum.
            if s.buffered.front() == Some(&min) {
                s.buffered.pop_front();
            }
        }
        self.emitted += 1;
        self.last = Some(min.clone());
        MergeStep::Entry(min)
    }

    /// Steps until the merge needs more input or is done; the entries emitted and the step that
    /// stopped it (`Need` or `Done`).
    pub fn drain(&mut self) -> (Vec<E>, MergeStep<E>) {
        let mut out = Vec::new();
        loop {
            match self.step() {
                MergeStep::Entry(e) => out.push(e),
                other => return (out, other),
            }
        }
    }

    /// Whether the next step is `Done`: `max_results` emitted, or every stream ended and
    /// merged.
    pub fn finished(&self) -> bool {
        self.max_results.is_some_and(|m| self.emitted >= m.get())
            || self
                .streams
                .iter()
                .all(|s| s.ended && s.buffered.is_empty())
    }

    /// Entries emitted so far.
    pub fn emitted(&self) -> usize {
        self.emitted
    }
}

/// One page of a merged answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedPage {
    pub entries: Vec<IndexEntry>,
    /// Where the next page starts (after this entry), or `None` when the answer is complete.
    pub continuation: Option<IndexEntry>,
}

/// Merges complete streams (each strictly increasing) in one call: the entries above `after`,
/// in order, without duplicates, at most `max_results`.
pub fn merge_sorted(
    streams: Vec<Vec<IndexEntry>>,
    after: Option<IndexEntry>,
    max_results: Option<NonZeroUsize>,
) -> Result<MergedPage, MergeError> {
    let mut m = Merge::new(streams.len(), after, max_results);
    for (i, s) in streams.into_iter().enumerate() {
        m.push(i, s)?;
        m.end(i)?;
    }
    match m.drain() {
        (entries, MergeStep::Done { continuation }) => Ok(MergedPage {
            entries,
            continuation,
        }),
        (_, step) => unreachable!("every stream ended, yet the merge stopped at {step:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(term: &str, key: &str) -> IndexEntry {
        IndexEntry::new(term.as_bytes(), key.as_bytes())
    }

    fn max(n: usize) -> Option<NonZeroUsize> {
        NonZeroUsize::new(n)
    }

    fn keys(es: &[IndexEntry]) -> Vec<String> {
        es.iter()
            .map(|e| {
                format!(
                    "{}/{}",
                    String::from_utf8_lossy(&e.term),
                    String::from_utf8_lossy(&e.key)
                )
            })
            .collect()
    }

    #[test]
    fn merges_in_term_then_key_order_without_duplicates() {
        let page = merge_sorted(
            vec![
                vec![e("a", "2"), e("b", "1"), e("c", "9")],
                vec![e("a", "1"), e("b", "1"), e("b", "5")],
                vec![],
            ],
            None,
            None,
        )
        .unwrap();
        assert_eq!(keys(&page.entries), ["a/1", "a/2", "b/1", "b/5", "c/9"]);
        assert_eq!(page.continuation, None);
    }

    #[test]
    fn max_results_gives_a_continuation_that_resumes() {
        let streams = vec![
            vec![e("a", "1"), e("a", "3")],
            vec![e("a", "2"), e("a", "4")],
        ];
        let p1 = merge_sorted(streams.clone(), None, max(3)).unwrap();
        assert_eq!(keys(&p1.entries), ["a/1", "a/2", "a/3"]);
        assert_eq!(p1.continuation, Some(e("a", "3")));
        let p2 = merge_sorted(streams.clone(), p1.continuation, max(3)).unwrap();
        assert_eq!(keys(&p2.entries), ["a/4"]);
        assert_eq!(p2.continuation, None);
        // Exactly max_results left: the merge knows nothing follows.
        let p = merge_sorted(streams, None, max(4)).unwrap();
        assert_eq!(p.entries.len(), 4);
        assert_eq!(p.continuation, None);
    }

    #[test]
    fn waits_for_every_open_stream_before_emitting() {
        let mut m = Merge::new(2, None, None);
        m.push(0, [e("a", "5")]).unwrap();
        assert_eq!(m.step(), MergeStep::Need(vec![1]));
        m.push(1, [e("a", "1")]).unwrap();
        assert_eq!(m.step(), MergeStep::Entry(e("a", "1")));
        assert_eq!(m.step(), MergeStep::Need(vec![1]));
        m.end(1).unwrap();
        assert_eq!(m.drain(), (vec![e("a", "5")], MergeStep::Need(vec![0])));
        assert!(!m.finished());
        m.end(0).unwrap();
        assert!(m.finished());
        assert_eq!(m.step(), MergeStep::Done { continuation: None });
        // At the limit with streams still open, a continuation is given even if nothing follows.
        let mut m = Merge::new(1, None, max(1));
        m.push(0, [e("", "k")]).unwrap();
        assert!(!m.finished());
        assert_eq!(m.step(), MergeStep::Entry(e("", "k")));
        assert!(m.finished(), "max_results emitted");
        let mut m = Merge::new(1, None, max(1));
        m.push(0, [e("", "k")]).unwrap();
        assert_eq!(
            m.drain(),
            (
                vec![e("", "k")],
                MergeStep::Done {
                    continuation: Some(e("", "k"))
                }
            )
        );
    }

    #[test]
    fn broken_streams_are_refused() {
        let mut m = Merge::new(2, None, None);
        assert_eq!(
            m.push(2, []),
            Err(MergeError::NoSuchStream {
                source_index: 2,
                streams: 2
            })
        );
        m.push(0, [e("b", "1")]).unwrap();
        assert_eq!(
            m.push(0, [e("a", "9")]),
            Err(MergeError::Unsorted { source_index: 0 })
        );
        assert_eq!(
            m.push(0, [e("b", "1")]),
            Err(MergeError::Unsorted { source_index: 0 })
        );
        assert_eq!(
            m.push(1, [e("c", "1"), e("c", "0")]),
            Err(MergeError::Unsorted { source_index: 1 })
        );
        // The refused push kept nothing.
        assert_eq!(m.starved(), vec![1]);
        m.end(1).unwrap();
        assert_eq!(
            m.push(1, [e("z", "z")]),
            Err(MergeError::AfterEnd { source_index: 1 })
        );
    }

    #[test]
    fn an_added_stream_takes_over_from_an_ended_one() {
        // Stream 0 stops (its member died) after sending b/1 and b/3; what it had buffered is
        // still merged, and the stand-in resumes after b/3.
        let mut m = Merge::new(2, None, None);
        m.push(0, [e("b", "1"), e("b", "3")]).unwrap();
        m.push(1, [e("a", "0"), e("c", "0")]).unwrap();
        assert_eq!(m.step(), MergeStep::Entry(e("a", "0")));
        m.end(0).unwrap();
        let s = m.add_stream();
        assert_eq!((s, m.streams()), (2, 3));
        assert_eq!(
            m.drain(),
            (vec![], MergeStep::Need(vec![2])),
            "waits for the stand-in"
        );
        m.push(s, [e("b", "4")]).unwrap();
        m.end(s).unwrap();
        let (out, next) = m.drain();
        assert_eq!(
            keys(&out),
            ["b/1", "b/3", "b/4", "c/0"],
            "the buffered entries, then the stand-in's"
        );
        assert_eq!(next, MergeStep::Need(vec![1]));
    }

    #[test]
    fn any_ordered_entry_type_merges() {
        let mut m: Merge<(i64, &str)> = Merge::new(2, Some((-5, "z")), None);
        m.push(0, [(-10, "a"), (-2, "b"), (7, "c")]).unwrap();
        m.push(1, [(-3, "x")]).unwrap();
        m.end(0).unwrap();
        m.end(1).unwrap();
        assert_eq!(
            m.drain(),
            (
                vec![(-3, "x"), (-2, "b"), (7, "c")],
                MergeStep::Done { continuation: None }
            ),
            "numeric order, below the continuation dropped"
        );
    }

    #[test]
    fn entries_at_or_below_the_continuation_are_dropped() {
        let p = merge_sorted(
            vec![vec![e("a", "1"), e("a", "2"), e("b", "0")]],
            Some(e("a", "2")),
            None,
        )
        .unwrap();
        assert_eq!(keys(&p.entries), ["b/0"]);
    }
}
