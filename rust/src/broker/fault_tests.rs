//! Metadata-store faults placed by failpoints (`meta::faulty_kv`), not by timing: a commit
//! whose answer is lost while the broker's session ends, a writer key opened after the session
//! its flight was taken under ended, compaction commits whose answers are lost.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;

use crate::broker::tests::{faulty_broker, produce, produce_answer, produce_start};
use crate::broker::Broker;
use crate::log::batch::tests::encoded_batch;
use crate::log::partition::{AppendResult, Partition};
use crate::log::reader;
use crate::log::segment::BatchWalker;
use crate::meta::faulty_kv::writes;
use crate::meta::mirror::tests::eventually;
use crate::meta::wal::{encode_manifest, CommitGuard, WalManifest};

#[tokio::test]
async fn a_follower_that_replaces_a_log_whose_commit_is_unsettled_never_starts_below_its_end() {
    let (t, kv) = faulty_broker(1 << 20).await;
    let b = &t.broker;
    b.create_topic("t", 1, Default::default()).await.unwrap();
    assert_eq!(produce(b, "t", 0, 12).await, 0);
    let slot = b.topic("t").unwrap().partitions[0].clone();
    let owner = slot.current();
    let key = (owner.topic_id, 0);
    // The next commit (offsets 12-13) lands, but its answer is lost; settling it waits.
    kv.lose_answer(writes("/wal/"));
    let settle = Arc::new(Notify::new());
    kv.hold(writes("/writers/"), settle.clone());
    let producer = spawn_produce(b, 2);
    kv.tripped(2).await;
    // The mirror brought the manifest while the log still owned the partition (its own end
    // moves only with its commits, which is still unsettled).
    assert!(eventually(|| b.log.wal.committed_end(key) == Some(14)).await);
    assert_eq!(owner.high_watermark(), 12);
    // The session ends (etcd, frozen past the lease, expired it): the partition is dropped,
    // and the broker rejoins (held here, so no later pass of the reconciler looks at it).
    let rejoin = Arc::new(Notify::new());
    kv.hold(writes("/brokers/"), rejoin.clone());
    kv.expire_session().await;
    kv.tripped(3).await;
    let follower = slot.current();
    assert!(!Arc::ptr_eq(&follower, &owner));
    assert!(
        follower.high_watermark() >= 14,
        "the follower starts at the committed end, not at its predecessor's {}",
        owner.high_watermark()
    );
    assert!(follower.read_view(14).is_ok());
    rejoin.notify_one();
    // The commit is settled as landed: its producer is acknowledged.
    settle.notify_one();
    assert_eq!(producer.await.unwrap(), Ok(12));
    assert!(slot.current().high_watermark() >= 14);
    assert!(slot.current().read_view(14).is_ok());
    // Claimed again under the new session, the log goes on after the settled commit.
    assert!(eventually(|| slot.current().is_leader()).await);
    assert_eq!(produce(b, "t", 0, 1).await, 14);
}

#[tokio::test]
async fn a_flight_whose_session_ended_is_not_committed_under_the_next_one() {
    let (t, kv) = faulty_broker(1 << 20).await;
    let b = &t.broker;
    b.create_topic("t", 1, Default::default()).await.unwrap();
    assert_eq!(produce(b, "t", 0, 2).await, 0);
    let slot = b.topic("t").unwrap().partitions[0].clone();
    let owner = slot.current();
    // A commit's answer is lost and settling it waits: the commits behind it wait too.
    kv.lose_answer(writes("/wal/"));
    let settle = Arc::new(Notify::new());
    kv.hold(writes("/writers/"), settle.clone());
    let first = spawn_produce(b, 2);
    kv.tripped(2).await;
    // another flight is taken meanwhile, in the same session
    let batch = encoded_batch(3, 100, Compression::None);
    let second = produce_start(b, "t", 0, &batch);
    assert!(eventually(|| !owner.has_pending()).await);
    // The session ends: the partition is dropped, its owner key gone with the session. The
    // broker's rejoining is held, so no claim of the partition comes in between.
    let rejoin = Arc::new(Notify::new());
    kv.hold(writes("/brokers/"), rejoin.clone());
    kv.expire_session().await;
    kv.tripped(3).await;
    assert!(!Arc::ptr_eq(&slot.current(), &owner));
    settle.notify_one();
    assert_eq!(first.await.unwrap(), Ok(2));
    // Settling left the writer key to be opened again, now in the next session: the second
    // flight, taken for a partition owned in the session that ended, is not committed in it.
    assert_eq!(
        second.await.unwrap(),
        Err(ResponseError::NotLeaderOrFollower)
    );
    let manifests = b.log.catalog.manifests_prefix();
    assert_eq!(kv_keys(b, &manifests).await.len(), 2);
    rejoin.notify_one();
    // the partition is claimed again under the new session and goes on after the first
    assert!(eventually(|| slot.current().is_leader()).await);
    assert_eq!(produce(b, "t", 0, 1).await, 4);
}

/// Produces `records` to t-0 in a task of its own; what the producer is answered.
fn spawn_produce(b: &Arc<Broker>, records: usize) -> tokio::task::JoinHandle<AppendResult> {
    let b = b.clone();
    let batch = encoded_batch(records, 100, Compression::None);
    tokio::spawn(async move { produce_answer(&b, "t", 0, &batch).await })
}

