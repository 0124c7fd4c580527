//! Event-time merge of the input topic's partitions.
//!
//! Events of one job share a partition (they are keyed by job id) and
//! arrive in order, but the 3Sigma history and SLearn's adaptive ratio are
//! global: what a job is predicted depends on which *other* jobs ended
//! before it. Kafka gives no order across partitions, so the service
//! restores one: an event is released only once every assigned partition
//! either holds a later (or equal) event or has been read to its end (its
//! high watermark). Ties break by partition, then offset.
//!
//! On a topic whose data is already written, the order is therefore a
//! function of the data alone, so a restarted service, or a second run,
//! applies events in exactly the same order. On a live topic a partition
//! that is momentarily drained does not hold the others back; an event that
//! arrives later with an earlier time is applied late. Nor does one that
//! neither delivers nor reports its end (its leader gone) once the source
//! has given up waiting for it ([`PartitionMerge::stop_waiting_for`]): its
//! events are applied late when it returns.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::ops::Range;

/// What a buffered message costs in memory, for the byte budgets.
pub trait Weigh {
    fn bytes(&self) -> usize;
}

/// One consumed message, waiting for its turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending<T> {
    pub partition: i32,
    pub offset: i64,
    /// Event time, µs. Messages that could not be decoded have no time of
    /// their own and take their partition's latest, so that they neither
    /// jump ahead of nor hold back the events around them.
    pub time_us: u64,
    pub item: T,
}

#[derive(Debug)]
struct Partition<T> {
    queue: VecDeque<Pending<T>>,
    /// Everything in the partition has been pushed (nothing arrived since
    /// the consumer reported its end).
    at_end: bool,
    /// Given up on: it delivered nothing, nor reported its end, for too
    /// long (nothing arrived since).
    idle: bool,
    /// Time of the latest message pushed.
    latest_us: u64,
    /// Bytes of the messages queued ([`Weigh`]).
    bytes: usize,
    /// The offset the next message should have, once known.
    next_offset: Option<i64>,
}

impl<T> Partition<T> {
    fn new(next_offset: Option<i64>) -> Self {
        Partition {
            queue: VecDeque::new(),
            at_end: false,
            idle: false,
            latest_us: 0,
            bytes: 0,
            next_offset,
        }
    }

    /// Could this partition still deliver something that must go first,
    /// and is it waited for?
    fn holds_back(&self) -> bool {
        self.queue.is_empty() && !self.at_end && !self.idle
    }
}

#[derive(Debug)]
pub struct PartitionMerge<T> {
    partitions: BTreeMap<i32, Partition<T>>,
    /// The first message of every non-empty queue as (time, partition,
    /// offset), earliest first: the next message out is always on top, so
    /// releasing one costs O(log partitions), not a scan of them all.
    fronts: BinaryHeap<Reverse<(u64, i32, i64)>>,
    /// How many partitions hold the others back (see
    /// [`Partition::holds_back`]); nothing is released while any does.
    holding_back: usize,
}

impl<T> Default for PartitionMerge<T> {
    fn default() -> Self {
        PartitionMerge {
            partitions: BTreeMap::new(),
            fronts: BinaryHeap::new(),
            holding_back: 0,
        }
    }
}

impl<T: Weigh> PartitionMerge<T> {
    /// Start following `partition`, whose next message is at `next_offset`
    /// if that is known (an offset stored with the state). Anything buffered
    /// for it before is dropped: it will be read again.
    pub fn assign(&mut self, partition: i32, next_offset: Option<i64>) {
        self.revoke(partition);
        self.partitions
            .insert(partition, Partition::new(next_offset));
        self.holding_back += 1;
    }

    /// Stop following `partition`, dropping what is buffered for it.
    pub fn revoke(&mut self, partition: i32) {
        let Some(p) = self.partitions.remove(&partition) else {
            return;
        };
        if p.holds_back() {
            self.holding_back -= 1;
        }
        if !p.queue.is_empty() {
            self.fronts.retain(|Reverse((_, id, _))| *id != partition);
        }
    }

