//! Routes a request to its API handler. Produce appends before this returns (so a client's
//! pipelined produce requests keep their order); the rest of every request runs in its own task.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
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
/// Each request runs in its own task, timed for the request-latency histogram.
pub fn dispatch(broker: &Arc<Broker>, request: Request, peer: SocketAddr) -> JoinHandle<Reply> {
    let started = Instant::now();
    let api = request.api_key;
    let handler = handler(broker, request, peer);
    let metrics = broker.metrics.clone();
    tokio::spawn(async move {
        let reply = handler.await;
        metrics.observe_request(api, started);
        reply
    })
}

fn handler(broker: &Arc<Broker>, request: Request, peer: SocketAddr) -> BoxFuture<'static, Reply> {
    let broker = broker.clone();
    if request.api_key == ApiKey::ApiVersions {
        // Answered at every version, even unsupported ones (KIP-511).
        return async move { handlers::api_versions::handle(&request).into() }.boxed();
    }
    if !is_supported(request.api_key, request.api_version) {
        return async move { handlers::unsupported::handle(&request) }.boxed();
    }
    match request.api_key {
        // Appends happen now, in the connection's request order; only the wait is deferred.
        ApiKey::Produce => handlers::produce::start(&broker, request),
        ApiKey::Fetch => {
            async move { handlers::fetch::handle(&broker, request).await.into() }.boxed()
        }
        ApiKey::ListOffsets => async move {
            handlers::list_offsets::handle(&broker, request)
                .await
                .into()
        }
        .boxed(),
        ApiKey::FindCoordinator => {
            async move { handlers::find_coordinator::handle(&broker, &request).into() }.boxed()
        }
        ApiKey::Metadata => {
            async move { handlers::metadata::handle(&broker, request).await.into() }.boxed()
        }
        ApiKey::OffsetForLeaderEpoch => {
            async move { handlers::offset_for_leader_epoch::handle(&broker, &request).into() }
                .boxed()
        }
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
        | ApiKey::CreatePartitions => async move {
            handlers::control::handle(&broker, request, peer)
                .await
                .into()
        }
        .boxed(),
        _ => async move { handlers::unsupported::handle(&request) }.boxed(),
    }
}
