//! One batch of a compacted log, cleaned: the records the cleaner keeps, at their offsets, in
//! a batch with the header fields of the one they came from (base offset, last offset delta,
//! producer id, epoch and base sequence, codec), so offsets never change and consumers see
//! gaps. Tombstones (a null value) carry a delete horizon as Kafka's cleaner gives them
//! (KIP-534): the first cleaning that keeps one stores `now + delete.retention.ms` in the
//! batch's base timestamp and sets attribute bit 6, the records' timestamp deltas rewritten so
//! that each record keeps its timestamp; a cleaning after the horizon removes them.

use bytes::{BufMut, Bytes, BytesMut};

use crate::log::batch::{
    BatchHeader, BATCH_HEADER_LEN, CONTROL, CRC_START, LOG_OVERHEAD, TRANSACTIONAL,
};
use crate::log::checksum::crc32c;
use crate::log::compress::compress;
use crate::log::decompress::{Codec, Decompressed};
use crate::log::records::{walk_records, Record, RecordError, Visitor};

/// Attribute bit 6: the base timestamp is the delete horizon of the batch's tombstones.
pub(crate) const DELETE_HORIZON: i16 = 0x40;
const CRC_AT: usize = 17;

/// Why a batch could not be cleaned: it does not decode (the segment is damaged; the
/// cleaning stops and leaves the log as it was).
#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchProblem {
    #[error(transparent)]
    Records(#[from] RecordError),
    #[error("its records do not decompress: {0}")]
    Decompress(#[from] crate::log::decompress::DecompressError),
    #[error("its records could not be compressed again: {0}")]
    Compress(std::io::Error),
}

/// When tombstones go: at the horizon a batch carries, or `now + delete.retention.ms` for the
/// ones a cleaning keeps for the first time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TombstoneClock {
    pub now_ms: i64,
    pub delete_retention_ms: i64,
}

/// What became of a batch.
#[derive(Debug)]
pub(crate) enum CleanedBatch {
    /// Every record kept and no horizon to add: the batch as it was.
    Unchanged,
    Rewritten(Bytes),
    /// No record kept.
    Removed,
}

/// A kept record, its fields lent from the decompressed records section.
struct Kept<'a> {
    offset_delta: i32,
    timestamp: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// The records section of `batch` (its whole bytes), decompressed into `scratch` if it is
/// compressed (at most `max_uncompressed` bytes).
pub(crate) fn records_section<'a>(
    header: &BatchHeader,
    batch: &'a [u8],
    max_uncompressed: usize,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], BatchProblem> {
    let raw = &batch[BATCH_HEADER_LEN..header.size];
    let codec = Codec::from_attributes(header.attributes)?;
    if codec == Codec::None {
        return Ok(raw);
    }
    scratch.clear();
    Decompressed::new(codec, raw, max_uncompressed)?.read_all(scratch)?;
    Ok(scratch)
}

/// Whether the cleaner leaves `header`'s batch as it is and keeps its keys out of the offset
/// map: a transaction's batch or marker. Its records stay whatever came after them (an aborted
/// record never supersedes a committed one, a committed one is never dropped for a record of a
/// transaction that may yet abort), and read_committed readers still find every marker.
pub(crate) fn in_transaction(header: &BatchHeader) -> bool {
    header.attributes & (TRANSACTIONAL | CONTROL) != 0
}

