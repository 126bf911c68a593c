//! DescribeProducers v0 (KIP-664): the idempotent producers each partition's owner remembers,
//! with their epoch, last sequence and last write, as `kafka-transactions.sh
//! describe-producers` and admin clients list them, and where each one's transaction open in
//! the partition began (else -1); the coordinator epoch is -1 (the coordinator's record is
//! fenced by its revision, not an epoch). A topic needs READ, else each of its
//! partitions gets TOPIC_AUTHORIZATION_FAILED. A partition named more than once is answered
//! once: Kafka answers every entry, but a partition's producers can outnumber the bytes that
//! name it a thousandfold, so repeats would multiply the answer.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::{find_partition, Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::repeats::merge_topics;

pub(crate) fn answer(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let mut body: DescribeProducersRequest = request.body()?;
    merge_topics(&mut body.topics);
    let topics = body.topics.into_iter().map(|topic| {
        let allowed = access.allows_topic(Operation::Read, &topic.name);
        let partitions = topic.partition_indexes.iter().map(|&index| {
            let answer = PartitionResponse::default().with_partition_index(index);
            let producers = match allowed {
                true => find_partition(broker, &topic.name.0, index),
                false => Err(ResponseError::TopicAuthorizationFailed),
            };
            let producers = producers.and_then(|p| p.active_producers());
            match producers {
                Ok(producers) => answer.with_active_producers(
                    producers
                        .into_iter()
                        .map(|p| {
                            ProducerState::default()
                                .with_producer_id(ProducerId(p.producer_id))
                                .with_producer_epoch(p.epoch as i32)
                                .with_last_sequence(p.last_sequence)
                                .with_last_timestamp(p.last_write_ms)
                                .with_coordinator_epoch(-1)
                                .with_current_txn_start_offset(p.txn_start_offset.unwrap_or(-1))
                        })
                        .collect(),
                ),
                Err(error) => answer.with_error_code(error.code()),
            }
        });
        TopicResponse::default()
            .with_name(topic.name.clone())
            .with_partitions(partitions.collect())
    });
    let response = DescribeProducersResponse::default().with_topics(topics.collect());
    encode_response(request.correlation_id, request.api_version, &response)
}

/// Dispatch's entry for DescribeProducers (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::Topic;
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    #[tokio::test]
    async fn describing_producers_needs_read_on_the_topic() {
        let t = broker_with(&["t", "u"], 1, 0).await;
        let topics = ["t", "u"].map(|name| {
            TopicRequest::default()
                .with_name(topic_name(name))
                .with_partition_indexes(vec![0])
        });
        let body = DescribeProducersRequest::default().with_topics(topics.to_vec());
        let access = alice(vec![
            allow(Topic, "t", Operation::Describe),
            allow(Topic, "u", Operation::Read),
        ]);
        let asked = request(ApiKey::DescribeProducers, 0, &body);
        let frame = answer(&t.broker, &asked, &access).unwrap();
        let (_, answer): (_, DescribeProducersResponse) = read_response(frame, 0);
        let codes: Vec<i16> = answer
            .topics
            .iter()
            .map(|t| t.partitions[0].error_code)
            .collect();
        assert_eq!(codes, [ResponseError::TopicAuthorizationFailed.code(), 0]);
    }

    #[tokio::test]
    async fn a_partition_named_again_is_answered_once() {
        let t = broker_with(&["t"], 2, 0).await;
        let topic = |indexes: Vec<i32>| {
            TopicRequest::default()
                .with_name(topic_name("t"))
                .with_partition_indexes(indexes)
        };
        let topics = vec![topic(vec![0, 1, 0]), topic(vec![1, 0])];
        let body = DescribeProducersRequest::default().with_topics(topics);
        let asked = request(ApiKey::DescribeProducers, 0, &body);
        let frame = answer(&t.broker, &asked, &open()).unwrap();
        let (_, answer): (_, DescribeProducersResponse) = read_response(frame, 0);
        let answered: Vec<(&str, i32)> = answer
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.as_str(), p.partition_index))
            })
            .collect();
        assert_eq!(answered, [("t", 0), ("t", 1)]);
    }
}
