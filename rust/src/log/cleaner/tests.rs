//! The cleaner on partition logs over a memory store and an embedded catalog: Kafka's rules
//! (the last record of each key, offsets unchanged, tombstones for delete.retention.ms after
//! their first cleaning, the lag bounds, an offset map that fills), and its commit fenced
//! like any owner's change.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::*;
use crate::log::batch::tests::{encode_records, record_at};
use crate::log::batch::validate_batches;
use crate::log::partition::now_ms;
use crate::log::reader;
use crate::log::segment::BatchWalker;
use crate::log::tests::{fixture_with, open, release, Fixture};

/// A record: key, value (None: a tombstone).
type Kv = (Option<&'static str>, Option<&'static str>);

/// What a consumer reads: (offset, key, value, timestamp).
type Read = (i64, Option<String>, Option<String>, i64);

const T0: i64 = 1_700_000_000_000;

fn rules() -> CleaningRules {
    CleaningRules {
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        max_compaction_lag_ms: i64::MAX,
        delete_retention_ms: 1_000,
        segment_bytes: 1 << 20,
    }
}

fn settings() -> CleanerSettings {
    CleanerSettings {
        map_bytes: 1 << 20,
        delete_delay: Duration::ZERO,
    }
}

/// `records` as one batch, the n-th with timestamp `T0 + n`.
fn batch(records: &[Kv], compression: Compression) -> Bytes {
    let records: Vec<_> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| kafka_protocol::records::Record {
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            sequence: i as i32, // one batch: the codec crate cuts where offset - sequence changes
            ..record_at(i as i64, T0 + i as i64, Bytes::new())
        })
        .collect();
    encode_records(&records, compression)
}

/// Produces `batches` in one flush; the base offset of the first.
async fn commit(f: &Fixture, p: &Arc<Partition>, batches: &[Bytes]) -> i64 {
    let mut acks = Vec::new();
    for bytes in batches {
        let validated = validate_batches(bytes, 1 << 20).unwrap();
        let (ack, appended) = p.append(validated, true).unwrap().buffered();
        f.writer.note_append(p, appended);
        acks.push(ack);
    }
    assert!(f.writer.flush().await);
    let mut bases = Vec::new();
    for ack in acks {
        bases.push(ack.await.unwrap().unwrap());
    }
    bases[0]
}

/// Compacts every committed run into segments (due by age: the clock is an hour on).
async fn compact_all(f: &Fixture, p: &Arc<Partition>) {
    while let Some(compacted) = p.compact(&f.ctx, now_ms() + 7_200_000).await {
        let revision = compacted.commit_alone(&f.ctx, "orders", 0).await;
        p.compacted(&f.ctx, compacted, revision);
    }
}

/// A segment of each of `segments` (its batches in one flush, then compacted).
async fn segments_of(f: &Fixture, p: &Arc<Partition>, segments: &[&[Kv]]) {
    for records in segments {
        let batches: Vec<Bytes> = records
            .iter()
            .map(|kv| batch(std::slice::from_ref(kv), Compression::None))
            .collect();
        commit(f, p, &batches).await;
        compact_all(f, p).await;
    }
}

/// A record committed above the segments (the active tail: the segments are all cleanable).
async fn tail(f: &Fixture, p: &Arc<Partition>) -> i64 {
    let record: Kv = (Some("tail"), Some("t"));
    commit(f, p, &[batch(&[record], Compression::None)]).await
}

/// Objects in the partition's folder that a cleaning wrote.
async fn cleanings_objects(f: &Fixture) -> usize {
    let listed = f.ctx.store.list_partition("orders", 0).await.unwrap();
    listed.iter().filter(|s| s.generation.is_some()).count()
}

/// Every record a consumer reads from `offset` on.
async fn read_from(f: &Fixture, p: &Arc<Partition>, offset: i64) -> Vec<Read> {
    let read = reader::read(&f.ctx, p, offset, 1 << 20, true)
        .await
        .unwrap();
    let bytes = Bytes::from(read.records.concat());
    let mut out = Vec::new();
    for walked in BatchWalker::new(&bytes) {
        let (at, header) = walked.unwrap();
        let batch = &bytes[at..at + header.size];
        let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
        walk_batch(&header, batch, 1 << 20, |r| {
            let offset = header.base_offset + i64::from(r.offset_delta);
            let timestamp = header.record_timestamp(r.timestamp_delta);
            out.push((offset, text(r.key), text(r.value), timestamp));
            Ok::<_, batch::BatchProblem>(())
        })
        .unwrap();
    }
    out.retain(|r| r.0 >= offset);
    out
}

