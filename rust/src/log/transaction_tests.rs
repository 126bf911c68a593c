//! Transactions on a partition log: transactional batches checked against the coordinator's
//! record, the markers that close them, the last stable offset and the aborted transactions,
//! through failed flushes and owner changes.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record};
use kafka_protocol::ResponseError;
use tokio::sync::oneshot;

use super::batch::tests::{encode_records, record_at};
use super::batch::validate_batches;
use super::partition::{AppendResult, Appended, Marked, Partition};
use super::producers::AbortedTxn;
use super::reader;
use super::tests::{compact_and_commit, fixture, follower_of, new_owner, open, produce, Fixture};

/// `count` records of producer `id` at `epoch` in a transaction, sequences from `first_seq`.
fn txn_batch(id: i64, epoch: i16, first_seq: i32, count: usize) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: true,
            producer_id: id,
            producer_epoch: epoch,
            sequence: first_seq + i as i32,
            ..record_at(i as i64, 1_700_000_000_000, Bytes::from_static(b"t"))
        })
        .collect();
    encode_records(&records, Compression::None)
}

/// Appends with a coordinator that confirms every transaction (`verified`) or none.
fn append(
    f: &Fixture,
    p: &Arc<Partition>,
    bytes: &Bytes,
    verified: bool,
) -> Result<oneshot::Receiver<AppendResult>, ResponseError> {
    let verify = |_: i64, _: i16| {
        if verified {
            Ok(())
        } else {
            Err(ResponseError::NotEnoughReplicas)
        }
    };
    let batches = validate_batches(bytes, 1 << 20).unwrap();
    match p.append_verified(batches, true, &verify)? {
        Appended::Buffered(ack, buffered) => {
            f.writer.note_append(p, buffered);
            Ok(ack)
        }
        Appended::Stored(at) => panic!("answered at once with {at}"),
    }
}

/// Appends a marker and returns its receiver (panics if nothing was open).
fn mark(
    f: &Fixture,
    p: &Arc<Partition>,
    id: i64,
    epoch: i16,
    commit: bool,
) -> oneshot::Receiver<AppendResult> {
    match p.append_marker(id, epoch, commit).unwrap() {
        Marked::Buffered(ack, bytes) => {
            f.writer.note_append(p, bytes);
            ack
        }
        Marked::Nothing => panic!("no transaction of {id} is open"),
    }
}

async fn flushed(f: &Fixture, acks: Vec<oneshot::Receiver<AppendResult>>) -> Vec<i64> {
    assert!(f.writer.flush().await);
    let mut offsets = Vec::new();
    for ack in acks {
        offsets.push(ack.await.unwrap().unwrap());
    }
    offsets
}

/// Base offsets of the batches a read_committed fetch from `offset` returns.
async fn committed_read(f: &Fixture, p: &Arc<Partition>, offset: i64) -> Vec<i64> {
    let limit = p.last_stable_offset().unwrap();
    let read = reader::read_below(&f.ctx, p, (offset, limit), 1 << 20, true)
        .await
        .unwrap();
    read.records
        .iter()
        .filter_map(|b| super::batch::BatchHeader::parse(b).map(|h| h.base_offset))
        .collect()
}

#[tokio::test]
async fn an_open_transaction_holds_the_last_stable_offset_until_its_marker_commits() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    drop(produce(&f, &p, 2));
    let txn = append(&f, &p, &txn_batch(7, 0, 0, 3), true).unwrap();
    let after = produce(&f, &p, 1);
    assert_eq!(flushed(&f, vec![txn, after]).await, vec![2, 5]);
    assert_eq!(p.high_watermark(), 6);
    assert_eq!(p.last_stable_offset(), Ok(2), "the transaction began at 2");
    assert_eq!(
        committed_read(&f, &p, 0).await,
        vec![0],
        "only what lies below it"
    );
    let marker = mark(&f, &p, 7, 0, true);
    assert_eq!(
        p.last_stable_offset(),
        Ok(2),
        "not until the marker is committed"
    );
    assert_eq!(flushed(&f, vec![marker]).await, vec![6]);
    assert_eq!(p.last_stable_offset(), Ok(7));
    assert_eq!(committed_read(&f, &p, 0).await, vec![0, 2, 5, 6]);
    assert!(
        p.aborted_between(0, 7).is_empty(),
        "a commit aborts nothing"
    );
    // Closed: another marker of the producer has nothing to mark.
    assert!(matches!(p.append_marker(7, 0, true), Ok(Marked::Nothing)));
}

