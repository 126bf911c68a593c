//! OffsetForLeaderEpoch v0–4: where a leader epoch's records end, from the partition's epoch
//! history in the metadata store – so any broker answers, owner or not. Consumers ask after a
//! leader change to detect a truncated log (KIP-320); `replica_id` (v3+) is ignored, there are
//! no follower replicas. As in Kafka, CLUSTER_ACTION (a broker's) or DESCRIBE on a topic lets
//! a client ask for its partitions; else they get TOPIC_AUTHORIZATION_FAILED.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;

use super::{check_leader_epoch, find_partition, Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::meta::catalog::PartitionRecord;
use crate::protocol::header::{encode_response, Request, WireError};

/// Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
const UNDEFINED: (i32, i64) = (-1, -1);

pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: OffsetForLeaderEpochRequest = request.body()?;
    // The latest epoch of a partition owned elsewhere ends where this broker's view of it
    // does: make that hold every commit made before the request (a consumer that finds an
    // end below its position takes the log for truncated).
    let of_a_follower = body.topics.iter().any(|t| {
        t.partitions.iter().any(|p| {
            find_partition(broker, &t.topic, p.partition).is_ok_and(|log| !log.is_leader())
        })
    });
    if of_a_follower {
        broker.catch_up_with_commits().await;
    }
    let version = request.api_version;
    let cluster_action = access.allows_cluster(Operation::ClusterAction);
    let topics = body.topics.into_iter().map(|topic| {
        let allowed = cluster_action || access.allows_topic(Operation::Describe, &topic.topic);
        let partitions = topic.partitions.iter().map(|p| {
            // The answer's defaults are UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
            let answer = EpochEndOffset::default().with_partition(p.partition);
            if !allowed {
                return answer.with_error_code(ResponseError::TopicAuthorizationFailed.code());
            }
            // v2+ carry the client's view of the current epoch; before, the codec reads -1.
            let found = end_offset(
                broker,
                &topic.topic,
                p.partition,
                p.current_leader_epoch,
                p.leader_epoch,
            );
            match found {
                // The epoch of the answer exists from v1.
                Ok((epoch, end_offset)) => answer
                    .with_leader_epoch(if version >= 1 { epoch } else { -1 })
                    .with_end_offset(end_offset),
                Err(error) => answer.with_error_code(error.code()),
            }
        });
        OffsetForLeaderTopicResult::default()
            .with_topic(topic.topic.clone())
            .with_partitions(partitions.collect())
    });
    let response = OffsetForLeaderEpochResponse::default().with_topics(topics.collect());
    encode_response(request.correlation_id, version, &response)
}

/// (epoch, end offset) for one partition, after the leader-epoch check Fetch makes.
fn end_offset(
    broker: &Broker,
    topic: &str,
    index: i32,
    client_epoch: i32,
    requested: i32,
) -> Result<(i32, i64), ResponseError> {
    let partition = find_partition(broker, topic, index)?;
    check_leader_epoch(broker, &partition, client_epoch)?;
    // The newer of this broker's copy of the record and the cluster view's: the owner's own
    // commits reach it before they come back through the metadata watch.
    let (mut record, revision) = partition.committed_record();
    if let Some(view) = broker.cluster().partition(topic, index) {
        if let Some(newer) = view.record.as_ref().filter(|_| view.revision > revision) {
            record = newer.clone();
        }
    }
    // The latest epoch ends at the committed end, which write-ahead commits carry past the
    // record's.
    record.high_watermark = record.high_watermark.max(partition.high_watermark());
    Ok(end_offset_for(&record, requested))
}

/// Kafka's LeaderEpochFileCache.endOffsetFor over the partition's epoch history: the latest
/// epoch ends at the high watermark; an older one where the next epoch after it begins,
/// answered with the largest epoch at or below the one asked for; an epoch above the latest,
/// below the first, or undefined has no end: (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
pub(crate) fn end_offset_for(record: &PartitionRecord, requested: i32) -> (i32, i64) {
    let history = &record.epoch_history;
    let (Some(first), Some(latest)) = (history.first(), history.last()) else {
        return UNDEFINED;
    };
    if requested == latest.epoch {
        return (latest.epoch, record.high_watermark);
    }
    if requested > latest.epoch || requested < first.epoch {
        return UNDEFINED;
    }
    // first.epoch <= requested < latest.epoch: a floor entry and a later entry both exist.
    let next = history.partition_point(|e| e.epoch <= requested);
    (history[next - 1].epoch, history[next].start_offset)
}

