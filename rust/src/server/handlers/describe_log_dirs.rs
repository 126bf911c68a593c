//! DescribeLogDirs v0–4: what each partition this broker owns occupies in object storage (its
//! committed segments and the write-ahead runs above them), reported as one log directory named
//! after the store. Clients ask every broker and add the answers up, as for Kafka's replicas;
//! each partition is reported by its owner only. The store has no capacity to report: total
//! and usable bytes are -1 (unknown, KIP-827).

use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::broker::{Broker, Topic};
use crate::protocol::header::{encode_response, Request, WireError};

pub async fn handle(broker: &Arc<Broker>, request: &Request) -> Result<bytes::Bytes, WireError> {
    let body: DescribeLogDirsRequest = request.body()?;
    // None: every topic; otherwise the named partitions of topics that exist.
    let wanted: Vec<(Arc<Topic>, Vec<i32>)> = match body.topics {
        None => broker
            .topics()
            .into_iter()
            .map(|t| {
                let all = (0..t.partitions.len() as i32).collect();
                (t, all)
            })
            .collect(),
        Some(topics) => topics
            .into_iter()
            .filter_map(|t| Some((broker.topic(&t.topic.0)?, t.partitions)))
            .collect(),
    };
    let mut topics = Vec::new();
    for (topic, ids) in wanted {
        let mut partitions = Vec::new();
        for id in ids {
            let Some(slot) = usize::try_from(id)
                .ok()
                .and_then(|i| topic.partitions.get(i))
            else {
                continue;
            };
            let partition = slot.current();
            if !partition.is_leader() {
                continue;
            }
            // Unlisted now (the store is away): left out rather than reported as empty.
            if let Ok(size) = partition.stored_bytes(&broker.log).await {
                partitions.push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(id)
                        .with_partition_size(size as i64)
                        .with_offset_lag(0),
                );
            }
        }
        if !partitions.is_empty() {
            topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.record.name.clone())))
                    .with_partitions(partitions),
            );
        }
    }
    let dir = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(
            broker.log.store.describe().to_string(),
        ))
        .with_topics(topics)
        .with_total_bytes(-1)
        .with_usable_bytes(-1);
    let response = DescribeLogDirsResponse::default().with_results(vec![dir]);
    encode_response(request.correlation_id, request.api_version, &response)
}
