//! InitProducerId v0–5. An idempotent producer gets a producer id unique across the cluster
//! and its restarts (`meta::producer_ids`), at epoch 0; as in Kafka, a producer without a
//! transactional id always gets a fresh id, also when it names its current one (v3+, KIP-360:
//! a producer whose sequence state it lost starts over). A transactional producer asks the
//! coordinator of its transactional id (`transactions`), which keeps its producer id and bumps
//! its epoch, fencing older instances, and aborts a transaction they left open.
//!
//! Authorization as in Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or
//! WRITE on some topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED; a transactional id needs
//! WRITE on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: InitProducerIdRequest = request.body()?;
    let response = if let Some(id) = &body.transactional_id {
        transactional(broker, request.api_version, &body, id, access).await
    } else if !(access.allows_cluster(Operation::IdempotentWrite)
        || access.allows_any(Operation::Write, ResourceType::Topic))
    {
        failure(ResponseError::ClusterAuthorizationFailed)
    } else {
        match broker.producer_ids.next().await {
            Ok(id) => InitProducerIdResponse::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(error) => {
                tracing::warn!(%error, "allocating producer ids failed");
                failure(ResponseError::CoordinatorNotAvailable)
            }
        }
    };
    encode_response(request.correlation_id, request.api_version, &response)
}

async fn transactional(
    broker: &Arc<Broker>,
    version: i16,
    body: &InitProducerIdRequest,
    id: &str,
    access: &Access,
) -> InitProducerIdResponse {
    if let Some(error) = super::transactions::refusal(broker, access, id) {
        return failure(error);
    }
    // v3+ name the producer's current id and epoch when it has them (KIP-360).
    let expected = (body.producer_id.0 >= 0).then_some((body.producer_id.0, body.producer_epoch));
    let timeout_ms = (
        body.transaction_timeout_ms,
        broker.config.transaction_max_timeout_ms,
    );
    let initialised =
        broker
            .transactions
            .init_producer_id(id, timeout_ms, expected, &broker.producer_ids);
    match initialised.await {
        Ok((producer_id, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch),
        Err(error) => failure(super::transactions::for_version(error, version, 4)),
    }
}

fn failure(error: ResponseError) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error.code())
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

/// Dispatch's entry for InitProducerId (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ApiKey, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::auth::acl::tests::acl;
    use crate::auth::acl::ResourceType::{Cluster, Topic, TransactionalId as TxnId};
    use crate::auth::acl::{PatternType, Permission, CLUSTER_NAME};
    use crate::broker::tests::broker;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::handlers::testing::{alice, allow, deny, open};

    async fn ask(
        broker: &Arc<Broker>,
        version: i16,
        body: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        ask_as(broker, version, body, &open()).await
    }

    async fn ask_as(
        broker: &Arc<Broker>,
        version: i16,
        body: InitProducerIdRequest,
        access: &Access,
    ) -> InitProducerIdResponse {
        let asked = request(ApiKey::InitProducerId, version, &body);
        read_response(answer(broker, &asked, access).await.unwrap(), version).1
    }

    #[tokio::test]
    async fn every_producer_gets_a_new_id_at_epoch_zero() {
        let b = broker(1 << 20).await;
        let mut ids = Vec::new();
        for version in 0..=5 {
            let body = InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000);
            let answer = ask(&b.broker, version, body).await;
            assert_eq!(answer.error_code, 0);
            assert_eq!(answer.producer_epoch, 0);
            ids.push(answer.producer_id.0);
        }
        // v3+ names the current id and epoch (KIP-360): a fresh id all the same.
        let again = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id(ProducerId(ids[5]))
            .with_producer_epoch(0);
        ids.push(ask(&b.broker, 4, again).await.producer_id.0);
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len(), "{ids:?}");
        assert!(ids.iter().all(|&id| id >= 0));
    }

    fn transactional(timeout_ms: i32) -> InitProducerIdRequest {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
            .with_transaction_timeout_ms(timeout_ms)
    }

    #[tokio::test]
    async fn a_transactional_id_keeps_its_producer_id_and_gets_the_next_epoch() {
        let b = broker(1 << 20).await;
        let first = ask(&b.broker, 4, transactional(60_000)).await;
        assert_eq!((first.error_code, first.producer_epoch), (0, 0));
        for (version, epoch) in [(0, 1), (3, 2), (5, 3)] {
            let next = ask(&b.broker, version, transactional(60_000)).await;
            assert_eq!(next.error_code, 0, "v{version}");
            assert_eq!(
                (next.producer_id, next.producer_epoch),
                (first.producer_id, epoch)
            );
        }
        // KIP-360: naming an epoch it does not have, a producer is fenced (v4+ say so).
        let stale = transactional(60_000)
            .with_producer_id(first.producer_id)
            .with_producer_epoch(1);
        let fenced = ask(&b.broker, 4, stale.clone()).await;
        assert_eq!(fenced.error_code, ResponseError::ProducerFenced.code());
        let old_client = ask(&b.broker, 3, stale).await;
        assert_eq!(
            old_client.error_code,
            ResponseError::InvalidProducerEpoch.code()
        );
        // A timeout above transaction.max.timeout.ms is refused.
        let too_long = ask(&b.broker, 4, transactional(900_001)).await;
        assert_eq!(
            too_long.error_code,
            ResponseError::InvalidTransactionTimeout.code()
        );
    }

    #[tokio::test]
    async fn an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() {
        let b = broker(1 << 20).await;
        let idempotent = || InitProducerIdRequest::default().with_transactional_id(None);
        let refused = ResponseError::ClusterAuthorizationFailed.code();
        let prefixed_write = acl(
            Topic,
            "orders-",
            PatternType::Prefixed,
            "User:alice",
            Operation::Write,
            Permission::Allow,
        );
        for (acls, code, why) in [
            (
                vec![allow(Topic, "t", Operation::Read)],
                refused,
                "reading is not writing",
            ),
            (
                vec![allow(Cluster, CLUSTER_NAME, Operation::IdempotentWrite)],
                0,
                "cluster",
            ),
            (vec![prefixed_write], 0, "WRITE on some topic"),
            (
                vec![
                    allow(Topic, "t", Operation::Write),
                    deny(Topic, "t", Operation::Write),
                ],
                refused,
                "the only WRITE is denied",
            ),
        ] {
            let answer = ask_as(&b.broker, 4, idempotent(), &alice(acls)).await;
            assert_eq!(answer.error_code, code, "{why}");
            assert_eq!(answer.producer_id.0 >= 0, code == 0, "{why}");
        }
        // A transactional id needs WRITE on it, whatever else is allowed.
        let writer = alice(vec![allow(TxnId, "tx", Operation::Write)]);
        let answer = ask_as(&b.broker, 4, transactional(60_000), &writer).await;
        assert_eq!(answer.error_code, 0);
        let other = alice(vec![
            allow(TxnId, "other", Operation::Write),
            allow(Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
        ]);
        let answer = ask_as(&b.broker, 4, transactional(60_000), &other).await;
        assert_eq!(
            answer.error_code,
            ResponseError::TransactionalIdAuthorizationFailed.code()
        );
    }
}
