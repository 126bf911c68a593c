//! Routes a request to its API handler, in its own task, once its turn in its connection's order
//! has come (order.rs). A Produce's turn has come before it is dispatched: it appends before
//! this returns, and only its wait for the flush runs in the task.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;
use kafka_protocol::messages::ApiKey;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::budget::{Budgets, Charge};
use super::handlers::{self, Reply};
use super::order::Turn;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::control::bridge::ControlBody;
use crate::protocol::header::Request;
use crate::server::handlers::api_versions::is_supported;

/// What a request's task hands the connection's writer.
pub(crate) struct Answer {
    pub(crate) reply: Reply,
    /// The request's bytes and its response's, released once the response is written.
    pub(crate) charge: Charge,
    /// A Fetch's turn, passed to the connection's next Fetch once this response is written.
    pub(crate) fetch_turn: Option<OwnedSemaphorePermit>,
}

/// What every request of one connection shares.
pub(crate) struct ConnectionContext {
    /// The client's address, which the control plane reports for group members.
    pub(crate) peer: SocketAddr,
    /// Names the connection to the control plane, which serves its requests in order.
    pub(crate) id: u64,
    pub(crate) budgets: Arc<Budgets>,
    /// One permit: a connection's Fetch starts once the Fetch before it has been written, not
    /// only answered (its turn, order.rs). A client pipelining Fetches it does not read then
    /// holds one response, not one per request.
    pub(crate) fetch_turns: Arc<Semaphore>,
    /// The connection's produce requests waiting for their flush.
    pub(crate) produce_window: Arc<handlers::produce::ProduceWindow>,
    /// The listener the client came in on: Metadata gives it every broker's endpoint there.
    pub(crate) listener: Arc<str>,
}

/// Each request runs in its own task, timed (from now, its wait for its turn included) for the
/// request-latency histogram. `charge` holds the request's bytes; the response's are added to
/// it as soon as it exists. The handler starts when `turn` comes, and the requests after it
/// wait until its answer exists; a Produce's turn must have come already (its records are
/// appended now).
pub(crate) fn dispatch(
    broker: &Arc<Broker>,
    request: Request,
    connection: &ConnectionContext,
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
    let handler = handler(broker, request, connection, access.clone());
    let metrics = broker.metrics.clone();
    tokio::spawn(async move {
        let done = turn.start().await;
        let fetch_turn = match fetch_turns {
            // The semaphore is never closed.
            Some(turns) => turns.acquire_owned().await.ok(),
            None => None,
        };
        let reply = handler.await;
        // The answer exists: the connection's next request may start.
        drop(done);
        if let Reply::Response(frame) = &reply {
            charge.add(frame.len());
        }
        metrics.observe_request(api, started);
        Answer {
            reply,
            charge,
            fetch_turn,
        }
    })
}

fn handler(
    broker: &Arc<Broker>,
    request: Request,
    connection: &ConnectionContext,
    access: Arc<Access>,
) -> BoxFuture<'static, Reply> {
    let broker = broker.clone();
    let (peer, connection_id) = (connection.peer, connection.id);
    if request.api_key == ApiKey::ApiVersions {
        // Answered at every version, even unsupported ones (KIP-511).
        return async move { handlers::api_versions::handle(&request).into() }.boxed();
    }
    if !is_supported(request.api_key, request.api_version) {
        return async move { handlers::unsupported::handle(&request) }.boxed();
    }
    match request.api_key {
        // Appends happen now, in the connection's request order; only the wait is deferred.
        ApiKey::Produce => {
            let held = Charge::new(&connection.budgets);
            let produce_connection = (&connection.produce_window, held);
            handlers::produce::start(&broker, request, produce_connection, &access)
        }
        ApiKey::Fetch => {
            let room = Charge::new(&connection.budgets);
            async move {
                handlers::fetch::handle(&broker, request, room, &access)
                    .await
                    .into()
            }
            .boxed()
        }
        ApiKey::ListOffsets => async move {
            handlers::list_offsets::handle(&broker, request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::FindCoordinator => {
            let listener = connection.listener.clone();
            async move {
                handlers::find_coordinator::handle(&broker, &request, &listener, &access).into()
            }
            .boxed()
        }
        ApiKey::DeleteRecords => async move {
            handlers::delete_records::handle(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::DescribeLogDirs => async move {
            handlers::describe_log_dirs::handle(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::DescribeProducers => {
            async move { handlers::describe_producers::handle(&broker, &request, &access).into() }
                .boxed()
        }
        ApiKey::InitProducerId => async move {
            handlers::init_producer_id::handle(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::Metadata => {
            let listener = connection.listener.clone();
            async move {
                handlers::metadata::handle(&broker, request, &listener, &access)
                    .await
                    .into()
            }
            .boxed()
        }
        ApiKey::DescribeCluster => {
            let listener = connection.listener.clone();
            async move {
                handlers::describe_cluster::handle(&broker, &request, &listener, &access).into()
            }
            .boxed()
        }
        ApiKey::DescribeTopicPartitions => async move {
            handlers::describe_topic_partitions::handle(&broker, &request, &access).into()
        }
        .boxed(),
        ApiKey::OffsetForLeaderEpoch => async move {
            handlers::offset_for_leader_epoch::handle(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        // A SASL listener's connection answers these itself (`sasl::Authenticator`).
        ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => {
            let reply = super::sasl::outside_sasl(&request);
            async move { reply }.boxed()
        }
        ApiKey::DescribeUserScramCredentials => async move {
            handlers::scram_credentials::describe(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::AlterUserScramCredentials => async move {
            handlers::scram_credentials::alter(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::DescribeAcls => async move {
            handlers::acls::describe(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::CreateAcls => async move {
            handlers::acls::create(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        ApiKey::DeleteAcls => async move {
            handlers::acls::delete(&broker, &request, &access)
                .await
                .into()
        }
        .boxed(),
        key if ControlBody::serves(key) => async move {
            handlers::control::handle(&broker, request, (peer, connection_id), &access)
                .await
                .into()
        }
        .boxed(),
        _ => async move { handlers::unsupported::handle(&request) }.boxed(),
    }
}
