//! Configuration of `jobcast serve`: a TOML file, then environment
//! variables, then command-line flags, each overriding the one before.
//! `docs/configuration.md` lists every setting with its default;
//! `deploy/jobcast.toml` is a complete example.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use jobcast_ingest::kafka::{KafkaSettings, Topics};
use serde::{Deserialize, Serialize};

use crate::engine::EngineConfig;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub kafka: KafkaSettings,
    pub topics: Topics,
    pub consumer: ConsumerConfig,
    pub storage: StorageConfig,
    pub http: HttpConfig,
    pub engine: EngineConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsumerConfig {
    /// Kafka consumer group. Instances in one group divide the input's
    /// partitions for publishing and storage; each applies all of them
    /// (docs/operations.md, "Scaling out").
    pub group: String,
    /// Most events applied and committed together.
    pub batch_max_events: usize,
    /// Longest a consumed event waits for its batch to fill, ms.
    pub batch_linger_ms: u64,
    /// Events the event-time merge holds, across all partitions, before
    /// it pauses the partitions that have events waiting (see
    /// `source::Throttle`).
    pub max_buffered_events: usize,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group: "jobcast".into(),
            batch_max_events: 10_000,
            batch_linger_ms: 0,
            max_buffered_events: 500_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// RocksDB directory.
    pub path: PathBuf,
    /// fsync every commit (survives machine crashes, not only process
    /// crashes).
    pub sync: bool,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("jobcast-data"),
            sync: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of the HTTP API and `/metrics`. Loopback by default: expose
    /// it deliberately.
    pub address: SocketAddr,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 8080)),
        }
    }
}

impl ServeConfig {
    /// Read a TOML file, naming the file and the bad key on error.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.kafka.brokers.trim().is_empty() {
            return Err("kafka.brokers is empty".into());
        }
        if self.consumer.batch_max_events == 0 {
            return Err("consumer.batch_max_events must be positive".into());
        }
        if self.consumer.max_buffered_events == 0 {
            return Err("consumer.max_buffered_events must be positive".into());
        }
        let topics = [
            &self.topics.events,
            &self.topics.decisions,
            &self.topics.risk,
            &self.topics.dead_letter,
        ];
        for (i, topic) in topics.iter().enumerate() {
            if topic.is_empty() {
                return Err("topic names must not be empty".into());
            }
            if topics[..i].contains(topic) {
                return Err(format!("topic {topic} is configured twice"));
            }
        }
        crate::engine::Engine::new(&self.engine).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_default() {
        let config: ServeConfig = toml::from_str("").unwrap();
        assert_eq!(config, ServeConfig::default());
        config.validate().unwrap();
    }

    #[test]
    fn a_partial_file_overrides_only_what_it_names() {
        let config: ServeConfig = toml::from_str(
            r#"
            [kafka]
            brokers = "k1:9092,k2:9092"
            [kafka.client]
            "security.protocol" = "sasl_ssl"
            [topics]
            decisions = "sched.decisions"
            [engine]
            policy = "3sigma"
            "#,
        )
        .unwrap();
        assert_eq!(config.kafka.brokers, "k1:9092,k2:9092");
        assert_eq!(
            config
                .kafka
                .client
                .get("security.protocol")
                .map(String::as_str),
            Some("sasl_ssl")
        );
        assert_eq!(config.topics.decisions, "sched.decisions");
        assert_eq!(config.topics.events, Topics::default().events);
        assert_eq!(config.engine.policy.name(), "3sigma");
        assert_eq!(config.consumer, ConsumerConfig::default());
    }

    #[test]
    fn the_example_deployment_file_lists_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobcast.toml");
        let config = ServeConfig::from_file(&path).unwrap();
        assert_eq!(config, ServeConfig::default());
    }

    #[test]
    fn a_custom_lifetime_prior_round_trips_and_a_bad_one_is_refused_by_name() {
        let config: ServeConfig = toml::from_str(
            r#"
            [engine.risk]
            refit_every = 50
            [engine.risk.prior]
            a = 0.3
            tau1 = 2.0
            tau2 = 1.0
            b = 22.0
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        let prior = crate::engine::BathtubPrior {
            a: 0.3,
            tau1: 2.0,
            tau2: 1.0,
            b: 22.0,
            max_lifetime_h: 24.0,
        };
        assert_eq!(config.engine.risk.prior, prior);
        assert_eq!(config.engine.risk.refit_every, 50);
        let text = toml::to_string(&config).unwrap();
        assert_eq!(toml::from_str::<ServeConfig>(&text).unwrap(), config);

        let bad: ServeConfig = toml::from_str(
            "[engine.risk.prior]
tau2 = -0.5
",
        )
        .unwrap();
        let err = bad.validate().unwrap_err();
        assert!(
            err.contains("risk.prior.tau2") && err.contains("-0.5"),
            "{err}"
        );
        let bad: ServeConfig = toml::from_str(
            "[engine.risk.prior]
a = 1.2
",
        )
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("risk.prior.a"));
        let err = toml::from_str::<ServeConfig>(
            "[engine.risk.prior]
tau3 = 1.0
",
        )
        .unwrap_err();
        assert!(err.to_string().contains("tau3"), "{err}");
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_by_name() {
        let err = toml::from_str::<ServeConfig>("[consumer]\nbatch_size = 5\n").unwrap_err();
        assert!(err.to_string().contains("batch_size"), "{err}");
        let config: ServeConfig = toml::from_str("[engine]\npolicy = \"oracle\"\n").unwrap();
        assert!(config.validate().unwrap_err().contains("oracle"));
        let config: ServeConfig =
            toml::from_str("[topics]\nrisk = \"jobcast.decisions\"\n").unwrap();
        assert!(config.validate().unwrap_err().contains("twice"));
    }
}
