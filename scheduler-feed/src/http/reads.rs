//! Store reads off the async runtime, bounded in number, time and memory.
//!
//! A read runs on the blocking pool once it holds one of `permits`, and
//! keeps the permit until its answer has left the process: the body is
//! handed to hyper in small chunks, so what waits in memory is about one
//! page per permit, however many clients ask at once. A request not
//! answered by its deadline gets 503 with `Retry-After`; a body still
//! being sent at the deadline (a client that stopped reading) is cut off
//! and its page and permit released, so slow clients cannot hold the
//! slots. A read that outlives its request keeps its permit until it
//! ends: abandoned reads cannot pile up behind answered ones.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::telemetry;

/// Bytes handed to hyper at a time: it buffers a few chunks per
/// connection, not a whole page.
const CHUNK_BYTES: usize = 64 << 10;

#[derive(Clone)]
pub(super) struct Reads {
    permits: Arc<Semaphore>,
    timeout: Duration,
}

impl Reads {
    pub(super) fn new(permits: usize, timeout: Duration) -> Self {
        Reads {
            permits: Arc::new(Semaphore::new(permits)),
            timeout,
        }
    }

    /// `read`'s answer, or 503 if it cannot be had within the timeout.
    pub(super) async fn run(&self, read: impl FnOnce() -> Response + Send + 'static) -> Response {
        let deadline = Instant::now() + self.timeout;
        let permit = self.permits.clone().acquire_owned();
        let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, permit).await else {
            return unavailable("waiting");
        };
        let read = tokio::task::spawn_blocking(move || (read(), permit));
        let (response, permit) = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(answered)) => answered,
            Ok(Err(e)) => {
                return super::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            }
            Err(_) => return unavailable("reading"),
        };
        let (parts, body) = response.into_parts();
        // Handlers answer with bodies already in memory: collecting one
        // does not wait.
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return super::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the answer could not be read back".into(),
            );
        };
        if bytes.len() <= CHUNK_BYTES {
            return Response::from_parts(parts, Body::from(bytes));
        }
        Response::from_parts(parts, Paced::start(bytes, permit, deadline))
    }
}

/// 503 for a request not answered in time, counted by where its time went
/// (`waiting` for a read slot, or `reading`).
fn unavailable(stage: &'static str) -> Response {
    metrics::counter!(telemetry::HTTP_TIMED_OUT, "stage" => stage).increment(1);
    let mut response = super::error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not answered within http.request_timeout_secs ({stage}); try again"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// A body sent a chunk at a time while holding its read permit.
struct Paced {
    state: Arc<Mutex<Sending>>,
}

enum Sending {
    /// What is left to send, and the permit it holds until sent.
    Rest {
        rest: Bytes,
        _permit: OwnedSemaphorePermit,
    },
    Done,
    /// The deadline passed first: page and permit released.
    Expired,
}

impl Paced {
    fn start(bytes: Bytes, permit: OwnedSemaphorePermit, deadline: Instant) -> Body {
        let state = Arc::new(Mutex::new(Sending::Rest {
            rest: bytes,
            _permit: permit,
        }));
        let timer = Arc::downgrade(&state);
        // A client that stops reading leaves hyper waiting on its socket,
        // never asking for the next chunk: only a timer can release it.
        tokio::spawn(async move {
            tokio::time::sleep_until(deadline).await;
            if let Some(state) = timer.upgrade() {
                let mut sending = state.lock().expect("not poisoned");
                if matches!(*sending, Sending::Rest { .. }) {
                    metrics::counter!(telemetry::HTTP_TIMED_OUT, "stage" => "sending").increment(1);
                    *sending = Sending::Expired;
                }
            }
        });
        Body::new(Paced { state })
    }
}

impl http_body::Body for Paced {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let mut sending = self.state.lock().expect("not poisoned");
        let chunk = match &mut *sending {
            Sending::Rest { rest, .. } => rest.split_to(rest.len().min(CHUNK_BYTES)),
            Sending::Done => return Poll::Ready(None),
            Sending::Expired => {
                return Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "answer not taken within http.request_timeout_secs",
                ))));
            }
        };
        if matches!(&*sending, Sending::Rest { rest, .. } if rest.is_empty()) {
            *sending = Sending::Done;
        }
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(*self.state.lock().expect("not poisoned"), Sending::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match &*self.state.lock().expect("not poisoned") {
            Sending::Rest { rest, .. } => SizeHint::with_exact(rest.len() as u64),
            Sending::Done | Sending::Expired => SizeHint::with_exact(0),
        }
    }
}

/// A client gone mid-answer releases the page and the permit at once.
impl Drop for Paced {
    fn drop(&mut self) {
        *self.state.lock().expect("not poisoned") = Sending::Done;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;

    fn sleeping(ms: u64) -> impl FnOnce() -> Response + Send + 'static {
        move || {
            std::thread::sleep(Duration::from_millis(ms));
            "done".into_response()
        }
    }

    #[tokio::test]
    async fn a_read_past_the_deadline_and_one_waiting_for_its_slot_get_503() {
        let reads = Reads::new(1, Duration::from_millis(200));
        let (slow, queued) = tokio::join!(reads.run(sleeping(600)), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            reads.run(sleeping(0)).await
        });
        for response in [slow, queued] {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        }
        // The slow read still holds the only slot until it ends.
        assert_eq!(reads.permits.available_permits(), 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(reads.permits.available_permits(), 1);
        assert_eq!(reads.run(sleeping(0)).await.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn a_large_answer_is_sent_in_chunks_holding_its_slot_until_taken() {
        let reads = Reads::new(1, Duration::from_secs(5));
        let page: Vec<u8> = (0..3 * CHUNK_BYTES + 5).map(|i| i as u8).collect();
        let expected = page.clone();
        let response = reads.run(move || page.into_response()).await;
        assert_eq!(reads.permits.available_permits(), 0, "held while sending");
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(body, expected);
        assert_eq!(reads.permits.available_permits(), 1);
    }

    #[tokio::test]
    async fn an_answer_not_taken_by_the_deadline_is_cut_off_and_its_slot_freed() {
        let reads = Reads::new(1, Duration::from_millis(200));
        let page = vec![7u8; 2 * CHUNK_BYTES];
        let response = reads.run(move || page.into_response()).await;
        // A client that reads nothing.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(reads.permits.available_permits(), 1);
        assert!(
            axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .is_err()
        );
    }
}
