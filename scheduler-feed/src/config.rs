//! Configuration of `jobcast serve`, in layers, each overriding the one
//! before: the built-in defaults, a TOML file, environment variables
//! `JOBCAST_<SECTION>__<KEY>`, then command-line flags (the CLI's named
//! flags, and `--set section.key=value` for any setting). Layering is
//! figment's; every layer is checked against the same schema, so an unknown
//! key or a bad value is refused naming the key and the layer it came from.
//! `docs/configuration.md` lists every setting with its default;
//! `deploy/jobcast.toml` is a complete example.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use figment::value::Value;
use jobcast_ingest::kafka::{KafkaSettings, Topics};
use serde::{Deserialize, Serialize};

use jobcast_ingest::config::ConfigError;
use jobcast_predictor::engine::{Engine, EngineConfig};

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
    /// Most input bytes (keys and payloads) applied and committed
    /// together: with `batch_max_events`, whichever comes first. A few
    /// thousand maximum-size messages would otherwise make one batch of
    /// gigabytes.
    pub batch_max_bytes: usize,
    /// Input bytes the event-time merge holds before it pauses partitions:
    /// with `max_buffered_events`, whichever comes first.
    pub max_buffered_bytes: usize,
    /// Bytes of outputs of partitions other instances own, kept until
    /// their owner has published them, so that this instance can take a
    /// partition over without replaying anything (`service::outbox`).
    pub takeover_buffer_bytes: usize,
    /// How long (ms) the event-time merge waits for a partition that
    /// neither delivers nor reports its end (its leader gone) while other
    /// partitions' messages wait; then it goes on without it, and applies
    /// its events late when it returns (`source::idle`). 0: wait for ever,
    /// for an exact order whatever the brokers do.
    pub idle_partition_timeout_ms: u64,
}

impl ConsumerConfig {
    pub fn idle_partition_timeout(&self) -> Option<Duration> {
        (self.idle_partition_timeout_ms > 0)
            .then(|| Duration::from_millis(self.idle_partition_timeout_ms))
    }
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            group: "jobcast".into(),
            batch_max_events: 10_000,
            batch_linger_ms: 0,
            max_buffered_events: 500_000,
            batch_max_bytes: 64 << 20,
            max_buffered_bytes: 256 << 20,
            takeover_buffer_bytes: 64 << 20,
            idle_partition_timeout_ms: 60_000,
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
    /// Messages between snapshots of the predictor's state (most hold
    /// only the history changed since the one before). A restart restores
    /// them and applies at most this many logged messages; the log behind
    /// each snapshot is deleted.
    pub snapshot_every_events: u64,
    /// Take a snapshot on a clean stop too, so that the next start applies
    /// no logged message (a crash still leaves at most
    /// `snapshot_every_events` to apply).
    pub snapshot_on_stop: bool,
    /// Hours of event time an ended job's records (the job, its decisions
    /// and tasks) are kept after its end.
    pub retention_hours: u64,
    /// Where `POST /admin/backup` writes online backups (one directory
    /// each); unset, the endpoint is off.
    pub backup_dir: Option<PathBuf>,
    /// Online backups kept: once a new one is written, the oldest beyond
    /// this many are deleted.
    pub backup_keep: usize,
    /// Bytes kept free on the store's filesystem: a write that finds less
    /// is refused whole and the service stops, saying so; a start that
    /// finds less waits, not ready, until there is room. The room serves
    /// RocksDB's flushes and compactions. 0: no reserve.
    pub min_free_bytes: u64,
}

/// Where online backups go, and how many are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backups {
    pub dir: PathBuf,
    pub keep: usize,
}

