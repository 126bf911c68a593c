//! Control-plane requests as typed Python objects, and Python's answers back into the codec's
//! response messages.

use std::collections::HashMap;
use std::sync::Mutex;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult as WireCreateResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult as WireDeleteResult;
use kafka_protocol::messages::{
    CreateTopicsResponse as WireCreate, DeleteTopicsResponse as WireDelete,
};
use kafka_protocol::protocol::StrBytes;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use tokio::sync::oneshot;

use crate::broker::control::{ControlBody, ControlCall, ControlReply};
use crate::server::handlers::topic_name;

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

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct DeleteTopicsRequest {
    topic_names: Vec<String>,
    timeout_ms: i32,
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct CreatableTopicResult {
    name: String,
    error_code: i16,
    error_message: Option<String>,
}

#[pymethods]
impl CreatableTopicResult {
    #[new]
    #[pyo3(signature = (name, error_code=0, error_message=None))]
    fn new(name: String, error_code: i16, error_message: Option<String>) -> Self {
        CreatableTopicResult {
            name,
            error_code,
            error_message,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct CreateTopicsResponse {
    topics: Vec<CreatableTopicResult>,
    throttle_time_ms: i32,
}

#[pymethods]
impl CreateTopicsResponse {
    #[new]
    #[pyo3(signature = (topics, throttle_time_ms=0))]
    fn new(topics: Vec<CreatableTopicResult>, throttle_time_ms: i32) -> Self {
        CreateTopicsResponse {
            topics,
            throttle_time_ms,
        }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct DeletableTopicResult {
    name: String,
    error_code: i16,
}

#[pymethods]
impl DeletableTopicResult {
    #[new]
    #[pyo3(signature = (name, error_code=0))]
    fn new(name: String, error_code: i16) -> Self {
        DeletableTopicResult { name, error_code }
    }
}

#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Clone)]
pub struct DeleteTopicsResponse {
    responses: Vec<DeletableTopicResult>,
    throttle_time_ms: i32,
}

#[pymethods]
impl DeleteTopicsResponse {
    #[new]
    #[pyo3(signature = (responses, throttle_time_ms=0))]
    fn new(responses: Vec<DeletableTopicResult>, throttle_time_ms: i32) -> Self {
        DeleteTopicsResponse {
            responses,
            throttle_time_ms,
        }
    }
}

/// One control-plane request waiting for Python's answer.
#[pyclass(frozen, module = "kafscale._core")]
pub struct ControlRequest {
    #[pyo3(get)]
    api_key: i16,
    #[pyo3(get)]
    api_version: i16,
    #[pyo3(get)]
    correlation_id: i32,
    #[pyo3(get)]
    client_id: Option<String>,
    body: ControlBody,
    reply: Mutex<Option<oneshot::Sender<ControlReply>>>,
}

impl From<ControlCall> for ControlRequest {
    fn from(call: ControlCall) -> Self {
        ControlRequest {
            api_key: call.api_key,
            api_version: call.api_version,
            correlation_id: call.correlation_id,
            client_id: call.client_id,
            body: call.body,
            reply: Mutex::new(Some(call.reply)),
        }
    }
}

fn text(s: &StrBytes) -> String {
    s.as_str().to_string()
}

#[pymethods]
impl ControlRequest {
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match &self.body {
            ControlBody::CreateTopics(request) => CreateTopicsRequest {
                topics: request
                    .topics
                    .iter()
                    .map(|t| CreatableTopic {
                        name: text(&t.name.0),
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
                            .map(|c| (text(&c.name), c.value.as_ref().map(text)))
                            .collect(),
                    })
                    .collect(),
                timeout_ms: request.timeout_ms,
                validate_only: request.validate_only,
            }
            .into_pyobject(py)?
            .into_any()
            .unbind(),
            ControlBody::DeleteTopics(request) => DeleteTopicsRequest {
                topic_names: request.topic_names.iter().map(|n| text(&n.0)).collect(),
                timeout_ms: request.timeout_ms,
            }
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        })
    }

    /// Sends the response; a second call is an error.
    fn respond(&self, response: &Bound<'_, PyAny>) -> PyResult<()> {
        let reply = match &self.body {
            ControlBody::CreateTopics(_) => {
                let r: CreateTopicsResponse = response.extract().map_err(|_| {
                    PyTypeError::new_err("a CreateTopics request needs a CreateTopicsResponse")
                })?;
                ControlReply::CreateTopics(
                    WireCreate::default()
                        .with_throttle_time_ms(r.throttle_time_ms)
                        .with_topics(
                            r.topics
                                .into_iter()
                                .map(|t| {
                                    WireCreateResult::default()
                                        .with_name(topic_name(&t.name))
                                        .with_error_code(t.error_code)
                                        .with_error_message(
                                            t.error_message.map(StrBytes::from_string),
                                        )
                                })
                                .collect(),
                        ),
                )
            }
            ControlBody::DeleteTopics(_) => {
                let r: DeleteTopicsResponse = response.extract().map_err(|_| {
                    PyTypeError::new_err("a DeleteTopics request needs a DeleteTopicsResponse")
                })?;
                ControlReply::DeleteTopics(
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
                        ),
                )
            }
        };
        let sender = self
            .reply
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this request was already answered"))?;
        // The client may have disconnected meanwhile; nothing to do then.
        let _ = sender.send(reply);
        Ok(())
    }
}
