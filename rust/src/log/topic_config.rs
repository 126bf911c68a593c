//! The topic configs KafScale honours, declared once: name, type, bounds, the broker setting a
//! topic without its own value follows, and what it does. The control plane checks and
//! describes topic configs by this table (`kafscale._core.topic_configs()`, used by
//! `kafscale.admin.topic_configs`, the CLI's help and the docs' lists); the data plane reads a
//! topic's values from its record through it (`log::limits`, `broker::retention`).
//!
//! Every other key is refused with INVALID_CONFIG: a config that would be stored but not
//! applied is worse than a clear refusal.

use std::collections::BTreeMap;

/// How a config's value is written (Kafka's `ConfigType` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConfigKind {
    Int,
    Long,
    /// `cleanup.policy`: a list of words; `delete` is the one value accepted.
    List,
    /// `message.timestamp.type`: one word; `CreateTime` is the one value accepted.
    String,
}

impl ConfigKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConfigKind::Int => "int",
            ConfigKind::Long => "long",
            ConfigKind::List => "list",
            ConfigKind::String => "string",
        }
    }
}

/// One topic config.
#[derive(Debug)]
pub(crate) struct TopicConfig {
    pub(crate) name: &'static str,
    pub(crate) kind: ConfigKind,
    /// The values accepted, both included (numbers only).
    pub(crate) low: i64,
    pub(crate) high: i64,
    /// What a valid value looks like, for messages.
    pub(crate) expected: &'static str,
    /// The broker setting a topic without its own value follows; empty for the words
    /// (`cleanup.policy`, `message.timestamp.type`), whose one accepted value is the default.
    pub(crate) broker_setting: &'static str,
    pub(crate) doc: &'static str,
}

const INT32_MAX: i64 = i32::MAX as i64;

const fn number(
    name: &'static str,
    kind: ConfigKind,
    (low, high): (i64, i64),
    expected: &'static str,
    broker_setting: &'static str,
    doc: &'static str,
) -> TopicConfig {
    TopicConfig {
        name,
        kind,
        low,
        high,
        expected,
        broker_setting,
        doc,
    }
}

pub(crate) const RETENTION_MS: &str = "retention.ms";
pub(crate) const RETENTION_BYTES: &str = "retention.bytes";
pub(crate) const SEGMENT_BYTES: &str = "segment.bytes";
pub(crate) const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub(crate) const TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
pub(crate) const TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";

pub(crate) const TOPIC_CONFIGS: &[TopicConfig] = &[
    number(
        RETENTION_MS,
        ConfigKind::Long,
        (-1, i64::MAX),
        "-1 (unlimited) or milliseconds >= 0",
        "retention_ms",
        "Segments whose newest record is older than this are deleted (-1: keep forever).",
    ),
    number(
        RETENTION_BYTES,
        ConfigKind::Long,
        (-1, i64::MAX),
        "-1 (unlimited) or bytes >= 0",
        "retention_bytes",
        "Oldest segments are deleted while a partition is larger than this (-1: no limit).",
    ),
    number(
        SEGMENT_BYTES,
        ConfigKind::Int,
        (1, INT32_MAX),
        "bytes > 0 (at most 2147483647)",
        "segment_bytes",
        "A partition's write-ahead data is compacted into segments of about this size.",
    ),
    number(
        MAX_MESSAGE_BYTES,
        ConfigKind::Int,
        (0, INT32_MAX),
        "bytes >= 0 (at most 2147483647)",
        "max_message_bytes",
        "Largest record batch the topic accepts.",
    ),
    number(
        TIMESTAMP_BEFORE_MAX_MS,
        ConfigKind::Long,
        (0, i64::MAX),
        "milliseconds >= 0",
        "message_timestamp_before_max_ms",
        "A produce whose CreateTime record timestamp is older than this (against the broker's \
         clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
    number(
        TIMESTAMP_AFTER_MAX_MS,
        ConfigKind::Long,
        (0, i64::MAX),
        "milliseconds >= 0",
        "message_timestamp_after_max_ms",
        "A produce whose CreateTime record timestamp is further than this in the future \
         (against the broker's clock) is refused with INVALID_TIMESTAMP (KIP-937).",
    ),
    TopicConfig {
        name: "cleanup.policy",
        kind: ConfigKind::List,
        low: 0,
        high: 0,
        expected: "delete",
        broker_setting: "",
        doc: "delete: segments go by retention.ms and retention.bytes. KafScale has no log \
              compaction, so compact is refused.",
    },
    TopicConfig {
        name: "message.timestamp.type",
        kind: ConfigKind::String,
        low: 0,
        high: 0,
        expected: "CreateTime",
        broker_setting: "",
        doc: "CreateTime: records keep the timestamps their producers gave them (Kafka Streams \
              asks for it on its internal topics). Batches are stored as produced, so \
              LogAppendTime is refused.",
    },
];

/// The number a topic sets for the config `name` (one of the table's numbers), if it sets a
/// valid one. The control plane refuses invalid values, so an invalid one in a topic record
/// was written by something else: it is named in the log and the broker default applies.
pub(crate) fn topic_number(configs: &BTreeMap<String, String>, name: &str) -> Option<i64> {
    let value = configs.get(name)?;
    let config = TOPIC_CONFIGS.iter().find(|c| c.name == name)?;
    let number = value
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|v| (config.low..=config.high).contains(v));
    if number.is_none() {
        tracing::warn!(
            config = name,
            value = value.as_str(),
            expected = config.expected,
            "a topic record holds an invalid config value; the broker default applies"
        );
    }
    number
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A topic's configs as its record holds them.
    pub(crate) fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_number_is_read_within_its_bounds() {
        let set = configs(&[(RETENTION_MS, "-1"), (SEGMENT_BYTES, " 1024 ")]);
        assert_eq!(topic_number(&set, RETENTION_MS), Some(-1));
        assert_eq!(topic_number(&set, SEGMENT_BYTES), Some(1024));
        assert_eq!(topic_number(&set, RETENTION_BYTES), None, "not set");
        for bad in ["0", "-1", "2147483648", "x"] {
            let set = configs(&[(SEGMENT_BYTES, bad)]);
            assert_eq!(topic_number(&set, SEGMENT_BYTES), None, "{bad}");
        }
    }

    #[test]
    fn every_number_names_a_broker_setting_and_bounds_that_hold_its_type() {
        for config in TOPIC_CONFIGS {
            match config.kind {
                ConfigKind::List | ConfigKind::String => {
                    assert!(config.broker_setting.is_empty(), "{}", config.name)
                }
                kind => {
                    assert!(!config.broker_setting.is_empty(), "{}", config.name);
                    assert!(config.low <= config.high, "{}", config.name);
                    if kind == ConfigKind::Int {
                        assert!(config.high <= INT32_MAX, "{}", config.name);
                    }
                }
            }
        }
    }
}
