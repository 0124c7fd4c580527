//! `jobcast serve`: the streaming service. Configuration comes from a TOML
//! file, then environment variables, then flags (each overriding the one
//! before); see `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use jobcast_predictor::decision::PolicyKind;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::http;
use jobcast_scheduler_feed::service::{self, RunSummary, Service};
use jobcast_scheduler_feed::shared::Shared;
use tracing::info;

use super::kafka_args::{KafkaArgs, parse_property};

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
    /// 3sigma-tl, point, slearn-dag, 3sigma-dag or bayes [default: slearn].
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
            .block_on(create_topics(&config, partitions))
            .map_err(anyhow::Error::msg)?;
    }
    let summary = runtime.block_on(serve(config, shutdown_signal(), |_, _| {}))?;
    eprintln!(
        "jobcast serve: stopped; {} events applied, {} dead-lettered, {} decisions",
        summary.applied, summary.dead_lettered, summary.decisions
    );
    Ok(())
}

/// Create the service's topics if they are missing.
pub async fn create_topics(config: &ServeConfig, partitions: i32) -> Result<(), String> {
    let t = &config.topics;
    config
        .kafka
        .ensure_topics(&[
            (&t.events, partitions),
            (&t.decisions, partitions),
            (&t.risk, partitions),
            (&t.dead_letter, 1),
        ])
        .await
}

/// Run the pipeline on its own thread and the HTTP API on this runtime
/// until `stop` resolves or the pipeline ends; then stop both. `started`
/// gets the state the service shares and the HTTP address, once it is
/// listening.
pub async fn serve(
    config: ServeConfig,
    stop: impl Future<Output = ()> + Send + 'static,
    started: impl FnOnce(Arc<Shared>, SocketAddr),
) -> anyhow::Result<RunSummary> {
    let store = service::open_store(&config)?;
    let shared = Shared::new(store);
    let listener = tokio::net::TcpListener::bind(config.http.address)
        .await
        .with_context(|| format!("cannot listen on {}", config.http.address))?;
    let address = listener.local_addr()?;
    let tls = http::tls(&config.http).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    // A stable line that scripts and tests read to find the port.
    eprintln!("jobcast serve: HTTP on {scheme}://{address}");
    started(shared.clone(), address);

    let backups = config.storage.backups();
    let http_config = config.http.clone();
    let service = Service::start_with(config, shared.clone())?;
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let shared_http = shared.clone();
    let http = tokio::spawn(async move {
        let stopped = async move {
            let _ = http_stopped.await;
        };
        http::serve(listener, shared_http, &http_config, tls, backups, stopped).await
    });
    // The pipeline ends by itself only on an error; otherwise on `stop`.
    let mut pipeline = tokio::task::spawn_blocking(move || service.join());
    let ended = tokio::select! {
        () = stop => None,
        joined = &mut pipeline => Some(joined),
    };
    shared.shutdown.store(true, Ordering::Relaxed);
    let _ = http_stop.send(());
    http.await??;
    let joined = match ended {
        Some(joined) => joined,
        None => pipeline.await,
    };
    Ok(joined??)
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
