//! Reading one partition's offset range: which bytes to fetch from each segment (the `.index`
//! turns a start offset into a byte position) and write-ahead run, checking them, and decoding
//! their batches into Arrow record batches. The next piece is fetched while the current one is
//! decoded.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use arrow_array::RecordBatch;
use bytes::Bytes;
use tokio::task::JoinHandle;

use super::columns::Columns;
use super::error::ReadError;
use super::metadata::RunRef;
use super::reader::{PartitionLog, TopicReader, MOVED_RETRIES};
use super::records::decode_records;
use super::transactions::Committed;
use crate::log::batch::{BatchHeader, BATCH_HEADER_LEN, CRC_START};
use crate::log::checksum::crc32c;
use crate::log::decompress::{Codec, Decompressed};
use crate::log::index::SparseIndex;
use crate::log::segment::{ParsedSegment, SEGMENT_FOOTER_LEN, SEGMENT_HEADER_LEN};
use crate::store::{SegmentObject, SegmentStore, StoreError};

/// A segment as listed: its offsets are `base_offset..end_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentRef {
    pub base_offset: i64,
    pub end_offset: i64,
    pub size: u64,
    pub has_index: bool,
    /// The cleaning that wrote it (offsets may have gaps); None for compaction's.
    pub generation: Option<u64>,
}

/// The batch bytes fetched from one segment object.
pub(crate) struct Fetched {
    object: String,
    area: Bytes,
    /// Byte position of `area[0]` in the object (for error messages).
    area_start: u64,
    /// The offset the first batch must start at.
    first_offset: i64,
    /// The segment CRC covered every byte of `area`: batch CRCs need no second pass.
    crc_checked: bool,
    /// A cleaned segment's: batches may start past the offset the last one ended at (the
    /// records between were cleaned away).
    gaps: bool,
}

impl Fetched {
    fn area_len(&self) -> usize {
        self.area.len()
    }
}

/// Fetches the part of `segment` that can hold offsets in `wanted`. A read that starts at
/// the segment's beginning fetches the whole object and checks header, footer and the
/// segment CRC; a read from the middle fetches from the indexed batch at or before the start
/// (every batch still has its own CRC checked).
pub(crate) async fn fetch_segment(
    store: &SegmentStore,
    topic: &str,
    partition: i32,
    segment: &SegmentRef,
    wanted: &Range<i64>,
) -> Result<Fetched, ReadError> {
    let (base, generation) = (segment.base_offset, segment.generation);
    let data = store.object_path(topic, partition, base, generation, SegmentObject::Data);
    let object = data.as_ref().to_string();
    let gaps = generation.is_some();
    // Gone: a cleaning replaced it after the log was taken (`ReadError::Moved`).
    let moved = |e: StoreError| match e {
        StoreError::NotFound(_) => ReadError::Moved {
            topic: topic.to_string(),
            partition,
        },
        e => e.into(),
    };
    if wanted.start > base && segment.has_index {
        let index_path =
            store.object_path(topic, partition, base, generation, SegmentObject::Index);
        let index = SparseIndex::parse(&store.get(&index_path).await.map_err(moved)?)
            .map_err(|e| ReadError::corrupt(index_path.as_ref(), base, &e.to_string()))?;
        let batches_end = segment
            .size
            .checked_sub(SEGMENT_FOOTER_LEN as u64)
            .filter(|end| *end >= SEGMENT_HEADER_LEN as u64)
            .ok_or_else(|| ReadError::corrupt(&object, base, "shorter than header and footer"))?;
        // The batch at the entry's position must start at the entry's offset (checked by the
        // cursor): a wrong index then fails the read instead of silently skipping records.
        let (from, first_offset) = match index.entry_for(wanted.start) {
            Some(entry) => (u64::from(entry.position), entry.offset),
            None => (SEGMENT_HEADER_LEN as u64, base),
        };
        // Batches from the first indexed one at or after the end hold no wanted offset.
        let to = index
            .entries
            .iter()
            .find(|e| e.offset >= wanted.end)
            .map_or(batches_end, |e| u64::from(e.position));
        if from < SEGMENT_HEADER_LEN as u64 || from > to || to > batches_end {
            return Err(ReadError::corrupt(
                index_path.as_ref(),
                base,
                "index positions lie outside the segment's batches",
            ));
        }
        let area = store.get_range(&data, from..to).await.map_err(moved)?;
        return Ok(Fetched {
            object,
            area,
            area_start: from,
            first_offset,
            crc_checked: false,
            gaps,
        });
    }
    let parsed = ParsedSegment::parse(store.get_mapped(&data).await.map_err(moved)?)
        .map_err(|e| ReadError::corrupt(&object, base, &e.to_string()))?;
    if parsed.base_offset != base {
        return Err(ReadError::corrupt(
            &object,
            base,
            &format!("its header says base offset {}", parsed.base_offset),
        ));
    }
    Ok(Fetched {
        object,
        area: parsed.batches,
        area_start: SEGMENT_HEADER_LEN as u64,
        first_offset: base,
        crc_checked: true,
        gaps,
    })
}