    pub fn partitions(&self) -> impl Iterator<Item = i32> + Clone + '_ {
        self.partitions.keys().copied()
    }

    /// Buffer a consumed message. `time_us` of `None` takes the
    /// partition's latest time. Messages of unassigned partitions are
    /// ignored (they arrive between a revocation and the next poll).
    ///
    /// Returns the offsets skipped before this message, if any. Compaction
    /// and transaction markers leave such gaps legitimately; on a plain
    /// topic they mean the broker never delivered those records.
    pub fn push(
        &mut self,
        partition: i32,
        offset: i64,
        time_us: Option<u64>,
        item: T,
    ) -> Option<Range<i64>> {
        let p = self.partitions.get_mut(&partition)?;
        let gap = p
            .next_offset
            .filter(|&next| offset > next)
            .map(|next| next..offset);
        p.next_offset = Some(offset + 1);
        let time_us = time_us.unwrap_or(p.latest_us);
        p.latest_us = p.latest_us.max(time_us);
        if p.holds_back() {
            self.holding_back -= 1;
        }
        if p.queue.is_empty() {
            self.fronts.push(Reverse((time_us, partition, offset)));
        }
        p.at_end = false;
        p.idle = false;
        p.bytes += item.bytes();
        p.queue.push_back(Pending {
            partition,
            offset,
            time_us,
            item,
        });
        gap
    }

    /// The consumer has read `partition` to its end.
    pub fn reached_end(&mut self, partition: i32) {
        if let Some(p) = self.partitions.get_mut(&partition) {
            if p.holds_back() {
                self.holding_back -= 1;
            }
            p.at_end = true;
            p.idle = false;
        }
    }

    /// Stop waiting for `partition`, which holds the others back: what it
    /// delivers later goes out among theirs, late. Whether it held them.
    pub fn stop_waiting_for(&mut self, partition: i32) -> bool {
        let Some(p) = self.partitions.get_mut(&partition) else {
            return false;
        };
        let held = p.holds_back();
        if held {
            self.holding_back -= 1;
            p.idle = true;
        }
        held
    }

    /// Partitions given up on that have delivered nothing since.
    pub fn idle(&self) -> usize {
        self.partitions.values().filter(|p| p.idle).count()
    }

    /// Whether messages wait for a partition that holds them back.
    pub fn blocked(&self) -> bool {
        self.holding_back > 0 && !self.fronts.is_empty()
    }

    /// The broker's latest fetch of `partition` said its next record will
    /// have offset `high_watermark`: if everything before that has been
    /// pushed, the partition is at its end now. The consumer reports an
    /// end only after one more fetch comes back empty, which against a
    /// broker that holds empty fetches (`fetch.wait.max.ms`) keeps every
    /// other partition waiting that long. Returns whether this let the
    /// partition stop holding the others back.
    pub fn caught_up(&mut self, partition: i32, high_watermark: i64) -> bool {
        let at_end = self.partitions.get(&partition).is_some_and(|p| {
            p.holds_back() && p.next_offset.is_some_and(|next| next >= high_watermark)
        });
        if at_end {
            self.reached_end(partition);
        }
        at_end
    }

    /// Partitions whose emptiness keeps the others waiting.
    pub fn holding_back(&self) -> Vec<i32> {
        self.partitions
            .iter()
            .filter(|(_, p)| p.holds_back())
            .map(|(&id, _)| id)
            .collect()
    }

    pub fn buffered(&self, partition: i32) -> usize {
        self.partitions.get(&partition).map_or(0, |p| p.queue.len())
    }

    pub fn buffered_bytes(&self, partition: i32) -> usize {
        self.partitions.get(&partition).map_or(0, |p| p.bytes)
    }

    /// Messages held over all partitions (the throttle counts its own).
    #[cfg(test)]
    pub fn total_buffered(&self) -> usize {
        self.partitions.values().map(|p| p.queue.len()).sum()
    }

    /// Whether [`PartitionMerge::pop`] would release a message now.
    pub fn ready(&self) -> bool {
        self.holding_back == 0 && !self.fronts.is_empty()
    }

    /// The next message in merged order, if it may go now.
    pub fn pop(&mut self) -> Option<Pending<T>> {
        if self.holding_back > 0 {
            return None;
        }
        let mut top = self.fronts.peek_mut()?;
        let Reverse((_, id, _)) = *top;
        let p = self
            .partitions
            .get_mut(&id)
            .expect("every front belongs to a followed partition");
        let message = p.queue.pop_front().expect("a front is a queued message");
        p.bytes -= message.item.bytes();
        match p.queue.front() {
            // The partition's next message takes its place in one sift.
            Some(next) => *top = Reverse((next.time_us, id, next.offset)),
            None => {
                PeekMut::pop(top);
                if !p.at_end {
                    self.holding_back += 1;
                }
            }
        }
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    impl Weigh for &str {
        fn bytes(&self) -> usize {
            self.len()
        }
    }

    impl Weigh for () {
        fn bytes(&self) -> usize {
            0
        }
    }

    impl Weigh for (u64, i32, i64) {
        fn bytes(&self) -> usize {
            0
        }
    }

    #[test]
    fn the_bytes_buffered_follow_what_is_pushed_and_popped() {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.push(0, 0, Some(1), "abc");
        m.push(0, 1, Some(2), "de");
        m.reached_end(0);
        assert_eq!(m.buffered_bytes(0), 5);
        assert_eq!(m.pop().map(|p| p.item), Some("abc"));
        assert_eq!(m.buffered_bytes(0), 2);
        m.revoke(0);
        assert_eq!(m.buffered_bytes(0), 0);
    }

    fn drain(merge: &mut PartitionMerge<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| merge.pop().map(|m| m.item)).collect()
    }

    /// Partition 0 read to its end ("a" at 10, "c" at 30), partition 1
    /// not read yet.
    fn waiting_for_partition_1() -> PartitionMerge<&'static str> {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.assign(1, None);
        m.push(0, 0, Some(10), "a");
        m.push(0, 1, Some(30), "c");
        m.reached_end(0);
        m
    }

    #[test]
    fn waits_for_a_partition_that_is_not_read_to_its_end() {
        let mut m = waiting_for_partition_1();
        // Partition 1 has not been read yet: nothing may go.
        assert_eq!(m.pop(), None);
        assert_eq!(m.holding_back(), vec![1]);
        assert!(!m.ready());
        m.push(1, 0, Some(20), "b");
        assert!(m.ready());
        assert_eq!(drain(&mut m), ["a", "b"]);
        assert!(!m.ready());
        // "c" waits: partition 1 may still hold something before it.
        assert_eq!(m.holding_back(), vec![1]);
        m.reached_end(1);
        assert_eq!(drain(&mut m), ["c"]);
        assert!(m.holding_back().is_empty());
    }

    #[test]
    fn a_partition_given_up_on_holds_nothing_back_and_is_applied_late_when_it_returns() {
        let mut m = waiting_for_partition_1();
        assert!(m.blocked());
        assert_eq!(m.pop(), None);
        assert!(m.stop_waiting_for(1));
        assert!(!m.stop_waiting_for(1), "no longer holds anything back");
        assert_eq!(m.idle(), 1);
        assert!(!m.blocked());
        assert_eq!(drain(&mut m), ["a", "c"]);
        // It returns with an earlier event: applied late, and waited for
        // again once drained.
        m.push(1, 0, Some(20), "b");
        assert_eq!(m.idle(), 0);
        assert_eq!(drain(&mut m), ["b"]);
        assert_eq!(m.holding_back(), vec![1]);
        m.push(0, 2, Some(40), "d");
        m.reached_end(0);
        assert!(m.blocked());
        assert_eq!(m.pop(), None);
        m.reached_end(1);
        assert_eq!(drain(&mut m), ["d"]);
        // Given up on, then read to its end: not idle any more.
        m.assign(2, None);
        assert!(m.stop_waiting_for(2));
        m.reached_end(2);
        assert_eq!(m.idle(), 0);
        m.revoke(2);
        assert!(m.holding_back().is_empty());
    }

    #[test]
    fn a_partition_read_to_its_end_does_not_hold_back_the_others_until_it_gets_more() {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.assign(1, None);
        m.reached_end(1);
        m.push(0, 5, Some(1), "x");
        assert_eq!(m.pop().map(|p| (p.item, p.offset)), Some(("x", 5)));
        m.push(1, 0, Some(9), "late");
        m.push(0, 6, Some(2), "y");
        // Partition 1 got more: it is no longer known to be at its end.
        assert_eq!(drain(&mut m), ["y"]);
        assert_eq!(m.holding_back(), vec![0]);
    }

    #[test]
    fn a_partition_pushed_up_to_its_high_watermark_is_at_its_end() {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.assign(1, Some(7));
        m.push(0, 0, Some(10), "a");
        m.push(0, 1, Some(20), "b");
        // Partition 1 resumes at 7: a watermark of 8 means one record
        // more is still to come, 7 that there is none.
        assert!(!m.caught_up(1, 8));
        assert_eq!(m.holding_back(), vec![1]);
        assert!(m.caught_up(1, 7));
        assert_eq!(drain(&mut m), ["a", "b"]);
        // Partition 0 drained: only a watermark at its next offset (2)
        // lets partition 1's later record go.
        m.push(1, 7, Some(30), "c");
        assert_eq!(m.holding_back(), vec![0]);
        assert!(!m.caught_up(0, 3));
        assert_eq!(m.pop(), None);
        assert!(m.caught_up(0, 2));
        assert_eq!(drain(&mut m), ["c"]);
        // A partition with no known position (nothing pushed, none
        // stored) waits for the consumer's end of partition.
        m.assign(2, None);
        assert!(!m.caught_up(2, 0));
        assert_eq!(m.holding_back(), vec![1, 2]);
    }

    #[test]
    fn undecodable_messages_keep_their_partitions_time_and_order() {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.push(0, 0, Some(50), "good");
        m.push(0, 1, None, "bad");
        m.push(0, 2, Some(60), "later");
        m.reached_end(0);
        let out: Vec<(u64, &str)> =
            std::iter::from_fn(|| m.pop().map(|p| (p.time_us, p.item))).collect();
        assert_eq!(out, [(50, "good"), (50, "bad"), (60, "later")]);
    }

    #[test]
    fn revoking_drops_buffered_messages_and_ignores_late_ones() {
        let mut m = PartitionMerge::default();
        m.assign(0, None);
        m.assign(1, None);
        m.push(1, 0, Some(1), "gone");
        m.revoke(1);
        m.push(1, 1, Some(2), "late");
        assert_eq!(m.total_buffered(), 0);
        assert_eq!(m.partitions().collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn skipped_offsets_are_reported_from_the_stored_offset_on() {
        let mut m = PartitionMerge::default();
        m.assign(0, Some(5));
        m.assign(1, None);
        assert_eq!(m.push(0, 5, Some(1), "a"), None);
        assert_eq!(m.push(0, 9, Some(2), "b"), Some(6..9));
        assert_eq!(m.push(0, 10, Some(3), "c"), None);
        // Without a stored offset the first message sets the expectation.
        assert_eq!(m.push(1, 40, Some(1), "d"), None);
        assert_eq!(m.push(1, 42, Some(1), "e"), Some(41..42));
        // A fresh assignment starts over.
        m.assign(0, Some(0));
        assert_eq!(m.push(0, 1447, Some(1), "f"), Some(0..1447));
    }

    /// The merge as first written: a scan of every partition per message.
    /// The heap and the holding-back count must agree with it.
    #[derive(Default)]
    struct ScanMerge {
        partitions: BTreeMap<i32, (VecDeque<(u64, i64)>, bool)>,
    }

    impl ScanMerge {
        fn pop(&mut self) -> Option<(u64, i32, i64)> {
            if self
                .partitions
                .values()
                .any(|(q, end)| q.is_empty() && !end)
            {
                return None;
            }
            let (&id, _) = self
                .partitions
                .iter()
                .filter_map(|(id, (q, _))| q.front().map(|m| (id, m)))
                .min_by_key(|(id, m)| (m.0, **id, m.1))?;
            let (time, offset) = self.partitions.get_mut(&id)?.0.pop_front()?;
            Some((time, id, offset))
        }
    }

    proptest! {
        /// However the partitions' messages interleave on arrival, the
        /// merged order is the same: sorted by (time, partition, offset).
        #[test]
        fn merged_order_does_not_depend_on_arrival_order(
            times in proptest::collection::vec(proptest::collection::vec(0u64..20, 0..8), 1..4),
            seed in any::<u64>(),
        ) {
            let sorted: Vec<Vec<u64>> = times
                .iter()
                .map(|ts| { let mut s = ts.clone(); s.sort(); s })
                .collect();
            let mut expected: Vec<(u64, i32, i64)> = Vec::new();
            for (p, ts) in sorted.iter().enumerate() {
                for (o, &t) in ts.iter().enumerate() {
                    expected.push((t, p as i32, o as i64));
                }
            }
            expected.sort();
            let mut m: PartitionMerge<(u64, i32, i64)> = PartitionMerge::default();
            for p in 0..sorted.len() {
                m.assign(p as i32, None);
            }
            let mut cursors = vec![0usize; sorted.len()];
            let mut out = Vec::new();
            let mut state = seed;
            loop {
                // The topic is written: every fetch reports each
                // partition's final high watermark. A partition read to its
                // end is known by it, or (an empty one only by this) the
                // consumer says so. Releasing drains partitions, so look
                // again until nothing more goes.
                loop {
                    for (p, ts) in sorted.iter().enumerate() {
                        m.caught_up(p as i32, ts.len() as i64);
                        if cursors[p] == ts.len() && (ts.is_empty() || (seed >> p) & 1 == 1) {
                            m.reached_end(p as i32);
                        }
                    }
                    let released = out.len();
                    while let Some(x) = m.pop() { out.push(x.item); }
                    if out.len() == released { break; }
                }
                let open: Vec<usize> = (0..sorted.len()).filter(|&p| cursors[p] < sorted[p].len()).collect();
                if open.is_empty() { break; }
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let p = open[(state >> 33) as usize % open.len()];
                let o = cursors[p];
                cursors[p] += 1;
                let t = sorted[p][o];
                m.push(p as i32, o as i64, Some(t), (t, p as i32, o as i64));
            }
            prop_assert_eq!(out, expected);
        }

        /// Any sequence of assignments, revocations, arrivals, ends and
        /// releases gives what a scan of every partition gives.
        #[test]
        fn agrees_with_a_scan_of_every_partition(
            ops in proptest::collection::vec((0u8..6, 0i32..4, 0u64..10), 0..200),
        ) {
            let mut m: PartitionMerge<()> = PartitionMerge::default();
            let mut scan = ScanMerge::default();
            let mut next_offset = [0i64; 4];
            for (op, partition, time) in ops {
                match op {
                    0 => {
                        m.assign(partition, None);
                        scan.partitions.insert(partition, (VecDeque::new(), false));
                    }
                    1 => {
                        m.revoke(partition);
                        scan.partitions.remove(&partition);
                    }
                    2 => {
                        m.reached_end(partition);
                        if let Some(p) = scan.partitions.get_mut(&partition) {
                            p.1 = true;
                        }
                    }
                    3 | 4 => {
                        let offset = next_offset[partition as usize];
                        next_offset[partition as usize] += 1;
                        m.push(partition, offset, Some(time), ());
                        if let Some(p) = scan.partitions.get_mut(&partition) {
                            p.0.push_back((time, offset));
                            p.1 = false;
                        }
                    }
                    _ => {
                        let ready = m.ready();
                        let got = m.pop().map(|p| (p.time_us, p.partition, p.offset));
                        prop_assert_eq!(ready, got.is_some());
                        prop_assert_eq!(got, scan.pop());
                    }
                }
                let total: usize = scan.partitions.values().map(|p| p.0.len()).sum();
                prop_assert_eq!(m.total_buffered(), total);
            }
        }
    }
}
