//! The control-plane bridge: requests the core decodes but Python answers (topic admin,
//! consumer groups and the operator APIs). Tokio tasks only touch channels here; the GIL is taken on the Python side
//! of the bridge, never by a data-plane worker.

use bytes::Bytes;
use kafka_protocol::messages::{
    AlterConfigsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, DescribeGroupsRequest, HeartbeatRequest,
    IncrementalAlterConfigsRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
};
use tokio::sync::{mpsc, oneshot, Mutex};

#[derive(Debug, Clone)]
pub enum ControlBody {
    CreateTopics(CreateTopicsRequest),
    DeleteTopics(DeleteTopicsRequest),
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    DescribeConfigs(DescribeConfigsRequest),
    AlterConfigs(AlterConfigsRequest),
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
    CreatePartitions(CreatePartitionsRequest),
}

/// The encoded response frame, or why the answer could not be encoded (the connection closes).
pub type ControlReply = Result<Bytes, String>;

pub struct ControlCall {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The client's IP address (the connection's peer), which group members report.
    pub client_host: String,
    pub body: ControlBody,
    pub reply: oneshot::Sender<ControlReply>,
}

pub struct ControlBridge {
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
    pub async fn call(
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
    pub async fn next(&self) -> Option<ControlCall> {
        self.receiver.lock().await.recv().await
    }

    pub fn close(&self) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
