//! One control-plane request as Python sees it: its header, its body as a typed object, and
//! `respond()`, which reads Python's answer and encodes the response frame at the request's
//! version and correlation id.

use std::sync::Mutex;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Encodable, HeaderVersion};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use tokio::sync::oneshot;

use crate::control::body::ControlBody;
use crate::control::bridge::{ControlCall, ControlReply};
use crate::control::control_apis;
use crate::control::screen::Screened;
use crate::protocol::header::encode_response;
use crate::protocol::newer::frame_version;
use crate::server::log_limit::LogLimit;

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
    #[pyo3(get)]
    connection_id: u64,
    body: ControlBody,
    screened: Screened,
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
            connection_id: call.connection_id,
            body: call.body,
            screened: call.screened,
            reply: Mutex::new(Some(call.reply)),
        }
    }
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

/// The bridge's per-API code, from the rows of `control_apis!`: the object Python receives for
/// each request, the answer it must give and how that is encoded, and the classes to register.
macro_rules! bridge {
    ($($key:ident {
        versions: $min:literal..=$max:literal,
        request: $request:ident,
        python: |$wire:pat_param, $version:pat_param| $python:expr,
        answer: |$answer:ident: $answer_type:ty, $answer_wire:pat_param, $answer_version:pat_param| $encode:expr,
        classes: [$($class:ty),* $(,)?] $(,)?
    })*) => {
        /// Registers the request and answer classes of every control API (the answer's own
        /// type, and the row's `classes`: what the request and the answer hold), and
        /// `CONTROL_API_KEYS`: the keys Python must answer (its router checks that it covers
        /// them all at start-up).
        pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_class::<$answer_type>()?; $(m.add_class::<$class>()?;)*)*
            m.add(
                "CONTROL_API_KEYS",
                vec![$(kafka_protocol::messages::ApiKey::$key as i16),*],
            )?;
            Ok(())
        }

        impl ControlRequest {
            fn python_body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                match &self.body {
                    $(ControlBody::$key(wire) => {
                        let $wire = wire;
                        let $version = self.api_version;
                        Ok(Py::new(py, $python)?.into_any())
                    })*
                }
            }

            /// The response frame for Python's answer: Err(TypeError) if the answer does not
            /// fit the request, Ok(Err) if it fits but cannot be encoded (the connection is
            /// then closed).
            fn encode(&self, response: &Bound<'_, PyAny>) -> PyResult<ControlReply> {
                Ok(match &self.body {
                    $(ControlBody::$key(wire) => {
                        let $answer: $answer_type = answer(response, type_name(stringify!($answer_type)))?;
                        let $answer_wire = wire;
                        let $answer_version = self.api_version;
                        self.frame(&self.screened.complete($encode))
                    })*
                })
            }
        }
    };
}

control_apis!(bridge);

/// The last segment of a type path as `stringify!` spells it (`a :: b :: Name` is `Name`).
fn type_name(path: &'static str) -> &'static str {
    path.rsplit("::").next().unwrap_or(path).trim()
}

impl ControlRequest {
    fn frame<T: Encodable + HeaderVersion>(&self, response: &T) -> ControlReply {
        let frame = ApiKey::try_from(self.api_key)
            .map_or(self.api_version, |key| frame_version(key, self.api_version));
        encode_response(self.correlation_id, frame, response).inspect_err(|e| {
            // The client chose the version the answer cannot be encoded at.
            static UNENCODABLE: LogLimit = LogLimit::new("unencodable control-plane answers");
            if UNENCODABLE.admit() {
                let api = ApiKey::try_from(self.api_key).map_err(|()| self.api_key);
                let version = self.api_version;
                tracing::warn!(?api, version, %e, "closing the client's connection");
            }
        })
    }
}

#[pymethods]
impl ControlRequest {
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.python_body(py)
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
