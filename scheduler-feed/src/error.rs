//! Why the service stops. Everything else (a bad message, a failed
//! delivery, a broker outage) is handled where it happens and the stream
//! goes on.

use jobcast_ingest::config::ConfigError;
use jobcast_ingest::event::DecodeError;
use jobcast_predictor::engine::{Rejection, RestoreError, SnapshotError};
use jobcast_storage::state::{Skip, StoreError};
use rdkafka::error::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("cannot start the source thread: {0}")]
    Thread(std::io::Error),
    #[error("stopped with {0} output messages unacknowledged; their batch was not committed")]
    Unacknowledged(usize),
    #[error("the pipeline thread panicked")]
    Panicked,
    #[error(
        "input partition {partition} of {topic}: the state needs its messages from offset {stored} on, \
         but the broker holds them only from {low} on (its retention deleted the rest). Rebuild the \
         state from what the topic holds (stop, `jobcast admin rebuild --data-dir <storage.path>`, \
         start), or accept the gap with -X auto.offset.reset=earliest"
    )]
    InputGone {
        topic: String,
        partition: i32,
        stored: i64,
        low: i64,
    },
    #[error(
        "input partition {partition} of {topic}: the state has applied it up to offset {stored}, \
         but the broker's partition ends at {high} (the topic was deleted and created again, or \
         the broker lost records). Rebuild the state from what the topic holds (stop, `jobcast \
         admin rebuild --data-dir <storage.path>`, start)"
    )]
    InputAhead {
        topic: String,
        partition: i32,
        stored: i64,
        high: i64,
    },
    #[error(
        "the broker no longer holds input messages the state needs ({0}); restart to see which \
         partition and offsets"
    )]
    InputReset(KafkaError),
    #[error("the stored snapshot cannot be restored: {0}")]
    Restore(#[from] RestoreError),
    #[error("cannot take a snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
}

/// Why a consumed message goes to the dead-letter topic instead of being
/// applied. The stream goes on either way.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeadLetter {
    /// No payload (a tombstone).
    #[error("the message has no payload")]
    Empty,
    /// Not a canonical event.
    #[error(transparent)]
    Decode(DecodeError),
    /// A well-formed event that makes no sense in the state it arrives in.
    #[error(transparent)]
    Rejected(Rejection),
    /// In a range the operator told the service to skip (`jobcast admin
    /// skip`): never decoded nor applied.
    #[error("skipped by the operator: {0}")]
    Skipped(Box<Skip>),
}

impl DeadLetter {
    /// A short, stable class: the `reason` metric label and dead-letter
    /// header.
    pub fn reason(&self) -> &'static str {
        match self {
            DeadLetter::Empty => "empty",
            DeadLetter::Decode(e) => e.kind.as_str(),
            DeadLetter::Rejected(r) => r.reason,
            DeadLetter::Skipped(_) => "skipped",
        }
    }
}
