//! Tests of the typed catalog, over the embedded store.

use super::*;
use crate::meta::embedded::EmbeddedStore;

fn catalog(dir: &tempfile::TempDir) -> Catalog {
    let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
    Catalog::new(Arc::new(store), "test")
}

#[tokio::test]
async fn topics_are_created_once_and_deleted_with_their_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    let (created, _) = catalog
        .create_topic("orders", 3, BTreeMap::new())
        .await
        .unwrap();
    assert!(matches!(
        catalog.create_topic("orders", 1, BTreeMap::new()).await,
        Err(CatalogError::TopicExists(_))
    ));
    assert_eq!(catalog.topics().await.unwrap(), vec![created.clone()]);
    let claimed = catalog.claim_partition("orders", 2, 1).await.unwrap();
    catalog.delete_topic("orders", None).await.unwrap();
    // the owner key stays until its owner lets go, then the partition keys go
    let owner_key = catalog.owner_key("orders", 2);
    let owner = || catalog.kv().get(&owner_key);
    assert!(owner().await.unwrap().is_some());
    catalog
        .release_partition("orders", 2, &claimed)
        .await
        .unwrap();
    catalog.remove_partition_keys("orders").await.unwrap();
    assert!(catalog.partition("orders", 2).await.unwrap().is_none());
    assert!(owner().await.unwrap().is_none());
    // recreating waits for the object deletion to finish
    assert!(matches!(
        catalog.create_topic("orders", 1, BTreeMap::new()).await,
        Err(CatalogError::TopicBeingDeleted(_))
    ));
    catalog.finish_deletion("orders").await.unwrap();
    let (again, _) = catalog
        .create_topic("orders", 1, BTreeMap::new())
        .await
        .unwrap();
    assert_ne!(again.id, created.id);
    // by id: the old id no longer deletes the topic re-created under its name
    assert!(matches!(
        catalog.delete_topic("orders", Some(created.id)).await,
        Err(CatalogError::UnknownTopicId(id)) if id == created.id
    ));
    assert_eq!(catalog.topics().await.unwrap(), vec![again.clone()]);
    catalog
        .delete_topic("orders", Some(again.id))
        .await
        .unwrap();
    assert!(catalog.topics().await.unwrap().is_empty());
}

#[tokio::test]
async fn topic_configs_are_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    let initial = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
    let (created, _) = catalog.create_topic("t", 2, initial).await.unwrap();
    let configs = BTreeMap::from([("segment.bytes".to_string(), "4096".to_string())]);
    let (altered, revision) = catalog
        .alter_topic_configs("t", configs.clone())
        .await
        .unwrap();
    assert_eq!(altered.configs, configs);
    assert_eq!((altered.id, altered.partitions), (created.id, 2));
    assert_eq!(catalog.topics().await.unwrap(), vec![altered]);
    assert_eq!(
        catalog
            .kv()
            .get(&catalog.topic_key("t"))
            .await
            .unwrap()
            .unwrap()
            .mod_revision,
        revision
    );
    assert!(matches!(
        catalog.alter_topic_configs("missing", configs).await,
        Err(CatalogError::UnknownTopic(_))
    ));
}

#[tokio::test]
async fn partitions_are_only_added_and_get_records_with_their_first_claim() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 2, BTreeMap::new()).await.unwrap();
    let first = catalog.claim_partition("t", 0, 1).await.unwrap();
    commit_end(&catalog, &first, 10).await.unwrap();
    let (grown, _) = catalog.add_partitions("t", 5, 8).await.unwrap();
    assert_eq!(grown.partitions, 5);
    for p in 1..5 {
        assert!(catalog.partition("t", p).await.unwrap().is_none(), "{p}");
    }
    // the existing partitions are left as they were
    let kept = catalog.partition("t", 0).await.unwrap().unwrap().record;
    assert_eq!((kept.leader_epoch, kept.high_watermark), (1, 10));
    for (count, why) in [(5, "not more"), (3, "fewer"), (9, "above the limit")] {
        let refused = catalog.add_partitions("t", count, 8).await;
        let Err(CatalogError::PartitionCount { current, .. }) = &refused else {
            panic!("{why}: {refused:?}");
        };
        assert_eq!(*current, 5);
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("has 5 partitions"));
    }
    assert!(matches!(
        catalog.add_partitions("missing", 3, 8).await,
        Err(CatalogError::UnknownTopic(_))
    ));
    // partitions beyond the count cannot be claimed
    for p in [5, -1] {
        let refused = catalog.claim_partition("t", p, 1).await;
        assert!(matches!(refused, Err(CatalogError::UnknownTopic(_))), "{p}");
        assert!(catalog.partition("t", p).await.unwrap().is_none());
    }
}

