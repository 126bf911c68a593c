//! The Kafka wire protocol glue around the `kafka-protocol` codec: framing, headers, versions.

pub(crate) mod frame;
pub(crate) mod header;
pub(crate) mod newer;
pub(crate) mod repeats;
pub(crate) mod splice;
pub(crate) mod throttle;
pub(crate) mod versions;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// A topic name as the codec's messages carry it.
pub(crate) fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}
