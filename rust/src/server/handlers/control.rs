//! Control-plane APIs (topic admin, consumer groups, configs and partitions): decoded here, decided in Python through
//! the control bridge, which hands back the response already encoded at the request's version.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::broker::control::{ControlBody, ControlCall};
use crate::broker::Broker;
use crate::protocol::header::Request;

pub async fn handle(
    broker: &Arc<Broker>,
    request: Request,
    peer: SocketAddr,
) -> Result<Bytes, String> {
    let body = decode(&request)?;
    broker
        .control
        .call(|reply| ControlCall {
            api_key: request.api_key as i16,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
            client_id: request.client_id.clone(),
            // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d; report a.b.c.d.
            client_host: peer.ip().to_canonical().to_string(),
            body,
            reply,
        })
        .await
        .ok_or("the control plane did not answer")?
}

/// The request body as the control plane receives it.
pub fn decode(request: &Request) -> Result<ControlBody, String> {
    Ok(match request.api_key {
        ApiKey::CreateTopics => ControlBody::CreateTopics(request.body()?),
        ApiKey::DeleteTopics => ControlBody::DeleteTopics(request.body()?),
        ApiKey::JoinGroup => ControlBody::JoinGroup(request.body()?),
        ApiKey::SyncGroup => ControlBody::SyncGroup(request.body()?),
        ApiKey::Heartbeat => ControlBody::Heartbeat(request.body()?),
        ApiKey::LeaveGroup => ControlBody::LeaveGroup(request.body()?),
        ApiKey::OffsetCommit => ControlBody::OffsetCommit(request.body()?),
        ApiKey::OffsetFetch => ControlBody::OffsetFetch(request.body()?),
        ApiKey::DescribeGroups => ControlBody::DescribeGroups(request.body()?),
        ApiKey::ListGroups => ControlBody::ListGroups(request.body()?),
        ApiKey::DeleteGroups => ControlBody::DeleteGroups(request.body()?),
        ApiKey::DescribeConfigs => ControlBody::DescribeConfigs(request.body()?),
        ApiKey::AlterConfigs => ControlBody::AlterConfigs(request.body()?),
        ApiKey::IncrementalAlterConfigs => ControlBody::IncrementalAlterConfigs(request.body()?),
        ApiKey::CreatePartitions => ControlBody::CreatePartitions(request.body()?),
        other => return Err(format!("{other:?} is not a control-plane API")),
    })
}
