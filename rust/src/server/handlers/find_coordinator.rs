//! FindCoordinator v0–3. A single broker coordinates every group it is asked about.
//! librdkafka also reads this API's presence as "the broker supports LZ4" (its LZ4 feature
//! depends on FindCoordinator v0), so answering it is what lets lz4 producers compress.
//! Transactions are not supported: transactional coordinators are never available.

use std::sync::Arc;

use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request};

const GROUP: i8 = 0;

pub fn handle(broker: &Arc<Broker>, request: &Request) -> Result<bytes::Bytes, String> {
    let body: FindCoordinatorRequest = request.body()?;
    let response = if body.key_type == GROUP {
        FindCoordinatorResponse::default()
            .with_node_id(BrokerId(broker.config.broker_id))
            .with_host(StrBytes::from_string(broker.config.broker_host.clone()))
            .with_port(broker.config.broker_port)
    } else {
        let error = ResponseError::CoordinatorNotAvailable;
        let response = FindCoordinatorResponse::default()
            .with_error_code(error.code())
            .with_node_id(BrokerId(-1))
            .with_port(-1);
        if request.api_version >= 1 {
            response.with_error_message(Some(StrBytes::from_static_str(
                "transactions are not supported by KafScale",
            )))
        } else {
            response
        }
    };
    encode_response(request.correlation_id, request.api_version, &response)
}
