//! A request's use of its client's quotas, and the client throttled as Kafka throttles it
//! (`crate::quotas`): the answer carries `throttle_time_ms` (a Fetch over its byte rate has set
//! its own: `handlers::fetch`) and the connection reads no request for that long; a Produce or
//! Fetch of a version whose client does not wait on its own (before KIP-219: Produce v0–5,
//! Fetch v0–7) is answered that much later instead. What is metered: a Produce's bytes
//! (producer_byte_rate) as it is dispatched, so that the requests a client pipelines behind it
//! wait unread (Kafka reads one request of a connection at a time); a request's time in its
//! handler (request_percentage) once it is answered. ApiVersions and the SASL steps are not
//! metered, as a client sends them before it can be told to wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;

use super::handlers::{Handling, Reply, RequestContext};
use crate::protocol::header::Request;
use crate::protocol::throttle::raise_throttle;
use crate::quotas::entity::QuotaKind;
use crate::quotas::Client;

/// What metering needs of a request, taken before its handler consumes it.
pub(crate) struct Metered {
    api: ApiKey,
    version: i16,
    client_id: Option<String>,
    bytes: usize,
}

impl Metered {
    pub(crate) fn of(request: &Request) -> Metered {
        Metered {
            api: request.api_key,
            version: request.api_version,
            client_id: request.client_id.clone(),
            bytes: request.body.len(),
        }
    }

    /// A Produce's bytes, metered as it is dispatched: the connection is muted at once if its
    /// client is over its byte rate. The throttle, for its answer.
    pub(crate) fn produce(&self, cx: &RequestContext) -> Duration {
        if self.api != ApiKey::Produce {
            return Duration::ZERO;
        }
        let client = Client::new(cx.access.principal(), self.client_id.as_deref());
        let kind = QuotaKind::ProducerByteRate;
        let throttle = cx.broker.quotas.record(kind, client, self.bytes as f64);
        if !throttle.is_zero() {
            cx.connection.mute_for(throttle);
        }
        throttle
    }

    fn exempt(&self) -> bool {
        matches!(
            self.api,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        )
    }

    /// Whether the client waits out a throttle itself (KIP-219); else its answer is held.
    fn client_waits(&self) -> bool {
        match self.api {
            ApiKey::Produce => self.version >= 6,
            ApiKey::Fetch => self.version >= 8,
            _ => true,
        }
    }
}

/// A handler's future, timed: how long its polls took (the request's share of a thread).
pub(crate) struct Busy {
    handling: Handling,
    busy: Duration,
}

impl Busy {
    pub(crate) fn new(handling: Handling) -> Busy {
        Busy {
            handling,
            busy: Duration::ZERO,
        }
    }
}

impl Future for Busy {
    type Output = (Reply, Duration);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let started = Instant::now();
        let polled = self.handling.as_mut().poll(cx);
        self.busy += started.elapsed();
        polled.map(|reply| (reply, self.busy))
    }
}

/// Meters the answered request's time against its client's quotas and throttles the client
/// if it is over one (or `throttled` already, a Produce over its byte rate): `reply` gets the
/// throttle, the connection is muted, an older client's answer is held.
pub(crate) async fn meter(
    cx: &RequestContext,
    metered: &Metered,
    (reply, busy): (&mut Reply, Duration),
    throttled: Duration,
) {
    if metered.exempt() {
        return;
    }
    let client = Client::new(cx.access.principal(), metered.client_id.as_deref());
    let percent_seconds = busy.as_secs_f64() * 100.0;
    let kind = QuotaKind::RequestPercentage;
    let mut throttle = cx.broker.quotas.record(kind, client, percent_seconds);
    throttle = throttle.max(throttled);
    if let Reply::Response(frame) = reply {
        let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
        let held = raise_throttle(frame, metered.api, metered.version, ms);
        throttle = throttle.max(Duration::from_millis(held.max(0) as u64));
    }
    if throttle.is_zero() {
        return;
    }
    cx.connection.mute_for(throttle);
    if !metered.client_waits() {
        tokio::time::sleep(throttle).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use kafka_protocol::messages::ProduceRequest;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::protocol::header::testing::request;
    use crate::quotas::entity::{QuotaEntity, QuotaTable};
    use crate::server::budget::{Budgets, ByteBudget};
    use crate::server::handlers::testing::open;
    use crate::server::handlers::ConnectionContext;

    fn connection() -> Arc<ConnectionContext> {
        Arc::new(ConnectionContext {
            peer: "127.0.0.1:1".parse().unwrap(),
            id: 1,
            budgets: Budgets::new(1 << 20, Arc::new(ByteBudget::new(1 << 20))),
            fetch_turns: Arc::new(Semaphore::new(1)),
            produce_window: Arc::default(),
            listener: "PLAINTEXT".into(),
            muted_until: Default::default(),
        })
    }

    #[tokio::test]
    async fn a_produce_over_its_byte_rate_mutes_its_connection_as_it_is_dispatched() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let slow = QuotaEntity::from_wire([("client-id", Some("slow"))]).unwrap();
        let rate = BTreeMap::from([("producer_byte_rate".to_string(), 1.0)]);
        t.broker.quotas.replace(QuotaTable::new([(slow, rate)]));
        let cx = RequestContext {
            broker: t.broker.clone(),
            access: open(),
            connection: connection(),
        };
        let body = ProduceRequest::default().with_acks(1).with_timeout_ms(1000);
        let mut produce = request(ApiKey::Produce, 8, &body);
        // Another client has no quota: its requests are read on.
        produce.client_id = Some("fast".into());
        assert_eq!(Metered::of(&produce).produce(&cx), Duration::ZERO);
        assert!(cx.connection.muted().is_none());
        // Over its quota, the client's connection reads nothing more from the moment its
        // Produce is dispatched (not from its answer, which waits for a flush): a request it
        // pipelined behind waits unread.
        produce.client_id = Some("slow".into());
        let throttle = Metered::of(&produce).produce(&cx);
        assert!(throttle > Duration::ZERO);
        assert!(cx.connection.muted().is_some());
        // Other APIs are not metered by bytes.
        let metadata = request(
            ApiKey::Metadata,
            1,
            &kafka_protocol::messages::MetadataRequest::default(),
        );
        assert_eq!(Metered::of(&metadata).produce(&cx), Duration::ZERO);
    }
}
