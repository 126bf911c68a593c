//! The network side: accept loop, connections, dispatch to API handlers.

pub mod connection;
pub mod dispatch;
pub mod handlers;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::broker::Broker;

/// How long a stopping server waits for its connections to send the responses they owe.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections until `stop` turns true; each connection runs in its own task. Then
/// every connection stops reading and sends the responses it owes (produce acks arrive when
/// the broker's shutdown has flushed) before this returns: a client must not lose the answer
/// to a request whose records were stored, or it would send them again.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    let (broker, stop) = (broker.clone(), stop.clone());
                    connections.spawn(connection::run(broker, socket, peer, stop));
                }
                Err(error) => {
                    // Usually running out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    drop(listener);
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
