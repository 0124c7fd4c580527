//! The command-line flags every jobcast command that talks to Kafka takes
//! (`--brokers`, `-X KEY=VALUE`, the topics' names), one definition for the
//! CLI and the benchmarks alike (feature `cli`).

use crate::config::ConfigError;
use crate::kafka::{KafkaSettings, Topics};

#[derive(clap::Args, Debug, Clone)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers (`host:port,…`).
    #[arg(long, env = "JOBCAST_BROKERS")]
    pub brokers: Option<String>,
    /// A librdkafka client property passed through unchanged, e.g.
    /// `-X security.protocol=sasl_ssl -X sasl.mechanism=PLAIN`. Repeatable.
    #[arg(short = 'X', long = "kafka-property", value_name = "KEY=VALUE", value_parser = parse_property)]
    pub properties: Vec<(String, String)>,
}

pub fn parse_property(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))?;
    if key.trim().is_empty() {
        return Err(format!("empty property name in {s:?}"));
    }
    Ok((key.trim().to_owned(), value.to_owned()))
}

impl KafkaArgs {
    /// Apply the flags over `base` (flags win).
    pub fn apply(&self, mut base: KafkaSettings) -> KafkaSettings {
        if let Some(brokers) = &self.brokers {
            base.brokers = brokers.clone();
        }
        for (key, value) in &self.properties {
            base.client.insert(key.clone(), value.clone());
        }
        base
    }

    /// Settings from the flags alone; the brokers are required.
    pub fn settings(&self) -> Result<KafkaSettings, ConfigError> {
        let brokers = self.brokers.clone().ok_or_else(|| {
            ConfigError::new(
                "--brokers",
                "no Kafka brokers: pass --brokers or set JOBCAST_BROKERS",
            )
        })?;
        Ok(self.apply(KafkaSettings::new(brokers)))
    }
}

/// The service's topics, for commands that talk to a running `jobcast
/// serve` (flag and variable names as `serve` has them).
#[derive(clap::Args, Debug, Clone)]
pub struct TopicArgs {
    /// Input topic of canonical events [default: jobcast.events].
    #[arg(long, env = "JOBCAST_EVENTS_TOPIC")]
    pub events_topic: Option<String>,
    /// Output topic of decisions [default: jobcast.decisions].
    #[arg(long, env = "JOBCAST_DECISIONS_TOPIC")]
    pub decisions_topic: Option<String>,
    /// Output topic of unusable input messages [default: jobcast.dead-letter].
    #[arg(long, env = "JOBCAST_DEAD_LETTER_TOPIC")]
    pub dead_letter_topic: Option<String>,
}

impl TopicArgs {
    /// Apply the flags over `base` (flags win).
    pub fn apply(&self, mut base: Topics) -> Topics {
        for (flag, topic) in [
            (&self.events_topic, &mut base.events),
            (&self.decisions_topic, &mut base.decisions),
            (&self.dead_letter_topic, &mut base.dead_letter),
        ] {
            if let Some(name) = flag {
                *topic = name.clone();
            }
        }
        base
    }
}