/// (offset, value) of each record but the active tail's (`tail`).
fn offsets_and_values(read: &[Read]) -> Vec<(i64, Option<&str>)> {
    read.iter()
        .filter(|r| r.1.as_deref() != Some("tail"))
        .map(|r| (r.0, r.2.as_deref()))
        .collect()
}

async fn clean_now(f: &Fixture, p: &Arc<Partition>, rules: CleaningRules, at: i64) -> Cleaning {
    let cleaned = clean(&f.ctx, p, rules, settings(), at).await.unwrap();
    // the replaced objects go after the delay (none here)
    tokio::time::sleep(Duration::from_millis(20)).await;
    cleaned.expect("a cleaning was due")
}

async fn fixture() -> (Fixture, Arc<Partition>) {
    let f = fixture_with(1 << 20, Duration::from_millis(10), 8 << 20, 64 << 20).await;
    let p = open(&f).await;
    (f, p)
}

#[tokio::test]
async fn the_last_record_of_each_key_stays_at_its_offset_and_the_active_tail_is_untouched() {
    let (f, p) = fixture().await;
    let first: &[Kv] = &[(Some("a"), Some("a0")), (Some("b"), Some("b1"))];
    let second: &[Kv] = &[(Some("a"), Some("a2")), (Some("c"), Some("c3"))];
    let third: &[Kv] = &[(Some("b"), Some("b4")), (Some("a"), Some("a5"))];
    segments_of(&f, &p, &[first, second, third]).await;
    // the active tail: committed, not in a segment yet
    commit(
        &f,
        &p,
        &[batch(&[(Some("a"), Some("a6"))], Compression::None)],
    )
    .await;
    assert_eq!(p.segments().len(), 3);
    let cleaning = clean_now(&f, &p, rules(), now_ms()).await;
    assert_eq!(cleaning.records_removed, 3, "a0, b1, a2");
    let cleaned = p.owned().unwrap().record.cleaned.unwrap();
    assert_eq!((cleaned.end, cleaned.dirty_from), (6, 6));
    let read = read_from(&f, &p, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [
            (3, Some("c3")),
            (4, Some("b4")),
            (5, Some("a5")),
            (6, Some("a6"))
        ]
    );
    assert_eq!(read[0].3, T0, "each record keeps its timestamp");
    // a fetch from an offset cleaned away starts at the next record
    assert_eq!(read_from(&f, &p, 1).await[0].0, 3);
    // ListOffsets by timestamp: the first record there is, past the gap (all are at T0)
    let found = crate::log::timestamps::offset_for_timestamp(&f.ctx, &p, T0).await;
    assert_eq!(found.unwrap(), Some((3, T0)));
    // one segment of a fresh generation, named so; the replaced objects are gone
    let segments = p.segments();
    assert_eq!(segments.len(), 1);
    assert_eq!(segments[0].generation, Some(cleaned.generation));
    assert_eq!((segments[0].base_offset, segments[0].last_offset), (0, 5));
    let listed = f.ctx.store.list_partition("orders", 0).await.unwrap();
    assert!(
        listed
            .iter()
            .all(|s| s.generation == Some(cleaned.generation)),
        "{listed:?}"
    );
    // nothing is dirty now, so nothing is due
    let again = clean(&f.ctx, &p, rules(), settings(), now_ms())
        .await
        .unwrap();
    assert_eq!(again, None);
}

#[tokio::test]
async fn a_cleaning_covers_the_cleaned_part_again_with_the_keys_written_since() {
    let (f, p) = fixture().await;
    let first: &[Kv] = &[(Some("a"), Some("a0")), (Some("b"), Some("b1"))];
    segments_of(&f, &p, &[first]).await;
    tail(&f, &p).await; // at 2
    clean_now(&f, &p, rules(), now_ms()).await;
    let second: &[Kv] = &[(Some("b"), Some("b3")), (Some("c"), Some("c4"))];
    segments_of(&f, &p, &[second]).await;
    tail(&f, &p).await;
    let cleaning = clean_now(&f, &p, rules(), now_ms()).await;
    // (the first tail stays: its key's later record is in the active tail, which no cleaning
    // reads)
    assert_eq!(cleaning.records_removed, 1, "b1");
    let read = read_from(&f, &p, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(0, Some("a0")), (3, Some("b3")), (4, Some("c4"))]
    );
}

