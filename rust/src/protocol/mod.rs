//! The Kafka wire protocol glue around the `kafka-protocol` codec: framing, headers, versions.

pub mod frame;
pub mod header;
pub(crate) mod repeats;
pub mod splice;
pub(crate) mod versions;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// A topic name as the codec's messages carry it.
pub fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}
