//! The operations endpoint on `KAFSCALE_METRICS_ADDR`: `/metrics` (Prometheus text format),
//! `/healthz` (the process answers) and `/readyz` (stores reachable and serving; 503 with
//! the failing checks otherwise). It keeps answering during a graceful shutdown: liveness
//! stays green while buffers flush, readiness turns red at once.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
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

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Endpoint {
    broker: Arc<Broker>,
    registry: Registry,
}

/// Serves until the runtime stops.
pub async fn serve(listener: TcpListener, broker: Arc<Broker>) {
    let mut registry = Registry::default();
    broker.metrics.register(&mut registry);
    registry.register_collector(Box::new(TopicTrafficCollector::new(broker.clone())));
    registry.register_collector(Box::new(BrokerGauges::new(broker.clone())));
    let endpoint = Arc::new(Endpoint { broker, registry });
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(endpoint.answer(request).await) }
            });
            if let Err(error) = http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await
            {
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
            "/metrics" => self.metrics(),
            "/healthz" => reply(StatusCode::OK, TEXT, "ok\n".into()),
            "/readyz" => self.readiness().await,
            _ => reply(
                StatusCode::NOT_FOUND,
                TEXT,
                "not found: try /metrics, /healthz or /readyz\n".into(),
            ),
        }
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
