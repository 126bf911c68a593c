//! The second transaction protocol's implicit add (KIP-890 part 2): its producers send no
//! AddPartitionsToTxn; a Produce v12+ with a transactional id has the broker add each
//! partition its transactional batches go to (a compare-and-swap on the coordinator's record,
//! as AddPartitionsToTxn does) before they are appended. The connection awaits this before it
//! dispatches the Produce, so its requests still append in the order they came. A partition
//! that could not be added is refused by the append's own check of the record
//! (NOT_ENOUGH_REPLICAS, which the producer retries; INVALID_PRODUCER_EPOCH once fenced).

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::ProduceRequest;

use crate::auth::acl::{Operation, ResourceType};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::log::batch::{BatchHeader, TRANSACTIONAL};
use crate::protocol::header::Request;
use crate::transactions::coordinator::Members;
use crate::transactions::TxnPartition;

/// The longest the adds of one request may hold its connection (the metadata store may be
/// unreachable): the append's check then answers for what was not added.
const ADD_WAIT: Duration = Duration::from_secs(2);

/// Adds the partitions of a Produce v12+ request's transactional batches to their
/// transaction; does nothing for other requests.
pub(crate) async fn add_partitions(broker: &Broker, request: &Request, access: &Access) {
    // Most Produce requests are not transactional: those are told by their first byte.
    if request.api_version < 12 || !names_transaction(&request.body) {
        return;
    }
    // Undecodable: dispatch closes the connection.
    let Ok(body) = request.body::<ProduceRequest>() else {
        return;
    };
    let Some(id) = body.transactional_id.as_ref().map(|id| id.0.to_string()) else {
        return;
    };
    if !access.allows(Operation::Write, ResourceType::TransactionalId, &id) {
        return;
    }
    let mut wanted: BTreeMap<(i64, i16), Vec<TxnPartition>> = BTreeMap::new();
    for topic in &body.topic_data {
        let name = topic.name.0.to_string();
        let Some(count) = broker.topic(&name).map(|t| t.partitions.len()) else {
            continue;
        };
        if !access.allows_topic(Operation::Write, &name) {
            continue;
        }
        for data in &topic.partition_data {
            let exists = usize::try_from(data.index).is_ok_and(|i| i < count);
            let first = data.records.as_deref().and_then(BatchHeader::parse);
            let Some(header) = first.filter(|_| exists) else {
                continue;
            };
            if header.attributes & TRANSACTIONAL != 0 && header.producer_id >= 0 {
                let producer = (header.producer_id, header.producer_epoch);
                let partition = TxnPartition(name.clone(), data.index);
                wanted.entry(producer).or_default().push(partition);
            }
        }
    }
    let adds = async {
        for (producer, partitions) in wanted {
            let members = Members::Partitions(&partitions);
            let added = broker.transactions.add_implicitly(&id, producer, members);
            if let Err(error) = added.await {
                tracing::debug!(transactional_id = %id, ?producer, %error,
                    "partitions of a transactional produce were not added to its transaction");
            }
        }
    };
    let _ = tokio::time::timeout(ADD_WAIT, adds).await;
}

/// Whether a flexible Produce body (v9+) names a transactional id: its first field, a compact
/// nullable string, starts with its length + 1 as an unsigned varint, which is 0 for null.
fn names_transaction(body: &[u8]) -> bool {
    body.first().is_some_and(|&first| first != 0)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::TransactionalId;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    #[test]
    fn the_first_byte_tells_whether_a_transactional_id_is_named() {
        let encoded = |id: Option<&'static str>| {
            let body = ProduceRequest::default()
                .with_transactional_id(id.map(|i| TransactionalId(StrBytes::from_static_str(i))));
            let mut out = BytesMut::new();
            body.encode(&mut out, 11).unwrap();
            out.freeze()
        };
        assert!(!names_transaction(&encoded(None)));
        assert!(names_transaction(&encoded(Some("t"))));
        assert!(names_transaction(&encoded(Some(""))), "empty is not null");
    }
}
