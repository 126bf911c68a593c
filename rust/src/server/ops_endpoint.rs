//! The operations endpoint on `KAFSCALE_METRICS_ADDR`: `/metrics` (Prometheus text format),
//! `/healthz` (the process answers) and `/readyz` (stores reachable and serving; 503 with
//! the failing checks otherwise). It keeps answering during a graceful shutdown: liveness
//! stays green while buffers flush, readiness turns red at once. Optionally over TLS (the SSL
//! listeners' certificate) and with a bearer token for `/metrics`; the probes stay open.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
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
use tokio::net::TcpListener;

use crate::broker::gauges::BrokerGauges;
use crate::broker::traffic::TopicTrafficCollector;
use crate::broker::Broker;
use crate::metrics::process::ProcessCollector;
use crate::server::tls::{Side, Tls};

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

struct Endpoint {
    broker: Arc<Broker>,
    registry: Registry,
    /// The file holding the token `/metrics` requires, if any.
    token_file: Option<PathBuf>,
}

/// Serves until the runtime stops; over TLS when `tls` is given.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    tls: Option<Arc<Tls>>,
    token_file: Option<PathBuf>,
) {
    let mut registry = Registry::default();
    broker.metrics.register(&mut registry);
    registry.register_collector(Box::new(TopicTrafficCollector::new(broker.clone())));
    registry.register_collector(Box::new(BrokerGauges::new(broker.clone())));
    registry.register_collector(Box::new(ProcessCollector));
    let endpoint = Arc::new(Endpoint {
        broker,
        registry,
        token_file,
    });
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (endpoint, tls) = (endpoint.clone(), tls.clone());
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(endpoint.answer(request).await) }
            });
            let http = http1::Builder::new();
            let served = match tls {
                None => http.serve_connection(TokioIo::new(socket), service).await,
                Some(tls) => match tls
                    .accept(socket, HANDSHAKE_TIMEOUT, Side::Operations)
                    .await
                {
                    Ok((stream, _)) => http.serve_connection(TokioIo::new(stream), service).await,
                    Err(error) => {
                        tracing::debug!(%error, "metrics endpoint: TLS handshake failed");
                        return;
                    }
                },
            };
            if let Err(error) = served {
                tracing::debug!(%error, "metrics endpoint: connection ended");
            }
        });
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
    use super::same_secret;

    #[test]
    fn only_the_same_token_passes() {
        assert!(same_secret("s3cret-token", "s3cret-token"));
        assert!(!same_secret("s3cret-tokeN", "s3cret-token"));
        assert!(!same_secret("s3cret", "s3cret-token"));
        assert!(!same_secret("", "s3cret-token"));
    }
}
