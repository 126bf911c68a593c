//! CreateTopics and DeleteTopics: decoded here, decided by the Python admin handlers through
//! the control bridge, encoded here at the request's version.

use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, DeleteTopicsRequest};

use crate::broker::control::{ControlBody, ControlCall, ControlReply};
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request};

pub async fn handle(broker: &Arc<Broker>, request: Request) -> Result<bytes::Bytes, String> {
    let body = match request.api_key {
        ApiKey::CreateTopics => ControlBody::CreateTopics(request.body::<CreateTopicsRequest>()?),
        _ => ControlBody::DeleteTopics(request.body::<DeleteTopicsRequest>()?),
    };
    let reply = broker
        .control
        .call(|reply| ControlCall {
            api_key: request.api_key as i16,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
            client_id: request.client_id.clone(),
            body,
            reply,
        })
        .await
        .ok_or("the control plane did not answer")?;
    let (id, v) = (request.correlation_id, request.api_version);
    match reply {
        ControlReply::CreateTopics(response) => encode_response(id, v, &response),
        ControlReply::DeleteTopics(response) => encode_response(id, v, &response),
    }
}
