//! One client connection: frames are read and dispatched in arrival order (so appends to a
//! partition keep the client's order), handled concurrently, and answered in request order.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::dispatch::{dispatch, Reply};
use crate::broker::Broker;
use crate::protocol::frame::FrameReader;
use crate::protocol::header::Request;

/// Requests one connection may have in flight before reading pauses (backpressure). Produce
/// responses wait for the next group commit, and librdkafka pipelines one request per
/// partition per linger, so this must cover a whole flush interval of requests: at 128, a
/// client producing to 8 partitions with linger.ms=5 queued behind the cap without bound.
const MAX_IN_FLIGHT: usize = 4096;

/// Serves until the client disconnects or `stop` turns true; then stops reading, sends every
/// response still owed and closes.
pub async fn run(
    broker: Arc<Broker>,
    socket: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    let (read_half, mut write_half) = socket.into_split();
    let mut frames = FrameReader::new(read_half, broker.config.max_request_bytes);
    let (queue, mut replies) = mpsc::channel::<JoinHandle<Reply>>(MAX_IN_FLIGHT);

    let writer = tokio::spawn(async move {
        while let Some(handle) = replies.recv().await {
            match handle.await {
                Ok(Reply::Response(bytes)) => {
                    if write_half.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Ok(Reply::None) => {}
                Ok(Reply::Close(reason)) => {
                    tracing::debug!(%peer, reason, "closing connection");
                    return;
                }
                Err(panic) => {
                    tracing::error!(%peer, %panic, "request handler failed; closing connection");
                    return;
                }
            }
        }
    });

    while !*stop.borrow() {
        // A frame cut off by the stop was never dispatched: its client sees the connection
        // close without an answer, which is true - nothing of it was stored.
        let read = tokio::select! {
            read = frames.read_frame() => read,
            _ = stop.changed() => break,
        };
        let frame: Bytes = match read {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(error) => {
                tracing::info!(%peer, %error, "closing connection");
                break;
            }
        };
        let request = match Request::decode(frame) {
            Ok(request) => request,
            Err(error) => {
                tracing::info!(%peer, %error, "closing connection");
                break;
            }
        };
        let handle = dispatch(&broker, request, peer);
        if queue.send(handle).await.is_err() {
            break; // the writer stopped: the connection is being closed
        }
    }
    drop(queue);
    let _ = writer.await;
}
