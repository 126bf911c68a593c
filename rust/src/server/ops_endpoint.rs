//! The operations endpoint on `KAFSCALE_METRICS_ADDR`: `/metrics` (Prometheus text format),
//! `/healthz` (the process answers) and `/readyz` (stores reachable and serving; 503 with
//! the failing checks otherwise). It keeps answering during a graceful shutdown: liveness
//! stays green while buffers flush, readiness turns red at once. Optionally over TLS (the SSL
//! listeners' certificate) and with a bearer token for `/metrics`; the probes stay open.
//!
//! What a client can hold here is bounded like on the Kafka listeners: at most
//! `metrics_max_connections` connections (one past it is closed at once; their descriptors
//! are set apart from the Kafka connections', fd_limit.rs), a request's line and headers must
//! arrive within `metrics_header_read_timeout_ms` of its first byte (the TLS handshake within
//! the same time), and a connection with nothing read, written or being answered for
//! `metrics_idle_timeout_ms` is closed. (hyper's own header timeout also runs while a
//! kept-alive connection waits for its next request, so it cannot be an idle timeout too;
//! both clocks are kept here, from the bytes the connection moves.)

use std::convert::Infallible;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::budget::{BudgetGauge, ByteBudget};
use crate::broker::gauges::BrokerGauges;
use crate::broker::traffic::TopicTrafficCollector;
use crate::broker::Broker;
use crate::metrics::process::ProcessCollector;
use crate::server::admission::{Admission, Refusal, RefusalLog};
use crate::server::tls::{Side, Tls};

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// At most one warning per this interval about connections refused past the cap.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The clocks of one operations connection.
#[derive(Clone, Copy)]
struct Timeouts {
    /// From a request's first byte (or the start of the TLS handshake) to its last header.
    header: Duration,
    /// With nothing read, written or being answered.
    idle: Duration,
}

struct Endpoint {
    broker: Arc<Broker>,
    registry: Registry,
    /// The file holding the token `/metrics` requires, if any.
    token_file: Option<PathBuf>,
}

/// Serves until the runtime stops; over TLS when `tls` is given.
pub(crate) async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    request_budget: Arc<ByteBudget>,
    tls: Option<Arc<Tls>>,
    token_file: Option<PathBuf>,
) {
    let mut registry = Registry::default();
    broker.metrics.register(&mut registry);
    registry.sub_registry_with_prefix("kafscale").register(
        "object_store_requests",
        "Requests made of the object store, by operation and kind of object",
        broker.log.store.requests().clone(),
    );
    registry.register_collector(Box::new(TopicTrafficCollector::new(broker.clone())));
    registry.register_collector(Box::new(BrokerGauges::new(broker.clone())));
    registry.register_collector(Box::new(BudgetGauge(request_budget)));
    registry.register_collector(Box::new(ProcessCollector));
    let config = &broker.config;
    let timeouts = Timeouts {
        header: Duration::from_millis(config.metrics_header_read_timeout_ms),
        idle: Duration::from_millis(config.metrics_idle_timeout_ms),
    };
    let cap = config.metrics_max_connections;
    // One address may take every place: scrapers and probes usually come from a few.
    let admission = Admission::new(cap, cap);
    let mut refusals = RefusalLog::new(REFUSAL_LOG_INTERVAL);
    let endpoint = Arc::new(Endpoint {
        broker,
        registry,
        token_file,
    });
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(admitted) = admission.admit(peer.ip()) else {
            drop(socket);
            refusals.refused(Refusal::Operations(cap), peer.ip());
            continue;
        };
        let (endpoint, tls) = (endpoint.clone(), tls.clone());
        tokio::spawn(async move {
            serve_connection(endpoint, socket, tls, timeouts).await;
            drop(admitted);
        });
    }
}

