//! Partition logs over a memory store and an embedded catalog: the shared write-ahead flush,
//! reads of committed data across runs and segments, compaction, fencing, recovery.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::batch::tests::encoded_batch;
use super::batch::validate_batches;
use super::cache::SegmentCache;
use super::limits::TopicLimits;
use super::partition::Partition;
use super::wal::writer::WalWriter;
use super::{claimed_partition, reader, LogContext, LogSettings};
use crate::meta::catalog::{Catalog, TopicRecord};
use crate::meta::embedded::EmbeddedStore;
use crate::meta::kv::Op;
use crate::store::faulty::FaultyStore;
use crate::store::SegmentStore;

pub(super) struct Fixture {
    _dir: tempfile::TempDir,
    pub(super) ctx: Arc<LogContext>,
    pub(super) topic: TopicRecord,
    /// The topic's limits, as the broker keeps them in line with the topic record.
    pub(super) limits: Arc<TopicLimits>,
    pub(super) objects: Arc<FaultyStore>,
    pub(super) writer: Arc<WalWriter>,
}

pub(super) async fn fixture(segment_bytes: usize) -> Fixture {
    fixture_flushing_every(segment_bytes, Duration::from_millis(10)).await
}

async fn fixture_flushing_every(segment_bytes: usize, flush_interval: Duration) -> Fixture {
    fixture_with(segment_bytes, flush_interval, 8 << 20, 0).await
}

/// `cache_bytes` 0: every read goes to the store.
pub(super) async fn fixture_with(
    segment_bytes: usize,
    flush_interval: Duration,
    wal_object_max_bytes: usize,
    cache_bytes: usize,
) -> Fixture {
    let sizes = (segment_bytes, wal_object_max_bytes, cache_bytes);
    fixture_of(sizes, flush_interval, false).await
}

/// Flushes as soon as a write is buffered, at most once per `floor`.
pub(super) async fn fixture_flushing_on_arrival(floor: Duration) -> Fixture {
    fixture_of((1 << 20, 8 << 20, 0), floor, true).await
}

/// (segment bytes, write-ahead object cap, cache bytes)
async fn fixture_of(
    (segment_bytes, wal_object_max_bytes, cache_bytes): (usize, usize, usize),
    flush_interval: Duration,
    flush_on_arrival: bool,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let kv = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
    let catalog = Arc::new(Catalog::new(Arc::new(kv), "t"));
    let (topic, _) = catalog
        .create_topic("orders", 2, Default::default())
        .await
        .unwrap();
    let objects = Arc::new(FaultyStore::default());
    let settings = LogSettings {
        segment_bytes,
        max_message_bytes: 1 << 20,
        message_timestamp_before_max_ms: i64::MAX,
        message_timestamp_after_max_ms: 3_600_000,
        max_uncompressed_batch_bytes: 128 << 20,
        producer_id_expiration_ms: 86_400_000,
        flush_interval,
        flush_on_arrival,
        readahead_segments: 1,
        index_interval: 100,
        wal_object_max_bytes,
        wal_compaction_age: Duration::from_secs(3600),
        wal_compaction_interval: Duration::from_secs(3600),
        log_roll_ms: 604_800_000,
    };
    let ctx = Arc::new(LogContext {
        cache: SegmentCache::new(cache_bytes, settings.uncompacted_hold()),
        settings,
        store: Arc::new(SegmentStore::over(objects.clone(), "ns")),
        catalog,
        metrics: Default::default(),
        wal: Arc::default(),
        meta_writes: Default::default(),
        compaction_due: Default::default(),
    });
    let writer = WalWriter::start(ctx.clone(), ctx.wal.clone(), 1, 0);
    let limits = Arc::new(TopicLimits::new(&topic.configs, &ctx.settings));
    Fixture {
        _dir: dir,
        ctx,
        topic,
        limits,
        objects,
        writer,
    }
}

pub(super) async fn open(f: &Fixture) -> Arc<Partition> {
    open_id(f, 0).await
}

/// Claims the partition for broker 1, as the ownership reconciler does (the committed end
/// taken over from the write-ahead index).
pub(super) async fn open_id(f: &Fixture, id: i32) -> Arc<Partition> {
    let mut claimed = f
        .ctx
        .catalog
        .claim_partition("orders", id, 1)
        .await
        .unwrap();
    let wal_end = f.ctx.wal.committed_end((f.topic.id, id)).unwrap_or(0);
    claimed.record.high_watermark = claimed.record.high_watermark.max(wal_end);
    Arc::new(claimed_partition(&f.topic, id, f.limits.clone(), claimed))
}

