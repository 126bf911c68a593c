//! DescribeTransactions v0 and ListTransactions v0–1 (`kafka-transactions.sh`, the Admin
//! client's describeTransactions/listTransactions), answered from the transaction records this
//! broker's mirror holds. A transactional id is described by its coordinator (another broker
//! answers NOT_COORDINATOR, an unknown id TRANSACTIONAL_ID_NOT_FOUND); each broker lists the
//! ids it coordinates (clients ask every broker). As in Kafka, an id needs DESCRIBE on it (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, or left out of a listing), and a described
//! transaction's partitions leave out topics the principal may not describe.

use std::collections::BTreeMap;

use futures::FutureExt;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedState;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::log::partition::now_ms;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::topic_name;
use crate::transactions::{TxnRecord, TxnState};

/// Every state a ListTransactions filter may name.
const STATES: [TxnState; 6] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
];

fn may_describe(access: &Access, transactional_id: &str) -> bool {
    access.allows(
        Operation::Describe,
        ResourceType::TransactionalId,
        transactional_id,
    )
}

fn coordinates(broker: &Broker, transactional_id: &str) -> bool {
    let cluster = broker.cluster();
    let coordinator = cluster.transaction_coordinator(transactional_id);
    coordinator.is_some_and(|b| b.id == broker.config.broker_id)
}

fn describe(broker: &Broker, access: &Access, id: &str) -> TransactionState {
    let state = TransactionState::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_transaction_start_time_ms(-1);
    let error = |e: ResponseError| state.clone().with_error_code(e.code());
    if !may_describe(access, id) {
        return error(ResponseError::TransactionalIdAuthorizationFailed);
    }
    if !coordinates(broker, id) {
        return error(ResponseError::NotCoordinator);
    }
    let Some(record) = broker.transactions.mirrored(id) else {
        return error(ResponseError::TransactionalIdNotFound);
    };
    described(state, &record, |topic| {
        access.allows_topic(Operation::Describe, topic)
    })
}

fn described(
    state: TransactionState,
    record: &TxnRecord,
    visible: impl Fn(&str) -> bool,
) -> TransactionState {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for partition in record.partitions.iter().filter(|p| visible(&p.0)) {
        topics.entry(&partition.0).or_default().push(partition.1);
    }
    let topics = topics.into_iter().map(|(topic, partitions)| {
        TopicData::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions)
    });
    state
        .with_transaction_state(StrBytes::from_static_str(record.state.name()))
        .with_transaction_timeout_ms(record.timeout_ms)
        .with_transaction_start_time_ms(record.started_ms)
        .with_producer_id(ProducerId(record.producer_id))
        .with_producer_epoch(record.epoch)
        .with_topics(topics.collect())
}

async fn describe_all(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeTransactionsRequest = request.body()?;
    let states = body
        .transactional_ids
        .iter()
        .map(|id| describe(broker, access, &id.0))
        .collect();
    let response = DescribeTransactionsResponse::default().with_transaction_states(states);
    encode_response(request.correlation_id, request.api_version, &response)
}

async fn list(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: ListTransactionsRequest = request.body()?;
    let named = |s: &StrBytes| {
        STATES
            .iter()
            .copied()
            .find(|state| state.name() == s.as_str())
    };
    let unknown: Vec<StrBytes> = body
        .state_filters
        .iter()
        .filter(|s| named(s).is_none())
        .cloned()
        .collect();
    let states: Vec<TxnState> = body.state_filters.iter().filter_map(named).collect();
    let now = now_ms();
    let listed = broker
        .transactions
        .all()
        .into_iter()
        .filter(|(id, _)| coordinates(broker, id) && may_describe(access, id))
        .filter(|(_, r)| body.state_filters.is_empty() || states.contains(&r.state))
        .filter(|(_, r)| {
            body.producer_id_filters.is_empty()
                || body
                    .producer_id_filters
                    .iter()
                    .any(|p| p.0 == r.producer_id)
        })
        // v1 (KIP-994): only transactions running longer than this many ms (-1: any).
        .filter(|(_, r)| {
            body.duration_filter < 0
                || (r.state == TxnState::Ongoing && now - r.started_ms > body.duration_filter)
        })
        .map(|(id, r)| {
            ListedState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(id)))
                .with_producer_id(ProducerId(r.producer_id))
                .with_transaction_state(StrBytes::from_static_str(r.state.name()))
        });
    let response = ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed.collect());
    encode_response(request.correlation_id, request.api_version, &response)
}

/// Dispatch's entry for DescribeTransactions (a [`super::Handler`]).
pub(crate) fn handle_describe(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { describe_all(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

/// Dispatch's entry for ListTransactions (a [`super::Handler`]).
pub(crate) fn handle_list(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { list(&cx.broker, &request, &cx.access).await.into() }.boxed()
}
