//! Reading the committed write-ahead runs after the segments, as a single-node broker publishes
//! them: the whole committed log, never an uncommitted object, a read that a compaction
//! overtakes finishes from the segment it made, and read_committed bounds it overtakes are
//! taken again.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use uuid::Uuid;

use super::error::ReadError;
use super::metadata::Metadata;
use super::reader::TopicReader;
use super::scan::{BatchLimits, PartitionScan};
use super::tests::{offsets, stored_batch};
use crate::log::producers::{ProducerBatch, ProducerSnapshot, ProducerStates};
use crate::log::segment::{build_segment, StoredBatch};
use crate::meta::catalog::{PartitionRecord, TopicRecord};
use crate::meta::wal::{encode_manifest, TopicRuns, WalManifest, WalRun};
use crate::store::faulty::FaultyStore;
use crate::store::{SegmentObject, SegmentStore, StorageLocation};

const TOPIC: &str = "orders";
const NAMESPACE: &str = "ns";

fn topic_id() -> Uuid {
    Uuid::from_u128(7)
}

/// Batches of 30 records from `first` on, `count` of them.
fn batches(first: i64, count: i64) -> Vec<StoredBatch> {
    let compression = kafka_protocol::records::Compression::None;
    (0..count)
        .map(|b| stored_batch(first + 30 * b, 30, compression))
        .collect()
}

fn bytes_of(batch: &StoredBatch) -> Bytes {
    let mut out = BytesMut::from(&batch.prefix[..]);
    batch
        .body
        .iter()
        .for_each(|piece| out.extend_from_slice(piece));
    out.freeze()
}

struct Bench {
    store: Arc<SegmentStore>,
    reader: Arc<TopicReader>,
}

impl Bench {
    async fn new() -> Bench {
        Bench::over(SegmentStore::open(&StorageLocation::Memory, NAMESPACE).unwrap()).await
    }

    async fn over(store: SegmentStore) -> Bench {
        let topic = TopicRecord {
            name: TOPIC.into(),
            id: topic_id(),
            partitions: 1,
            configs: Default::default(),
            created_ms: 0,
        };
        let shelf = store.published_shelf();
        let encoded = Bytes::from(serde_json::to_vec(&topic).unwrap());
        shelf
            .put(&format!("topics/{TOPIC}"), encoded)
            .await
            .unwrap();
        let reader = TopicReader::new(store, Some(Metadata::Published), 1 << 20, true);
        let reader = Arc::new(reader);
        Bench {
            store: reader.store().clone(),
            reader,
        }
    }

    /// Writes a segment of `batches` (not published: segments are listed).
    async fn segment(&self, batches: &[StoredBatch]) {
        let built = build_segment(batches, 0, 50);
        let base = built.meta.base_offset;
        let path = self.store.segment_path(TOPIC, 0, base, SegmentObject::Data);
        self.store.put_new(&path, built.object()).await.unwrap();
    }

    /// Uploads a write-ahead object holding `batches` of partition 0; returns its path and run.
    async fn wal_object(&self, name: &str, batches: &[StoredBatch]) -> (String, WalRun) {
        let mut object = BytesMut::from(&b"KWAL-header-of-24-bytes!"[..]);
        let position = object.len() as u64;
        batches
            .iter()
            .for_each(|b| object.extend_from_slice(&bytes_of(b)));
        let path = self.store.wal_path(1, name);
        self.store.put_new(&path, object.freeze()).await.unwrap();
        let last = batches.last().unwrap();
        let run = WalRun {
            partition: 0,
            leader_epoch: 1,
            base_offset: batches[0].base_offset,
            last_offset: last.base_offset + last.offset_count - 1,
            position,
            length: batches.iter().map(|b| bytes_of(b).len() as u64).sum(),
            max_timestamp: 0,
        };
        (path.to_string(), run)
    }

    async fn publish_manifest(&self, name: &str, object: &str, run: WalRun) {
        let manifest = WalManifest {
            object: object.to_string(),
            broker: 1,
            created_ms: 0,
            size: 0,
            topics: vec![TopicRuns {
                topic: TOPIC.into(),
                id: topic_id(),
                runs: vec![run],
                transactional: Vec::new(),
            }],
        };
        let shelf = self.store.published_shelf();
        let name = format!("wal/1/{name}");
        shelf.put(&name, encode_manifest(&manifest)).await.unwrap();
    }

