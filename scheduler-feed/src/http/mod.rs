//! The HTTP API: what jobcast knows about a job or a machine (and its
//! preemption risk), health and readiness for orchestrators, and
//! `/metrics` for Prometheus. Reads come from the committed RocksDB state,
//! so an answer never shows an effect whose batch might still be lost in a
//! crash.
//!
//! RocksDB reads block, so they run on the blocking pool, a bounded
//! number at a time and each within a deadline ([`reads`]): a burst of
//! requests for a wide job neither starves the probes, which never touch
//! the store, nor grows memory with the burst. A job's decision history is
//! served a page at a time. A job another instance holds is redirected
//! there ([`elsewhere`]).

mod backup;
mod elsewhere;
mod reads;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use axum_server::tls_rustls::RustlsConfig;
use serde_json::json;
use serde_json::value::RawValue;

use jobcast_storage::state::{POLICIES, StoreError};

use crate::config::{Backups, HttpConfig, HttpToken};
use crate::shared::Shared;
use crate::telemetry;
use elsewhere::Elsewhere;
pub use elsewhere::{LOCAL_HEADER, PARTITIONS_HEADER};
use jobcast_predictor::engine::{
    ClusterRecord, ERROR_PCT_BOUNDS, JobRecord, JobState, MachineRecord, PolicyErrors,
};
use reads::Reads;

/// Jobs per page of `GET /jobs` unless `limit` says otherwise, the most
/// it may ask for, and the records one page reads at most (a filter on a
/// rare state answers a short page that says where to go on, not a scan
/// of every job).
pub const JOBS_PER_PAGE: usize = 100;
pub const MAX_JOBS_PER_PAGE: usize = 1000;
pub const JOBS_SCANNED_PER_PAGE: usize = 10_000;

/// Decisions per page of `GET /jobs/{id}` unless `decisions_limit` says
/// otherwise, the most it may ask for, and the stored bytes that end a
/// page sooner (a decision of a job sampling 1,000 pilots is 8 KB).
pub const DECISIONS_PER_PAGE: usize = 100;
pub const MAX_DECISIONS_PER_PAGE: usize = 1000;
pub const DECISION_PAGE_BYTES: usize = 256 << 10;

/// What every handler sees.
#[derive(Clone)]
struct Api {
    shared: Arc<Shared>,
    reads: Reads,
    /// Other instances to ask for a job not held here, on slots of their
    /// own (`elsewhere`).
    elsewhere: Option<(Arc<Elsewhere>, Reads)>,
}

/// The API over `shared` as `http` configures it; online backups as
/// `backups` says, if set. With a token, every route but the probes asks
/// for it. Fails on a peers' CA file (`http.tls.ca`) it cannot read.
pub fn router(
    shared: Arc<Shared>,
    http: &HttpConfig,
    backups: Option<Backups>,
) -> std::io::Result<Router> {
    let busy = Arc::new(AtomicBool::new(false));
    let mut guarded = Router::new()
        .route("/", get(index))
        .route(
            "/admin/backup",
            post(move |State(api): State<Api>| {
                backup::write(api.shared, backups.clone(), busy.clone())
            }),
        )
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/machines/{id}", get(machine))
        .route("/machines/{id}/risk", get(machine_risk))
        .route("/capacity", get(capacity))
        .route("/clusters", get(clusters))
        .route("/policies", get(policies))
        .route("/metrics", get(metrics));
    if let Some(token) = http.token.clone() {
        guarded = guarded.route_layer(middleware::from_fn_with_state(
            Arc::new(token),
            require_token,
        ));
    }
    let slots = || Reads::new(http.max_concurrent_reads, http.request_timeout());
    let api = Api {
        shared,
        reads: slots(),
        elsewhere: Elsewhere::new(http)?.map(|elsewhere| (Arc::new(elsewhere), slots())),
    };
    // Kubernetes' probes carry no credentials.
    Ok(Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .fallback(no_route)
        .with_state(api))
}

