//! Partition log behaviour over a memory store and an embedded catalog: group commit, segment
//! splitting at `segment_bytes`, reads of committed data, fencing, recovery.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use super::batch::tests::encoded_batch;
use super::batch::validate_batches;
use super::cache::SegmentCache;
use super::partition::Partition;
use super::{open_partition, reader, LogContext, LogSettings};
use crate::meta::catalog::{Catalog, TopicRecord};
use crate::meta::embedded::EmbeddedStore;
use crate::store::{SegmentStore, StorageLocation};

struct Fixture {
    _dir: tempfile::TempDir,
    ctx: Arc<LogContext>,
    topic: TopicRecord,
}

async fn fixture(segment_bytes: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let kv = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
    let catalog = Arc::new(Catalog::new(Arc::new(kv), "t"));
    let topic = catalog
        .create_topic("orders", 1, Default::default())
        .await
        .unwrap();
    let ctx = Arc::new(LogContext {
        settings: LogSettings {
            segment_bytes,
            flush_interval: Duration::from_millis(10),
            readahead_segments: 1,
            index_interval: 100,
            max_concurrent_flushes: 4,
        },
        store: Arc::new(SegmentStore::open(&StorageLocation::Memory, "ns").unwrap()),
        catalog,
        cache: SegmentCache::new(0), // every read goes to the store
    });
    Fixture {
        _dir: dir,
        ctx,
        topic,
    }
}

async fn open(f: &Fixture) -> Arc<Partition> {
    Arc::new(open_partition(&f.ctx, &f.topic, 0, 1 << 20).await.unwrap())
}

fn append(
    p: &Partition,
    records: usize,
) -> tokio::sync::oneshot::Receiver<Result<i64, ResponseError>> {
    let batch = encoded_batch(records, 100, Compression::None);
    let batches = validate_batches(&batch, 1 << 20).unwrap();
    p.append(batches, true).unwrap().0.unwrap()
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
    drop(p);
    let reopened = open(&f).await;
    assert_eq!(reopened.segments().len(), segments.len());
    assert_eq!(reopened.high_watermark(), 200);
    assert_eq!(reopened.leader_epoch(), 2);
}

#[tokio::test]
async fn a_fenced_writer_acknowledges_nothing_and_stops_taking_writes() {
    let f = fixture(1 << 20).await;
    let p = open(&f).await;
    p.flush(&f.ctx).await;
    // another writer claims the partition (what a new owner does)
    f.ctx.catalog.claim_partition("orders", 0).await.unwrap();
    let ack = append(&p, 3);
    p.flush(&f.ctx).await;
    assert_eq!(ack.await.unwrap(), Err(ResponseError::NotLeaderOrFollower));
    assert_eq!(p.high_watermark(), 0);
    let batch = encoded_batch(1, 10, Compression::None);
    let again = p.append(validate_batches(&batch, 1 << 20).unwrap(), true);
    assert_eq!(again.err(), Some(ResponseError::NotLeaderOrFollower));
    // the uploaded-but-uncommitted objects are removed by the next owner
    let next = open(&f).await;
    assert!(next.segments().is_empty());
    let listed = f.ctx.store.list_partition("orders", 0).await.unwrap();
    assert!(listed.is_empty(), "leftovers: {listed:?}");
}