/// Gives the partition up the way a hand-off does, so it can be opened again.
pub(super) async fn release(f: &Fixture, p: &Partition) {
    let owned = p.owned().unwrap();
    f.ctx
        .catalog
        .release_partition("orders", p.id, &owned)
        .await
        .unwrap();
}

/// Gives the partition up and claims it again, as a new owner would, rebuilding its
/// producer state.
pub(super) async fn new_owner(f: &Fixture, p: &Partition) -> Arc<Partition> {
    release(f, p).await;
    let next = open(f).await;
    next.load_producers(&f.ctx).await;
    next
}

/// Appends and also returns the bytes appended (what the writer is told).
fn append_buffered(
    p: &Partition,
    records: usize,
) -> (
    tokio::sync::oneshot::Receiver<Result<i64, ResponseError>>,
    usize,
) {
    let batch = encoded_batch(records, 100, Compression::None);
    let batches = validate_batches(&batch, 1 << 20).unwrap();
    let (ack, buffered) = p.append(batches, true).unwrap().buffered();
    (ack, buffered)
}

/// Appends like Produce does: the writer hears of it.
pub(super) fn produce(
    f: &Fixture,
    p: &Arc<Partition>,
    records: usize,
) -> tokio::sync::oneshot::Receiver<Result<i64, ResponseError>> {
    let (ack, appended) = append_buffered(p, records);
    f.writer.note_append(p, appended);
    ack
}

pub(super) fn base_offsets(records: &[bytes::Bytes]) -> Vec<i64> {
    let records = bytes::Bytes::from(records.concat());
    let walked = super::segment::BatchWalker::new(&records);
    walked.map(|b| b.unwrap().1.base_offset).collect()
}

/// Runs a due compaction of partition 0 and commits it; the caller applies it to the
/// partition (`compacted`) when the test wants this broker's view to learn of it.
pub(super) async fn compact_and_commit(
    f: &Fixture,
    p: &Partition,
    now_ms: i64,
) -> (super::partition::Compacted, i64) {
    let due = p.compact(&f.ctx, now_ms).await.expect("due");
    let revision = due.commit_alone(&f.ctx, "orders", 0).await;
    (due, revision)
}

async fn wal_objects(f: &Fixture) -> usize {
    f.ctx.store.list_wal().await.unwrap().len()
}

#[tokio::test]
async fn acks_arrive_after_commit_and_reads_see_only_committed_data() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let first = produce(&f, &p, 10);
    let second = produce(&f, &p, 5);
    assert_eq!(p.high_watermark(), 0, "nothing is visible before the flush");
    assert!(f.writer.flush().await);
    assert_eq!(first.await.unwrap(), Ok(0));
    assert_eq!(second.await.unwrap(), Ok(10));
    assert_eq!(p.high_watermark(), 15);
    let read = reader::read(&f.ctx, &p, 12, 1 << 20, true).await.unwrap();
    assert_eq!(read.high_watermark, 15);
    assert_eq!(base_offsets(&read.records), vec![10]);
    assert_eq!(
        reader::read(&f.ctx, &p, 16, 1 << 20, true).await.err(),
        Some(ResponseError::OffsetOutOfRange)
    );
}

#[tokio::test]
async fn one_object_and_one_manifest_carry_every_partition_of_a_flush() {
    let f = fixture(1 << 20).await;
    let (a, b) = (open_id(&f, 0).await, open_id(&f, 1).await);
    let acks = [produce(&f, &a, 3), produce(&f, &b, 4), produce(&f, &a, 2)];
    let manifests = f.ctx.catalog.manifests_prefix();
    assert!(f.writer.flush().await);
    let [first, second, third] = acks;
    assert_eq!(first.await.unwrap(), Ok(0));
    assert_eq!(second.await.unwrap(), Ok(0));
    assert_eq!(third.await.unwrap(), Ok(3));
    assert_eq!(wal_objects(&f).await, 1);
    let segments = f.ctx.store.list_partition("orders", 0).await.unwrap();
    assert!(segments.is_empty(), "no segment before compaction");
    let listed = f.ctx.catalog.kv().range(&manifests).await.unwrap();
    assert_eq!(
        listed.kvs.len(),
        1,
        "one metadata record for both partitions"
    );
    let read = reader::read(&f.ctx, &b, 0, 1 << 20, true).await.unwrap();
    assert_eq!(base_offsets(&read.records), vec![0]);
    let read = reader::read(&f.ctx, &a, 0, 1 << 20, true).await.unwrap();
    assert_eq!(base_offsets(&read.records), vec![0, 3]);
}

