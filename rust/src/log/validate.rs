//! What a produce may append, checked record by record as Kafka's LogValidator does: every
//! record of every batch is walked once by the log's record decoder (`log::records`), in place
//! for uncompressed batches and through a bounded decompressor, a window at a time, for
//! compressed ones (nothing is copied or materialised but a batch whose max timestamp is set).
//!
//! Errors follow Kafka (CorruptRecordException vs InvalidRecordException): CORRUPT_MESSAGE for
//! a batch whose bytes cannot be trusted (framing, CRC, codec, decompression); INVALID_RECORD
//! for records that are malformed or break a rule (varints, lengths, a record count that
//! differs from the records present, a control batch from a client, offsets out of order).
//! The difference matters to producers: CORRUPT_MESSAGE is retriable (a corrupted transfer
//! may succeed when sent again), INVALID_RECORD is not (the same bytes would fail again).
//! INVALID_TIMESTAMP for timestamps outside the topic's KIP-937 bounds. Rule violations of one
//! record name it (ProduceResponse v8+ `record_errors`). A batch max timestamp that is not its
//! records' largest is set to it, as Kafka does.

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::batch::{validate_batches, BatchHeader, IncomingBatch, CONTROL, TRANSACTIONAL};
use super::records::walk_batch;
use super::rejection::invalid_record;
pub(crate) use super::rejection::Rejection;

/// A record without a timestamp (Kafka's RecordBatch.NO_TIMESTAMP): not range-checked.
const NO_TIMESTAMP: i64 = -1;

/// The limits a produce to one partition is checked against.
#[derive(Debug, Clone, Copy)]
pub struct ProduceRules {
    /// The topic's `max.message.bytes`: largest batch as sent.
    pub max_batch_bytes: usize,
    /// Largest size a compressed batch's records may expand to.
    pub max_uncompressed_bytes: usize,
    /// The topic's `message.timestamp.before.max.ms` and `.after.max.ms` (KIP-937).
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// The topic is compacted: every record needs a key.
    pub keys_required: bool,
    /// The broker's clock at validation, in ms since the epoch.
    pub now_ms: i64,
}

/// Splits a partition's records into batches and checks each batch and every record in it.
/// Either every batch passes or the whole partition's records are refused.
pub fn validate_produce(
    records: &Bytes,
    rules: &ProduceRules,
) -> Result<Vec<IncomingBatch>, Rejection> {
    let mut batches = validate_batches(records, rules.max_batch_bytes)?;
    for batch in &mut batches {
        let max_timestamp = validate_records(&batch.header, &batch.bytes, rules)?;
        // Kafka stores the records' largest whatever the producer said (LogValidator's
        // setMaxTimestamp): librdkafka sends batches that say otherwise.
        if max_timestamp != batch.header.max_timestamp {
            batch.set_max_timestamp(max_timestamp);
        }
    }
    Ok(batches)
}

/// Checks the records of one batch whose header and CRC are already checked; the records'
/// largest timestamp.
fn validate_records(
    header: &BatchHeader,
    batch: &[u8],
    rules: &ProduceRules,
) -> Result<i64, Rejection> {
    if header.attributes & CONTROL != 0 {
        return Err(invalid_record(
            None,
            "clients may not write control batches (transaction markers); clear attribute \
             bit 5",
        ));
    }
    let (producer_id, base_sequence) = (header.producer_id, header.base_sequence);
    if header.attributes & TRANSACTIONAL != 0 && producer_id < 0 {
        return Err(invalid_record(
            None,
            "a transactional batch without a producer id; a transactional producer gets one \
             from InitProducerId",
        ));
    }
    if producer_id >= 0 && base_sequence < 0 {
        return Err(invalid_record(
            None,
            format!("producer id {producer_id} with invalid base sequence {base_sequence}"),
        ));
    }
    // As Kafka computes it: records without a timestamp leave it at NO_TIMESTAMP.
    let mut max_timestamp = NO_TIMESTAMP;
    walk_batch(header, batch, rules.max_uncompressed_bytes, |record| {
        let timestamp = header.record_timestamp(record.timestamp_delta);
        check_timestamp(record.index, timestamp, rules)?;
        if rules.keys_required && record.key.is_none() {
            // Kafka's words (LogValidator), INVALID_RECORD as there.
            return Err(invalid_record(
                Some(record.index),
                "Compacted topic cannot accept message without key in topic partition (its \
                 cleanup.policy includes compact; give every record a key)",
            ));
        }
        max_timestamp = max_timestamp.max(timestamp);
        Ok::<(), Rejection>(())
    })?;
    Ok(max_timestamp)
}