#[tokio::test]
async fn the_first_claim_creates_the_record_of_the_empty_log() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 3, BTreeMap::new()).await.unwrap();
    let claimed = catalog.claim_partition("t", 2, 1).await.unwrap();
    let mut expected = PartitionRecord::empty();
    expected.leader_epoch = 1;
    expected.epoch_history.push(EpochStart {
        epoch: 1,
        start_offset: 0,
    });
    assert_eq!(claimed.record, expected);
    let stored = catalog.partition("t", 2).await.unwrap().unwrap();
    assert_eq!(
        (&stored.record, stored.revision),
        (&expected, claimed.revision)
    );
    // a claimant that still takes the record for absent is refused, even once released
    let stale = targets(&catalog, &[2]).await;
    catalog.release_partition("t", 2, &claimed).await.unwrap();
    let mut absent = stale[0].clone();
    absent.current = VersionedPartition::never_claimed();
    let refused = catalog.claim_partitions(&[absent], 2).await.unwrap();
    assert!(refused.is_none());
    assert_eq!(catalog.partition("t", 2).await.unwrap().unwrap(), stored);
}

#[tokio::test]
async fn no_record_is_created_for_a_topic_changed_or_deleted_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 3, BTreeMap::new()).await.unwrap();
    let seen = targets(&catalog, &[0, 1]).await;
    catalog.add_partitions("t", 4, 8).await.unwrap();
    assert!(catalog.claim_partitions(&seen, 1).await.unwrap().is_none());
    let seen = targets(&catalog, &[0, 1]).await;
    let claimed = catalog
        .claim_partitions(&seen[1..], 1)
        .await
        .unwrap()
        .unwrap();
    catalog
        .release_partition("t", 1, &claimed[0])
        .await
        .unwrap();
    let seen = targets(&catalog, &[0, 1]).await;
    catalog.delete_topic("t", None).await.unwrap();
    // neither the first claim of a partition nor another claim of one with a record
    assert!(catalog
        .claim_partitions(&seen[..1], 1)
        .await
        .unwrap()
        .is_none());
    assert!(catalog
        .claim_partitions(&seen[1..], 1)
        .await
        .unwrap()
        .is_none());
    let left = catalog.kv().range(&catalog.partition_key("t", 0)).await;
    assert!(left.unwrap().kvs.is_empty());
    assert!(matches!(
        catalog.claim_partition("t", 0, 1).await,
        Err(CatalogError::UnknownTopic(_))
    ));
}

#[tokio::test]
async fn a_stale_writer_is_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 1, BTreeMap::new()).await.unwrap();
    let first = catalog.claim_partition("t", 0, 1).await.unwrap();
    assert_eq!(first.record.leader_epoch, 1);
    let committed = commit_end(&catalog, &first, 10).await.unwrap();
    // nobody else can claim it while the owner key stands
    assert!(matches!(
        catalog.claim_partition("t", 0, 2).await,
        Err(CatalogError::Fenced(_, 0))
    ));
    catalog.release_partition("t", 0, &committed).await.unwrap();
    let second = catalog.claim_partition("t", 0, 2).await.unwrap();
    assert_eq!(second.record.epoch_history.last().unwrap().start_offset, 10);
    // the first writer's view is stale now
    assert!(matches!(
        commit_end(&catalog, &committed, 20).await,
        Err(CatalogError::Fenced(_, 0))
    ));
}

/// An owner's change of partition t-0 (as compaction makes it): the end moves to `end`.
async fn commit_end(
    catalog: &Catalog,
    owned: &VersionedPartition,
    end: i64,
) -> Result<VersionedPartition, CatalogError> {
    let mut record = owned.record.clone();
    record.high_watermark = end;
    record.segment_end = Some(end);
    match catalog
        .commit_owned_records(&[("t", 0, owned, &record)])
        .await?
    {
        Some(revision) => Ok(VersionedPartition {
            record,
            revision,
            owner_revision: owned.owner_revision,
            session: owned.session,
        }),
        None => Err(CatalogError::Fenced("t".into(), 0)),
    }
}