/// Partition t-0 holding two segments' worth of write-ahead runs (offsets 0..40, compacted
/// into segments of two batches each).
async fn compaction_due(b: &Arc<Broker>) -> Arc<Partition> {
    b.create_topic("t", 1, Default::default()).await.unwrap();
    for round in 0..4 {
        assert_eq!(produce(b, "t", 0, 10).await, round * 10);
    }
    b.topic("t").unwrap().partitions[0].current()
}

#[tokio::test]
async fn a_compaction_commit_that_landed_unanswered_is_taken_in_before_anything_acts_on_it() {
    let (t, kv) = faulty_broker(2_000).await;
    let b = &t.broker;
    let p = compaction_due(b).await;
    kv.lose_answer(writes("/partitions/"));
    b.compact_owned().await;
    // settled as landed before compaction went on: the owner has the segments it committed
    let committed = p.owned().unwrap().record;
    assert_eq!(committed.segment_end(), 40);
    assert_eq!(p.segments().len(), 2);
    for segment in p.segments() {
        assert!(b.log.cache.contains(&p.object_key(segment.base_offset)));
    }
    // the objects compacted go, and every record is still read from the segments
    b.delete_compacted_objects().await;
    assert!(b.log.store.list_wal().await.unwrap().is_empty());
    let read = reader::read(&b.log, &p, 0, 1 << 20, true).await.unwrap();
    let records = read.records.concat();
    let offsets: Vec<i64> = BatchWalker::new(&records)
        .map(|r| r.unwrap().1.base_offset)
        .collect();
    assert_eq!(offsets, vec![0, 10, 20, 30]);
}

#[tokio::test]
async fn a_compaction_commit_that_did_not_land_is_fenced_and_done_again() {
    let (t, kv) = faulty_broker(2_000).await;
    let b = &t.broker;
    let p = compaction_due(b).await;
    kv.fail(writes("/partitions/"));
    b.compact_owned().await;
    // not landed: the record was written again as it was, and the owner knows its revision
    let (record, revision) = p.committed_record();
    assert_eq!(record.segment_end(), 0);
    let stored = b.log.catalog.partition("t", 0).await.unwrap().unwrap();
    assert_eq!((stored.record, stored.revision), (record, revision));
    // so the next round compacts and commits
    b.compact_owned().await;
    assert_eq!(p.owned().unwrap().record.segment_end(), 40);
}

#[tokio::test]
async fn a_flight_taken_before_a_sweep_was_marked_is_not_committed_after_it() {
    let (t, kv) = faulty_broker(1 << 20).await;
    let b = &t.broker;
    b.create_topic("t", 1, Default::default()).await.unwrap();
    assert_eq!(produce(b, "t", 0, 2).await, 0);
    // The commit is delayed (an etcd outage), long enough for the sweep to take its object
    // for abandoned: the sweep marks the broker before deleting anything.
    let commit = Arc::new(Notify::new());
    kv.hold(writes("/wal/"), commit.clone());
    let delayed = spawn_produce(b, 3);
    kv.tripped(1).await;
    b.log.catalog.mark_sweep(1, 2).await.unwrap();
    commit.notify_one();
    assert_eq!(
        delayed.await.unwrap(),
        Err(ResponseError::KafkaStorageError)
    );
    let manifests = b.log.catalog.manifests_prefix();
    assert_eq!(kv_keys(b, &manifests).await.len(), 1);
    // the writer takes the new mark: the next flight commits, right after the first
    assert_eq!(produce(b, "t", 0, 1).await, 2);
}

#[tokio::test]
async fn the_sweep_keeps_an_object_whose_commit_lands_before_its_mark() {
    let (t, kv) = faulty_broker(1 << 20).await;
    let b = &t.broker;
    let (store, catalog) = (&b.log.store, &b.log.catalog);
    // two objects of a broker 2 (not registered) that no manifest names yet
    let name = |seq: u64| format!("{:016x}-{seq:012}", 0xab);
    let (abandoned, late) = (store.wal_path(2, &name(1)), store.wal_path(2, &name(2)));
    for path in [&abandoned, &late] {
        store
            .put_new(path, Bytes::from_static(b"KWAL"))
            .await
            .unwrap();
    }
    let mark = Arc::new(Notify::new());
    kv.hold(writes("/sweeps/"), mark.clone());
    let sweep = {
        let b = b.clone();
        tokio::spawn(async move { b.sweep_objects_older_than(Duration::ZERO).await })
    };
    kv.tripped(1).await;
    // the late object's commit lands after the sweep listed the objects, before its mark
    let writer = catalog.open_writer(2, 1, 0).await.unwrap().unwrap();
    let guard = CommitGuard { writer, sweep: 0 };
    let manifest = WalManifest {
        object: late.to_string(),
        broker: 2,
        created_ms: 0,
        size: 4,
        topics: Vec::new(),
    };
    let committed = [(
        catalog.manifest_key(2, &name(2)),
        encode_manifest(&manifest),
    )];
    let writer = catalog
        .commit_manifests(2, guard, &committed)
        .await
        .unwrap();
    mark.notify_one();
    sweep.await.unwrap();
    let left: Vec<_> = store
        .list_wal()
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(left, vec![late]);
    // and no commit of broker 2 conditioned on the mark before lands any more
    let guard = CommitGuard {
        writer: writer.unwrap(),
        sweep: 0,
    };
    assert_eq!(catalog.advance_writer(2, guard).await.unwrap(), None);
}

async fn kv_keys(b: &Broker, prefix: &str) -> Vec<String> {
    let listing = b.log.catalog.kv().range(prefix).await.unwrap();
    listing.kvs.into_iter().map(|kv| kv.key).collect()
}