#[tokio::test]
async fn a_fetch_fills_its_bytes_across_many_objects_and_segments() {
    let f = fixture(4096).await;
    let p = open(&f).await;
    for i in 0..40 {
        let ack = produce(&f, &p, 2);
        assert!(f.writer.flush().await);
        assert_eq!(ack.await.unwrap(), Ok(i * 2));
    }
    assert_eq!(wal_objects(&f).await, 40);
    // compaction: due by size, as many segments as rounds run
    let (due, revision) = compact_and_commit(&f, &p, super::partition::now_ms()).await;
    p.compacted(&f.ctx, due, revision);
    let segment_end = p.owned().unwrap().record.segment_end();
    assert!(
        segment_end > 0 && segment_end < 80,
        "segment end {segment_end}"
    );
    let read = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
    let offsets = base_offsets(&read.records);
    assert_eq!(offsets, (0..40).map(|i| i * 2).collect::<Vec<_>>());
    // a small max reads a prefix, at least one batch
    let read = reader::read(&f.ctx, &p, 10, 1, true).await.unwrap();
    assert_eq!(base_offsets(&read.records), vec![10]);
    // the next owner finds the same log: segments below the segment end, runs above it
    release(&f, &p).await;
    drop(p);
    let reopened = open(&f).await;
    assert_eq!(reopened.high_watermark(), 80);
    let read = reader::read(&f.ctx, &reopened, 0, 1 << 20, true)
        .await
        .unwrap();
    assert_eq!(base_offsets(&read.records), offsets);
    let ack = produce(&f, &reopened, 1);
    assert!(f.writer.flush().await);
    assert_eq!(
        ack.await.unwrap(),
        Ok(80),
        "new writes go after the committed end"
    );
}

#[tokio::test]
async fn a_fetch_reaching_a_segment_being_read_ahead_waits_for_that_read() {
    let f = fixture_with(4096, Duration::from_millis(10), 8 << 20, 1 << 20).await;
    let p = open(&f).await;
    for _ in 0..3 {
        for _ in 0..6 {
            let ack = produce(&f, &p, 2);
            assert!(f.writer.flush().await);
            ack.await.unwrap().unwrap();
        }
        let old_enough = super::partition::now_ms() + 7_200_000;
        let (due, revision) = compact_and_commit(&f, &p, old_enough).await;
        p.compacted(&f.ctx, due, revision);
    }
    // As after a restart: none of the segments cached.
    let segments = p.read_view(0).unwrap().segments;
    assert!(segments.len() >= 3, "{} segments", segments.len());
    for segment in &segments {
        f.ctx.cache.remove(&p.object_key(segment.base_offset));
    }
    // The fetch reads the first segment and starts reading the next ahead, then needs that
    // one itself (and so on): each segment is read once, by whichever asked first.
    let read = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
    assert_eq!(
        base_offsets(&read.records),
        (0..18).map(|i| i * 2).collect::<Vec<_>>()
    );
    tokio::time::sleep(Duration::from_millis(50)).await; // the last readahead, if any
    assert_eq!(f.objects.reads_of(".kfs"), segments.len());
}

/// A read of `p` from offset 0 in a task of its own, checked to be still waiting 50 ms on.
/// Partition 0 as another broker sees it: a follower of `owner`'s committed record.
pub(super) fn follower_of(f: &Fixture, owner: &Partition) -> Arc<Partition> {
    let (record, revision) = owner.committed_record();
    Arc::new(super::follower_partition(
        &f.topic,
        0,
        f.limits.clone(),
        record,
        revision,
        owner.high_watermark(),
    ))
}

