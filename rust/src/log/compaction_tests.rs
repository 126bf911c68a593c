//! When compaction runs and where it reads from: a commit that brings a partition's runs to a
//! segment's worth puts it on the due list at once, and its compaction reads the runs from the
//! cache, not back from the object store.

use std::time::Duration;

use std::sync::Arc;

use super::partition::{now_ms, Partition};
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::batch::tests::encoded_batch;
use super::batch::validate_batches;
use super::tests::{fixture_with, new_owner, open, produce, Fixture};

/// Produces `records` and flushes them; asserts they were committed at `base`.
async fn commit(f: &Fixture, p: &Arc<Partition>, records: usize, base: i64) {
    let ack = produce(f, p, records);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(base));
}

#[tokio::test]
async fn a_segments_worth_of_committed_runs_is_due_at_once_and_compacted_from_the_cache() {
    // about 1.2 kB a produce of 10 records: the second commit makes a segment's worth
    let f = fixture_with(2_000, Duration::from_millis(10), 8 << 20, 64 << 20).await;
    let p = open(&f).await;
    commit(&f, &p, 10, 0).await;
    assert!(
        f.ctx.compaction_due.take().is_empty(),
        "less than a segment"
    );
    commit(&f, &p, 10, 10).await;
    let due = f.ctx.compaction_due.take();
    assert_eq!(due.len(), 1, "a segment's worth: due");
    assert!(std::ptr::eq(&*due[0], &*p));
    // due by size long before the compaction age (an hour here)
    let compacted = p.compact(&f.ctx, now_ms()).await.expect("due by size");
    assert_eq!(
        f.objects.reads_of(".wal"),
        0,
        "the runs came from the cache"
    );
    let revision = compacted.commit_alone(&f.ctx, "orders", 0).await;
    p.compacted(&f.ctx, compacted, revision);
    assert_eq!(p.owned().unwrap().record.segment_end(), 20);
    // counted anew from what the compaction left (nothing): one more small commit is not due
    commit(&f, &p, 10, 20).await;
    assert!(f.ctx.compaction_due.take().is_empty());
}

#[tokio::test]
async fn runs_evicted_before_their_compaction_are_read_back() {
    // no cache: nothing can be held for compaction
    let f = fixture_with(2_000, Duration::from_millis(10), 8 << 20, 0).await;
    let p = open(&f).await;
    for base in [0, 10] {
        commit(&f, &p, 10, base).await;
    }
    assert_eq!(f.ctx.compaction_due.take().len(), 1);
    assert!(p.compact(&f.ctx, now_ms()).await.is_some());
    assert_eq!(f.objects.reads_of(".wal"), 2, "one GET per run");
}

#[tokio::test]
async fn a_partition_whose_runs_were_deleted_before_their_compaction_is_not_due_again() {
    let f = fixture_with(2_000, Duration::from_millis(10), 8 << 20, 64 << 20).await;
    let p = open(&f).await;
    for base in [0, 10] {
        commit(&f, &p, 10, base).await;
    }
    assert_eq!(f.ctx.compaction_due.take().len(), 1);
    // the records go before their compaction: nothing is left to compact
    let deleted = super::retention::delete_records(&f.ctx, &p, 20).await;
    assert_eq!(deleted, Ok(20));
    assert!(p.compact(&f.ctx, now_ms()).await.is_none());
    // counted anew: one more small commit does not make it due
    commit(&f, &p, 1, 20).await;
    assert!(f.ctx.compaction_due.take().is_empty());
}

/// Six commits of ten records (about 1.2 kB each) with segments of 1 kB: six segments due, the
/// uploads of the partition's segments held at the store's gate.
async fn six_segments_due() -> (Fixture, Arc<Partition>, Arc<tokio::sync::Semaphore>) {
    let f = fixture_with(1_000, Duration::from_millis(10), 8 << 20, 64 << 20).await;
    let p = open(&f).await;
    for base in (0..60).step_by(10) {
        commit(&f, &p, 10, base).await;
    }
    let gate = f.objects.hold_puts("ns/orders/0/");
    (f, p, gate)
}

fn compact_in_background(
    f: &Fixture,
    p: &Arc<Partition>,
) -> tokio::task::JoinHandle<Option<super::partition::Compacted>> {
    let (ctx, p) = (f.ctx.clone(), p.clone());
    tokio::spawn(async move { p.compact(&ctx, now_ms()).await })
}

