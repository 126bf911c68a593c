//! DescribeTopicPartitions v0 (KIP-966): the topics and partitions recent admin clients
//! (`describe_topics`) ask for instead of Metadata, with leaders and epochs from the cluster
//! view as Metadata has them. Kafka's paging: topics in name order (every topic when none is
//! named), at most `response_partition_limit` partitions per answer (1 to Kafka's default
//! limit of 2000), starting at the cursor; when the limit cuts the answer, `next_cursor` says
//! where the next request starts. A cursor whose topic was not asked for, or with a negative
//! partition, is INVALID_REQUEST for every topic asked for, as Kafka answers it.
//!
//! Authorization as in Kafka: a topic needs DESCRIBE. Listing every topic leaves out those
//! without; a topic named without it is answered TOPIC_AUTHORIZATION_FAILED after the others
//! (whether it exists or not, no id). Each topic answered otherwise carries its authorized
//! operations.

use std::collections::BTreeSet;

use futures::FutureExt;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition as WirePartition,
    DescribeTopicPartitionsResponseTopic as WireTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse,
};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::metadata::{partition_leader, OPERATIONS_UNKNOWN};
use super::{code, topic_operations, Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::topic_rules::validate_topic_name;
use crate::broker::Broker;
use crate::cluster::state::ClusterState;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::topic_name;

/// Kafka's `max.request.partition.size.limit` default: the most partitions one answer holds.
const MAX_PARTITIONS: i32 = 2000;

pub(crate) fn answer(
    broker: &Broker,
    request: &Request,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeTopicPartitionsRequest = request.body()?;
    let response = describe(broker, &body, access).unwrap_or_else(|error| refused(&body, error));
    encode_response(request.correlation_id, request.api_version, &response)
}

fn describe(
    broker: &Broker,
    body: &DescribeTopicPartitionsRequest,
    access: &Access,
) -> Result<DescribeTopicPartitionsResponse, ResponseError> {
    let every_topic = body.topics.is_empty();
    let asked: BTreeSet<String> = if every_topic {
        broker
            .topics()
            .iter()
            .map(|t| t.record.name.clone())
            .collect()
    } else {
        body.topics.iter().map(|t| t.name.to_string()).collect()
    };
    let (first, start) = match &body.cursor {
        None => (None, 0),
        Some(c) => {
            let topic = c.topic_name.to_string();
            if (!every_topic && !asked.contains(&topic)) || c.partition_index < 0 {
                return Err(ResponseError::InvalidRequest);
            }
            (Some(topic), c.partition_index)
        }
    };
    let cluster = broker.cluster();
    let mut remaining = body.response_partition_limit.clamp(1, MAX_PARTITIONS);
    let mut response = DescribeTopicPartitionsResponse::default();
    let from = first.as_deref().unwrap_or("");
    // Kafka checks each topic as its answer reaches it and lists the refused ones last.
    let mut denied = Vec::new();
    for name in asked.iter().filter(|n| n.as_str() >= from) {
        if !access.allows_topic(Operation::Describe, name) {
            if !every_topic {
                denied.push(failed(name, ResponseError::TopicAuthorizationFailed));
            }
            continue;
        }
        if remaining == 0 {
            // The previous topics are complete: the next answer starts with this one.
            response.next_cursor = Some(cursor(name, 0));
            break;
        }
        let Some(topic) = broker.topic(name) else {
            // A topic that went between listing and lookup is left out, as Kafka does.
            if !every_topic {
                let operations = topic_operations(access, name);
                response
                    .topics
                    .push(unknown(name).with_topic_authorized_operations(operations));
            }
            continue;
        };
        let count = topic.record.partitions;
        let begin = if Some(name) == first.as_ref() {
            start
        } else {
            0
        };
        // A cursor past the topic's end answers it without partitions.
        let end = count.min(begin.saturating_add(remaining)).max(begin);
        let partitions = (begin..end).map(|p| partition(&cluster, name, p));
        remaining -= end - begin;
        response.topics.push(
            WireTopic::default()
                .with_name(Some(topic_name(name)))
                .with_topic_id(topic.record.id)
                .with_partitions(partitions.collect())
                .with_topic_authorized_operations(topic_operations(access, name)),
        );
        if end < count {
            response.next_cursor = Some(cursor(name, end));
            break;
        }
    }
    response.topics.extend(denied);
    Ok(response)
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(topic_name(topic))
        .with_partition_index(partition)
}

/// A partition as Metadata shows it: its owner leads it, and its replicas are the owner and
/// the brokers other racks read it through (`ClusterState::replicas`).
fn partition(cluster: &ClusterState, topic: &str, index: i32) -> WirePartition {
    let (leader, epoch) = partition_leader(cluster, topic, index);
    let replicas = leader
        .iter()
        .flat_map(|&id| cluster.replicas(topic, index, id));
    let replicas: Vec<BrokerId> = replicas.map(BrokerId).collect();
    WirePartition::default()
        .with_error_code(code(leader.err()))
        .with_partition_index(index)
        .with_leader_id(BrokerId(leader.unwrap_or(-1)))
        .with_leader_epoch(epoch)
        .with_isr_nodes(replicas.clone())
        .with_replica_nodes(replicas)
        .with_eligible_leader_replicas(Some(vec![]))
        .with_last_known_elr(Some(vec![]))
}

/// A topic asked for by name that does not exist (or cannot: INVALID_TOPIC_EXCEPTION).
fn unknown(name: &str) -> WireTopic {
    let error = match validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(e) => e.code,
    };
    failed(name, error)
}