impl StorageConfig {
    /// The online backups' settings, if they are on.
    pub fn backups(&self) -> Option<Backups> {
        self.backup_dir.clone().map(|dir| Backups {
            dir,
            keep: self.backup_keep,
        })
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("jobcast-data"),
            sync: true,
            snapshot_every_events: 100_000,
            snapshot_on_stop: true,
            retention_hours: 168,
            backup_dir: None,
            backup_keep: 3,
            min_free_bytes: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of the HTTP API and `/metrics`. Loopback by default: expose
    /// it deliberately.
    pub address: SocketAddr,
    /// Seconds the pipeline may be stuck on one batch (it comes round its
    /// loop every 50 ms otherwise) before `/healthz` answers 503, so that
    /// a liveness probe restarts it (`shared::Liveness`).
    pub stall_timeout_secs: u64,
    /// A bearer token every request but `/healthz` and `/readyz` must
    /// carry (`Authorization: Bearer <token>`); unset, none is asked for.
    /// Best given as `JOBCAST_HTTP_TOKEN` rather than in a file.
    pub token: Option<HttpToken>,
    /// Store reads served at once; more requests wait for a slot.
    pub max_concurrent_reads: usize,
    /// Seconds a request may take, waiting for a read slot included,
    /// before it is answered 503 with `Retry-After`.
    pub request_timeout_secs: u64,
    /// Serve HTTPS with this certificate chain and private key (PEM
    /// files), or plain HTTP without.
    pub tls: Option<TlsFiles>,
    /// The URL other instances reach this one's API at (`http://host:port`,
    /// maybe with a path prefix), told to the group with each offset it
    /// commits. Set on every instance, a request for a job another instance
    /// holds is redirected there (`http::elsewhere`); unset, it is answered
    /// 404 by whichever instance gets it.
    pub advertised_url: Option<String>,
    /// Serve on an address other than loopback without `token`: refused
    /// unless this says it is meant (a proxy in front authenticates, or a
    /// network nobody else reaches).
    pub allow_without_token: bool,
}

/// A certificate chain and its private key, PEM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The certificates (PEM) that verify the other instances' when this
    /// one asks them for a job; unset, those of `cert` (instances sharing
    /// one certificate, or a chain that holds its CA).
    #[serde(default)]
    pub ca: Option<PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            address: SocketAddr::from(([127, 0, 0, 1], 8080)),
            stall_timeout_secs: 120,
            token: None,
            max_concurrent_reads: 8,
            request_timeout_secs: 10,
            tls: None,
            advertised_url: None,
            allow_without_token: false,
        }
    }
}

/// The HTTP API's bearer token: shown as `<redacted>` by `Debug`, so that
/// a logged configuration never carries it.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct HttpToken(String);

