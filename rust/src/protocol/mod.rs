//! The Kafka wire protocol glue around the `kafka-protocol` codec: framing, headers, versions.

pub mod frame;
pub mod header;
pub mod versions;
