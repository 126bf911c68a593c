//! CreateTopics and DeleteTopics as typed Python objects, and Python's answers back into the
//! codec's response messages.

use std::collections::HashMap;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult as WireCreateResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult as WireDeleteResult;
use kafka_protocol::messages::{
    CreateTopicsRequest as WireCreateRequest, CreateTopicsResponse as WireCreate,
    DeleteTopicsRequest as WireDeleteRequest, DeleteTopicsResponse as WireDelete,
};
use kafka_protocol::protocol::StrBytes;
use pyo3::prelude::*;

use crate::protocol::topic_name;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct CreatableTopic {
    name: String,
    num_partitions: i32,
    replication_factor: i16,
    assignments: Vec<(i32, Vec<i32>)>,
    configs: HashMap<String, Option<String>>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct CreateTopicsRequest {
    topics: Vec<CreatableTopic>,
    timeout_ms: i32,
    validate_only: bool,
}

impl From<&WireCreateRequest> for CreateTopicsRequest {
    fn from(request: &WireCreateRequest) -> Self {
        CreateTopicsRequest {
            topics: request
                .topics
                .iter()
                .map(|t| CreatableTopic {
                    name: t.name.to_string(),
                    num_partitions: t.num_partitions,
                    replication_factor: t.replication_factor,
                    assignments: t
                        .assignments
                        .iter()
                        .map(|a| {
                            (
                                a.partition_index,
                                a.broker_ids.iter().map(|b| b.0).collect(),
                            )
                        })
                        .collect(),
                    configs: t
                        .configs
                        .iter()
                        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                        .collect(),
                })
                .collect(),
            timeout_ms: request.timeout_ms,
            validate_only: request.validate_only,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct DeleteTopicsRequest {
    topic_names: Vec<String>,
    timeout_ms: i32,
}

impl From<&WireDeleteRequest> for DeleteTopicsRequest {
    fn from(request: &WireDeleteRequest) -> Self {
        DeleteTopicsRequest {
            topic_names: request.topic_names.iter().map(|n| n.to_string()).collect(),
            timeout_ms: request.timeout_ms,
        }
    }
}

/// Python's answers (dataclasses of `kafscale.admin.protocol`), read by attribute.
#[derive(Debug, Clone, FromPyObject)]
pub struct CreatableTopicResult {
    name: String,
    error_code: i16,
    error_message: Option<String>,
}

#[derive(Debug, Clone, FromPyObject)]
pub struct CreateTopicsResponse {
    topics: Vec<CreatableTopicResult>,
    throttle_time_ms: i32,
}

impl From<CreateTopicsResponse> for WireCreate {
    fn from(r: CreateTopicsResponse) -> Self {
        WireCreate::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_topics(
                r.topics
                    .into_iter()
                    .map(|t| {
                        WireCreateResult::default()
                            .with_name(topic_name(&t.name))
                            .with_error_code(t.error_code)
                            .with_error_message(t.error_message.map(StrBytes::from_string))
                    })
                    .collect(),
            )
    }
}

#[derive(Debug, Clone, FromPyObject)]
pub struct DeletableTopicResult {
    name: String,
    error_code: i16,
}

#[derive(Debug, Clone, FromPyObject)]
pub struct DeleteTopicsResponse {
    responses: Vec<DeletableTopicResult>,
    throttle_time_ms: i32,
}

impl From<DeleteTopicsResponse> for WireDelete {
    fn from(r: DeleteTopicsResponse) -> Self {
        WireDelete::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_responses(
                r.responses
                    .into_iter()
                    .map(|t| {
                        WireDeleteResult::default()
                            .with_name(Some(topic_name(&t.name)))
                            .with_error_code(t.error_code)
                    })
                    .collect(),
            )
    }
}
