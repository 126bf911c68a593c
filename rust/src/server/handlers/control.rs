//! Control-plane APIs (the rows of `control_apis!`): decoded here, decided in Python through the
//! control bridge, which hands back the response already encoded at the request's version.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;

use crate::broker::control::{ControlBody, ControlCall};
use crate::broker::Broker;
use crate::protocol::header::{Request, WireError};

pub async fn handle(
    broker: &Arc<Broker>,
    request: Request,
    peer: SocketAddr,
) -> Result<Bytes, WireError> {
    let body = ControlBody::decode(&request)?;
    broker
        .control
        .call(|reply| ControlCall {
            api_key: request.api_key as i16,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
            client_id: request.client_id.clone(),
            // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d; report a.b.c.d.
            client_host: peer.ip().to_canonical().to_string(),
            body,
            reply,
        })
        .await
        .ok_or(WireError::NoControlAnswer)?
}
