//! The HTTP API: what jobcast knows about a job or a machine (and its
//! preemption risk), health and readiness for orchestrators, and
//! `/metrics` for Prometheus. Reads come from the committed RocksDB state,
//! so an answer never shows an effect whose batch might still be lost in a
//! crash.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use jobcast_storage::state::{POLICIES, StoreError};

use crate::shared::Shared;
use crate::telemetry;
use jobcast_predictor::engine::{ERROR_PCT_BOUNDS, JobRecord, MachineRecord, PolicyErrors};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/jobs/{id}", get(job))
        .route("/machines/{id}", get(machine))
        .route("/machines/{id}/risk", get(machine_risk))
        .route("/policies", get(policies))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await
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

/// `GET /jobs/{id}`: state, each policy's current estimate, the driving
/// policy's decision history and, once finished, each policy's error.
async fn job(State(shared): State<Arc<Shared>>, Path(raw): Path<String>) -> Response {
    stored_json(&raw, "job", |id| {
        let Some(record) = shared.store.job(id, JobRecord::from_bytes)? else {
            return Ok(None);
        };
        let decisions = shared.store.decisions::<Value>(id)?;
        Ok(Some(with_decisions(record, decisions)))
    })
}

/// The job's record with its decisions (stored apart) added.
fn with_decisions(record: JobRecord, decisions: Vec<Value>) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct WithDecisions {
        #[serde(flatten)]
        record: JobRecord,
        decisions: Vec<Value>,
    }
    serde_json::to_vec(&WithDecisions { record, decisions }).expect("records serialise")
}

/// `GET /machines/{id}`: the machine's last known state.
async fn machine(State(shared): State<Arc<Shared>>, Path(raw): Path<String>) -> Response {
    stored_json(&raw, "machine", |id| shared.store.machine_json(id))
}

/// `GET /machines/{id}/risk`: the latest preemption-risk score of the task
/// placed on a transient VM.
async fn machine_risk(State(shared): State<Arc<Shared>>, Path(raw): Path<String>) -> Response {
    let id = match parse_id(&raw, "machine") {
        Ok(id) => id,
        Err(response) => return *response,
    };
    match shared.store.machine::<MachineRecord>(id) {
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
    }
}

/// `GET /policies`: every policy's errors over the jobs scored so far, with
/// their means, so that the shadow policies can be compared live.
async fn policies(State(shared): State<Arc<Shared>>) -> Response {
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

/// Alive: the process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready: state recovered, a member of the group (owning any number of
/// partitions: an instance with none is a hot standby), brokers reachable.
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let body = json!({
        "ready": shared.ready(),
        "recovered": shared.recovered.load(Relaxed),
        "assigned": shared.assigned.load(Relaxed),
        "owned_partitions": *shared.owned.lock().expect("not poisoned"),
        "broker_up": shared.broker_up.load(Relaxed),
    });
    let status = if shared.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    for family in jobcast_storage::state::STATE_FAMILIES {
        metrics::gauge!(telemetry::STATE_RECORDS, "family" => family)
            .set(shared.store.estimated_records(family) as f64);
    }
    let (stopped, delayed_rate) = shared.store.write_stall();
    metrics::gauge!(telemetry::ROCKSDB_WRITE_STOPPED).set(f64::from(u8::from(stopped)));
    metrics::gauge!(telemetry::ROCKSDB_DELAYED_WRITE_RATE).set(delayed_rate as f64);
    let handle = telemetry::handle();
    handle.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}
