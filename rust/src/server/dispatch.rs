//! Routes a request to its API's handler (`apis`), in its own task, once its turn in its connection's order
//! has come (order.rs). A Produce's turn has come before it is dispatched: it appends before
//! this returns, and only its wait for the flush runs in the task. Once a request is answered
//! its client's quotas are metered (`throttle`).

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

use super::apis::handler_of;
use super::budget::Charge;
use super::handlers::{ConnectionContext, Reply, RequestContext};
use super::order::Turn;
use super::throttle::{self, Busy, Metered};
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::Request;

/// What a request's task hands the connection's writer.
pub(crate) struct Answer {
    pub(crate) reply: Reply,
    /// The request's bytes and its response's, released once the response is written.
    pub(crate) charge: Charge,
    /// A Fetch's turn, passed to the connection's next Fetch once this response is written.
    pub(crate) fetch_turn: Option<OwnedSemaphorePermit>,
}

/// Each request runs in its own task, timed (from now, its wait for its turn included) for the
/// request-latency histogram. `charge` holds the request's bytes; the response's are added to
/// it as soon as it exists. The handler starts when `turn` comes, and the requests after it
/// wait until its answer exists; a Produce's turn must have come already (its records are
/// appended now).
pub(crate) fn dispatch(
    broker: &Arc<Broker>,
    request: Request,
    connection: &Arc<ConnectionContext>,
    access: &Arc<Access>,
    mut charge: Charge,
    mut turn: Turn,
) -> JoinHandle<Answer> {
    let started = Instant::now();
    let api = request.api_key;
    debug_assert!(
        api != ApiKey::Produce || turn.ready(),
        "a Produce appends now"
    );
    let fetch_turns = (api == ApiKey::Fetch).then(|| connection.fetch_turns.clone());
    let cx = RequestContext {
        broker: broker.clone(),
        access: access.clone(),
        connection: connection.clone(),
    };
    let metered = Metered::of(&request);
    let produce_throttle = metered.produce(&cx);
    let appending = Instant::now();
    let handler = handler_of(&request)(&cx, request);
    let appended = appending.elapsed();
    tokio::spawn(async move {
        let done = turn.start().await;
        let fetch_turn = match fetch_turns {
            // The semaphore is never closed.
            Some(turns) => turns.acquire_owned().await.ok(),
            None => None,
        };
        let (mut reply, busy) = Busy::new(handler).await;
        // The answer exists: the connection's next request may start.
        drop(done);
        let used = (&mut reply, busy + appended);
        throttle::meter(&cx, &metered, used, produce_throttle).await;
        if let Reply::Response(frame) = &reply {
            charge.add(frame.len());
        }
        cx.broker.metrics.observe_request(api, started);
        Answer {
            reply,
            charge,
            fetch_turn,
        }
    })
}