/// Commits a compaction and applies it; the base offsets of the batches read from offset 0.
async fn commit_and_read(
    f: &Fixture,
    p: &Arc<Partition>,
    compacted: super::partition::Compacted,
) -> Vec<i64> {
    let revision = compacted.commit_alone(&f.ctx, "orders", 0).await;
    p.compacted(&f.ctx, compacted, revision);
    let read = super::reader::read(&f.ctx, p, 0, 1 << 20, true)
        .await
        .unwrap();
    super::tests::base_offsets(&read.records)
}

/// Waits until `uploads` wait at the gate at once (fails if they never do).
async fn until_held(f: &Fixture, uploads: usize) {
    let held = async {
        while f.objects.held_puts() < uploads {
            tokio::task::yield_now().await;
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(10), held).await;
    assert!(waited.is_ok(), "{uploads} uploads never waited at once");
}

#[tokio::test]
async fn a_partitions_segments_upload_side_by_side_and_commit_in_order() {
    let (f, p, gate) = six_segments_due().await;
    let compacting = compact_in_background(&f, &p);
    // the next segments were built and sent while the first one's upload waits
    until_held(&f, 4).await;
    gate.add_permits(1_000);
    let compacted = compacting.await.unwrap().expect("due");
    assert_eq!(compacted.record.segment_end(), 60);
    assert_eq!(
        commit_and_read(&f, &p, compacted).await,
        vec![0, 10, 20, 30, 40, 50]
    );
}

#[tokio::test]
async fn a_failed_upload_ends_the_compaction_before_it_and_the_next_takes_what_came_after() {
    let (f, p, gate) = six_segments_due().await;
    let compacting = compact_in_background(&f, &p);
    until_held(&f, 4).await; // data objects of the first segments, sent side by side
    let first = p.segment_path(&f.ctx, 0, crate::store::SegmentObject::Data);
    gate.add_permits(1);
    while f.ctx.store.get(&first).await.is_err() {
        tokio::task::yield_now().await;
    }
    // the gate lets uploads through in the order they came: the second segment's data next
    f.objects.fail_next_puts(1);
    gate.add_permits(1_000);
    let compacted = compacting.await.unwrap().expect("the first segment");
    assert_eq!(
        compacted.record.segment_end(),
        10,
        "nothing after the failure"
    );
    assert!(!compacted.more_due());
    let revision = compacted.commit_alone(&f.ctx, "orders", 0).await;
    p.compacted(&f.ctx, compacted, revision);
    // the segments uploaded after the failure are in the next one's way, and taken as they are
    let again = p.compact(&f.ctx, now_ms()).await.expect("due");
    assert_eq!(again.record.segment_end(), 60);
    assert_eq!(
        commit_and_read(&f, &p, again).await,
        vec![0, 10, 20, 30, 40, 50]
    );
}

/// An owner that lost the partition without seeing it yet (frozen past its lease) while the
/// new owner compacted the log and the sweep deleted the first manifest the new segments hold
/// (the write-ahead index follows the store): its compaction finds the first run it would read
/// gone, sees another owner key in the store, and stops taking writes instead of reporting a
/// hole in the log. (Segments of one run each here: 1 kB segments, 1.2 kB runs.)
#[tokio::test]
async fn a_stale_owner_that_finds_its_runs_compacted_away_stops_taking_writes() {
    let f = fixture_with(1_000, Duration::from_millis(10), 8 << 20, 64 << 20).await;
    let stale = open(&f).await;
    for base in [0, 10] {
        commit(&f, &stale, 10, base).await;
    }
    let first_run = f.ctx.wal.runs_from((f.topic.id, 0), 0)[0].object.clone();
    let owner = new_owner(&f, &stale).await;
    let compacted = owner.compact(&f.ctx, now_ms()).await.expect("due by size");
    let revision = compacted.commit_alone(&f.ctx, "orders", 0).await;
    owner.compacted(&f.ctx, compacted, revision);
    assert_eq!(owner.owned().unwrap().record.segment_end(), 20);
    let manifests = f.ctx.wal.manifests().into_iter();
    let swept = manifests.filter(|(_, m)| *m.object == *first_run);
    for (key, _) in swept.collect::<Vec<_>>() {
        f.ctx.wal.remove(&key);
    }
    assert!(stale.is_leader(), "it has not seen the loss");
    assert!(stale.compact(&f.ctx, now_ms()).await.is_none());
    assert!(!stale.is_leader());
    let batch = encoded_batch(1, 100, Compression::None);
    let refused = stale.append(validate_batches(&batch, 1 << 20).unwrap(), true);
    assert!(matches!(refused, Err(ResponseError::NotLeaderOrFollower)));
    // The partition's owner goes on.
    assert!(owner.is_leader());
    commit(&f, &owner, 1, 20).await;
}
