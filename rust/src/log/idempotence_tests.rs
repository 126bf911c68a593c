//! Idempotent producers against a partition log: retries answered with the first offsets,
//! failed flushes, and the state a new owner rebuilds from the log and its snapshots.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record};
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::batch::tests::{encode_records, record_at};
use super::batch::validate_batches;
use super::partition::{AppendResult, Appended, Partition};
use super::tests::{compact_and_commit, fixture, new_owner, open, produce, release, Fixture};

/// A batch of `count` records from producer `id` at `epoch`, sequences from `first_seq`.
fn batch(id: i64, epoch: i16, first_seq: i32, count: usize) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            producer_id: id,
            producer_epoch: epoch,
            sequence: first_seq + i as i32,
            ..record_at(i as i64, 1_700_000_000_000, Bytes::from_static(b"v"))
        })
        .collect();
    encode_records(&records, Compression::None)
}

fn append(f: &Fixture, p: &Arc<Partition>, bytes: &Bytes) -> Result<Appended, ResponseError> {
    let appended = p.append(validate_batches(bytes, 1 << 20).unwrap(), true)?;
    if let Appended::Buffered(_, buffered) = &appended {
        f.writer.note_append(p, *buffered);
    }
    Ok(appended)
}

fn waiting(appended: Result<Appended, ResponseError>) -> oneshot::Receiver<AppendResult> {
    match appended.unwrap() {
        Appended::Buffered(ack, _) => ack,
        Appended::Stored(at) => panic!("answered at once with {at}"),
    }
}

fn stored(appended: Result<Appended, ResponseError>) -> i64 {
    match appended.unwrap() {
        Appended::Stored(at) => at,
        Appended::Buffered(..) => panic!("appended again"),
    }
}

#[tokio::test]
async fn a_retry_of_a_committed_batch_gets_its_first_offset_and_stores_nothing() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    drop(produce(&f, &p, 2));
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 3)));
    assert!(f.writer.flush().await);
    assert_eq!(first.await.unwrap(), Ok(2));
    assert_eq!(stored(append(&f, &p, &batch(5, 0, 0, 3))), 2);
    assert_eq!(p.high_watermark(), 5);
    let next = waiting(append(&f, &p, &batch(5, 0, 3, 1)));
    assert!(f.writer.flush().await);
    assert_eq!(next.await.unwrap(), Ok(5));
    assert_eq!(
        append(&f, &p, &batch(5, 0, 9, 1)).err(),
        Some(ResponseError::OutOfOrderSequenceNumber)
    );
}

#[tokio::test]
async fn a_retry_of_a_batch_not_committed_yet_is_answered_with_the_original() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 3)));
    let retry = waiting(append(&f, &p, &batch(5, 0, 0, 3)));
    assert!(f.writer.flush().await);
    assert_eq!(first.await.unwrap(), Ok(0));
    assert_eq!(retry.await.unwrap(), Ok(0));
    assert_eq!(p.high_watermark(), 3, "stored once");
}

#[tokio::test]
async fn a_failed_flush_fails_the_producers_later_batches_and_forgets_their_sequences() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let uploads = f.objects.hold_puts("ns/!wal/");
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 2)));
    let writer = f.writer.clone();
    let flush = tokio::spawn(async move { writer.flush().await });
    while f.objects.held_puts() < 1 {
        tokio::task::yield_now().await;
    }
    // Appended while the first uploads: the producer's next batch, its retry of the first,
    // and a producer without idempotence.
    let second = waiting(append(&f, &p, &batch(5, 0, 2, 2)));
    let retry = waiting(append(&f, &p, &batch(5, 0, 0, 2)));
    let plain = produce(&f, &p, 1);
    f.objects.fail_next_puts(1);
    uploads.add_permits(100);
    assert!(!flush.await.unwrap());
    let failed = Err(ResponseError::KafkaStorageError);
    assert_eq!(first.await.unwrap(), failed);
    assert_eq!(second.await.unwrap(), failed, "kept, it would follow a gap");
    assert_eq!(retry.await.unwrap(), failed);
    // The producer resends both in order; the plain batch moved down to the committed end.
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 2)));
    let second = waiting(append(&f, &p, &batch(5, 0, 2, 2)));
    assert!(f.writer.flush().await);
    assert_eq!(plain.await.unwrap(), Ok(0));
    assert_eq!(first.await.unwrap(), Ok(1));
    assert_eq!(second.await.unwrap(), Ok(3));
    assert_eq!(p.high_watermark(), 5);
}

