//! The topic config table (`log::topic_config`) as the control plane reads it.

use pyo3::prelude::*;

use crate::log::topic_config::TOPIC_CONFIGS;

/// One topic config KafScale honours.
#[pyclass(frozen, get_all, module = "kafscale._core")]
pub(crate) struct TopicConfig {
    name: &'static str,
    /// "int", "long" or "list".
    kind: &'static str,
    low: i64,
    high: i64,
    expected: &'static str,
    /// The broker setting a topic without its own value follows ("" for `cleanup.policy`).
    broker_setting: &'static str,
    doc: &'static str,
}

/// Every topic config KafScale honours, in the order the docs list them.
#[pyfunction]
pub(crate) fn topic_configs() -> Vec<TopicConfig> {
    TOPIC_CONFIGS
        .iter()
        .map(|c| TopicConfig {
            name: c.name,
            kind: c.kind.name(),
            low: c.low,
            high: c.high,
            expected: c.expected,
            broker_setting: c.broker_setting,
            doc: c.doc,
        })
        .collect()
}
