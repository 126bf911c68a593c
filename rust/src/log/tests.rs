//! Partition log behaviour over a memory store and an embedded catalog: group commit, segment
//! splitting at `segment_bytes`, reads of committed data, fencing, recovery.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::batch::tests::encoded_batch;
use super::batch::validate_batches;
use super::cache::SegmentCache;
use super::flusher::Flusher;
use super::limits::TopicLimits;
use super::partition::Partition;
use super::segment::SegmentMeta;
use super::{claimed_partition, reader, LogContext, LogSettings};
use crate::meta::catalog::{Catalog, TopicRecord};
use crate::meta::embedded::EmbeddedStore;
use crate::meta::kv::Op;
use crate::store::faulty::FaultyStore;
use crate::store::SegmentStore;

struct Fixture {
    _dir: tempfile::TempDir,
    ctx: Arc<LogContext>,
    topic: TopicRecord,
    /// The topic's limits, as the broker keeps them in line with the topic record.
    limits: Arc<TopicLimits>,
    objects: Arc<FaultyStore>,
}

async fn fixture(segment_bytes: usize) -> Fixture {
    fixture_flushing_every(segment_bytes, Duration::from_millis(10)).await
}

async fn fixture_flushing_every(segment_bytes: usize, flush_interval: Duration) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let kv = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
    let catalog = Arc::new(Catalog::new(Arc::new(kv), "t"));
    let (topic, _) = catalog
        .create_topic("orders", 2, Default::default())
        .await
        .unwrap();
    let objects = Arc::new(FaultyStore::default());
    let ctx = Arc::new(LogContext {
        settings: LogSettings {
            segment_bytes,
            max_message_bytes: 1 << 20,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            max_uncompressed_batch_bytes: 128 << 20,
            flush_interval,
            readahead_segments: 1,
            index_interval: 100,
            max_concurrent_flushes: 4,
        },
        store: Arc::new(SegmentStore::over(objects.clone(), "ns")),
        catalog,
        metrics: Default::default(),
        cache: SegmentCache::new(0), // every read goes to the store
    });
    let limits = Arc::new(TopicLimits::new(&topic.configs, &ctx.settings));
    Fixture {
        _dir: dir,
        ctx,
        topic,
        limits,
        objects,
    }
}

async fn open(f: &Fixture) -> Arc<Partition> {
    open_id(f, 0).await
}

/// Claims the partition for broker 1, as the ownership reconciler does.
async fn open_id(f: &Fixture, id: i32) -> Arc<Partition> {
    let claimed = f
        .ctx
        .catalog
        .claim_partition("orders", id, 1)
        .await
        .unwrap();
    Arc::new(claimed_partition(&f.topic, id, f.limits.clone(), claimed))
}

/// Gives the partition up the way a hand-off does, so it can be opened again.
async fn release(f: &Fixture, p: &Partition) {
    let owned = p.owned().unwrap();
    f.ctx
        .catalog
        .release_partition("orders", p.id, &owned)
        .await
        .unwrap();
}

fn append(
    p: &Partition,
    records: usize,
) -> tokio::sync::oneshot::Receiver<Result<i64, ResponseError>> {
    append_buffered(p, records).0
}

/// Appends and also returns the buffered byte count (what the flusher is told).
fn append_buffered(
    p: &Partition,
    records: usize,
) -> (
    tokio::sync::oneshot::Receiver<Result<i64, ResponseError>>,
    usize,
) {
    let batch = encoded_batch(records, 100, Compression::None);
    let batches = validate_batches(&batch, 1 << 20).unwrap();
    let (ack, buffered) = p.append(batches, true).unwrap();
    (ack.unwrap(), buffered)
}

#[tokio::test]
async fn acks_arrive_after_commit_and_reads_see_only_committed_data() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let first = append(&p, 10);
    let second = append(&p, 5);
    assert_eq!(p.high_watermark(), 0, "nothing is visible before the flush");
    p.flush(&f.ctx).await;
    assert_eq!(first.await.unwrap(), Ok(0));
    assert_eq!(second.await.unwrap(), Ok(10));
    assert_eq!(p.high_watermark(), 15);
    let read = reader::read(&f.ctx, &p, 12, 1 << 20, true).await.unwrap();
    assert_eq!(read.high_watermark, 15);
    // both batches come back (the read starts at the batch holding offset 12)
    let walked: Vec<_> = super::segment::BatchWalker::new(&read.records)
        .map(|b| b.unwrap().1.base_offset)
        .collect();
    assert_eq!(walked, vec![10]);
    assert_eq!(
        reader::read(&f.ctx, &p, 16, 1 << 20, true).await.err(),
        Some(ResponseError::OffsetOutOfRange)
    );
}