/// Fetches a committed write-ahead run. Its object is gone once a compaction moved the run into
/// a segment and collected it: `ReadError::Moved`, and the reader takes the log again.
pub(crate) async fn fetch_run(
    store: &SegmentStore,
    topic: &str,
    partition: i32,
    run: &RunRef,
) -> Result<Fetched, ReadError> {
    let path = object_store::path::Path::from(run.object.as_str());
    let range = run.position..run.position + run.length;
    let area = match store.get_range(&path, range).await {
        Ok(area) => area,
        Err(StoreError::NotFound(_)) => {
            return Err(ReadError::Moved {
                topic: topic.to_string(),
                partition,
            })
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Fetched {
        object: run.object.clone(),
        area,
        area_start: run.position,
        first_offset: run.base_offset,
        crc_checked: false,
        gaps: false,
    })
}

/// A part of a partition's log: a committed segment or a write-ahead run above them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Segment(SegmentRef),
    Run(RunRef),
}

impl Piece {
    fn offsets(&self) -> Range<i64> {
        match self {
            Piece::Segment(s) => s.base_offset..s.end_offset,
            Piece::Run(r) => r.base_offset..r.end_offset,
        }
    }

    fn size(&self) -> usize {
        match self {
            Piece::Segment(s) => s.size as usize,
            Piece::Run(r) => r.length as usize,
        }
    }

    pub(crate) async fn fetch(
        &self,
        store: &SegmentStore,
        topic: &str,
        partition: i32,
        wanted: &Range<i64>,
    ) -> Result<Fetched, ReadError> {
        match self {
            Piece::Segment(s) => fetch_segment(store, topic, partition, s, wanted).await,
            Piece::Run(r) => fetch_run(store, topic, partition, r).await,
        }
    }
}

impl PartitionLog {
    /// Its segments, then its runs.
    pub(crate) fn pieces(&self) -> Vec<Piece> {
        let segments = self.segments.iter().copied().map(Piece::Segment);
        segments
            .chain(self.runs.iter().cloned().map(Piece::Run))
            .collect()
    }
}

/// A batch found by `BatchCursor`: its header and where it starts in the fetched area.
pub(crate) struct Batch {
    pub header: BatchHeader,
    start: usize,
}

/// Walks the batches of fetched bytes, checking each: complete, magic 2, CRC-32C, and
/// offsets that continue the previous batch.
pub(crate) struct BatchCursor {
    fetched: Fetched,
    pos: usize,
    next_offset: i64,
    /// Largest size a batch's records may decompress to (a bomb fails the read instead).
    max_uncompressed: usize,
}

impl BatchCursor {
    pub(crate) fn new(fetched: Fetched, max_uncompressed: usize) -> BatchCursor {
        let next_offset = fetched.first_offset;
        BatchCursor {
            fetched,
            pos: 0,
            next_offset,
            max_uncompressed,
        }
    }

    fn corrupt(&self, at: usize, offset: i64, reason: &str) -> ReadError {
        let byte = self.fetched.area_start + at as u64;
        ReadError::corrupt(
            &self.fetched.object,
            offset,
            &format!("{reason} (batch at byte {byte})"),
        )
    }

