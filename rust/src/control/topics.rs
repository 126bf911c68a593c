//! CreateTopics (v0–7) and DeleteTopics (v0–6) as typed Python objects, and Python's answers
//! back into the codec's response messages. Every answer carries all the fields of the newest
//! version; the codec writes those of the request's version (CreateTopics v5+: the topic's
//! partitions, replication factor and configs, v7 its id; DeleteTopics v5+: the error message,
//! v6 the topic id).

use std::collections::HashMap;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs as WireCreatedConfig, CreatableTopicResult as WireCreateResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult as WireDeleteResult;
use kafka_protocol::messages::{
    CreateTopicsRequest as WireCreateRequest, CreateTopicsResponse as WireCreate,
    DeleteTopicsRequest as WireDeleteRequest, DeleteTopicsResponse as WireDelete,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use uuid::Uuid;

use crate::control::configs::DescribedConfig;
use crate::control::text::{read, wire, wire_opt};
use crate::protocol::topic_name;

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatableTopic {
    name: String,
    num_partitions: i32,
    replication_factor: i16,
    assignments: Vec<(i32, Vec<i32>)>,
    configs: HashMap<String, Option<String>>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreateTopicsRequest {
    topics: Vec<CreatableTopic>,
    timeout_ms: i32,
    validate_only: bool,
}

impl From<&WireCreateRequest> for CreateTopicsRequest {
    /// Every version carries the same fields but `validate_only` (v1+; the codec reads false
    /// before). -1 partitions or replication factor (v4+, KIP-464) pass through as sent.
    fn from(request: &WireCreateRequest) -> Self {
        let topics = request.topics.iter().map(|t| CreatableTopic {
            name: read(&t.name),
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
                .map(|c| (read(&c.name), c.value.as_ref().map(read)))
                .collect(),
        });
        CreateTopicsRequest {
            topics: topics.collect(),
            timeout_ms: request.timeout_ms,
            validate_only: request.validate_only,
        }
    }
}

/// A topic named by name or by id (DeleteTopics v6); `None` where the request has none (a
/// null name, the nil id).
#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeletableTopic {
    name: Option<String>,
    topic_id: Option<String>,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeleteTopicsRequest {
    topics: Vec<DeletableTopic>,
    timeout_ms: i32,
}

impl From<&WireDeleteRequest> for DeleteTopicsRequest {
    /// v0–5 list names (`topic_names`), v6 name-or-id pairs (`topics`); the codec fills only
    /// the list of the request's version, so both are read.
    fn from(request: &WireDeleteRequest) -> Self {
        let by_name = request.topic_names.iter().map(|n| DeletableTopic {
            name: Some(read(n)),
            topic_id: None,
        });
        let by_either = request.topics.iter().map(|t| DeletableTopic {
            name: t.name.as_deref().map(read),
            topic_id: (!t.topic_id.is_nil()).then(|| t.topic_id.to_string()),
        });
        DeleteTopicsRequest {
            topics: by_name.chain(by_either).collect(),
            timeout_ms: request.timeout_ms,
        }
    }
}

/// A topic id as Python gives it (`TopicInfo.topic_id`, or None for no topic): the nil id
/// for None; a malformed one is refused like a missing attribute.
fn topic_id(id: &Bound<'_, PyAny>) -> PyResult<Uuid> {
    match id.extract::<Option<String>>()? {
        None => Ok(Uuid::nil()),
        Some(text) => Uuid::parse_str(&text)
            .map_err(|e| PyValueError::new_err(format!("topic_id {text:?}: {e}"))),
    }
}

/// A topic id as Python gives it back: None for the nil id (a topic that was not created, or an
/// id no topic has).
fn topic_id_text(id: Uuid) -> Option<String> {
    (!id.is_nil()).then(|| id.to_string())
}

// The answers Python constructs (`kafscale._core`, re-exported by `kafscale.admin.protocol`).

#[pyclass(frozen, eq, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreatableTopicResult {
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    error_code: i16,
    #[pyo3(get)]
    error_message: Option<String>,
    topic_id: Uuid,
    #[pyo3(get)]
    num_partitions: i32,
    #[pyo3(get)]
    replication_factor: i16,
    #[pyo3(get)]
    configs: Vec<DescribedConfig>,
}

#[pymethods]
impl CreatableTopicResult {
    #[new]
    #[pyo3(signature = (name, error_code, error_message = None, topic_id = Uuid::nil(), num_partitions = -1, replication_factor = -1, configs = Vec::new()))]
    fn new(
        name: String,
        error_code: i16,
        error_message: Option<String>,
        #[pyo3(from_py_with = topic_id)] topic_id: Uuid,
        num_partitions: i32,
        replication_factor: i16,
        configs: Vec<DescribedConfig>,
    ) -> Self {
        CreatableTopicResult {
            name,
            error_code,
            error_message,
            topic_id,
            num_partitions,
            replication_factor,
            configs,
        }
    }

    #[getter]
    fn topic_id(&self) -> Option<String> {
        topic_id_text(self.topic_id)
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTopicsResponse {
    topics: Vec<CreatableTopicResult>,
    throttle_time_ms: i32,
}

#[pymethods]
impl CreateTopicsResponse {
    #[new]
    #[pyo3(signature = (topics, throttle_time_ms = 0))]
    fn new(topics: Vec<CreatableTopicResult>, throttle_time_ms: i32) -> Self {
        CreateTopicsResponse {
            topics,
            throttle_time_ms,
        }
    }
}

impl From<CreateTopicsResponse> for WireCreate {
    fn from(r: CreateTopicsResponse) -> Self {
        let topics = r.topics.into_iter().map(|t| {
            let configs = t.configs.into_iter().map(|c| {
                WireCreatedConfig::default()
                    .with_name(wire(c.name))
                    .with_value(wire_opt(c.value))
                    .with_read_only(c.read_only)
                    .with_config_source(c.config_source)
                    .with_is_sensitive(c.is_sensitive)
            });
            WireCreateResult::default()
                .with_name(topic_name(&t.name))
                .with_topic_id(t.topic_id)
                .with_error_code(t.error_code)
                .with_error_message(wire_opt(t.error_message))
                .with_num_partitions(t.num_partitions)
                .with_replication_factor(t.replication_factor)
                .with_configs(Some(configs.collect()))
        });
        WireCreate::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_topics(topics.collect())
    }
}

#[pyclass(frozen, eq, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeletableTopicResult {
    /// None only for an id no topic has (v6): requests before v6 name every topic.
    #[pyo3(get)]
    name: Option<String>,
    topic_id: Uuid,
    #[pyo3(get)]
    error_code: i16,
    #[pyo3(get)]
    error_message: Option<String>,
}

#[pymethods]
impl DeletableTopicResult {
    #[new]
    #[pyo3(signature = (name, error_code, error_message = None, topic_id = Uuid::nil()))]
    fn new(
        name: Option<String>,
        error_code: i16,
        error_message: Option<String>,
        #[pyo3(from_py_with = topic_id)] topic_id: Uuid,
    ) -> Self {
        DeletableTopicResult {
            name,
            error_code,
            error_message,
            topic_id,
        }
    }

    #[getter]
    fn topic_id(&self) -> Option<String> {
        topic_id_text(self.topic_id)
    }
}

#[pyclass(frozen, eq, get_all, module = "kafscale._core")]
#[derive(Debug, Clone, PartialEq)]
pub struct DeleteTopicsResponse {
    responses: Vec<DeletableTopicResult>,
    throttle_time_ms: i32,
}

#[pymethods]
impl DeleteTopicsResponse {
    #[new]
    #[pyo3(signature = (responses, throttle_time_ms = 0))]
    fn new(responses: Vec<DeletableTopicResult>, throttle_time_ms: i32) -> Self {
        DeleteTopicsResponse {
            responses,
            throttle_time_ms,
        }
    }
}

impl From<DeleteTopicsResponse> for WireDelete {
    fn from(r: DeleteTopicsResponse) -> Self {
        let responses = r.responses.into_iter().map(|t| {
            WireDeleteResult::default()
                .with_name(t.name.as_deref().map(topic_name))
                .with_topic_id(t.topic_id)
                .with_error_code(t.error_code)
                .with_error_message(wire_opt(t.error_message))
        });
        WireDelete::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_responses(responses.collect())
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopic as WireTopic, CreatableTopicConfig,
    };
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{ApiKey, BrokerId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::control::body::ControlBody;
    use crate::control::testing::{advertised, decoded, on_the_wire};

    const ID: &str = "5f1c0e2a-8a43-4d39-9b1e-0a6f3c2d7e11";

    #[test]
    fn create_topics_crosses_at_every_version_with_the_fields_each_carries() {
        assert_eq!(advertised(ApiKey::CreateTopics), 0..=7);
        for v in advertised(ApiKey::CreateTopics) {
            let topic = WireTopic::default()
                .with_name(topic_name("orders"))
                .with_num_partitions(-1)
                .with_replication_factor(-1)
                .with_assignments(vec![CreatableReplicaAssignment::default()
                    .with_partition_index(0)
                    .with_broker_ids(vec![BrokerId(2)])])
                .with_configs(vec![CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("cleanup.policy"))
                    .with_value(Some(StrBytes::from_static_str("delete")))]);
            let request = WireCreateRequest::default()
                .with_topics(vec![topic])
                .with_timeout_ms(5000)
                .with_validate_only(v >= 1);
            let ControlBody::CreateTopics(body) = decoded(ApiKey::CreateTopics, v, &request) else {
                panic!("v{v} decoded as another API");
            };
            let expected = CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: "orders".into(),
                    num_partitions: -1,
                    replication_factor: -1,
                    assignments: vec![(0, vec![2])],
                    configs: HashMap::from([("cleanup.policy".into(), Some("delete".into()))]),
                }],
                timeout_ms: 5000,
                validate_only: v >= 1,
            };
            assert_eq!(CreateTopicsRequest::from(&body), expected, "v{v}");

            let created = CreatableTopicResult {
                name: "orders".into(),
                error_code: 0,
                error_message: None,
                topic_id: Uuid::parse_str(ID).unwrap(),
                num_partitions: 3,
                replication_factor: 1,
                configs: vec![DescribedConfig {
                    name: "cleanup.policy".into(),
                    value: Some("delete".into()),
                    read_only: false,
                    config_source: 1, // DYNAMIC_TOPIC_CONFIG
                    is_sensitive: false,
                    synonyms: Vec::new(),
                    config_type: 0,
                    documentation: None,
                }],
            };
            let answer = CreateTopicsResponse {
                topics: vec![created],
                throttle_time_ms: 0,
            };
            let read = on_the_wire(&WireCreate::from(answer), v);
            let t = &read.topics[0];
            assert_eq!((t.name.0.as_str(), t.error_code), ("orders", 0), "v{v}");
            if v >= 5 {
                assert_eq!((t.num_partitions, t.replication_factor), (3, 1), "v{v}");
                let configs = t.configs.as_ref().unwrap();
                let c = &configs[0];
                assert_eq!(configs.len(), 1, "v{v}");
                assert_eq!(c.name.as_str(), "cleanup.policy");
                assert_eq!(c.value.as_deref(), Some("delete"));
                assert_eq!(
                    (c.read_only, c.config_source, c.is_sensitive),
                    (false, 1, false)
                );
            } else {
                assert_eq!((t.num_partitions, t.replication_factor), (-1, -1), "v{v}");
            }
            let id = if v >= 7 {
                ID
            } else {
                "00000000-0000-0000-0000-000000000000"
            };
            assert_eq!(t.topic_id.to_string(), id, "v{v}");
        }
    }

    #[test]
    fn delete_topics_crosses_by_name_at_every_version_and_by_id_at_v6() {
        assert_eq!(advertised(ApiKey::DeleteTopics), 0..=6);
        let id = Uuid::parse_str(ID).unwrap();
        for v in advertised(ApiKey::DeleteTopics) {
            let request = if v >= 6 {
                WireDeleteRequest::default().with_topics(vec![
                    DeleteTopicState::default().with_name(Some(topic_name("orders"))),
                    DeleteTopicState::default().with_topic_id(id),
                ])
            } else {
                WireDeleteRequest::default().with_topic_names(vec![topic_name("orders")])
            }
            .with_timeout_ms(3000);
            let ControlBody::DeleteTopics(body) = decoded(ApiKey::DeleteTopics, v, &request) else {
                panic!("v{v} decoded as another API");
            };
            let by_name = DeletableTopic {
                name: Some("orders".into()),
                topic_id: None,
            };
            let by_id = DeletableTopic {
                name: None,
                topic_id: Some(ID.into()),
            };
            let topics = if v >= 6 {
                vec![by_name, by_id]
            } else {
                vec![by_name]
            };
            let expected = DeleteTopicsRequest {
                topics,
                timeout_ms: 3000,
            };
            assert_eq!(DeleteTopicsRequest::from(&body), expected, "v{v}");

            let deleted = DeletableTopicResult {
                name: Some("orders".into()),
                topic_id: id,
                error_code: 0,
                error_message: None,
            };
            let unknown = DeletableTopicResult {
                name: None,
                topic_id: id,
                error_code: 100, // UNKNOWN_TOPIC_ID
                error_message: Some("no topic has this id".into()),
            };
            let responses = if v >= 6 {
                vec![deleted, unknown]
            } else {
                vec![deleted]
            };
            let answer = DeleteTopicsResponse {
                responses,
                throttle_time_ms: 0,
            };
            let read = on_the_wire(&WireDelete::from(answer), v);
            let first = &read.responses[0];
            assert_eq!(first.name, Some(topic_name("orders")), "v{v}");
            assert_eq!(first.topic_id.is_nil(), v < 6, "v{v}");
            if v >= 6 {
                let second = &read.responses[1];
                assert_eq!((second.name.is_none(), second.error_code), (true, 100));
                assert_eq!(second.topic_id, id);
                let message = second.error_message.as_ref().map(|m| m.as_str());
                assert_eq!(message, Some("no topic has this id"));
            }
        }
    }
}