#[tokio::test]
async fn a_backlog_is_split_into_segments_of_segment_bytes() {
    let f = fixture(4096).await;
    let p = open(&f).await;
    let acks: Vec<_> = (0..20).map(|_| append(&p, 10)).collect();
    p.flush(&f.ctx).await;
    for (i, ack) in acks.into_iter().enumerate() {
        assert_eq!(ack.await.unwrap(), Ok(i as i64 * 10));
    }
    let segments = p.segments();
    assert!(segments.len() >= 5, "{} segments", segments.len());
    let batch_size = encoded_batch(10, 100, Compression::None).len() as u64;
    for pair in segments.windows(2) {
        assert_eq!(pair[0].last_offset + 1, pair[1].base_offset);
    }
    for s in &segments {
        assert!(
            s.size <= 4096 + batch_size + 48,
            "segment of {} bytes",
            s.size
        );
    }
    // a restart finds the same committed segments
    release(&f, &p).await;
    drop(p);
    let reopened = open(&f).await;
    let lists = f.objects.list_calls();
    assert!(reopened.segments().is_empty(), "a claim lists nothing");
    reopened.sync_segments(&f.ctx).await.unwrap();
    assert_eq!(
        f.objects.list_calls(),
        lists + 1,
        "the first read lists once"
    );
    let offsets = |segments: &[SegmentMeta]| {
        let ranges = segments
            .iter()
            .map(|s| (s.base_offset, s.last_offset, s.size));
        ranges.collect::<Vec<_>>()
    };
    assert_eq!(offsets(&reopened.segments()), offsets(&segments));
    reopened.sync_segments(&f.ctx).await.unwrap();
    assert_eq!(f.objects.list_calls(), lists + 1);
    assert_eq!(reopened.high_watermark(), 200);
    assert_eq!(reopened.leader_epoch(), 2);
}

/// The topic's configs changed to `configs` (what the broker does when the record changes).
fn set_topic_configs(f: &Fixture, configs: &[(&str, &str)]) {
    let configs = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    f.limits.update(&configs, &f.ctx.settings);
}

#[tokio::test]
async fn a_topics_segment_bytes_bounds_its_segments_from_the_next_flush_on() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let batch_size = encoded_batch(10, 100, Compression::None).len() as u64;
    let flush_of_20 = |p: Arc<Partition>| {
        let ctx = f.ctx.clone();
        async move {
            let before = p.segments().len();
            let acks: Vec<_> = (0..20).map(|_| append(&p, 10)).collect();
            assert!(p.flush(&ctx).await);
            for ack in acks {
                assert!(ack.await.unwrap().is_ok());
            }
            p.segments()[before..].to_vec()
        }
    };
    // the broker default (1 MiB) takes the whole backlog in one segment
    assert_eq!(flush_of_20(p.clone()).await.len(), 1);
    // the topic's own segment.bytes, set on the partition that is already open
    set_topic_configs(&f, &[("segment.bytes", "4096")]);
    assert_eq!(p.segment_bytes(), 4096);
    let small = flush_of_20(p.clone()).await;
    assert!(small.len() >= 5, "{} segments", small.len());
    for s in &small {
        assert!(
            s.size <= 4096 + batch_size + 48,
            "segment of {} bytes",
            s.size
        );
    }
    // removed again: back to the broker default
    set_topic_configs(&f, &[]);
    assert_eq!(flush_of_20(p.clone()).await.len(), 1);
    // a follower copy made from this log (a hand-off) follows the same topic limits
    set_topic_configs(&f, &[("segment.bytes", "2048")]);
    assert_eq!(p.to_follower().segment_bytes(), 2048);
}

#[tokio::test]
async fn a_topics_segment_bytes_is_the_threshold_that_flushes_at_once() {
    // Scheduled flushes come only after a minute: an ack before that is the urgent flush.
    let f = fixture_flushing_every(1 << 20, Duration::from_secs(60)).await;
    let flusher = Flusher::new(f.ctx.clone());
    let p = open(&f).await;
    let batch_size = encoded_batch(10, 100, Compression::None).len();
    let (below_default, buffered) = append_buffered(&p, 10);
    flusher.note_append(&p, buffered);
    let waited = tokio::time::timeout(Duration::from_millis(300), below_default).await;
    assert!(
        waited.is_err(),
        "flushed before the 1 MiB broker default was reached"
    );
    // the topic's segment.bytes is smaller than what is buffered with the next append
    set_topic_configs(&f, &[("segment.bytes", &(batch_size + 1).to_string())]);
    let (reaching_it, buffered) = append_buffered(&p, 10);
    assert!(buffered > batch_size + 1);
    flusher.note_append(&p, buffered);
    let acked = tokio::time::timeout(Duration::from_secs(10), reaching_it).await;
    assert_eq!(
        acked
            .expect("no flush at the topic's segment size")
            .unwrap(),
        Ok(10)
    );
    assert_eq!(p.high_watermark(), 20);
}

