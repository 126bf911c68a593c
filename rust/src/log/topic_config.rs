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
    /// `cleanup.policy`: a list of words, `delete` and `compact`.
    List,
    /// `min.cleanable.dirty.ratio`: a fraction from 0 to 1.
    Double,
    /// `message.timestamp.type`: one word; `CreateTime` is the one value accepted.
    String,
}

impl ConfigKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConfigKind::Int => "int",
            ConfigKind::Long => "long",
            ConfigKind::List => "list",
            ConfigKind::Double => "double",
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
pub(crate) const CLEANUP_POLICY: &str = "cleanup.policy";
pub(crate) const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
pub(crate) const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
pub(crate) const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
pub(crate) const DELETE_RETENTION_MS: &str = "delete.retention.ms";
pub(crate) const SEGMENT_MS: &str = "segment.ms";

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
        name: CLEANUP_POLICY,
        kind: ConfigKind::List,
        low: 0,
        high: 0,
        expected: "delete, compact, or both (compact,delete)",
        broker_setting: "",
        doc: "delete: segments go by retention.ms and retention.bytes. compact: the cleaner \
              keeps the last record of each key (and retention does not apply). Both: the \
              cleaner's rules and retention. A compacted topic refuses records without a key.",
    },
    TopicConfig {
        name: MIN_CLEANABLE_DIRTY_RATIO,
        kind: ConfigKind::Double,
        low: 0,
        high: 1,
        expected: "a fraction from 0 to 1, e.g. 0.5",
        broker_setting: "log_cleaner_min_cleanable_ratio",
        doc: "A compacted partition is cleaned once its segments not yet cleaned (and old \
              enough) hold this share of its segment bytes.",
    },
    number(
        MIN_COMPACTION_LAG_MS,
        ConfigKind::Long,
        (0, i64::MAX),
        "milliseconds >= 0",
        "log_cleaner_min_compaction_lag_ms",
        "A record stays uncleaned at least this long (a segment is cleaned once its newest \
         record is this old).",
    ),
    number(
        MAX_COMPACTION_LAG_MS,
        ConfigKind::Long,
        (1, i64::MAX),
        "milliseconds > 0",
        "log_cleaner_max_compaction_lag_ms",
        "A compacted partition is cleaned, however little of it is dirty, once its oldest \
         uncleaned segment's newest record is this old.",
    ),
    number(
        DELETE_RETENTION_MS,
        ConfigKind::Long,
        (0, i64::MAX),
        "milliseconds >= 0",
        "log_cleaner_delete_retention_ms",
        "A tombstone (a record with a null value) of a compacted topic is kept this long \
         after the cleaning that first kept it, then removed.",
    ),
    number(
        SEGMENT_MS,
        ConfigKind::Long,
        (1, i64::MAX),
        "milliseconds > 0",
        "log_roll_ms",
        "A partition's write-ahead data becomes a segment at most this long after it was \
         written (the broker's --wal-compaction-age-ms, when that is shorter).",
    ),
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

/// A topic's `cleanup.policy`: which of Kafka's two it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

/// The topic's cleanup policy (delete when it sets none; the control plane refuses other
/// words, so one read from a record was written by something else: named in the log and
/// skipped).
pub(crate) fn cleanup_policy(configs: &BTreeMap<String, String>) -> CleanupPolicy {
    let Some(value) = configs.get(CLEANUP_POLICY) else {
        return CleanupPolicy {
            delete: true,
            compact: false,
        };
    };
    let mut policy = CleanupPolicy {
        delete: false,
        compact: false,
    };
    for word in value.split(',').map(str::trim) {
        match word {
            "delete" => policy.delete = true,
            "compact" => policy.compact = true,
            other => tracing::warn!(
                config = CLEANUP_POLICY,
                value = other,
                "a topic record holds an unknown cleanup policy; it is skipped"
            ),
        }
    }
    policy
}

/// The fraction a topic sets for `name` (a double of the table), if it sets a valid one.
pub(crate) fn topic_fraction(configs: &BTreeMap<String, String>, name: &str) -> Option<f64> {
    let value = configs.get(name)?;
    let fraction = value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v));
    if fraction.is_none() {
        tracing::warn!(
            config = name,
            value = value.as_str(),
            "a topic record holds an invalid config value; the broker default applies"
        );
    }
    fraction
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
    fn the_cleanup_policy_and_a_fraction_are_read_as_kafka_writes_them() {
        let policy = |value: Option<&str>| {
            let set = value.map_or_else(BTreeMap::new, |v| configs(&[(CLEANUP_POLICY, v)]));
            let p = cleanup_policy(&set);
            (p.delete, p.compact)
        };
        assert_eq!(policy(None), (true, false));
        assert_eq!(policy(Some("compact")), (false, true));
        assert_eq!(policy(Some("compact, delete")), (true, true));
        assert_eq!(policy(Some("delete")), (true, false));
        let ratio = |v: &str| {
            topic_fraction(
                &configs(&[(MIN_CLEANABLE_DIRTY_RATIO, v)]),
                MIN_CLEANABLE_DIRTY_RATIO,
            )
        };
        assert_eq!(ratio("0.25"), Some(0.25));
        assert_eq!(ratio("1"), Some(1.0));
        assert_eq!(ratio("1.5"), None);
        assert_eq!(ratio("x"), None);
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
                ConfigKind::Double => assert!(!config.broker_setting.is_empty()),
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