    async fn publish_record(&self, segment_end: i64) {
        self.publish_record_with(segment_end, None).await;
    }

    /// The partition record with its segments ending at `segment_end` (the committed end too)
    /// and the producer snapshot it names, if any.
    async fn publish_record_with(&self, segment_end: i64, producer_snapshot: Option<i64>) {
        let mut record = PartitionRecord::empty();
        record.producer_snapshot = producer_snapshot;
        record.segment_end = Some(segment_end);
        record.high_watermark = segment_end;
        let encoded = Bytes::from(serde_json::to_vec(&record).unwrap());
        let shelf = self.store.published_shelf();
        shelf
            .put(&format!("partitions/{TOPIC}/0"), encoded)
            .await
            .unwrap();
    }

    /// Stores the producer snapshot of the log below `end` with producer 7's transaction open
    /// from `open_from`; its path.
    async fn producer_snapshot(&self, end: i64, open_from: i64) -> object_store::path::Path {
        let mut producers = ProducerStates::default();
        let batch = ProducerBatch {
            producer_id: 7,
            epoch: 0,
            first_seq: 0,
            last_seq: 0,
            transactional: true,
        };
        producers.record(&batch, open_from, open_from, 0);
        let snapshot = ProducerSnapshot {
            end,
            producers,
            aborted: Vec::new(),
        };
        let encoded = Bytes::from(serde_json::to_vec(&snapshot).unwrap());
        let path = self
            .store
            .segment_path(TOPIC, 0, end, SegmentObject::ProducerSnapshot);
        self.store.put_new(&path, encoded).await.unwrap();
        path
    }

    async fn read(&self, wanted: std::ops::Range<i64>) -> Result<Vec<i64>, ReadError> {
        let log = self.reader.current_log(TOPIC, 0).await?;
        self.read_with(&log, wanted).await
    }

    async fn read_with(
        &self,
        log: &super::reader::PartitionLog,
        wanted: std::ops::Range<i64>,
    ) -> Result<Vec<i64>, ReadError> {
        let limits = BatchLimits {
            rows: 1000,
            bytes: 1 << 20,
            max_uncompressed: 1 << 20,
        };
        let reader = self.reader.clone();
        let mut scan = PartitionScan::new(reader, TOPIC, 0, log, wanted, false, limits);
        let mut read = Vec::new();
        while let Some(batch) = scan.next_batch().await? {
            read.push(batch);
        }
        Ok(offsets(&read))
    }
}

/// Segment [0, `segment_end`); committed runs [120, 180) and [180, 240) in two write-ahead
/// objects.
async fn log_with_runs(segment_end: i64) -> (Bench, Vec<(String, WalRun)>) {
    let bench = Bench::new().await;
    bench.segment(&batches(0, segment_end / 30)).await;
    bench.publish_record(segment_end).await;
    let mut runs = Vec::new();
    for (i, first) in [120, 180].into_iter().enumerate() {
        let name = format!("a-{i}");
        let (object, run) = bench.wal_object(&name, &batches(first, 2)).await;
        bench.publish_manifest(&name, &object, run).await;
        runs.push((object, run));
    }
    (bench, runs)
}

#[tokio::test]
async fn the_committed_runs_after_the_segments_are_read_and_nothing_uncommitted() {
    let (bench, _) = log_with_runs(120).await;
    // Uploaded by a broker that never committed it (fenced, or killed before its commit).
    bench.wal_object("zombie", &batches(240, 1)).await;
    let log = bench.reader.current_log(TOPIC, 0).await.unwrap();
    assert_eq!((log.log_start, log.end, log.runs.len()), (0, 240, 2));
    assert_eq!(
        bench.read(0..i64::MAX).await.unwrap(),
        (0..240).collect::<Vec<_>>()
    );
    assert_eq!(
        bench.read(150..200).await.unwrap(),
        (150..200).collect::<Vec<_>>()
    );
    assert_eq!(bench.reader.partitions(TOPIC).await.unwrap(), vec![0]);
    assert_eq!(
        bench.reader.topics().await.unwrap(),
        vec![TOPIC.to_string()]
    );
    assert_eq!(
        bench
            .reader
            .offset_for_timestamp(TOPIC, 0, 1_200)
            .await
            .unwrap(),
        Some(200)
    );
}

