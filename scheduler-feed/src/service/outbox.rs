//! Outputs of partitions other instances own, kept until their owner has
//! published them.
//!
//! Every instance applies every partition, so it computes every output;
//! it publishes only its own partitions'. When the group gives it another
//! partition, the outputs its previous owner had not published (from the
//! offset that owner committed to the group on) are already here, and the
//! instance publishes them without replaying anything. Entries below a
//! partition's committed offset are trimmed as the owner's commits come in
//! ([`Outbox::trim`]). Nothing is ever dropped: past its byte budget the
//! outbox is [`full`](Outbox::full), and the pipeline reads no more input
//! until the owners' commits have trimmed it (`pipeline.rs`), so memory is
//! bounded by the budget plus one batch, and an instance runs no further
//! ahead of the slowest owner than the budget allows.
//!
//! Each snapshot carries the outbox ([`Outbox::saved`]): an instance that
//! restores one cannot compute the outputs before it again, yet may be the
//! next owner of a partition whose owner died before storing them.

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

use jobcast_predictor::engine::{JobRecord, Output, SnapshotError};
use serde::{Deserialize, Serialize};

use super::sink::Outgoing;

/// What a new owner of a partition would have to publish and store for
/// one input message (or, for `ended`, one batch): the messages, the
/// decisions among them, and the final records of the jobs that ended,
/// which leave the engine's memory.
#[derive(Default)]
pub(super) struct Held {
    pub messages: Vec<Outgoing>,
    pub decisions: Vec<HeldDecision>,
    pub ended: Vec<EndedJob>,
}

/// A decision as the store keeps it: its JSON, under its job and version.
#[derive(Clone, Serialize, Deserialize)]
pub(super) struct HeldDecision {
    pub job_id: u64,
    pub version: u32,
    pub json: Vec<u8>,
}

impl HeldDecision {
    /// The decisions among `outputs`, for the store of whoever publishes
    /// them.
    pub(super) fn all_of(outputs: &[Output]) -> Vec<HeldDecision> {
        outputs
            .iter()
            .filter_map(|o| match o {
                Output::Decision(d) => Some(HeldDecision {
                    job_id: d.job_id,
                    version: d.version,
                    json: serde_json::to_vec(d).expect("decisions serialise"),
                }),
                _ => None,
            })
            .collect()
    }
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
        let decisions: usize = self.decisions.iter().map(|d| d.json.len()).sum();
        let records: usize = self
            .ended
            .iter()
            .map(|e| JOB_RECORD_BYTES + e.tasks.iter().map(|(_, t)| t.len()).sum::<usize>())
            .sum();
        messages + decisions + records
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
}

impl Outbox {
    pub(super) fn new(max_bytes: usize) -> Self {
        Outbox {
            partitions: BTreeMap::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Past the budget: no more input until the owners' commits trim it.
    pub(super) fn full(&self) -> bool {
        self.bytes > self.max_bytes
    }

    pub(super) fn partitions(&self) -> impl Iterator<Item = i32> + '_ {
        self.partitions.keys().copied()
    }

    /// Keep the outputs of the message at `partition`/`offset`, whatever
    /// the budget (the pipeline waits while it is [`Self::full`]).
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
    /// on to its new owner, this instance, into `out`.
    pub(super) fn take(&mut self, partition: i32, from: i64, out: &mut Held) {
        if let Some(queue) = self.partitions.remove(&partition) {
            for entry in queue {
                self.bytes -= entry.bytes;
                if entry.offset >= from {
                    out.extend(entry.held);
                }
            }
        }
    }
}

/// The outbox as a snapshot stores it: borrowed when saved, owned when
/// restored.
#[derive(Default, Serialize, Deserialize)]
pub(super) struct SavedOutbox<'a> {
    entries: Vec<SavedEntry<'a>>,
}

#[derive(Serialize, Deserialize)]
struct SavedEntry<'a> {
    partition: i32,
    offset: i64,
    messages: Vec<SavedMessage<'a>>,
    decisions: Cow<'a, [HeldDecision]>,
    ended: Vec<SavedEnded<'a>>,
}

/// An ended job's record (`JobRecord::to_bytes`) and its tasks'.
#[derive(Serialize, Deserialize)]
struct SavedEnded<'a> {
    job_id: u64,
    record: Vec<u8>,
    tasks: Cow<'a, [(u32, Vec<u8>)]>,
}

#[derive(Serialize, Deserialize)]
struct SavedMessage<'a> {
    topic: Cow<'a, str>,
    key: Cow<'a, [u8]>,
    payload: Cow<'a, [u8]>,
    headers: Vec<(Cow<'a, str>, Cow<'a, [u8]>)>,
}

