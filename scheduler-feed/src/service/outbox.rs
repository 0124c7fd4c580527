//! Outputs of partitions other instances own, kept until their owner has
//! published them.
//!
//! Every instance applies every partition, so it computes every output;
//! it publishes only its own partitions'. When the group gives it another
//! partition, the outputs its previous owner had not published (from the
//! offset that owner committed to the group on) are already here, and the
//! instance publishes them without replaying anything. Entries below a
//! partition's committed offset are trimmed as the owner's commits come in
//! ([`Outbox::trim`]); a byte budget bounds the rest, and what it drops is
//! remembered, so that a takeover that needs it says which outputs are lost
//! instead of pretending.

use std::collections::{BTreeMap, VecDeque};

use jobcast_predictor::decision::Decision;
use jobcast_predictor::engine::JobRecord;

use super::sink::Outgoing;

/// What a new owner of a partition would have to publish and store for
/// one input message (or, for `ended`, one batch): the messages, the
/// decisions among them, and the final records of the jobs that ended,
/// which leave the engine's memory.
#[derive(Default)]
pub(super) struct Held {
    pub messages: Vec<Outgoing>,
    pub decisions: Vec<Decision>,
    pub ended: Vec<EndedJob>,
}

/// An ended job's final records: the job's, and its tasks' in their stored
/// binary layout.
pub(super) struct EndedJob {
    pub record: JobRecord,
    pub tasks: Vec<(u32, Vec<u8>)>,
}

/// A job record's bytes, about (its binary layout's size without the
/// policies' estimates and errors).
const JOB_RECORD_BYTES: usize = 200;

impl Held {
    fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.ended.is_empty()
    }

    /// Bytes held (payloads, keys, headers, pilot lists and records;
    /// fixed-size parts are not counted).
    fn bytes(&self) -> usize {
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                m.key.len()
                    + m.payload.len()
                    + m.headers
                        .iter()
                        .map(|(k, v)| k.len() + v.len())
                        .sum::<usize>()
            })
            .sum();
        let pilots: usize = self.decisions.iter().map(|d| 4 * d.pilots.len()).sum();
        let records: usize = self
            .ended
            .iter()
            .map(|e| JOB_RECORD_BYTES + e.tasks.iter().map(|(_, t)| t.len()).sum::<usize>())
            .sum();
        messages + pilots + records
    }

    fn extend(&mut self, other: Held) {
        self.messages.extend(other.messages);
        self.decisions.extend(other.decisions);
        self.ended.extend(other.ended);
    }
}

struct Entry {
    offset: i64,
    held: Held,
    bytes: usize,
}

/// Outputs awaiting their partition's owner, by partition, in offset
/// order.
pub(super) struct Outbox {
    partitions: BTreeMap<i32, VecDeque<Entry>>,
    bytes: usize,
    max_bytes: usize,
    /// Per partition, the offset below which outputs are not here (dropped
    /// for the budget, or from before this instance's restore).
    missing_below: BTreeMap<i32, i64>,
}

/// Outputs a takeover cannot publish: those of `partition` from `from` up
/// to (not including) `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Lost {
    pub partition: i32,
    pub from: i64,
    pub until: i64,
}

impl Outbox {
    pub(super) fn new(max_bytes: usize) -> Self {
        Outbox {
            partitions: BTreeMap::new(),
            bytes: 0,
            max_bytes,
            missing_below: BTreeMap::new(),
        }
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn partitions(&self) -> impl Iterator<Item = i32> + '_ {
        self.partitions.keys().copied()
    }

    /// Outputs of `partition` before `offset` are not here (this instance
    /// restored a snapshot taken there).
    pub(super) fn missing_before(&mut self, partition: i32, offset: i64) {
        let below = self.missing_below.entry(partition).or_insert(offset);
        *below = (*below).max(offset);
    }

