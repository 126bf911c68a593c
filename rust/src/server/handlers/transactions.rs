//! The transaction coordinator's APIs a producer sends (InitProducerId with a transactional id
//! is `init_producer_id`'s): AddPartitionsToTxn v0–5, AddOffsetsToTxn v0–4 and EndTxn v0–5,
//! each answered by the broker that coordinates the transactional id (else NOT_COORDINATOR,
//! and the client finds the coordinator again). (TxnOffsetCommit goes to the group's
//! coordinator, in Python.) Authorization as in Kafka: WRITE on the transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED); for AddPartitionsToTxn WRITE on each topic (else
//! TOPIC_AUTHORIZATION_FAILED for its partitions, OPERATION_NOT_ATTEMPTED for the rest); for
//! AddOffsetsToTxn READ on the group (else GROUP_AUTHORIZATION_FAILED).
//!
//! Versions: v4 of AddOffsetsToTxn and EndTxn only let the answer be TRANSACTION_ABORTABLE,
//! which is never given here. EndTxn v5 is the second transaction protocol (KIP-890 part 2):
//! the epoch is bumped and the answer names the producer's next id and epoch.
//! AddPartitionsToTxn v4+ is a broker's (KIP-890): several transactions in one request, each
//! added or, with VerifyOnly, only checked; it needs CLUSTER_ACTION on the cluster (else
//! CLUSTER_AUTHORIZATION_FAILED for the whole request), which covers its transactional ids and
//! topics, as Kafka's brokers send it.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
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
use crate::protocol::newer::EndTxnResponseV5;
use crate::transactions::coordinator::{Members, Protocol};
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
    not_coordinator(broker, transactional_id)
}

/// NOT_COORDINATOR where this broker does not coordinate the transactional id.
fn not_coordinator(broker: &Broker, transactional_id: &str) -> Option<ResponseError> {
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

/// One transaction of an AddPartitionsToTxn request: v0–3 carry one, v4+ several.
struct Adding<'a> {
    id: String,
    producer: (i64, i16),
    /// v4+: only check that the partitions are in the transaction.
    verify_only: bool,
    /// v4+, a broker's: its CLUSTER_ACTION covers the transactional id and the topics.
    by_broker: bool,
    topics: &'a [AddPartitionsToTxnTopic],
}

async fn add_partitions(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: AddPartitionsToTxnRequest = request.body()?;
    let version = request.api_version;
    if version <= 3 {
        let adding = Adding {
            id: body.v3_and_below_transactional_id.0.to_string(),
            producer: (
                body.v3_and_below_producer_id.0,
                body.v3_and_below_producer_epoch,
            ),
            verify_only: false,
            by_broker: false,
            topics: &body.v3_and_below_topics,
        };
        let results = add_transaction(broker, access, adding, version).await;
        let response =
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        return encode_response(request.correlation_id, version, &response);
    }
    let mut response = AddPartitionsToTxnResponse::default();
    if !access.allows_cluster(Operation::ClusterAction) {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return encode_response(request.correlation_id, version, &response);
    }
    for transaction in &body.transactions {
        let adding = Adding {
            id: transaction.transactional_id.0.to_string(),
            producer: (transaction.producer_id.0, transaction.producer_epoch),
            verify_only: transaction.verify_only,
            by_broker: true,
            topics: &transaction.topics,
        };
        let id = transaction.transactional_id.clone();
        let results = add_transaction(broker, access, adding, version).await;
        response.results_by_transaction.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(id)
                .with_topic_results(results),
        );
    }
    encode_response(request.correlation_id, version, &response)
}

/// Adds (or checks) one transaction's partitions; their results.
async fn add_transaction(
    broker: &Arc<Broker>,
    access: &Access,
    adding: Adding<'_>,
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let Adding {
        id,
        producer,
        verify_only,
        by_broker,
        topics,
    } = adding;
    // Each partition's own refusal, if it has one.
    let checked: Vec<(String, Vec<Refused>)> = topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let allowed = by_broker || access.allows_topic(Operation::Write, &name);
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
    let refused = match by_broker {
        true => not_coordinator(broker, &id),
        false => refusal(broker, access, &id),
    };
    // Each partition's error, in the order of `checked`.
    let wanted: Vec<TxnPartition> = checked
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(|(p, _)| TxnPartition(t.clone(), *p)))
        .collect();
    let own = checked
        .iter()
        .flat_map(|(_, ps)| ps.iter().map(|(_, own)| *own));
    let errors: Vec<Option<ResponseError>> = match refused {
        Some(error) => vec![Some(error); wanted.len()],
        None if partition_refused => own
            .map(|own| own.or(Some(ResponseError::OperationNotAttempted)))
            .collect(),
        None if verify_only => {
            let checked = broker.transactions.check(&id, producer, &wanted).await;
            checked.unwrap_or_else(|e| vec![Some(for_version(e, version, 2)); wanted.len()])
        }
        None => {
            let members = Members::Partitions(&wanted);
            let added = broker.transactions.add(&id, producer, members).await;
            vec![added.err().map(|e| for_version(e, version, 2)); wanted.len()]
        }
    };
    let mut errors = errors.into_iter();
    let results = checked.into_iter().map(|(name, partitions)| {
        let results = partitions.into_iter().map(|(index, _)| {
            AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(index)
                .with_partition_error_code(super::code(errors.next().flatten()))
        });
        AddPartitionsToTxnTopicResult::default()
            .with_name(crate::protocol::topic_name(&name))
            .with_results_by_partition(results.collect())
    });
    results.collect()
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
    let version = request.api_version;
    let protocol = if version >= 5 {
        Protocol::BumpEpoch
    } else {
        Protocol::KeepEpoch
    };
    let outcome = match refusal(broker, access, &id) {
        Some(error) => Err(error),
        None => broker
            .transactions
            .end(
                &id,
                producer,
                body.committed,
                protocol,
                &broker.producer_ids,
            )
            .await
            .map_err(|e| for_version(e, version, 2)),
    };
    if protocol == Protocol::BumpEpoch {
        let ((producer_id, producer_epoch), error) = match outcome {
            Ok(next) => (next, None),
            Err(error) => ((-1, -1), Some(error)),
        };
        let response = EndTxnResponseV5 {
            error_code: super::code(error),
            producer_id,
            producer_epoch,
        };
        return encode_response(request.correlation_id, version, &response);
    }
    let response = EndTxnResponse::default().with_error_code(super::code(outcome.err()));
    encode_response(request.correlation_id, version, &response)
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