impl Outbox {
    /// What a snapshot keeps of the outbox: every entry.
    pub(super) fn saved(&self) -> SavedOutbox<'_> {
        let entries = self
            .partitions
            .iter()
            .flat_map(|(&partition, queue)| queue.iter().map(move |e| (partition, e)))
            .map(|(partition, entry)| SavedEntry {
                partition,
                offset: entry.offset,
                messages: entry
                    .held
                    .messages
                    .iter()
                    .map(|m| SavedMessage {
                        topic: Cow::Borrowed(&m.topic),
                        key: Cow::Borrowed(&m.key),
                        payload: Cow::Borrowed(&m.payload),
                        headers: m
                            .headers
                            .iter()
                            .map(|(k, v)| (Cow::Borrowed(k.as_ref()), Cow::Borrowed(&v[..])))
                            .collect(),
                    })
                    .collect(),
                decisions: Cow::Borrowed(&entry.held.decisions),
                ended: entry
                    .held
                    .ended
                    .iter()
                    .map(|e| SavedEnded {
                        job_id: e.record.job_id,
                        record: e.record.to_bytes(),
                        tasks: Cow::Borrowed(&e.tasks[..]),
                    })
                    .collect(),
            })
            .collect();
        SavedOutbox { entries }
    }

    /// The outbox a snapshot saved, under the budget `max_bytes`.
    pub(super) fn restored(
        max_bytes: usize,
        saved: SavedOutbox<'_>,
    ) -> Result<Self, SnapshotError> {
        let mut outbox = Outbox::new(max_bytes);
        for entry in saved.entries {
            let messages = entry
                .messages
                .into_iter()
                .map(|m| Outgoing {
                    topic: m.topic.into_owned(),
                    key: m.key.into_owned(),
                    payload: m.payload.into_owned(),
                    headers: m
                        .headers
                        .into_iter()
                        .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                        .collect(),
                    caused_at: None,
                })
                .collect();
            let ended = entry
                .ended
                .into_iter()
                .map(
                    |SavedEnded {
                         job_id,
                         record,
                         tasks,
                     }| {
                        let record = JobRecord::from_bytes(&record).map_err(|reason| {
                            SnapshotError::Record {
                                job_id,
                                reason: format!("held for another owner: {reason}"),
                            }
                        })?;
                        Ok(EndedJob {
                            record,
                            tasks: tasks.into_owned(),
                        })
                    },
                )
                .collect::<Result<_, SnapshotError>>()?;
            let held = Held {
                messages,
                decisions: entry.decisions.into_owned(),
                ended,
            };
            outbox.push(entry.partition, entry.offset, held);
        }
        Ok(outbox)
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
        outbox.take(3, 6, &mut out);
        assert_eq!(keys(&out), [7, 8, 9, 10]);
        assert_eq!(outbox.bytes(), 100);
        assert_eq!(outbox.partitions().collect::<Vec<_>>(), [4]);
    }

    /// Past its budget the outbox keeps everything and says it is full;
    /// the owners' commits empty it, and a takeover still gets every
    /// output.
    #[test]
    fn past_its_budget_the_outbox_drops_nothing_and_is_full_until_trimmed() {
        let mut outbox = Outbox::new(25);
        for offset in 0..5 {
            outbox.push(1, offset, message(10));
            outbox.push(2, offset, message(10));
        }
        assert_eq!(outbox.bytes(), 100);
        assert!(outbox.full());
        outbox.trim(&BTreeMap::from([(1, 4)]));
        assert!(outbox.full(), "60 bytes held");
        outbox.trim(&BTreeMap::from([(2, 4)]));
        assert!(!outbox.full(), "20 bytes held");
        let mut out = Held::default();
        outbox.take(1, 4, &mut out);
        outbox.take(2, 4, &mut out);
        assert_eq!(keys(&out), [10, 10]);
        assert_eq!(outbox.bytes(), 0);
    }

    #[test]
    fn a_restored_outbox_holds_what_was_saved() {
        use jobcast_predictor::engine::JobState;

        let record = JobRecord {
            job_id: 9,
            submit_us: 1,
            user: "u".into(),
            job_name: "n".into(),
            logical_name: String::new(),
            cluster: String::new(),
            width: 1,
            state: JobState::Finished,
            end_us: Some(5),
            tasks_finished: 1,
            estimates: Default::default(),
            actual_mean_task_runtime_us: Some(4.0),
            errors: Default::default(),
            eta: None,
        };
        let ended = Held {
            messages: vec![Outgoing {
                topic: "out".into(),
                key: b"9".to_vec(),
                payload: b"{}".to_vec(),
                headers: vec![("h".into(), b"v".to_vec())],
                caused_at: None,
            }],
            decisions: vec![HeldDecision {
                job_id: 9,
                version: 2,
                json: b"{}".to_vec(),
            }],
            ended: vec![EndedJob {
                record: record.clone(),
                tasks: vec![(0, vec![1, 2, 3])],
            }],
        };
        // Three messages of 10 bytes, then 210 (the record's 200, its task's
        // 3, the decision's 2, the message's 5): past the budget of 235,
        // all kept.
        let mut outbox = Outbox::new(235);
        for offset in 0..3 {
            outbox.push(1, offset, message(10));
        }
        outbox.push(2, 7, ended);
        assert_eq!(outbox.bytes(), 240);

        let bytes = postcard::to_allocvec(&outbox.saved()).unwrap();
        let saved: SavedOutbox<'_> = postcard::from_bytes(&bytes).unwrap();
        let mut restored = Outbox::restored(235, saved).unwrap();
        assert_eq!(restored.bytes(), 240);
        assert!(restored.full());
        let mut out = Held::default();
        restored.take(1, 0, &mut out);
        assert_eq!(keys(&out), [10, 10, 10]);
        let mut out = Held::default();
        restored.take(2, 7, &mut out);
        let message = &out.messages[0];
        assert_eq!(
            (&message.topic[..], &message.key[..], &message.payload[..]),
            ("out", &b"9"[..], &b"{}"[..])
        );
        assert_eq!(message.headers, [("h".into(), b"v".to_vec())]);
        let decision = &out.decisions[0];
        assert_eq!((decision.job_id, decision.version), (9, 2));
        assert_eq!(out.ended[0].record, record);
        assert_eq!(out.ended[0].tasks, [(0, vec![1, 2, 3])]);
        assert_eq!(restored.bytes(), 0);
    }
}