#[tokio::test]
async fn an_abort_lists_the_transaction_for_read_committed_readers() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let first = append(&f, &p, &txn_batch(7, 0, 0, 2), true).unwrap();
    let other = append(&f, &p, &txn_batch(8, 0, 0, 1), true).unwrap();
    let second = append(&f, &p, &txn_batch(7, 0, 2, 2), true).unwrap();
    flushed(&f, vec![first, other, second]).await;
    let abort = mark(&f, &p, 7, 0, false);
    assert_eq!(flushed(&f, vec![abort]).await, vec![5]);
    let aborted = AbortedTxn {
        producer_id: 7,
        first_offset: 0,
        last_offset: 5,
    };
    assert_eq!(p.aborted_between(0, 6), vec![aborted]);
    assert_eq!(p.aborted_between(6, 10), vec![], "ended before 6");
    assert_eq!(p.last_stable_offset(), Ok(2), "producer 8's is still open");
    let commit = mark(&f, &p, 8, 0, true);
    flushed(&f, vec![commit]).await;
    assert_eq!(p.last_stable_offset(), Ok(7));
}

#[tokio::test]
async fn a_transactional_batch_opens_a_transaction_only_when_the_coordinator_confirms_it() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    assert_eq!(
        append(&f, &p, &txn_batch(7, 0, 0, 1), false).err(),
        Some(ResponseError::NotEnoughReplicas)
    );
    let first = append(&f, &p, &txn_batch(7, 0, 0, 1), true).unwrap();
    // Open here at its epoch: the next batch needs no confirmation.
    let next = append(&f, &p, &txn_batch(7, 0, 1, 1), false).unwrap();
    flushed(&f, vec![first, next]).await;
    // An older epoch is fenced; once the marker closed it, a new transaction needs the
    // coordinator again (a late batch of the decided one is kept out).
    assert_eq!(
        append(&f, &p, &txn_batch(7, -1, 0, 1), true).err(),
        Some(ResponseError::InvalidProducerEpoch)
    );
    let marker = mark(&f, &p, 7, 0, true);
    flushed(&f, vec![marker]).await;
    assert_eq!(
        append(&f, &p, &txn_batch(7, 0, 2, 1), false).err(),
        Some(ResponseError::NotEnoughReplicas)
    );
    assert_eq!(p.last_stable_offset(), Ok(p.high_watermark()));
}

/// The second transaction protocol (KIP-890 part 2): the marker carries the epoch EndTxn
/// bumped to, so a late batch of the ended transaction (a retry still in flight) is of an
/// older epoch than the partition's producer and is refused, while the producer's next
/// transaction, at the bumped epoch, starts at sequence 0. The late batch can neither reopen
/// the ended transaction nor slip into the next one (Jepsen's aborted-read anomaly).
#[tokio::test]
async fn a_late_batch_of_an_ended_transaction_cannot_join_the_next_one_at_the_bumped_epoch() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    // The coordinator's record: epoch 1 ongoing after the bump (what `Transactions::verify`
    // answers for this partition).
    let coordinator = |_: i64, epoch: i16| match epoch {
        1 => Ok(()),
        _ => Err(ResponseError::InvalidProducerEpoch),
    };
    let verify = |bytes: &Bytes| {
        let batches = validate_batches(bytes, 1 << 20).unwrap();
        match p.append_verified(batches, true, &coordinator)? {
            Appended::Buffered(ack, buffered) => {
                f.writer.note_append(&p, buffered);
                Ok(ack)
            }
            Appended::Stored(at) => panic!("answered at once with {at}"),
        }
    };
    let first = append(&f, &p, &txn_batch(7, 0, 0, 2), true).unwrap();
    flushed(&f, vec![first]).await;
    let marker = mark(&f, &p, 7, 1, true);
    assert_eq!(flushed(&f, vec![marker]).await, vec![2]);
    assert_eq!(p.last_stable_offset(), Ok(3));
    let late = txn_batch(7, 0, 2, 1);
    assert_eq!(
        verify(&late).err(),
        Some(ResponseError::InvalidProducerEpoch)
    );
    let next = verify(&txn_batch(7, 1, 0, 2)).unwrap();
    assert_eq!(flushed(&f, vec![next]).await, vec![3]);
    assert_eq!(
        verify(&late).err(),
        Some(ResponseError::InvalidProducerEpoch)
    );
    assert_eq!(p.high_watermark(), 5, "the late batch stored nothing");
    assert_eq!(
        p.last_stable_offset(),
        Ok(3),
        "the next transaction is open from 3"
    );
}