/// Every route, with what it answers: `GET /`.
const ROUTES: [(&str, &str); 11] = [
    (
        "GET /healthz",
        "alive: the pipeline is not stuck (no token needed)",
    ),
    (
        "GET /readyz",
        "ready: state recovered, partitions assigned, brokers up; else why not (no token needed)",
    ),
    (
        "GET /jobs",
        "the jobs this instance holds, in job-id order, without decisions (state, limit, after select and page them)",
    ),
    (
        "GET /jobs/{id}",
        "a job: its state, each policy's estimate, its deadline plan if it has one, its decisions (decisions_from, decisions_limit page them)",
    ),
    (
        "GET /machines/{id}",
        "a machine or VM: its state and lifetime",
    ),
    (
        "GET /machines/{id}/risk",
        "a transient VM's preemption risk now",
    ),
    (
        "GET /capacity",
        "the latest capacity decision for the transient short partition (engine.capacity)",
    ),
    (
        "GET /clusters",
        "each cluster listed (idle ones until the expiry sweep): machines up, their CPUs, live jobs",
    ),
    ("GET /policies", "each policy's prediction errors so far"),
    ("GET /metrics", "Prometheus metrics"),
    (
        "POST /admin/backup",
        "write an online backup (storage.backup_dir)",
    ),
];

async fn index() -> Response {
    let routes: serde_json::Map<String, serde_json::Value> = ROUTES
        .iter()
        .map(|&(route, what)| (route.to_owned(), what.into()))
        .collect();
    Json(json!({
        "service": "jobcast",
        "version": env!("CARGO_PKG_VERSION"),
        "routes": routes,
        "docs": "docs/operations.md (HTTP API)",
    }))
    .into_response()
}

/// Any other path: a JSON 404 that names it, and the route meant if it
/// only has a trailing slash too many.
async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = uri.path();
    let trimmed = path.trim_end_matches('/');
    let hint = if trimmed != path && !trimmed.is_empty() {
        format!("; without the trailing slash: {method} {trimmed}")
    } else {
        "; GET / lists the routes".into()
    };
    error(
        StatusCode::NOT_FOUND,
        format!("no route for {method} {path}{hint}"),
    )
}

/// The TLS configuration `http.tls` names, read now so that a bad file
/// stops the service before it listens, naming the file.
pub async fn tls(http: &HttpConfig) -> std::io::Result<Option<RustlsConfig>> {
    let Some(files) = &http.tls else {
        return Ok(None);
    };
    RustlsConfig::from_pem_file(&files.cert, &files.key)
        .await
        .map(Some)
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "http.tls: certificate {} and key {}: {e}",
                    files.cert.display(),
                    files.key.display()
                ),
            )
        })
}

/// Serve `router` on `listener`, over TLS if `tls` is set, until
/// `shutdown` resolves; then let requests in flight finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    http: &HttpConfig,
    tls: Option<RustlsConfig>,
    backups: Option<Backups>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(shared, http, backups)?;
    let Some(tls) = tls else {
        return axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await;
    };
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    let grace = http.request_timeout();
    tokio::spawn(async move {
        shutdown.await;
        stopping.graceful_shutdown(Some(grace));
    });
    axum_server::from_tcp_rustls(listener.into_std()?, tls)?
        .handle(handle)
        .serve(app.into_make_service())
        .await
}

/// 401 for a request without `Authorization: Bearer <the token>`.
async fn require_token(
    State(token): State<Arc<HttpToken>>,
    request: Request,
    next: Next,
) -> Response {
    // The scheme is case-insensitive (RFC 7235), the token not.
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().split_at_checked(7))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|(_, token)| token);
    if presented.is_some_and(|presented| token.matches(presented)) {
        return next.run(request).await;
    }
    metrics::counter!(telemetry::HTTP_UNAUTHORIZED).increment(1);
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "this API wants the configured token: Authorization: Bearer <http.token>".into(),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"jobcast\""),
    );
    response
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// A path id, or the 400 answer naming what was wrong.
fn parse_id(raw: &str, what: &str) -> Result<u64, Box<Response>> {
    raw.parse().map_err(|_| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            format!("{what} id must be an unsigned integer, got {raw:?}"),
        ))
    })
}

/// A stored record served as is (so numbers are exactly what was
/// published), 404 if absent, 400 for an id that is not a number.
fn stored_json(
    raw: &str,
    what: &str,
    read: impl FnOnce(u64) -> Result<Option<Vec<u8>>, StoreError>,
) -> Response {
    let id = match parse_id(raw, what) {
        Ok(id) => id,
        Err(response) => return *response,
    };
    match read(id) {
        Ok(Some(json)) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Ok(None) => error(StatusCode::NOT_FOUND, format!("no {what} {id}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A query string, or the JSON 400 that says what is wrong with it.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, Box<Response>> {
    query
        .map(|Query(q)| q)
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, e.body_text())))
}

