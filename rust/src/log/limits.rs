//! A topic's limits as its partitions read them at each use: `segment.bytes` bounds each
//! segment a flush writes (and the buffered size that flushes at once), `max.message.bytes`
//! the largest batch a produce may carry, `message.timestamp.before.max.ms` and
//! `message.timestamp.after.max.ms` (KIP-937) how far record timestamps may lie from the
//! broker's clock. All partitions of a topic on a broker share one
//! `TopicLimits`, which follows the topic record: a config change applies to every partition
//! as soon as the broker's cluster view has it, without reopening any of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use super::topic_config::{
    cleanup_policy, topic_number, MAX_MESSAGE_BYTES, SEGMENT_BYTES, SEGMENT_MS,
    TIMESTAMP_AFTER_MAX_MS, TIMESTAMP_BEFORE_MAX_MS,
};
use super::validate::ProduceRules;
use super::LogSettings;

#[derive(Debug)]
pub(crate) struct TopicLimits {
    segment_bytes: AtomicUsize,
    max_message_bytes: AtomicUsize,
    timestamp_before_max_ms: AtomicI64,
    timestamp_after_max_ms: AtomicI64,
    /// `segment.ms`: the longest write-ahead data waits to become a segment.
    segment_ms: AtomicI64,
    /// A compacted topic refuses records without a key.
    keys_required: AtomicBool,
    /// Broker settings, not topic configs: fixed for the broker's life.
    max_uncompressed_batch_bytes: usize,
    producer_id_expiration_ms: i64,
}

