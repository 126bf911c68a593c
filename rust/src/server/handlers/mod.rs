//! One module per API; the control-plane APIs, which Python decides, share `control`.

pub mod api_versions;
pub mod control;
pub mod delete_records;
pub mod describe_cluster;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_topic_partitions;
pub mod fetch;
pub mod find_coordinator;
pub mod init_producer_id;
pub mod list_offsets;
pub mod metadata;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod scram_credentials;
pub mod unsupported;

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::log::partition::Partition;
use crate::protocol::header::WireError;

/// What goes back on the wire for one request.
pub enum Reply {
    Response(Bytes),
    /// acks=0 produce: no response at all.
    None,
    /// Undecodable or unanswerable: close the connection.
    Close(WireError),
    /// This response, then close the connection (a failed authentication).
    Final(Bytes),
}

impl From<Result<Bytes, WireError>> for Reply {
    fn from(result: Result<Bytes, WireError>) -> Self {
        match result {
            Ok(bytes) => Reply::Response(bytes),
            Err(reason) => Reply::Close(reason),
        }
    }
}

pub fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// The partition `index` of `topic`, or the error a client gets for it.
pub fn find_partition(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> Result<Arc<Partition>, ResponseError> {
    broker
        .topic(topic)
        .and_then(|t| {
            usize::try_from(index)
                .ok()
                .and_then(|i| t.partitions.get(i).map(|s| s.current()))
        })
        .ok_or(ResponseError::UnknownTopicOrPartition)
}

/// Kafka's leader-epoch check for requests that carry the client's view of it (KIP-320). The
/// epoch is the newer of this broker's log and the cluster view: a broker handing a partition
/// off must fence clients that already know the next owner's epoch.
pub fn check_leader_epoch(
    broker: &Broker,
    partition: &Partition,
    client_epoch: i32,
) -> Result<(), ResponseError> {
    let cluster = broker
        .cluster()
        .leader_epoch(&partition.topic, partition.id);
    let epoch = partition.leader_epoch().max(cluster);
    match client_epoch {
        e if e < 0 || e == epoch => Ok(()),
        e if e < epoch => Err(ResponseError::FencedLeaderEpoch),
        _ => Err(ResponseError::UnknownLeaderEpoch),
    }
}
