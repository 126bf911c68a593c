//! A single broker over an embedded metadata store and in-memory object storage: topic
//! records that change under open partitions (configs, added partitions).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::topic_rules::MAX_PARTITIONS;
use super::Broker;
use crate::config::{BrokerConfig, ListenerConfig};
use crate::log::batch::tests::encoded_batch;
use crate::log::batch::validate_batches;
use crate::log::partition::{now_ms, AppendResult, Compacted, Partition};
use crate::log::topic_config::tests::configs;
use crate::meta::embedded::EmbeddedStore;
use crate::meta::faulty_kv::FaultyKv;
use crate::store::faulty::FaultyStore;
use crate::store::SegmentStore;

pub(crate) struct TestBroker {
    pub broker: Arc<Broker>,
    _dir: tempfile::TempDir,
}

/// A started broker of its own (id 1) with the given broker-wide segment size. Partitions
/// reaching a segment's worth are not compacted at once: tests compact when they say so (its
/// interval's rounds are rare enough not to race them).
pub(crate) async fn broker(segment_bytes: usize) -> TestBroker {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, segment_bytes);
    let broker = Broker::open(config).await.unwrap();
    broker.log.compaction_due.hold();
    TestBroker { broker, _dir: dir }
}

/// A started broker of its own (id 1) in rack `rack`.
pub(crate) async fn broker_in_rack(rack: &str) -> TestBroker {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        broker_rack: Some(rack.into()),
        ..config(&dir, 1 << 20)
    };
    let broker = Broker::open(config).await.unwrap();
    broker.log.compaction_due.hold();
    TestBroker { broker, _dir: dir }
}

/// A broker that compacts a partition as soon as it has a segment's worth, and otherwise
/// never (its interval is an hour).
pub(crate) async fn broker_compacting_when_due(segment_bytes: usize) -> TestBroker {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        wal_compaction_interval_ms: 3_600_000,
        ..config(&dir, segment_bytes)
    };
    let broker = Broker::open(config).await.unwrap();
    TestBroker { broker, _dir: dir }
}

/// A broker (id 1) over an embedded metadata store whose faults the test places. It compacts
/// only when the test calls for it (its background round would race the test's).
pub(crate) async fn faulty_broker(segment_bytes: usize) -> (TestBroker, Arc<FaultyKv>) {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        wal_compaction_interval_ms: 3_600_000,
        ..config(&dir, segment_bytes)
    };
    let store = SegmentStore::open(&config.storage().unwrap(), &config.s3_namespace).unwrap();
    let embedded = EmbeddedStore::open(&config.metadata_path()).unwrap();
    let kv = Arc::new(FaultyKv::new(Arc::new(embedded)));
    let broker = Broker::open_over(config, store, kv.clone(), Arc::default())
        .await
        .unwrap();
    broker.log.compaction_due.hold();
    (TestBroker { broker, _dir: dir }, kv)
}

/// A broker over a memory object store whose faults the test places, caching nothing (every
/// read goes to the store).
pub(crate) async fn broker_over_faulty_store() -> (TestBroker, Arc<FaultyStore>) {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        cache_bytes: 0,
        ..config(&dir, 1 << 20)
    };
    let objects = Arc::new(FaultyStore::default());
    let store = SegmentStore::over(objects.clone(), &config.s3_namespace);
    let embedded = EmbeddedStore::open(&config.metadata_path()).unwrap();
    let broker = Broker::open_over(config, store, Arc::new(embedded), Arc::default())
        .await
        .unwrap();
    broker.log.compaction_due.hold();
    (TestBroker { broker, _dir: dir }, objects)
}

/// A broker that checks ACLs (`--authorizer acl`), with User:admin its super user.
pub(crate) async fn secured_broker() -> TestBroker {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        authorizer: "acl".into(),
        super_users: "User:admin".into(),
        ..config(&dir, 1 << 20)
    };
    let broker = Broker::open(config).await.unwrap();
    TestBroker { broker, _dir: dir }
}