    pub(crate) fn corrupt_at(&self, batch: &Batch, reason: &str) -> ReadError {
        self.corrupt(batch.start, batch.header.base_offset, reason)
    }

    pub(crate) fn next_batch(&mut self) -> Result<Option<Batch>, ReadError> {
        let area = &self.fetched.area;
        if self.pos == area.len() {
            return Ok(None);
        }
        let start = self.pos;
        let expected = self.next_offset;
        let rest = &area[start..];
        let header = BatchHeader::parse(rest)
            .ok_or_else(|| self.corrupt(start, expected, "truncated or malformed batch header"))?;
        if header.size > rest.len() {
            return Err(self.corrupt(start, header.base_offset, "the batch is truncated"));
        }
        if header.magic != 2 {
            let reason = format!("record batch magic {} (only 2 is stored)", header.magic);
            return Err(self.corrupt(start, header.base_offset, &reason));
        }
        if !self.fetched.crc_checked && crc32c(&rest[CRC_START..header.size]) != header.crc {
            return Err(self.corrupt(start, header.base_offset, "batch CRC-32C mismatch"));
        }
        let follows = match self.fetched.gaps {
            true => header.base_offset >= expected,
            false => header.base_offset == expected,
        };
        if !follows || header.last_offset_delta < 0 {
            let reason = match self.fetched.gaps {
                true => format!("expected a batch starting at offset {expected} or later"),
                false => format!("expected a batch starting at offset {expected}"),
            };
            return Err(self.corrupt(start, header.base_offset, &reason));
        }
        self.pos += header.size;
        self.next_offset = header.last_offset() + 1;
        Ok(Some(Batch { header, start }))
    }

    /// The batch's records section, decompressed into `scratch` when compressed.
    pub(crate) fn records_of<'a>(
        &'a self,
        batch: &Batch,
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], ReadError> {
        let span = batch.start + BATCH_HEADER_LEN..batch.start + batch.header.size;
        let raw = &self.fetched.area[span];
        let codec = Codec::from_attributes(batch.header.attributes)
            .map_err(|r| self.corrupt_at(batch, &r.to_string()))?;
        if codec == Codec::None {
            return Ok(raw);
        }
        Decompressed::new(codec, raw, self.max_uncompressed)
            .and_then(|stream| stream.read_all(scratch))
            .map_err(|reason| {
                self.corrupt_at(
                    batch,
                    &format!(
                        "{reason} (a larger max_uncompressed_batch_bytes of the reader \
                         allows bigger batches)"
                    ),
                )
            })?;
        Ok(scratch)
    }
}

/// When a record batch is handed out: once it holds `rows` rows or `bytes` of keys, values
/// and headers. It is cut between Kafka batches, so it may pass a limit by one Kafka batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchLimits {
    pub rows: usize,
    pub bytes: usize,
    /// Largest size one Kafka batch's records may decompress to.
    pub max_uncompressed: usize,
}

type Prefetch = JoinHandle<Result<Fetched, ReadError>>;

/// One partition's offsets `wanted`, as a sequence of Arrow record batches in offset order.
pub(crate) struct PartitionScan {
    reader: Arc<TopicReader>,
    topic: String,
    partition: i32,
    /// What is left to read: `wanted.start` moves past each batch decoded.
    wanted: Range<i64>,
    pending: VecDeque<Piece>,
    /// Object bytes of the pieces not fetched yet (pending or prefetching).
    unread_bytes: usize,
    prefetch: Option<Prefetch>,
    cursor: Option<BatchCursor>,
    columns: Columns,
    limits: BatchLimits,
    scratch: Vec<u8>,
    /// New logs taken since the last batch decoded (a compaction moved the log meanwhile).
    retakes: usize,
    /// Read committed: whose batches are left out.
    committed: Committed,
}

impl PartitionScan {
    pub(crate) fn new(
        reader: Arc<TopicReader>,
        topic: &str,
        partition: i32,
        log: &PartitionLog,
        wanted: Range<i64>,
        include_headers: bool,
        limits: BatchLimits,
    ) -> PartitionScan {
        let mut scan = PartitionScan {
            reader,
            topic: topic.to_string(),
            partition,
            wanted,
            pending: VecDeque::new(),
            unread_bytes: 0,
            prefetch: None,
            cursor: None,
            columns: Columns::new(topic, partition, include_headers),
            limits,
            scratch: Vec::new(),
            retakes: 0,
            committed: Committed::default(),
        };
        scan.plan(log);
        scan
    }