/// Cleans one batch (its whole bytes): keeps each record `latest` says is its key's last
/// (given its offset and key), unless it is a tombstone past its horizon. A transaction's
/// batches and markers stay as they are (`in_transaction`).
pub(crate) fn clean_batch(
    header: &BatchHeader,
    batch: &[u8],
    max_uncompressed: usize,
    clock: TombstoneClock,
    mut latest: impl FnMut(i64, Option<&[u8]>) -> bool,
) -> Result<CleanedBatch, BatchProblem> {
    if in_transaction(header) {
        return Ok(CleanedBatch::Unchanged);
    }
    let mut scratch = Vec::new();
    let section = records_section(header, batch, max_uncompressed, &mut scratch)?;
    let horizon = (header.attributes & DELETE_HORIZON != 0).then_some(header.base_timestamp);
    let mut collect = Collect {
        header,
        headers: Vec::new(),
        kept: Vec::new(),
        keep: |offset: i64, key: Option<&[u8]>, tombstone: bool| {
            let expired = tombstone && horizon.is_some_and(|h| h <= clock.now_ms);
            latest(offset, key) && !expired
        },
    };
    walk_records(
        header.record_count,
        header.last_offset_delta,
        section,
        &mut collect,
    )?;
    let kept = collect.kept;
    let new_horizon = horizon.is_none() && kept.iter().any(|r| r.value.is_none());
    if kept.len() == header.record_count as usize && !new_horizon {
        return Ok(CleanedBatch::Unchanged);
    }
    if kept.is_empty() {
        return Ok(CleanedBatch::Removed);
    }
    let (attributes, base_timestamp) = if new_horizon {
        let at = clock.now_ms.saturating_add(clock.delete_retention_ms);
        (header.attributes | DELETE_HORIZON, at)
    } else {
        (header.attributes, header.base_timestamp)
    };
    encode(header, &kept, attributes, base_timestamp).map(CleanedBatch::Rewritten)
}

/// Collects the records `keep` keeps, with their headers.
struct Collect<'a, 'h, K> {
    header: &'h BatchHeader,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
    kept: Vec<Kept<'a>>,
    keep: K,
}

impl<'a, K> Visitor<'a> for Collect<'a, '_, K>
where
    K: FnMut(i64, Option<&[u8]>, bool) -> bool,
{
    type Error = RecordError;

    fn wants_headers(&mut self, _: i32) -> bool {
        true
    }

    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>) {
        self.headers.push((key, value));
    }

    fn record(&mut self, record: Record<'a>) -> Result<(), RecordError> {
        let headers = std::mem::take(&mut self.headers);
        let offset = self.header.base_offset + i64::from(record.offset_delta);
        if (self.keep)(offset, record.key, record.value.is_none()) {
            self.kept.push(Kept {
                offset_delta: record.offset_delta,
                timestamp: self.header.record_timestamp(record.timestamp_delta),
                key: record.key,
                value: record.value,
                headers,
            });
        }
        Ok(())
    }
}

/// The batch of `kept` with the header fields of the one they came from.
fn encode(
    header: &BatchHeader,
    kept: &[Kept<'_>],
    attributes: i16,
    base_timestamp: i64,
) -> Result<Bytes, BatchProblem> {
    let mut section = Vec::new();
    let mut body = Vec::new();
    for record in kept {
        body.clear();
        body.push(0); // attributes: unused in v2
        put_varlong(&mut body, record.timestamp.wrapping_sub(base_timestamp));
        put_varlong(&mut body, record.offset_delta.into());
        put_bytes(&mut body, record.key);
        put_bytes(&mut body, record.value);
        put_varlong(&mut body, record.headers.len() as i64);
        for (key, value) in &record.headers {
            put_bytes(&mut body, Some(key.as_bytes()));
            put_bytes(&mut body, *value);
        }
        put_varlong(&mut section, body.len() as i64);
        section.extend_from_slice(&body);
    }
    let codec = Codec::from_attributes(attributes)?;
    let section = compress(codec, &section).map_err(BatchProblem::Compress)?;
    let max_timestamp = match header.log_append_time() {
        true => header.max_timestamp,
        false => kept
            .iter()
            .map(|r| r.timestamp)
            .max()
            .unwrap_or(header.max_timestamp),
    };
    let size = BATCH_HEADER_LEN + section.len();
    let mut out = BytesMut::with_capacity(size);
    out.put_i64(header.base_offset);
    out.put_i32((size - LOG_OVERHEAD) as i32);
    out.put_i32(header.leader_epoch);
    out.put_i8(2);
    out.put_u32(0); // the CRC, once the rest is written
    out.put_i16(attributes);
    out.put_i32(header.last_offset_delta);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(header.producer_id);
    out.put_i16(header.producer_epoch);
    out.put_i32(header.base_sequence);
    out.put_i32(kept.len() as i32);
    out.put_slice(&section);
    let crc = crc32c(&out[CRC_START..]);
    out[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
    Ok(out.freeze())
}

/// A zigzag varint (a varlong is written alike).
fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push(raw as u8 | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// A length-prefixed field; null as length -1.
fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varlong(out, -1),
        Some(bytes) => {
            put_varlong(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}
