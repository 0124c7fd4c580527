//! k-way merge of time-ordered streams into one time-ordered stream.
//!
//! Trace tables come in many part files, each sorted by time; the canonical
//! stream interleaves them. Ties are broken by the order key the caller
//! gives (e.g. machine before job before task events at the same time) and
//! then by source index, so the merge is deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::source::TraceError;

type Source<T> = Box<dyn Iterator<Item = Result<T, TraceError>> + Send>;

/// Merges `sources` by `key(item)`, smallest first.
pub struct MergeByKey<T, K, F> {
    sources: Vec<Source<T>>,
    heads: Vec<Option<T>>,
    heap: BinaryHeap<Reverse<(K, usize)>>,
    key: F,
    pending_error: Option<TraceError>,
    started: bool,
}

impl<T, K: Ord, F: Fn(&T) -> K> MergeByKey<T, K, F> {
    pub fn new(sources: Vec<Source<T>>, key: F) -> Self {
        let n = sources.len();
        MergeByKey {
            sources,
            heads: (0..n).map(|_| None).collect(),
            heap: BinaryHeap::with_capacity(n),
            key,
            pending_error: None,
            started: false,
        }
    }

    /// Pull the next item of source `i` into the heap. An error is held
    /// back and yielded before anything else.
    fn refill(&mut self, i: usize) {
        match self.sources[i].next() {
            Some(Ok(item)) => {
                self.heap.push(Reverse(((self.key)(&item), i)));
                self.heads[i] = Some(item);
            }
            Some(Err(e)) => self.pending_error = Some(e),
            None => {}
        }
    }
}

impl<T, K: Ord, F: Fn(&T) -> K> Iterator for MergeByKey<T, K, F> {
    type Item = Result<T, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                self.refill(i);
                if let Some(e) = self.pending_error.take() {
                    return Some(Err(e));
                }
            }
        }
        if let Some(e) = self.pending_error.take() {
            return Some(Err(e));
        }
        let Reverse((_, i)) = self.heap.pop()?;
        let item = self.heads[i].take().expect("heap entries have heads");
        self.refill(i);
        Some(Ok(item))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(v: Vec<u64>) -> Source<u64> {
        Box::new(v.into_iter().map(Ok))
    }

    #[test]
    fn merges_in_order_and_breaks_ties_by_source() {
        let merged: Vec<(u64, u64)> = MergeByKey::new(
            vec![
                Box::new(vec![(1, 0), (4, 0), (4, 0)].into_iter().map(Ok)),
                Box::new(vec![(0, 1), (4, 1), (9, 1)].into_iter().map(Ok)),
                Box::new(std::iter::empty()),
            ],
            |&(t, _): &(u64, u64)| t,
        )
        .map(Result::unwrap)
        .collect();
        assert_eq!(merged, vec![(0, 1), (1, 0), (4, 0), (4, 0), (4, 1), (9, 1)]);
    }

    #[test]
    fn errors_are_passed_through() {
        let bad: Source<u64> =
            Box::new(vec![Ok(3), Err(TraceError::invalid("x".as_ref(), "boom"))].into_iter());
        let out: Vec<_> = MergeByKey::new(vec![src(vec![1, 5]), bad], |t: &u64| *t).collect();
        assert!(out.iter().any(|r| r.is_err()));
        let ok: Vec<u64> = out.into_iter().filter_map(Result::ok).collect();
        assert_eq!(ok, vec![1, 3, 5]);
    }
}