async fn read_left_waiting(
    f: &Fixture,
    p: &Arc<Partition>,
    why: &str,
) -> tokio::task::JoinHandle<Result<reader::ReadResult, ResponseError>> {
    let reading = tokio::spawn({
        let (ctx, p) = (f.ctx.clone(), p.clone());
        async move { reader::read(&ctx, &p, 0, 1 << 20, true).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!reading.is_finished(), "{why}");
    reading
}

#[tokio::test]
async fn a_fetch_missing_runs_another_read_is_loading_waits_for_that_read() {
    let f = fixture_with(1 << 20, Duration::from_millis(10), 8 << 20, 1 << 20).await;
    let p = open(&f).await;
    for _ in 0..3 {
        let ack = produce(&f, &p, 2);
        assert!(f.writer.flush().await);
        ack.await.unwrap().unwrap();
    }
    let runs = f.ctx.wal.runs_from((p.topic_id, p.id), 0);
    assert_eq!(runs.len(), 3);
    // As after a restart, while the producer-state rebuild (or compaction, or another
    // consumer) is reading the runs back.
    let keys: Vec<String> = runs.iter().map(|run| run.cache_key()).collect();
    let batches: Vec<_> = keys.iter().map(|k| f.ctx.cache.get(k).unwrap()).collect();
    keys.iter().for_each(|key| f.ctx.cache.remove(key));
    let claims: Vec<_> = keys
        .iter()
        .map(|key| f.ctx.cache.begin_loading(key).unwrap())
        .collect();
    let reads_before = f.objects.reads_of("");
    let reading = read_left_waiting(&f, &p, "the fetch waits for the reads in flight").await;
    for (key, batches) in keys.into_iter().zip(batches) {
        f.ctx.cache.insert(key, batches);
    }
    drop(claims);
    let read = reading.await.unwrap().unwrap();
    assert_eq!(base_offsets(&read.records), vec![0, 2, 4]);
    assert_eq!(f.objects.reads_of(""), reads_before, "no read of its own");
}

#[tokio::test]
async fn a_read_whose_object_was_collected_meanwhile_reads_the_segment_once_it_is_known() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let ack = produce(&f, &p, 5);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    let first = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
    assert_eq!(base_offsets(&first.records), vec![0]);
    // Compaction commits a segment and the object is collected, all before this view of the
    // partition learns of the segment (as a broker's mirror of the store lags a moment).
    let later = super::partition::now_ms() + 7_200_000;
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    for (path, _) in f.ctx.store.list_wal().await.unwrap() {
        f.ctx.store.delete(&path).await.unwrap();
    }
    let reading = read_left_waiting(&f, &p, "the read waits for the view to catch up").await;
    p.compacted(&f.ctx, due, revision);
    let read = reading.await.unwrap().expect("read from the segment");
    assert_eq!(read.records.concat(), first.records.concat());
}

#[tokio::test]
async fn a_follower_whose_watch_lags_reads_the_segment_the_store_records() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let ack = produce(&f, &p, 5);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    let follower = follower_of(&f, &p);
    let first = reader::read(&f.ctx, &follower, 0, 1 << 20, true)
        .await
        .unwrap();
    assert_eq!(base_offsets(&first.records), vec![0]);
    // The owner compacts and the object is collected; the follower's watch never tells it.
    let later = super::partition::now_ms() + 7_200_000;
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    p.compacted(&f.ctx, due, revision);
    for (path, _) in f.ctx.store.list_wal().await.unwrap() {
        f.ctx.store.delete(&path).await.unwrap();
    }
    let read = reader::read(&f.ctx, &follower, 0, 1 << 20, true)
        .await
        .expect("the follower reads the partition record and then the segment");
    assert_eq!(read.records.concat(), first.records.concat());
}

