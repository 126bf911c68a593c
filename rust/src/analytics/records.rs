//! The records inside a v2 batch (after decompression), decoded straight into Arrow columns.

use std::ops::Range;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};

use super::columns::{Columns, TimestampType};
use crate::log::batch::BatchHeader;
use crate::log::record_reader::{walk_decompressed, RecordVisitor};
use crate::log::validate::{invalid_record, Rejection};

const CONTROL_BATCH: i16 = 0x20;

/// Puts the records whose offsets fall in `wanted` into `columns`.
struct IntoColumns<'a> {
    header: &'a BatchHeader,
    wanted: &'a Range<i64>,
    timestamp_type: TimestampType,
    columns: &'a mut Columns,
}

impl RecordVisitor for IntoColumns<'_> {
    fn wants(&mut self, index: i32, timestamp: i64) -> Result<bool, Rejection> {
        let offset = self
            .header
            .base_offset
            .checked_add(i64::from(index))
            .ok_or_else(|| {
                invalid_record(
                    Some(index),
                    format!("the offset of record {index} is past the largest offset"),
                )
            })?;
        let wanted = self.wanted.contains(&offset);
        if wanted {
            self.columns
                .push_record(offset, timestamp, self.timestamp_type);
        }
        Ok(wanted)
    }

    fn key(&mut self, key: Option<&[u8]>) {
        self.columns.push_key(key);
    }

    fn value(&mut self, value: Option<&[u8]>) {
        self.columns.push_value(value);
    }

    fn header(&mut self, key: &str, value: Option<&[u8]>) {
        self.columns.push_header(key, value);
    }

    fn done(&mut self, index: i32, _: i64) -> Result<(), Rejection> {
        if self
            .wanted
            .contains(&(self.header.base_offset + i64::from(index)))
        {
            self.columns.end_headers();
        }
        Ok(())
    }
}

/// Decodes the records of one batch whose offsets fall in `wanted` into `columns`, with the
/// decoder the produce validator uses (`log::record_reader`). `records` is the batch's
/// records section, decompressed. Control batches hold transaction markers, not data, so
/// they yield no rows (as a consumer sees it).
pub fn decode_records(
    header: &BatchHeader,
    records: &[u8],
    wanted: &Range<i64>,
    columns: &mut Columns,
) -> Result<(), Rejection> {
    if header.attributes & CONTROL_BATCH != 0 {
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
        columns,
    };
    walk_decompressed(header, records, &mut into)
}

/// The offset of the first record whose timestamp is at or after `from_timestamp`.
pub(crate) fn first_offset_at_or_after(
    header: &BatchHeader,
    records: &[u8],
    offsets: &Range<i64>,
    from_timestamp: i64,
) -> Result<Option<i64>, Rejection> {
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
        assert!(
            error.message.contains("past the largest offset"),
            "{error:?}"
        );
    }
}