/// The claims of partitions `ids` of topic "t", on their records as stored now.
async fn targets(catalog: &Catalog, ids: &[i32]) -> Vec<ClaimTarget> {
    let topic = catalog.kv().get(&catalog.topic_key("t")).await.unwrap();
    let mut targets = Vec::new();
    for &partition in ids {
        let current = catalog.partition("t", partition).await.unwrap();
        targets.push(ClaimTarget {
            topic: "t".into(),
            partition,
            current: current.unwrap_or_else(VersionedPartition::never_claimed),
            topic_revision: topic.as_ref().unwrap().mod_revision,
        });
    }
    targets
}

#[tokio::test]
async fn partitions_are_claimed_in_batches_all_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 5, BTreeMap::new()).await.unwrap();
    let all = targets(&catalog, &[0, 1, 2, 3, 4]).await;
    // one of them is owned already: the transaction fails and writes nothing
    catalog.claim_partition("t", 3, 2).await.unwrap();
    assert!(catalog.claim_partitions(&all, 1).await.unwrap().is_none());
    for p in [0, 1, 2, 4] {
        let owner = catalog.kv().get(&catalog.owner_key("t", p)).await.unwrap();
        assert!(owner.is_none(), "partition {p}");
        assert!(catalog.partition("t", p).await.unwrap().is_none(), "{p}");
    }
    // the others in one transaction: one revision, each a new epoch from its end
    let rest = targets(&catalog, &[0, 1, 2, 4]).await;
    let claimed = catalog.claim_partitions(&rest, 1).await.unwrap().unwrap();
    assert_eq!(claimed.len(), 4);
    for (target, owned) in rest.iter().zip(&claimed) {
        assert_eq!(owned.revision, claimed[0].revision);
        assert_eq!(owned.owner_revision, owned.revision);
        assert_eq!(owned.record.leader_epoch, 1);
        let stored = catalog
            .partition("t", target.partition)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.record, owned.record);
        let owner_key = catalog.owner_key("t", target.partition);
        let owner = catalog.kv().get(&owner_key).await.unwrap().unwrap();
        assert_eq!(owner.value, Bytes::from_static(b"1"));
    }
    // a claim on a stale record fails even once the owner key is gone
    catalog
        .release_partition("t", 0, &claimed[0])
        .await
        .unwrap();
    assert!(catalog
        .claim_partitions(&rest[..1], 2)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn claim_batches_stay_within_the_stores_limits() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 1, BTreeMap::new()).await.unwrap();
    let mut one = targets(&catalog, &[0]).await.remove(0);
    let max_ops = catalog.kv().max_txn_ops();
    let sizes = |claims: Vec<ClaimTarget>| -> Vec<usize> {
        let batches = catalog.claim_batches(claims, |t| t);
        batches.iter().map(Vec::len).collect()
    };
    // two compares each and one for their topic
    let first = max_ops / 2 - 1;
    assert_eq!(sizes(vec![one.clone(); first * 2 + 3]), [first, first, 3]);
    let of_topic = |name: &str| ClaimTarget {
        topic: name.into(),
        ..one.clone()
    };
    let three: Vec<_> = (0..first)
        .flat_map(|_| [of_topic("t"), of_topic("u"), of_topic("v")])
        .collect();
    assert_eq!(sizes(three)[0], (max_ops - 3) / 2);
    // claims of existing records check their topic too (a deleted topic keeps its records
    // until its owners let go)
    one.current.revision = 7;
    assert_eq!(sizes(vec![one.clone(); first * 2 + 3]), [first, first, 3]);
    // records with long epoch histories: fewer per transaction, by bytes
    let mut long = one;
    long.current.record.epoch_history = vec![
        EpochStart {
            epoch: 1,
            start_offset: 0
        };
        10_000
    ];
    let batches = catalog.claim_batches(vec![long; 10], |t| t);
    assert!(batches.len() >= 4, "{} batches", batches.len());
    assert!(batches.iter().all(|b| !b.is_empty()));
}