/// A string only: a token given as a TOML number (or as a variable or
/// `--set` value that reads as one) would lose its leading zeros, and
/// serde's error would quote it.
impl<'de> Deserialize<'de> for HttpToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Token;
        impl serde::de::Visitor<'_> for Token {
            type Value = HttpToken;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: serde::de::Error>(self, token: &str) -> Result<HttpToken, E> {
                Ok(HttpToken::new(token))
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<HttpToken, E> {
                Err(E::custom(NOT_A_STRING))
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<HttpToken, E> {
                Err(E::custom(NOT_A_STRING))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<HttpToken, E> {
                Err(E::custom(NOT_A_STRING))
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<HttpToken, E> {
                Err(E::custom(NOT_A_STRING))
            }
        }
        const NOT_A_STRING: &str =
            "the token must be a string: quote it in TOML, or give it as JOBCAST_HTTP_TOKEN";
        deserializer.deserialize_str(Token)
    }
}

impl HttpToken {
    pub fn new(token: impl Into<String>) -> HttpToken {
        HttpToken(token.into())
    }

    /// Whether `presented` is this token, in time independent of where
    /// they differ (the length aside), so that timing tells an attacker
    /// nothing of its bytes.
    /// The token's bytes, as a key (`service::peers`).
    pub(crate) fn secret(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub fn matches(&self, presented: &[u8]) -> bool {
        let token = self.0.as_bytes();
        token.len() == presented.len()
            && token
                .iter()
                .zip(presented)
                .fold(0u8, |differ, (a, b)| differ | (a ^ b))
                == 0
    }
}

impl std::fmt::Debug for HttpToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl HttpConfig {
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_secs(self.stall_timeout_secs)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}

impl ServeConfig {
    /// The defaults overridden by a TOML file alone.
    pub fn from_file(path: &Path) -> Result<Self, ConfigFileError> {
        Self::layered(Some(path), std::iter::empty())
    }

    /// The defaults, overridden by the TOML file at `file` (if any), then
    /// by this process's `JOBCAST_<SECTION>__<KEY>` environment variables.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigFileError> {
        // A variable that is not Unicode cannot be one of ours.
        let env = std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        });
        Self::layered(file, env)
    }

    /// This configuration with `overrides` (`section.key`, value) applied.
    pub fn with_overrides(self, overrides: &[(String, String)]) -> Result<Self, ConfigFileError> {
        Self::overridden(Figment::from(Serialized::defaults(self)), overrides)
    }

    /// [`ServeConfig::load`] with the environment given. A variable names
    /// its key with `__` between sections (`JOBCAST_ENGINE__RISK__WINDOW` is
    /// `engine.risk.window`); variables without `__` are the CLI's own
    /// (`JOBCAST_BROKERS`, `JOBCAST_CONFIG`, …) and are left to it.
    pub fn layered(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigFileError> {
        let mut figment = Figment::from(Serialized::defaults(ServeConfig::default()));
        if let Some(path) = file {
            // figment skips a file it cannot find; a named one must exist.
            std::fs::metadata(path).map_err(|source| ConfigFileError::Read {
                path: path.display().to_string(),
                source,
            })?;
            figment = figment.merge(Toml::file_exact(path));
        }
        for (name, value) in env {
            if name == TOKEN_VARIABLE {
                // A string whatever it looks like (`setting` would read
                // digits as a number).
                figment = figment.merge(Named {
                    inner: Serialized::default("http.token", value),
                    name: format!("environment variable {TOKEN_VARIABLE}"),
                });
                continue;
            }
            let Some(key) = name.strip_prefix(ENV_PREFIX).filter(|k| k.contains("__")) else {
                continue;
            };
            figment = figment.merge(setting(
                &key.to_ascii_lowercase().replace("__", "."),
                &value,
                format!("environment variable {name}"),
            ));
        }
        Self::overridden(figment, &[])
    }

    fn overridden(
        mut figment: Figment,
        overrides: &[(String, String)],
    ) -> Result<Self, ConfigFileError> {
        for (key, value) in overrides {
            figment = figment.merge(setting(key, value, format!("flag --set {key}={value}")));
        }
        figment
            .extract()
            .map_err(|e| ConfigFileError::Invalid(Box::new(e)))
    }

    /// Check every setting; an error names the first bad one by its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self
            .http
            .token
            .as_ref()
            .is_some_and(|t| t.0.trim().is_empty())
        {
            return Err(ConfigError::new(
                "http.token",
                "is empty (unset it to serve without a token)",
            ));
        }
        if self.http.token.is_none()
            && !self.http.address.ip().is_loopback()
            && !self.http.allow_without_token
        {
            return Err(ConfigError::new(
                "http.token",
                format!(
                    "is unset, and the API is served on {}, beyond loopback: anyone who reaches \
                     it could read every decision; set a token (JOBCAST_HTTP_TOKEN), or \
                     http.allow_without_token = true if a proxy in front authenticates",
                    self.http.address
                ),
            ));
        }
        if self.kafka.brokers.trim().is_empty() {
            return Err(ConfigError::new("kafka.brokers", "is empty"));
        }
        if let Some(url) = &self.http.advertised_url {
            check_advertised_url(url)
                .map_err(|reason| ConfigError::new("http.advertised_url", reason))?;
            if self.http.token.is_none() && self.http.tls.is_none() {
                return Err(ConfigError::new(
                    "http.advertised_url",
                    "needs http.token (which signs it, so that no other client of the group can \
                     pass for an instance) or http.tls (whose certificates verify the instances)",
                ));
            }
        }
        let counts = [
            (
                "consumer.batch_max_events",
                self.consumer.batch_max_events as u64,
            ),
            (
                "consumer.max_buffered_events",
                self.consumer.max_buffered_events as u64,
            ),
            (
                "consumer.batch_max_bytes",
                self.consumer.batch_max_bytes as u64,
            ),
            (
                "consumer.max_buffered_bytes",
                self.consumer.max_buffered_bytes as u64,
            ),
            (
                "storage.snapshot_every_events",
                self.storage.snapshot_every_events,
            ),
            ("storage.retention_hours", self.storage.retention_hours),
            ("http.stall_timeout_secs", self.http.stall_timeout_secs),
            (
                "http.max_concurrent_reads",
                self.http.max_concurrent_reads as u64,
            ),
            ("http.request_timeout_secs", self.http.request_timeout_secs),
            ("storage.backup_keep", self.storage.backup_keep as u64),
        ];
        if let Some((key, _)) = counts.iter().find(|(_, value)| *value == 0) {
            return Err(ConfigError::new(*key, "must be positive"));
        }
        let mut topics = vec![&self.topics.events];
        topics.extend(self.topics.outputs());
        for (i, topic) in topics.iter().enumerate() {
            if topic.is_empty() {
                return Err(ConfigError::new("topics", "names must not be empty"));
            }
            if topics[..i].contains(topic) {
                return Err(ConfigError::new(
                    "topics",
                    format!("{topic} is configured twice"),
                ));
            }
        }
        Engine::new(&self.engine)
            .map(|_| ())
            .map_err(|e| e.within("engine"))
    }
}