/// Which jobs to list: those in `state` (any if absent), after job id
/// `after`, at most `limit`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsPage {
    state: Option<JobState>,
    after: Option<u64>,
    limit: Option<usize>,
}

/// `GET /jobs`: a page of the records this instance holds (as
/// `GET /jobs/{id}` answers them, without decisions), in job-id order;
/// `next_after` is the `after` of the next page, null on the last. A page
/// reads at most [`JOBS_SCANNED_PER_PAGE`] records, so a rare state may
/// answer fewer than `limit` jobs, and no jobs, with a `next_after`.
async fn jobs(State(api): State<Api>, page: Result<Query<JobsPage>, QueryRejection>) -> Response {
    let page = match query(page) {
        Ok(page) => page,
        Err(response) => return *response,
    };
    let limit = page
        .limit
        .unwrap_or(JOBS_PER_PAGE)
        .clamp(1, MAX_JOBS_PER_PAGE);
    let shared = api.shared;
    api.reads
        .run(move || {
            let listed = shared.store.jobs_page(
                page.after,
                limit,
                JOBS_SCANNED_PER_PAGE,
                JobRecord::from_bytes,
                |job| page.state.is_none_or(|state| job.state == state),
            );
            match listed {
                Ok((jobs, next_after)) => {
                    Json(json!({ "jobs": jobs, "next_after": next_after })).into_response()
                }
                Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        })
        .await
}

/// Which decisions of a job to serve: from version `decisions_from` on,
/// at most `decisions_limit`.
#[derive(serde::Deserialize)]
struct DecisionPage {
    #[serde(default)]
    decisions_from: u32,
    decisions_limit: Option<usize>,
}

/// `GET /jobs/{id}`: state, each policy's current estimate, a page of the
/// driving policy's decisions (`decisions_next`: the version the next
/// page starts at, null on the last) and, once finished, each policy's
/// error. A job another instance holds is redirected there.
async fn job(
    State(api): State<Api>,
    Path(raw): Path<String>,
    page: Result<Query<DecisionPage>, QueryRejection>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let id = match parse_id(&raw, "job") {
        Ok(id) => id,
        Err(response) => return *response,
    };
    let page = match query(page) {
        Ok(page) => page,
        Err(response) => return *response,
    };
    let limit = page
        .decisions_limit
        .unwrap_or(DECISIONS_PER_PAGE)
        // A page of none would name itself as the next, for ever.
        .clamp(1, MAX_DECISIONS_PER_PAGE);
    let shared = api.shared.clone();
    let mut response = api
        .reads
        .run(move || {
            stored_json(&raw, "job", |id| {
                let Some(record) = shared.store.job(id, JobRecord::from_bytes)? else {
                    return Ok(None);
                };
                let (decisions, next) = shared.store.decisions_page::<Box<RawValue>>(
                    id,
                    page.decisions_from,
                    limit,
                    DECISION_PAGE_BYTES,
                )?;
                let deadline = shared.store.deadline::<Box<RawValue>>(id)?;
                Ok(Some(with_decisions(record, deadline, decisions, next)))
            })
        })
        .await;
    if response.status() != StatusCode::NOT_FOUND {
        return response;
    }
    if headers.contains_key(LOCAL_HEADER) {
        // Another instance asks: which partitions this answer covers.
        let owned = api.shared.owned.lock().expect("not poisoned").clone();
        let owned: Vec<String> = owned.iter().map(i32::to_string).collect();
        if let Ok(value) = HeaderValue::from_str(&owned.join(",")) {
            response.headers_mut().insert(PARTITIONS_HEADER, value);
        }
        return response;
    }
    let Some((elsewhere, slots)) = api.elsewhere else {
        return response;
    };
    let shared = api.shared;
    let path_and_query = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    slots
        .run(move || elsewhere.find(&shared, id, &path_and_query))
        .await
}

/// The job's record with a page of its decisions (stored apart) added.
fn with_decisions(
    record: JobRecord,
    deadline: Option<Box<RawValue>>,
    decisions: Vec<Box<RawValue>>,
    next: Option<u32>,
) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct WithDecisions {
        #[serde(flatten)]
        record: JobRecord,
        /// A deadline job's plan and recoveries (`engine.deadlines`).
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline: Option<Box<RawValue>>,
        decisions: Vec<Box<RawValue>>,
        decisions_next: Option<u32>,
    }
    serde_json::to_vec(&WithDecisions {
        record,
        deadline,
        decisions,
        decisions_next: next,
    })
    .expect("records serialise")
}

