//! The records inside a v2 batch (after decompression), decoded straight into Arrow columns
//! by the log's record decoder (`log::records`), which checks them as the produce validator
//! does.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};

use super::columns::{Columns, TimestampType};
use crate::log::batch::BatchHeader;
use crate::log::markers::is_control;
use crate::log::records::{walk_records, Record, RecordError, Visitor};

/// Why a batch's records do not decode (the segment holding them is corrupt).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("the offset of record {0} is past the largest offset")]
    OffsetOverflow(i32),
}

/// Decodes the records of one batch whose offsets fall in `wanted` into `columns`.
/// `records` is the batch's records section, decompressed. Control batches hold transaction
/// markers, not data, so they yield no rows (as a consumer sees it).
pub fn decode_records(
    header: &BatchHeader,
    records: &[u8],
    wanted: &Range<i64>,
    columns: &mut Columns,
) -> Result<(), DecodeError> {
    if is_control(header) {
        return Ok(());
    }
    let timestamp_type = if header.log_append_time() {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    };
    let mut into = IntoColumns {
        header,
        wanted,
        timestamp_type,
        headers: columns.wants_headers(),
        columns,
    };
    walk_records(
        header.record_count,
        header.last_offset_delta,
        records,
        &mut into,
    )
}

/// Puts the wanted records of one batch into the columns.
struct IntoColumns<'c> {
    header: &'c BatchHeader,
    wanted: &'c Range<i64>,
    timestamp_type: TimestampType,
    /// Whether the columns hold headers.
    headers: bool,
    columns: &'c mut Columns,
}

impl IntoColumns<'_> {
    fn offset(&self, index: i32) -> Result<i64, DecodeError> {
        self.header
            .base_offset
            .checked_add(i64::from(index))
            .ok_or(DecodeError::OffsetOverflow(index))
    }
}

impl<'a> Visitor<'a> for IntoColumns<'_> {
    type Error = DecodeError;

    fn wants_headers(&mut self, offset_delta: i32) -> bool {
        self.headers
            && self
                .offset(offset_delta)
                .is_ok_and(|o| self.wanted.contains(&o))
    }

    /// Headers go into their own columns ahead of their record's row, which `end_headers`
    /// closes.
    fn header(&mut self, key: &'a str, value: Option<&'a [u8]>) {
        self.columns.push_header(key, value);
    }

    fn record(&mut self, record: Record<'a>) -> Result<(), DecodeError> {
        let offset = self.offset(record.offset_delta)?;
        if !self.wanted.contains(&offset) {
            return Ok(());
        }
        let timestamp = self.header.record_timestamp(record.timestamp_delta);
        let (key, value) = (record.key, record.value);
        self.columns
            .push_record(offset, timestamp, self.timestamp_type, key, value);
        self.columns.end_headers();
        Ok(())
    }
}

/// The offset of the first record whose timestamp is at or after `from_timestamp`.
pub(crate) fn first_offset_at_or_after(
    header: &BatchHeader,
    records: &[u8],
    offsets: &Range<i64>,
    from_timestamp: i64,
) -> Result<Option<i64>, DecodeError> {
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
        assert!(matches!(error, DecodeError::OffsetOverflow(_)), "{error}");
    }
}
