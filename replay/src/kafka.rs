//! Trace replay into Kafka: a time-ordered stream of canonical events
//! produced into the input topic, keyed by
//! [`event_key`](jobcast_ingest::kafka::event_key) (job id, or `m<id>` for
//! machine events) with the canonical JSON as value. This is how historical
//! traces reach `jobcast serve`, from the `jobcast replay` command and from
//! the embedded demo.
//!
//! The module owns three things:
//!
//! - **Order.** Events are produced one at a time in the order the iterator
//!   yields them (trace adapters yield event-time order). The producer is
//!   idempotent (see [`KafkaSettings::producer_config`]), so internal
//!   retries neither duplicate nor reorder, and keying by job keeps every
//!   event of a job in one partition, in order.
//! - **Pacing.** [`Speed::Factor`] replays in scaled event time, an optional
//!   rate cap bounds events per second, and a [`Gate`] lets the caller hold
//!   the replay back (the demo paces it against the service's consumption,
//!   since the in-process mock cluster keeps only a bounded log). The
//!   arithmetic is the pure [`due_offset`]. A replay that falls behind
//!   (a slow broker, a closed gate) catches up by sending at once; it never
//!   drops or reorders events.
//! - **Delivery accounting.** Every message is tracked to its delivery
//!   report. The first failed delivery stops the replay, and the summary
//!   names the failed event, so nothing is lost silently and a rerun can
//!   resume from [`ReplaySummary::resume_from`].
//!
//! **Offsets.** An event offset is the 0-based position of a canonical
//! event in the stream the adapter yields (trace order), *not* a Kafka
//! offset and not a line of an input file. [`ReplayOptions::skip`] resumes
//! at such an offset; the same trace and format always give the same
//! numbering.

use std::error::Error as StdError;
use std::ops::ControlFlow;
use std::str::FromStr;
use std::time::{Duration, Instant};

use jobcast_ingest::deliveries::{Deliveries, send_when_room};
use jobcast_ingest::kafka::{KafkaSettings, event_key};
use jobcast_ingest::{Event, encode};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::util::Timeout;
use serde::Serialize;

/// How long the producer may take to fetch the topic's metadata before the
/// replay starts; a wrong broker address or a missing topic fails here
/// rather than after `message.timeout.ms` (5 minutes by default).
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest single wait while pacing, so the gate (which may want to
/// stop the replay) is consulted regularly during long event-time gaps.
const MAX_WAIT: Duration = Duration::from_millis(100);

/// How long a replay waits for its producer's id before producing anyway.
const PRODUCER_ID_WAIT: Duration = Duration::from_secs(10);

/// How long to serve delivery reports before retrying a send that found
/// the producer's queue full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(5);

/// Serve delivery reports every this many sends when not pacing.
const POLL_EVERY: u64 = 256;

/// Report progress every this many events (and after every wait).
const PROGRESS_EVERY: u64 = 1024;

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Event-time pacing: the event at time `t` is sent at wall-clock
    /// `start + (t − t0) / factor`, where `t0` is the time of the first
    /// replayed event. `Factor(1.0)` is real time, `Factor(100.0)` a
    /// hundred times faster.
    Factor(f64),
    /// As fast as the producer accepts.
    Max,
}

impl FromStr for Speed {
    type Err = String;

    /// `max`, or a positive factor such as `1`, `100` or `0.5`.
    fn from_str(s: &str) -> Result<Self, String> {
        match max_or_positive(s) {
            Some(None) => Ok(Speed::Max),
            Some(Some(f)) => Ok(Speed::Factor(f)),
            None => Err(format!(
                "expected `max` or a positive speed-up factor such as 1 or 100, got `{s}`"
            )),
        }
    }
}

/// A pace as a flag gives it: `max` (`Some(None)`), a positive finite
/// number, or neither (`None`).
pub fn max_or_positive(s: &str) -> Option<Option<f64>> {
    if s == "max" {
        return Some(None);
    }
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0)
        .map(Some)
}

/// What to replay where, and how fast.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayOptions {
    /// The topic to produce into.
    pub topic: String,
    pub speed: Speed,
    /// At most this many events per second, if set.
    pub rate: Option<f64>,
    /// Start at this event offset: the first `skip` canonical events of the
    /// stream are read but not produced (see the module docs on offsets).
    pub skip: u64,
}