/// Dispatch's entry for OffsetForLeaderEpoch (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::{Cluster, Topic};
    use crate::auth::acl::CLUSTER_NAME;
    use crate::broker::tests::{broker, produce};
    use crate::meta::catalog::EpochStart;
    use crate::protocol::header::testing::{read_response, request};
    use crate::protocol::topic_name;
    use crate::server::apis::supported;
    use crate::server::handlers::testing::{alice, allow, open};

    /// (topic, partition, error, epoch, end offset) of every answer to the asked partitions
    /// (topic, partition, current leader epoch, leader epoch), at `version`.
    async fn ask(
        broker: &Arc<Broker>,
        version: i16,
        asked: &[(&str, i32, i32, i32)],
    ) -> Vec<(String, i32, i16, i32, i64)> {
        ask_as(broker, version, asked, &open()).await
    }

    async fn ask_as(
        broker: &Arc<Broker>,
        version: i16,
        asked: &[(&str, i32, i32, i32)],
        access: &Access,
    ) -> Vec<(String, i32, i16, i32, i64)> {
        let topics = asked.iter().map(|&(topic, partition, current, epoch)| {
            OffsetForLeaderTopic::default()
                .with_topic(topic_name(topic))
                .with_partitions(vec![OffsetForLeaderPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(if version >= 2 { current } else { -1 })
                    .with_leader_epoch(epoch)])
        });
        let body = OffsetForLeaderEpochRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(if version >= 3 {
                2
            } else {
                -1
            }))
            .with_topics(topics.collect());
        let frame = answer(
            broker,
            &request(ApiKey::OffsetForLeaderEpoch, version, &body),
            access,
        )
        .await;
        let (_, response): (_, OffsetForLeaderEpochResponse) =
            read_response(frame.unwrap(), version);
        let mut answers = Vec::new();
        for topic in response.topics {
            for p in topic.partitions {
                let name = topic.topic.to_string();
                answers.push((
                    name,
                    p.partition,
                    p.error_code,
                    p.leader_epoch,
                    p.end_offset,
                ));
            }
        }
        answers
    }

    #[tokio::test]
    async fn any_broker_answers_from_the_partitions_epoch_history() {
        let t = broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("t", 2, BTreeMap::new()).await.unwrap();
        // claimed by this broker: history [(0, 0), (1, 0)], then 4 records in epoch 1
        assert_eq!(produce(b, "t", 0, 4).await, 0);
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let range = supported(ApiKey::OffsetForLeaderEpoch).unwrap();
        for v in range.min..=range.max {
            let epoch = |e: i32| if v >= 1 { e } else { -1 };
            let answers = ask(
                b,
                v,
                &[
                    ("t", 0, 1, 1),
                    ("t", 0, -1, 0),
                    ("t", 0, -1, 5),
                    ("t", 1, -1, 1),
                    ("t", 2, -1, 1),
                    ("missing", 0, -1, 1),
                ],
            )
            .await;
            let expected = [
                ("t", 0, 0, epoch(1), 4),
                ("t", 0, 0, epoch(0), 0),
                ("t", 0, 0, -1, -1),
                ("t", 1, 0, epoch(1), 0),
                ("t", 2, unknown, -1, -1),
                ("missing", 0, unknown, -1, -1),
            ];
            let expected: Vec<_> = expected
                .iter()
                .map(|&(t, p, e, epoch, end)| (t.to_string(), p, e, epoch, end))
                .collect();
            assert_eq!(answers, expected, "v{v}");
        }
    }

    #[tokio::test]
    async fn the_current_leader_epoch_is_checked_from_v2() {
        let t = broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("t", 1, BTreeMap::new()).await.unwrap();
        let fenced = ResponseError::FencedLeaderEpoch.code();
        let unknown_epoch = ResponseError::UnknownLeaderEpoch.code();
        for v in 2..=4 {
            let errors: Vec<_> = ask(b, v, &[("t", 0, 0, 1), ("t", 0, 9, 1), ("t", 0, 1, 1)])
                .await
                .into_iter()
                .map(|answer| answer.2)
                .collect();
            assert_eq!(errors, [fenced, unknown_epoch, 0], "v{v}");
        }
        // older versions carry no current epoch: nothing to check
        let answers = ask(b, 1, &[("t", 0, 0, 1)]).await;
        assert_eq!(answers[0].2, 0);
    }

    #[tokio::test]
    async fn a_client_needs_describe_on_the_topic_or_cluster_action() {
        let t = broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("t", 1, BTreeMap::new()).await.unwrap();
        b.create_topic("u", 1, BTreeMap::new()).await.unwrap();
        let asked = [("t", 0, -1, 1), ("u", 0, -1, 1), ("missing", 0, -1, 1)];
        let errors = |answers: Vec<(String, i32, i16, i32, i64)>| -> Vec<i16> {
            answers.into_iter().map(|answer| answer.2).collect()
        };
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let consumer = alice(vec![allow(Topic, "u", Operation::Describe)]);
        let answers = ask_as(b, 4, &asked, &consumer).await;
        assert_eq!(errors(answers), [denied, 0, denied]);
        let follower = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::ClusterAction)]);
        let answers = ask_as(b, 4, &asked, &follower).await;
        assert_eq!(errors(answers), [0, 0, unknown]);
    }

    fn record(history: &[(i32, i64)], high_watermark: i64) -> PartitionRecord {
        PartitionRecord {
            leader_epoch: history.last().map_or(0, |e| e.0),
            epoch_history: history
                .iter()
                .map(|&(epoch, start_offset)| EpochStart {
                    epoch,
                    start_offset,
                })
                .collect(),
            log_start_offset: 0,
            high_watermark,
            segment_end: None,
            producer_snapshot: None,
            cleaned: None,
        }
    }

    #[test]
    fn the_latest_epoch_ends_at_the_high_watermark() {
        let r = record(&[(0, 0), (1, 10), (4, 25)], 40);
        assert_eq!(end_offset_for(&r, 4), (4, 40));
        let fresh = record(&[(0, 0)], 0);
        assert_eq!(end_offset_for(&fresh, 0), (0, 0));
    }

    #[test]
    fn an_older_epoch_ends_where_the_next_one_starts() {
        let r = record(&[(0, 0), (1, 10), (4, 25)], 40);
        assert_eq!(end_offset_for(&r, 0), (0, 10));
        assert_eq!(end_offset_for(&r, 1), (1, 25));
        // epochs 2 and 3 never led this partition: the largest epoch below answers
        assert_eq!(end_offset_for(&r, 2), (1, 25));
        assert_eq!(end_offset_for(&r, 3), (1, 25));
    }

    #[test]
    fn epochs_that_wrote_nothing_end_where_they_began() {
        // claimed twice without writes in between (epochs 2 and 3 both start at 7)
        let r = record(&[(0, 0), (1, 0), (2, 7), (3, 7)], 9);
        assert_eq!(end_offset_for(&r, 0), (0, 0));
        assert_eq!(end_offset_for(&r, 1), (1, 7));
        assert_eq!(end_offset_for(&r, 2), (2, 7));
        assert_eq!(end_offset_for(&r, 3), (3, 9));
    }

    #[test]
    fn unknown_epochs_have_no_end() {
        let r = record(&[(2, 5), (3, 8)], 12);
        assert_eq!(end_offset_for(&r, 4), UNDEFINED, "above the latest");
        assert_eq!(end_offset_for(&r, 1), UNDEFINED, "below the first");
        assert_eq!(end_offset_for(&r, -1), UNDEFINED, "undefined");
        assert_eq!(end_offset_for(&record(&[], 0), 0), UNDEFINED, "no history");
    }
}
