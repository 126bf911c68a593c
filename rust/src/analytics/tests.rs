//! Segments built as the broker builds them, in a memory store, read back into Arrow.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record};

use std::sync::Arc;

use super::error::ReadError;
use super::metadata::Metadata;
use super::reader::TopicReader;
use super::scan::{BatchLimits, PartitionScan};
use super::verify::{verify_segment, SegmentCheck};
use crate::log::batch::tests::{encode_records, record_at};
use crate::log::batch::{rewritten_prefix, BatchHeader, REWRITTEN_PREFIX_LEN};
use crate::log::segment::{build_segment, StoredBatch};
use crate::store::{SegmentObject, SegmentStore, StorageLocation};

const TOPIC: &str = "orders";
const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Record `offset` of the test data: every third key null, every fifth value null, headers
/// on even offsets (one with a null value), timestamps 1000 + offset.
fn record(offset: i64) -> Record {
    let mut headers = IndexMap::new();
    if offset % 2 == 0 {
        headers.insert(
            StrBytes::from_static_str("h"),
            Some(Bytes::from(format!("h{offset}"))),
        );
        headers.insert(StrBytes::from_static_str("none"), None);
    }
    Record {
        sequence: offset as i32,
        key: (offset % 3 != 0).then(|| Bytes::from(format!("k{offset}"))),
        value: (offset % 5 != 0).then(|| Bytes::from(format!("value-{offset}"))),
        headers,
        ..record_at(offset, 1_000 + offset, Bytes::new())
    }
}

pub(super) fn stored_batch(first: i64, count: i64, compression: Compression) -> StoredBatch {
    let records: Vec<Record> = (first..first + count).map(record).collect();
    stored(&records, compression)
}

/// `records` (offsets from their first one on) as a batch the broker stored.
fn stored(records: &[Record], compression: Compression) -> StoredBatch {
    let bytes = encode_records(records, compression);
    let header = BatchHeader::parse(&bytes).unwrap();
    let first = records[0].offset;
    StoredBatch {
        prefix: rewritten_prefix(first, header.size, 0),
        body: smallvec::smallvec![bytes.slice(REWRITTEN_PREFIX_LEN..)],
        base_offset: first,
        offset_count: records.len() as i64,
        max_timestamp: header.max_timestamp,
    }
}

struct Data {
    reader: Arc<TopicReader>,
    end: i64,
}

/// Partition 0 of `orders`: segments of 4 batches of 30 records, codecs in turn; index
/// entries every 50 records so that mid-segment reads use them.
async fn write_segments(segments: i64) -> Data {
    let store = SegmentStore::open(&StorageLocation::Memory, "ns").unwrap();
    let mut offset = 0;
    for s in 0..segments {
        let batches: Vec<StoredBatch> = (0..4)
            .map(|b| {
                let batch = stored_batch(offset, 30, CODECS[((s * 4 + b) % 5) as usize]);
                offset += 30;
                batch
            })
            .collect();
        let built = build_segment(&batches, 0, 50);
        let base = built.meta.base_offset;
        for (kind, bytes) in [
            (SegmentObject::Data, built.object()),
            (SegmentObject::Index, built.index.clone()),
        ] {
            let path = store.segment_path(TOPIC, 0, base, kind);
            store.put_new(&path, bytes).await.unwrap();
        }
    }
    Data {
        reader: Arc::new(TopicReader::new(
            store,
            Some(Metadata::SegmentsOnly),
            1 << 20,
            true,
        )),
        end: offset,
    }
}

async fn scan(
    data: &Data,
    wanted: std::ops::Range<i64>,
    rows: usize,
) -> Result<Vec<RecordBatch>, ReadError> {
    let log = data.reader.current_log(TOPIC, 0).await?;
    let limits = BatchLimits {
        rows,
        bytes: 1 << 20,
        max_uncompressed: data.reader.max_uncompressed(),
    };
    let mut scan = PartitionScan::new(data.reader.clone(), TOPIC, 0, &log, wanted, true, limits);
    let mut batches = Vec::new();
    while let Some(batch) = scan.next_batch().await? {
        batches.push(batch);
    }
    Ok(batches)
}