#[tokio::test]
async fn a_fenced_writer_acknowledges_nothing_and_stops_taking_writes() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    p.flush(&f.ctx).await;
    // the lease behind the owner key expires and another broker claims the partition
    let owner_key = f.ctx.catalog.owner_key("orders", 0);
    f.ctx
        .catalog
        .kv()
        .txn(vec![], vec![Op::Delete(owner_key)])
        .await
        .unwrap();
    let other = f.ctx.catalog.claim_partition("orders", 0, 2).await.unwrap();
    let ack = append(&p, 3);
    p.flush(&f.ctx).await;
    // its segment object was uploaded before the commit failed: "possibly persisted"
    assert_eq!(ack.await.unwrap(), Err(ResponseError::RequestTimedOut));
    assert_eq!(p.high_watermark(), 0);
    let batch = encoded_batch(1, 10, Compression::None);
    let again = p.append(validate_batches(&batch, 1 << 20).unwrap(), true);
    assert_eq!(again.err(), Some(ResponseError::NotLeaderOrFollower));
    // the next owner finds the fenced writer's uncommitted segment at the committed end and
    // adopts it rather than deleting it (whoever finds it could itself be stale)
    f.ctx
        .catalog
        .release_partition("orders", 0, &other)
        .await
        .unwrap();
    // (its claim reads nothing from the object store: the first flush finds the segment in
    // its way, adopts it and writes its own batches after it)
    let next = open(&f).await;
    assert_eq!(next.high_watermark(), 0);
    let own = append(&next, 2);
    assert!(
        !next.flush(&f.ctx).await,
        "the flush adopted instead of writing"
    );
    assert_eq!(next.high_watermark(), 3);
    // the adopted records belong to the epoch that wrote them; the new one starts after them
    let history = next.owned().unwrap().record.epoch_history;
    let starts: Vec<_> = history.iter().map(|e| (e.epoch, e.start_offset)).collect();
    assert_eq!(starts, vec![(0, 0), (1, 0), (2, 3), (3, 3)]);
    assert!(next.flush(&f.ctx).await);
    assert_eq!(own.await.unwrap(), Ok(3));
    assert_eq!(next.high_watermark(), 5);
    next.sync_segments(&f.ctx).await.unwrap();
    assert_eq!(next.segments().len(), 2);
    let read = reader::read(&f.ctx, &next, 0, 1 << 20, true).await.unwrap();
    let walked: Vec<_> = super::segment::BatchWalker::new(&read.records)
        .map(|b| b.unwrap().1.base_offset)
        .collect();
    assert_eq!(
        walked,
        vec![0, 3],
        "the adopted segment is read like any other"
    );
}

#[tokio::test]
async fn a_flush_takes_only_what_was_buffered_when_it_started() {
    // Regression: one flush used to keep taking whatever was appended while it uploaded, so a
    // partition under steady load never finished its flush (seen as 5 s produce timeouts).
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let uploads = f.objects.hold_puts("ns/orders/0/");
    let first = append(&p, 1);
    let flush = tokio::spawn({
        let (p, ctx) = (p.clone(), f.ctx.clone());
        async move { p.flush(&ctx).await }
    });
    while f.objects.held_puts() == 0 {
        tokio::task::yield_now().await;
    }
    let later = append(&p, 1);
    uploads.add_permits(2); // the first segment's data and index
    let flushed = tokio::time::timeout(Duration::from_secs(10), flush).await;
    assert!(flushed
        .expect("the flush waited for the later append")
        .unwrap());
    assert_eq!(first.await.unwrap(), Ok(0));
    assert!(p.has_pending(), "the later append is left to its own flush");
    uploads.add_permits(2);
    assert!(p.flush(&f.ctx).await);
    assert_eq!(later.await.unwrap(), Ok(1));
}

#[tokio::test]
async fn a_failed_upload_acks_nothing_and_the_next_flush_rebases() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    let failed = append(&p, 2);
    f.objects.fail_next_puts(1);
    assert!(!p.flush(&f.ctx).await);
    // a failed PUT may still have stored the object: "possibly persisted", retriable
    assert_eq!(failed.await.unwrap(), Err(ResponseError::RequestTimedOut));
    assert_eq!(p.high_watermark(), 0);
    let retried = append(&p, 2);
    assert!(p.flush(&f.ctx).await);
    assert_eq!(
        retried.await.unwrap(),
        Ok(0),
        "offsets restart at the committed end"
    );
    assert_eq!(p.high_watermark(), 2);
}

#[tokio::test]
async fn a_stuck_partition_does_not_hold_up_another_partitions_acks() {
    let f = fixture(1 << 20).await;
    let flusher = Flusher::new(f.ctx.clone());
    let (stuck, quiet) = (open_id(&f, 0).await, open_id(&f, 1).await);
    let _never = f.objects.hold_puts("ns/orders/0/"); // an upload that does not come back
    let (stuck_ack, buffered) = append_buffered(&stuck, 1);
    flusher.note_append(&stuck, buffered);
    while f.objects.held_puts() == 0 {
        tokio::task::yield_now().await;
    }
    let (quiet_ack, buffered) = append_buffered(&quiet, 1);
    flusher.note_append(&quiet, buffered);
    let acked = tokio::time::timeout(Duration::from_secs(10), quiet_ack).await;
    assert_eq!(
        acked.expect("held up by the other partition").unwrap(),
        Ok(0)
    );
    drop(stuck_ack);
}