/// Longest advertised URL: it rides in every offset commit's metadata,
/// which brokers cap (`offset.metadata.max.bytes`, 4096 by default).
pub const MAX_ADVERTISED_URL_BYTES: usize = 1024;

/// Why `url` cannot be where other instances send requests, if it cannot.
fn check_advertised_url(url: &str) -> Result<(), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("{url:?} is not a URL (http://host:port)"));
    };
    if !matches!(scheme, "http" | "https") {
        return Err(format!("{url:?}: the scheme must be http or https"));
    }
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return Err(format!("{url:?} names no host"));
    }
    if url.contains(['?', '#']) || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{url:?}: no query, fragment, spaces or control characters"
        ));
    }
    if url.len() > MAX_ADVERTISED_URL_BYTES {
        return Err(format!(
            "is {} bytes, more than {MAX_ADVERTISED_URL_BYTES}",
            url.len()
        ));
    }
    Ok(())
}

/// One setting at its dotted `key`. The value is read as a number, a
/// boolean, an array (`[3.0, 18.0]`), a table (`{"security.protocol"="ssl"}`)
/// or else a string.
/// `key` set to `value` (read as TOML reads a value: a number, a bool, a
/// list, else a string) by the layer `origin` names.
fn setting(key: &str, value: &str, origin: String) -> Named<Serialized<Value>> {
    Named {
        inner: Serialized::default(
            key,
            value
                .parse::<Value>()
                .unwrap_or_else(|never| match never {}),
        ),
        name: origin,
    }
}

/// A layer named by where its values came from (`environment variable
/// JOBCAST_ENGINE__POLICY`, `flag --set engine.policy=x`), so that an
/// error names it rather than the code that merged it.
struct Named<P> {
    inner: P,
    name: String,
}

impl<P: figment::Provider> figment::Provider for Named<P> {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(self.name.clone())
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        self.inner.data()
    }
}

/// What is wrong with a configuration, each fault on a line: the key, the
/// layer its value came from (the file, the variable, the flag), and for
/// an unknown key the nearest one there is.
fn explain(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| explain_one(&e))
        .collect::<Vec<_>>()
        .join("\n")
}

