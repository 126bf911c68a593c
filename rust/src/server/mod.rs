//! The network side: accept loop, connections, dispatch to API handlers.

pub mod connection;
pub mod dispatch;
pub mod handlers;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;

/// Accepts connections until `stop` turns true; each connection runs in its own task.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    let broker = broker.clone();
                    tokio::spawn(async move {
                        connection::run(broker, socket, peer).await;
                    });
                }
                Err(error) => {
                    // Usually running out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => break,
        }
    }
    tracing::info!("stopped accepting connections");
}
