//! What the service publishes, as Kafka messages: a decision keyed by its
//! job (a runtime decision, or a deadline job's plan or recovery, told
//! apart by a `kind` header), a risk score keyed by its machine, a capacity decision on the one
//! key `capacity`, a dead letter carrying the
//! unusable input unchanged, with headers that say why and where it came
//! from. Header names are part of the topic contract and live with it
//! ([`jobcast_ingest::kafka::headers`]).

use std::time::Instant;

use jobcast_ingest::event;
use jobcast_ingest::kafka::{KafkaSettings, Topics, event_key, headers};
use jobcast_predictor::decision::Decision;
use jobcast_predictor::engine::{CapacityDecision, DeadlineDecision, MachineRisk, Output, Refused};

use super::sink::Outgoing;
use crate::error::DeadLetter;
use crate::source::Consumed;

/// Append the messages for the decisions, risk scores and capacity
/// decisions among `outputs`
/// (scores of policies' errors are metrics, not messages). `polled_at` is
/// when the input that caused them was consumed, for the latency metric.
pub(super) fn outputs(
    topics: &Topics,
    outputs: &[Output],
    outgoing: &mut Vec<Outgoing>,
    polled_at: Option<Instant>,
) {
    for output in outputs {
        match output {
            Output::Decision(d) => outgoing.push(decision(topics, d, polled_at)),
            Output::Risk(r) => outgoing.push(risk(topics, r)),
            Output::Capacity(c) => outgoing.push(capacity(topics, c)),
            Output::Deadline { decision, .. } => outgoing.push(deadline(topics, decision)),
            Output::Scored { .. } | Output::EtaScored { .. } => {}
        }
    }
}

/// What one input message gave rise to, as messages appended to `out`: the
/// outputs of the events it applied (its own, and those held before it on
/// its partition that it released), a dead letter for each held event it
/// showed to stand alone, and its own if it was not applied. Returns the
/// dead letters' reasons.
#[allow(clippy::too_many_arguments)]
pub(super) fn of_message(
    to: &DeadLetters<'_>,
    consumed: &Consumed,
    partition: i32,
    offset: i64,
    outcome: &Result<(), DeadLetter>,
    applied: (&[Output], &[Refused]),
    polled_at: Option<Instant>,
    out: &mut Vec<Outgoing>,
) -> Vec<&'static str> {
    let (produced, refused) = applied;
    outputs(to.topics, produced, out, polled_at);
    let mut reasons = Vec::new();
    for r in refused {
        out.push(refused_letter(to, r));
        reasons.push(r.rejection.reason);
    }
    if let Err(dead) = outcome {
        out.push(dead_letter(to, consumed, partition, offset, dead));
        reasons.push(dead.reason());
    }
    reasons
}

/// A decision, keyed by its job so that a job's decisions stay in order
/// in one partition.
pub(super) fn decision(topics: &Topics, d: &Decision, polled_at: Option<Instant>) -> Outgoing {
    let payload = serde_json::to_vec(d).expect("decisions serialise");
    of_job(
        topics,
        (d.job_id, d.version),
        headers::DECISION,
        payload,
        polled_at,
    )
}

/// A deadline job's plan or recovery, on the decisions topic keyed by its
/// job as its runtime decisions are, so that a scheduler reads them in
/// order; its own `kind` and versions.
pub(super) fn deadline(topics: &Topics, d: &DeadlineDecision) -> Outgoing {
    let payload = serde_json::to_vec(d).expect("deadline decisions serialise");
    of_job(
        topics,
        (d.job_id, d.version),
        headers::DEADLINE,
        payload,
        None,
    )
}

/// A message of the decisions topic about a job: keyed by the job, with
/// its id, the (`job_id`, `version`) and the `kind` in headers.
fn of_job(
    topics: &Topics,
    (job_id, version): (u64, u32),
    kind: &str,
    payload: Vec<u8>,
    caused_at: Option<Instant>,
) -> Outgoing {
    Outgoing {
        topic: topics.decisions.clone(),
        key: job_id.to_string().into_bytes(),
        payload,
        headers: vec![
            (headers::JOB_ID.into(), job_id.to_string().into_bytes()),
            (headers::VERSION.into(), version.to_string().into_bytes()),
            (headers::KIND.into(), kind.as_bytes().to_vec()),
        ],
        caused_at,
    }
}

/// A VM's risk score, keyed by its machine.
pub(super) fn risk(topics: &Topics, risk: &MachineRisk) -> Outgoing {
    Outgoing {
        topic: topics.risk.clone(),
        key: risk.machine_id.to_string().into_bytes(),
        payload: serde_json::to_vec(risk).expect("risk scores serialise"),
        headers: vec![(
            headers::MACHINE_ID.into(),
            risk.machine_id.to_string().into_bytes(),
        )],
        caused_at: None,
    }
}

