//! CreatePartitions across the bridge: the request as the partition handler sees it, and its
//! answer (classes Python constructs, re-exported by `kafscale.admin.protocol`) for the codec.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult as WireResult;
use kafka_protocol::messages::{self as wire};
use pyo3::prelude::*;

use crate::control::text::{read, wire_opt};
use crate::protocol::topic_name;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatePartitionsTopic {
    name: String,
    count: i32,
    assignments: Option<Vec<Vec<i32>>>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatePartitionsRequest {
    topics: Vec<CreatePartitionsTopic>,
    timeout_ms: i32,
    validate_only: bool,
}

impl CreatePartitionsRequest {
    pub(crate) fn new(request: &wire::CreatePartitionsRequest) -> Self {
        let topics = request.topics.iter().map(|t| CreatePartitionsTopic {
            name: read(&t.name),
            count: t.count,
            // One list of broker ids per new partition; null when the client leaves it to us.
            assignments: t.assignments.as_ref().map(|assignments| {
                assignments
                    .iter()
                    .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        });
        CreatePartitionsRequest {
            topics: topics.collect(),
            timeout_ms: request.timeout_ms,
            validate_only: request.validate_only,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatePartitionsTopicResult {
    pub name: String,
    pub error_code: i16,
    pub error_message: Option<String>,
}

#[pymethods]
impl CreatePartitionsTopicResult {
    #[new]
    #[pyo3(signature = (name, error_code, error_message = None))]
    fn new(name: String, error_code: i16, error_message: Option<String>) -> Self {
        CreatePartitionsTopicResult {
            name,
            error_code,
            error_message,
        }
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatePartitionsResponse {
    pub results: Vec<CreatePartitionsTopicResult>,
    pub throttle_time_ms: i32,
}

#[pymethods]
impl CreatePartitionsResponse {
    #[new]
    #[pyo3(signature = (results, throttle_time_ms = 0))]
    fn new(results: Vec<CreatePartitionsTopicResult>, throttle_time_ms: i32) -> Self {
        CreatePartitionsResponse {
            results,
            throttle_time_ms,
        }
    }
}

pub(crate) fn create_partitions(
    answer: CreatePartitionsResponse,
) -> wire::CreatePartitionsResponse {
    let results = answer.results.into_iter().map(|r| {
        WireResult::default()
            .with_name(topic_name(&r.name))
            .with_error_code(r.error_code)
            .with_error_message(wire_opt(r.error_message))
    });
    wire::CreatePartitionsResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_results(results.collect())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic as WireTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId};
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::control::body::ControlBody;
    use crate::control::testing::{advertised, decoded, on_the_wire};

    #[test]
    fn create_partitions_request_at_every_version() {
        let assigned = |ids: &[i32]| {
            CreatePartitionsAssignment::default()
                .with_broker_ids(ids.iter().map(|&id| BrokerId(id)).collect())
        };
        for v in advertised(ApiKey::CreatePartitions) {
            let request = wire::CreatePartitionsRequest::default()
                .with_topics(vec![
                    WireTopic::default()
                        .with_name(topic_name("orders"))
                        .with_count(6)
                        .with_assignments(None),
                    WireTopic::default()
                        .with_name(topic_name("events"))
                        .with_count(3)
                        .with_assignments(Some(vec![assigned(&[1]), assigned(&[2, 3])])),
                ])
                .with_timeout_ms(30_000)
                .with_validate_only(true);
            let ControlBody::CreatePartitions(body) =
                decoded(ApiKey::CreatePartitions, v, &request)
            else {
                panic!("v{v} decoded as another API");
            };
            let expected = CreatePartitionsRequest {
                topics: vec![
                    CreatePartitionsTopic {
                        name: "orders".into(),
                        count: 6,
                        assignments: None,
                    },
                    CreatePartitionsTopic {
                        name: "events".into(),
                        count: 3,
                        assignments: Some(vec![vec![1], vec![2, 3]]),
                    },
                ],
                timeout_ms: 30_000,
                validate_only: true,
            };
            assert_eq!(CreatePartitionsRequest::new(&body), expected, "v{v}");
        }
    }

    #[test]
    fn create_partitions_answer_at_every_version() {
        let invalid = ResponseError::InvalidPartitions.code();
        let answer = CreatePartitionsResponse {
            results: vec![
                CreatePartitionsTopicResult {
                    name: "orders".into(),
                    error_code: 0,
                    error_message: None,
                },
                CreatePartitionsTopicResult {
                    name: "events".into(),
                    error_code: invalid,
                    error_message: Some("topic 'events' has 3 partitions".into()),
                },
            ],
            throttle_time_ms: 5,
        };
        for v in advertised(ApiKey::CreatePartitions) {
            let wire = on_the_wire(&create_partitions(answer.clone()), v);
            assert_eq!(wire.throttle_time_ms, 5);
            let results: Vec<_> = wire
                .results
                .iter()
                .map(|r| (r.name.as_str(), r.error_code, r.error_message.as_deref()))
                .collect();
            let expected = [
                ("orders", 0, None),
                ("events", invalid, Some("topic 'events' has 3 partitions")),
            ];
            assert_eq!(results, expected, "v{v}");
        }
    }
}
