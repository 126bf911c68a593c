//! DescribeCluster v0–1 (KIP-700, v1 KIP-919): the cluster id, the controller and the live
//! brokers, as Metadata names them. Admin clients (`describe_cluster`) ask it instead of
//! Metadata. This broker is a broker endpoint; a request for the controllers' endpoints gets
//! Kafka's MISMATCHED_ENDPOINT_TYPE, an unknown endpoint type UNSUPPORTED_ENDPOINT_TYPE.
//! As in Kafka (`AuthHelper.computeDescribeClusterResponse`) any client may ask: the cluster's
//! authorized operations, when asked for, are those it may do with DESCRIBE on the cluster
//! and none (0) without.

use futures::FutureExt;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::cluster_operations;
use super::metadata::{live_brokers, OPERATIONS_UNKNOWN};
use super::{Handling, RequestContext};
use crate::auth::acl::Operation;
use crate::auth::authorizer::Access;
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

/// KIP-919's endpoint types (v0 requests carry none: the codec reads a broker's).
const BROKER_ENDPOINT: i8 = 1;
const CONTROLLER_ENDPOINT: i8 = 2;

/// Kafka's codes for them, newer than the codec's list of errors.
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

/// `listener`: the one the client came in on; every broker is listed with its endpoint there.
pub(crate) fn answer(
    broker: &Broker,
    request: &Request,
    listener: &str,
    access: &Access,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeClusterRequest = request.body()?;
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(BROKER_ENDPOINT)
        .with_cluster_authorized_operations(OPERATIONS_UNKNOWN);
    let response = match body.endpoint_type {
        BROKER_ENDPOINT => {
            let operations = match body.include_cluster_authorized_operations {
                false => OPERATIONS_UNKNOWN,
                true if access.allows_cluster(Operation::Describe) => cluster_operations(access),
                true => 0,
            };
            let (brokers, controller) = live_brokers(broker, listener);
            let brokers = brokers.into_iter().map(|b| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host))
                    .with_port(b.port)
                    .with_rack(b.rack.map(StrBytes::from_string))
            });
            response
                .with_cluster_authorized_operations(operations)
                .with_cluster_id(StrBytes::from_string(broker.cluster_id.clone()))
                .with_controller_id(BrokerId(controller))
                .with_brokers(brokers.collect())
        }
        CONTROLLER_ENDPOINT => response
            .with_error_code(MISMATCHED_ENDPOINT_TYPE)
            .with_error_message(Some(StrBytes::from_static_str(
                "this is a broker endpoint; KafScale has no controller endpoints: ask for \
                 brokers (endpoint type 1)",
            ))),
        other => response
            .with_error_code(UNSUPPORTED_ENDPOINT_TYPE)
            .with_error_message(Some(StrBytes::from_string(format!(
                "unsupported endpoint type {other}: ask for brokers (1)"
            )))),
    };
    encode_response(request.correlation_id, request.api_version, &response)
}

