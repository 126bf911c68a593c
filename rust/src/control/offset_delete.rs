//! OffsetDelete (KIP-496) across the bridge: the request as the group coordinator sees it, and
//! its answer (classes Python constructs, re-exported by `kafscale.groups.protocol`) for the codec. Kafka serves
//! only v0.

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition as WirePartition, OffsetDeleteResponseTopic as WireTopic,
};
use kafka_protocol::messages::{self as wire};
use pyo3::prelude::*;

use crate::control::text::read;
use crate::protocol::topic_name;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetDeleteTopic {
    name: String,
    partitions: Vec<i32>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetDeleteRequest {
    group_id: String,
    topics: Vec<OffsetDeleteTopic>,
}

impl OffsetDeleteRequest {
    pub(crate) fn new(request: &wire::OffsetDeleteRequest) -> Self {
        let topics = request.topics.iter().map(|t| OffsetDeleteTopic {
            name: read(&t.name),
            partitions: t.partitions.iter().map(|p| p.partition_index).collect(),
        });
        OffsetDeleteRequest {
            group_id: read(&request.group_id),
            topics: topics.collect(),
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetDeletePartitionResult {
    pub partition_index: i32,
    pub error_code: i16,
}

#[pymethods]
impl OffsetDeletePartitionResult {
    #[new]
    #[pyo3(signature = (partition_index, error_code))]
    fn new(partition_index: i32, error_code: i16) -> Self {
        OffsetDeletePartitionResult {
            partition_index,
            error_code,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetDeleteTopicResult {
    pub name: String,
    pub partitions: Vec<OffsetDeletePartitionResult>,
}

#[pymethods]
impl OffsetDeleteTopicResult {
    #[new]
    #[pyo3(signature = (name, partitions))]
    fn new(name: String, partitions: Vec<OffsetDeletePartitionResult>) -> Self {
        OffsetDeleteTopicResult { name, partitions }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OffsetDeleteResponse {
    pub error_code: i16,
    pub topics: Vec<OffsetDeleteTopicResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl OffsetDeleteResponse {
    #[new]
    #[pyo3(signature = (error_code, topics = Vec::new(), throttle_time_ms = 0))]
    fn new(error_code: i16, topics: Vec<OffsetDeleteTopicResult>, throttle_time_ms: i32) -> Self {
        OffsetDeleteResponse {
            error_code,
            topics,
            throttle_time_ms,
        }
    }
}

pub(crate) fn offset_delete(answer: OffsetDeleteResponse) -> wire::OffsetDeleteResponse {
    let topics = answer.topics.into_iter().map(|t| {
        let partitions = t.partitions.into_iter().map(|p| {
            WirePartition::default()
                .with_partition_index(p.partition_index)
                .with_error_code(p.error_code)
        });
        WireTopic::default()
            .with_name(topic_name(&t.name))
            .with_partitions(partitions.collect())
    });
    wire::OffsetDeleteResponse::default()
        .with_error_code(answer.error_code)
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_topics(topics.collect())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::offset_delete_request::{
        OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
    };
    use kafka_protocol::messages::{ApiKey, GroupId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::control::body::ControlBody;
    use crate::control::testing::{advertised, decoded, on_the_wire};

    #[test]
    fn the_request_and_the_answer_cross_at_every_version() {
        for v in advertised(ApiKey::OffsetDelete) {
            let partition = |i| OffsetDeleteRequestPartition::default().with_partition_index(i);
            let request = wire::OffsetDeleteRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_topics(vec![OffsetDeleteRequestTopic::default()
                    .with_name(topic_name("orders"))
                    .with_partitions(vec![partition(0), partition(2)])]);
            let ControlBody::OffsetDelete(body) = decoded(ApiKey::OffsetDelete, v, &request) else {
                panic!("v{v} decoded as another API");
            };
            let expected = OffsetDeleteRequest {
                group_id: "g".into(),
                topics: vec![OffsetDeleteTopic {
                    name: "orders".into(),
                    partitions: vec![0, 2],
                }],
            };
            assert_eq!(OffsetDeleteRequest::new(&body), expected, "v{v}");

            let answer = OffsetDeleteResponse {
                error_code: 0,
                throttle_time_ms: 0,
                topics: vec![OffsetDeleteTopicResult {
                    name: "orders".into(),
                    partitions: vec![
                        OffsetDeletePartitionResult {
                            partition_index: 0,
                            error_code: 0,
                        },
                        OffsetDeletePartitionResult {
                            partition_index: 2,
                            error_code: 86, // GROUP_SUBSCRIBED_TO_TOPIC
                        },
                    ],
                }],
            };
            let read = on_the_wire(&offset_delete(answer), v);
            let errors: Vec<_> = read.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            assert_eq!(errors, [(0, 0), (2, 86)], "v{v}");
            assert_eq!(read.topics[0].name, topic_name("orders"));
        }
    }
}
