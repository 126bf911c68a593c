//! Kafka RecordBatch (magic 2) headers: validation of what producers send, and the
//! broker-side rewrites of base offset and partition leader epoch (and, rarely, max
//! timestamp).
//!
//! Layout (big-endian): base offset i64 @0 | batch length i32 @8 | partition leader epoch i32 @12 |
//! magic i8 @16 | crc u32 @17 (CRC-32C of attributes..end) | attributes i16 @21 |
//! last offset delta i32 @23 | base timestamp i64 @27 | max timestamp i64 @35 |
//! producer id i64 @43 | producer epoch i16 @51 | base sequence i32 @53 | record count i32 @57.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::ResponseError;

use super::checksum::crc32c;

/// Bytes before the batch-length field's coverage starts (base offset + length).
pub(crate) const LOG_OVERHEAD: usize = 12;
/// The fixed part of a v2 batch up to and including the record count.
pub const BATCH_HEADER_LEN: usize = 61;
/// Part of the header the broker rewrites: base offset, length, partition leader epoch.
/// None of it is covered by the batch CRC.
pub(crate) const REWRITTEN_PREFIX_LEN: usize = 16;
/// Where a batch's CRC-32C coverage starts (attributes onwards).
pub const CRC_START: usize = 21;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const MAX_TIMESTAMP_AT: usize = 35;
/// Attribute bit 3: the records' timestamps are the batch's max timestamp (LogAppendTime).
const LOG_APPEND_TIME: i16 = 0x08;
/// Attribute bit 4: written in a transaction.
pub(crate) const TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: a control batch (a transaction marker).
pub(crate) const CONTROL: i16 = 0x20;

/// The fields of a batch header the broker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// Whole batch size in bytes, including the 12 bytes of offset and length.
    pub size: usize,
    pub leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    /// -1 unless an idempotent producer wrote the batch.
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Reads the header at the start of `buf`; `None` if fewer than 61 bytes or a
    /// length field that cannot describe a batch.
    pub fn parse(buf: &[u8]) -> Option<BatchHeader> {
        if buf.len() < BATCH_HEADER_LEN {
            return None;
        }
        let length = i32_at(buf, 8);
        if length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
            return None;
        }
        Some(BatchHeader {
            base_offset: i64_at(buf, 0),
            size: LOG_OVERHEAD + length as usize,
            leader_epoch: i32_at(buf, 12),
            magic: buf[MAGIC_AT] as i8,
            crc: u32::from_be_bytes(buf[CRC_AT..CRC_START].try_into().unwrap()),
            attributes: i16::from_be_bytes(buf[21..23].try_into().unwrap()),
            last_offset_delta: i32_at(buf, 23),
            base_timestamp: i64_at(buf, 27),
            max_timestamp: i64_at(buf, MAX_TIMESTAMP_AT),
            producer_id: i64_at(buf, 43),
            producer_epoch: i16::from_be_bytes(buf[51..53].try_into().unwrap()),
            base_sequence: i32_at(buf, 53),
            record_count: i32_at(buf, 57),
        })
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }

    /// Records the batch holds, counted by offsets (what offset assignment consumes).
    pub fn offset_count(&self) -> i64 {
        self.last_offset_delta as i64 + 1
    }

    pub fn compression(&self) -> i16 {
        self.attributes & 0x07
    }

    pub(crate) fn log_append_time(&self) -> bool {
        self.attributes & LOG_APPEND_TIME != 0
    }

    /// The timestamp of a record with this timestamp delta (a varlong: it may exceed 32 bits).
    /// A LogAppendTime batch's records all read as its max timestamp.
    pub(crate) fn record_timestamp(&self, timestamp_delta: i64) -> i64 {
        if self.log_append_time() {
            self.max_timestamp
        } else {
            self.base_timestamp.wrapping_add(timestamp_delta)
        }
    }
}

/// One validated batch as a producer sent it (a zero-copy slice of the request).
#[derive(Debug, Clone)]
pub struct IncomingBatch {
    pub bytes: Bytes,
    pub header: BatchHeader,
}