/// Dispatch's entry for DescribeCluster (a [`super::Handler`]).
pub(crate) fn handle(cx: &RequestContext, request: Request) -> Handling {
    let cx = cx.clone();
    async move { answer(&cx.broker, &request, &cx.connection.listener, &cx.access).into() }.boxed()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::auth::acl::ResourceType::Cluster;
    use crate::auth::acl::CLUSTER_NAME;
    use crate::control::testing::advertised;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::handlers::testing::{alice, allow, open};

    /// CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
    const ALL_CLUSTER_OPERATIONS: i32 =
        1 << 5 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12;

    fn ask_on(
        broker: &Broker,
        version: i16,
        endpoint_type: i8,
        listener: &str,
    ) -> DescribeClusterResponse {
        ask_as(broker, version, endpoint_type, listener, true, &open())
    }

    fn ask_as(
        broker: &Broker,
        version: i16,
        endpoint_type: i8,
        listener: &str,
        operations: bool,
        access: &Access,
    ) -> DescribeClusterResponse {
        let body = DescribeClusterRequest::default()
            .with_include_cluster_authorized_operations(operations)
            .with_endpoint_type(endpoint_type);
        let request = request(ApiKey::DescribeCluster, version, &body);
        read_response(answer(broker, &request, listener, access).unwrap(), version).1
    }

    fn ask(broker: &Broker, version: i16, endpoint_type: i8) -> DescribeClusterResponse {
        ask_on(broker, version, endpoint_type, "PLAINTEXT")
    }

    #[tokio::test]
    async fn describes_the_cluster_as_metadata_does_at_every_version() {
        let t = crate::broker::tests::broker(1 << 20).await;
        assert_eq!(advertised(ApiKey::DescribeCluster), 0..=1);
        for v in advertised(ApiKey::DescribeCluster) {
            let read = ask(&t.broker, v, BROKER_ENDPOINT);
            assert_eq!((read.error_code, read.error_message), (0, None), "v{v}");
            assert_eq!(read.cluster_id.as_str(), t.broker.cluster_id, "v{v}");
            assert_eq!(read.controller_id, BrokerId(1), "v{v}");
            let brokers: Vec<_> = read
                .brokers
                .iter()
                .map(|b| (b.broker_id.0, b.host.as_str(), b.port, b.rack.is_none()))
                .collect();
            assert_eq!(brokers, [(1, "127.0.0.1", 9092, true)], "v{v}");
            // Without an authorizer every operation is allowed (Kafka reports them all).
            assert_eq!(read.cluster_authorized_operations, ALL_CLUSTER_OPERATIONS);
            assert_eq!(read.endpoint_type, BROKER_ENDPOINT, "v{v}");
            // a broker is listed only on listeners it has
            let on_ssl = ask_on(&t.broker, v, BROKER_ENDPOINT, "SSL");
            assert!(on_ssl.brokers.is_empty(), "v{v}");
        }
    }

    #[tokio::test]
    async fn refuses_other_endpoint_types_as_kafka_does() {
        let t = crate::broker::tests::broker(1 << 20).await;
        for (asked, code) in [
            (CONTROLLER_ENDPOINT, MISMATCHED_ENDPOINT_TYPE),
            (0, UNSUPPORTED_ENDPOINT_TYPE),
            (7, UNSUPPORTED_ENDPOINT_TYPE),
        ] {
            let read = ask(&t.broker, 1, asked);
            assert_eq!(read.error_code, code, "endpoint type {asked}");
            assert!(read.error_message.is_some(), "endpoint type {asked}");
            assert!(read.brokers.is_empty(), "endpoint type {asked}");
        }
    }

    #[tokio::test]
    async fn the_cluster_operations_are_none_without_describe_on_the_cluster() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let producer = alice(vec![allow(
            Cluster,
            CLUSTER_NAME,
            Operation::IdempotentWrite,
        )]);
        let admin = alice(vec![
            allow(Cluster, CLUSTER_NAME, Operation::IdempotentWrite),
            allow(Cluster, CLUSTER_NAME, Operation::Describe),
        ]);
        for v in advertised(ApiKey::DescribeCluster) {
            // As in Kafka, anyone may describe the cluster; without DESCRIBE on it the
            // operations asked for are none.
            let read = ask_as(&t.broker, v, BROKER_ENDPOINT, "PLAINTEXT", true, &producer);
            assert_eq!((read.error_code, read.brokers.len()), (0, 1), "v{v}");
            assert_eq!(read.cluster_authorized_operations, 0, "v{v}");
            let read = ask_as(&t.broker, v, BROKER_ENDPOINT, "PLAINTEXT", true, &admin);
            assert_eq!(read.cluster_authorized_operations, 1 << 8 | 1 << 12, "v{v}");
            let read = ask_as(&t.broker, v, BROKER_ENDPOINT, "PLAINTEXT", false, &admin);
            assert_eq!(
                read.cluster_authorized_operations, OPERATIONS_UNKNOWN,
                "v{v}"
            );
        }
    }
}