#[cfg(test)]
mod tests {
    use bytes::Buf;
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
    use kafka_protocol::messages::{ApiKey, ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::auth::acl::ResourceType::Cluster;
    use crate::auth::acl::CLUSTER_NAME;
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    fn id() -> TransactionalId {
        TransactionalId(StrBytes::from_static_str("tx"))
    }

    fn v4_adding(producer: (i64, i16), verify_only: bool, index: i32) -> AddPartitionsToTxnRequest {
        let topic = AddPartitionsToTxnTopic::default()
            .with_name(topic_name("t"))
            .with_partitions(vec![index]);
        let transaction = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(id())
            .with_producer_id(ProducerId(producer.0))
            .with_producer_epoch(producer.1)
            .with_verify_only(verify_only)
            .with_topics(vec![topic]);
        AddPartitionsToTxnRequest::default().with_transactions(vec![transaction])
    }

    /// The error of partition `t`-`index` in a v4+ answer (with the request's own).
    fn v4_errors(response: &AddPartitionsToTxnResponse) -> (i16, Vec<i16>) {
        let partitions = response.results_by_transaction.iter().flat_map(|t| {
            let topics = t.topic_results.iter();
            topics.flat_map(|r| {
                r.results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
            })
        });
        (response.error_code, partitions.collect())
    }

    #[tokio::test]
    async fn add_partitions_v4_is_a_brokers_and_verify_only_adds_nothing() {
        let b = broker_with(&["t"], 2, 0).await;
        let ids = &b.broker.producer_ids;
        let producer = b
            .broker
            .transactions
            .init_producer_id("tx", (60_000, 900_000), None, ids)
            .await
            .unwrap();
        let ask = |body: AddPartitionsToTxnRequest, access: Arc<Access>| {
            let broker = b.broker.clone();
            async move {
                let asked = request(ApiKey::AddPartitionsToTxn, 4, &body);
                let answer = add_partitions(&broker, &asked, &access).await.unwrap();
                read_response::<AddPartitionsToTxnResponse>(answer, 4).1
            }
        };
        let client = alice(vec![]);
        let refused = ask(v4_adding(producer, false, 0), client).await;
        let cluster_refused = ResponseError::ClusterAuthorizationFailed.code();
        assert_eq!(v4_errors(&refused), (cluster_refused, vec![]));
        let broker_like = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::All)]);
        let added = ask(v4_adding(producer, false, 0), broker_like.clone()).await;
        assert_eq!(v4_errors(&added), (0, vec![0]));
        let has = ask(v4_adding(producer, true, 0), open()).await;
        assert_eq!(v4_errors(&has), (0, vec![0]));
        let lacks = ask(v4_adding(producer, true, 1), open()).await;
        let not_in = ResponseError::InvalidTxnState.code();
        assert_eq!(v4_errors(&lacks), (0, vec![not_in]));
        let record = b.broker.transactions.mirrored("tx").unwrap();
        let partitions: Vec<_> = record.partitions.iter().map(|p| p.1).collect();
        assert_eq!(partitions, [0], "verify_only added nothing");
    }

    #[tokio::test]
    async fn end_txn_v5_answers_the_producers_next_epoch() {
        let b = broker_with(&["t"], 1, 0).await;
        let ids = &b.broker.producer_ids;
        let (producer_id, epoch) = b
            .broker
            .transactions
            .init_producer_id("tx", (60_000, 900_000), None, ids)
            .await
            .unwrap();
        let body = EndTxnRequest::default()
            .with_transactional_id(id())
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_committed(false);
        // v5 is v4's request frame.
        let mut asked = request(ApiKey::EndTxn, 4, &body);
        asked.api_version = 5;
        let mut frame = end(&b.broker, &asked, &open()).await.unwrap();
        let size = frame.get_i32();
        assert_eq!(size as usize, frame.len());
        assert_eq!(frame.get_i32(), 7, "the correlation id");
        assert_eq!(frame.get_u8(), 0, "the header's tagged fields");
        assert_eq!(frame.get_i32(), 0, "throttle");
        assert_eq!(frame.get_i16(), 0, "no error: nothing ongoing is aborted");
        assert_eq!((frame.get_i64(), frame.get_i16()), (producer_id, epoch + 1));
        assert_eq!(frame.get_u8(), 0, "the body's tagged fields");
        assert!(frame.is_empty());
        // v4 keeps the epoch: its answer is the error alone.
        let commit = body.with_producer_epoch(epoch + 1).with_committed(true);
        let asked = request(ApiKey::EndTxn, 4, &commit);
        let answer = end(&b.broker, &asked, &open()).await.unwrap();
        let v4: EndTxnResponse = read_response(answer, 4).1;
        assert_eq!(v4.error_code, ResponseError::InvalidTxnState.code());
    }
}