impl ReplayOptions {
    /// Replay everything into `topic` as fast as possible.
    pub fn new(topic: impl Into<String>) -> Self {
        ReplayOptions {
            topic: topic.into(),
            speed: Speed::Max,
            rate: None,
            skip: 0,
        }
    }

    fn validate(&self) -> Result<(), ReplayError> {
        if let Speed::Factor(f) = self.speed
            && !(f.is_finite() && f > 0.0)
        {
            return Err(ReplayError::Options(format!(
                "speed factor must be positive and finite, got {f}"
            )));
        }
        if let Some(rate) = self.rate
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(ReplayError::Options(format!(
                "rate must be positive and finite, got {rate}"
            )));
        }
        Ok(())
    }
}

/// When the `index`-th replayed event (0-based, counted from the first
/// event actually produced), at event time `time_us`, is due, as an offset
/// from the moment the first one was sent. `first_time_us` is the event
/// time of that first event; earlier times (out-of-order input) are due at
/// once. The later of the speed and the rate constraint wins.
pub fn due_offset(
    speed: Speed,
    rate: Option<f64>,
    first_time_us: u64,
    time_us: u64,
    index: u64,
) -> Duration {
    let by_time = match speed {
        Speed::Max => Duration::ZERO,
        Speed::Factor(factor) => {
            Duration::from_secs_f64(time_us.saturating_sub(first_time_us) as f64 / 1e6 / factor)
        }
    };
    let by_rate = rate.map_or(Duration::ZERO, |r| {
        Duration::from_secs_f64(index as f64 / r)
    });
    by_time.max(by_rate)
}

/// Backpressure: consulted before every event is produced, with the number
/// of events produced so far in this run. It may block until the consumer
/// has room, and returns [`ControlFlow::Break`] to end the replay early
/// (everything produced so far is still flushed and accounted for). It may
/// be called more than once for the same count (during long pacing waits).
pub trait Gate {
    fn wait_for_room(&self, produced: u64) -> ControlFlow<()>;
}

impl<F: Fn(u64) -> ControlFlow<()>> Gate for F {
    fn wait_for_room(&self, produced: u64) -> ControlFlow<()> {
        self(produced)
    }
}

/// A gate that never holds the replay back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ungated;

impl Gate for Ungated {
    fn wait_for_room(&self, _produced: u64) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}

/// A snapshot for progress displays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Event offset of the next event to read (skipped ones included).
    pub next_event: u64,
    /// Events handed to the producer in this run.
    pub produced: u64,
    /// Of those, acknowledged by the broker so far.
    pub delivered: u64,
    /// Of those, failed so far.
    pub failed: u64,
    /// Event time of the last event produced.
    pub event_time_us: Option<u64>,
    /// Wall time since the first event was produced.
    pub elapsed: Duration,
}

/// How a replay ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every event of the stream was produced and delivered.
    Complete,
    /// The [`Gate`] ended the replay early.
    Stopped,
    /// A delivery failed; the replay stopped at once.
    DeliveryFailed,
    /// Reading the stream or producing failed; only in the summary a
    /// [`ReplayError`] carries.
    Aborted,
}

/// The first event whose delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryFailure {
    /// Its event offset.
    pub event: u64,
    /// The broker's or librdkafka's reason.
    pub error: String,
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    pub outcome: Outcome,
    pub topic: String,
    /// Events read but not produced because they were before the start
    /// offset (fewer than asked if the stream is shorter).
    pub skipped: u64,
    /// Events handed to the producer; after the final flush each was either
    /// delivered or failed.
    pub produced: u64,
    pub delivered: u64,
    pub failed: u64,
    /// Key and value bytes of the delivered messages.
    pub bytes: u64,
    /// The lowest-offset failed delivery, if any.
    pub first_failure: Option<DeliveryFailure>,
    /// The event offset to pass as [`ReplayOptions::skip`] to continue this
    /// replay without losing an event: every event before it was
    /// delivered. After a failure, events after it may have been delivered
    /// too and are produced again (at-least-once).
    pub resume_from: u64,
    /// Wall time from the first produced event to the end of the flush.
    pub elapsed_secs: f64,
    /// `delivered / elapsed_secs`.
    pub events_per_sec: f64,
}