fn config(dir: &tempfile::TempDir, segment_bytes: usize) -> BrokerConfig {
    BrokerConfig {
        listener_specs: vec![ListenerConfig {
            name: "PLAINTEXT".into(),
            bind: "127.0.0.1:0".into(),
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
        }],
        tls: None,
        sasl_enabled_mechanisms: "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".into(),
        sasl_users_file: None,
        connections_max_reauth_ms: 0,
        sasl_server_max_receive_size: 512 << 10,
        connection_failed_authentication_delay_ms: 100,
        authorizer: "none".into(),
        super_users: String::new(),
        allow_everyone_if_no_acl_found: false,
        broker_id: 1,
        broker_rack: None,
        data_dir: dir.path().to_string_lossy().into_owned(),
        s3_bucket: None,
        s3_region: None,
        s3_endpoint: None,
        s3_namespace: "test".into(),
        use_memory_s3: true,
        segment_bytes,
        flush_interval_ms: 10,
        flush_mode: "interval".into(),
        wal_object_max_bytes: 8 << 20,
        wal_compaction_age_ms: 60_000,
        wal_compaction_interval_ms: 5_000,
        cache_bytes: 1 << 20,
        readahead_segments: 1,
        auto_create_topics: false,
        default_partitions: 1,
        max_request_bytes: 1 << 20,
        max_message_bytes: 1 << 20,
        etcd_endpoints: None,
        etcd_username: None,
        etcd_password: None,
        lease_ttl_ms: 2_000,
        retention_ms: -1,
        retention_bytes: -1,
        retention_check_interval_ms: 60_000,
        metrics_addr: None,
        metrics_tls: false,
        metrics_token_file: None,
        metrics_max_connections: 64,
        metrics_header_read_timeout_ms: 10_000,
        metrics_idle_timeout_ms: 60_000,
        max_connections: 1000,
        max_connections_per_ip: 1000,
        connections_max_idle_ms: 600_000,
        request_read_timeout_ms: 30_000,
        connection_max_inflight_bytes: 64 << 20,
        queued_max_request_bytes: 256 << 20,
        fetch_max_bytes: 55 << 20,
        message_timestamp_before_max_ms: i64::MAX,
        message_timestamp_after_max_ms: 3_600_000,
        max_uncompressed_batch_bytes: 128 << 20,
        producer_id_expiration_ms: 86_400_000,
        log_roll_ms: 604_800_000,
        log_cleaner_min_cleanable_ratio: 0.5,
        log_cleaner_min_compaction_lag_ms: 0,
        log_cleaner_max_compaction_lag_ms: i64::MAX,
        log_cleaner_delete_retention_ms: 86_400_000,
        log_cleaner_dedupe_buffer_size: 1 << 20,
        log_cleaner_backoff_ms: 15_000,
        file_delete_delay_ms: 60_000,
        transaction_max_timeout_ms: 900_000,
        transactional_id_expiration_ms: 604_800_000,
        setting_names: Default::default(),
    }
}

/// Produces one batch of `records` to the partition the way Produce does; the base offset.
pub(crate) async fn produce(broker: &Broker, topic: &str, partition: i32, records: usize) -> i64 {
    let batch = encoded_batch(records, 100, Compression::None);
    produce_batch(broker, topic, partition, &batch).await
}

/// Produces `batch` to the partition the way Produce does; the base offset.
pub(crate) async fn produce_batch(
    broker: &Broker,
    topic: &str,
    partition: i32,
    batch: &bytes::Bytes,
) -> i64 {
    produce_answer(broker, topic, partition, batch)
        .await
        .unwrap()
}

/// Produces `batch` to the partition the way Produce does; what the producer is answered.
pub(crate) async fn produce_answer(
    broker: &Broker,
    topic: &str,
    partition: i32,
    batch: &bytes::Bytes,
) -> AppendResult {
    let ack = tokio::time::timeout(
        Duration::from_secs(10),
        produce_start(broker, topic, partition, batch),
    );
    ack.await.expect("no ack").unwrap()
}

