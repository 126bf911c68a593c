//! The PyO3 surface, `kafscale._core`: a thin typed layer over the Rust core.

mod broker;
mod control;
mod errors;
mod group_store;
mod location;
mod logging;
mod runtime;
mod segments;
mod topic_configs;
mod transactions;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<broker::Broker>()?;
    m.add_class::<broker::TopicInfo>()?;
    m.add_class::<control::ControlRequest>()?;
    control::register(m)?;
    m.add_class::<group_store::GroupStore>()?;
    m.add_class::<group_store::StoredEntry>()?;
    m.add_class::<location::PyLocation>()?;
    m.add_class::<segments::SegmentSource>()?;
    m.add_class::<segments::RecordBatchStream>()?;
    m.add_class::<segments::ArrowBatch>()?;
    m.add_function(wrap_pyfunction!(segments::committed_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(segments::empty_kafka_batch, m)?)?;
    m.add_class::<topic_configs::TopicConfig>()?;
    m.add_class::<transactions::TransactionView>()?;
    m.add_function(wrap_pyfunction!(topic_configs::topic_configs, m)?)?;
    errors::register(m)?;
    m.add_function(wrap_pyfunction!(logging::init_logging, m)?)?;
    Ok(())
}