/// Why a replay could not run or had to stop. Delivery failures are not
/// errors: they end the replay with [`Outcome::DeliveryFailed`]. The errors
/// raised after producing began carry the summary up to that point, whose
/// [`resume_from`](ReplaySummary::resume_from) is where to continue.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("invalid replay options: {0}")]
    Options(String),
    #[error("cannot create the Kafka producer: {0}")]
    Producer(KafkaError),
    #[error("cannot fetch metadata of topic `{topic}` (are the brokers reachable?): {cause}")]
    Metadata { topic: String, cause: KafkaError },
    #[error("topic `{topic}` is not usable: {code} (create it first)")]
    Topic { topic: String, code: String },
    /// The stream yielded an error at event offset `event`.
    #[error("reading event {event} of the trace: {cause} (events before {} delivered)", summary.resume_from)]
    Trace {
        event: u64,
        cause: Box<dyn StdError + Send + Sync>,
        summary: Box<ReplaySummary>,
    },
    /// The producer refused event `event` for a reason other than a full
    /// queue (which is waited out).
    #[error("producing event {event}: {cause} (events before {} delivered)", summary.resume_from)]
    Send {
        event: u64,
        cause: KafkaError,
        summary: Box<ReplaySummary>,
    },
    /// The final flush failed: which events were delivered is unknown.
    #[error("flushing the producer ({unacknowledged} messages unacknowledged): {cause}")]
    Flush {
        unacknowledged: i32,
        cause: KafkaError,
    },
}

impl ReplayError {
    /// The summary up to the error, for errors raised after producing
    /// began.
    pub fn summary(&self) -> Option<&ReplaySummary> {
        match self {
            ReplayError::Trace { summary, .. } | ReplayError::Send { summary, .. } => Some(summary),
            _ => None,
        }
    }
}

/// Why producing stopped before the end of the stream, inside [`Run`].
enum Abort {
    Trace(u64, Box<dyn StdError + Send + Sync>),
    Send(u64, KafkaError),
}

/// Produce `events` into `options.topic` of the cluster `settings` points
/// at, paced by `options` and `gate`, calling `progress` now and then.
/// Returns once every produced event is acknowledged or failed.
///
/// The stream must be in event-time order for [`Speed::Factor`] pacing to
/// mean anything; it is produced in iterator order either way.
pub fn replay<I, E>(
    settings: &KafkaSettings,
    options: &ReplayOptions,
    events: I,
    gate: &dyn Gate,
    mut progress: impl FnMut(&Progress),
) -> Result<ReplaySummary, ReplayError>
where
    I: IntoIterator<Item = Result<Event, E>>,
    E: StdError + Send + Sync + 'static,
{
    options.validate()?;
    let mut config = settings.producer_config();
    // An idempotent producer sends nothing until the broker has given it an
    // id (about 0.5 s after it starts, as measured here): the first events
    // of a paced replay would queue up and leave in a burst. librdkafka
    // tells the id's state only in its statistics, so the wait needs them
    // (and is skipped if the user turned them off).
    let idempotent = config.get("enable.idempotence") == Some("true");
    let wait_for_id = idempotent
        && match config.get("statistics.interval.ms") {
            None => {
                config.set("statistics.interval.ms", "100");
                true
            }
            Some(interval) => interval != "0",
        };
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(Deliveries::new())
        .map_err(|e| ReplayError::Producer(settings.redact(e)))?;
    check_topic(&producer, &options.topic)?;
    if wait_for_id {
        let deadline = Instant::now() + PRODUCER_ID_WAIT;
        while !producer.context().has_producer_id() && Instant::now() < deadline {
            producer.poll(Duration::from_millis(10));
        }
    }

    let mut run = Run {
        producer: &producer,
        options,
        skipped: 0,
        produced: 0,
        started: None,
        first_time_us: None,
        last_time_us: None,
    };
    let result = run.produce_all(events, gate, &mut progress);
    // Flush even when producing stopped on an error, so that the events
    // before it are delivered and the summary's resume point is safe.
    let flushed = producer.flush(Timeout::Never);
    let elapsed = run.elapsed();
    progress(&run.progress(elapsed));
    flushed.map_err(|cause| ReplayError::Flush {
        unacknowledged: producer.in_flight_count(),
        cause,
    })?;
    match result {
        Ok(outcome) => Ok(run.summary(outcome, elapsed)),
        Err(Abort::Trace(event, cause)) => Err(ReplayError::Trace {
            event,
            cause,
            summary: Box::new(run.summary(Outcome::Aborted, elapsed)),
        }),
        Err(Abort::Send(event, cause)) => Err(ReplayError::Send {
            event,
            cause,
            summary: Box::new(run.summary(Outcome::Aborted, elapsed)),
        }),
    }
}