    /// Keep the outputs of the message at `partition`/`offset`. Beyond the
    /// budget the oldest entries (of any partition) go, and are counted.
    pub(super) fn push(&mut self, partition: i32, offset: i64, held: Held) {
        if held.is_empty() {
            return;
        }
        let bytes = held.bytes();
        self.bytes += bytes;
        self.partitions
            .entry(partition)
            .or_default()
            .push_back(Entry {
                offset,
                held,
                bytes,
            });
        while self.bytes > self.max_bytes {
            let Some((&oldest, _)) = self
                .partitions
                .iter()
                .filter_map(|(p, q)| Some((p, q.front()?.offset)))
                .min_by_key(|&(_, offset)| offset)
            else {
                break;
            };
            let queue = self.partitions.get_mut(&oldest).expect("present");
            let dropped = queue.pop_front().expect("not empty");
            if queue.is_empty() {
                self.partitions.remove(&oldest);
            }
            self.bytes -= dropped.bytes;
            metrics::counter!(crate::telemetry::TAKEOVER_OUTPUTS_DROPPED)
                .increment(dropped.held.messages.len() as u64);
            self.missing_before(oldest, dropped.offset + 1);
        }
    }

    /// Forget what the owners have published: entries below each
    /// partition's offset committed to the group.
    pub(super) fn trim(&mut self, committed: &BTreeMap<i32, i64>) {
        for (&partition, &next) in committed {
            let Some(queue) = self.partitions.get_mut(&partition) else {
                continue;
            };
            while queue.front().is_some_and(|held| held.offset < next) {
                let gone = queue.pop_front().expect("not empty");
                self.bytes -= gone.bytes;
            }
        }
        self.partitions.retain(|_, q| !q.is_empty());
    }

    /// Hand over what `partition`'s outputs and records from offset `from`
    /// on to its new owner, this instance, into `out`. What it needed and
    /// does not have is `Lost`.
    pub(super) fn take(&mut self, partition: i32, from: i64, out: &mut Held) -> Option<Lost> {
        if let Some(queue) = self.partitions.remove(&partition) {
            for entry in queue {
                self.bytes -= entry.bytes;
                if entry.offset >= from {
                    out.extend(entry.held);
                }
            }
        }
        let until = self.missing_below.remove(&partition)?;
        (until > from).then_some(Lost {
            partition,
            from,
            until,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(n: usize) -> Held {
        Held {
            messages: vec![Outgoing {
                topic: "out".into(),
                key: vec![b'k'; n],
                payload: Vec::new(),
                headers: Vec::new(),
                caused_at: None,
            }],
            ..Held::default()
        }
    }

    fn keys(out: &Held) -> Vec<usize> {
        out.messages.iter().map(|m| m.key.len()).collect()
    }

    #[test]
    fn a_takeover_gets_the_outputs_from_the_committed_offset_on() {
        let mut outbox = Outbox::new(1 << 20);
        for offset in 0..10 {
            outbox.push(3, offset, message(offset as usize + 1));
        }
        outbox.push(4, 0, message(100));
        outbox.trim(&BTreeMap::from([(3, 4)]));
        assert_eq!(outbox.bytes(), (5..=10).sum::<usize>() + 100);
        let mut out = Held::default();
        assert_eq!(outbox.take(3, 6, &mut out), None);
        assert_eq!(keys(&out), [7, 8, 9, 10]);
        assert_eq!(outbox.bytes(), 100);
        assert_eq!(outbox.partitions().collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn what_the_budget_dropped_is_reported_lost_when_needed() {
        let mut outbox = Outbox::new(25);
        for offset in 0..5 {
            outbox.push(1, offset, message(10));
        }
        // Budget 25: only the last two messages stay.
        assert_eq!(outbox.bytes(), 20);
        let mut out = Held::default();
        let lost = outbox.take(1, 1, &mut out);
        assert_eq!(
            lost,
            Some(Lost {
                partition: 1,
                from: 1,
                until: 3
            })
        );
        assert_eq!(out.messages.len(), 2);
        // A takeover from past what was dropped loses nothing.
        for offset in 0..5 {
            outbox.push(2, offset, message(10));
        }
        assert_eq!(outbox.take(2, 3, &mut out), None);
    }

    #[test]
    fn outputs_from_before_a_restore_are_lost_only_if_needed() {
        let mut outbox = Outbox::new(1 << 20);
        outbox.missing_before(5, 100);
        let mut out = Held::default();
        assert_eq!(outbox.take(5, 100, &mut out), None);
        outbox.missing_before(5, 100);
        assert_eq!(
            outbox.take(5, 40, &mut out),
            Some(Lost {
                partition: 5,
                from: 40,
                until: 100
            })
        );
    }
}