/// `GET /machines/{id}`: the machine's last known state.
async fn machine(State(api): State<Api>, Path(raw): Path<String>) -> Response {
    let shared = api.shared;
    api.reads
        .run(move || stored_json(&raw, "machine", |id| shared.store.machine_json(id)))
        .await
}

/// `GET /machines/{id}/risk`: the latest preemption-risk score of the task
/// placed on a transient VM.
async fn machine_risk(State(api): State<Api>, Path(raw): Path<String>) -> Response {
    let id = match parse_id(&raw, "machine") {
        Ok(id) => id,
        Err(response) => return *response,
    };
    let shared = api.shared;
    api.reads
        .run(move || match shared.store.machine::<MachineRecord>(id) {
            Ok(Some(MachineRecord {
                risk: Some(risk), ..
            })) => Json(risk).into_response(),
            Ok(Some(_)) => error(
                StatusCode::NOT_FOUND,
                format!(
                    "machine {id} has no risk score: it is not a running transient VM with a task placed on it"
                ),
            ),
            Ok(None) => error(StatusCode::NOT_FOUND, format!("no machine {id}")),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        })
        .await
}

/// `GET /clusters`: what each cluster holds, as of the last batch that
/// changed a job or machine; `[]` before any.
async fn clusters(State(api): State<Api>) -> Response {
    let shared = api.shared;
    api.reads
        .run(move || match shared.store.clusters_json() {
            Ok(json) => (
                [(header::CONTENT_TYPE, "application/json")],
                json.unwrap_or_else(|| b"[]".to_vec()),
            )
                .into_response(),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        })
        .await
}

/// `GET /capacity`: the latest decision of CloudCoaster's controller.
async fn capacity(State(api): State<Api>) -> Response {
    let shared = api.shared;
    api.reads
        .run(move || match shared.store.capacity_json() {
            Ok(Some(json)) => (
                [(header::CONTENT_TYPE, "application/json")],
                json,
            )
                .into_response(),
            Ok(None) => error(
                StatusCode::NOT_FOUND,
                "no capacity decision yet: the controller runs with engine.capacity.enabled, and decides once the transient partition should change".into(),
            ),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        })
        .await
}

/// `GET /policies`: every policy's errors over the jobs scored so far, with
/// their means, so that the shadow policies can be compared live.
async fn policies(State(api): State<Api>) -> Response {
    let shared = api.shared;
    api.reads.run(move || policy_errors(&shared)).await
}