/// Appends `batch` to the partition the way Produce does (buffered now); the producer's
/// answer comes through the receiver.
pub(crate) fn produce_start(
    broker: &Broker,
    topic: &str,
    partition: i32,
    batch: &bytes::Bytes,
) -> tokio::sync::oneshot::Receiver<AppendResult> {
    let slot = broker.topic(topic).unwrap().partitions[partition as usize].clone();
    let log = slot.current();
    let batches = validate_batches(batch, log.max_message_bytes()).unwrap();
    let (ack, buffered) = log.append(batches, true).unwrap().buffered();
    broker.wal.note_append(&log, buffered);
    ack
}

#[tokio::test]
async fn altered_configs_reach_the_open_partitions() {
    let t = broker(1 << 20).await;
    let b = &t.broker;
    let before = b.create_topic("t", 2, configs(&[])).await.unwrap();
    assert_eq!(produce(b, "t", 0, 5).await, 0);
    let wanted = configs(&[("segment.bytes", "4096"), ("max.message.bytes", "512")]);
    let after = b.alter_topic_configs("t", wanted.clone()).await.unwrap();
    assert_eq!(after.record.configs, wanted);
    assert_eq!(after.record.id, before.record.id);
    for (old, new) in before.partitions.iter().zip(&after.partitions) {
        assert!(Arc::ptr_eq(old, new), "the partitions' slots are kept");
        let log = new.current();
        assert!(log.is_leader(), "still owned after the record changed");
        assert_eq!((log.segment_bytes(), log.max_message_bytes()), (4096, 512));
    }
    // a batch above the topic's max.message.bytes is refused now
    let big = encoded_batch(10, 100, Compression::None);
    let limit = after.partitions[0].current().max_message_bytes();
    assert_eq!(
        validate_batches(&big, limit).err(),
        Some(ResponseError::MessageTooLarge)
    );
    // the log keeps going at the new segment size
    assert_eq!(produce(b, "t", 0, 1).await, 5);
    let unknown = b
        .alter_topic_configs("missing", wanted)
        .await
        .err()
        .unwrap();
    assert_eq!(unknown.code, ResponseError::UnknownTopicOrPartition);
}

#[tokio::test]
async fn added_partitions_are_served_at_once_and_the_old_ones_keep_going() {
    let t = broker(1 << 20).await;
    let b = &t.broker;
    let before = b.create_topic("t", 2, configs(&[])).await.unwrap();
    assert_eq!(produce(b, "t", 1, 3).await, 0);
    let grown = b.create_partitions("t", 5).await.unwrap();
    assert_eq!((grown.record.partitions, grown.partitions.len()), (5, 5));
    assert!(Arc::ptr_eq(&before.partitions[1], &grown.partitions[1]));
    for id in 0..5 {
        assert!(grown.partitions[id].current().is_leader(), "partition {id}");
        let view = b.cluster();
        assert_eq!(view.leader("t", id as i32), Some(1), "partition {id}");
    }
    for id in 2..5 {
        assert_eq!(produce(b, "t", id, 2).await, 0, "partition {id}");
    }
    assert_eq!(produce(b, "t", 1, 1).await, 3);
    for (count, why) in [
        (5, "not more"),
        (4, "fewer"),
        (MAX_PARTITIONS + 1, "too many"),
    ] {
        let refused = b.create_partitions("t", count).await.err().unwrap();
        assert_eq!(refused.code, ResponseError::InvalidPartitions, "{why}");
        assert!(
            refused.message.contains("has 5 partitions"),
            "{}",
            refused.message
        );
    }
    let unknown = b.create_partitions("missing", 3).await.err().unwrap();
    assert_eq!(unknown.code, ResponseError::UnknownTopicOrPartition);
}

#[test]
fn a_metadata_store_limit_is_a_policy_violation_not_a_storage_error() {
    use crate::meta::catalog::CatalogError;
    use crate::meta::kv::MetaError;

    let limit = MetaError::Limit("etcd's --max-request-bytes (1.5 MiB by default)".into());
    let answered = super::catalog_error(CatalogError::Meta(limit));
    assert_eq!(answered.code, ResponseError::PolicyViolation);
    assert!(
        answered.message.contains("--max-request-bytes"),
        "{}",
        answered.message
    );
    let down = MetaError::Unavailable("etcd: no answer within 5 s".into());
    let answered = super::catalog_error(CatalogError::Meta(down));
    assert_eq!(answered.code, ResponseError::KafkaStorageError);
}

