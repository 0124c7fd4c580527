//! The service assembled, as `jobcast serve` and `jobcast demo` run it:
//! the store opened, the HTTP API listening, the pipeline on its own
//! thread; then, once `stop` resolves or the pipeline ends by itself (only
//! on an error), the pipeline told to finish its batch and the API
//! stopped. A binary only parses its flags and calls [`run`], as
//! mini-redis's does its `server::run`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::config::ServeConfig;
use crate::error::ServiceError;
use crate::http;
use crate::service::{self, RunSummary, Service};
use crate::shared::Shared;

/// Why the service could not start, or stopped on an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Service(#[from] ServiceError),
    #[error("cannot listen on {address}")]
    Listen {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("the HTTP API's TLS certificate or key (http.tls)")]
    Tls(#[source] io::Error),
    #[error("the HTTP API")]
    Http(#[source] io::Error),
    #[error("the pipeline or the HTTP API panicked")]
    Panicked(#[from] tokio::task::JoinError),
}

/// The service as it starts listening: what it shares, and where.
pub struct Listening {
    pub shared: Arc<Shared>,
    pub address: SocketAddr,
    /// `http://ADDRESS` or `https://ADDRESS`.
    pub url: String,
}

/// Run the service configured by `config` until `stop` resolves or the
/// pipeline ends; `started` is told once the API listens.
pub async fn run(
    config: ServeConfig,
    stop: impl Future<Output = ()> + Send + 'static,
    started: impl FnOnce(Listening),
) -> Result<RunSummary, ServerError> {
    // Metrics are recorded from the start, whichever thread records first.
    crate::telemetry::handle();
    let store = service::open_store(&config)?;
    let shared = Shared::new(store);
    let address = config.http.address;
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServerError::Listen { address, source })?;
    let address = listener
        .local_addr()
        .map_err(|source| ServerError::Listen { address, source })?;
    let tls = http::tls(&config.http).await.map_err(ServerError::Tls)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    started(Listening {
        shared: shared.clone(),
        address,
        url: format!("{scheme}://{address}"),
    });

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
    let mut pipeline = tokio::task::spawn_blocking(move || service.join());
    let ended = tokio::select! {
        () = stop => None,
        joined = &mut pipeline => Some(joined),
    };
    shared.shutdown.store(true, Ordering::Relaxed);
    let _ = http_stop.send(());
    http.await?.map_err(ServerError::Http)?;
    let joined = match ended {
        Some(joined) => joined,
        None => pipeline.await,
    };
    Ok(joined??)
}

/// Create the service's topics where they are missing, the input one with
/// `partitions` partitions.
pub async fn create_topics(config: &ServeConfig, partitions: i32) -> Result<(), String> {
    let t = &config.topics;
    config
        .kafka
        .ensure_topics(&[
            (&t.events, partitions),
            (&t.decisions, partitions),
            (&t.risk, partitions),
            (&t.capacity, 1),
            (&t.dead_letter, 1),
        ])
        .await
}
