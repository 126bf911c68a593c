//! FindCoordinator v0–5 (v4+ look up a batch of keys). A group's coordinator, and a
//! transactional id's, is the live broker that rendezvous hashing of the key picks from this
//! broker's cluster view, so every broker names the same one.
//! librdkafka also reads this API's presence as "the broker supports LZ4" (its LZ4 feature
//! depends on FindCoordinator v0), so answering it is what lets lz4 producers compress.
//! As in Kafka, a group key needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED), a
//! transaction key DESCRIBE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
//! each key of a batch on its own.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::cluster::state::ClusterState;
use crate::error::ApiError;
use crate::protocol::header::{encode_response, Request, WireError};

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

/// `listener`: the one the client came in on, whose endpoint it is given.
pub(crate) fn respond(
    broker: &Arc<Broker>,
    request: &Request,
    listener: &str,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: FindCoordinatorRequest = request.body()?;
    let cluster = broker.cluster();
    let response = answer(&cluster, &body, request.api_version, listener, access);
    encode_response(request.correlation_id, request.api_version, &response)
}

fn answer(
    cluster: &ClusterState,
    body: &FindCoordinatorRequest,
    version: i16,
    listener: &str,
    access: &Access,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let coordinators = body.coordinator_keys.iter().map(|key| {
            let found = lookup(cluster, body.key_type, key, listener, access);
            Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(found.node_id))
                .with_host(found.host)
                .with_port(found.port)
                .with_error_code(found.error_code)
                .with_error_message(found.error_message)
        });
        return FindCoordinatorResponse::default().with_coordinators(coordinators.collect());
    }
    // v0 has no error message; the codec leaves it out.
    let found = lookup(cluster, body.key_type, &body.key, listener, access);
    FindCoordinatorResponse::default()
        .with_node_id(BrokerId(found.node_id))
        .with_host(found.host)
        .with_port(found.port)
        .with_error_code(found.error_code)
        .with_error_message(found.error_message)
}

/// One key's answer, in the fields both response layouts share.
struct Found {
    node_id: i32,
    host: StrBytes,
    port: i32,
    error_code: i16,
    error_message: Option<StrBytes>,
}

fn lookup(
    cluster: &ClusterState,
    key_type: i8,
    key: &str,
    listener: &str,
    access: &Access,
) -> Found {
    let denied = |error: ResponseError| Err(ApiError::new(error, error.to_string()));
    let coordinator = match key_type {
        GROUP if !access.allows_group(Operation::Describe, key) => {
            denied(ResponseError::GroupAuthorizationFailed)
        }
        TRANSACTION if !access.allows(Operation::Describe, ResourceType::TransactionalId, key) => {
            denied(ResponseError::TransactionalIdAuthorizationFailed)
        }
        GROUP => cluster.coordinator(key).ok_or_else(|| {
            ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                "no live broker is known yet; retry shortly",
            )
        }),
        TRANSACTION => cluster.transaction_coordinator(key).ok_or_else(|| {
            ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                "no live broker is known yet; retry shortly",
            )
        }),
        other => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("unknown coordinator key type {other}"),
        )),
    };
    let reachable = coordinator.and_then(|broker| {
        let (host, port) = broker.endpoint(listener).ok_or_else(|| {
            ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                format!("broker {} has no listener named {listener}", broker.id),
            )
        })?;
        Ok((broker.id, host.to_string(), port))
    });
    match reachable {
        Ok((node_id, host, port)) => Found {
            node_id,
            host: StrBytes::from_string(host),
            port,
            error_code: 0,
            error_message: None,
        },
        Err(e) => Found {
            node_id: -1,
            host: StrBytes::default(),
            port: -1,
            error_code: e.code.code(),
            error_message: Some(StrBytes::from_string(e.message)),
        },
    }
}

