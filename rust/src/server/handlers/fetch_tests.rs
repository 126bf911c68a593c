//! Fetch's waits, hand-offs and answers, against brokers over a memory store.

use std::time::Instant;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::{ApiKey, BrokerId};

use super::*;
use crate::auth::acl::ResourceType::{Cluster, Topic};
use crate::auth::acl::CLUSTER_NAME;
use crate::broker::tests::produce;
use crate::protocol::header::testing::{read_response, request};
use crate::server::budget::{Budgets, ByteBudget};
use crate::server::handlers::testing::{alice, allow, broker_with, open as open_access};
use kafka_protocol::protocol::StrBytes;

/// A topic asked for by name (before v13) or id.
type Asked<'a> = (&'a str, Uuid);

/// (error, bytes of records) of partition 0 of each topic, fetched from offset 0 at
/// `version` by `replica` (-1: a consumer), waiting at most `wait_ms` for a byte.
async fn fetch(
    broker: &Arc<Broker>,
    version: i16,
    topics: &[Asked<'_>],
    replica: i32,
    wait_ms: i32,
    access: &Access,
) -> Vec<(i16, usize)> {
    let got = answers(broker, version, topics, replica, 0, wait_ms, access).await;
    let sizes = got
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()));
    got.iter().map(|p| p.error_code).zip(sizes).collect()
}

