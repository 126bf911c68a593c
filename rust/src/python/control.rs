//! One control-plane request as Python sees it: its header, its body as a typed object, and
//! `respond()`, which reads Python's answer and encodes the response frame at the request's
//! version and correlation id.

use std::sync::Mutex;

use kafka_protocol::messages::{
    ApiKey, CreateTopicsResponse as WireCreateTopics, DeleteTopicsResponse as WireDeleteTopics,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::PyClass;
use tokio::sync::oneshot;

use super::groups::{answers, requests};
use super::ops::{configs, groups, partitions};
use super::topics;
use crate::broker::control::{ControlBody, ControlCall, ControlReply};
use crate::protocol::header::encode_response;

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
    #[pyo3(get)]
    client_host: String,
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
            client_host: call.client_host,
            body: call.body,
            reply: Mutex::new(Some(call.reply)),
        }
    }
}

fn object<T: PyClass + Into<PyClassInitializer<T>>>(
    py: Python<'_>,
    value: T,
) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, value)?.into_any())
}

/// Python's answer as `T`, or a TypeError that says which attribute is missing or mistyped
/// (pyo3 reports the path one level per exception cause; this puts it in one message).
fn answer<'a, 'py, T: FromPyObject<'a, 'py>>(
    response: &'a Bound<'py, PyAny>,
    expected: &str,
) -> PyResult<T> {
    response.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        let py = response.py();
        let mut reasons = vec![e.value(py).to_string()];
        let mut cause = e.cause(py);
        while let Some(inner) = cause {
            reasons.push(inner.value(py).to_string());
            cause = inner.cause(py);
        }
        PyTypeError::new_err(format!("{expected} expected: {}", reasons.join(": ")))
    })
}

impl ControlRequest {
    /// The response frame for Python's answer: Err(TypeError) if the answer does not fit the
    /// request, Ok(Err) if it fits but cannot be encoded (the connection is then closed).
    fn encode(&self, response: &Bound<'_, PyAny>) -> PyResult<ControlReply> {
        let v = self.api_version;
        Ok(match &self.body {
            ControlBody::CreateTopics(_) => {
                let r: topics::CreateTopicsResponse = answer(response, "CreateTopicsResponse")?;
                self.frame(&WireCreateTopics::from(r))
            }
            ControlBody::DeleteTopics(_) => {
                let r: topics::DeleteTopicsResponse = answer(response, "DeleteTopicsResponse")?;
                self.frame(&WireDeleteTopics::from(r))
            }
            ControlBody::JoinGroup(_) => self.frame(&answers::join_group(
                answer(response, "JoinGroupResponse")?,
                v,
            )),
            ControlBody::SyncGroup(_) => {
                self.frame(&answers::sync_group(answer(response, "SyncGroupResponse")?))
            }
            ControlBody::Heartbeat(_) => {
                self.frame(&answers::heartbeat(answer(response, "HeartbeatResponse")?))
            }
            ControlBody::LeaveGroup(_) => self.frame(&answers::leave_group(
                answer(response, "LeaveGroupResponse")?,
                v,
            )),
            ControlBody::OffsetCommit(_) => self.frame(&answers::offset_commit(answer(
                response,
                "OffsetCommitResponse",
            )?)),
            ControlBody::OffsetFetch(request) => {
                let a = answer(response, "OffsetFetchResponse")?;
                self.frame(&answers::offset_fetch(a, request, v))
            }
            ControlBody::DescribeGroups(_) => self.frame(&groups::describe_groups(
                answer(response, "DescribeGroupsResponse")?,
                v,
            )),
            ControlBody::ListGroups(_) => self.frame(&groups::list_groups(
                answer(response, "ListGroupsResponse")?,
                v,
            )),
            ControlBody::DeleteGroups(_) => self.frame(&groups::delete_groups(answer(
                response,
                "DeleteGroupsResponse",
            )?)),
            ControlBody::DescribeConfigs(_) => self.frame(&configs::describe_configs(
                answer(response, "DescribeConfigsResponse")?,
                v,
            )),
            ControlBody::AlterConfigs(_) => self.frame(&configs::alter_configs(answer(
                response,
                "AlterConfigsResponse",
            )?)),
            // IncrementalAlterConfigs is answered with the same answer type as AlterConfigs.
            ControlBody::IncrementalAlterConfigs(_) => self.frame(
                &configs::incremental_alter_configs(answer(response, "AlterConfigsResponse")?),
            ),
            ControlBody::CreatePartitions(_) => self.frame(&partitions::create_partitions(answer(
                response,
                "CreatePartitionsResponse",
            )?)),
        })
    }

    fn frame<T: Encodable + HeaderVersion>(&self, response: &T) -> ControlReply {
        encode_response(self.correlation_id, self.api_version, response).map_err(|e| {
            let api = ApiKey::try_from(self.api_key).map_err(|()| self.api_key);
            let reason = format!(
                "the {api:?} v{} answer cannot be encoded: {e}",
                self.api_version
            );
            tracing::warn!("{reason}; closing the client's connection");
            reason
        })
    }
}

#[pymethods]
impl ControlRequest {
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let v = self.api_version;
        match &self.body {
            ControlBody::CreateTopics(r) => object(py, topics::CreateTopicsRequest::from(r)),
            ControlBody::DeleteTopics(r) => object(py, topics::DeleteTopicsRequest::from(r)),
            ControlBody::JoinGroup(r) => object(py, requests::JoinGroupRequest::new(r, v)),
            ControlBody::SyncGroup(r) => object(py, requests::SyncGroupRequest::new(r)),
            ControlBody::Heartbeat(r) => object(py, requests::HeartbeatRequest::new(r)),
            ControlBody::LeaveGroup(r) => object(py, requests::LeaveGroupRequest::new(r, v)),
            ControlBody::OffsetCommit(r) => object(py, requests::OffsetCommitRequest::new(r)),
            ControlBody::OffsetFetch(r) => object(py, requests::OffsetFetchRequest::new(r, v)),
            ControlBody::DescribeGroups(r) => object(py, groups::DescribeGroupsRequest::new(r)),
            ControlBody::ListGroups(r) => object(py, groups::ListGroupsRequest::new(r)),
            ControlBody::DeleteGroups(r) => object(py, groups::DeleteGroupsRequest::new(r)),
            ControlBody::DescribeConfigs(r) => object(py, configs::DescribeConfigsRequest::new(r)),
            ControlBody::AlterConfigs(r) => object(py, configs::AlterConfigsRequest::new(r)),
            ControlBody::IncrementalAlterConfigs(r) => {
                object(py, configs::AlterConfigsRequest::incremental(r))
            }
            ControlBody::CreatePartitions(r) => {
                object(py, partitions::CreatePartitionsRequest::new(r))
            }
        }
    }

    /// Encodes the answer and sends it; a second call is an error. An answer of the wrong
    /// shape raises TypeError and leaves the request unanswered (respond again, or drop it
    /// to close the connection).
    fn respond(&self, response: &Bound<'_, PyAny>) -> PyResult<()> {
        // Not held while reading the answer: that runs Python code.
        let sender = self
            .reply
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this request was already answered"))?;
        match self.encode(response) {
            Ok(frame) => {
                // The client may have disconnected meanwhile; nothing to do then.
                let _ = sender.send(frame);
                Ok(())
            }
            Err(e) => {
                *self.reply.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
                Err(e)
            }
        }
    }
}