    /// Reads what is left of `wanted` from the pieces of `log` (never past its end: for a
    /// read_committed reader, its last stable offset).
    fn plan(&mut self, log: &PartitionLog) {
        self.wanted.end = self.wanted.end.min(log.end);
        self.committed = log.committed.clone();
        let wanted = self.wanted.clone();
        self.pending = log
            .pieces()
            .into_iter()
            .filter(|p| p.offsets().end > wanted.start && p.offsets().start < wanted.end)
            .collect();
        self.unread_bytes = self.pending.iter().map(Piece::size).sum();
    }

    fn start_fetch(&mut self) -> Option<Prefetch> {
        let piece = self.pending.pop_front()?;
        let (reader, topic) = (self.reader.clone(), self.topic.clone());
        let (partition, wanted) = (self.partition, self.wanted.clone());
        Some(tokio::spawn(async move {
            piece
                .fetch(reader.store(), &topic, partition, &wanted)
                .await
        }))
    }

    /// Moves to the next piece; false when none is left. Must run inside the runtime.
    async fn advance(&mut self) -> Result<bool, ReadError> {
        let Some(fetch) = self.prefetch.take().or_else(|| self.start_fetch()) else {
            return Ok(false);
        };
        let fetched = fetch
            .await
            .map_err(|e| ReadError::Storage(StoreError::Other(e.to_string())))?;
        let fetched = match fetched {
            Err(ReadError::Moved { .. }) if self.retakes < MOVED_RETRIES => {
                // A compaction collected a run: what is left is in its segment now.
                self.retakes += 1;
                let log = self.reader.current_log(&self.topic, self.partition).await?;
                self.plan(&log);
                return Ok(true);
            }
            fetched => fetched?,
        };
        self.unread_bytes = self.unread_bytes.saturating_sub(fetched.area_len());
        if self.columns.is_empty() {
            // Size the next record batch's value buffer once: growing it by doubling would
            // copy the values again and touch fresh pages each time.
            let expected = fetched.area_len() + self.unread_bytes;
            self.columns.reserve_values(expected.min(self.limits.bytes));
        }
        self.cursor = Some(BatchCursor::new(fetched, self.limits.max_uncompressed));
        self.prefetch = self.start_fetch();
        Ok(true)
    }

    fn full(&self) -> bool {
        self.columns.len() >= self.limits.rows || self.columns.payload_bytes() >= self.limits.bytes
    }

    pub(crate) async fn next_batch(&mut self) -> Result<Option<RecordBatch>, ReadError> {
        loop {
            if self.full() {
                return Ok(Some(self.columns.finish()));
            }
            let Some(cursor) = self.cursor.as_mut() else {
                if self.advance().await? {
                    continue;
                }
                return Ok((!self.columns.is_empty()).then(|| self.columns.finish()));
            };
            let Some(batch) = cursor.next_batch()? else {
                self.cursor = None;
                continue;
            };
            if batch.header.base_offset >= self.wanted.end {
                // Offsets only grow: nothing after this batch is wanted.
                self.cursor = None;
                self.pending.clear();
                if let Some(fetch) = self.prefetch.take() {
                    fetch.abort();
                }
                continue;
            }
            if batch.header.last_offset() < self.wanted.start {
                continue;
            }
            if self.committed.aborted(&batch.header) {
                self.wanted.start = batch.header.last_offset() + 1;
                continue;
            }
            let records = cursor.records_of(&batch, &mut self.scratch)?;
            decode_records(&batch.header, records, &self.wanted, &mut self.columns)
                .map_err(|e| cursor.corrupt_at(&batch, &e.to_string()))?;
            self.wanted.start = batch.header.last_offset() + 1;
            self.retakes = 0;
        }
    }
}

impl Drop for PartitionScan {
    fn drop(&mut self) {
        if let Some(fetch) = self.prefetch.take() {
            fetch.abort();
        }
    }
}