impl IncomingBatch {
    /// Stores `max_timestamp` in the header, as Kafka's LogValidator does when a producer's
    /// is not its records' largest (librdkafka's, for one). The CRC-32C covers the field, so
    /// it is computed again: segment footers are combined from the CRC a batch carries. A
    /// copy of the batch, but a rare one.
    pub(crate) fn set_max_timestamp(&mut self, max_timestamp: i64) {
        let mut bytes = BytesMut::from(&self.bytes[..]);
        bytes[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = crc32c(&bytes[CRC_START..]);
        bytes[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
        self.bytes = bytes.freeze();
        self.header = BatchHeader {
            max_timestamp,
            crc,
            ..self.header
        };
    }
}

/// Splits a produce request's records field into batches and checks each one: magic 2,
/// a consistent length, offsets and record count, the CRC-32C, and the size limit.
pub(crate) fn validate_batches(
    records: &Bytes,
    max_batch_bytes: usize,
) -> Result<Vec<IncomingBatch>, ResponseError> {
    if records.is_empty() {
        return Err(ResponseError::CorruptMessage);
    }
    let mut batches = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        // Legacy messages (magic 0/1) keep the magic byte at the same place but are shorter
        // than a v2 header, so look at it before parsing the rest.
        if rest.len() > MAGIC_AT && rest[MAGIC_AT] != 2 {
            return Err(ResponseError::UnsupportedForMessageFormat);
        }
        let header = BatchHeader::parse(rest).ok_or(ResponseError::CorruptMessage)?;
        if header.size > rest.len() {
            return Err(ResponseError::CorruptMessage);
        }
        if header.size > max_batch_bytes {
            return Err(ResponseError::MessageTooLarge);
        }
        if header.last_offset_delta < 0
            || header.record_count <= 0
            || header.record_count as i64 != header.offset_count()
        {
            return Err(ResponseError::CorruptMessage);
        }
        if crc32c(&rest[CRC_START..header.size]) != header.crc {
            return Err(ResponseError::CorruptMessage);
        }
        batches.push(IncomingBatch {
            bytes: records.slice(pos..pos + header.size),
            header,
        });
        pos += header.size;
    }
    Ok(batches)
}

/// The 16-byte prefix a stored batch starts with: its final base offset, its length and the
/// leader epoch of the partition that wrote it. Kept apart from the body so the body stays a
/// zero-copy slice of the produce request.
pub(crate) fn rewritten_prefix(base_offset: i64, batch_size: usize, leader_epoch: i32) -> Bytes {
    let mut prefix = BytesMut::with_capacity(REWRITTEN_PREFIX_LEN);
    prefix.put_i64(base_offset);
    prefix.put_i32((batch_size - LOG_OVERHEAD) as i32);
    prefix.put_i32(leader_epoch);
    prefix.freeze()
}

fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().unwrap())
}

fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    /// A plain record (no producer id, no key, no headers) at `offset` with `timestamp`; tests
    /// change the fields they need with struct update syntax.
    pub(crate) fn record_at(offset: i64, timestamp: i64, value: Bytes) -> Record {
        Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: -1,
            timestamp,
            key: None,
            value: Some(value),
            headers: Default::default(),
        }
    }

    /// Encodes a real v2 batch with the codec crate (what a client would send).
    pub(crate) fn encoded_batch(count: usize, value_len: usize, compression: Compression) -> Bytes {
        let records: Vec<Record> = (0..count)
            .map(|i| Record {
                sequence: i as i32,
                key: Some(Bytes::from(format!("k{i}"))),
                ..record_at(
                    i as i64,
                    1_700_000_000_000 + i as i64,
                    Bytes::from(vec![b'v'; value_len]),
                )
            })
            .collect();
        encode_records(&records, compression)
    }

    /// `records` as one v2 batch, encoded by the codec crate.
    pub(crate) fn encode_records(records: &[Record], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
        buf.freeze()
    }

    /// Appends `value` as a zigzag varint (a varlong is encoded alike).
    pub(crate) fn zigzag_varint(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        while raw >= 0x80 {
            out.push(raw as u8 | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }

    /// A record as clients write it: key `k<n>`, the given value, one header. Built by hand,
    /// as the codec crate refuses timestamp deltas past 32 bits (Kafka's are varlongs).
    pub(crate) fn raw_record(offset_delta: i64, timestamp_delta: i64, value: &[u8]) -> Vec<u8> {
        let mut body = vec![0u8];
        zigzag_varint(&mut body, timestamp_delta);
        zigzag_varint(&mut body, offset_delta);
        let key = format!("k{offset_delta}");
        zigzag_varint(&mut body, key.len() as i64);
        body.extend_from_slice(key.as_bytes());
        zigzag_varint(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        zigzag_varint(&mut body, 1);
        zigzag_varint(&mut body, 1);
        body.push(b'h');
        zigzag_varint(&mut body, -1);
        framed(&body)
    }

    /// A record's `body` after its length.
    pub(crate) fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        zigzag_varint(&mut out, body.len() as i64);
        out.extend_from_slice(body);
        out
    }

    /// The header fields of a hand-built batch (`raw_batch`) that tests choose.
    pub(crate) struct RawHeader {
        pub attributes: i16,
        pub count: i32,
        pub base_timestamp: i64,
        pub max_timestamp: i64,
        pub producer_id: i64,
    }

    /// A v2 batch of `header` around `section` (already compressed if the attributes say so),
    /// with a valid CRC: only what the test chose can be wrong.
    pub(crate) fn raw_batch(header: &RawHeader, section: &[u8]) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_i64(0);
        buf.put_i32((BATCH_HEADER_LEN - LOG_OVERHEAD + section.len()) as i32);
        buf.put_i32(0);
        buf.put_i8(2);
        buf.put_u32(0);
        buf.put_i16(header.attributes);
        buf.put_i32(header.count - 1);
        buf.put_i64(header.base_timestamp);
        buf.put_i64(header.max_timestamp);
        buf.put_i64(header.producer_id);
        buf.put_i16(-1);
        buf.put_i32(-1);
        buf.put_i32(header.count);
        buf.extend_from_slice(section);
        let crc = crc32c(&buf[CRC_START..]);
        buf[CRC_AT..CRC_START].copy_from_slice(&crc.to_be_bytes());
        buf.freeze()
    }

    /// An uncompressed batch of one record per timestamp, its header as clients set it.
    pub(crate) fn stamped_batch(timestamps: &[i64]) -> Bytes {
        let base_timestamp = timestamps[0];
        let section: Vec<u8> = (0..)
            .zip(timestamps)
            .flat_map(|(i, t)| raw_record(i, t - base_timestamp, b"v"))
            .collect();
        let header = RawHeader {
            attributes: 0,
            count: timestamps.len() as i32,
            base_timestamp,
            max_timestamp: *timestamps.iter().max().unwrap(),
            producer_id: -1,
        };
        raw_batch(&header, &section)
    }

    #[test]
    fn accepts_client_batches_of_every_codec() {
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batch = encoded_batch(5, 10, codec);
            let parsed = validate_batches(&batch, 1 << 20).unwrap();
            assert_eq!(parsed.len(), 1);
            assert_eq!(parsed[0].header.record_count, 5);
            assert_eq!(parsed[0].header.offset_count(), 5);
        }
    }

    #[test]
    fn splits_concatenated_batches() {
        let mut two = BytesMut::new();
        two.extend_from_slice(&encoded_batch(3, 4, Compression::None));
        two.extend_from_slice(&encoded_batch(2, 4, Compression::Gzip));
        let parsed = validate_batches(&two.freeze(), 1 << 20).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].header.record_count, 2);
    }

    #[test]
    fn rejects_a_flipped_bit_as_corrupt() {
        let mut batch = BytesMut::from(&encoded_batch(3, 10, Compression::None)[..]);
        let last = batch.len() - 1;
        batch[last] ^= 1;
        assert_eq!(
            validate_batches(&batch.freeze(), 1 << 20).unwrap_err(),
            ResponseError::CorruptMessage
        );
    }

    #[test]
    fn rejects_oversize_truncated_and_old_magic() {
        let batch = encoded_batch(3, 100, Compression::None);
        assert_eq!(
            validate_batches(&batch, 50).unwrap_err(),
            ResponseError::MessageTooLarge
        );
        let truncated = batch.slice(..batch.len() - 1);
        assert_eq!(
            validate_batches(&truncated, 1 << 20).unwrap_err(),
            ResponseError::CorruptMessage
        );
        // a magic-1 message: shorter than any v2 batch header
        let mut old = BytesMut::from(&batch[..34]);
        old[16] = 1;
        assert_eq!(
            validate_batches(&old.freeze(), 1 << 20).unwrap_err(),
            ResponseError::UnsupportedForMessageFormat
        );
        assert_eq!(
            validate_batches(&Bytes::new(), 1 << 20).unwrap_err(),
            ResponseError::CorruptMessage
        );
    }

    #[test]
    fn prefix_rewrite_keeps_the_crc_valid() {
        let batch = encoded_batch(4, 8, Compression::None);
        let header = BatchHeader::parse(&batch).unwrap();
        let mut stored = BytesMut::new();
        stored.extend_from_slice(&rewritten_prefix(1234, header.size, 7));
        stored.extend_from_slice(&batch[REWRITTEN_PREFIX_LEN..]);
        let parsed = validate_batches(&stored.freeze(), 1 << 20).unwrap();
        assert_eq!(parsed[0].header.base_offset, 1234);
        assert_eq!(parsed[0].header.leader_epoch, 7);
        assert_eq!(parsed[0].header.last_offset(), 1237);
    }
}