pub(super) fn offsets(batches: &[RecordBatch]) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| b.column(4).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

#[tokio::test]
async fn every_row_reads_back_as_written() {
    let data = write_segments(3).await;
    assert_eq!(data.reader.topics().await.unwrap(), vec![TOPIC]);
    assert_eq!(data.reader.partitions(TOPIC).await.unwrap(), vec![0]);
    let segments = data.reader.segments(TOPIC, 0).await.unwrap();
    let ranges: Vec<_> = segments
        .iter()
        .map(|s| (s.base_offset, s.end_offset))
        .collect();
    assert_eq!(ranges, vec![(0, 120), (120, 240), (240, 360)]);

    let batches = scan(&data, 0..data.end, 1000).await.unwrap();
    assert_eq!(offsets(&batches), (0..360).collect::<Vec<_>>());
    for batch in &batches {
        let keys = batch.column(0).as_binary::<i32>();
        let values = batch.column(1).as_binary::<i32>();
        let times = batch.column(5).as_primitive::<TimestampMillisecondType>();
        let types = batch.column(6).as_primitive::<Int32Type>();
        let headers = batch.column(7).as_list::<i32>();
        for (row, offset) in batch
            .column(4)
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .enumerate()
        {
            let expected = record(*offset);
            assert_eq!(keys.is_null(row), expected.key.is_none());
            if let Some(key) = &expected.key {
                assert_eq!(keys.value(row), &key[..]);
            }
            assert_eq!(values.is_null(row), expected.value.is_none());
            assert_eq!(times.value(row), 1_000 + offset);
            assert_eq!(types.value(row), 0);
            assert_eq!(headers.value_length(row) as usize, expected.headers.len());
        }
        assert_eq!(batch.column(3).as_primitive::<Int32Type>().value(0), 0);
    }
}

#[tokio::test]
async fn ranges_start_and_end_mid_segment_and_cut_batches_by_rows() {
    let data = write_segments(3).await;
    for (start, end) in [
        (0, 1),
        (61, 62),
        (95, 250),
        (119, 121),
        (200, 360),
        (359, 999),
        (400, 500),
    ] {
        let batches = scan(&data, start..end, 7).await.unwrap();
        let want: Vec<i64> = (start..end.min(data.end)).collect();
        assert_eq!(offsets(&batches), want, "{start}..{end}");
        // cut between Kafka batches (30 records each): at most one batch over the limit
        assert!(batches
            .iter()
            .all(|b| b.num_rows() < 7 + 30 && b.num_rows() > 0));
    }
}

#[tokio::test]
async fn timestamps_find_the_first_record_at_or_after_them() {
    let data = write_segments(2).await;
    let at = |t| data.reader.offset_for_timestamp(TOPIC, 0, t);
    assert_eq!(at(0).await.unwrap(), Some(0));
    assert_eq!(at(1_150).await.unwrap(), Some(150));
    assert_eq!(at(1_239).await.unwrap(), Some(239));
    assert_eq!(at(1_240).await.unwrap(), None);
}

async fn corrupt_and_scan(damage: impl Fn(&mut BytesMut)) -> String {
    let data = write_segments(2).await;
    let store = data.reader.store();
    let path = store.segment_path(TOPIC, 0, 120, SegmentObject::Data);
    let mut object = BytesMut::from(&store.get(&path).await.unwrap()[..]);
    damage(&mut object);
    store.delete(&path).await.unwrap();
    store.put_new(&path, object.freeze()).await.unwrap();
    let whole = scan(&data, 0..240, 1000).await.unwrap_err().to_string();
    assert!(
        whole.contains("segment-00000000000000000120.kfs"),
        "{whole}"
    );
    whole
}