/// A positive size set in the topic's configs, or the broker default (a `max.message.bytes`
/// of 0 too: the broker default applies, as it always has here).
fn size(configs: &BTreeMap<String, String>, key: &str, default: usize) -> usize {
    topic_number(configs, key)
        .and_then(|v| usize::try_from(v).ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// A duration in ms set in the topic's configs, or the broker default.
fn millis(configs: &BTreeMap<String, String>, key: &str, default: i64) -> i64 {
    topic_number(configs, key).unwrap_or(default)
}

impl TopicLimits {
    pub(crate) fn new(configs: &BTreeMap<String, String>, settings: &LogSettings) -> TopicLimits {
        TopicLimits {
            segment_bytes: AtomicUsize::new(size(configs, SEGMENT_BYTES, settings.segment_bytes)),
            max_message_bytes: AtomicUsize::new(size(
                configs,
                MAX_MESSAGE_BYTES,
                settings.max_message_bytes,
            )),
            timestamp_before_max_ms: AtomicI64::new(millis(
                configs,
                TIMESTAMP_BEFORE_MAX_MS,
                settings.message_timestamp_before_max_ms,
            )),
            timestamp_after_max_ms: AtomicI64::new(millis(
                configs,
                TIMESTAMP_AFTER_MAX_MS,
                settings.message_timestamp_after_max_ms,
            )),
            segment_ms: AtomicI64::new(millis(configs, SEGMENT_MS, settings.log_roll_ms)),
            keys_required: AtomicBool::new(cleanup_policy(configs).compact),
            max_uncompressed_batch_bytes: settings.max_uncompressed_batch_bytes,
            producer_id_expiration_ms: settings.producer_id_expiration_ms,
        }
    }

    /// Follows a change of the topic's configs.
    pub(crate) fn update(&self, configs: &BTreeMap<String, String>, settings: &LogSettings) {
        let current = TopicLimits::new(configs, settings);
        self.segment_bytes
            .store(current.segment_bytes(), Ordering::Relaxed);
        self.max_message_bytes
            .store(current.max_message_bytes(), Ordering::Relaxed);
        self.timestamp_before_max_ms.store(
            current.timestamp_before_max_ms.into_inner(),
            Ordering::Relaxed,
        );
        self.timestamp_after_max_ms.store(
            current.timestamp_after_max_ms.into_inner(),
            Ordering::Relaxed,
        );
        self.segment_ms
            .store(current.segment_ms.into_inner(), Ordering::Relaxed);
        self.keys_required
            .store(current.keys_required.into_inner(), Ordering::Relaxed);
    }

    /// How old a partition's oldest write-ahead run may grow before compaction makes it a
    /// segment: the broker's compaction age, or the topic's `segment.ms` if shorter.
    pub(crate) fn roll_age(&self, compaction_age: Duration) -> Duration {
        let segment_ms = self.segment_ms.load(Ordering::Relaxed).max(0) as u64;
        compaction_age.min(Duration::from_millis(segment_ms))
    }

    pub(crate) fn segment_bytes(&self) -> usize {
        self.segment_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn max_message_bytes(&self) -> usize {
        self.max_message_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn producer_id_expiration_ms(&self) -> i64 {
        self.producer_id_expiration_ms
    }

    /// What a produce arriving now is checked against.
    pub(crate) fn produce_rules(&self, now_ms: i64) -> ProduceRules {
        ProduceRules {
            max_batch_bytes: self.max_message_bytes(),
            max_uncompressed_bytes: self.max_uncompressed_batch_bytes,
            timestamp_before_max_ms: self.timestamp_before_max_ms.load(Ordering::Relaxed),
            timestamp_after_max_ms: self.timestamp_after_max_ms.load(Ordering::Relaxed),
            keys_required: self.keys_required.load(Ordering::Relaxed),
            now_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::log::topic_config::tests::configs;

    fn settings() -> LogSettings {
        LogSettings {
            segment_bytes: 1000,
            max_message_bytes: 100,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            max_uncompressed_batch_bytes: 128 << 20,
            producer_id_expiration_ms: 86_400_000,
            flush_interval: Duration::from_millis(10),
            flush_on_arrival: false,
            readahead_segments: 1,
            index_interval: 100,
            wal_object_max_bytes: 8 << 20,
            wal_compaction_age: std::time::Duration::from_secs(60),
            wal_compaction_interval: std::time::Duration::from_secs(5),
            log_roll_ms: 604_800_000,
        }
    }

    #[test]
    fn topic_configs_override_the_broker_defaults_and_follow_changes() {
        let limits = TopicLimits::new(&configs(&[]), &settings());
        assert_eq!(
            (limits.segment_bytes(), limits.max_message_bytes()),
            (1000, 100)
        );
        let set = configs(&[("segment.bytes", "64"), ("max.message.bytes", "32")]);
        limits.update(&set, &settings());
        assert_eq!(
            (limits.segment_bytes(), limits.max_message_bytes()),
            (64, 32)
        );
        // removed again, or unusable: the defaults (checked below for the timestamp bounds)
        for unusable in ["0", "-5", "lots"] {
            let bad = configs(&[("segment.bytes", unusable), ("max.message.bytes", unusable)]);
            limits.update(&bad, &settings());
            assert_eq!(
                (limits.segment_bytes(), limits.max_message_bytes()),
                (1000, 100)
            );
        }
    }

    #[test]
    fn timestamp_bounds_follow_the_topic_configs() {
        let limits = TopicLimits::new(&configs(&[]), &settings());
        let rules = limits.produce_rules(1000);
        assert_eq!(
            (rules.timestamp_before_max_ms, rules.timestamp_after_max_ms),
            (i64::MAX, 3_600_000)
        );
        assert_eq!((rules.now_ms, rules.max_batch_bytes), (1000, 100));
        let set = configs(&[
            ("message.timestamp.before.max.ms", "60000"),
            ("message.timestamp.after.max.ms", "0"),
        ]);
        limits.update(&set, &settings());
        let rules = limits.produce_rules(1000);
        assert_eq!(
            (rules.timestamp_before_max_ms, rules.timestamp_after_max_ms),
            (60_000, 0)
        );
        limits.update(
            &configs(&[("message.timestamp.after.max.ms", "-1")]),
            &settings(),
        );
        let rules = limits.produce_rules(1000);
        assert_eq!(
            (rules.timestamp_before_max_ms, rules.timestamp_after_max_ms),
            (i64::MAX, 3_600_000)
        );
    }
}
