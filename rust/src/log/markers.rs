//! Transaction markers: the control batches a partition's owner writes when the transaction
//! coordinator has decided a transaction (Kafka's `EndTransactionMarker`). A marker is a batch
//! with the control and transactional attributes, the producer's id and the transaction's
//! epoch, and one record whose key is (version 0, type: 0 abort, 1 commit) and whose value is
//! (version 0, coordinator epoch). Clients skip control batches; read_committed consumers use
//! the abort markers to stop skipping an aborted transaction's batches.

use bytes::{BufMut, Bytes, BytesMut};

use super::batch::{
    BatchHeader, IncomingBatch, BATCH_HEADER_LEN, CONTROL, CRC_START, TRANSACTIONAL,
};
use super::checksum::crc32c;
const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// The record of a marker, after the batch header: length 16 (zig-zag 32), attributes 0,
/// timestamp and offset deltas 0, a 4-byte key (version, type), a 6-byte value (version,
/// coordinator epoch), no headers. Everything but the type byte is fixed.
const RECORD_LEN: usize = 17;
const TYPE_AT: usize = BATCH_HEADER_LEN + 8;

/// A marker of `producer_id`'s transaction at `epoch`: committed or aborted.
pub(crate) fn marker_batch(
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> IncomingBatch {
    let size = BATCH_HEADER_LEN + RECORD_LEN;
    let mut bytes = BytesMut::with_capacity(size);
    bytes.put_i64(0); // base offset: assigned on append
    bytes.put_i32((size - 12) as i32);
    bytes.put_i32(0); // partition leader epoch: set on append
    bytes.put_i8(2);
    bytes.put_u32(0); // CRC, below
    bytes.put_i16(CONTROL | TRANSACTIONAL);
    bytes.put_i32(0); // last offset delta
    bytes.put_i64(now_ms);
    bytes.put_i64(now_ms);
    bytes.put_i64(producer_id);
    bytes.put_i16(epoch);
    bytes.put_i32(-1); // base sequence: markers have none
    bytes.put_i32(1);
    bytes.put_slice(&[32, 0, 0, 0, 8, 0, 0, 0]);
    bytes.put_u8(if commit { COMMIT as u8 } else { ABORT as u8 });
    bytes.put_slice(&[12, 0, 0, 0, 0, 0, 0, 0]);
    let crc = crc32c(&bytes[CRC_START..]);
    bytes[17..CRC_START].copy_from_slice(&crc.to_be_bytes());
    let bytes = bytes.freeze();
    let header = BatchHeader::parse(&bytes).expect("a marker has a whole header");
    IncomingBatch { bytes, header }
}

/// Whether `header` is a control batch.
pub(crate) fn is_control(header: &BatchHeader) -> bool {
    header.attributes & CONTROL != 0
}

/// For a transaction marker (the whole batch in `batch`): Some(true) if it commits,
/// Some(false) if it aborts. None for any other batch, or a control batch of another kind.
pub(crate) fn marker_kind(header: &BatchHeader, batch: &Bytes) -> Option<bool> {
    if !is_control(header) || header.record_count != 1 || batch.len() <= TYPE_AT {
        return None;
    }
    // The key is (version i16, type i16): the type's low byte, as every marker has the same
    // single-byte fields before it.
    match (batch[TYPE_AT - 1], batch[TYPE_AT]) {
        (0, 0) => Some(false),
        (0, 1) => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::validate_batches;
    use crate::log::records::walk_batch;
    use crate::log::rejection::Rejection;

    #[test]
    fn a_marker_is_a_valid_control_batch_with_kafkas_record() {
        for commit in [true, false] {
            let marker = marker_batch(42, 3, commit, 1_700_000_000_000);
            let checked = validate_batches(&marker.bytes, 1 << 20).expect("valid framing and CRC");
            assert_eq!(checked.len(), 1);
            let header = checked[0].header;
            assert_eq!(header.producer_id, 42);
            assert_eq!(header.producer_epoch, 3);
            assert!(is_control(&header));
            assert_eq!(header.attributes & TRANSACTIONAL, TRANSACTIONAL);
            assert_eq!(marker_kind(&header, &marker.bytes), Some(commit));
            let mut keys = Vec::new();
            walk_batch(&header, &marker.bytes, 1 << 20, |record| {
                keys.push((
                    record.key.map(<[u8]>::to_vec),
                    record.value.map(<[u8]>::to_vec),
                ));
                Ok::<(), Rejection>(())
            })
            .expect("the record decodes");
            let kind = if commit { 1 } else { 0 };
            assert_eq!(
                keys,
                vec![(Some(vec![0, 0, 0, kind]), Some(vec![0, 0, 0, 0, 0, 0]))]
            );
        }
    }
}
