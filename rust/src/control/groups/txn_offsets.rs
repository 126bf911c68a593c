//! TxnOffsetCommit v0–5: offsets a transactional producer commits for a consumer group
//! (`sendOffsetsToTransaction`), sent to the group's coordinator. v4 lets the answer be
//! TRANSACTION_ABORTABLE (never given here); v5 comes from a producer of the second
//! transaction protocol (KIP-890 part 2), which sends no AddOffsetsToTxn: the group's
//! coordinator adds the group to the transaction itself. The request reaches Python
//! with the offsets in OffsetCommit's shapes (no commit timestamp: -1), and is answered as an
//! OffsetCommit is, per partition.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest as WireTxnCommit, TxnOffsetCommitResponse};
use pyo3::prelude::*;

use super::answers::OffsetCommitResponse;
use super::requests::{OffsetCommitPartition, OffsetCommitTopic};
use crate::control::text::{read as text, read_opt as optional};
use crate::protocol::topic_name;

/// The codec fills what older versions lack as Kafka reads it: generation -1, no member (< v3).
#[pyclass(frozen, get_all, module = "kafscale._core")]
#[derive(Debug, Clone)]
pub(crate) struct TxnOffsetCommitRequest {
    transactional_id: String,
    group_id: String,
    producer_id: i64,
    producer_epoch: i16,
    generation_id: i32,
    member_id: String,
    group_instance_id: Option<String>,
    topics: Vec<OffsetCommitTopic>,
    /// v5: the group is to be added to the transaction first.
    adds_group: bool,
}

impl TxnOffsetCommitRequest {
    pub(crate) fn new(wire: &WireTxnCommit, version: i16) -> Self {
        TxnOffsetCommitRequest {
            adds_group: version >= 5,
            transactional_id: text(&wire.transactional_id),
            group_id: text(&wire.group_id),
            producer_id: wire.producer_id.0,
            producer_epoch: wire.producer_epoch,
            generation_id: wire.generation_id,
            member_id: text(&wire.member_id),
            group_instance_id: optional(&wire.group_instance_id),
            topics: wire
                .topics
                .iter()
                .map(|t| OffsetCommitTopic {
                    name: text(&t.name),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| OffsetCommitPartition {
                            partition_index: p.partition_index,
                            committed_offset: p.committed_offset,
                            committed_leader_epoch: p.committed_leader_epoch,
                            committed_metadata: optional(&p.committed_metadata),
                            commit_timestamp: -1,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Python's answer (an OffsetCommit answer) as TxnOffsetCommit's.
pub(crate) fn answer(answer: OffsetCommitResponse) -> TxnOffsetCommitResponse {
    let topics = answer.topics.into_iter().map(|t| {
        let partitions = t.partitions.into_iter().map(|p| {
            TxnOffsetCommitResponsePartition::default()
                .with_partition_index(p.partition_index)
                .with_error_code(p.error_code)
        });
        TxnOffsetCommitResponseTopic::default()
            .with_name(topic_name(&t.name))
            .with_partitions(partitions.collect())
    });
    TxnOffsetCommitResponse::default()
        .with_throttle_time_ms(answer.throttle_time_ms)
        .with_topics(topics.collect())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, ProducerId, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    #[test]
    fn the_request_keeps_every_field_and_offsets_have_no_commit_timestamp() {
        let wire = WireTxnCommit::default()
            .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
            .with_group_id(GroupId(StrBytes::from_static_str("g")))
            .with_producer_id(ProducerId(7))
            .with_producer_epoch(2)
            .with_generation_id(3)
            .with_member_id(StrBytes::from_static_str("m"))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(1)
                    .with_committed_offset(42)
                    .with_committed_leader_epoch(5)])]);
        let request = TxnOffsetCommitRequest::new(&wire, 3);
        assert_eq!(
            (request.transactional_id.as_str(), request.group_id.as_str()),
            ("tx", "g")
        );
        assert_eq!((request.producer_id, request.producer_epoch), (7, 2));
        assert_eq!(
            (request.generation_id, request.member_id.as_str()),
            (3, "m")
        );
        let p = &request.topics[0].partitions[0];
        assert_eq!(
            (
                p.partition_index,
                p.committed_offset,
                p.committed_leader_epoch
            ),
            (1, 42, 5)
        );
        assert_eq!(p.commit_timestamp, -1);
    }
}
