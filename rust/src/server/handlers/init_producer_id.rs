//! InitProducerId v0–5 for idempotent producers: a producer id unique across the cluster and
//! its restarts (`meta::producer_ids`), at epoch 0. As in Kafka, a producer without a
//! transactional id always gets a fresh id, also when it names its current one (v3+, KIP-360:
//! a producer whose sequence state it lost starts over). Transactions are not supported: a
//! transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which every client treats as
//! fatal at once, instead of an error it would retry until its timeout.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<bytes::Bytes, WireError> {
    let body: InitProducerIdRequest = request.body()?;
    let response = if body.transactional_id.is_some() {
        failure(ResponseError::TransactionalIdAuthorizationFailed)
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

fn failure(error: ResponseError) -> InitProducerIdResponse {
    InitProducerIdResponse::default()
        .with_error_code(error.code())
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ApiKey, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::broker::tests::broker;
    use crate::protocol::header::testing::{read_response, request};

    async fn ask(
        broker: &Arc<Broker>,
        version: i16,
        body: InitProducerIdRequest,
    ) -> InitProducerIdResponse {
        let asked = request(ApiKey::InitProducerId, version, &body);
        read_response(handle(broker, &asked).await.unwrap(), version).1
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

    #[tokio::test]
    async fn a_transactional_id_is_refused_for_good() {
        let b = broker(1 << 20).await;
        let body = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))));
        let answer = ask(&b.broker, 4, body).await;
        assert_eq!(
            answer.error_code,
            ResponseError::TransactionalIdAuthorizationFailed.code()
        );
        assert_eq!(answer.producer_id.0, -1);
    }
}
