//! One module per API (the table of data-plane APIs is `server::apis`); the control-plane
//! APIs, which Python decides, share `control`. Each module's `handle` (or `handle_*` for a
//! module of several APIs) is what dispatch calls: `fn(&RequestContext, Request) -> Handling`.

pub(crate) mod acls;
pub(crate) mod api_versions;
pub(crate) mod client_quotas;
pub(crate) mod control;
pub(crate) mod delete_records;
pub(crate) mod describe_cluster;
pub(crate) mod describe_log_dirs;
pub(crate) mod describe_producers;
pub(crate) mod describe_topic_partitions;
pub(crate) mod describe_transactions;
pub(crate) mod fetch;
pub(crate) mod find_coordinator;
pub(crate) mod init_producer_id;
pub(crate) mod list_offsets;
pub(crate) mod metadata;
pub(crate) mod offset_for_leader_epoch;
pub(crate) mod produce;
pub(crate) mod scram_credentials;
pub(crate) mod transactions;
pub(crate) mod unsupported;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use kafka_protocol::ResponseError;
use tokio::sync::Semaphore;

use super::budget::Budgets;
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::log::partition::Partition;
use crate::protocol::header::{Request, WireError};
use crate::protocol::splice::ResponseFrame;

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
    pub(crate) produce_window: Arc<produce::ProduceWindow>,
    /// The listener the client came in on: Metadata gives it every broker's endpoint there.
    pub(crate) listener: Arc<str>,
    /// Until when no request is read: the client is throttled by a quota.
    pub(crate) muted_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl ConnectionContext {
    /// Reads no request for `throttle` from now (or longer, if already muted longer).
    pub(crate) fn mute_for(&self, throttle: std::time::Duration) {
        let until = tokio::time::Instant::now() + throttle;
        let mut muted = self.muted_until.lock().unwrap_or_else(|p| p.into_inner());
        *muted = Some(muted.map_or(until, |m| m.max(until)));
    }

    /// When reading may go on, if the connection is muted now.
    pub(crate) fn muted(&self) -> Option<tokio::time::Instant> {
        let muted = *self.muted_until.lock().unwrap_or_else(|p| p.into_inner());
        muted.filter(|until| *until > tokio::time::Instant::now())
    }
}

/// What a handler gets besides its request: the broker, what the connection's principal may
/// do, and what the connection's requests share.
#[derive(Clone)]
pub(crate) struct RequestContext {
    pub(crate) broker: Arc<Broker>,
    pub(crate) access: Arc<Access>,
    pub(crate) connection: Arc<ConnectionContext>,
}

/// A request being handled: the answer, once its turn has come and it is worked out. A
/// handler does at once only what must happen in the connection's request order (a Produce
/// appends); the rest waits in the future it returns.
pub(crate) type Handling = BoxFuture<'static, Reply>;

/// Every handler's shape: what dispatch calls for a request of its API.
pub(crate) type Handler = fn(&RequestContext, Request) -> Handling;

/// What goes back on the wire for one request.
pub(crate) enum Reply {
    Response(ResponseFrame),
    /// acks=0 produce: no response at all.
    None,
    /// Undecodable or unanswerable: close the connection.
    Close(WireError),
    /// This response, then close the connection (a failed authentication).
    Final(Bytes),
}

impl<T: Into<ResponseFrame>> From<Result<T, WireError>> for Reply {
    fn from(result: Result<T, WireError>) -> Self {
        match result {
            Ok(frame) => Reply::Response(frame.into()),
            Err(reason) => Reply::Close(reason),
        }
    }
}

/// The isolation level (Fetch, ListOffsets) of a consumer that reads committed transactions
/// only; 0 reads everything below the high watermark.
pub(crate) const READ_COMMITTED: i8 = 1;

pub(crate) fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// The partition `index` of `topic`, or the error a client gets for it.
pub(crate) fn find_partition(
    broker: &Broker,
    topic: &str,
    index: i32,
) -> Result<Arc<Partition>, ResponseError> {
    broker
        .topic(topic)
        .and_then(|t| {
            usize::try_from(index)
                .ok()
                .and_then(|i| t.partitions.get(i).map(|s| s.current()))
        })
        .ok_or(ResponseError::UnknownTopicOrPartition)
}