/// Topic `t` of one partition holding three records, and a compaction of them whose segment
/// is uploaded and whose commit is still to come (it holds the partition's record lock).
pub(crate) async fn uploaded_compaction(broker: &Arc<Broker>) -> (Arc<Partition>, Compacted) {
    broker.create_topic("t", 1, BTreeMap::new()).await.unwrap();
    assert_eq!(produce(broker, "t", 0, 3).await, 0);
    let p = broker.topic("t").unwrap().partitions[0].current();
    let later = now_ms() + 3_600_000;
    let compacted = p.compact(&broker.log, later).await.expect("due");
    (p, compacted)
}

#[tokio::test]
async fn a_deleted_topics_objects_go_once_its_owner_stopped_writing() {
    use crate::store::SegmentObject;
    let t = broker(100).await;
    let b = &t.broker;
    let (_, compacting) = uploaded_compaction(b).await;
    b.delete_topic("t", None).await.unwrap();
    let catalog = &b.log.catalog;
    let kv = catalog.kv();
    let owner = catalog.owner_key("t", 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        kv.get(&owner).await.unwrap().is_some(),
        "the owner let go while compacting"
    );
    assert_eq!(catalog.pending_deletions().await.unwrap().len(), 1);
    // it uploads another segment before it ends (a later one of the same compaction)
    let late = b.log.store.segment_path("t", 0, 3, SegmentObject::Data);
    b.log
        .store
        .put_new(&late, bytes::Bytes::from_static(b"late"))
        .await
        .unwrap();
    drop(compacting);
    let finished = async {
        while !catalog.pending_deletions().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), finished)
        .await
        .unwrap();
    assert!(b.log.store.list_partition("t", 0).await.unwrap().is_empty());
    let left = kv.range(&catalog.partitions_prefix("t")).await.unwrap();
    assert!(left.kvs.is_empty(), "partition keys left");
}

#[tokio::test]
async fn a_compacted_segment_is_cached_as_the_slices_of_its_runs() {
    use crate::log::cache::CachedBatches;
    let t = broker(100).await;
    let b = &t.broker;
    let (p, compacted) = uploaded_compaction(b).await;
    let runs = b.log.wal.runs_from((p.topic_id, p.id), 0);
    let run_key = runs[0].cache_key();
    let run = b
        .log
        .cache
        .get(&run_key)
        .expect("a run is cached at its commit");
    let revision = compacted.commit_alone(&b.log, "t", 0).await;
    p.compacted(&b.log, compacted, revision);
    assert!(!b.log.cache.contains(&run_key), "the run is cached twice");
    let segment = b.log.cache.get(&p.object_key(0)).expect("segment cached");
    let first = |c: &CachedBatches| c.batches().next().unwrap().unwrap().0;
    assert_eq!(
        first(&segment).body[0].as_ptr(),
        first(&run).body[0].as_ptr(),
        "the segment copied its batches"
    );
}

#[tokio::test]
async fn a_large_batch_is_served_from_the_cache_as_the_produce_requests_bytes() {
    let t = broker(1 << 20).await;
    let b = &t.broker;
    b.create_topic("t", 1, configs(&[])).await.unwrap();
    let batch = encoded_batch(400, 100, Compression::None);
    assert!(
        batch.len() >= 16 << 10,
        "a batch the write-ahead object slices"
    );
    assert_eq!(produce_batch(b, "t", 0, &batch).await, 0);
    let p = b.topic("t").unwrap().partitions[0].current();
    let read = crate::log::reader::read(&b.log, &p, 0, 1 << 20, true)
        .await
        .unwrap();
    assert_eq!(b.log.metrics.cache_hits.get(), 1);
    assert_eq!(read.record_count, 400);
    assert_eq!(read.records.len(), 2, "the rewritten prefix and the rest");
    assert_eq!(read.records[1].as_ptr(), batch[16..].as_ptr(), "copied");
    let served = read.records.concat();
    assert_eq!(&served[16..], &batch[16..]);
    assert_eq!(&served[..8], &0i64.to_be_bytes());
}
