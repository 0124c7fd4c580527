//! What the service publishes, as Kafka messages: a decision keyed by its
//! job, a risk score keyed by its machine, a dead letter carrying the
//! unusable input unchanged, with headers that say why and where it came
//! from. Header names are part of the topic contract and live with it
//! ([`jobcast_ingest::kafka::headers`]).

use std::time::Instant;

use jobcast_ingest::kafka::{Topics, headers};
use jobcast_predictor::decision::Decision;
use jobcast_predictor::engine::{MachineRisk, Output};

use super::sink::Outgoing;
use crate::error::DeadLetter;
use crate::source::Consumed;

/// Append the messages for the decisions and risk scores among `outputs`
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
            Output::Scored { .. } => {}
        }
    }
}

/// A decision, keyed by its job so that a job's decisions stay in order
/// in one partition.
pub(super) fn decision(topics: &Topics, d: &Decision, polled_at: Option<Instant>) -> Outgoing {
    Outgoing {
        topic: topics.decisions.clone(),
        key: d.job_id.to_string().into_bytes(),
        payload: serde_json::to_vec(d).expect("decisions serialise"),
        headers: vec![
            (headers::JOB_ID, d.job_id.to_string().into_bytes()),
            (headers::VERSION, d.version.to_string().into_bytes()),
        ],
        caused_at: polled_at,
    }
}

/// A VM's risk score, keyed by its machine.
pub(super) fn risk(topics: &Topics, risk: &MachineRisk) -> Outgoing {
    Outgoing {
        topic: topics.risk.clone(),
        key: risk.machine_id.to_string().into_bytes(),
        payload: serde_json::to_vec(risk).expect("risk scores serialise"),
        headers: vec![(
            headers::MACHINE_ID,
            risk.machine_id.to_string().into_bytes(),
        )],
        caused_at: None,
    }
}

/// The input message at `partition`/`offset`, unchanged, with why it was
/// not applied.
pub(super) fn dead_letter(
    topics: &Topics,
    consumed: &Consumed,
    partition: i32,
    offset: i64,
    why: &DeadLetter,
) -> Outgoing {
    Outgoing {
        topic: topics.dead_letter.clone(),
        key: consumed.key.clone().unwrap_or_default(),
        payload: consumed.payload.clone().unwrap_or_default(),
        headers: vec![
            (headers::REASON, why.reason().as_bytes().to_vec()),
            (headers::ERROR, why.to_string().into_bytes()),
            (headers::SOURCE_TOPIC, topics.events.as_bytes().to_vec()),
            (
                headers::SOURCE_PARTITION,
                partition.to_string().into_bytes(),
            ),
            (headers::SOURCE_OFFSET, offset.to_string().into_bytes()),
        ],
        caused_at: None,
    }
}

#[cfg(test)]
mod tests {
    use jobcast_predictor::decision::{Phase, PolicyKind};
    use jobcast_predictor::engine::Rejection;

    use super::*;

    fn decision_of(job_id: u64, version: u32) -> Decision {
        Decision {
            job_id,
            version,
            queue: 2,
            phase: Phase::Sampling,
            estimate: None,
            policy: PolicyKind::SLearn,
            pilots: vec![0, 5],
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
        assert_eq!(message.caused_at, Some(polled));
        let back: Decision = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn a_dead_letter_carries_the_input_unchanged_and_says_why_and_where() {
        let topics = Topics::default();
        let consumed = Consumed::new(Some(b"job-7".to_vec()), Some(b"{\"v\":1,".to_vec()));
        let why = consumed.event.clone().unwrap_err();
        let message = dead_letter(&topics, &consumed, 4, 1234, &why);
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
        let message = dead_letter(&topics, &consumed, 0, 0, &rejected);
        assert_eq!(header(&message, headers::REASON), "unknown_job");
        assert_eq!(header(&message, headers::ERROR), "job 9 is not running");

        // A tombstone: no key, no payload, and a reason of its own.
        let empty = Consumed::new(None, None);
        let why = empty.event.clone().unwrap_err();
        assert_eq!(why, DeadLetter::Empty);
        let message = dead_letter(&topics, &empty, 0, 0, &why);
        assert!(message.key.is_empty() && message.payload.is_empty());
        assert_eq!(header(&message, headers::REASON), "empty");
    }

    #[test]
    fn only_decisions_and_risk_scores_become_messages() {
        let topics = Topics::default();
        let d = decision_of(1, 1);
        let scored = Output::Scored {
            policy: PolicyKind::SLearn,
            job_id: 1,
            error: jobcast_predictor::engine::PredictionError::of(2.0, 1.0),
        };
        let mut outgoing = Vec::new();
        outputs(&topics, &[Output::Decision(d), scored], &mut outgoing, None);
        assert_eq!(outgoing.len(), 1);
        assert_eq!(outgoing[0].topic, topics.decisions);
    }
}