/// Serves one connection until the client closes it or one of its clocks runs out.
async fn serve_connection(
    endpoint: Arc<Endpoint>,
    socket: TcpStream,
    tls: Option<Arc<Tls>>,
    timeouts: Timeouts,
) {
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = activity.clone();
        service_fn(move |request| {
            let endpoint = endpoint.clone();
            let answering = Answering::new(activity.clone());
            async move {
                let answer = endpoint.answer(request).await;
                drop(answering);
                Ok::<_, Infallible>(answer)
            }
        })
    };
    let served = async {
        let http = http1::Builder::new();
        match tls {
            None => {
                let io = TokioIo::new(Watched::new(socket, activity.clone()));
                http.serve_connection(io, service).await
            }
            Some(tls) => match tls.accept(socket, timeouts.header, Side::Operations).await {
                Ok((stream, _)) => {
                    let io = TokioIo::new(Watched::new(stream, activity.clone()));
                    http.serve_connection(io, service).await
                }
                Err(error) => {
                    tracing::debug!(%error, "metrics endpoint: TLS handshake failed");
                    Ok(())
                }
            },
        }
    };
    tokio::select! {
        served = served => {
            if let Err(error) = served {
                tracing::debug!(%error, "metrics endpoint: connection ended");
            }
        }
        reason = activity.expired(timeouts) => {
            tracing::debug!(reason, "metrics endpoint: closing connection");
        }
    }
}

/// What one operations connection has been doing, for its clocks.
struct Activity {
    state: Mutex<ActivityState>,
    /// A request's first byte arrived (its header clock may end before the idle one).
    started: Notify,
}

struct ActivityState {
    /// When a byte was last read or written, or an answer finished.
    last: Instant,
    /// When the first byte of a request not yet handed to the service arrived.
    request_since: Option<Instant>,
    /// Requests being answered (their answers may take a while: readiness asks the stores).
    answering: usize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            state: Mutex::new(ActivityState {
                last: Instant::now(),
                request_since: None,
                answering: 0,
            }),
            started: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) {
        let now = Instant::now();
        let mut state = self.state();
        state.last = now;
        if state.answering == 0 && state.request_since.is_none() {
            state.request_since = Some(now);
            self.started.notify_one();
        }
    }

    fn wrote(&self) {
        self.state().last = Instant::now();
    }

    /// Why the connection must close at `now`, or when to look again.
    fn check(&self, now: Instant, timeouts: Timeouts) -> Result<Instant, &'static str> {
        let state = self.state();
        if let Some(since) = state.request_since {
            let deadline = since + timeouts.header;
            return if now >= deadline {
                Err("a request's headers did not arrive within metrics_header_read_timeout_ms")
            } else {
                Ok(deadline)
            };
        }
        if state.answering > 0 {
            return Ok(now + timeouts.idle);
        }
        let deadline = state.last + timeouts.idle;
        if now >= deadline {
            Err("idle for metrics_idle_timeout_ms")
        } else {
            Ok(deadline)
        }
    }

    /// Completes, with the reason, once the connection must close.
    async fn expired(&self, timeouts: Timeouts) -> &'static str {
        loop {
            let deadline = match self.check(Instant::now(), timeouts) {
                Ok(deadline) => deadline,
                Err(reason) => return reason,
            };
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = self.started.notified() => {}
            }
        }
    }
}

/// A request being answered: the connection is not idle, and its headers are in.
struct Answering(Arc<Activity>);

impl Answering {
    fn new(activity: Arc<Activity>) -> Answering {
        {
            let mut state = activity.state();
            state.answering += 1;
            state.request_since = None;
        }
        Answering(activity)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.answering -= 1;
        state.last = Instant::now();
    }
}