#[tokio::test]
async fn a_flipped_byte_fails_the_read_naming_object_and_offset() {
    let message = corrupt_and_scan(|o| o[500] ^= 0x40).await;
    assert!(message.contains("CRC-32C"), "{message}");
    assert!(message.contains("offset 120"), "{message}");
}

#[tokio::test]
async fn a_truncated_object_fails_the_read() {
    let message = corrupt_and_scan(|o| o.truncate(o.len() - 100)).await;
    assert!(message.contains("offset 120"), "{message}");
}

/// A batch whose records expand past the reader's bound (1 MiB here): the read fails with a
/// message naming the bound, without decompressing (snappy) or allocating (zstd) the rest.
#[tokio::test]
async fn a_batch_expanding_past_the_bound_fails_the_read() {
    for compression in [Compression::Snappy, Compression::Zstd] {
        let store = SegmentStore::open(&StorageLocation::Memory, "ns").unwrap();
        let zeros = Bytes::from(vec![0u8; 64 * 1024]);
        let records: Vec<Record> = (0..40)
            .map(|offset| Record {
                value: Some(zeros.clone()),
                ..record(offset)
            })
            .collect();
        let built = build_segment(&[stored(&records, compression)], 0, 50);
        let path = store.segment_path(TOPIC, 0, 0, SegmentObject::Data);
        store.put_new(&path, built.object()).await.unwrap();
        let data = Data {
            reader: Arc::new(TopicReader::new(
                store,
                Some(Metadata::SegmentsOnly),
                1 << 20,
                true,
            )),
            end: 40,
        };
        let error = scan(&data, 0..data.end, 1000).await.unwrap_err();
        assert!(matches!(error, ReadError::Corrupt { .. }), "{error}");
        let message = error.to_string();
        assert!(
            message.contains("expand past the limit of 1048576 bytes")
                && message.contains("max_uncompressed_batch_bytes"),
            "{message}"
        );
    }
}

#[tokio::test]
async fn a_flipped_byte_in_a_ranged_read_is_caught_by_the_batch_crc() {
    let data = write_segments(1).await;
    let store = data.reader.store();
    let path = store.segment_path(TOPIC, 0, 0, SegmentObject::Data);
    let mut object = BytesMut::from(&store.get(&path).await.unwrap()[..]);
    let last = object.len() - 40;
    object[last] ^= 1;
    store.delete(&path).await.unwrap();
    store.put_new(&path, object.freeze()).await.unwrap();
    let error = scan(&data, 100..120, 1000).await.unwrap_err().to_string();
    assert!(
        error.contains("CRC-32C") && error.contains("offset 90"),
        "{error}"
    );
}

#[tokio::test]
async fn an_index_entry_pointing_at_another_batch_fails_the_read() {
    let data = write_segments(1).await;
    let store = data.reader.store();
    let path = store.segment_path(TOPIC, 0, 0, SegmentObject::Index);
    let mut index = BytesMut::from(&store.get(&path).await.unwrap()[..]);
    // entry 1 is offset 60 (the third batch); point it one batch further
    let entry = 16 + 12;
    assert_eq!(&index[entry..entry + 8], &60i64.to_be_bytes());
    let position = u32::from_be_bytes(index[entry + 8..entry + 12].try_into().unwrap());
    let segment = store
        .get(&store.segment_path(TOPIC, 0, 0, SegmentObject::Data))
        .await
        .unwrap();
    let third = BatchHeader::parse(&segment[position as usize..]).unwrap();
    index[entry + 8..entry + 12].copy_from_slice(&(position + third.size as u32).to_be_bytes());
    store.delete(&path).await.unwrap();
    store.put_new(&path, index.freeze()).await.unwrap();
    let error = scan(&data, 61..100, 1000).await.unwrap_err().to_string();
    assert!(
        error.contains("expected a batch starting at offset 60"),
        "{error}"
    );
}

