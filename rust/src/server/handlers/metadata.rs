//! Metadata v0–12. v0: an empty topic list means all topics; v1+: null means all and an empty
//! list none (KIP-4). Auto-creation when the broker allows it and the request (v4+) asks for it.
//! Brokers, leaders and epochs come from the cluster view: the owner of each partition leads it
//! (or the broker about to claim it, while nobody does).

use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::code;
use crate::broker::{Broker, Topic};
use crate::cluster::state::ClusterState;
use crate::meta::catalog::BrokerRecord;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::topic_name;

/// "Authorized operations not requested/known" in Kafka's encoding.
pub const OPERATIONS_UNKNOWN: i32 = i32::MIN;

/// `listener`: the one the client came in on; every broker is listed with its endpoint there.
pub async fn handle(
    broker: &Arc<Broker>,
    request: Request,
    listener: &str,
) -> Result<bytes::Bytes, WireError> {
    let body: MetadataRequest = request.body()?;
    let version = request.api_version;
    let may_create =
        broker.config.auto_create_topics && (version < 4 || body.allow_auto_topic_creation);
    let wants_all = match &body.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let topics = if wants_all {
        broker
            .topics()
            .iter()
            .map(|t| describe(t, broker))
            .collect()
    } else {
        let mut described = Vec::new();
        for wanted in body.topics.unwrap_or_default() {
            described.push(
                lookup(
                    broker,
                    wanted.name.map(|n| n.0.to_string()),
                    wanted.topic_id,
                    may_create,
                )
                .await,
            );
        }
        described
    };
    let (brokers, controller) = live_brokers(broker, listener);
    let brokers = brokers.into_iter().map(|b| {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(b.id))
            .with_host(StrBytes::from_string(b.host))
            .with_port(b.port)
    });
    let response = MetadataResponse::default()
        .with_brokers(brokers.collect())
        .with_cluster_id(Some(StrBytes::from_string(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(OPERATIONS_UNKNOWN)
        .with_topics(topics);
    encode_response(request.correlation_id, version, &response)
}

/// A broker as Metadata and DescribeCluster list it.
pub struct ListedBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
}

/// The live brokers of this broker's cluster view that have `listener`, in id order, with
/// their endpoints there, and the id to name as the controller.
pub fn live_brokers(broker: &Broker, listener: &str) -> (Vec<ListedBroker>, i32) {
    let cluster = broker.cluster();
    let own = broker.config.broker_id;
    let own_record = broker.config.broker_record();
    let mut records: Vec<&BrokerRecord> = cluster.brokers.values().collect();
    if !cluster.brokers.contains_key(&own) {
        // Between a lost session and re-registration this broker still answers for itself.
        let at = records.partition_point(|b| b.id < own);
        records.insert(at, &own_record);
    }
    let brokers = records
        .into_iter()
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(ListedBroker {
                id: b.id,
                host: host.to_string(),
                port,
            })
        })
        .collect();
    // The controller is only a name here (no KRaft); the lowest live id is stable and real.
    let controller = cluster.brokers.keys().next().copied().unwrap_or(own);
    (brokers, controller)
}

/// The leader of one partition in a cluster view (the owner, or the broker about to claim
/// it), or LEADER_NOT_AVAILABLE; and its leader epoch.
pub fn partition_leader(
    cluster: &ClusterState,
    topic: &str,
    partition: i32,
) -> (Result<i32, ResponseError>, i32) {
    let leader = cluster
        .leader(topic, partition)
        .ok_or(ResponseError::LeaderNotAvailable);
    (leader, cluster.leader_epoch(topic, partition))
}

async fn lookup(
    broker: &Arc<Broker>,
    name: Option<String>,
    topic_id: Uuid,
    may_create: bool,
) -> MetadataResponseTopic {
    let Some(name) = name else {
        return match broker.topic_by_id(topic_id) {
            Some(topic) => describe(&topic, broker),
            None => failed(None, ResponseError::UnknownTopicId, topic_id),
        };
    };
    if let Some(topic) = broker.topic(&name) {
        return describe(&topic, broker);
    }
    if let Err(e) = crate::broker::topic_rules::validate_topic_name(&name) {
        return failed(Some(name), e.code, Uuid::nil());
    }
    if !may_create {
        return failed(
            Some(name),
            ResponseError::UnknownTopicOrPartition,
            Uuid::nil(),
        );
    }
    match broker.auto_create_topic(&name).await {
        Ok(topic) => describe(&topic, broker),
        Err(e) => {
            tracing::warn!(topic = name, error = %e, "auto-creating topic failed");
            failed(Some(name), e.code, Uuid::nil())
        }
    }
}

fn failed(name: Option<String>, error: ResponseError, topic_id: Uuid) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(|n| topic_name(&n)))
        .with_topic_id(topic_id)
        .with_topic_authorized_operations(OPERATIONS_UNKNOWN)
}

fn describe(topic: &Topic, broker: &Broker) -> MetadataResponseTopic {
    let cluster = broker.cluster();
    let name = &topic.record.name;
    let partitions = (0..topic.record.partitions)
        .map(|id| {
            let (leader, epoch) = partition_leader(&cluster, name, id);
            let response = MetadataResponsePartition::default()
                .with_partition_index(id)
                .with_leader_epoch(epoch);
            match leader {
                Ok(leader) => response
                    .with_error_code(code(None))
                    .with_leader_id(BrokerId(leader))
                    .with_replica_nodes(vec![BrokerId(leader)])
                    .with_isr_nodes(vec![BrokerId(leader)]),
                Err(e) => response
                    .with_error_code(e.code())
                    .with_leader_id(BrokerId(-1)),
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(name)))
        .with_topic_id(topic.record.id)
        .with_partitions(partitions)
        .with_topic_authorized_operations(OPERATIONS_UNKNOWN)
}