/// A connection's stream, telling its [`Activity`] of every byte moved.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    fn new(inner: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Endpoint {
    async fn answer(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        if request.method() != Method::GET && request.method() != Method::HEAD {
            return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "use GET\n".into());
        }
        match request.uri().path() {
            "/metrics" => match self.refusal(&request) {
                Some(refused) => refused,
                None => self.metrics(),
            },
            "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
            "/readyz" => self.readiness().await,
            _ => reply(
                StatusCode::NOT_FOUND,
                TEXT,
                "not found: try /metrics, /healthz or /readyz\n".into(),
            ),
        }
    }

    /// Why `/metrics` is refused to this request: no or a wrong bearer token.
    fn refusal(&self, request: &Request<Incoming>) -> Option<Response<Full<Bytes>>> {
        let path = self.token_file.as_ref()?;
        let expected = match std::fs::read_to_string(path) {
            Ok(token) if !token.trim().is_empty() => token.trim().to_string(),
            _ => {
                tracing::warn!(file = %path.display(),
                    "metrics endpoint: the token file is unreadable or empty; refusing /metrics");
                let body = "the broker's token file is unreadable; see its log\n".to_string();
                return Some(reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, body));
            }
        };
        let given = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given.is_some_and(|given| same_secret(given.trim(), &expected)) {
            return None;
        }
        let body = "/metrics needs the header Authorization: Bearer <token>\n".to_string();
        let mut refused = reply(StatusCode::UNAUTHORIZED, TEXT, body);
        refused
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Some(refused)
    }

    fn metrics(&self) -> Response<Full<Bytes>> {
        let mut text = String::new();
        match encode(&mut text, &self.registry) {
            Ok(()) => reply(StatusCode::OK, OPENMETRICS, text),
            Err(error) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                format!("encoding metrics failed: {error}\n"),
            ),
        }
    }

    async fn readiness(&self) -> Response<Full<Bytes>> {
        let checks = self.broker.readiness().await;
        let ready = checks.iter().all(|c| c.problem.is_none());
        let body: String = checks
            .iter()
            .map(|c| match &c.problem {
                None => format!("{}: ok\n", c.name),
                Some(problem) => format!("{}: {problem}\n", c.name),
            })
            .collect();
        let status = if ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        reply(status, TEXT, body)
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Compares in time that depends only on the lengths, so that a wrong token's timing tells
/// nothing of the right one.
fn same_secret(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCKS: Timeouts = Timeouts {
        header: Duration::from_secs(1),
        idle: Duration::from_secs(10),
    };

    fn watchdog(activity: &Arc<Activity>) -> tokio::task::JoinHandle<&'static str> {
        let activity = activity.clone();
        tokio::spawn(async move { activity.expired(CLOCKS).await })
    }

    #[tokio::test(start_paused = true)]
    async fn the_header_clock_starts_with_a_requests_first_byte() {
        let activity = Arc::new(Activity::new());
        let expired = watchdog(&activity);
        tokio::time::sleep(Duration::from_secs(5)).await;
        activity.read(); // a request begins, long before the idle clock would end
        tokio::time::sleep(Duration::from_millis(900)).await;
        activity.read(); // more of its headers: the clock runs on from the first byte
        assert!(!expired.is_finished());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(expired
            .await
            .unwrap()
            .contains("metrics_header_read_timeout_ms"));
    }

    #[tokio::test(start_paused = true)]
    async fn headers_in_stop_the_header_clock_and_answers_the_idle_one() {
        let activity = Arc::new(Activity::new());
        let expired = watchdog(&activity);
        activity.read();
        let answering = Answering::new(activity.clone()); // the headers are in
        tokio::time::sleep(Duration::from_secs(60)).await; // a slow /readyz
        assert!(!expired.is_finished());
        drop(answering);
        activity.wrote();
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!expired.is_finished());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(expired.await.unwrap().contains("metrics_idle_timeout_ms"));
    }

    #[test]
    fn only_the_same_token_passes() {
        assert!(same_secret("s3cret-token", "s3cret-token"));
        assert!(!same_secret("s3cret-tokeN", "s3cret-token"));
        assert!(!same_secret("s3cret", "s3cret-token"));
        assert!(!same_secret("", "s3cret-token"));
    }
}