#[tokio::test]
async fn tombstones_stay_for_delete_retention_after_their_first_cleaning_then_go() {
    let (f, p) = fixture().await;
    let deleted: &[Kv] = &[
        (Some("a"), Some("a0")),
        (Some("b"), Some("b1")),
        (Some("a"), None),
    ];
    segments_of(&f, &p, &[deleted]).await;
    tail(&f, &p).await; // at 3
    let first = now_ms();
    clean_now(&f, &p, rules(), first).await;
    let read = read_from(&f, &p, 0).await;
    assert_eq!(offsets_and_values(&read), [(1, Some("b1")), (2, None)]);
    assert_eq!(read[1].3, T0, "the horizon moves no record's timestamp");
    // later data makes the log dirty again; before the horizon the tombstone stays
    segments_of(&f, &p, &[&[(Some("c"), Some("c4"))]]).await;
    tail(&f, &p).await;
    clean_now(&f, &p, rules(), first + 999).await;
    let read = read_from(&f, &p, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(1, Some("b1")), (2, None), (4, Some("c4"))]
    );
    // a cleaning past it removes it (its horizon was set by the first cleaning)
    segments_of(&f, &p, &[&[(Some("d"), Some("d6"))]]).await;
    tail(&f, &p).await;
    clean_now(&f, &p, rules(), first + 1_000).await;
    let read = read_from(&f, &p, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(1, Some("b1")), (4, Some("c4")), (6, Some("d6"))]
    );
}

#[tokio::test]
async fn records_without_a_key_are_not_kept() {
    let (f, p) = fixture().await;
    segments_of(&f, &p, &[&[(None, Some("x")), (Some("a"), Some("a1"))]]).await;
    tail(&f, &p).await;
    clean_now(&f, &p, rules(), now_ms()).await;
    let read = read_from(&f, &p, 0).await;
    assert_eq!(offsets_and_values(&read), [(1, Some("a1"))]);
}

#[tokio::test]
async fn a_compressed_batch_keeps_its_codec_and_its_other_records() {
    let codecs = [
        (Compression::Gzip, 1),
        (Compression::Snappy, 2),
        (Compression::Lz4, 3),
        (Compression::Zstd, 4),
    ];
    for (compression, id) in codecs {
        let (f, p) = fixture().await;
        let records: &[Kv] = &[
            (Some("a"), Some("a0")),
            (Some("b"), Some("b1")),
            (Some("a"), Some("a2")),
        ];
        commit(&f, &p, &[batch(records, compression)]).await;
        compact_all(&f, &p).await;
        tail(&f, &p).await;
        clean_now(&f, &p, rules(), now_ms()).await;
        let read = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
        let bytes = Bytes::from(read.records.concat());
        let header = BatchHeader::parse(&bytes).unwrap();
        assert_eq!(header.compression(), id, "{compression:?}");
        assert_eq!((header.record_count, header.last_offset_delta), (2, 2));
        let read = read_from(&f, &p, 0).await;
        assert_eq!(
            offsets_and_values(&read),
            [(1, Some("b1")), (2, Some("a2"))],
            "{compression:?}"
        );
    }
}

#[tokio::test]
async fn an_offset_map_that_fills_cleans_what_it_took_in_and_leaves_the_rest_dirty() {
    let (f, p) = fixture().await;
    let keys: &[Kv] = &[
        (Some("a"), Some("a0")),
        (Some("b"), Some("b1")),
        (Some("c"), Some("c2")),
    ];
    let again: &[Kv] = &[
        (Some("a"), Some("a3")),
        (Some("b"), Some("b4")),
        (Some("c"), Some("c5")),
    ];
    segments_of(&f, &p, &[keys, again]).await;
    tail(&f, &p).await;
    // room for two keys: the map ends before c2 (batches of one record each)
    let small = CleanerSettings {
        map_bytes: 2 * offset_map::ENTRY_BYTES,
        ..settings()
    };
    let cleaned = |p: &Arc<Partition>| p.owned().unwrap().record.cleaned.unwrap();
    clean(&f.ctx, &p, rules(), small, now_ms())
        .await
        .unwrap()
        .unwrap();
    let first = cleaned(&p);
    assert_eq!(
        (first.dirty_from, first.end),
        (2, 3),
        "a0, b1 taken in; the segment copied"
    );
    // nothing lost; nothing superseded yet was compared with what follows
    assert_eq!(offsets_and_values(&read_from(&f, &p, 0).await).len(), 6);
    // the next cleanings go on from there until every key is compared
    clean(&f.ctx, &p, rules(), small, now_ms())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cleaned(&p).dirty_from, 4, "c2, a3");
    clean(&f.ctx, &p, rules(), small, now_ms())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cleaned(&p).dirty_from, 6, "b4, c5");
    let read = read_from(&f, &p, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(3, Some("a3")), (4, Some("b4")), (5, Some("c5"))]
    );
}

