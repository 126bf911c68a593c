//! ListOffsets v0–9: earliest (-2), latest (-1, the high watermark; for isolation level 1,
//! read_committed, the last stable offset, which only the partition's owner knows), the first offset whose
//! record timestamp is at or after the given one, and from v7 the first record with the largest
//! timestamp (-3, KIP-734). v8's earliest local offset (-4, KIP-405) is the log start: every
//! offset is in object storage alike. v9's earliest offset pending upload to remote storage (-5,
//! KIP-1005) does not exist here, as on a Kafka topic without tiered storage: -1.
//! A topic needs DESCRIBE, else each of its partitions gets TOPIC_AUTHORIZATION_FAILED. A
//! partition named more than once is not looked up: each of its entries gets INVALID_REQUEST,
//! as Kafka answers it.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use super::{check_leader_epoch, find_partition, Handling, RequestContext, READ_COMMITTED};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::log::timestamps::{max_timestamp_record, offset_for_timestamp};
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::repeats::repeated;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const EARLIEST_PENDING_UPLOAD: i64 = -5;

pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: ListOffsetsRequest = request.body()?;
    let v0 = request.api_version == 0;
    let named = body.topics.iter().flat_map(|t| {
        let partitions = t.partitions.iter();
        partitions.map(|p| (t.name.clone(), p.partition_index))
    });
    let repeated = repeated(named);
    // The latest offset of a partition owned elsewhere is this broker's view of its end: make
    // it hold every commit made before the request (`Broker::catch_up_with_commits`).
    let latest_of_a_follower = body.topics.iter().any(|t| {
        t.partitions.iter().any(|p| {
            p.timestamp == LATEST
                && find_partition(broker, &t.name.0, p.partition_index)
                    .is_ok_and(|log| !log.is_leader())
        })
    });
    if latest_of_a_follower {
        broker.catch_up_with_commits().await;
    }
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let allowed = access.allows_topic(Operation::Describe, &topic.name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let response = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let refusal = if !allowed {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if repeated.contains(&(topic.name.clone(), p.partition_index)) {
                Some(ResponseError::InvalidRequest)
            } else {
                None
            };
            if let Some(error) = refusal {
                partitions.push(response.with_error_code(error.code()));
                continue;
            }
            let found = lookup(
                broker,
                &topic.name.0,
                p.partition_index,
                p.current_leader_epoch,
                p.timestamp,
                request.api_version,
                body.isolation_level == READ_COMMITTED,
            )
            .await;
            partitions.push(match found {
                Err(error) => response.with_error_code(error.code()),
                // v0 answers with a list of offsets; timestamp and offset exist from v1, the
                // leader epoch from v4 (the codec refuses fields a version does not have).
                Ok((offset, _, _)) if v0 => {
                    response.with_old_style_offsets(if offset >= 0 { vec![offset] } else { vec![] })
                }
                Ok((offset, timestamp, epoch)) => response
                    .with_offset(offset)
                    .with_timestamp(timestamp)
                    .with_leader_epoch(if request.api_version >= 4 { epoch } else { -1 }),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    let response = ListOffsetsResponse::default().with_topics(topics);
    encode_response(request.correlation_id, request.api_version, &response)
}

/// (offset, timestamp, leader epoch) for one partition.
async fn lookup(
    broker: &Arc<Broker>,
    topic: &str,
    index: i32,
    client_epoch: i32,
    timestamp: i64,
    version: i16,
    read_committed: bool,
) -> Result<(i64, i64, i32), ResponseError> {
    let partition = find_partition(broker, topic, index)?;
    check_leader_epoch(broker, &partition, client_epoch)?;
    let epoch = partition.leader_epoch();
    let found = |hit: Option<(i64, i64)>| hit.map_or((-1, -1, -1), |(o, ts)| (o, ts, epoch));
    match timestamp {
        LATEST if read_committed => Ok((partition.last_stable_offset()?, -1, epoch)),
        LATEST => Ok((partition.high_watermark(), -1, epoch)),
        EARLIEST => Ok((partition.log_start_offset(), -1, epoch)),
        MAX_TIMESTAMP if version >= 7 => {
            Ok(found(max_timestamp_record(&broker.log, &partition).await?))
        }
        EARLIEST_LOCAL if version >= 8 => Ok((partition.log_start_offset(), -1, epoch)),
        EARLIEST_PENDING_UPLOAD if version >= 9 => Ok((-1, -1, -1)),
        t if t >= 0 => Ok(found(
            offset_for_timestamp(&broker.log, &partition, t).await?,
        )),
        _ => Err(ResponseError::InvalidRequest),
    }
}

/// Dispatch's entry for ListOffsets (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::auth::acl::ResourceType::Topic;
    use crate::broker::tests::produce_batch;
    use crate::log::batch::tests::stamped_batch;
    use crate::log::retention::delete_records;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    /// (error, offset, timestamp) of one ListOffsets lookup of partition 0 of "t".
    async fn ask(broker: &Arc<Broker>, version: i16, timestamp: i64) -> (i16, i64, i64) {
        let partition = ListOffsetsPartition::default()
            .with_partition_index(0)
            .with_timestamp(timestamp)
            .with_max_num_offsets(1)
            .with_current_leader_epoch(-1);
        let topic = ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![partition]);
        let body = ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(vec![topic]);
        let asked = request(ApiKey::ListOffsets, version, &body);
        let frame = answer(broker, asked, &open()).await.unwrap();
        let (_, answer): (_, ListOffsetsResponse) = read_response(frame, version);
        let got = &answer.topics[0].partitions[0];
        let offset = match version {
            0 => got.old_style_offsets.first().copied().unwrap_or(-1),
            _ => got.offset,
        };
        (got.error_code, offset, got.timestamp)
    }

    #[tokio::test]
    async fn the_largest_timestamp_counts_only_records_from_the_log_start() {
        let t = broker_with(&["t"], 1, 0).await;
        let now = crate::log::partition::now_ms();
        // offsets 0..=2, then 3..=4: the largest timestamp is at offset 1
        produce_batch(
            &t.broker,
            "t",
            0,
            &stamped_batch(&[now - 30, now - 10, now - 20]),
        )
        .await;
        produce_batch(&t.broker, "t", 0, &stamped_batch(&[now - 25, now - 22])).await;
        assert_eq!(ask(&t.broker, 7, MAX_TIMESTAMP).await, (0, 1, now - 10));
        // older versions know no -3
        assert_eq!(
            ask(&t.broker, 6, MAX_TIMESTAMP).await.0,
            ResponseError::InvalidRequest.code()
        );
        assert_eq!(ask(&t.broker, 8, EARLIEST_LOCAL).await.1, 0);
        assert_eq!(
            ask(&t.broker, 9, EARLIEST_PENDING_UPLOAD).await,
            (0, -1, -1)
        );
        // The log now starts inside the first batch, past its largest record.
        let log = t.broker.topic("t").unwrap().partitions[0].current();
        assert_eq!(delete_records(&t.broker.log, &log, 2).await, Ok(2));
        assert_eq!(ask(&t.broker, 9, MAX_TIMESTAMP).await, (0, 2, now - 20));
        assert_eq!(ask(&t.broker, 9, EARLIEST_LOCAL).await.1, 2);
    }

    /// Timestamp deltas are varlongs: records more than 2^31 ms from their batch's base
    /// timestamp are found by timestamp, as the largest, and as the largest from a log start
    /// inside their batch (its records decoded).
    #[tokio::test]
    async fn timestamps_far_from_their_batch_base_are_found() {
        const FAR: i64 = 999_999_999_999;
        const MIDDLE: i64 = 500_000_000_000;
        let t = broker_with(&["t"], 1, 0).await;
        produce_batch(&t.broker, "t", 0, &stamped_batch(&[1234, FAR, MIDDLE])).await;
        assert_eq!(ask(&t.broker, 9, 1235).await, (0, 1, FAR));
        assert_eq!(ask(&t.broker, 9, FAR).await, (0, 1, FAR));
        assert_eq!(ask(&t.broker, 9, FAR + 1).await, (0, -1, -1));
        assert_eq!(ask(&t.broker, 9, MAX_TIMESTAMP).await, (0, 1, FAR));
        let log = t.broker.topic("t").unwrap().partitions[0].current();
        assert_eq!(delete_records(&t.broker.log, &log, 2).await, Ok(2));
        assert_eq!(ask(&t.broker, 9, MAX_TIMESTAMP).await, (0, 2, MIDDLE));
        assert_eq!(ask(&t.broker, 9, 1235).await, (0, 2, MIDDLE));
    }

    #[tokio::test]
    async fn earliest_and_latest_at_every_served_version() {
        let t = broker_with(&["t"], 1, 5).await;
        for version in 0..=9 {
            assert_eq!(ask(&t.broker, version, LATEST).await.1, 5, "v{version}");
            assert_eq!(ask(&t.broker, version, EARLIEST).await.1, 0, "v{version}");
        }
    }

    /// A ListOffsets of the latest offset of these partitions (by topic).
    fn latest_of(topics: &[(&'static str, &[i32])]) -> ListOffsetsRequest {
        let topics = topics.iter().map(|&(name, indexes)| {
            let partitions = indexes.iter().map(|&index| {
                ListOffsetsPartition::default()
                    .with_partition_index(index)
                    .with_timestamp(LATEST)
                    .with_current_leader_epoch(-1)
            });
            ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(name)))
                .with_partitions(partitions.collect())
        });
        ListOffsetsRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_topics(topics.collect())
    }

    /// (topic, partition, error, offset) of each partition answered (v9).
    async fn answered(
        broker: &Arc<Broker>,
        body: &ListOffsetsRequest,
        access: &Access,
    ) -> Vec<(String, i32, i16, i64)> {
        let asked = request(ApiKey::ListOffsets, 9, body);
        let frame = answer(broker, asked, access).await.unwrap();
        let (_, answer): (_, ListOffsetsResponse) = read_response(frame, 9);
        let partitions = answer.topics.iter().flat_map(|t| {
            let name = t.name.to_string();
            let partitions = t.partitions.iter();
            partitions.map(move |p| (name.clone(), p.partition_index, p.error_code, p.offset))
        });
        partitions.collect()
    }

    fn rows(rows: &[(&str, i32, i16, i64)]) -> Vec<(String, i32, i16, i64)> {
        rows.iter()
            .map(|&(n, p, e, o)| (n.to_string(), p, e, o))
            .collect()
    }

    #[tokio::test]
    async fn a_topic_without_describe_is_refused_for_each_partition() {
        let t = broker_with(&["t", "u"], 2, 5).await;
        let body = latest_of(&[("t", &[0, 1]), ("u", &[0, 1]), ("missing", &[0, 1])]);
        // READ implies DESCRIBE
        let access = alice(vec![allow(Topic, "u", Operation::Read)]);
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let want = rows(&[
            ("t", 0, denied, -1),
            ("t", 1, denied, -1),
            ("u", 0, 0, 5),
            ("u", 1, 0, 0),
            ("missing", 0, denied, -1),
            ("missing", 1, denied, -1),
        ]);
        assert_eq!(answered(&t.broker, &body, &access).await, want);
    }

    #[tokio::test]
    async fn a_partition_named_again_is_refused_each_time() {
        let t = broker_with(&["t"], 2, 5).await;
        let body = latest_of(&[("t", &[0, 1, 0]), ("t", &[0])]);
        let invalid = ResponseError::InvalidRequest.code();
        let want = rows(&[
            ("t", 0, invalid, -1),
            ("t", 1, 0, 0),
            ("t", 0, invalid, -1),
            ("t", 0, invalid, -1),
        ]);
        assert_eq!(answered(&t.broker, &body, &open()).await, want);
    }
}
