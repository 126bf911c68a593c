//! DescribeProducers v0 (KIP-664): the idempotent producers each partition's owner remembers,
//! with their epoch, last sequence and last write, as `kafka-transactions.sh
//! describe-producers` and admin clients list them. Transactions are not supported, so there is
//! never a coordinator epoch or an open transaction (-1).

use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::find_partition;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

pub fn handle(broker: &Arc<Broker>, request: &Request) -> Result<bytes::Bytes, WireError> {
    let body: DescribeProducersRequest = request.body()?;
    let topics = body.topics.into_iter().map(|topic| {
        let partitions = topic.partition_indexes.iter().map(|&index| {
            let answer = PartitionResponse::default().with_partition_index(index);
            let producers =
                find_partition(broker, &topic.name.0, index).and_then(|p| p.active_producers());
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
                                .with_current_txn_start_offset(-1)
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