#[tokio::test]
async fn the_lag_bounds_and_the_dirty_ratio_decide_when_a_cleaning_is_due() {
    let (f, p) = fixture().await;
    segments_of(
        &f,
        &p,
        &[&[(Some("a"), Some("a0")), (Some("a"), Some("a1"))]],
    )
    .await;
    tail(&f, &p).await;
    let newest = T0; // each record the first of its batch
    let young = CleaningRules {
        min_compaction_lag_ms: 10_000,
        ..rules()
    };
    let due = |rules, at| {
        let (f, p) = (&f, &p);
        async move { clean(&f.ctx, p, rules, settings(), at).await.unwrap() }
    };
    assert_eq!(due(young, newest + 9_999).await, None, "too young to clean");
    let picky = CleaningRules {
        min_cleanable_dirty_ratio: 1.5,
        ..rules()
    };
    assert_eq!(due(picky, newest).await, None, "never dirty enough");
    let overdue = CleaningRules {
        max_compaction_lag_ms: 5_000,
        ..picky
    };
    assert_eq!(due(overdue, newest + 5_000).await, None, "not overdue yet");
    assert!(due(overdue, newest + 5_001).await.is_some(), "overdue");
}

#[tokio::test]
async fn the_newest_segment_is_not_cleaned_while_no_run_follows_it() {
    let (f, p) = fixture().await;
    segments_of(
        &f,
        &p,
        &[&[(Some("a"), Some("a0")), (Some("a"), Some("a1"))]],
    )
    .await;
    let idle = clean(&f.ctx, &p, rules(), settings(), now_ms())
        .await
        .unwrap();
    assert_eq!(idle, None, "the active segment holds the log's last record");
    tail(&f, &p).await;
    let cleaned = clean(&f.ctx, &p, rules(), settings(), now_ms()).await;
    assert!(cleaned.unwrap().is_some());
}

#[tokio::test]
async fn a_fenced_owner_commits_nothing_and_removes_its_uploads() {
    let (f, p) = fixture().await;
    segments_of(
        &f,
        &p,
        &[&[(Some("a"), Some("a0")), (Some("a"), Some("a1"))]],
    )
    .await;
    tail(&f, &p).await;
    // the partition is given up behind this log's back (its lease ended)
    release(&f, &p).await;
    let failed = clean(&f.ctx, &p, rules(), settings(), now_ms()).await;
    assert!(
        matches!(failed, Err(CleanError::Commit(CatalogError::Fenced(..)))),
        "{failed:?}"
    );
    let listed = f.ctx.store.list_partition("orders", 0).await.unwrap();
    assert!(listed.iter().all(|s| s.generation.is_none()), "{listed:?}");
    let record = f.ctx.catalog.partition("orders", 0).await.unwrap().unwrap();
    assert_eq!(record.record.cleaned, None);
}

#[tokio::test]
async fn an_owner_that_dies_between_its_uploads_and_its_commit_leaves_the_log_as_it_was() {
    let (f, p) = fixture().await;
    let first: &[Kv] = &[(Some("a"), Some("a0")), (Some("a"), Some("a1"))];
    segments_of(&f, &p, &[first, &[(Some("b"), Some("b2"))]]).await;
    tail(&f, &p).await;
    // the cleaning's segment object is stored, its index held: then the owner dies
    let gate = f.objects.hold_puts("ns/orders/0/segment-");
    gate.add_permits(1);
    let (ctx, cleaning) = (f.ctx.clone(), p.clone());
    let task =
        tokio::spawn(async move { clean(&ctx, &cleaning, rules(), settings(), now_ms()).await });
    while f.objects.held_puts() < 1 {
        tokio::task::yield_now().await;
    }
    task.abort();
    let _ = task.await;
    gate.add_permits(usize::MAX >> 4);
    assert_eq!(
        cleanings_objects(&f).await,
        1,
        "the uncommitted cleaning's segment"
    );
    assert_eq!(p.owned().unwrap().record.cleaned, None, "nothing committed");
    // the next owner reads the log as it was, and its first listing removes the orphan
    release(&f, &p).await;
    let next = open(&f).await;
    let read = read_from(&f, &next, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(0, Some("a0")), (1, Some("a1")), (2, Some("b2"))]
    );
    assert_eq!(cleanings_objects(&f).await, 0);
    // and cleans it itself
    clean_now(&f, &next, rules(), now_ms()).await;
    let read = read_from(&f, &next, 0).await;
    assert_eq!(
        offsets_and_values(&read),
        [(1, Some("a1")), (2, Some("b2"))]
    );
}

