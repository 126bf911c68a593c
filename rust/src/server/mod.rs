//! The network side: accept loop, connections, dispatch to API handlers.

mod admission;
pub(crate) mod apis;
pub(crate) mod budget;
pub(crate) mod connection;
pub(crate) mod dispatch;
mod fd_limit;
pub(crate) mod handlers;
pub(crate) mod log_limit;
mod low_water;
pub(crate) mod ops_endpoint;
pub(crate) mod order;
pub(crate) mod sasl;
pub(crate) mod throttle;
pub(crate) mod tls;
mod x500;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::broker::Broker;
use admission::{Admission, RefusalLog};
use connection::Entry;

/// A bound Kafka listener, and what its connections start with.
pub(crate) struct BoundListener {
    pub(crate) listener: TcpListener,
    pub(crate) entry: Entry,
}

/// How long a stopping server waits for its connections to send the responses they owe.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// At most one warning per this interval about connections refused past a cap.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Accepts connections on every listener until `stop` turns true; each connection runs in its
/// own task. Then
/// every connection stops reading and sends the responses it owes (produce acks arrive when
/// the broker's shutdown has flushed) before this returns: a client must not lose the answer
/// to a request whose records were stored, or it would send them again.
///
/// Connections past `max_connections` (lowered to what the open-file limit allows) or
/// `max_connections_per_ip` (all listeners together) are closed as soon as they are accepted.
///
/// `broker_budget` is the broker's request budget (`queued_max_request_bytes`), which every
/// connection's requests and responses are charged to.
pub(crate) async fn serve(
    broker: Arc<Broker>,
    listeners: Vec<BoundListener>,
    broker_budget: Arc<budget::ByteBudget>,
    mut stop: watch::Receiver<bool>,
) {
    let config = &broker.config;
    let soft_fd_limit = fd_limit::raise_open_file_limit().map(|(soft, _)| soft);
    // Descriptors other sockets may hold at once: the operations endpoint's connections and
    // those accepted and not yet admitted (the queue, and one waiting in each acceptor).
    let operations = config
        .metrics_addr
        .as_ref()
        .map_or(0, |_| config.metrics_max_connections);
    let kept_apart = operations + fd_limit::ACCEPT_QUEUE + listeners.len();
    let admission = Admission::new(
        fd_limit::connection_cap(config.max_connections, soft_fd_limit, kept_apart),
        config.max_connections_per_ip,
    );
    let mut refusals = RefusalLog::new(REFUSAL_LOG_INTERVAL);
    let (accepted_tx, mut accepted) = mpsc::channel::<(TcpStream, Entry)>(fd_limit::ACCEPT_QUEUE);
    let mut acceptors = JoinSet::new();
    for bound in listeners {
        acceptors.spawn(accept(bound, accepted_tx.clone()));
    }
    drop(accepted_tx);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some((socket, entry)) = accepted.recv() => {
                let Ok(peer) = socket.peer_addr() else { continue };
                let admitted = match admission.admit(peer.ip()) {
                    Ok(admitted) => admitted,
                    Err(refusal) => {
                        drop(socket);
                        refusals.refused(refusal, peer.ip());
                        continue;
                    }
                };
                let _ = socket.set_nodelay(true);
                let (broker, budget, stop) = (broker.clone(), broker_budget.clone(), stop.clone());
                connections.spawn(connection::start(broker, socket, entry, budget, stop, admitted));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    acceptors.abort_all();
    while acceptors.join_next().await.is_some() {}
    tracing::info!("stopped accepting connections");
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still owed responses after {} s; closing them",
            DRAIN_TIMEOUT.as_secs()
        );
        connections.abort_all();
    }
}

/// Hands every connection `bound` accepts to the server loop, until that loop is gone.
async fn accept(bound: BoundListener, server: mpsc::Sender<(TcpStream, Entry)>) {
    loop {
        match bound.listener.accept().await {
            Ok((socket, _)) => {
                if server.send((socket, bound.entry.clone())).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                // Usually running out of file descriptors: back off instead of spinning.
                tracing::warn!(listener = %bound.entry.listener, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
