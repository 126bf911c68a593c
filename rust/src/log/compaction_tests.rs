//! When compaction runs and where it reads from: a commit that brings a partition's runs to a
//! segment's worth puts it on the due list at once, and its compaction reads the runs from the
//! cache, not back from the object store.

use std::time::Duration;

use std::sync::Arc;

use super::partition::{now_ms, Partition};
use super::tests::{fixture_with, open, produce, Fixture};

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
