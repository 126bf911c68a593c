//! Python awaitables whose work runs on the broker's own Tokio runtime, where its stores'
//! connections live (pyo3-async-runtimes' runtime only waits for the result).

use std::future::Future;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// Runs `work` on `runtime` and hands Python an awaitable of its result.
pub(super) fn on_runtime<'py, T, F>(
    runtime: &Runtime,
    py: Python<'py>,
    work: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let task = runtime.spawn(work);
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        task.await
            .map_err(|e| PyRuntimeError::new_err(format!("broker task failed: {e}")))?
    })
}