#[tokio::test]
async fn a_read_overtaken_by_a_compaction_finishes_from_its_segment() {
    let (bench, runs) = log_with_runs(120).await;
    let log = bench.reader.current_log(TOPIC, 0).await.unwrap();
    // The broker compacts the runs into a segment, commits, and collects the runs' objects and
    // manifests, all after this read took its log.
    bench.segment(&batches(120, 4)).await;
    bench.publish_record(240).await;
    let shelf = bench.store.published_shelf();
    for (i, (object, _)) in runs.iter().enumerate() {
        shelf.delete(&format!("wal/1/a-{i}")).await.unwrap();
        let path = object_store::path::Path::from(object.as_str());
        bench.store.delete(&path).await.unwrap();
    }
    let read = bench.read_with(&log, 0..i64::MAX).await.unwrap();
    assert_eq!(read, (0..240).collect::<Vec<_>>(), "each offset once");
}

#[tokio::test]
async fn a_gap_between_the_segments_and_the_runs_is_never_read_past() {
    let (bench, _) = log_with_runs(120).await;
    // The record says the segments end at 90: the runs from 120 do not follow them (a
    // compaction seen half-way, again and again).
    bench.publish_record(90).await;
    let failed = bench.reader.current_log(TOPIC, 0).await;
    assert!(matches!(failed, Err(ReadError::Moved { .. })), "{failed:?}");
}

#[tokio::test]
async fn a_run_the_last_segment_ends_inside_is_read_from_the_segment_end() {
    // Compaction cut the segment at 150, inside the committed run [120, 180), whose rest stays
    // committed until the next compaction.
    let (bench, _) = log_with_runs(150).await;
    let log = bench.reader.current_log(TOPIC, 0).await.unwrap();
    assert_eq!((log.log_start, log.end, log.runs.len()), (0, 240, 2));
    let snapshot = bench.reader.snapshot(TOPIC).await.unwrap().unwrap();
    assert_eq!(snapshot.committed_end(0), 240);
    for wanted in [0..i64::MAX, 130..200, 150..160, 170..240] {
        let expected: Vec<i64> = (wanted.start..wanted.end.min(240)).collect();
        assert_eq!(
            bench.read(wanted).await.unwrap(),
            expected,
            "each offset once"
        );
    }
    for (timestamp, offset) in [(1_130, 130), (1_150, 150), (1_170, 170), (1_239, 239)] {
        let found = bench.reader.offset_for_timestamp(TOPIC, 0, timestamp).await;
        assert_eq!(found.unwrap(), Some(offset), "timestamp {timestamp}");
    }
}

/// A read_committed reader's bounds come from the partition's producer snapshot, which a
/// compaction replaces (a new snapshot, the record naming it, the old one deleted) between the
/// reader's snapshot of the metadata and its read of the object: held at the store's gate
/// until the compaction is done, the read finds the object gone, and the bounds are taken
/// again from a fresh snapshot of the metadata, never an error.
#[tokio::test]
async fn bounds_that_a_compaction_overtakes_are_taken_again() {
    let objects = Arc::new(FaultyStore::default());
    let bench = Bench::over(SegmentStore::over(objects.clone(), NAMESPACE)).await;
    bench.segment(&batches(0, 8)).await;
    let old = bench.producer_snapshot(120, 50).await;
    bench.publish_record_with(240, Some(120)).await;
    let gate = objects.hold_gets(old.as_ref());
    let reader = bench.reader.clone();
    let bounds = tokio::spawn(async move { reader.bounds(TOPIC).await });
    while objects.held_gets() == 0 {
        tokio::task::yield_now().await;
    }
    bench.producer_snapshot(240, 200).await;
    bench.publish_record_with(240, Some(240)).await;
    bench.store.delete(&old).await.unwrap();
    gate.add_permits(1);
    let bounds = bounds.await.unwrap().unwrap();
    assert_eq!(
        bounds,
        Some(vec![(0, 0, 200)]),
        "the new snapshot's open transaction"
    );
    assert_eq!(
        objects.reads_of(old.as_ref()),
        1,
        "the old snapshot was asked for once"
    );
}
