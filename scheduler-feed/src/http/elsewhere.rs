//! A job another instance holds. An instance stores the records of the
//! partitions it owns only, so a request for another's job finds nothing in
//! its store. With `http.advertised_url` set, every offset an instance
//! commits to the group names its URL (`service::group`), and the pipeline
//! reads who committed each partition last ([`Shared::owners`]). A request
//! for a job not held here then asks the owners of the other partitions
//! (`HEAD`, marked local so that they answer from their own store and ask
//! no one in turn) and is redirected (307) to the one that holds it.
//!
//! The answer is exact about absence: 404 only once every partition's
//! owner has said it does not hold the job (each peer's 404 names the
//! partitions it owns). While some partition has no owner that answers (it
//! is changing hands, its owner is down or advertises no URL) the answer is
//! 503 with `Retry-After`, saying which, never a 404 that would read "no
//! such job".
//!
//! Asking peers runs on its own slots, apart from the store reads': an
//! instance's reads never wait for its own requests to peers that are
//! waiting for theirs.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::config::HttpConfig;
use crate::shared::Shared;
use crate::telemetry;

/// Marks a request one instance sends another: answer from your store.
pub const LOCAL_HEADER: &str = "x-jobcast-local";
/// On a local 404: the partitions whose records the answering instance
/// holds (comma-separated).
pub const PARTITIONS_HEADER: &str = "x-jobcast-partitions";

/// How long one peer may take to answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Who else to ask for a job, and how.
pub(super) struct Elsewhere {
    /// This instance's URL, not to be asked.
    advertised: String,
    agent: ureq::Agent,
    /// `Authorization` for the peers: this instance's own token (they
    /// share it), never a client's credential, which a peer has no need
    /// of and a false one would keep.
    authorization: Option<String>,
}

impl Elsewhere {
    /// Peers to ask as `http` says: none without an advertised URL. Over
    /// TLS, peers' certificates are verified by `http.tls.ca`, or else by
    /// the certificates this instance serves.
    pub(super) fn new(http: &HttpConfig) -> std::io::Result<Option<Self>> {
        let Some(advertised) = http.advertised_url.clone() else {
            return Ok(None);
        };
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(PEER_TIMEOUT));
        if let Some(tls) = &http.tls {
            let roots = certificates(tls.ca.as_deref().unwrap_or(&tls.cert))?;
            config = config.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                    .build(),
            );
        }
        Ok(Some(Elsewhere {
            advertised,
            agent: config.build().into(),
            authorization: http
                .token
                .as_ref()
                .map(|t| format!("Bearer {}", String::from_utf8_lossy(t.secret()))),
        }))
    }

    /// The answer for job `id`, not in this instance's store, asked for at
    /// `path_and_query`.
    pub(super) fn find(&self, shared: &Shared, id: u64, path_and_query: &str) -> Response {
        let owned: BTreeSet<i32> = shared
            .owned
            .lock()
            .expect("not poisoned")
            .iter()
            .copied()
            .collect();
        let owners = shared.owners.lock().expect("not poisoned").clone();
        if owners.is_empty() {
            return unsure(
                id,
                "the group's owners of the partitions are not read yet".into(),
                &[],
            );
        }
        let others: BTreeSet<i32> = owners
            .keys()
            .copied()
            .filter(|p| !owned.contains(p))
            .collect();
        let peers: BTreeSet<&str> = others
            .iter()
            .filter_map(|p| owners[p].as_deref())
            .filter(|url| *url != self.advertised)
            .collect();
        let mut covered = owned.clone();
        let mut failures = Vec::new();
        for peer in peers {
            let base = peer.trim_end_matches('/');
            let mut probe = self
                .agent
                .head(format!("{base}/jobs/{id}?decisions_limit=1"))
                .header(LOCAL_HEADER, "1");
            if let Some(authorization) = &self.authorization {
                probe = probe.header(header::AUTHORIZATION, authorization);
            }
            match probe.call() {
                Ok(answer) if answer.status() == StatusCode::OK => {
                    return redirect(id, peer, &format!("{base}{path_and_query}"));
                }
                Ok(answer) if answer.status() == StatusCode::NOT_FOUND => {
                    let held = answer
                        .headers()
                        .get(PARTITIONS_HEADER)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    covered.extend(held.split(',').filter_map(|p| p.trim().parse::<i32>().ok()));
                }
                Ok(answer) => failures.push(format!("{peer} answered {}", answer.status())),
                Err(e) => failures.push(format!("{peer}: {e}")),
            }
        }
        let unasked: Vec<i32> = others.difference(&covered).copied().collect();
        if unasked.is_empty() {
            answered("absent");
            return super::error(
                StatusCode::NOT_FOUND,
                format!("no job {id}: the owners of every partition were asked"),
            );
        }
        unsure(
            id,
            format!(
                "partitions {unasked:?} have no owner that answers now (changing hands, down, or advertising no http.advertised_url)"
            ),
            &failures,
        )
    }
}

/// 503 with `Retry-After`: job `id` is not here, and whether another
/// instance holds it cannot be told now, for `why`.
fn unsure(id: u64, why: String, failures: &[String]) -> Response {
    answered("unsure");
    let mut response = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({
            "error": format!("job {id} is not held by this instance, and {why}"),
            "failures": failures,
        })),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// 307 to the instance that holds job `id`, at the same path and query.
fn redirect(id: u64, owner: &str, location: &str) -> Response {
    answered("redirected");
    let Ok(location) = HeaderValue::from_str(location) else {
        return super::error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("job {id} is held at {owner:?}, which is no header value"),
        );
    };
    let mut response = (
        StatusCode::TEMPORARY_REDIRECT,
        axum::Json(json!({ "error": format!("job {id} is held by {owner}"), "owner": owner })),
    )
        .into_response();
    response.headers_mut().insert(header::LOCATION, location);
    response
}

fn answered(answer: &'static str) {
    metrics::counter!(telemetry::HTTP_ELSEWHERE, "answer" => answer).increment(1);
}

/// The certificates in the PEM file at `path`, named in the error.
fn certificates(path: &Path) -> std::io::Result<Vec<ureq::tls::Certificate<'static>>> {
    let named = |reason: String| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("http.tls: peers' CA {}: {reason}", path.display()),
        )
    };
    let pem = std::fs::read(path).map_err(|e| named(e.to_string()))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(certificate) =
            item.map_err(|e| named(e.to_string()))?
        {
            certificates.push(certificate);
        }
    }
    if certificates.is_empty() {
        return Err(named("holds no certificate".into()));
    }
    Ok(certificates)
}
