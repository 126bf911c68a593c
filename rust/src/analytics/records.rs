//! The records inside a v2 batch (after decompression), decoded straight into Arrow columns.
//!
//! Record: length varint | attributes i8 | timestamp delta varlong | offset delta varint |
//! key length varint (-1 = null) | key | value length varint | value | header count varint |
//! headers (key length varint | key | value length varint | value). Varints are zigzag.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};

use super::columns::{Columns, TimestampType};
use crate::log::batch::BatchHeader;

const CONTROL_BATCH: i16 = 0x20;

/// Why a batch's records do not decode (the segment holding them is corrupt).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("varint runs past the record")]
    VarintPastEnd,
    #[error("varint longer than 10 bytes")]
    VarintTooLong,
    #[error("varint out of the int32 range")]
    VarintOutOfRange,
    #[error("field runs past the record")]
    FieldPastEnd,
    #[error("record {0} has negative length {1}")]
    NegativeLength(i32, i32),
    #[error("record {0} runs past the batch")]
    RecordPastEnd(i32),
    #[error("the offset of record {0} is past the largest offset")]
    OffsetOverflow(i32),
    #[error("header key of offset {0} is not UTF-8")]
    HeaderKeyNotUtf8(i64),
    #[error("{extra} bytes follow the batch's {records} records")]
    TrailingBytes { extra: usize, records: i32 },
}

/// Reads zigzag varints and length-prefixed fields from a record, never past its end.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn varlong(&mut self) -> Result<i64, RecordError> {
        let mut raw: u64 = 0;
        for shift in (0..70).step_by(7) {
            let byte = *self.buf.get(self.pos).ok_or(RecordError::VarintPastEnd)?;
            self.pos += 1;
            raw |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(RecordError::VarintTooLong)
    }

    fn varint(&mut self) -> Result<i32, RecordError> {
        i32::try_from(self.varlong()?).map_err(|_| RecordError::VarintOutOfRange)
    }

    fn skip(&mut self, n: usize) -> Result<(), RecordError> {
        self.take(n).map(drop)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + n)
            .ok_or(RecordError::FieldPastEnd)?;
        self.pos += n;
        Ok(bytes)
    }

    /// A length-prefixed field; a negative length is null.
    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, RecordError> {
        let len = self.varint()?;
        if len < 0 {
            return Ok(None);
        }
        self.take(len as usize).map(Some)
    }
}

/// Decodes the records of one batch whose offsets fall in `wanted` into `columns`.
/// `records` is the batch's records section, decompressed. Control batches hold transaction
/// markers, not data, so they yield no rows (as a consumer sees it).
pub fn decode_records(
    header: &BatchHeader,
    records: &[u8],
    wanted: &Range<i64>,
    columns: &mut Columns,
) -> Result<(), RecordError> {
    if header.attributes & CONTROL_BATCH != 0 {
        return Ok(());
    }
    let timestamp_type = if header.log_append_time() {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    };
    let mut cursor = Cursor {
        buf: records,
        pos: 0,
    };
    for n in 0..header.record_count {
        let length = cursor.varint()?;
        if length < 0 {
            return Err(RecordError::NegativeLength(n, length));
        }
        let body = cursor
            .take(length as usize)
            .map_err(|_| RecordError::RecordPastEnd(n))?;
        let mut record = Cursor { buf: body, pos: 0 };
        record.skip(1)?; // attributes: unused in v2
        let timestamp_delta = record.varlong()?;
        let offset = header
            .base_offset
            .checked_add(i64::from(record.varint()?))
            .ok_or(RecordError::OffsetOverflow(n))?;
        if !wanted.contains(&offset) {
            continue;
        }
        let timestamp = header.record_timestamp(timestamp_delta);
        let key = record.nullable_bytes()?;
        let value = record.nullable_bytes()?;
        columns.push_record(offset, timestamp, timestamp_type, key, value);
        if columns.wants_headers() {
            let count = record.varint()?;
            for _ in 0..count.max(0) {
                let key = record.nullable_bytes()?.unwrap_or_default();
                let key =
                    std::str::from_utf8(key).map_err(|_| RecordError::HeaderKeyNotUtf8(offset))?;
                let value = record.nullable_bytes()?;
                columns.push_header(key, value);
            }
        }
        columns.end_headers();
    }
    if cursor.pos != records.len() {
        return Err(RecordError::TrailingBytes {
            extra: records.len() - cursor.pos,
            records: header.record_count,
        });
    }
    Ok(())
}

/// The offset of the first record whose timestamp is at or after `from_timestamp`.
pub(crate) fn first_offset_at_or_after(
    header: &BatchHeader,
    records: &[u8],
    offsets: &Range<i64>,
    from_timestamp: i64,
) -> Result<Option<i64>, RecordError> {
    let mut columns = Columns::new("", 0, false);
    decode_records(header, records, offsets, &mut columns)?;
    let batch = columns.finish();
    let offsets = batch.column(4).as_primitive::<Int64Type>();
    let timestamps = batch.column(5).as_primitive::<TimestampMillisecondType>();
    Ok(timestamps
        .values()
        .iter()
        .position(|t| *t >= from_timestamp)
        .map(|i| offsets.value(i)))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records::Compression;

    use super::*;
    use crate::log::batch::tests::encoded_batch;
    use crate::log::batch::BATCH_HEADER_LEN;

    /// Found by the batch_validator fuzz target: a base offset near the largest offset.
    #[test]
    fn an_offset_past_the_largest_is_an_error_not_an_overflow() {
        let batch = encoded_batch(2, 4, Compression::None);
        let header = BatchHeader {
            base_offset: i64::MAX,
            ..BatchHeader::parse(&batch).unwrap()
        };
        let mut columns = Columns::new("t", 0, false);
        let records = &batch[BATCH_HEADER_LEN..];
        let error = decode_records(&header, records, &(0..i64::MAX), &mut columns).unwrap_err();
        assert!(matches!(error, RecordError::OffsetOverflow(_)), "{error}");
    }
}
