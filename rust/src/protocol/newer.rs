//! Versions newer than the codec (`kafka-protocol` 0.15) knows. Kafka numbered them for a new
//! meaning, not new fields: Produce v12, TxnOffsetCommit v5 and EndTxn v5 tell the broker that
//! the client runs transactions of the second protocol (KIP-890 part 2), and their requests
//! are the previous version's frames. Only EndTxn v5's response is new: it gives the producer
//! the epoch (or producer id) of its next transaction (`EndTxnResponseV5`).

use anyhow::bail;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Encodable, HeaderVersion};

/// The version whose frame a request (and, but for EndTxn v5, its response) of `version`
/// is.
pub(crate) fn frame_version(key: ApiKey, version: i16) -> i16 {
    match (key, version) {
        (ApiKey::Produce, 12) => 11,
        (ApiKey::TxnOffsetCommit, 5) => 4,
        (ApiKey::EndTxn, 5) => 4,
        _ => version,
    }
}

/// EndTxn v5's response (Kafka's EndTxnResponse.json): v4's fields, then the producer id and
/// epoch the producer's next transaction runs with, then the tagged fields (none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndTxnResponseV5 {
    pub error_code: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl Encodable for EndTxnResponseV5 {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        if version != 5 {
            bail!("EndTxnResponseV5 is encoded at v5 only, not v{version}");
        }
        buf.put_i32(0); // throttle_time_ms
        buf.put_i16(self.error_code);
        buf.put_i64(self.producer_id);
        buf.put_i16(self.producer_epoch);
        buf.put_u8(0); // the count of tagged fields (an unsigned varint): none
        Ok(())
    }

    fn compute_size(&self, _version: i16) -> anyhow::Result<usize> {
        Ok(4 + 2 + 8 + 2 + 1)
    }
}

impl HeaderVersion for EndTxnResponseV5 {
    fn header_version(_version: i16) -> i16 {
        1 // flexible, as from v3
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::EndTxnResponse;

    use super::*;

    #[test]
    fn end_txn_v5_is_v4_with_the_producer_before_the_tagged_fields() {
        let mut v4 = BytesMut::new();
        let old = EndTxnResponse::default().with_error_code(47);
        old.encode(&mut v4, 4).unwrap();
        let mut v5 = BytesMut::new();
        let new = EndTxnResponseV5 {
            error_code: 47,
            producer_id: 0x0102_0304_0506_0708,
            producer_epoch: 9,
        };
        new.encode(&mut v5, 5).unwrap();
        assert_eq!(v5.len(), new.compute_size(5).unwrap());
        let (fields, tags) = v4.split_at(v4.len() - 1);
        let mut expected = fields.to_vec();
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 9]);
        expected.extend_from_slice(tags);
        assert_eq!(&v5[..], &expected[..]);
        assert!(new.encode(&mut BytesMut::new(), 4).is_err());
        assert_eq!(
            EndTxnResponseV5::header_version(5),
            EndTxnResponse::header_version(4)
        );
    }

    #[test]
    fn only_the_numbered_newer_versions_map_to_older_frames() {
        assert_eq!(frame_version(ApiKey::Produce, 12), 11);
        assert_eq!(frame_version(ApiKey::Produce, 11), 11);
        assert_eq!(frame_version(ApiKey::TxnOffsetCommit, 5), 4);
        assert_eq!(frame_version(ApiKey::EndTxn, 5), 4);
        assert_eq!(frame_version(ApiKey::Fetch, 17), 17);
    }
}