/// Fail early on unreachable brokers or an unusable topic.
fn check_topic(producer: &BaseProducer<Deliveries>, topic: &str) -> Result<(), ReplayError> {
    let metadata = producer
        .client()
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .map_err(|cause| ReplayError::Metadata {
            topic: topic.to_owned(),
            cause,
        })?;
    let error = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .and_then(|t| t.error());
    match error {
        None => Ok(()),
        Some(code) => Err(ReplayError::Topic {
            topic: topic.to_owned(),
            code: RDKafkaErrorCode::from(code).to_string(),
        }),
    }
}

/// The state of one replay while it produces.
struct Run<'a> {
    producer: &'a BaseProducer<Deliveries>,
    options: &'a ReplayOptions,
    skipped: u64,
    produced: u64,
    /// When the first event was produced: pacing starts there, so skipping
    /// a long prefix does not make the first events late.
    started: Option<Instant>,
    first_time_us: Option<u64>,
    last_time_us: Option<u64>,
}

impl Run<'_> {
    fn produce_all<I, E>(
        &mut self,
        events: I,
        gate: &dyn Gate,
        progress: &mut impl FnMut(&Progress),
    ) -> Result<Outcome, Abort>
    where
        I: IntoIterator<Item = Result<Event, E>>,
        E: StdError + Send + Sync + 'static,
    {
        let mut value = Vec::with_capacity(512);
        for (offset, item) in (0u64..).zip(events) {
            let event = item.map_err(|source| Abort::Trace(offset, Box::new(source)))?;
            if offset < self.options.skip {
                self.skipped += 1;
                if self.skipped.is_multiple_of(PROGRESS_EVERY) {
                    progress(&self.progress(Duration::ZERO));
                }
                continue;
            }
            if self.producer.context().failed() > 0 {
                return Ok(Outcome::DeliveryFailed);
            }
            if self.wait_until_due(&event, gate, progress).is_break() {
                return Ok(Outcome::Stopped);
            }
            value.clear();
            encode(&event, &mut value);
            self.send(offset, &event_key(&event), &value)?;
            self.produced += 1;
            self.last_time_us = Some(event.time_us());
            if self.produced.is_multiple_of(POLL_EVERY) {
                self.producer.poll(Duration::ZERO);
            }
            if self.produced.is_multiple_of(PROGRESS_EVERY) {
                progress(&self.progress(self.elapsed()));
            }
        }
        Ok(Outcome::Complete)
    }

    /// Hold the next event until the gate has room and it is due, serving
    /// delivery reports meanwhile.
    fn wait_until_due(
        &mut self,
        event: &Event,
        gate: &dyn Gate,
        progress: &mut impl FnMut(&Progress),
    ) -> ControlFlow<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        let first = *self.first_time_us.get_or_insert(event.time_us());
        let due = started
            + due_offset(
                self.options.speed,
                self.options.rate,
                first,
                event.time_us(),
                self.produced,
            );
        loop {
            gate.wait_for_room(self.produced)?;
            let now = Instant::now();
            if now >= due {
                return ControlFlow::Continue(());
            }
            // Serve delivery reports, then sleep. Not `poll(wait)`: it
            // returns only at its deadline and spins through the last
            // millisecond (librdkafka takes whole milliseconds), so at
            // thousands of events/s, with sub-millisecond waits, the writer
            // spun a core the service and the broker needed.
            self.producer.poll(Duration::ZERO);
            std::thread::sleep((due - now).min(MAX_WAIT));
            progress(&self.progress(self.elapsed()));
        }
    }

    /// Enqueue one message, waiting out a full queue.
    fn send(&self, offset: u64, key: &str, value: &[u8]) -> Result<(), Abort> {
        // The opaque is the event offset; usize is 64 bits on every target
        // jobcast builds for.
        let record = BaseRecord::with_opaque_to(&self.options.topic, offset as usize)
            .key(key)
            .payload(value);
        send_when_room(self.producer, record, QUEUE_FULL_BACKOFF, || {})
            .map_err(|source| Abort::Send(offset, source))
    }

    /// The summary once the producer is flushed; a delivery failure
    /// overrides `outcome`.
    fn summary(&self, outcome: Outcome, elapsed: Duration) -> ReplaySummary {
        let deliveries = self.producer.context();
        let delivered = deliveries.delivered();
        let failed = deliveries.failed();
        let first_failure = deliveries.first_failure().map(|f| DeliveryFailure {
            event: f.index as u64,
            error: f.error.to_string(),
        });
        let elapsed_secs = elapsed.as_secs_f64();
        ReplaySummary {
            outcome: if failed > 0 {
                Outcome::DeliveryFailed
            } else {
                outcome
            },
            topic: self.options.topic.clone(),
            skipped: self.skipped,
            produced: self.produced,
            delivered,
            failed,
            bytes: deliveries.bytes(),
            resume_from: first_failure
                .as_ref()
                .map_or(self.skipped + self.produced, |f| f.event),
            first_failure,
            elapsed_secs,
            events_per_sec: if elapsed_secs > 0.0 {
                delivered as f64 / elapsed_secs
            } else {
                0.0
            },
        }
    }

    fn elapsed(&self) -> Duration {
        self.started.map_or(Duration::ZERO, |s| s.elapsed())
    }

    fn progress(&self, elapsed: Duration) -> Progress {
        let deliveries = self.producer.context();
        Progress {
            next_event: self.skipped + self.produced,
            produced: self.produced,
            delivered: deliveries.delivered(),
            failed: deliveries.failed(),
            event_time_us: self.last_time_us,
            elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;

    #[test]
    fn max_speed_without_rate_is_never_held_back() {
        assert_eq!(
            due_offset(Speed::Max, None, 0, 3600 * SEC, 1_000_000),
            Duration::ZERO
        );
    }

    #[test]
    fn factor_scales_event_time_from_the_first_replayed_event() {
        let t0 = 1000 * SEC;
        assert_eq!(
            due_offset(Speed::Factor(1.0), None, t0, t0 + 90 * SEC, 5),
            Duration::from_secs(90)
        );
        assert_eq!(
            due_offset(Speed::Factor(100.0), None, t0, t0 + 90 * SEC, 5),
            Duration::from_millis(900)
        );
        assert_eq!(
            due_offset(Speed::Factor(0.5), None, t0, t0 + 3 * SEC, 0),
            Duration::from_secs(6)
        );
        // Simultaneous events are all due together.
        assert_eq!(
            due_offset(Speed::Factor(1.0), None, t0, t0, 99),
            Duration::ZERO
        );
    }

    #[test]
    fn out_of_order_events_are_due_at_once() {
        assert_eq!(
            due_offset(Speed::Factor(1.0), None, 10 * SEC, 4 * SEC, 3),
            Duration::ZERO
        );
    }

    #[test]
    fn rate_caps_events_per_second() {
        assert_eq!(due_offset(Speed::Max, Some(100.0), 0, 0, 0), Duration::ZERO);
        assert_eq!(
            due_offset(Speed::Max, Some(100.0), 0, 0, 250),
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn the_later_constraint_wins() {
        // Event time says 10 s, the rate cap says 2 s.
        assert_eq!(
            due_offset(Speed::Factor(1.0), Some(10.0), 0, 10 * SEC, 20),
            Duration::from_secs(10)
        );
        // A burst of simultaneous events is spread out by the cap.
        assert_eq!(
            due_offset(Speed::Factor(1.0), Some(10.0), 0, 0, 20),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn speeds_parse() {
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        assert_eq!("1".parse::<Speed>(), Ok(Speed::Factor(1.0)));
        assert_eq!("100".parse::<Speed>(), Ok(Speed::Factor(100.0)));
        for bad in ["0", "-2", "inf", "NaN", "fast", ""] {
            assert!(bad.parse::<Speed>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn invalid_options_are_rejected_before_connecting() {
        let mut options = ReplayOptions::new("t");
        options.speed = Speed::Factor(0.0);
        assert!(matches!(options.validate(), Err(ReplayError::Options(_))));
        let mut options = ReplayOptions::new("t");
        options.rate = Some(-1.0);
        assert!(matches!(options.validate(), Err(ReplayError::Options(_))));
        assert!(ReplayOptions::new("t").validate().is_ok());
    }
}
