//! `jobcast serve`: the streaming service. Configuration comes from a TOML
//! file, then environment variables, then flags (each overriding the one
//! before); see `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::PathBuf;

use jobcast_predictor::decision::PolicyKind;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::server;
use tracing::info;

use jobcast_ingest::kafka_args::{KafkaArgs, parse_property};

#[derive(clap::Args)]
pub struct Args {
    /// TOML configuration file (every setting optional; see
    /// deploy/jobcast.toml).
    #[arg(long, short, env = "JOBCAST_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Kafka consumer group shared by cooperating instances [default:
    /// jobcast].
    #[arg(long, env = "JOBCAST_GROUP")]
    group: Option<String>,
    /// RocksDB state directory [default: jobcast-data].
    #[arg(long, env = "JOBCAST_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// HTTP API and /metrics address (port 0 picks a free port) [default:
    /// 127.0.0.1:8080].
    #[arg(long, env = "JOBCAST_HTTP")]
    http: Option<SocketAddr>,
    /// The policy whose decisions are published: slearn, 3sigma,
    /// 3sigma-tl, point, slearn-dag, 3sigma-dag, point-dag, bayes,
    /// bayes-dag or hpc (an HPC site's single parallel jobs) [default:
    /// slearn].
    #[arg(long, env = "JOBCAST_POLICY")]
    policy: Option<PolicyKind>,
    /// Input topic of canonical events [default: jobcast.events].
    #[arg(long, env = "JOBCAST_EVENTS_TOPIC")]
    events_topic: Option<String>,
    /// Output topic of decisions [default: jobcast.decisions].
    #[arg(long, env = "JOBCAST_DECISIONS_TOPIC")]
    decisions_topic: Option<String>,
    /// Output topic of preemption-risk scores [default: jobcast.risk].
    #[arg(long, env = "JOBCAST_RISK_TOPIC")]
    risk_topic: Option<String>,
    /// Output topic of capacity decisions [default: jobcast.capacity].
    #[arg(long, env = "JOBCAST_CAPACITY_TOPIC")]
    capacity_topic: Option<String>,
    /// Output topic of unusable input messages [default:
    /// jobcast.dead-letter].
    #[arg(long, env = "JOBCAST_DEAD_LETTER_TOPIC")]
    dead_letter_topic: Option<String>,
    /// Any setting, by its key in the configuration file (e.g.
    /// `--set engine.risk.window=500`, `--set 'engine.shadow=[slearn, 3sigma]'`).
    /// Repeatable; wins over the file, the environment and the other flags.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_property)]
    set: Vec<(String, String)>,
    /// Create the topics if they are missing, the input one with this many
    /// partitions.
    #[arg(long, value_name = "PARTITIONS")]
    create_topics: Option<i32>,
    /// Print the effective configuration, each value with the layer that
    /// set it (default, file, environment, flag), and exit.
    #[arg(long)]
    print_config: bool,
}

impl Args {
    fn config(&self) -> anyhow::Result<ServeConfig> {
        Ok(self.layers()?.pop().expect("at least the defaults").1)
    }

    /// The configuration after each layer, named: the defaults, the file,
    /// the environment, the named flags, `--set`.
    fn layers(&self) -> anyhow::Result<Vec<(String, ServeConfig)>> {
        let mut layers = vec![("default".to_owned(), ServeConfig::default())];
        if let Some(path) = &self.config {
            layers.push((
                format!("the file {}", path.display()),
                ServeConfig::from_file(path)?,
            ));
        }
        layers.push((
            "an environment variable (JOBCAST_<SECTION>__<KEY>)".to_owned(),
            ServeConfig::load(self.config.as_deref())?,
        ));
        layers.push((
            "a flag of serve, or its variable (JOBCAST_BROKERS, JOBCAST_GROUP, …)".to_owned(),
            self.named_flags(layers.last().expect("pushed").1.clone()),
        ));
        if !self.set.is_empty() {
            let set = layers.last().expect("pushed").1.clone();
            layers.push(("flag --set".to_owned(), set.with_overrides(&self.set)?));
        }
        layers.last().expect("pushed").1.validate()?;
        Ok(layers)
    }

    /// `config` with the named flags (each with its own variable) applied.
    fn named_flags(&self, mut config: ServeConfig) -> ServeConfig {
        config.kafka = self.kafka.apply(config.kafka);
        if let Some(group) = &self.group {
            config.consumer.group = group.clone();
        }
        if let Some(dir) = &self.data_dir {
            config.storage.path = dir.clone();
        }
        if let Some(address) = self.http {
            config.http.address = address;
        }
        if let Some(policy) = self.policy {
            config.engine.policy = policy;
        }
        let topics = &mut config.topics;
        for (flag, topic) in [
            (&self.events_topic, &mut topics.events),
            (&self.decisions_topic, &mut topics.decisions),
            (&self.risk_topic, &mut topics.risk),
            (&self.capacity_topic, &mut topics.capacity),
            (&self.dead_letter_topic, &mut topics.dead_letter),
        ] {
            if let Some(name) = flag {
                *topic = name.clone();
            }
        }
        config
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.print_config {
        let layers: Vec<_> = args
            .layers()?
            .into_iter()
            .map(|(name, config)| (name, crate::provenance::leaves(&config)))
            .collect();
        return crate::output::print_out(&crate::provenance::annotated(&layers));
    }
    let config = args.config()?;
    info!(kafka = ?config.kafka, topics = ?config.topics, "starting");
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some(partitions) = args.create_topics {
        runtime
            .block_on(server::create_topics(&config, partitions))
            .map_err(anyhow::Error::msg)?;
    }
    let summary = runtime.block_on(server::run(config, shutdown_signal(), |listening| {
        // A stable line that scripts and tests read to find the port.
        eprintln!("jobcast serve: HTTP on {}", listening.url);
    }))?;
    eprintln!(
        "jobcast serve: stopped; {} events applied, {} dead-lettered, {} decisions",
        summary.applied, summary.dead_lettered, summary.decisions
    );
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = interrupt => {}
        _ = terminate.recv() => {}
    }
    info!("signal received: finishing the work in hand, then stopping");
}
