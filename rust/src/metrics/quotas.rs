//! Per-quota series: for each quota kind and configured entity (`user=alice`,
//! `client-id=<default>`: the quotas set, not every client, so the series stay as few as the
//! quotas), what the clients it governs used, how often they were throttled and for how long.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::LabelText;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    quota: String,
    entity: Entity,
}

/// A configured entity as a label value (escaped: it holds client-chosen names).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Entity(String);

impl prometheus_client::encoding::EncodeLabelValue for Entity {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder,
    ) -> std::fmt::Result {
        LabelText(&self.0).encode(encoder)
    }
}

type F64Counter = Counter<f64, std::sync::atomic::AtomicU64>;

#[derive(Debug, Default)]
pub(crate) struct QuotaMetrics {
    used: Family<QuotaLabels, F64Counter>,
    throttled: Family<QuotaLabels, Counter>,
    throttle_seconds: Family<QuotaLabels, F64Counter>,
}

impl QuotaMetrics {
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "quota_usage",
            "What the clients a quota governs used: bytes for producer_byte_rate and \
             consumer_byte_rate, percent-seconds of one thread for request_percentage, \
             connections for connection_creation_rate",
            self.used.clone(),
        );
        registry.register(
            "quota_throttled",
            "Requests (or connections) throttled by a quota",
            self.throttled.clone(),
        );
        registry.register_with_unit(
            "quota_throttle",
            "Time clients were throttled by a quota (answers delayed or connections muted)",
            Unit::Seconds,
            self.throttle_seconds.clone(),
        );
    }

    pub(crate) fn used(&self, quota: &str, entity: &str, amount: f64) {
        let labels = labels(quota, entity);
        self.used.get_or_create(&labels).inc_by(amount);
    }

    pub(crate) fn throttled(&self, quota: &str, entity: &str, ms: u64) {
        let labels = labels(quota, entity);
        self.throttled.get_or_create(&labels).inc();
        self.throttle_seconds
            .get_or_create(&labels)
            .inc_by(ms as f64 / 1000.0);
    }

    /// A quota removed: its series go with it.
    pub(crate) fn forget(&self, quota: &str, entity: &str) {
        let labels = labels(quota, entity);
        self.used.remove(&labels);
        self.throttled.remove(&labels);
        self.throttle_seconds.remove(&labels);
    }
}

fn labels(quota: &str, entity: &str) -> QuotaLabels {
    QuotaLabels {
        quota: quota.to_string(),
        entity: Entity(entity.to_string()),
    }
}