#[tokio::test]
async fn a_follower_whose_listing_was_overtaken_by_a_compaction_lists_again() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let later = super::partition::now_ms() + 7_200_000;
    let ack = produce(&f, &p, 5);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    p.compacted(&f.ctx, due, revision);
    let follower = follower_of(&f, &p);
    let ack = produce(&f, &p, 3);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(5));
    let expected = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
    // The owner compacts again and its write-ahead objects are collected; the index of this
    // broker still lists their runs (its mirror lags).
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    p.compacted(&f.ctx, due, revision);
    for (path, _) in f.ctx.store.list_wal().await.unwrap() {
        f.ctx.store.delete(&path).await.unwrap();
    }
    // The follower's read lists the segments of the first compaction; the second reaches it
    // while that listing is on its way, so the listing is not taken.
    let gate = f.objects.hold_lists();
    let reading = tokio::spawn({
        let (ctx, follower) = (f.ctx.clone(), follower.clone());
        async move { reader::read(&ctx, &follower, 0, 1 << 20, true).await }
    });
    while gate.waiting() == 0 {
        tokio::task::yield_now().await;
    }
    let (record, revision) = p.committed_record();
    follower.follow(&record, revision);
    gate.permits.add_permits(usize::MAX >> 4);
    let read = reading
        .await
        .unwrap()
        .expect("the read lists the segments again");
    assert_eq!(read.records.concat(), expected.records.concat());
}

#[tokio::test]
async fn a_read_that_finds_a_hole_in_its_view_lists_the_segments_again() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let ack = produce(&f, &p, 5);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    let later = super::partition::now_ms() + 7_200_000;
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    p.compacted(&f.ctx, due, revision);
    for (key, _) in f.ctx.wal.manifests() {
        f.ctx.wal.remove(&key);
    }
    let ack = produce(&f, &p, 3);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(5));
    // A view that has the segment end right but lost the segment below it: the write-ahead
    // runs start at 5, so a read at 0 must not answer from 5 as if 0..5 did not exist.
    let holed = Arc::new(Partition::new(
        "orders".into(),
        f.topic.id,
        0,
        f.limits.clone(),
        p.owned().unwrap(),
        p.high_watermark(),
        Some(Vec::new()),
    ));
    let read = reader::read(&f.ctx, &holed, 0, 1 << 20, true)
        .await
        .expect("the segment is found by listing again");
    assert_eq!(base_offsets(&read.records), vec![0, 5]);
}

#[tokio::test]
async fn records_deleted_before_compaction_are_not_compacted() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    for base in [0, 5, 10, 15] {
        let ack = produce(&f, &p, 5);
        assert!(f.writer.flush().await);
        assert_eq!(ack.await.unwrap(), Ok(base));
    }
    // the log start moves into the write-ahead data, inside the batch at 10
    let deleted = super::retention::delete_records(&f.ctx, &p, 12).await;
    assert_eq!(deleted, Ok(12));
    let later = super::partition::now_ms() + 7_200_000;
    let (due, revision) = compact_and_commit(&f, &p, later).await;
    p.compacted(&f.ctx, due, revision);
    let segments: Vec<_> = p
        .segments()
        .iter()
        .map(|s| (s.base_offset, s.last_offset))
        .collect();
    assert_eq!(
        segments,
        [(10, 19)],
        "the batch holding the log start begins the log"
    );
    let listed = f.ctx.store.list_partition("orders", 0).await.unwrap();
    let data = crate::store::SegmentObject::Data;
    let stored: Vec<_> = listed
        .iter()
        .filter(|s| s.kind == data)
        .map(|s| s.base_offset)
        .collect();
    assert_eq!(stored, [10], "nothing below the log start was written");
    let read = reader::read(&f.ctx, &p, 12, 1 << 20, true).await.unwrap();
    assert_eq!(base_offsets(&read.records), vec![10, 15]);
}

#[tokio::test]
async fn compaction_takes_an_identical_leftover_and_removes_a_foreign_one() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let ack = produce(&f, &p, 5);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    let later = super::partition::now_ms() + 7_200_000; // past the age: due
                                                        // a foreign object where the segment goes: removed, nothing committed this round
    let path = p.segment_path(&f.ctx, 0, crate::store::SegmentObject::Data);
    let foreign = bytes::Bytes::from_static(b"not a segment");
    f.ctx.store.put_new(&path, foreign).await.unwrap();
    assert!(p.compact(&f.ctx, later).await.is_none());
    assert!(
        f.ctx.store.get(&path).await.is_err(),
        "the foreign object is gone"
    );
    // an earlier compaction's segment (uploaded, not committed) is taken as it is
    let first = p.compact(&f.ctx, later).await.expect("due");
    drop(first); // its commit never happens
    let again = p.compact(&f.ctx, later).await.expect("due");
    assert_eq!(again.record.segment_end(), 5);
}