/// KIP-937: a CreateTime timestamp must lie within [now - before.max, now + after.max].
fn check_timestamp(index: i32, timestamp: i64, rules: &ProduceRules) -> Result<(), Rejection> {
    if timestamp == NO_TIMESTAMP {
        return Ok(());
    }
    let ahead = i128::from(timestamp) - i128::from(rules.now_ms);
    if ahead <= i128::from(rules.timestamp_after_max_ms)
        && -ahead <= i128::from(rules.timestamp_before_max_ms)
    {
        return Ok(());
    }
    Err(Rejection {
        error: ResponseError::InvalidTimestamp,
        message: format!(
            "timestamp {timestamp} of record {index} is out of range: it must lie within \
             [{}, {}] (the topic's message.timestamp.before.max.ms and \
             message.timestamp.after.max.ms around the broker's clock)",
            rules.now_ms.saturating_sub(rules.timestamp_before_max_ms),
            rules.now_ms.saturating_add(rules.timestamp_after_max_ms),
        ),
        record: Some(index),
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::records::Compression;
    use proptest::prelude::*;

    use super::*;
    use crate::log::batch::tests::{
        encoded_batch, framed, raw_batch, raw_record, zigzag_varint, RawHeader,
    };
    use crate::log::decompress::tests::{codec_id, compress, CODECS};
    use crate::log::decompress::Codec;

    const NOW: i64 = 1_700_000_000_000;

    fn rules() -> ProduceRules {
        ProduceRules {
            max_batch_bytes: 1 << 20,
            max_uncompressed_bytes: 1 << 20,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: 3_600_000,
            keys_required: false,
            now_ms: NOW,
        }
    }

    /// `n` well-formed records one ms apart, starting at NOW.
    fn records(n: i64) -> Vec<u8> {
        (0..n).flat_map(|i| raw_record(i, i, b"value")).collect()
    }

    fn spec(count: i32) -> RawHeader {
        RawHeader {
            attributes: 0,
            count,
            base_timestamp: NOW,
            max_timestamp: NOW + i64::from(count) - 1,
            producer_id: -1,
        }
    }

    fn check(batch: &Bytes) -> Result<(), Rejection> {
        validate_produce(batch, &rules()).map(drop)
    }

    fn error_of(batch: &Bytes) -> (ResponseError, Option<i32>) {
        let rejection = check(batch).unwrap_err();
        (rejection.error, rejection.record)
    }

    #[test]
    fn accepts_what_clients_send_with_every_codec() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            check(&encoded_batch(50, 100, compression)).unwrap();
        }
        for codec in CODECS {
            let section = compress(codec, &records(20));
            let attributes = codec_id(codec);
            check(&raw_batch(
                &RawHeader {
                    attributes,
                    ..spec(20)
                },
                &section,
            ))
            .unwrap();
        }
    }

    /// kafka-python and the Java client frame snappy the xerial way, in 32 KiB blocks.
    #[test]
    fn accepts_xerial_framed_snappy() {
        let plain = (0..400)
            .flat_map(|i| raw_record(i, 0, &[b'x'; 200]))
            .collect::<Vec<_>>();
        let mut section = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for block in plain.chunks(32 * 1024) {
            let compressed = compress(Codec::Snappy, block);
            section.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
            section.extend_from_slice(&compressed);
        }
        let spec = RawHeader {
            attributes: 2,
            max_timestamp: NOW,
            ..spec(400)
        };
        check(&raw_batch(&spec, &section)).unwrap();
    }

    #[test]
    fn a_count_that_differs_from_the_records_present_is_invalid() {
        let inflated = raw_batch(&spec(i32::MAX), &records(1));
        let rejection = check(&inflated).unwrap_err();
        assert_eq!(rejection.error, ResponseError::InvalidRecord);
        assert!(
            rejection.message.contains("holds 1"),
            "{}",
            rejection.message
        );
        let spec = RawHeader {
            max_timestamp: NOW,
            ..spec(1)
        };
        assert_eq!(
            error_of(&raw_batch(&spec, &records(3))),
            (ResponseError::InvalidRecord, None)
        );
        // the same for records that come out of a decompressor
        let spec = RawHeader {
            attributes: 4,
            ..spec
        };
        let section = compress(Codec::Zstd, &records(3));
        assert_eq!(
            error_of(&raw_batch(&spec, &section)),
            (ResponseError::InvalidRecord, None)
        );
    }

    #[test]
    fn undecodable_compressed_records_and_unknown_codecs_are_corrupt() {
        for attributes in 1..=7 {
            let spec = RawHeader {
                attributes,
                ..spec(1)
            };
            let garbage = raw_batch(&spec, b"\x01\x02\x03 certainly not compressed records");
            assert_eq!(error_of(&garbage).0, ResponseError::CorruptMessage);
        }
        // codecs 5 to 7 do not exist, whatever follows
        for attributes in 5..=7 {
            let spec = RawHeader {
                attributes,
                ..spec(3)
            };
            let rejection = check(&raw_batch(&spec, &records(3))).unwrap_err();
            assert_eq!(rejection.error, ResponseError::CorruptMessage);
            assert!(rejection.message.contains("codec"), "{}", rejection.message);
        }
    }

    #[test]
    fn a_batch_expanding_past_the_limit_is_corrupt() {
        let big = (0..2000)
            .flat_map(|i| raw_record(i, 0, &[0u8; 1000]))
            .collect::<Vec<_>>();
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let spec = RawHeader {
                attributes: codec_id(codec),
                max_timestamp: NOW,
                ..spec(2000)
            };
            let rejection = check(&raw_batch(&spec, &compress(codec, &big))).unwrap_err();
            assert_eq!(rejection.error, ResponseError::CorruptMessage, "{codec:?}");
            assert!(rejection.message.contains("limit"), "{}", rejection.message);
        }
    }

    #[test]
    fn malformed_varints_and_lengths_are_invalid() {
        let mut too_long_varlong = vec![0u8];
        too_long_varlong.extend_from_slice(&[0xff; 10]);
        too_long_varlong.push(0x01);
        let mut out_of_range_varint = vec![0u8, 0];
        out_of_range_varint.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
        let mut key_past_record = vec![0u8, 0, 0];
        zigzag_varint(&mut key_past_record, 1000);
        let mut negative_headers = vec![0u8, 0, 0, 1, 1];
        zigzag_varint(&mut negative_headers, -1);
        let mut leftover = raw_record(0, 0, b"v")[1..].to_vec();
        leftover.push(0);
        for body in [
            too_long_varlong,
            out_of_range_varint,
            key_past_record,
            negative_headers,
            leftover,
        ] {
            let spec = RawHeader {
                max_timestamp: NOW,
                ..spec(1)
            };
            let rejection = check(&raw_batch(&spec, &framed(&body))).unwrap_err();
            assert_eq!(rejection.error, ResponseError::InvalidRecord);
            assert!(
                rejection.message.contains("record 0"),
                "{}",
                rejection.message
            );
        }
        // a record length that is not a varint at all, and one that is negative
        for section in [vec![0xffu8; 6], vec![0x01]] {
            assert_eq!(
                error_of(&raw_batch(&spec(1), &section)).0,
                ResponseError::InvalidRecord
            );
        }
    }

    #[test]
    fn control_batches_from_clients_and_bad_sequences_are_invalid() {
        let control = RawHeader {
            attributes: 0x20,
            ..spec(1)
        };
        assert_eq!(
            error_of(&raw_batch(&control, &records(1))),
            (ResponseError::InvalidRecord, None)
        );
        let idempotent = RawHeader {
            producer_id: 7,
            ..spec(1)
        };
        assert_eq!(
            error_of(&raw_batch(&idempotent, &records(1))),
            (ResponseError::InvalidRecord, None)
        );
    }

    #[test]
    fn offsets_out_of_order_name_the_record() {
        let mut section = records(2);
        section.extend(raw_record(5, 2, b"value"));
        let rejection = check(&raw_batch(&spec(3), &section)).unwrap_err();
        assert_eq!(
            (rejection.error, rejection.record),
            (ResponseError::InvalidRecord, Some(2))
        );
    }

    #[test]
    fn a_header_key_that_is_not_utf8_is_invalid() {
        let mut body = vec![0u8, 0, 0, 1, 1, 2];
        body.extend_from_slice(&[2, 0xc3]);
        zigzag_varint(&mut body, -1);
        let spec = RawHeader {
            max_timestamp: NOW,
            ..spec(1)
        };
        assert_eq!(
            error_of(&raw_batch(&spec, &framed(&body))),
            (ResponseError::InvalidRecord, Some(0))
        );
    }

    #[test]
    fn timestamps_outside_the_bounds_name_the_record() {
        const YEAR_9999: i64 = 253_402_300_799_000;
        for far in [YEAR_9999, i64::MAX] {
            let mut section = records(1);
            section.extend(raw_record(1, far - NOW, b"value"));
            let spec = RawHeader {
                max_timestamp: far,
                ..spec(2)
            };
            let rejection = check(&raw_batch(&spec, &section)).unwrap_err();
            assert_eq!(
                (rejection.error, rejection.record),
                (ResponseError::InvalidTimestamp, Some(1))
            );
            assert!(rejection.message.contains("out of range"));
        }
        // an hour ahead is the default limit; older is unlimited unless the topic says so
        check(&raw_batch(&spec(1), &raw_record(0, 3_600_000, b"v"))).unwrap();
        let old = RawHeader {
            max_timestamp: NOW - 86_400_000,
            ..spec(1)
        };
        let old = raw_batch(&old, &raw_record(0, -86_400_000, b"v"));
        check(&old).unwrap();
        let strict = ProduceRules {
            timestamp_before_max_ms: 60_000,
            ..rules()
        };
        assert_eq!(
            validate_produce(&old, &strict).unwrap_err().error,
            ResponseError::InvalidTimestamp
        );
        // records without a timestamp are not range-checked
        let none = RawHeader {
            max_timestamp: -1,
            ..spec(1)
        };
        check(&raw_batch(&none, &raw_record(0, -1 - NOW, b"v"))).unwrap();
    }

    /// As Kafka's LogValidator does (setMaxTimestamp): the stored batch says its records'
    /// largest timestamp, whatever the producer said, under the CRC of its new bytes.
    #[test]
    fn a_max_timestamp_that_is_not_the_records_largest_is_set_to_it() {
        for codec in CODECS {
            for said in [0, -1, NOW + 1000] {
                let header = RawHeader {
                    attributes: codec_id(codec),
                    max_timestamp: said,
                    ..spec(3)
                };
                let sent = raw_batch(&header, &compress(codec, &records(3)));
                let stored = &validate_produce(&sent, &rules()).unwrap()[0];
                assert_eq!(stored.header.max_timestamp, NOW + 2, "{codec:?}, {said}");
                // read back as a batch: the CRC is checked
                let read_back = &validate_batches(&stored.bytes, 1 << 20).unwrap()[0];
                assert_eq!(read_back.header, stored.header);
                // nothing else changed: the CRC at 17, the max timestamp at 35
                assert_eq!(stored.bytes.len(), sent.len());
                for range in [0..17, 21..35, 43..sent.len()] {
                    assert_eq!(stored.bytes[range.clone()], sent[range]);
                }
            }
        }
        // a batch that says its largest stays the request's bytes
        let sent = raw_batch(&spec(3), &records(3));
        let stored = &validate_produce(&sent, &rules()).unwrap()[0];
        assert_eq!(stored.bytes.as_ptr(), sent.as_ptr());
    }

    #[test]
    fn a_log_append_time_batch_reads_as_its_max_timestamp_which_must_be_in_bounds() {
        let log_append = RawHeader {
            attributes: 0x08,
            max_timestamp: NOW,
            ..spec(2)
        };
        check(&raw_batch(&log_append, &records(2))).unwrap();
        let far = RawHeader {
            max_timestamp: i64::MAX,
            ..log_append
        };
        assert_eq!(
            error_of(&raw_batch(&far, &records(2))),
            (ResponseError::InvalidTimestamp, Some(0))
        );
    }

    #[test]
    fn one_bad_batch_refuses_the_whole_partition() {
        let mut two = BytesMut::new();
        two.extend_from_slice(&raw_batch(&spec(2), &records(2)));
        two.extend_from_slice(&raw_batch(&spec(i32::MAX), &records(1)));
        assert_eq!(error_of(&two.freeze()).0, ResponseError::InvalidRecord);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever keys, values and codec: what a client encodes is accepted.
        #[test]
        fn encoded_batches_are_accepted(
            values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..40),
            codec in 0usize..5,
        ) {
            let section: Vec<u8> = values
                .iter()
                .enumerate()
                .flat_map(|(i, v)| raw_record(i as i64, i as i64, v))
                .collect();
            let count = values.len() as i32;
            let spec = RawHeader { attributes: codec as i16, ..spec(count) };
            prop_assert!(check(&raw_batch(&spec, &compress(CODECS[codec], &section))).is_ok());
        }

        /// Any change to the records (CRC fixed up) is refused or accepted, never a panic;
        /// dropping or adding bytes is always refused.
        #[test]
        fn mutated_records_never_panic(
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in 1usize..8,
        ) {
            let section = records(5);
            let mut mutated = section.clone();
            mutated[at.index(section.len())] = byte;
            let _ = check(&raw_batch(&spec(5), &mutated));
            let shorter = &section[..section.len() - cut];
            prop_assert!(check(&raw_batch(&spec(5), shorter)).is_err());
            let mut longer = section.clone();
            longer.extend(std::iter::repeat_n(0u8, cut));
            prop_assert!(check(&raw_batch(&spec(5), &longer)).is_err());
        }
    }
}
