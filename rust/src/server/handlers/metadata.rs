//! Metadata v0–12. v0: an empty topic list means all topics; v1+: null means all and an empty
//! list none (KIP-4). A topic named more than once is answered once, as Kafka reads the names
//! into a set. Auto-creation when the broker allows it and the request (v4+) asks for it,
//! bounded per request (`AutoCreation`): one request naming 200,000 new topics kept a broker
//! creating them for 16 minutes after its client had gone. Topics past the bound are answered
//! LEADER_NOT_AVAILABLE, Kafka's answer for a topic still being created, so a client asks again
//! and the next request creates the next ones.
//! Brokers, leaders and epochs come from the cluster view: the owner of each partition leads it
//! (or the broker about to claim it, while nobody does).
//!
//! Authorization as in Kafka: a topic named without DESCRIBE is TOPIC_AUTHORIZATION_FAILED,
//! whether it exists or not (and is never created); all topics means those the client may
//! describe. Auto-creation needs CREATE on the cluster or the topic, else
//! TOPIC_AUTHORIZATION_FAILED. Authorized operations are reported when asked for (v8+; the
//! cluster's only v8–10, 0 without DESCRIBE on it).

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::{cluster_operations, code, topic_operations, Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::{Broker, Topic};
use crate::cluster::state::ClusterState;
use crate::meta::catalog::BrokerRecord;
use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::repeats::merge_by;
use crate::protocol::topic_name;
use crate::server::log_limit::LogLimit;

/// "Authorized operations not requested/known" in Kafka's encoding.
pub(crate) const OPERATIONS_UNKNOWN: i32 = i32::MIN;

/// The most topics one Metadata request auto-creates: far more than a producer names at once.
const MAX_AUTO_CREATED_PER_REQUEST: usize = 100;
/// How long one Metadata request may spend auto-creating: well within a client's default
/// request timeout (30 s), so it is answered rather than given up on (a slow metadata store
/// makes each creation slow).
const AUTO_CREATION_TIME: Duration = Duration::from_secs(10);

/// What one request may still auto-create: a number of topics until a deadline.
struct AutoCreation {
    left: usize,
    until: Instant,
    /// Topics it could have created but did not (answered LEADER_NOT_AVAILABLE).
    deferred: usize,
}

impl AutoCreation {
    fn new(topics: usize, time: Duration) -> AutoCreation {
        AutoCreation {
            left: topics,
            until: Instant::now() + time,
            deferred: 0,
        }
    }

    /// Whether one more topic may be created now; counts it either way.
    fn take(&mut self) -> bool {
        if self.left == 0 || Instant::now() >= self.until {
            self.deferred += 1;
            return false;
        }
        self.left -= 1;
        true
    }
}

/// `listener`: the one the client came in on; every broker is listed with its endpoint there.
pub(crate) async fn respond(
    broker: &Arc<Broker>,
    request: Request,
    listener: &str,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: MetadataRequest = request.body()?;
    let version = request.api_version;
    let auto_create = broker.config.auto_create_topics;
    let response = answer(broker, body, version, listener, access, auto_create).await;
    encode_response(request.correlation_id, version, &response)
}

/// `auto_create`: the broker's setting (the request may still refuse it).
async fn answer(
    broker: &Arc<Broker>,
    body: MetadataRequest,
    version: i16,
    listener: &str,
    access: &Access,
    auto_create: bool,
) -> MetadataResponse {
    let may_create = auto_create && (version < 4 || body.allow_auto_topic_creation);
    let wants_all = match &body.topics {
        None => true,
        Some(list) => list.is_empty() && version == 0,
    };
    let mut topics: Vec<MetadataResponseTopic> = if wants_all {
        broker
            .topics()
            .iter()
            .filter(|t| access.allows_topic(Operation::Describe, &t.record.name))
            .map(|t| describe(t, broker))
            .collect()
    } else {
        let mut named = body.topics.unwrap_or_default();
        merge_by(&mut named, |t| (t.name.clone(), t.topic_id), |_, _| ());
        let mut described = Vec::new();
        let mut creation =
            may_create.then(|| AutoCreation::new(MAX_AUTO_CREATED_PER_REQUEST, AUTO_CREATION_TIME));
        for wanted in named {
            described.push(
                lookup(
                    broker,
                    wanted.name.map(|n| n.0.to_string()),
                    wanted.topic_id,
                    creation.as_mut(),
                    access,
                )
                .await,
            );
        }
        static DEFERRED: LogLimit = LogLimit::new("deferred topic auto-creations");
        let deferred = creation.map_or(0, |c| c.deferred);
        if deferred > 0 && DEFERRED.admit() {
            tracing::info!(
                deferred,
                max = MAX_AUTO_CREATED_PER_REQUEST,
                seconds = AUTO_CREATION_TIME.as_secs(),
                "a Metadata request named more new topics than one request auto-creates; \
                 the rest were answered LEADER_NOT_AVAILABLE"
            );
        }
        described
    };
    // The fields exist from v8 (the codec reads false before); the cluster's until v10.
    if body.include_topic_authorized_operations {
        for topic in &mut topics {
            if let Some(name) = &topic.name {
                topic.topic_authorized_operations = topic_operations(access, name);
            }
        }
    }
    let cluster_operations = match body.include_cluster_authorized_operations {
        false => OPERATIONS_UNKNOWN,
        true if access.allows_cluster(Operation::Describe) => cluster_operations(access),
        true => 0,
    };
    let (brokers, controller) = live_brokers(broker, listener);
    let brokers = brokers.into_iter().map(|b| {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(b.id))
            .with_host(StrBytes::from_string(b.host))
            .with_port(b.port)
            .with_rack(b.rack.map(StrBytes::from_string))
    });
    MetadataResponse::default()
        .with_brokers(brokers.collect())
        .with_cluster_id(Some(StrBytes::from_string(broker.cluster_id.clone())))
        .with_controller_id(BrokerId(controller))
        .with_cluster_authorized_operations(cluster_operations)
        .with_topics(topics)
}