#[tokio::test]
async fn an_older_epoch_is_fenced_and_a_new_one_starts_at_zero() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    drop(waiting(append(&f, &p, &batch(5, 1, 0, 2))));
    assert_eq!(
        append(&f, &p, &batch(5, 0, 2, 1)).err(),
        Some(ResponseError::InvalidProducerEpoch)
    );
    assert_eq!(
        append(&f, &p, &batch(5, 2, 2, 1)).err(),
        Some(ResponseError::OutOfOrderSequenceNumber)
    );
    let bumped = waiting(append(&f, &p, &batch(5, 2, 0, 1)));
    assert!(f.writer.flush().await);
    assert_eq!(bumped.await.unwrap(), Ok(2));
}

#[tokio::test]
async fn a_new_owner_rebuilds_the_state_from_the_write_ahead_runs() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    drop(produce(&f, &p, 2));
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 3)));
    let other = waiting(append(&f, &p, &batch(6, 0, 7, 1)));
    assert!(f.writer.flush().await);
    assert_eq!(first.await.unwrap(), Ok(2));
    assert_eq!(other.await.unwrap(), Ok(5));
    let p = new_owner(&f, &p).await;
    assert_eq!(stored(append(&f, &p, &batch(5, 0, 0, 3))), 2);
    assert_eq!(stored(append(&f, &p, &batch(6, 0, 7, 1))), 5);
    assert_eq!(
        append(&f, &p, &batch(5, 0, 4, 1)).err(),
        Some(ResponseError::OutOfOrderSequenceNumber)
    );
}

#[tokio::test]
async fn a_claimed_log_takes_idempotent_batches_only_once_its_state_is_rebuilt() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    drop(waiting(append(&f, &p, &batch(5, 0, 0, 1))));
    assert!(f.writer.flush().await);
    release(&f, &p).await;
    let p = open(&f).await;
    assert_eq!(
        append(&f, &p, &batch(5, 0, 1, 1)).err(),
        Some(ResponseError::NotLeaderOrFollower)
    );
    assert!(
        p.compact(&f.ctx, i64::MAX).await.is_none(),
        "no compaction either"
    );
    drop(produce(&f, &p, 1));
    p.load_producers(&f.ctx).await;
    drop(waiting(append(&f, &p, &batch(5, 0, 1, 1))));
}

#[tokio::test]
async fn compaction_stores_the_state_and_a_new_owner_starts_from_it() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let first = waiting(append(&f, &p, &batch(5, 0, 0, 3)));
    assert!(f.writer.flush().await);
    assert_eq!(first.await.unwrap(), Ok(0));
    let (due, revision) = compact_and_commit(&f, &p, i64::MAX).await;
    assert_eq!(due.record.segment_end, Some(3));
    assert_eq!(due.record.producer_snapshot, Some(3));
    p.compacted(&f.ctx, due, revision);
    // The runs are below the segment end now: only the snapshot has producer 5.
    let p = new_owner(&f, &p).await;
    assert_eq!(stored(append(&f, &p, &batch(5, 0, 0, 3))), 0);
    let next = waiting(append(&f, &p, &batch(5, 0, 3, 2)));
    assert!(f.writer.flush().await);
    assert_eq!(next.await.unwrap(), Ok(3));
    // The next compaction stores the next snapshot and the old one goes.
    let (due, revision) = compact_and_commit(&f, &p, i64::MAX).await;
    assert_eq!(due.record.producer_snapshot, Some(5));
    p.compacted(&f.ctx, due, revision);
    let old = p.segment_path(&f.ctx, 3, crate::store::SegmentObject::ProducerSnapshot);
    for _ in 0..100 {
        if f.ctx.store.get(&old).await.is_err() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        f.ctx.store.get(&old).await.is_err(),
        "the old snapshot is deleted"
    );
    let p = new_owner(&f, &p).await;
    assert_eq!(stored(append(&f, &p, &batch(5, 0, 3, 2))), 3);
}
