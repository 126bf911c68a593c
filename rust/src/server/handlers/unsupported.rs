//! Requests for APIs (or versions) this broker does not serve get UNSUPPORTED_VERSION: in the
//! response's top-level error code where the schema has one, otherwise on every item the request
//! named (as Kafka's per-request error responses do). Broker-internal APIs, which no client
//! sends, close the connection.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, StrBytes};
use kafka_protocol::ResponseError;

use super::Reply;
use crate::protocol::header::{encode_response, Request, WireError};

fn with_error<T>(request: &Request, mut response: T, set: impl FnOnce(&mut T, i16)) -> Reply
where
    T: Encodable + HeaderVersion + Message,
{
    set(&mut response, ResponseError::UnsupportedVersion.code());
    let version = request.api_version.clamp(T::VERSIONS.min, T::VERSIONS.max);
    encode_response(request.correlation_id, version, &response).into()
}

pub(crate) fn handle(request: &Request) -> Reply {
    tracing::debug!(api = ?request.api_key, version = request.api_version, "unsupported request");
    let r = request;
    match request.api_key {
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
        other => per_item(request).unwrap_or_else(|| {
            Reply::Close(WireError::Unsupported {
                api: other,
                version: request.api_version,
            })
        }),
    }
}

/// Error responses that repeat the request's items, each with UNSUPPORTED_VERSION.
fn per_item(r: &Request) -> Option<Reply> {
    let code = ResponseError::UnsupportedVersion.code();
    let reason = || {
        Some(StrBytes::from_static_str(
            "not supported by this KafScale version",
        ))
    };
    let reply = match r.api_key {
        // v5+ (v0–4 are served): one result per key.
        ApiKey::FindCoordinator => mirror(r, |q: FindCoordinatorRequest| {
            FindCoordinatorResponse::default().with_coordinators(
                q.coordinator_keys
                    .into_iter()
                    .map(|key| {
                        find_coordinator_response::Coordinator::default()
                            .with_key(key)
                            .with_node_id(BrokerId(-1))
                            .with_port(-1)
                            .with_error_code(code)
                            .with_error_message(reason())
                    })
                    .collect(),
            )
        }),
        // v9 (v0–8 are served): one result per partition.
        ApiKey::OffsetCommit => mirror(r, |q: OffsetCommitRequest| {
            OffsetCommitResponse::default().with_topics(
                q.topics
                    .into_iter()
                    .map(|t| {
                        let partitions = t.partitions.iter().map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code)
                        });
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(partitions.collect())
                    })
                    .collect(),
            )
        }),
        // v8+ (v0–7 are served): one result per group.
        ApiKey::OffsetFetch => mirror(r, |q: OffsetFetchRequest| {
            OffsetFetchResponse::default().with_groups(
                q.groups
                    .into_iter()
                    .map(|g| {
                        OffsetFetchResponseGroup::default()
                            .with_group_id(g.group_id)
                            .with_error_code(code)
                    })
                    .collect(),
            )
        }),
        _ => return None,
    };
    Some(reply)
}

/// Decodes the request as `Q` and encodes `answer(request)` at the same version.
fn mirror<Q, S>(request: &Request, answer: impl FnOnce(Q) -> S) -> Reply
where
    Q: Decodable + Message,
    S: Encodable + HeaderVersion,
{
    match request.body::<Q>() {
        Ok(body) => {
            encode_response(request.correlation_id, request.api_version, &answer(body)).into()
        }
        Err(reason) => Reply::Close(reason),
    }
}
