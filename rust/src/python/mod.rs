//! The PyO3 surface, `kafscale._core`: a thin typed layer over the Rust core.

mod broker;
mod control;
mod groups;
mod logging;
mod ops;
mod runtime;
mod segments;
mod store;
#[cfg(test)]
mod testing;
mod text;
mod topics;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use groups::requests;
use ops::{configs, groups as group_ops, partitions};

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
    m.add_class::<topics::CreatableTopic>()?;
    m.add_class::<topics::CreateTopicsRequest>()?;
    m.add_class::<topics::CreatableTopicResult>()?;
    m.add_class::<topics::CreateTopicsResponse>()?;
    m.add_class::<topics::DeleteTopicsRequest>()?;
    m.add_class::<topics::DeletableTopicResult>()?;
    m.add_class::<topics::DeleteTopicsResponse>()?;
    m.add_class::<requests::JoinGroupProtocol>()?;
    m.add_class::<requests::JoinGroupRequest>()?;
    m.add_class::<requests::SyncGroupAssignment>()?;
    m.add_class::<requests::SyncGroupRequest>()?;
    m.add_class::<requests::HeartbeatRequest>()?;
    m.add_class::<requests::LeavingMember>()?;
    m.add_class::<requests::LeaveGroupRequest>()?;
    m.add_class::<requests::OffsetCommitPartition>()?;
    m.add_class::<requests::OffsetCommitTopic>()?;
    m.add_class::<requests::OffsetCommitRequest>()?;
    m.add_class::<requests::OffsetFetchTopic>()?;
    m.add_class::<requests::OffsetFetchRequest>()?;
    m.add_class::<group_ops::DescribeGroupsRequest>()?;
    m.add_class::<group_ops::ListGroupsRequest>()?;
    m.add_class::<group_ops::DeleteGroupsRequest>()?;
    m.add_class::<configs::DescribeConfigsResource>()?;
    m.add_class::<configs::DescribeConfigsRequest>()?;
    m.add_class::<configs::AlterableConfig>()?;
    m.add_class::<configs::AlterConfigsResource>()?;
    m.add_class::<configs::AlterConfigsRequest>()?;
    m.add_class::<partitions::CreatePartitionsTopic>()?;
    m.add_class::<partitions::CreatePartitionsRequest>()?;
    m.add_class::<store::GroupStore>()?;
    m.add_class::<store::StoredEntry>()?;
    m.add_class::<segments::SegmentSource>()?;
    m.add_class::<segments::RecordBatchStream>()?;
    m.add_class::<segments::ArrowBatch>()?;
    m.add("SegmentError", m.py().get_type::<segments::SegmentError>())?;
    m.add_function(wrap_pyfunction!(segments::committed_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(segments::empty_kafka_batch, m)?)?;
    m.add("KafkaApiError", m.py().get_type::<KafkaApiError>())?;
    m.add(
        "MetadataStoreError",
        m.py().get_type::<store::MetadataStoreError>(),
    )?;
    add_error_properties(m)?;
    m.add_function(wrap_pyfunction!(logging::init_logging, m)?)?;
    Ok(())
}