/// A capacity decision, on one key so that the decisions stay in order in
/// one partition; its version in a header as a decision's.
pub(super) fn capacity(topics: &Topics, decision: &CapacityDecision) -> Outgoing {
    Outgoing {
        topic: topics.capacity.clone(),
        key: headers::CAPACITY_KEY.as_bytes().to_vec(),
        payload: serde_json::to_vec(decision).expect("capacity decisions serialise"),
        headers: vec![(
            headers::VERSION.into(),
            decision.version.to_string().into_bytes(),
        )],
        caused_at: None,
    }
}

/// Where a dead letter goes, and the most bytes it may take.
pub(super) struct DeadLetters<'a> {
    pub(super) topics: &'a Topics,
    /// The output producer's `message.max.bytes`.
    pub(super) max_message_bytes: usize,
}

impl<'a> DeadLetters<'a> {
    pub(super) fn new(topics: &'a Topics, kafka: &KafkaSettings) -> Self {
        DeadLetters {
            topics,
            max_message_bytes: kafka
                .client
                .get("message.max.bytes")
                .and_then(|bytes| bytes.parse().ok())
                .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES),
        }
    }
}

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// What librdkafka adds to a record's key, value and headers when it
/// checks a message against `message.max.bytes`
/// (`RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`, 36 bytes), with room to spare;
/// and, per header, to its name and value (two length varints).
const RECORD_OVERHEAD: usize = 64;
const HEADER_OVERHEAD: usize = 10;

/// The input message at `partition`/`offset`, unchanged, with why it was
/// not applied; cut to fit, if need be (see [`fit`]).
pub(super) fn dead_letter(
    to: &DeadLetters<'_>,
    consumed: &Consumed,
    partition: i32,
    offset: i64,
    why: &DeadLetter,
) -> Outgoing {
    letter(
        to,
        consumed.key.clone().unwrap_or_default(),
        consumed.payload.clone().unwrap_or_default(),
        partition,
        offset,
        why,
    )
}

/// An event the engine held far ahead of its clock and then refused
/// (`engine/clock.rs`): the input it came from is no longer at hand, so
/// the letter carries the event in its canonical wire form, keyed as the
/// input is, with the partition and offset it came from.
pub(super) fn refused_letter(to: &DeadLetters<'_>, refused: &Refused) -> Outgoing {
    let mut payload = Vec::new();
    event::encode(&refused.event, &mut payload);
    letter(
        to,
        event_key(&refused.event).into_bytes(),
        payload,
        refused.origin.partition,
        refused.origin.offset,
        &DeadLetter::Rejected(refused.rejection.clone()),
    )
}

fn letter(
    to: &DeadLetters<'_>,
    key: Vec<u8>,
    payload: Vec<u8>,
    partition: i32,
    offset: i64,
    why: &DeadLetter,
) -> Outgoing {
    let topics = to.topics;
    let mut message = Outgoing {
        topic: topics.dead_letter.clone(),
        key,
        payload,
        headers: vec![
            (headers::REASON.into(), why.reason().as_bytes().to_vec()),
            (headers::ERROR.into(), why.to_string().into_bytes()),
            (
                headers::SOURCE_TOPIC.into(),
                topics.events.as_bytes().to_vec(),
            ),
            (
                headers::SOURCE_PARTITION.into(),
                partition.to_string().into_bytes(),
            ),
            (
                headers::SOURCE_OFFSET.into(),
                offset.to_string().into_bytes(),
            ),
        ],
        caused_at: None,
    };
    fit(&mut message, to.max_message_bytes);
    message
}

/// Cut a dead letter's payload (and, were that not enough, its key) so
/// that it fits `max_bytes` as librdkafka counts them. A dead letter is
/// its input plus headers, so an input near the limit would otherwise be
/// refused by the producer for ever, and its partition's stream would stop
/// behind it. The original sizes go in a header.
fn fit(message: &mut Outgoing, max_bytes: usize) {
    let headers_bytes = |message: &Outgoing| -> usize {
        message
            .headers
            .iter()
            .map(|(name, value)| HEADER_OVERHEAD + name.len() + value.len())
            .sum()
    };
    let size = RECORD_OVERHEAD + message.key.len() + message.payload.len() + headers_bytes(message);
    if size <= max_bytes {
        return;
    }
    let sizes = format!("{} {}", message.key.len(), message.payload.len());
    message
        .headers
        .push((headers::TRUNCATED.into(), sizes.into_bytes()));
    let room = max_bytes.saturating_sub(RECORD_OVERHEAD + headers_bytes(message));
    message.key.truncate(room);
    message.payload.truncate(room - message.key.len());
}

#[cfg(test)]
mod tests {
    use jobcast_predictor::decision::{Phase, PolicyKind};
    use jobcast_predictor::engine::Rejection;

    use super::*;

    fn decision_of(job_id: u64, version: u32) -> Decision {
        Decision {
            pilots: vec![0, 5],
            ..Decision::new(PolicyKind::SLearn, job_id, version, 2, Phase::Sampling)
        }
    }