fn failed(name: &str, error: ResponseError) -> WireTopic {
    WireTopic::default()
        .with_error_code(error.code())
        .with_name(Some(topic_name(name)))
        .with_topic_id(Uuid::nil())
        .with_topic_authorized_operations(OPERATIONS_UNKNOWN)
}

/// Kafka's answer to a request it refuses as a whole: the error for every topic asked for.
fn refused(
    body: &DescribeTopicPartitionsRequest,
    error: ResponseError,
) -> DescribeTopicPartitionsResponse {
    let topics = body.topics.iter().map(|t| failed(&t.name, error));
    DescribeTopicPartitionsResponse::default().with_topics(topics.collect())
}

/// Dispatch's entry for DescribeTopicPartitions (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.access).into() }.boxed()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::describe_topic_partitions_request::{
        Cursor as AskedCursor, TopicRequest,
    };
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::Topic;
    use crate::control::testing::advertised;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::handlers::testing::{alice, allow, open};

    fn ask(
        broker: &Broker,
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
    ) -> DescribeTopicPartitionsResponse {
        ask_as(broker, topics, limit, cursor, &open())
    }

    fn ask_as(
        broker: &Broker,
        topics: &[&str],
        limit: i32,
        cursor: Option<(&str, i32)>,
        access: &Access,
    ) -> DescribeTopicPartitionsResponse {
        let body = DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(topic_name(t)))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                AskedCursor::default()
                    .with_topic_name(topic_name(t))
                    .with_partition_index(p)
            }));
        let asked = request(ApiKey::DescribeTopicPartitions, 0, &body);
        read_response(answer(broker, &asked, access).unwrap(), 0).1
    }

    /// (topic, error, [partition indexes]) of each topic answered, and the next cursor.
    type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

    fn page(response: &DescribeTopicPartitionsResponse) -> Page {
        let topics = response.topics.iter().map(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            let partitions = t.partitions.iter().map(|p| p.partition_index).collect();
            (name, t.error_code, partitions)
        });
        let next = response
            .next_cursor
            .as_ref()
            .map(|c| (c.topic_name.to_string(), c.partition_index));
        (topics.collect(), next)
    }

    fn topics(pairs: &[(&str, &[i32])]) -> Vec<(String, i16, Vec<i32>)> {
        pairs
            .iter()
            .map(|(t, p)| (t.to_string(), 0, p.to_vec()))
            .collect()
    }

    async fn broker_with_topics() -> crate::broker::tests::TestBroker {
        let t = crate::broker::tests::broker(1 << 20).await;
        for (name, partitions) in [("b", 3), ("a", 2), ("c", 1)] {
            let made = t.broker.create_topic(name, partitions, BTreeMap::new());
            made.await.unwrap();
        }
        t
    }

    #[tokio::test]
    async fn describes_topics_in_name_order_with_their_partitions() {
        assert_eq!(advertised(ApiKey::DescribeTopicPartitions), 0..=0);
        let t = broker_with_topics().await;
        let all = ask(&t.broker, &[], 2000, None);
        assert_eq!(
            page(&all),
            (
                topics(&[("a", &[0, 1]), ("b", &[0, 1, 2]), ("c", &[0])]),
                None
            )
        );
        let a = &all.topics[0];
        assert_eq!(a.topic_id, t.broker.topic("a").unwrap().record.id);
        // Without an authorizer every topic operation is allowed.
        assert_eq!(a.topic_authorized_operations, 0b1101_1111_1000);
        for p in &a.partitions {
            assert_eq!((p.leader_id, p.error_code), (BrokerId(1), 0));
            assert_eq!(
                (&p.replica_nodes[..], &p.isr_nodes[..]),
                (&[BrokerId(1)][..], &[BrokerId(1)][..])
            );
            assert!(p.leader_epoch >= 0);
        }
        let some = ask(
            &t.broker,
            &["c", "nothere", "a", "c", "bad/name"],
            2000,
            None,
        );
        let (got, next) = page(&some);
        assert_eq!(next, None);
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let invalid = ResponseError::InvalidTopicException.code();
        assert_eq!(
            got,
            [
                ("a".to_string(), 0, vec![0, 1]),
                ("bad/name".to_string(), invalid, vec![]),
                ("c".to_string(), 0, vec![0]),
                ("nothere".to_string(), unknown, vec![]),
            ]
        );
        assert!(some.topics[1].topic_id.is_nil());
    }

    #[tokio::test]
    async fn pages_by_the_partition_limit_from_the_cursor() {
        let t = broker_with_topics().await;
        let first = page(&ask(&t.broker, &[], 3, None));
        assert_eq!(
            first,
            (
                topics(&[("a", &[0, 1]), ("b", &[0])]),
                Some(("b".into(), 1))
            )
        );
        let second = page(&ask(&t.broker, &[], 3, Some(("b", 1))));
        assert_eq!(second, (topics(&[("b", &[1, 2]), ("c", &[0])]), None));
        // A limit ending exactly at a topic's end: the next topic starts the next page.
        let exact = page(&ask(&t.broker, &["a", "b", "c"], 2, None));
        assert_eq!(exact, (topics(&[("a", &[0, 1])]), Some(("b".into(), 0))));
        // Below 1 counts as 1; a cursor past a topic's end answers it without partitions.
        let one = page(&ask(&t.broker, &["b"], 0, Some(("b", 2))));
        assert_eq!(one, (topics(&[("b", &[2])]), None));
        let past = page(&ask(&t.broker, &["b", "c"], 5, Some(("b", 9))));
        assert_eq!(past, (topics(&[("b", &[]), ("c", &[0])]), None));
    }

    #[tokio::test]
    async fn a_cursor_outside_the_request_is_invalid_for_every_topic_asked() {
        let t = broker_with_topics().await;
        let invalid = ResponseError::InvalidRequest.code();
        for (asked, cursor) in [(&["a", "c"][..], ("b", 0)), (&["a", "b"][..], ("a", -1))] {
            let (got, next) = page(&ask(&t.broker, asked, 10, Some(cursor)));
            let want: Vec<_> = asked
                .iter()
                .map(|n| (n.to_string(), invalid, vec![]))
                .collect();
            assert_eq!((got, next), (want, None), "{asked:?} from {cursor:?}");
        }
        let (got, _) = page(&ask(&t.broker, &[], 10, Some(("a", -1))));
        assert!(got.is_empty(), "nothing was asked by name: {got:?}");
    }

    #[tokio::test]
    async fn topics_without_describe_are_left_out_or_refused_last() {
        let t = broker_with_topics().await;
        let access = alice(vec![
            allow(Topic, "a", Operation::Describe),
            allow(Topic, "c", Operation::Read),
        ]);
        let all = ask_as(&t.broker, &[], 2000, None, &access);
        assert_eq!(page(&all), (topics(&[("a", &[0, 1]), ("c", &[0])]), None));
        let operations: Vec<i32> = all
            .topics
            .iter()
            .map(|t| t.topic_authorized_operations)
            .collect();
        // DESCRIBE; READ and the DESCRIBE it implies
        assert_eq!(operations, [1 << 8, 1 << 3 | 1 << 8]);
        // Paging counts only the topics answered: "b" is skipped.
        let first = page(&ask_as(&t.broker, &[], 2, None, &access));
        assert_eq!(first, (topics(&[("a", &[0, 1])]), Some(("c".into(), 0))));
        let named = ask_as(&t.broker, &["nothere", "b", "a"], 2000, None, &access);
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let (got, next) = page(&named);
        assert_eq!(next, None);
        assert_eq!(
            got,
            [
                ("a".to_string(), 0, vec![0, 1]),
                ("b".to_string(), denied, vec![]),
                ("nothere".to_string(), denied, vec![]),
            ]
        );
        assert!(
            named.topics[1].topic_id.is_nil(),
            "no id for a refused topic"
        );
        assert_eq!(
            named.topics[1].topic_authorized_operations,
            OPERATIONS_UNKNOWN
        );
    }
}
