//! DeleteRecords v0–2 (KIP-107): each partition's owner moves its log start to the requested
//! offset (-1: the high watermark) and answers the new low watermark; the segments wholly below
//! it are deleted as retention deletes them (`log::retention::delete_records`). A partition
//! this broker does not own gets NOT_LEADER_OR_FOLLOWER, an offset past the high watermark
//! OFFSET_OUT_OF_RANGE, as in Kafka. A topic needs DELETE, else each of its partitions gets
//! TOPIC_AUTHORIZATION_FAILED. A partition named more than once is answered once, with the last
//! offset asked for it, as Kafka reads the request into a map. A topic compacted alone
//! (cleanup.policy=compact) answers POLICY_VIOLATION, as Kafka does.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;

use super::{find_partition, Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::log::retention::delete_records;
use crate::log::topic_config::cleanup_policy;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::repeats::merge_topics;

pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let mut body: DeleteRecordsRequest = request.body()?;
    merge_topics(&mut body.topics);
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let allowed = access.allows_topic(Operation::Delete, &topic.name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let answer = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            let found = match allowed {
                true => find_partition(broker, &topic.name.0, p.partition_index)
                    .and_then(|partition| deletable(broker, &topic.name.0).map(|()| partition)),
                false => Err(ResponseError::TopicAuthorizationFailed),
            };
            let deleted = match found {
                Ok(partition) => delete_records(&broker.log, &partition, p.offset).await,
                Err(error) => Err(error),
            };
            partitions.push(match deleted {
                Ok(low_watermark) => answer.with_low_watermark(low_watermark),
                Err(error) => answer.with_error_code(error.code()),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    let response = DeleteRecordsResponse::default().with_topics(topics);
    encode_response(request.correlation_id, request.api_version, &response)
}

/// Whether records of `topic` may be deleted: not when its cleanup.policy is compact alone, as
/// Kafka answers (POLICY_VIOLATION): the log start of such a log is the cleaner's to keep.
fn deletable(broker: &Broker, topic: &str) -> Result<(), ResponseError> {
    let compact_only = broker
        .topic(topic)
        .is_some_and(|t| !cleanup_policy(&t.record.configs).delete);
    match compact_only {
        true => Err(ResponseError::PolicyViolation),
        false => Ok(()),
    }
}

/// Dispatch's entry for DeleteRecords (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::Topic;
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    #[tokio::test]
    async fn deleting_records_needs_delete_on_the_topic() {
        let t = broker_with(&["t"], 1, 5).await;
        let body = DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(2)])]);
        let asked = request(ApiKey::DeleteRecords, 2, &body);
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let log = || t.broker.topic("t").unwrap().partitions[0].current();
        for (operation, want) in [
            (Operation::Describe, (denied, -1)),
            (Operation::Delete, (0, 2)),
        ] {
            let access = alice(vec![allow(Topic, "t", operation)]);
            let frame = answer(&t.broker, &asked, &access).await.unwrap();
            let (_, answer): (_, DeleteRecordsResponse) = read_response(frame, 2);
            let p = &answer.topics[0].partitions[0];
            assert_eq!((p.error_code, p.low_watermark), want, "{operation:?}");
            assert_eq!(log().log_start_offset(), want.1.max(0), "{operation:?}");
        }
    }

    #[tokio::test]
    async fn a_partition_named_again_is_answered_once_with_the_last_offset() {
        let t = broker_with(&["t"], 1, 5).await;
        let topic = |offsets: &[i64]| {
            let partitions = offsets.iter().map(|&offset| {
                DeleteRecordsPartition::default()
                    .with_partition_index(0)
                    .with_offset(offset)
            });
            DeleteRecordsTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(partitions.collect())
        };
        let body = DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![topic(&[2, 1]), topic(&[3])]);
        let asked = request(ApiKey::DeleteRecords, 2, &body);
        let frame = answer(&t.broker, &asked, &open()).await.unwrap();
        let (_, answer): (_, DeleteRecordsResponse) = read_response(frame, 2);
        let answered: Vec<(&str, i32, i64)> = answer
            .topics
            .iter()
            .flat_map(|t| {
                let partitions = t.partitions.iter();
                partitions.map(|p| (t.name.as_str(), p.partition_index, p.low_watermark))
            })
            .collect();
        assert_eq!(answered, [("t", 0, 3)]);
    }
}
