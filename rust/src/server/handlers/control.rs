//! Control-plane APIs (the rows of `control_apis!`): decoded here, repeats merged
//! (`control::repeats`), decided in Python through the control bridge, which hands back the
//! response already encoded at the request's version.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;

use super::{Handling, RequestContext};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::control::body::ControlBody;
use crate::control::bridge::ControlCall;
use crate::control::screen;
use crate::protocol::header::{Request, WireError};

/// `(peer, connection_id)`: the client's connection, which the control plane reports (the
/// peer's address) and serves in order (the id).
pub(crate) async fn answer(
    broker: &Arc<Broker>,
    request: Request,
    (peer, connection_id): (SocketAddr, u64),
    access: &Arc<Access>,
) -> Result<Bytes, WireError> {
    let mut body = ControlBody::decode(&request)?;
    crate::control::repeats::merge(&mut body);
    // Refusals are encoded here, at the version of the request's frame.
    let (correlation_id, version) = (request.correlation_id, request.frame_version());
    if let Some(answer) = screen::refused_answer(&body, access, correlation_id, version) {
        return answer;
    }
    let screened = screen::screen(&mut body, access, |id| {
        broker.topic_by_id(id).map(|t| t.record.name.to_string())
    });
    broker
        .control
        .call(|reply| ControlCall {
            api_key: request.api_key as i16,
            api_version: request.api_version,
            correlation_id: request.correlation_id,
            client_id: request.client_id.clone(),
            // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d; report a.b.c.d.
            client_host: peer.ip().to_canonical().to_string(),
            connection_id,
            body,
            screened,
            reply,
        })
        .await
        .ok_or(WireError::NoControlAnswer)?
}

/// Dispatch's entry for every control-plane API (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    let connection = (cx.connection.peer, cx.connection.id);
    async move {
        answer(&cx.broker, request, connection, &cx.access)
            .await
            .into()
    }
    .boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{ApiKey, ListGroupsRequest, ListGroupsResponse};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::control::group_admin::{self, ListedGroup};
    use crate::control::testing::advertised;
    use crate::protocol::header::encode_response;
    use crate::protocol::header::testing::{read_response, request};

    /// Python's side of the bridge played in Rust: it answers every ListGroups with one
    /// group, through the same conversion the extension uses.
    fn answer_list_groups(broker: Arc<Broker>) {
        tokio::spawn(async move {
            while let Some(call) = broker.control.next().await {
                let ControlBody::ListGroups(asked) = &call.body else {
                    panic!("not a ListGroups");
                };
                let state = asked.states_filter.first().map(|s| s.to_string());
                let answer = group_admin::ListGroupsResponse {
                    error_code: 0,
                    throttle_time_ms: 0,
                    groups: vec![ListedGroup {
                        group_id: "g".into(),
                        protocol_type: "consumer".into(),
                        group_state: state.unwrap_or_else(|| "Stable".into()),
                        group_type: "classic".into(),
                    }],
                };
                let wire = group_admin::list_groups(answer, call.api_version);
                let frame = encode_response(call.correlation_id, call.api_version, &wire);
                let _ = call.reply.send(frame);
            }
        });
    }

    /// What a client may do on a broker without an authorizer: everything.
    fn open_access(broker: &Broker) -> Arc<Access> {
        let principal = crate::auth::authorizer::ANONYMOUS.into();
        Arc::new(Access::new(
            broker.authorizer.clone(),
            principal,
            "10.0.0.7".into(),
        ))
    }

    #[tokio::test]
    async fn a_row_is_served_at_every_version_through_the_bridge_of_the_test_broker() {
        let t = crate::broker::tests::broker(1 << 20).await;
        answer_list_groups(t.broker.clone());
        let peer: SocketAddr = "[::ffff:10.0.0.7]:5000".parse().unwrap();
        for v in advertised(ApiKey::ListGroups) {
            let filter = if v >= 4 {
                vec![StrBytes::from_static_str("Empty")]
            } else {
                vec![]
            };
            let asked = request(
                ApiKey::ListGroups,
                v,
                &ListGroupsRequest::default().with_states_filter(filter),
            );
            let frame = answer(&t.broker, asked, (peer, 1), &open_access(&t.broker))
                .await
                .unwrap();
            let (_, read): (_, ListGroupsResponse) = read_response(frame, v);
            let listed = &read.groups[0];
            assert_eq!(listed.group_id.0.as_str(), "g", "v{v}");
            // The state is on the wire from v4 (and the filter reached Python), the type from v5.
            let state = if v >= 4 { "Empty" } else { "" };
            assert_eq!(listed.group_state.as_str(), state, "v{v}");
            let kind = if v >= 5 { "classic" } else { "" };
            assert_eq!(listed.group_type.as_str(), kind, "v{v}");
        }
    }
}
