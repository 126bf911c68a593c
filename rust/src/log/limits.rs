//! A topic's size limits as its partitions read them at each use: `segment.bytes` bounds each
//! segment a flush writes (and the buffered size that flushes at once), `max.message.bytes`
//! the largest batch a produce may carry. All partitions of a topic on a broker share one
//! `TopicLimits`, which follows the topic record: a config change applies to every partition
//! as soon as the broker's cluster view has it, without reopening any of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::LogSettings;

#[derive(Debug)]
pub struct TopicLimits {
    segment_bytes: AtomicUsize,
    max_message_bytes: AtomicUsize,
}

/// A positive size set in the topic's configs, or the broker default.
fn size(configs: &BTreeMap<String, String>, key: &str, default: usize) -> usize {
    configs
        .get(key)
        .and_then(|v| v.parse().ok())
        .filter(|&v: &usize| v > 0)
        .unwrap_or(default)
}

impl TopicLimits {
    pub fn new(configs: &BTreeMap<String, String>, settings: &LogSettings) -> TopicLimits {
        TopicLimits {
            segment_bytes: AtomicUsize::new(size(configs, "segment.bytes", settings.segment_bytes)),
            max_message_bytes: AtomicUsize::new(size(
                configs,
                "max.message.bytes",
                settings.max_message_bytes,
            )),
        }
    }

    /// Follows a change of the topic's configs.
    pub fn update(&self, configs: &BTreeMap<String, String>, settings: &LogSettings) {
        let current = TopicLimits::new(configs, settings);
        self.segment_bytes
            .store(current.segment_bytes(), Ordering::Relaxed);
        self.max_message_bytes
            .store(current.max_message_bytes(), Ordering::Relaxed);
    }

    pub fn segment_bytes(&self) -> usize {
        self.segment_bytes.load(Ordering::Relaxed)
    }

    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn settings() -> LogSettings {
        LogSettings {
            segment_bytes: 1000,
            max_message_bytes: 100,
            flush_interval: Duration::from_millis(10),
            readahead_segments: 1,
            index_interval: 100,
            max_concurrent_flushes: 1,
        }
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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
        // removed again, or unusable: the defaults
        for unusable in ["0", "-5", "lots"] {
            let bad = configs(&[("segment.bytes", unusable), ("max.message.bytes", unusable)]);
            limits.update(&bad, &settings());
            assert_eq!(
                (limits.segment_bytes(), limits.max_message_bytes()),
                (1000, 100)
            );
        }
    }
}
