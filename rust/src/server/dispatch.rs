//! Routes a request to its API handler. Produce appends before this returns (so a client's
//! pipelined produce requests keep their order); everything else runs in its own task.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use tokio::task::JoinHandle;

use super::handlers;
use crate::broker::Broker;
use crate::protocol::header::Request;
use crate::protocol::versions::is_supported;

/// What goes back on the wire for one request.
pub enum Reply {
    Response(Bytes),
    /// acks=0 produce: no response at all.
    None,
    /// Undecodable or unanswerable: close the connection.
    Close(String),
}

impl From<Result<Bytes, String>> for Reply {
    fn from(result: Result<Bytes, String>) -> Self {
        match result {
            Ok(bytes) => Reply::Response(bytes),
            Err(reason) => Reply::Close(reason),
        }
    }
}

/// `peer` is the client's address, which the control plane reports for group members.
pub fn dispatch(broker: &Arc<Broker>, request: Request, peer: SocketAddr) -> JoinHandle<Reply> {
    let broker = broker.clone();
    if request.api_key == ApiKey::ApiVersions {
        // Answered at every version, even unsupported ones (KIP-511).
        return tokio::spawn(async move { handlers::api_versions::handle(&request).into() });
    }
    if !is_supported(request.api_key, request.api_version) {
        return tokio::spawn(async move { handlers::unsupported::handle(&request) });
    }
    match request.api_key {
        ApiKey::Produce => handlers::produce::start(&broker, request),
        ApiKey::Fetch => {
            tokio::spawn(async move { handlers::fetch::handle(&broker, request).await.into() })
        }
        ApiKey::ListOffsets => tokio::spawn(async move {
            handlers::list_offsets::handle(&broker, request)
                .await
                .into()
        }),
        ApiKey::FindCoordinator => {
            tokio::spawn(
                async move { handlers::find_coordinator::handle(&broker, &request).into() },
            )
        }
        ApiKey::Metadata => {
            tokio::spawn(async move { handlers::metadata::handle(&broker, request).await.into() })
        }
        ApiKey::OffsetForLeaderEpoch => tokio::spawn(async move {
            handlers::offset_for_leader_epoch::handle(&broker, &request).into()
        }),
        ApiKey::CreateTopics
        | ApiKey::DeleteTopics
        | ApiKey::JoinGroup
        | ApiKey::SyncGroup
        | ApiKey::Heartbeat
        | ApiKey::LeaveGroup
        | ApiKey::OffsetCommit
        | ApiKey::OffsetFetch
        | ApiKey::DescribeGroups
        | ApiKey::ListGroups
        | ApiKey::DeleteGroups
        | ApiKey::DescribeConfigs
        | ApiKey::AlterConfigs
        | ApiKey::IncrementalAlterConfigs
        | ApiKey::CreatePartitions => tokio::spawn(async move {
            handlers::control::handle(&broker, request, peer)
                .await
                .into()
        }),
        _ => tokio::spawn(async move { handlers::unsupported::handle(&request) }),
    }
}