/// Kafka's leader-epoch check for requests that carry the client's view of it (KIP-320). The
/// epoch is the newer of this broker's log and the cluster view: a broker handing a partition
/// off must fence clients that already know the next owner's epoch.
pub(crate) fn check_leader_epoch(
    broker: &Broker,
    partition: &Partition,
    client_epoch: i32,
) -> Result<(), ResponseError> {
    let cluster = broker
        .cluster()
        .leader_epoch(&partition.topic, partition.id);
    let epoch = partition.leader_epoch().max(cluster);
    match client_epoch {
        e if e < 0 || e == epoch => Ok(()),
        e if e < epoch => Err(ResponseError::FencedLeaderEpoch),
        _ => Err(ResponseError::UnknownLeaderEpoch),
    }
}

/// The operations Kafka reports as a topic's authorized operations (`AclEntry.supportedOperations`).
const TOPIC_OPERATIONS: [Operation; 8] = [
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Delete,
    Operation::Alter,
    Operation::Describe,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
];

/// The operations Kafka reports as the cluster's authorized operations.
const CLUSTER_OPERATIONS: [Operation; 7] = [
    Operation::Create,
    Operation::Alter,
    Operation::Describe,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
];

/// Kafka's authorized-operations bit field (KIP-430): bit `code` set for every operation of
/// `operations` the connection may do. Without an authorizer every one is allowed, as in Kafka.
fn operations_field(operations: &[Operation], allowed: impl Fn(Operation) -> bool) -> i32 {
    operations
        .iter()
        .filter(|&&op| allowed(op))
        .fold(0, |field, op| field | 1 << op.code())
}

pub(crate) fn topic_operations(access: &Access, topic: &str) -> i32 {
    operations_field(&TOPIC_OPERATIONS, |op| access.allows_topic(op, topic))
}

pub(crate) fn cluster_operations(access: &Access) -> i32 {
    operations_field(&CLUSTER_OPERATIONS, |op| access.allows_cluster(op))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Connections for handler tests: one of a broker without an authorizer, and User:alice's
    //! under an authorizer with ACLs (super user User:admin, nothing open without an ACL); a
    //! broker holding a few topics.

    use std::collections::BTreeMap;
    use std::sync::Arc;

    use crate::auth::acl::tests::acl;
    use crate::auth::acl::{AclBinding, Operation, PatternType, Permission, ResourceType};
    use crate::auth::authorizer::{Access, Authorizer, AuthorizerSettings, ANONYMOUS};
    use crate::broker::tests::{broker, produce, TestBroker};

    /// A connection of a broker without an authorizer: everything is allowed.
    pub(crate) fn open() -> Arc<Access> {
        connection(
            Arc::new(Authorizer::new(AuthorizerSettings::default())),
            ANONYMOUS,
        )
    }

    /// User:alice's connection under an enabled authorizer holding `acls`.
    pub(crate) fn alice(acls: Vec<AclBinding>) -> Arc<Access> {
        connection(
            crate::auth::authorizer::tests::authorizer(acls),
            "User:alice",
        )
    }

    fn connection(authorizer: Arc<Authorizer>, principal: &str) -> Arc<Access> {
        Arc::new(Access::new(
            authorizer,
            principal.into(),
            "127.0.0.1".into(),
        ))
    }

    /// Allows User:alice `operation` on the resource (a literal name).
    pub(crate) fn allow(kind: ResourceType, name: &str, operation: Operation) -> AclBinding {
        alices(Permission::Allow, kind, name, operation)
    }

    /// Denies User:alice `operation` on the resource (a literal name).
    pub(crate) fn deny(kind: ResourceType, name: &str, operation: Operation) -> AclBinding {
        alices(Permission::Deny, kind, name, operation)
    }

    /// User:alice's ACL of `permission` for `operation` on the resource (a literal name).
    fn alices(
        permission: Permission,
        kind: ResourceType,
        name: &str,
        operation: Operation,
    ) -> AclBinding {
        let pattern = PatternType::Literal;
        acl(kind, name, pattern, "User:alice", operation, permission)
    }

    /// A broker of its own holding `topics`, `partitions` partitions each, with `records`
    /// records produced to partition 0 of each (none when 0).
    pub(crate) async fn broker_with(
        topics: &[&str],
        partitions: i32,
        records: usize,
    ) -> TestBroker {
        let t = broker(1 << 20).await;
        for &name in topics {
            let created = t.broker.create_topic(name, partitions, BTreeMap::new());
            created.await.unwrap();
            if records > 0 {
                produce(&t.broker, name, 0, records).await;
            }
        }
        t
    }
}
