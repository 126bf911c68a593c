//! Every error that crosses into Python: the extension's exception classes and how each Rust
//! error maps onto one. Nothing else in the binding layer builds a Python exception from a
//! Rust error.

use pyo3::exceptions::{PyException, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::analytics::error::ReadError;
use crate::error::ApiError;
use crate::meta::kv::MetaError;
use crate::running::StartError;
use crate::store::LocationError;

pyo3::create_exception!(
    _core,
    KafkaApiError,
    PyException,
    "A failure that maps onto a Kafka error code: args are (code, message)."
);

pyo3::create_exception!(
    _core,
    MetadataStoreError,
    PyException,
    "The metadata store could not be reached or answered with an error."
);

pyo3::create_exception!(
    _core,
    SegmentError,
    PyException,
    "A segment object is corrupt or truncated: no row of it is returned."
);

/// A Kafka error code and message, which the Python handlers put straight into their answers.
pub(super) fn api_error(e: ApiError) -> PyErr {
    KafkaApiError::new_err((e.code.code(), e.message))
}

pub(super) fn store_error(e: MetaError) -> PyErr {
    MetadataStoreError::new_err(e.to_string())
}

/// A storage URL that does not parse: the message says what one looks like.
pub(super) fn location_error(e: LocationError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

pub(super) fn start_error(e: StartError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// A segment that cannot be read: corrupt (SegmentError) or unreachable (OSError).
pub(super) fn read_error(location: &str, e: ReadError) -> PyErr {
    match e {
        ReadError::Corrupt { .. } => SegmentError::new_err(format!("{location}: {e}")),
        ReadError::Storage(_) | ReadError::Metadata(_) | ReadError::Moved { .. } => {
            PyOSError::new_err(format!("{location}: {e}"))
        }
    }
}

/// Adds the exception classes to the module; `KafkaApiError` gets `code` and `message`
/// properties read from its args.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KafkaApiError", py.get_type::<KafkaApiError>())?;
    m.add("MetadataStoreError", py.get_type::<MetadataStoreError>())?;
    m.add("SegmentError", py.get_type::<SegmentError>())?;
    let class = py.get_type::<KafkaApiError>();
    class.setattr(
        "code",
        py.eval(c"property(lambda e: e.args[0])", None, None)?,
    )?;
    class.setattr(
        "message",
        py.eval(c"property(lambda e: e.args[1])", None, None)?,
    )?;
    Ok(())
}
