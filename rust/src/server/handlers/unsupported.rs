//! Requests for APIs (or versions) this broker does not serve. Where the response schema has a
//! top-level error code the client gets UNSUPPORTED_VERSION; otherwise the connection closes,
//! as Kafka does for requests it cannot parse.

use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, HeaderVersion, Message};
use kafka_protocol::ResponseError;

use crate::protocol::header::{encode_response, Request};
use crate::server::dispatch::Reply;

fn with_error<T>(request: &Request, mut response: T, set: impl FnOnce(&mut T, i16)) -> Reply
where
    T: Encodable + HeaderVersion + Message,
{
    set(&mut response, ResponseError::UnsupportedVersion.code());
    let version = request.api_version.clamp(T::VERSIONS.min, T::VERSIONS.max);
    encode_response(request.correlation_id, version, &response).into()
}

pub fn handle(request: &Request) -> Reply {
    tracing::debug!(api = ?request.api_key, version = request.api_version, "unsupported request");
    let r = request;
    match request.api_key {
        ApiKey::FindCoordinator => with_error(r, FindCoordinatorResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::JoinGroup => with_error(r, JoinGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::SyncGroup => with_error(r, SyncGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::Heartbeat => with_error(r, HeartbeatResponse::default(), |m, c| m.error_code = c),
        ApiKey::LeaveGroup => with_error(r, LeaveGroupResponse::default(), |m, c| m.error_code = c),
        ApiKey::ListGroups => with_error(r, ListGroupsResponse::default(), |m, c| m.error_code = c),
        ApiKey::InitProducerId => with_error(r, InitProducerIdResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::SaslHandshake => {
            with_error(r, SaslHandshakeResponse::default(), |m, c| m.error_code = c)
        }
        ApiKey::SaslAuthenticate => with_error(r, SaslAuthenticateResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::DescribeCluster => with_error(r, DescribeClusterResponse::default(), |m, c| {
            m.error_code = c
        }),
        ApiKey::EndTxn => with_error(r, EndTxnResponse::default(), |m, c| m.error_code = c),
        ApiKey::DescribeAcls => {
            with_error(r, DescribeAclsResponse::default(), |m, c| m.error_code = c)
        }
        ApiKey::DescribeClientQuotas => {
            with_error(r, DescribeClientQuotasResponse::default(), |m, c| {
                m.error_code = c
            })
        }
        other => Reply::Close(format!(
            "{other:?} v{} is not supported",
            request.api_version
        )),
    }
}