fn policy_errors(shared: &Shared) -> Response {
    let records = match shared.store.dump(POLICIES) {
        Ok(records) => records,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let mut out = serde_json::Map::new();
    for (name, bytes) in records {
        let errors: PolicyErrors = match serde_json::from_slice(&bytes) {
            Ok(errors) => errors,
            Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        };
        let n = errors.jobs.max(1) as f64;
        let mean_log_ratio = errors.sum_log_ratio / n;
        let buckets: Vec<_> = errors
            .abs_pct_buckets
            .iter()
            .enumerate()
            .map(|(i, &jobs)| json!({ "le_pct": ERROR_PCT_BOUNDS.get(i), "jobs": jobs }))
            .collect();
        out.insert(
            String::from_utf8_lossy(&name).into_owned(),
            json!({
                "jobs": errors.jobs,
                "mean_abs_error_pct": errors.sum_abs_pct / n,
                "mean_log_ratio": mean_log_ratio,
                "sd_log_ratio": (errors.sum_sq_log_ratio / n - mean_log_ratio.powi(2)).max(0.0).sqrt(),
                "underestimated_pct": errors.underestimated as f64 * 100.0 / n,
                "abs_error_pct_buckets": buckets,
            }),
        );
    }
    Json(out).into_response()
}

/// Alive: the process answers and its pipeline is not stuck
/// ([`crate::shared::Liveness`]).
async fn healthz(State(api): State<Api>) -> Response {
    let liveness = &api.shared.liveness;
    let alive = liveness.alive();
    let body = json!({
        "alive": alive,
        "pipeline_stalled_seconds": liveness.stalled_for().map(|d| d.as_secs_f64()),
        "stall_timeout_seconds": liveness.timeout().as_secs(),
    });
    let status = if alive {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Ready: state recovered, a member of the group (owning any number of
/// partitions: an instance with none is a hot standby), brokers reachable.
async fn readyz(State(api): State<Api>) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let shared = &api.shared;
    // The first thing it waits for, in the order a start meets them.
    let reason = if shared.waiting_for_room.load(Relaxed) {
        "waiting for room on the store's filesystem (storage.min_free_bytes)".into()
    } else if !shared.broker_up.load(Relaxed) {
        match shared.last_kafka_error() {
            Some(error) => {
                format!("the Kafka brokers do not answer; librdkafka's latest error: {error}")
            }
            None => "the Kafka brokers have not answered yet".into(),
        }
    } else if !shared.assigned.load(Relaxed) {
        "waiting for the consumer group to assign this instance its partitions".into()
    } else if !shared.recovered.load(Relaxed) {
        "recovering the state from the store".into()
    } else {
        String::from("ready")
    };
    let body = json!({
        "ready": shared.ready(),
        "reason": reason,
        "recovered": shared.recovered.load(Relaxed),
        "assigned": shared.assigned.load(Relaxed),
        "owned_partitions": *shared.owned.lock().expect("not poisoned"),
        "partition_owners": *shared.owners.lock().expect("not poisoned"),
        "broker_up": shared.broker_up.load(Relaxed),
        "waiting_for_room": shared.waiting_for_room.load(Relaxed),
    });
    let status = if shared.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn metrics(State(api): State<Api>) -> Response {
    let shared = api.shared;
    api.reads.run(move || render_metrics(&shared)).await
}

fn render_metrics(shared: &Shared) -> Response {
    // The recorder first: the pipeline thread installs it too, but a
    // scrape may come before it has, and what is recorded before the
    // recorder is lost.
    telemetry::handle();
    for (family, size) in shared.store.family_sizes() {
        metrics::gauge!(telemetry::STORE_BYTES, "family" => family).set(size.bytes as f64);
        if jobcast_storage::state::STATE_FAMILIES.contains(&family) {
            metrics::gauge!(telemetry::STATE_RECORDS, "family" => family).set(size.keys as f64);
        }
    }
    if let Ok(Some(json)) = shared.store.clusters_json()
        && let Ok(clusters) = serde_json::from_slice::<Vec<ClusterRecord>>(&json)
    {
        shared.set_cluster_gauges(&clusters);
    }
    if let Some(stalled) = shared.liveness.stalled_for() {
        metrics::gauge!(telemetry::PIPELINE_STALLED).set(stalled.as_secs_f64());
    }
    // The store's filesystem: the write-ahead log, the backups beside it
    // and other tenants take room that jobcast_store_bytes does not show.
    if let Ok(space) = jobcast_storage::disk::space(shared.store.path()) {
        metrics::gauge!(telemetry::FILESYSTEM_FREE).set(space.free_bytes as f64);
        metrics::gauge!(telemetry::FILESYSTEM_SIZE).set(space.size_bytes as f64);
    }
    let (stopped, delayed_rate) = shared.store.write_stall();
    metrics::gauge!(telemetry::ROCKSDB_WRITE_STOPPED).set(f64::from(u8::from(stopped)));
    metrics::gauge!(telemetry::ROCKSDB_DELAYED_WRITE_RATE).set(delayed_rate as f64);
    telemetry::collect_process();
    prometheus_text()
}

/// Every metric recorded in this process, in Prometheus' text format.
fn prometheus_text() -> Response {
    let handle = telemetry::handle();
    handle.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// Serve `GET /metrics` alone on `listener`, for the commands that run
/// beside the service (`jobcast slurm watch --metrics`).
pub async fn serve_metrics(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let app: Router = Router::new().route("/metrics", get(|| async { prometheus_text() }));
    axum::serve(listener, app).await
}