/// A broker as Metadata and DescribeCluster list it.
pub(crate) struct ListedBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The live brokers of this broker's cluster view that have `listener`, in id order, with
/// their endpoints there, and the id to name as the controller.
pub(crate) fn live_brokers(broker: &Broker, listener: &str) -> (Vec<ListedBroker>, i32) {
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
                rack: b.rack.clone(),
            })
        })
        .collect();
    // The controller is only a name here (no KRaft); the lowest live id is stable and real.
    let controller = cluster.brokers.keys().next().copied().unwrap_or(own);
    (brokers, controller)
}

/// The leader of one partition in a cluster view (the owner, or the broker about to claim
/// it), or LEADER_NOT_AVAILABLE; and its leader epoch.
pub(crate) fn partition_leader(
    cluster: &ClusterState,
    topic: &str,
    partition: i32,
) -> (Result<i32, ResponseError>, i32) {
    let leader = cluster
        .leader(topic, partition)
        .ok_or(ResponseError::LeaderNotAvailable);
    (leader, cluster.leader_epoch(topic, partition))
}

/// `creation`: what the request may still auto-create (None: nothing).
async fn lookup(
    broker: &Arc<Broker>,
    name: Option<String>,
    topic_id: Uuid,
    creation: Option<&mut AutoCreation>,
    access: &Access,
) -> MetadataResponseTopic {
    let denied = ResponseError::TopicAuthorizationFailed;
    let Some(name) = name else {
        // Kafka: ids are not secret, so a known one is refused with its id (and no name).
        return match broker.topic_by_id(topic_id) {
            Some(topic) if access.allows_topic(Operation::Describe, &topic.record.name) => {
                describe(&topic, broker)
            }
            Some(_) => failed(None, denied, topic_id),
            None => failed(None, ResponseError::UnknownTopicId, topic_id),
        };
    };
    // Whether the topic exists is not revealed to a client that may not describe it.
    if !access.allows_topic(Operation::Describe, &name) {
        return failed(Some(name), denied, Uuid::nil());
    }
    if let Some(topic) = broker.topic(&name) {
        return describe(&topic, broker);
    }
    let may_create_it = || {
        access.allows_cluster(Operation::Create) || access.allows_topic(Operation::Create, &name)
    };
    if creation.is_some() && !may_create_it() {
        return failed(Some(name), denied, Uuid::nil());
    }
    if let Err(e) = crate::broker::topic_rules::validate_topic_name(&name) {
        return failed(Some(name), e.code, Uuid::nil());
    }
    let Some(creation) = creation else {
        return failed(
            Some(name),
            ResponseError::UnknownTopicOrPartition,
            Uuid::nil(),
        );
    };
    if !creation.take() {
        return failed(Some(name), ResponseError::LeaderNotAvailable, Uuid::nil());
    }
    match broker.auto_create_topic(&name).await {
        Ok(topic) => describe(&topic, broker),
        Err(e) => {
            static FAILED: LogLimit = LogLimit::new("failed topic auto-creations");
            if FAILED.admit() {
                tracing::warn!(topic = name, error = %e, "auto-creating topic failed");
            }
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
                Ok(leader) => {
                    let replicas: Vec<BrokerId> = cluster
                        .replicas(name, id, leader)
                        .into_iter()
                        .map(BrokerId)
                        .collect();
                    response
                        .with_error_code(code(None))
                        .with_leader_id(BrokerId(leader))
                        .with_replica_nodes(replicas.clone())
                        .with_isr_nodes(replicas)
                }
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

/// Dispatch's entry for Metadata (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move {
        respond(&cx.broker, request, &cx.connection.listener, &cx.access)
            .await
            .into()
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;

    use super::*;
    use crate::auth::acl::ResourceType::{Cluster, Topic};
    use crate::auth::acl::CLUSTER_NAME;
    use crate::broker::tests::broker;
    use crate::protocol::header::testing::read_response;
    use crate::server::handlers::testing::{self, alice, allow, broker_with};

    /// The answer to `body` at `version`, with auto-creation on, as a client reads it.
    async fn ask(
        broker: &Arc<Broker>,
        version: i16,
        body: MetadataRequest,
        access: &Access,
    ) -> MetadataResponse {
        let response = answer(broker, body, version, "PLAINTEXT", access, true).await;
        let frame = encode_response(7, version, &response).unwrap();
        read_response(frame, version).1
    }

    fn named(names: &[&str]) -> MetadataRequest {
        let topics = names
            .iter()
            .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))));
        MetadataRequest::default()
            .with_topics(Some(topics.collect()))
            .with_allow_auto_topic_creation(true)
    }

    /// (name, error) of each topic answered.
    fn answered(response: &MetadataResponse) -> Vec<(String, i16)> {
        let topics = response.topics.iter().map(|t| {
            let name = t.name.as_ref().map_or_else(String::new, |n| n.to_string());
            (name, t.error_code)
        });
        topics.collect()
    }

    #[tokio::test]
    async fn topics_without_describe_are_hidden_refused_and_never_created() {
        let t = broker_with(&["t", "secret"], 1, 0).await;
        let access = alice(vec![
            allow(Topic, "t", Operation::Describe),
            // may describe "new" but not create it; may create "made"
            allow(Topic, "new", Operation::Describe),
            allow(Topic, "made", Operation::Describe),
            allow(Topic, "made", Operation::Create),
        ]);
        let denied = ResponseError::TopicAuthorizationFailed.code();
        let all = ask(
            &t.broker,
            12,
            MetadataRequest::default().with_topics(None),
            &access,
        )
        .await;
        assert_eq!(answered(&all), [("t".to_string(), 0)]);
        let asked = named(&["t", "secret", "missing", "new", "made"]);
        let got = ask(&t.broker, 12, asked, &access).await;
        let want = [
            ("t", 0),
            ("secret", denied),
            ("missing", denied),
            ("new", denied),
            ("made", 0),
        ]
        .map(|(n, e)| (n.to_string(), e));
        assert_eq!(answered(&got), want);
        assert!(
            got.topics[1].topic_id.is_nil(),
            "the id of a refused name is not told"
        );
        for (name, created) in [("missing", false), ("new", false), ("made", true)] {
            assert_eq!(t.broker.topic(name).is_some(), created, "{name}");
        }
        // By id (ids are not secret in Kafka): refused with its id and without its name.
        let secret = t.broker.topic("secret").unwrap().record.id;
        let by_id =
            MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(None)
                .with_topic_id(secret)]));
        let got = ask(&t.broker, 12, by_id, &access).await;
        assert_eq!(answered(&got), [(String::new(), denied)]);
        assert_eq!(got.topics[0].topic_id, secret);
    }

    #[tokio::test]
    async fn one_request_auto_creates_a_bounded_number_of_topics() {
        let t = broker(1 << 20).await;
        let open = crate::server::handlers::testing::open();
        let names: Vec<String> = (0..MAX_AUTO_CREATED_PER_REQUEST + 5)
            .map(|i| format!("new-{i}"))
            .collect();
        let asked: Vec<&str> = names.iter().map(String::as_str).collect();
        let got = answered(&ask(&t.broker, 12, named(&asked), &open).await);
        let not_yet = ResponseError::LeaderNotAvailable.code();
        let expected: Vec<(String, i16)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    if i < MAX_AUTO_CREATED_PER_REQUEST {
                        0
                    } else {
                        not_yet
                    },
                )
            })
            .collect();
        assert_eq!(got, expected);
        assert!(t.broker.topic("new-99").is_some());
        assert!(t.broker.topic("new-100").is_none());
        // asked again, the rest are created
        let again = answered(&ask(&t.broker, 12, named(&asked), &open).await);
        assert!(again.iter().all(|(_, code)| *code == 0), "{again:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn auto_creation_stops_at_its_deadline() {
        let mut creation = AutoCreation::new(3, Duration::from_secs(10));
        assert!(creation.take());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!creation.take());
        assert!(!creation.take());
        assert_eq!((creation.left, creation.deferred), (2, 2));
    }

    #[tokio::test]
    async fn creating_a_topic_is_allowed_by_create_on_the_cluster() {
        let t = broker(1 << 20).await;
        let access = alice(vec![
            allow(Topic, "new", Operation::Describe),
            allow(Cluster, CLUSTER_NAME, Operation::Create),
        ]);
        let got = ask(&t.broker, 12, named(&["new"]), &access).await;
        assert_eq!(answered(&got), [("new".to_string(), 0)]);
        assert!(t.broker.topic("new").is_some());
    }

    #[tokio::test]
    async fn authorized_operations_are_reported_when_asked_for() {
        let t = broker_with(&["t"], 1, 0).await;
        let access = alice(vec![
            allow(Topic, "t", Operation::Write),
            allow(Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
        ]);
        let asked = || named(&["t", "u"]).with_allow_auto_topic_creation(false);
        let got = ask(&t.broker, 10, asked(), &access).await;
        assert_eq!(
            got.topics[0].topic_authorized_operations,
            OPERATIONS_UNKNOWN
        );
        assert_eq!(got.cluster_authorized_operations, OPERATIONS_UNKNOWN);
        let with_operations = asked()
            .with_include_topic_authorized_operations(true)
            .with_include_cluster_authorized_operations(true);
        let got = ask(&t.broker, 10, with_operations, &access).await;
        // WRITE and the DESCRIBE it implies; none on "u" (refused)
        let operations: Vec<i32> = got
            .topics
            .iter()
            .map(|t| t.topic_authorized_operations)
            .collect();
        assert_eq!(operations, [1 << 4 | 1 << 8, 0]);
        // IDEMPOTENT_WRITE alone, but without DESCRIBE on the cluster: none, as in Kafka.
        assert_eq!(got.cluster_authorized_operations, 0);
        let describer = alice(vec![
            allow(Cluster, CLUSTER_NAME, Operation::Describe),
            allow(Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
        ]);
        let with_cluster = named(&[]).with_include_cluster_authorized_operations(true);
        let got = ask(&t.broker, 10, with_cluster, &describer).await;
        assert_eq!(got.cluster_authorized_operations, 1 << 8 | 1 << 12);
    }

    #[tokio::test]
    async fn a_topic_named_again_is_answered_once() {
        let t = broker_with(&["t", "u"], 3, 0).await;
        let asked = named(&["t", "u", "t", "t", "missing", "u", "missing"])
            .with_allow_auto_topic_creation(false);
        let got = ask(&t.broker, 12, asked, &testing::open()).await;
        let unknown = ResponseError::UnknownTopicOrPartition.code();
        let want = [("t", 0), ("u", 0), ("missing", unknown)].map(|(n, e)| (n.to_string(), e));
        assert_eq!(answered(&got), want);
    }
}