#[tokio::test]
async fn a_fenced_writer_acknowledges_nothing_and_stops_taking_writes() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let ack = produce(&f, &p, 1);
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(0));
    // the session behind the writer key ends (lease expired)
    let writer_key = format!("{}/writers/1", f.ctx.catalog.root());
    let kv = f.ctx.catalog.kv();
    kv.txn(vec![], vec![Op::Delete(writer_key)]).await.unwrap();
    let ack = produce(&f, &p, 3);
    assert!(!f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Err(ResponseError::NotLeaderOrFollower));
    assert_eq!(p.high_watermark(), 1);
    let batch = encoded_batch(1, 10, Compression::None);
    let again = p.append(validate_batches(&batch, 1 << 20).unwrap(), true);
    assert_eq!(again.err(), Some(ResponseError::NotLeaderOrFollower));
    let read = reader::read(&f.ctx, &p, 0, 1 << 20, true).await.unwrap();
    assert_eq!(
        base_offsets(&read.records),
        vec![0],
        "the fenced object is not in the log"
    );
}

#[tokio::test]
async fn a_flush_takes_only_what_was_buffered_when_it_started() {
    // Regression: a flush must not keep taking what is appended while it uploads. (Flushes
    // only when asked: an interval's flush could take the later append on its own.)
    let f = fixture_flushing_every(1 << 20, Duration::from_secs(3600)).await;
    let p = open(&f).await;
    let uploads = f.objects.hold_puts("ns/!wal/");
    let first = produce(&f, &p, 1);
    let flush = tokio::spawn({
        let writer = f.writer.clone();
        async move { writer.flush().await }
    });
    while f.objects.held_puts() == 0 {
        tokio::task::yield_now().await;
    }
    let later = produce(&f, &p, 1);
    uploads.add_permits(1);
    let flushed = tokio::time::timeout(Duration::from_secs(10), flush).await;
    assert!(flushed
        .expect("the flush waited for the later append")
        .unwrap());
    assert_eq!(first.await.unwrap(), Ok(0));
    assert!(
        p.has_pending(),
        "the later append is left to the next flush"
    );
    uploads.add_permits(1);
    assert!(f.writer.flush().await);
    assert_eq!(later.await.unwrap(), Ok(1));
}

#[tokio::test]
async fn a_failed_upload_acks_nothing_and_the_next_flush_rebases() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let failed = produce(&f, &p, 2);
    f.objects.fail_next_puts(1);
    assert!(!f.writer.flush().await);
    assert_eq!(failed.await.unwrap(), Err(ResponseError::KafkaStorageError));
    assert_eq!(p.high_watermark(), 0);
    let retried = produce(&f, &p, 2);
    assert!(f.writer.flush().await);
    assert_eq!(
        retried.await.unwrap(),
        Ok(0),
        "offsets restart at the committed end"
    );
    assert_eq!(p.high_watermark(), 2);
}

#[tokio::test]
async fn the_flush_interval_and_the_object_size_cap_trigger_flushes() {
    let f = fixture_flushing_every(1 << 20, Duration::from_millis(20)).await;
    let p = open(&f).await;
    // no explicit flush: the interval brings it
    let ack = produce(&f, &p, 1);
    let acked = tokio::time::timeout(Duration::from_secs(10), ack).await;
    assert_eq!(acked.expect("no flush after the interval").unwrap(), Ok(0));
}

#[tokio::test]
async fn flushing_on_arrival_starts_at_once_and_at_most_once_per_interval() {
    let f = fixture_flushing_on_arrival(Duration::from_secs(3600)).await;
    let p = open(&f).await;
    // nothing flushed within the last interval: the first write goes at once
    let ack = produce(&f, &p, 1);
    let acked = tokio::time::timeout(Duration::from_secs(10), ack).await;
    assert_eq!(acked.expect("not flushed on arrival").unwrap(), Ok(0));
    // the next waits for the interval (an hour here): only a flush asked for takes it
    let mut ack = produce(&f, &p, 1);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut ack).await;
    assert!(early.is_err(), "flushed twice within an interval");
    assert!(f.writer.flush().await);
    assert_eq!(ack.await.unwrap(), Ok(1));
}