/// The answers for partition 0 of each topic, fetched from `offset` (see `fetch`).
async fn answers(
    broker: &Arc<Broker>,
    version: i16,
    topics: &[Asked<'_>],
    replica: i32,
    offset: i64,
    wait_ms: i32,
    access: &Access,
) -> Vec<PartitionData> {
    let topics = topics.iter().map(|&(name, id)| {
        let partition = FetchPartition::default()
            .with_fetch_offset(offset)
            .with_partition_max_bytes(1 << 20);
        let topic = FetchTopic::default().with_partitions(vec![partition]);
        match version {
            13.. => topic.with_topic_id(id),
            _ => topic.with_topic(topic_name(name)),
        }
    });
    let mut body = FetchRequest::default()
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(topics.collect());
    match version {
        15.. => body.replica_state = ReplicaState::default().with_replica_id(BrokerId(replica)),
        _ => body.replica_id = BrokerId(replica),
    }
    let budgets = Budgets::new(1 << 24, Arc::new(ByteBudget::new(1 << 24)));
    let asked = request(ApiKey::Fetch, version, &body);
    let frame = answer(broker, asked, Charge::new(&budgets), access).await;
    let (_, response): (_, FetchResponse) = read_response(frame.unwrap(), version);
    let partitions = response.responses.into_iter().flat_map(|t| t.partitions);
    partitions.collect()
}

#[tokio::test]
async fn a_consumer_reads_only_topics_it_has_read_on() {
    let t = broker_with(&["t", "u"], 1, 5).await;
    let id = |name| t.broker.topic(name).unwrap().record.id;
    let reader = alice(vec![
        allow(Topic, "u", Operation::Read),
        allow(Topic, "t", Operation::Describe),
    ]);
    let denied = ResponseError::TopicAuthorizationFailed.code();
    let by_name = [
        ("t", Uuid::nil()),
        ("u", Uuid::nil()),
        ("missing", Uuid::nil()),
    ];
    let got = fetch(&t.broker, 12, &by_name, -1, 0, &reader).await;
    assert_eq!(got[0], (denied, 0), "DESCRIBE is not READ");
    assert_eq!(got[1].0, 0);
    assert!(got[1].1 > 0, "u is read");
    assert_eq!(got[2], (denied, 0), "a missing topic is not revealed");
    // By id: the name is checked; an id no topic has stays UNKNOWN_TOPIC_ID.
    let by_id = [("", id("t")), ("", id("u")), ("", Uuid::new_v4())];
    let got = fetch(&t.broker, 13, &by_id, -1, 0, &reader).await;
    let unknown_id = ResponseError::UnknownTopicId.code();
    let codes: Vec<i16> = got.iter().map(|g| g.0).collect();
    assert_eq!(codes, [denied, 0, unknown_id]);
    // A follower needs CLUSTER_ACTION, READ or not.
    let got = fetch(&t.broker, 15, &[("", id("u"))], 2, 0, &reader).await;
    assert_eq!(got, [(denied, 0)]);
    let broker_like = alice(vec![allow(Cluster, CLUSTER_NAME, Operation::ClusterAction)]);
    let got = fetch(&t.broker, 15, &[("", id("t"))], 2, 0, &broker_like).await;
    assert_eq!(got[0].0, 0);
    assert!(got[0].1 > 0, "a follower reads t");
}

#[tokio::test]
async fn a_refused_topic_does_not_end_the_wait_for_data() {
    let t = broker_with(&["t", "empty"], 1, 0).await;
    produce(&t.broker, "t", 0, 5).await;
    let reader = alice(vec![allow(Topic, "empty", Operation::Read)]);
    let asked = [("t", Uuid::nil()), ("empty", Uuid::nil())];
    let started = Instant::now();
    let got = fetch(&t.broker, 12, &asked, -1, 300, &reader).await;
    let denied = ResponseError::TopicAuthorizationFailed.code();
    assert_eq!(got, [(denied, 0), (0, 0)]);
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_fetch_waiting_while_its_partition_is_handed_off_answers_not_leader() {
    let t = broker_with(&["t"], 1, 5).await;
    let slot = t.broker.topic("t").unwrap().partitions[0].clone();
    let owned = slot.current();
    assert!(owned.is_leader());
    let readers_before = owned.readers();
    let broker = t.broker.clone();
    let reader = alice(vec![allow(Topic, "t", Operation::Read)]);
    let asked = [("t", Uuid::nil())];
    let waiting =
        tokio::spawn(async move { answers(&broker, 12, &asked, -1, 5, 60_000, &reader).await });
    while owned.readers() == readers_before {
        tokio::task::yield_now().await; // the fetch has not looked at the log yet
    }
    // A hand-off: the log stops taking writes, the owner key goes, a follower view takes
    // its place (`ownership::spawn_hand_off`).
    owned.close(ResponseError::NotLeaderOrFollower);
    slot.replace(owned.to_follower(5));
    let answered = tokio::time::timeout(Duration::from_secs(10), waiting);
    let got = answered
        .await
        .expect("answered when the log was replaced")
        .unwrap();
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    assert_eq!((got[0].error_code, got[0].high_watermark), (not_leader, -1));
}

/// A broker caching nothing with five records in partition 0 of "t", and a fetch of them
/// from offset 0 whose read of the write-ahead object is held at the store.
async fn fetch_held_at_the_store() -> (
    crate::broker::tests::TestBroker,
    Arc<tokio::sync::Semaphore>,
    tokio::task::JoinHandle<Vec<PartitionData>>,
) {
    let (t, objects) = crate::broker::tests::broker_over_faulty_store().await;
    t.broker
        .create_topic("t", 1, Default::default())
        .await
        .unwrap();
    produce(&t.broker, "t", 0, 5).await;
    let gets = objects.hold_gets(".wal");
    let broker = t.broker.clone();
    let reader = alice(vec![allow(Topic, "t", Operation::Read)]);
    let fetching = tokio::spawn(async move {
        answers(&broker, 12, &[("t", Uuid::nil())], -1, 0, 0, &reader).await
    });
    while objects.held_gets() == 0 {
        tokio::task::yield_now().await;
    }
    (t, gets, fetching)
}

#[tokio::test]
async fn a_fetch_whose_read_waits_while_its_partition_is_handed_off_answers_not_leader() {
    let (t, gets, fetching) = fetch_held_at_the_store().await;
    let slot = t.broker.topic("t").unwrap().partitions[0].clone();
    let owned = slot.current();
    owned.close(ResponseError::NotLeaderOrFollower);
    slot.replace(owned.to_follower(5));
    gets.add_permits(10);
    let got = fetching.await.unwrap();
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    assert_eq!((got[0].error_code, got[0].high_watermark), (not_leader, -1));
    let records = got[0].records.as_ref();
    assert!(
        records.is_none_or(|r| r.is_empty()),
        "nothing read from the log given up"
    );
}

#[tokio::test]
async fn a_fetch_answers_the_end_its_log_has_when_it_answers() {
    let (t, gets, fetching) = fetch_held_at_the_store().await;
    produce(&t.broker, "t", 0, 3).await; // committed while the read waits
    gets.add_permits(10);
    let got = fetching.await.unwrap();
    assert_eq!((got[0].error_code, got[0].high_watermark), (0, 8));
    assert!(got[0].records.as_ref().is_some_and(|r| !r.is_empty()));
}

/// Broker `id` of `rack` joins the cluster as a live broker registers (a record only: it
/// claims nothing, and a one-partition topic stays with its owner).
async fn join(broker: &Broker, id: i32, rack: &str) {
    let record = crate::meta::catalog::BrokerRecord {
        id,
        host: format!("b{id}.example"),
        port: 9092,
        rack: Some(rack.into()),
        ..Default::default()
    };
    let key = format!("{}/brokers/{id}", broker.log.catalog.root());
    let value = Bytes::from(serde_json::to_vec(&record).unwrap());
    let put = crate::meta::kv::Op::Put(key, value);
    broker
        .log
        .catalog
        .kv()
        .txn(vec![], vec![put])
        .await
        .unwrap();
    let joined = || broker.cluster().brokers.contains_key(&id);
    assert!(crate::meta::mirror::tests::eventually(joined).await);
}

/// Partition 0 of `t` as a consumer with `rack` (Fetch's rack id), `client_id` and
/// `isolation` is answered at `version`, from offset 0, waiting up to a second for a byte.
async fn from_zone(
    broker: &Arc<Broker>,
    version: i16,
    (rack, client_id): (&str, &str),
    isolation: i8,
) -> PartitionData {
    let partition = FetchPartition::default().with_partition_max_bytes(1 << 20);
    let topic = FetchTopic::default()
        .with_topic(topic_name("t"))
        .with_topic_id(broker.topic("t").unwrap().record.id)
        .with_partitions(vec![partition]);
    let body = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(1000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_rack_id(StrBytes::from_string(rack.into()))
        .with_topics(vec![topic]);
    let mut asked = request(ApiKey::Fetch, version, &body);
    asked.client_id = Some(client_id.into());
    let budgets = Budgets::new(1 << 24, Arc::new(ByteBudget::new(1 << 24)));
    let frame = answer(broker, asked, Charge::new(&budgets), &open_access()).await;
    let (_, response): (_, FetchResponse) = read_response(frame.unwrap(), version);
    response.responses[0].partitions[0].clone()
}

#[tokio::test]
async fn a_consumer_of_another_rack_is_sent_to_a_broker_of_its_own_rack() {
    let t = crate::broker::tests::broker_in_rack("a").await;
    let b = &t.broker;
    b.create_topic("t", 1, Default::default()).await.unwrap();
    produce(b, "t", 0, 5).await;
    join(b, 2, "b").await;
    let sent = |p: &PartitionData| {
        (
            p.preferred_read_replica.0,
            p.records.as_ref().is_some_and(|r| r.is_empty()),
        )
    };
    let read = |p: &PartitionData| {
        (
            p.preferred_read_replica.0,
            p.records.as_ref().map_or(0, |r| r.len()) > 0,
        )
    };
    for v in 11..=17 {
        // by the rack the fetch names, or the client id's zone hint; at once, with the bounds
        let p = from_zone(b, v, ("b", "app"), 0).await;
        assert_eq!((p.error_code, sent(&p)), (0, (2, true)), "v{v}");
        assert_eq!((p.high_watermark, p.log_start_offset), (5, 0), "v{v}");
        let p = from_zone(b, v, ("", "app,zone=b"), 0).await;
        assert_eq!(sent(&p), (2, true), "v{v}");
        // read_committed too: the log holds no transaction, broker 2 can answer it
        let p = from_zone(b, v, ("b", "app"), 1).await;
        assert_eq!((sent(&p), p.last_stable_offset), ((2, true), 5), "v{v}");
        // the owner's own rack, a rack without a live broker, no zone: read here
        for zone in [("a", "app"), ("c", "app"), ("", "app,zone=a"), ("", "app")] {
            let p = from_zone(b, v, zone, 0).await;
            assert_eq!((p.error_code, read(&p)), (0, (-1, true)), "v{v} {zone:?}");
        }
    }
    // Before v11 a fetch cannot be told where to read: the hint is not followed.
    let p = from_zone(b, 10, ("", "app,zone=b"), 0).await;
    assert_eq!(read(&p), (-1, true));
}
