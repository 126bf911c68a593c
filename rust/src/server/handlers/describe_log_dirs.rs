//! DescribeLogDirs v0–4: what each partition this broker owns occupies in object storage (its
//! committed segments and the write-ahead runs above them), reported as one log directory named
//! after the store. Clients ask every broker and add the answers up, as for Kafka's replicas;
//! each partition is reported by its owner only. The store has no capacity to report: total
//! and usable bytes are -1 (unknown, KIP-827). It needs DESCRIBE on the cluster, else no
//! results (and from v3 the error CLUSTER_AUTHORIZATION_FAILED), as in Kafka. A partition
//! named more than once is reported once, as Kafka reads the request into a set.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::{Broker, Topic};
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::repeats::merge_topics;

pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeLogDirsRequest = request.body()?;
    if !access.allows_cluster(Operation::Describe) {
        let mut response = DescribeLogDirsResponse::default();
        // The top-level error exists from v3.
        if request.api_version >= 3 {
            response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        }
        return encode_response(request.correlation_id, request.api_version, &response);
    }
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
        Some(mut topics) => {
            merge_topics(&mut topics);
            topics
                .into_iter()
                .filter_map(|t| Some((broker.topic(&t.topic.0)?, t.partitions)))
                .collect()
        }
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

/// Dispatch's entry for DescribeLogDirs (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).await.into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::{Cluster, Topic};
    use crate::auth::acl::CLUSTER_NAME;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::handlers::testing::{alice, allow, broker_with, open};

    #[tokio::test]
    async fn log_dirs_need_describe_on_the_cluster() {
        let t = broker_with(&["t"], 1, 5).await;
        let body = DescribeLogDirsRequest::default().with_topics(None);
        // Topic rights do not count.
        let reader = alice(vec![allow(Topic, "t", Operation::Read)]);
        let denied = ResponseError::ClusterAuthorizationFailed.code();
        for (version, code) in [(2, 0), (3, denied), (4, denied)] {
            let asked = request(ApiKey::DescribeLogDirs, version, &body);
            let frame = answer(&t.broker, &asked, &reader).await.unwrap();
            let (_, answer): (_, DescribeLogDirsResponse) = read_response(frame, version);
            assert_eq!(answer.error_code, code, "v{version}");
            assert!(answer.results.is_empty(), "v{version}");
        }
        let admin = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::Describe)]);
        let asked = request(ApiKey::DescribeLogDirs, 4, &body);
        let frame = answer(&t.broker, &asked, &admin).await.unwrap();
        let (_, answer): (_, DescribeLogDirsResponse) = read_response(frame, 4);
        assert_eq!(answer.error_code, 0);
        assert_eq!(answer.results[0].topics.len(), 1);
    }

    #[tokio::test]
    async fn a_partition_named_again_is_reported_once() {
        let t = broker_with(&["t"], 2, 5).await;
        let topic = |partitions: Vec<i32>| {
            DescribableLogDirTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(partitions)
        };
        let topics = vec![topic(vec![0, 1, 0]), topic(vec![0])];
        let body = DescribeLogDirsRequest::default().with_topics(Some(topics));
        let asked = request(ApiKey::DescribeLogDirs, 4, &body);
        let frame = answer(&t.broker, &asked, &open()).await.unwrap();
        let (_, answer): (_, DescribeLogDirsResponse) = read_response(frame, 4);
        let reported: Vec<(&str, i32)> = answer.results[0]
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.as_str(), p.partition_index))
            })
            .collect();
        assert_eq!(reported, [("t", 0), ("t", 1)]);
    }
}