#[tokio::test]
async fn a_marker_whose_flush_failed_leaves_the_transaction_open_for_the_next_try() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let txn = append(&f, &p, &txn_batch(7, 0, 0, 2), true).unwrap();
    flushed(&f, vec![txn]).await;
    let marker = mark(&f, &p, 7, 0, false);
    f.objects.fail_next_puts(1);
    assert!(!f.writer.flush().await);
    assert!(marker.await.unwrap().is_err());
    assert_eq!(p.last_stable_offset(), Ok(0));
    assert!(p.aborted_between(0, 10).is_empty());
    let again = mark(&f, &p, 7, 0, false);
    assert_eq!(flushed(&f, vec![again]).await, vec![2]);
    assert_eq!(p.last_stable_offset(), Ok(3));
    assert_eq!(p.aborted_between(0, 3).len(), 1);
}

#[tokio::test]
async fn a_new_owner_rebuilds_open_and_aborted_transactions_from_runs_and_snapshots() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let aborted = append(&f, &p, &txn_batch(7, 0, 0, 2), true).unwrap();
    flushed(&f, vec![aborted]).await;
    let abort = mark(&f, &p, 7, 0, false);
    let open_one = append(&f, &p, &txn_batch(8, 0, 0, 1), true).unwrap();
    flushed(&f, vec![abort, open_one]).await;
    let expected = vec![AbortedTxn {
        producer_id: 7,
        first_offset: 0,
        last_offset: 2,
    }];
    // From the write-ahead runs (the markers replayed).
    let p = new_owner(&f, &p).await;
    assert_eq!(p.last_stable_offset(), Ok(3));
    assert_eq!(p.aborted_between(0, 10), expected);
    // From the snapshot compaction stores, the runs gone below the segment end.
    let (due, revision) = compact_and_commit(&f, &p, i64::MAX).await;
    assert_eq!(due.record.producer_snapshot, Some(4));
    p.compacted(&f.ctx, due, revision);
    let p = new_owner(&f, &p).await;
    assert_eq!(
        p.last_stable_offset(),
        Ok(3),
        "producer 8's transaction is still open"
    );
    assert_eq!(p.aborted_between(0, 10), expected);
    // The new owner closes it with the marker the coordinator still has it write.
    let commit = mark(&f, &p, 8, 0, true);
    assert_eq!(flushed(&f, vec![commit]).await, vec![4]);
    assert_eq!(p.last_stable_offset(), Ok(5));
}

#[tokio::test]
async fn a_log_is_free_of_transactions_until_a_transactional_run_or_a_snapshot_holds_one() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let plain = produce(&f, &p, 2);
    flushed(&f, vec![plain]).await;
    let follower = follower_of(&f, &p);
    // Brokers of other racks answer read_committed fetches of this log: nothing to hold back.
    assert!(p.free_of_transactions(&f.ctx.wal));
    assert!(follower.free_of_transactions(&f.ctx.wal));
    let txn = append(&f, &p, &txn_batch(7, 0, 0, 1), true).unwrap();
    flushed(&f, vec![txn]).await;
    assert!(!p.free_of_transactions(&f.ctx.wal));
    assert!(!follower.free_of_transactions(&f.ctx.wal));
    let commit = mark(&f, &p, 7, 0, true);
    flushed(&f, vec![commit]).await;
    // Compacted, the runs lie below the segment end and the producer state is in a snapshot,
    // which may hold transactions: still only the owner answers.
    let (due, revision) = compact_and_commit(&f, &p, i64::MAX).await;
    assert!(due.record.producer_snapshot.is_some());
    p.compacted(&f.ctx, due, revision);
    assert!(!p.free_of_transactions(&f.ctx.wal));
}
