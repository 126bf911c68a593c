//! DeleteRecords v0–2 (KIP-107): each partition's owner moves its log start to the requested
//! offset (-1: the high watermark) and answers the new low watermark; the segments wholly below
//! it are deleted as retention deletes them (`log::retention::delete_records`). A partition
//! this broker does not own gets NOT_LEADER_OR_FOLLOWER, an offset past the high watermark
//! OFFSET_OUT_OF_RANGE, as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::find_partition;
use crate::broker::Broker;
use crate::log::retention::delete_records;
use crate::protocol::header::{encode_response, Request, WireError};

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<bytes::Bytes, WireError> {
    let body: DeleteRecordsRequest = request.body()?;
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let answer = DeleteRecordsPartitionResult::default()
                .with_partition_index(p.partition_index)
                .with_low_watermark(-1);
            let deleted = match find_partition(broker, &topic.name.0, p.partition_index) {
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
