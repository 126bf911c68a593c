//! The transaction coordinator's APIs a producer sends (InitProducerId with a transactional id
//! is `init_producer_id`'s): AddPartitionsToTxn v0–3, AddOffsetsToTxn v0–3 and EndTxn v0–3,
//! each answered by the broker that coordinates the transactional id (else NOT_COORDINATOR,
//! and the client finds the coordinator again). (TxnOffsetCommit goes to the group's
//! coordinator, in Python.) Authorization as in Kafka: WRITE on the transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED); for AddPartitionsToTxn WRITE on each topic (else
//! TOPIC_AUTHORIZATION_FAILED for its partitions, OPERATION_NOT_ATTEMPTED for the rest); for
//! AddOffsetsToTxn READ on the group (else GROUP_AUTHORIZATION_FAILED).

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse,
};
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::transactions::coordinator::Members;
use crate::transactions::TxnPartition;

/// Why a request may not reach the coordinator's record here: the error to answer with.
pub(crate) fn refusal(
    broker: &Broker,
    access: &Access,
    transactional_id: &str,
) -> Option<ResponseError> {
    if !access.allows(
        Operation::Write,
        ResourceType::TransactionalId,
        transactional_id,
    ) {
        return Some(ResponseError::TransactionalIdAuthorizationFailed);
    }
    let cluster = broker.cluster();
    match cluster.transaction_coordinator(transactional_id) {
        Some(coordinator) if coordinator.id == broker.config.broker_id => None,
        _ => Some(ResponseError::NotCoordinator),
    }
}

/// PRODUCER_FENCED is new (KIP-588): requests older than `since` get INVALID_PRODUCER_EPOCH,
/// which those clients take the same way.
pub(crate) fn for_version(error: ResponseError, version: i16, since: i16) -> ResponseError {
    match error {
        ResponseError::ProducerFenced if version < since => ResponseError::InvalidProducerEpoch,
        other => other,
    }
}

/// A partition a request names, with its own refusal if it has one.
type Refused = (i32, Option<ResponseError>);

async fn add_partitions(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: AddPartitionsToTxnRequest = request.body()?;
    let id = body.v3_and_below_transactional_id.0.to_string();
    let producer = (
        body.v3_and_below_producer_id.0,
        body.v3_and_below_producer_epoch,
    );
    // Each partition's own refusal, if it has one.
    let checked: Vec<(String, Vec<Refused>)> = body
        .v3_and_below_topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let allowed = access.allows_topic(Operation::Write, &name);
            let count = broker.topic(&name).map(|t| t.partitions.len() as i32);
            let partitions = topic.partitions.iter().map(|&p| {
                let refusal = if !allowed {
                    Some(ResponseError::TopicAuthorizationFailed)
                } else if !count.is_some_and(|n| (0..n).contains(&p)) {
                    Some(ResponseError::UnknownTopicOrPartition)
                } else {
                    None
                };
                (p, refusal)
            });
            (name, partitions.collect())
        })
        .collect();
    let partition_refused = checked
        .iter()
        .any(|(_, ps)| ps.iter().any(|(_, r)| r.is_some()));
    // One error for all: the request's, or the outcome of adding them.
    let outcome = match refusal(broker, access, &id) {
        Some(error) => Some(error),
        None if partition_refused => None,
        None => {
            let partitions: Vec<TxnPartition> = checked
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(|(p, _)| TxnPartition(t.clone(), *p)))
                .collect();
            let added = broker
                .transactions
                .add(&id, producer, Members::Partitions(&partitions));
            added
                .await
                .err()
                .map(|e| for_version(e, request.api_version, 2))
        }
    };
    let results = checked.into_iter().map(|(name, partitions)| {
        let results = partitions.into_iter().map(|(index, own)| {
            let error = match (outcome, own) {
                (Some(all), _) => Some(all),
                (None, Some(own)) => Some(own),
                (None, None) if partition_refused => Some(ResponseError::OperationNotAttempted),
                (None, None) => None,
            };
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(index)
                .with_partition_error_code(super::code(error))
        });
        AddPartitionsToTxnTopicResult::default()
            .with_name(crate::protocol::topic_name(&name))
            .with_results_by_partition(results.collect())
    });
    let response =
        AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results.collect());
    encode_response(request.correlation_id, request.api_version, &response)
}

async fn add_offsets(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: AddOffsetsToTxnRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let producer = (body.producer_id.0, body.producer_epoch);
    let group = body.group_id.0.to_string();
    let error = match refusal(broker, access, &id) {
        Some(error) => Some(error),
        None if !access.allows_group(Operation::Read, &group) => {
            Some(ResponseError::GroupAuthorizationFailed)
        }
        None => broker
            .transactions
            .add(&id, producer, Members::Group(&group))
            .await
            .err()
            .map(|e| for_version(e, request.api_version, 2)),
    };
    let response = AddOffsetsToTxnResponse::default().with_error_code(super::code(error));
    encode_response(request.correlation_id, request.api_version, &response)
}

async fn end(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: EndTxnRequest = request.body()?;
    let id = body.transactional_id.0.to_string();
    let producer = (body.producer_id.0, body.producer_epoch);
    let error = match refusal(broker, access, &id) {
        Some(error) => Some(error),
        None => broker
            .transactions
            .end(&id, producer, body.committed)
            .await
            .err()
            .map(|e| for_version(e, request.api_version, 2)),
    };
    let response = EndTxnResponse::default().with_error_code(super::code(error));
    encode_response(request.correlation_id, request.api_version, &response)
}

/// Dispatch's entry for AddPartitionsToTxn (a [`super::Handler`]).
pub(crate) fn handle_add_partitions(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move {
        add_partitions(&cx.broker, &request, &cx.access)
            .await
            .into()
    }
    .boxed()
}

/// Dispatch's entry for AddOffsetsToTxn (a [`super::Handler`]).
pub(crate) fn handle_add_offsets(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { add_offsets(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for EndTxn (a [`super::Handler`]).
pub(crate) fn handle_end(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { end(&cx.broker, &request, &cx.access).await.into() }.boxed()
}
