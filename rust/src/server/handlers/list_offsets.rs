//! ListOffsets v0–4: earliest (-2), latest (-1, the high watermark), or the first offset whose
//! record timestamp is at or after the given one.

use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use super::{check_leader_epoch, find_partition};
use crate::broker::Broker;
use crate::log::reader::offset_for_timestamp;
use crate::protocol::header::{encode_response, Request, WireError};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

pub async fn handle(broker: &Arc<Broker>, request: Request) -> Result<bytes::Bytes, WireError> {
    let body: ListOffsetsRequest = request.body()?;
    let v0 = request.api_version == 0;
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let response = ListOffsetsPartitionResponse::default()
                .with_partition_index(p.partition_index)
                .with_timestamp(-1)
                .with_offset(-1)
                .with_leader_epoch(-1);
            let found = lookup(
                broker,
                &topic.name.0,
                p.partition_index,
                p.current_leader_epoch,
                p.timestamp,
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
) -> Result<(i64, i64, i32), ResponseError> {
    let partition = find_partition(broker, topic, index)?;
    check_leader_epoch(broker, &partition, client_epoch)?;
    let epoch = partition.leader_epoch();
    match timestamp {
        LATEST => Ok((partition.high_watermark(), -1, epoch)),
        EARLIEST => Ok((partition.log_start_offset(), -1, epoch)),
        t if t >= 0 => Ok(offset_for_timestamp(&broker.log, &partition, t)
            .await?
            .map_or((-1, -1, -1), |(offset, ts)| (offset, ts, epoch))),
        _ => Err(ResponseError::InvalidRequest),
    }
}