fn explain_one(e: &figment::Error) -> String {
    use figment::error::Kind;
    let from = match &e.metadata {
        Some(m) => match &m.source {
            Some(figment::Source::File(path)) => format!("the file {}", path.display()),
            _ => m.name.to_string(),
        },
        None => "the configuration".into(),
    };
    let key = e.path.join(".");
    match &e.kind {
        Kind::UnknownField(field, expected) => {
            let full = if key.is_empty() || key.ends_with(field.as_str()) {
                key.clone()
            } else {
                format!("{key}.{field}")
            };
            let section = full
                .rsplit_once('.')
                .map_or(String::new(), |(section, _)| format!("{section}."));
            let nearest = expected
                .iter()
                .map(|candidate| (strsim::levenshtein(candidate, field), candidate))
                .filter(|&(distance, candidate)| distance <= candidate.len().max(4) / 2)
                .min();
            let hint = match nearest {
                Some((_, candidate)) => format!("; did you mean `{section}{candidate}`?"),
                None => format!(
                    "; known here: {}",
                    expected
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            format!("unknown key `{full}` in {from}{hint}")
        }
        kind => format!("`{key}` in {from}: {kind}"),
    }
}

/// The prefix of the environment variables that set any key.
const ENV_PREFIX: &str = "JOBCAST_";
/// The variable of `http.token`, a secret: kept out of files and flags.
pub const TOKEN_VARIABLE: &str = "JOBCAST_HTTP_TOKEN";

/// A configuration that cannot be assembled from its layers.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, or a key that is unknown or whose value has the wrong
    /// type: named with the layer its value came from ([`explain`]).
    #[error("{}", explain(.0))]
    Invalid(Box<figment::Error>),
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
        let prior = jobcast_predictor::engine::BathtubPrior {
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
        assert_eq!(err.key, "engine.risk.prior.tau2");
        assert!(err.message.contains("-0.5"), "{err}");
        let bad: ServeConfig = toml::from_str(
            "[engine.risk.prior]
a = 1.2
",
        )
        .unwrap();
        assert_eq!(bad.validate().unwrap_err().key, "engine.risk.prior.a");
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
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("oracle")
        );
        let config: ServeConfig =
            toml::from_str("[topics]\nrisk = \"jobcast.decisions\"\n").unwrap();
        assert!(config.validate().unwrap_err().to_string().contains("twice"));
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_setting_has_an_environment_variable_and_layers_override_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobcast.toml");
        std::fs::write(
            &file,
            "[engine.risk]\nwindow = 100\nrefit_every = 7\n[topics]\nrisk = \"from-file\"\n",
        )
        .unwrap();
        let env = vars(&[
            ("JOBCAST_ENGINE__RISK__WINDOW", "500"),
            ("JOBCAST_TOPICS__RISK", "from-env"),
            ("JOBCAST_ENGINE__RISK__REFRESH_AGES_H", "[1.0, 2.5]"),
            ("JOBCAST_STORAGE__SYNC", "false"),
            // The CLI's own variables and other programs' are not keys.
            ("JOBCAST_BROKERS", "ignored:9092"),
            ("JOBCAST_LOG", "debug"),
            ("PATH", "/bin"),
        ]);
        let overrides = [("topics.risk".to_owned(), "from-flag".to_owned())];
        let config = ServeConfig::layered(Some(&file), env)
            .unwrap()
            .with_overrides(&overrides)
            .unwrap();
        assert_eq!(config.engine.risk.refit_every, 7, "the file's");
        assert_eq!(
            config.engine.risk.window, 500,
            "the environment's, over the file's"
        );
        assert_eq!(config.engine.risk.refresh_ages_h, [1.0, 2.5]);
        assert!(!config.storage.sync);
        assert_eq!(config.topics.risk, "from-flag", "the flag's, over both");
        assert_eq!(config.kafka.brokers, KafkaSettings::default().brokers);
        assert_eq!(config.topics.events, Topics::default().events);
    }

    #[test]
    fn a_bad_layer_is_refused_naming_the_key() {
        let unknown = ServeConfig::layered(None, vars(&[("JOBCAST_ENGINE__WINDOW", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains("unknown key `engine.window`")
                && unknown.contains("environment variable JOBCAST_ENGINE__WINDOW")
                && !unknown.contains("config.rs"),
            "{unknown}"
        );
        // A misspelt key: the nearest there is.
        let misspelt = ServeConfig::layered(None, vars(&[("JOBCAST_ENGINE__POLCY", "fifo")]))
            .unwrap_err()
            .to_string();
        assert!(
            misspelt.contains("did you mean `engine.policy`?"),
            "{misspelt}"
        );
        let mistyped = ServeConfig::default()
            .with_overrides(&[("consumer.batch_max_events".to_owned(), "many".to_owned())])
            .unwrap_err()
            .to_string();
        assert!(
            mistyped.contains(
                "`consumer.batch_max_events` in flag --set consumer.batch_max_events=many"
            ) && !mistyped.contains("config.rs"),
            "{mistyped}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobcast.toml");
        std::fs::write(&file, "[storage]\nbackup_kept = 2\n").unwrap();
        let in_file = ServeConfig::layered(Some(&file), std::iter::empty())
            .unwrap_err()
            .to_string();
        assert!(
            in_file.contains(&format!("in the file {}", file.display()))
                && in_file.contains("did you mean `storage.backup_keep`?"),
            "{in_file}"
        );
        let missing =
            ServeConfig::layered(Some(Path::new("/no/such/jobcast.toml")), std::iter::empty())
                .unwrap_err()
                .to_string();
        assert!(missing.contains("/no/such/jobcast.toml"), "{missing}");
    }

    #[test]
    fn an_advertised_url_is_an_http_url_that_fits_a_commits_metadata() {
        let with = |url: &str| {
            let mut config = ServeConfig::default();
            config.http.token = Some(HttpToken::new("signs-the-url"));
            config.http.advertised_url = Some(url.into());
            config
                .validate()
                .map_err(|e| (e.key.clone(), e.to_string()))
        };
        for good in [
            "http://10.0.0.7:8080",
            "https://jobcast-1.jobcast.svc:8443/api",
        ] {
            assert_eq!(with(good), Ok(()), "{good}");
        }
        let too_long = format!("http://{}", "h".repeat(MAX_ADVERTISED_URL_BYTES));
        for bad in [
            "10.0.0.7:8080",
            "ftp://host",
            "http://",
            "http:///path",
            "http://host/?q=1",
            "http://host /x",
            too_long.as_str(),
        ] {
            let (key, _) = with(bad).expect_err(bad);
            assert_eq!(key, "http.advertised_url", "{bad}");
        }
    }

    #[test]
    fn the_http_token_comes_from_its_variable_as_a_string_and_never_shows() {
        let env = [(TOKEN_VARIABLE.to_owned(), "0123456789".to_owned())];
        let config = ServeConfig::layered(None, env).unwrap();
        let token = config.http.token.as_ref().unwrap();
        assert!(token.matches(b"0123456789"));
        assert!(!token.matches(b"0123456788"));
        assert!(!token.matches(b"012345678"));
        assert!(!format!("{config:?}").contains("0123456789"));
        config.validate().unwrap();

        let env = [(TOKEN_VARIABLE.to_owned(), " ".to_owned())];
        let empty = ServeConfig::layered(None, env).unwrap().validate();
        assert_eq!(empty.unwrap_err().key, "http.token");
        // Digits by another route read as a number: refused, not quoted.
        let env = [("JOBCAST_HTTP__TOKEN".to_owned(), "0123456789".to_owned())];
        let number = ServeConfig::layered(None, env).unwrap_err().to_string();
        assert!(number.contains("must be a string"), "{number}");
        assert!(!number.contains("123456789"), "{number}");
        assert_eq!(ServeConfig::default().http.token, None);
    }

    /// Beyond loopback, the API is served only with a token, or when the
    /// configuration says, explicitly, that it is meant without one.
    #[test]
    fn a_non_loopback_address_without_a_token_is_refused_unless_meant() {
        let mut config = ServeConfig::default();
        config.validate().unwrap();
        config.http.address = "0.0.0.0:8080".parse().unwrap();
        let err = config.validate().unwrap_err();
        assert_eq!(err.key, "http.token");
        assert!(err.message.contains("0.0.0.0:8080"), "{err}");
        config.http.token = Some(HttpToken::new("s3cret-token"));
        config.validate().unwrap();
        config.http.token = None;
        config.http.allow_without_token = true;
        config.validate().unwrap();
        // Advertised to the group, the URL must be signed or TLS-verified.
        config.http.advertised_url = Some("http://10.0.0.7:8080".into());
        assert_eq!(config.validate().unwrap_err().key, "http.advertised_url");
        config.http.token = Some(HttpToken::new("s3cret-token"));
        config.validate().unwrap();
        config.http.address = "[::1]:8080".parse().unwrap();
        config.http.allow_without_token = false;
        config.validate().unwrap();
    }

    #[test]
    fn kafka_credentials_come_from_the_environment_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("jobcast.toml");
        std::fs::write(
            &file,
            "[kafka.client]\n\"security.protocol\" = \"sasl_ssl\"\n\"sasl.username\" = \"file\"\n",
        )
        .unwrap();
        let env = [(
            "JOBCAST_KAFKA__CLIENT".to_owned(),
            r#"{"sasl.username"="svc", "sasl.password"="hunter2"}"#.to_owned(),
        )];
        let config = ServeConfig::layered(Some(&file), env).unwrap();
        let client = &config.kafka.client;
        assert_eq!(client["security.protocol"], "sasl_ssl");
        assert_eq!(client["sasl.username"], "svc");
        assert_eq!(client["sasl.password"], "hunter2");
        assert!(!format!("{config:?}").contains("hunter2"));
    }

    #[test]
    fn a_zero_count_is_refused_naming_its_key() {
        for key in [
            "consumer.batch_max_events",
            "consumer.max_buffered_events",
            "storage.snapshot_every_events",
            "storage.retention_hours",
        ] {
            let config = ServeConfig::default()
                .with_overrides(&[(key.to_owned(), "0".to_owned())])
                .unwrap();
            let err = config.validate().unwrap_err();
            assert_eq!(err.key, key);
            assert_eq!(err.message, "must be positive");
        }
        ServeConfig::default().validate().unwrap();
    }
}