#[tokio::test]
async fn a_failed_object_fails_every_object_taken_after_it() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let uploads = f.objects.hold_puts("ns/!wal/");
    let flush = |writer: Arc<WalWriter>| tokio::spawn(async move { writer.flush().await });
    let first = produce(&f, &p, 2);
    let first_flush = flush(f.writer.clone());
    while f.objects.held_puts() < 1 {
        tokio::task::yield_now().await;
    }
    // taken while the first uploads: offsets 2 and 3, right after the first object's
    let second = produce(&f, &p, 2);
    let second_flush = flush(f.writer.clone());
    while f.objects.held_puts() < 2 {
        tokio::task::yield_now().await;
    }
    f.objects.fail_next_puts(1);
    uploads.add_permits(1); // the first upload fails
    assert!(!first_flush.await.unwrap());
    assert!(!second_flush.await.unwrap());
    let failed = Err(ResponseError::KafkaStorageError);
    assert_eq!(first.await.unwrap(), failed);
    assert_eq!(second.await.unwrap(), failed, "no gap at offsets 0..2");
    uploads.add_permits(1); // the second upload ends after all: it is not committed
    assert_eq!(p.high_watermark(), 0);
    uploads.add_permits(8);
    let retried = produce(&f, &p, 1);
    assert!(f.writer.flush().await);
    assert_eq!(retried.await.unwrap(), Ok(0), "offsets restart at 0");
    assert_eq!(f.ctx.wal.committed_end((f.topic.id, 0)), Some(1));
}

#[tokio::test]
async fn objects_ready_together_share_a_commit_and_commits_per_interval_are_bounded() {
    let f = fixture_flushing_every(1 << 20, Duration::from_millis(300)).await;
    let p = open(&f).await;
    let writer_key = "/kafscale/t/writers/1";
    let revision = || async {
        let kv = f.ctx.catalog.kv().get(writer_key).await.unwrap();
        kv.unwrap().mod_revision
    };
    // two commits within an interval go at once
    for offset in 0..2 {
        let ack = produce(&f, &p, 1);
        assert!(f.writer.flush().await);
        assert_eq!(ack.await.unwrap(), Ok(offset));
    }
    let before = revision().await;
    // a third within the same interval waits; what is uploaded meanwhile joins it
    let uploads = f.objects.hold_puts("ns/!wal/");
    let mut acks = Vec::new();
    for taken in 1..=3 {
        let ack = produce(&f, &p, 1);
        let writer = f.writer.clone();
        acks.push((ack, tokio::spawn(async move { writer.flush().await })));
        while f.objects.held_puts() < taken {
            tokio::task::yield_now().await;
        }
    }
    uploads.add_permits(3);
    for (offset, (ack, flushed)) in (2..).zip(acks) {
        assert!(flushed.await.unwrap());
        assert_eq!(ack.await.unwrap(), Ok(offset));
    }
    assert_eq!(wal_objects(&f).await, 5, "one object per flush");
    let manifests = f.ctx.wal.manifests();
    assert_eq!(manifests.len(), 5);
    let mut revisions = Vec::new();
    for (key, _) in &manifests {
        revisions.push(
            f.ctx
                .catalog
                .kv()
                .get(key)
                .await
                .unwrap()
                .unwrap()
                .mod_revision,
        );
    }
    revisions.sort();
    revisions.dedup();
    assert_eq!(
        revisions.len(),
        3,
        "the last three objects were committed together"
    );
    assert!(revision().await > before);
}

#[tokio::test]
async fn an_object_the_size_cap_brings_holds_the_cap_and_the_rest_waits_for_the_interval() {
    // the bytes one append of one record buffers, measured on a fixture of its own
    let one = append_buffered(&*open(&fixture(1 << 20).await).await, 1).1;
    let f = fixture_with(1 << 20, Duration::from_secs(3600), one * 5 / 2, 0).await;
    let p = open(&f).await;
    let acks: Vec<_> = (0..4).map(|_| produce(&f, &p, 1)).collect();
    let mut acks = acks.into_iter();
    for offset in 0..3 {
        let ack = tokio::time::timeout(Duration::from_secs(10), acks.next().unwrap()).await;
        assert_eq!(
            ack.expect("the size cap brought no flush").unwrap(),
            Ok(offset)
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        wal_objects(&f).await,
        1,
        "one object for three batches, none for the rest"
    );
    assert!(p.has_pending(), "the fourth batch waits for the interval");
    let last = acks.next().unwrap();
    assert!(f.writer.flush().await);
    assert_eq!(last.await.unwrap(), Ok(3));
}
