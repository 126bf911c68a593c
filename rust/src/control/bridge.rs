//! The control-plane bridge: requests the core decodes but Python answers (topic admin,
//! consumer groups and the operator APIs). Tokio tasks only touch channels here; the GIL is taken on the Python side
//! of the bridge, never by a data-plane worker.

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::body::ControlBody;
use crate::protocol::header::WireError;

/// The encoded response frame, or why the answer could not be encoded (the connection closes).
pub(crate) type ControlReply = Result<Bytes, WireError>;

pub struct ControlCall {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The client's IP address (the connection's peer), which group members report.
    pub client_host: String,
    /// The client's connection, unique in the process: Python serves the requests of one
    /// connection in order, one at a time (docs/requests.md).
    pub connection_id: u64,
    pub body: ControlBody,
    /// What the authorizer took out of `body`: added to Python's answer with its errors.
    pub(crate) screened: crate::control::screen::Screened,
    pub reply: oneshot::Sender<ControlReply>,
}

pub(crate) struct ControlBridge {
    calls: std::sync::Mutex<Option<mpsc::Sender<ControlCall>>>,
    receiver: Mutex<mpsc::Receiver<ControlCall>>,
}

/// Control requests queued for Python before the sender waits (backpressure, not loss).
const QUEUE_DEPTH: usize = 1024;

impl Default for ControlBridge {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
        ControlBridge {
            calls: std::sync::Mutex::new(Some(tx)),
            receiver: Mutex::new(rx),
        }
    }
}

impl ControlBridge {
    /// Hands a request to Python; `None` if the control plane is gone (shutting down) or
    /// dropped the request without answering.
    pub(crate) async fn call(
        &self,
        call: impl FnOnce(oneshot::Sender<ControlReply>) -> ControlCall,
    ) -> Option<ControlReply> {
        let sender = self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let (tx, rx) = oneshot::channel();
        sender.send(call(tx)).await.ok()?;
        rx.await.ok()
    }

    /// The next request for Python; `None` once the bridge is closed.
    pub(crate) async fn next(&self) -> Option<ControlCall> {
        self.receiver.lock().await.recv().await
    }

    pub(crate) fn close(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