/// Replaces the object at `path` with `damage` applied to its bytes.
async fn damage_object(store: &SegmentStore, kind: SegmentObject, damage: impl Fn(&mut BytesMut)) {
    let path = store.segment_path(TOPIC, 0, 120, kind);
    let mut object = BytesMut::from(&store.get(&path).await.unwrap()[..]);
    damage(&mut object);
    store.delete(&path).await.unwrap();
    store.put_new(&path, object.freeze()).await.unwrap();
}

async fn verify_second_segment(damage: impl Fn(&mut BytesMut)) -> SegmentCheck {
    let data = write_segments(2).await;
    let store = data.reader.store();
    damage_object(store, SegmentObject::Data, damage).await;
    verify_segment(store, TOPIC, 0, 120, None).await.unwrap()
}

fn messages(check: &SegmentCheck) -> Vec<&str> {
    check.problems.iter().map(|p| p.message.as_str()).collect()
}

#[tokio::test]
async fn a_sound_segment_verifies_clean_with_its_offsets_and_counts() {
    let check = verify_second_segment(|_| {}).await;
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    assert_eq!(
        (check.first_offset, check.last_offset),
        (Some(120), Some(239))
    );
    assert_eq!((check.batches, check.records), (4, 120));
    assert!(check.object.ends_with("segment-00000000000000000120.kfs"));
}

#[tokio::test]
async fn verify_reports_each_bad_batch_and_walks_on() {
    let data = write_segments(2).await;
    let store = data.reader.store();
    let object = store
        .get(&store.segment_path(TOPIC, 0, 120, SegmentObject::Data))
        .await
        .unwrap();
    let first = BatchHeader::parse(&object[32..]).unwrap();
    let third_at = 32 + first.size + BatchHeader::parse(&object[32 + first.size..]).unwrap().size;
    // damage the payload of the first and the third batch
    damage_object(store, SegmentObject::Data, |o| {
        o[100] ^= 1;
        o[third_at + 80] ^= 1;
    })
    .await;
    let check = verify_segment(store, TOPIC, 0, 120, None).await.unwrap();
    let crc: Vec<_> = check
        .problems
        .iter()
        .filter(|p| p.message.starts_with("batch CRC-32C mismatch"))
        .map(|p| p.offset)
        .collect();
    assert_eq!(crc, [Some(120), Some(180)], "{:?}", messages(&check));
    assert!(messages(&check)
        .iter()
        .any(|m| m.starts_with("segment CRC-32C")));
    assert_eq!(check.batches, 4, "the walk goes on past a bad CRC");
}

#[tokio::test]
async fn verify_reports_a_truncated_segment() {
    let check = verify_second_segment(|o| o.truncate(o.len() - 100)).await;
    let found = messages(&check);
    assert!(
        found
            .iter()
            .any(|m| m.contains("footer does not end in END!")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|m| m.contains("runs past the end")),
        "{found:?}"
    );
    assert_eq!(check.batches, 3);
}

#[tokio::test]
async fn verify_reports_a_missing_or_misplaced_index() {
    let data = write_segments(2).await;
    let store = data.reader.store();
    damage_object(store, SegmentObject::Index, |i| {
        let entry = 16 + 12;
        let position = u32::from_be_bytes(i[entry + 8..entry + 12].try_into().unwrap());
        i[entry + 8..entry + 12].copy_from_slice(&(position + 1).to_be_bytes());
    })
    .await;
    let check = verify_segment(store, TOPIC, 0, 120, None).await.unwrap();
    let found = messages(&check);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("which is not a batch start"), "{found:?}");
    assert!(check.problems[0].object.ends_with(".index"));

    let index = store.segment_path(TOPIC, 0, 120, SegmentObject::Index);
    store.delete(&index).await.unwrap();
    let check = verify_segment(store, TOPIC, 0, 120, None).await.unwrap();
    assert!(messages(&check)[0].contains("index object is missing"));
}