    fn header<'a>(message: &'a Outgoing, name: &str) -> &'a str {
        let (_, value) = message
            .headers
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no {name} header"));
        std::str::from_utf8(value).unwrap()
    }

    #[test]
    fn a_decision_is_keyed_by_its_job_and_says_its_version() {
        let topics = Topics::default();
        let d = decision_of(42, 3);
        let polled = Instant::now();
        let message = decision(&topics, &d, Some(polled));
        assert_eq!(message.topic, topics.decisions);
        assert_eq!(message.key, b"42");
        assert_eq!(header(&message, headers::JOB_ID), "42");
        assert_eq!(header(&message, headers::VERSION), "3");
        assert_eq!(header(&message, headers::KIND), headers::DECISION);
        assert_eq!(message.caused_at, Some(polled));
        let back: Decision = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn a_dead_letter_carries_the_input_unchanged_and_says_why_and_where() {
        let topics = Topics::default();
        let consumed = Consumed::new(Some(b"job-7".to_vec()), Some(b"{\"v\":1,".to_vec()));
        let why = consumed.event.clone().unwrap_err();
        let to = DeadLetters::new(&topics, &KafkaSettings::default());
        let message = dead_letter(&to, &consumed, 4, 1234, &why);
        assert_eq!(message.topic, topics.dead_letter);
        assert_eq!(message.key, b"job-7");
        assert_eq!(message.payload, b"{\"v\":1,");
        assert_eq!(header(&message, headers::REASON), "syntax");
        assert_eq!(header(&message, headers::ERROR), why.to_string());
        assert_eq!(header(&message, headers::SOURCE_TOPIC), topics.events);
        assert_eq!(header(&message, headers::SOURCE_PARTITION), "4");
        assert_eq!(header(&message, headers::SOURCE_OFFSET), "1234");

        let rejected = DeadLetter::Rejected(Rejection {
            reason: "unknown_job",
            message: "job 9 is not running".into(),
        });
        let message = dead_letter(&to, &consumed, 0, 0, &rejected);
        assert_eq!(header(&message, headers::REASON), "unknown_job");
        assert_eq!(header(&message, headers::ERROR), "job 9 is not running");

        // A tombstone: no key, no payload, and a reason of its own.
        let empty = Consumed::new(None, None);
        let why = empty.event.clone().unwrap_err();
        assert_eq!(why, DeadLetter::Empty);
        let message = dead_letter(&to, &empty, 0, 0, &why);
        assert!(message.key.is_empty() && message.payload.is_empty());
        assert_eq!(header(&message, headers::REASON), "empty");
    }

    #[test]
    fn a_dead_letter_over_the_producer_limit_is_cut_to_fit_and_says_so() {
        let topics = Topics::default();
        let mut kafka = KafkaSettings::default();
        let to = DeadLetters::new(&topics, &kafka);
        assert_eq!(to.max_message_bytes, 1_000_000);
        let size = |m: &Outgoing| {
            RECORD_OVERHEAD
                + m.key.len()
                + m.payload.len()
                + m.headers
                    .iter()
                    .map(|(n, v)| HEADER_OVERHEAD + n.len() + v.len())
                    .sum::<usize>()
        };
        // Under the limit itself; the headers take it over.
        let payload: Vec<u8> = (0..999_900u32).map(|i| (i % 251) as u8).collect();
        let consumed = Consumed::new(Some(b"k".to_vec()), Some(payload.clone()));
        let why = consumed.event.clone().unwrap_err();
        let message = dead_letter(&to, &consumed, 0, 7, &why);
        assert!(size(&message) <= 1_000_000, "{}", size(&message));
        assert!(message.payload.len() > 990_000);
        assert!(payload.starts_with(&message.payload));
        assert_eq!(message.key, b"k");
        assert_eq!(header(&message, headers::TRUNCATED), "1 999900");
        assert_eq!(header(&message, headers::SOURCE_OFFSET), "7");

        // The configured limit counts; within it, nothing is cut.
        kafka
            .client
            .insert("message.max.bytes".into(), "2000000".into());
        let to = DeadLetters::new(&topics, &kafka);
        let message = dead_letter(&to, &consumed, 0, 7, &why);
        assert_eq!(message.payload, payload);
        assert!(
            message
                .headers
                .iter()
                .all(|(n, _)| *n != headers::TRUNCATED)
        );

        // A key too large on its own is cut as well.
        let huge_key = Consumed::new(Some(vec![b'k'; 1_200_000]), Some(b"{".to_vec()));
        let to = DeadLetters::new(&topics, &KafkaSettings::default());
        let message = dead_letter(&to, &huge_key, 0, 7, &why);
        assert!(size(&message) <= 1_000_000);
        assert!(message.payload.is_empty());
        assert_eq!(header(&message, headers::TRUNCATED), "1200000 1");
    }

    #[test]
    fn only_decisions_and_risk_scores_become_messages() {
        let topics = Topics::default();
        let d = decision_of(1, 1);
        let scored = Output::Scored {
            policy: PolicyKind::SLearn,
            job_id: 1,
            error: jobcast_predictor::engine::PredictionError::of(2.0, 1.0),
            covered: None,
        };
        let mut outgoing = Vec::new();
        outputs(&topics, &[Output::Decision(d), scored], &mut outgoing, None);
        assert_eq!(outgoing.len(), 1);
        assert_eq!(outgoing[0].topic, topics.decisions);
    }
}