#[tokio::test]
async fn a_part_of_the_log_left_without_records_is_an_empty_segment_reads_skip() {
    let (f, p) = fixture().await;
    // the second segment holds only a record without a key: nothing of it stays
    segments_of(&f, &p, &[&[(Some("a"), Some("a0"))], &[(None, Some("x"))]]).await;
    tail(&f, &p).await; // at 2
    let cut_each = CleaningRules {
        segment_bytes: 1,
        ..rules()
    };
    clean_now(&f, &p, cut_each, now_ms()).await;
    let segments = p.segments();
    let ranges: Vec<(i64, i64)> = segments
        .iter()
        .map(|s| (s.base_offset, s.last_offset))
        .collect();
    assert_eq!(ranges, [(0, 0), (1, 1)], "one cleaned segment per source");
    assert_eq!(segments[1].size, 48, "header and footer only");
    for from in [0, 1, 2] {
        let read = read_from(&f, &p, from).await;
        let expected: Vec<i64> = [0, 2].into_iter().filter(|o| *o >= from).collect();
        assert_eq!(read.iter().map(|r| r.0).collect::<Vec<_>>(), expected);
    }
}

/// A transactional batch of one record of producer `id` (sequence `seq`).
fn txn_batch(id: i64, seq: i32, (key, value): Kv) -> Bytes {
    let record = kafka_protocol::records::Record {
        transactional: true,
        producer_id: id,
        producer_epoch: 0,
        sequence: seq,
        key: key.map(|k| Bytes::from_static(k.as_bytes())),
        value: value.map(|v| Bytes::from_static(v.as_bytes())),
        ..record_at(0, T0, Bytes::new())
    };
    encode_records(&[record], Compression::None)
}

/// Appends a transactional batch (its transaction confirmed) and the marker that ends it.
async fn transaction(f: &Fixture, p: &Arc<Partition>, id: i64, kv: Kv, commit: bool) {
    let validated = validate_batches(&txn_batch(id, 0, kv), 1 << 20).unwrap();
    let (ack, appended) = p
        .append_verified(validated, true, &|_, _| Ok(()))
        .unwrap()
        .buffered();
    f.writer.note_append(p, appended);
    assert!(f.writer.flush().await);
    ack.await.unwrap().unwrap();
    let crate::log::partition::Marked::Buffered(ack, bytes) =
        p.append_marker(id, 0, commit).unwrap()
    else {
        panic!("the transaction is open");
    };
    f.writer.note_append(p, bytes);
    assert!(f.writer.flush().await);
    ack.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_transactions_records_and_markers_pass_through_and_never_supersede_others() {
    let (f, p) = fixture().await;
    p.load_producers(&f.ctx).await;
    segments_of(
        &f,
        &p,
        &[&[(Some("a"), Some("x0"))], &[(Some("a"), Some("x1"))]],
    )
    .await;
    transaction(&f, &p, 9, (Some("a"), Some("t2")), true).await;
    transaction(&f, &p, 10, (Some("a"), Some("t4")), false).await;
    compact_all(&f, &p).await;
    tail(&f, &p).await;
    let cleaning = clean_now(&f, &p, rules(), now_ms()).await;
    assert_eq!(cleaning.records_removed, 1, "x0 only");
    let read = read_from(&f, &p, 0).await;
    let values: Vec<(i64, Option<&str>)> = offsets_and_values(&read);
    // x1 stays although a committed transaction wrote "a" after it: transactional records do
    // not enter the map; both markers (control records, no value of their own here) stay.
    assert_eq!(
        values.iter().map(|v| v.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5],
        "x1, t2 and its marker, t4 and its marker"
    );
    assert_eq!(
        p.aborted_between(0, 10),
        [crate::log::producers::AbortedTxn {
            producer_id: 10,
            first_offset: 4,
            last_offset: 5
        }]
    );
}
