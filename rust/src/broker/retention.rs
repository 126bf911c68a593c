//! Retention of the partitions this broker owns, every retention check interval. A pass
//! costs little for partitions without data: `retention::enforce` returns at once for an
//! empty log, without listing its objects.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::log::partition::now_ms;
use crate::log::retention::{self, RetentionLimits};
use crate::log::topic_config::{cleanup_policy, topic_number, RETENTION_BYTES, RETENTION_MS};

/// Applies retention to the partitions this broker owns, every retention check interval.
pub(super) fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        // Like Kafka, the first check comes one interval after start-up, not at once.
        let every = broker.config.retention_check_interval();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            for topic in broker.topics() {
                let limits = retention_limits(&topic.record.configs, &broker.config);
                for slot in &topic.partitions {
                    let partition = slot.current();
                    if partition.is_leader() {
                        retention::enforce(&broker.log, &partition, limits, now_ms()).await;
                    }
                }
            }
        }
    });
}

/// A topic's retention.ms / retention.bytes, falling back to the broker defaults; none for a
/// topic whose cleanup.policy is compact alone (Kafka keeps such a log whatever its age or
/// size: the cleaner bounds it).
fn retention_limits(configs: &BTreeMap<String, String>, config: &BrokerConfig) -> RetentionLimits {
    if !cleanup_policy(configs).delete {
        return RetentionLimits {
            retention_ms: -1,
            retention_bytes: -1,
        };
    }
    let value = |key: &str, default: i64| topic_number(configs, key).unwrap_or(default);
    RetentionLimits {
        retention_ms: value(RETENTION_MS, config.retention_ms),
        retention_bytes: value(RETENTION_BYTES, config.retention_bytes),
    }
}