/// A topic of 10,000 partitions is one key, on etcd (128 operations per transaction) as
/// on the embedded store; growing a topic past 128 partitions is one key too, and the new
/// partitions are claimed in batches the store takes.
async fn a_topic_of_any_size_is_one_key(catalog: Catalog) {
    catalog
        .create_topic("big", 10_000, BTreeMap::new())
        .await
        .unwrap();
    catalog
        .create_topic("t", 100, BTreeMap::new())
        .await
        .unwrap();
    let (grown, _) = catalog.add_partitions("t", 3_000, 10_000).await.unwrap();
    assert_eq!(grown.partitions, 3_000);
    let records = format!("{}/partitions/", catalog.root());
    assert!(catalog.kv().range(&records).await.unwrap().kvs.is_empty());

    let added: Vec<i32> = (100..3_000).collect();
    let claims = targets(&catalog, &added).await;
    let batches = catalog.claim_batches(claims, |t| t);
    for batch in &batches {
        let claimed = catalog.claim_partitions(batch, 1).await.unwrap();
        assert_eq!(claimed.map(|c| c.len()), Some(batch.len()));
    }
    // a record and an owner key each
    let stored = catalog.kv().range(&records).await.unwrap().kvs.len();
    assert_eq!(stored, 2 * added.len());
    let last = catalog.claim_partition("big", 9_999, 2).await.unwrap();
    assert_eq!(last.record.leader_epoch, 1);
}

#[tokio::test]
async fn topics_of_any_size_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    a_topic_of_any_size_is_one_key(catalog(&dir)).await;
}

#[tokio::test]
async fn topics_of_any_size_on_etcd() {
    let etcd = crate::meta::test_etcd::TestEtcd::start().await;
    let ttl = std::time::Duration::from_secs(5);
    let store = crate::meta::etcd::EtcdStore::connect(&etcd.endpoints(), None, ttl)
        .await
        .unwrap();
    a_topic_of_any_size_is_one_key(Catalog::new(Arc::new(store), "test")).await;
}

#[test]
fn a_broker_is_reached_at_the_endpoint_of_the_listener_a_client_came_in_on() {
    let endpoint = |listener: &str, port| Endpoint {
        listener: listener.into(),
        host: "b1.example".into(),
        port,
    };
    let record = BrokerRecord {
        id: 1,
        host: "b1.example".into(),
        port: 9092,
        endpoints: vec![endpoint("PLAINTEXT", 9092), endpoint("SSL", 9093)],
        rack: None,
    };
    assert_eq!(record.endpoint("SSL"), Some(("b1.example", 9093)));
    assert_eq!(record.endpoint("PLAINTEXT"), Some(("b1.example", 9092)));
    let plaintext_only = BrokerRecord {
        endpoints: vec![endpoint("PLAINTEXT", 9092)],
        ..record.clone()
    };
    assert_eq!(plaintext_only.endpoint("SSL"), None);
    // a record written before listeners (no endpoints) is a PLAINTEXT listener's
    let old: BrokerRecord =
        serde_json::from_str(r#"{"id":1,"host":"b1.example","port":9092}"#).unwrap();
    assert_eq!(old.endpoint("PLAINTEXT"), Some(("b1.example", 9092)));
    assert_eq!(old.endpoint("SSL"), None);
}

#[tokio::test]
async fn owner_keys_are_released_together_except_one_no_longer_ours() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(&dir);
    catalog.create_topic("t", 3, BTreeMap::new()).await.unwrap();
    let seen = targets(&catalog, &[0, 1, 2]).await;
    let claimed = catalog.claim_partitions(&seen, 1).await.unwrap().unwrap();
    // partition 1 changed hands meanwhile: its key is broker 2's now
    catalog
        .release_partition("t", 1, &claimed[1])
        .await
        .unwrap();
    catalog.claim_partition("t", 1, 2).await.unwrap();
    let ours = claimed.iter().zip(0..).map(|(c, p)| (p, c.owner_revision));
    catalog
        .release_owner_keys("t", ours.collect())
        .await
        .unwrap();
    for (p, left) in [(0, false), (1, true), (2, false)] {
        let key = catalog.owner_key("t", p);
        assert_eq!(catalog.kv().get(&key).await.unwrap().is_some(), left, "{p}");
    }
}
