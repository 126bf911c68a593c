//! The PyO3 surface, `kafscale._core`: a thin typed layer over the Rust core.

mod broker;
mod control;
mod logging;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

pyo3::create_exception!(
    _core,
    KafkaApiError,
    PyException,
    "A failure that maps onto a Kafka error code: args are (code, message)."
);

/// `code` and `message` read from the exception's args, so Python handlers can map the error
/// straight into a response.
fn add_error_properties(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let class = m.py().get_type::<KafkaApiError>();
    class.setattr(
        "code",
        m.py().eval(c"property(lambda e: e.args[0])", None, None)?,
    )?;
    class.setattr(
        "message",
        m.py().eval(c"property(lambda e: e.args[1])", None, None)?,
    )?;
    Ok(())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<broker::Broker>()?;
    m.add_class::<broker::TopicInfo>()?;
    m.add_class::<control::ControlRequest>()?;
    m.add_class::<control::CreatableTopic>()?;
    m.add_class::<control::CreateTopicsRequest>()?;
    m.add_class::<control::CreatableTopicResult>()?;
    m.add_class::<control::CreateTopicsResponse>()?;
    m.add_class::<control::DeleteTopicsRequest>()?;
    m.add_class::<control::DeletableTopicResult>()?;
    m.add_class::<control::DeleteTopicsResponse>()?;
    m.add("KafkaApiError", m.py().get_type::<KafkaApiError>())?;
    add_error_properties(m)?;
    m.add_function(wrap_pyfunction!(logging::init_logging, m)?)?;
    Ok(())
}
