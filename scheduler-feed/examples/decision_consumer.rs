//! A minimal downstream consumer of jobcast's decisions: it keeps the
//! newest decision of every job and drops stale and duplicate ones, which
//! is all a scheduler needs to do to honour jobcast's at-least-once output.
//!
//! ```text
//! cargo run --release --example decision_consumer -- BROKERS [TOPIC]
//! ```

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use serde::Deserialize;

/// The fields a scheduler acts on; the message carries more (see
/// docs/kafka.md).
#[derive(Debug, Deserialize)]
struct Decision {
    job_id: u64,
    version: u32,
    queue: u8,
    #[serde(default)]
    pilots: Vec<u32>,
    /// When the job should finish (event time, µs), if jobcast could say.
    eta: Option<Eta>,
}

#[derive(Debug, Deserialize)]
struct Eta {
    p50_us: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let brokers = args
        .next()
        .ok_or("usage: decision_consumer BROKERS [TOPIC]")?;
    let topic = args.next().unwrap_or_else(|| "jobcast.decisions".into());
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "example-scheduler")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[&topic])?;

    // Newest version applied per job. A real scheduler would also forget
    // jobs once they end.
    let mut applied: HashMap<u64, u32> = HashMap::new();
    loop {
        let Some(message) = consumer.poll(Duration::from_secs(1)) else {
            continue;
        };
        let message = message?;
        // The topic also carries deadline jobs' plans (`jobcast.kind:
        // deadline`), with versions of their own.
        let deadline = message.headers().is_some_and(|headers| {
            headers
                .iter()
                .any(|h| h.key == "jobcast.kind" && h.value == Some(&b"deadline"[..]))
        });
        if deadline {
            continue;
        }
        let Some(payload) = message.payload() else {
            continue;
        };
        let decision: Decision = serde_json::from_slice(payload)?;
        let newest = applied.entry(decision.job_id).or_insert(0);
        if decision.version <= *newest {
            // A redelivery after a restart of jobcast, or an older decision
            // overtaken by a newer one: nothing to do.
            continue;
        }
        *newest = decision.version;
        let eta = decision
            .eta
            .map(|eta| format!(", done by {} µs", eta.p50_us))
            .unwrap_or_default();
        if decision.pilots.is_empty() {
            println!(
                "job {} → queue {} (v{}){eta}",
                decision.job_id, decision.queue, decision.version
            );
        } else {
            println!(
                "job {} → queue {} (v{}){eta}, run tasks {:?} first",
                decision.job_id, decision.queue, decision.version, decision.pilots
            );
        }
    }
}