/// Dispatch's entry for FindCoordinator (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { respond(&cx.broker, &request, &cx.connection.listener, &cx.access).into() }.boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::acl::ResourceType::Group;
    use crate::meta::catalog::BrokerRecord;
    use crate::protocol::header::testing::read_response;
    use crate::server::apis::supported;
    use crate::server::handlers::testing::{alice, allow, open};

    fn cluster(brokers: &[i32]) -> ClusterState {
        let mut state = ClusterState::default();
        for &id in brokers {
            let host = format!("host-{id}");
            state.brokers.insert(
                id,
                BrokerRecord {
                    id,
                    host,
                    port: 9000 + id,
                    ..Default::default()
                },
            );
        }
        state
    }

    /// Encodes at `version` as the handler does and decodes what a client would read.
    fn on_the_wire(response: &FindCoordinatorResponse, version: i16) -> FindCoordinatorResponse {
        read_response(encode_response(7, version, response).unwrap(), version).1
    }

    fn request(key_type: i8, keys: &[&str]) -> FindCoordinatorRequest {
        let keys: Vec<StrBytes> = keys
            .iter()
            .map(|k| StrBytes::from_string(k.to_string()))
            .collect();
        FindCoordinatorRequest::default()
            .with_key(keys[0].clone())
            .with_key_type(key_type)
            .with_coordinator_keys(keys)
    }

    #[test]
    fn names_the_hashed_coordinator_at_every_version() {
        let state = cluster(&[1, 2, 3]);
        let range = supported(kafka_protocol::messages::ApiKey::FindCoordinator).unwrap();
        for version in range.min..=range.max {
            let body = request(GROUP, &["orders", "billing"]);
            let answered = answer(&state, &body, version, "PLAINTEXT", &open());
            let wire = on_the_wire(&answered, version);
            let expect = |group| state.coordinator(group).unwrap();
            if version >= 4 {
                assert_eq!(wire.coordinators.len(), 2);
                for (c, group) in wire.coordinators.iter().zip(["orders", "billing"]) {
                    assert_eq!(c.key.as_str(), group);
                    assert_eq!(
                        (c.node_id.0, c.port),
                        (expect(group).id, expect(group).port)
                    );
                    assert_eq!(c.host.as_str(), expect(group).host);
                    assert_eq!(c.error_code, 0);
                }
            } else {
                assert_eq!(wire.error_code, 0, "v{version}");
                assert_eq!(wire.node_id.0, expect("orders").id);
                assert_eq!(wire.host.as_str(), expect("orders").host);
                assert_eq!(wire.port, expect("orders").port);
            }
        }
    }

    #[test]
    fn no_reachable_broker_is_retried_with_a_reason() {
        let unavailable = ResponseError::CoordinatorNotAvailable.code();
        for (state, key_type, listener, error) in [
            (cluster(&[]), GROUP, "PLAINTEXT", unavailable),
            (cluster(&[]), TRANSACTION, "PLAINTEXT", unavailable),
            // the coordinator has no listener of the name the client came in on
            (cluster(&[1]), GROUP, "SSL", unavailable),
        ] {
            for version in 0..=5 {
                let wire = on_the_wire(
                    &answer(
                        &state,
                        &request(key_type, &["g"]),
                        version,
                        listener,
                        &open(),
                    ),
                    version,
                );
                let (code, node, message) = match wire.coordinators.first() {
                    Some(c) => (c.error_code, c.node_id.0, c.error_message.clone()),
                    None => (wire.error_code, wire.node_id.0, wire.error_message),
                };
                assert_eq!((code, node), (error, -1), "v{version}");
                // v0 has no message field
                assert_eq!(
                    message.is_some_and(|m| !m.is_empty()),
                    version >= 1,
                    "v{version}"
                );
            }
        }
    }

    #[test]
    fn a_transactional_id_is_placed_apart_from_the_group_of_its_name() {
        let state = cluster(&[1, 2, 3]);
        let mut apart = 0;
        for n in 0..30 {
            let key = format!("tx-{n}");
            let wire = on_the_wire(
                &answer(
                    &state,
                    &request(TRANSACTION, &[&key]),
                    3,
                    "PLAINTEXT",
                    &open(),
                ),
                3,
            );
            let coordinator = state.transaction_coordinator(&key).unwrap().id;
            assert_eq!((wire.error_code, wire.node_id.0), (0, coordinator));
            apart += usize::from(coordinator != state.coordinator(&key).unwrap().id);
        }
        assert!(apart > 0, "transactions follow a hash of their own");
    }

    #[test]
    fn a_group_key_needs_describe_on_the_group_at_every_version() {
        let state = cluster(&[1, 2, 3]);
        // READ implies DESCRIBE
        let access = alice(vec![allow(Group, "orders", Operation::Read)]);
        let denied = ResponseError::GroupAuthorizationFailed.code();
        for version in 0..=5 {
            let body = request(GROUP, &["billing", "orders"]);
            let wire = on_the_wire(
                &answer(&state, &body, version, "PLAINTEXT", &access),
                version,
            );
            let got: Vec<(i16, i32)> = match version {
                4.. => wire
                    .coordinators
                    .iter()
                    .map(|c| (c.error_code, c.node_id.0))
                    .collect(),
                _ => vec![(wire.error_code, wire.node_id.0)],
            };
            let orders = (0, state.coordinator("orders").unwrap().id);
            let want = match version {
                4.. => vec![(denied, -1), orders],
                _ => vec![(denied, -1)],
            };
            assert_eq!(got, want, "v{version}");
            let allowed = request(GROUP, &["orders"]);
            let wire = on_the_wire(
                &answer(&state, &allowed, version, "PLAINTEXT", &access),
                version,
            );
            let code = wire
                .coordinators
                .first()
                .map_or(wire.error_code, |c| c.error_code);
            assert_eq!(code, 0, "v{version}");
        }
    }
}
