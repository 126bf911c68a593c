//! DescribeCluster v0–1 (KIP-700, v1 KIP-919): the cluster id, the controller and the live
//! brokers, as Metadata names them. Admin clients (`describe_cluster`) ask it instead of
//! Metadata. This broker is a broker endpoint; a request for the controllers' endpoints gets
//! Kafka's MISMATCHED_ENDPOINT_TYPE, an unknown endpoint type UNSUPPORTED_ENDPOINT_TYPE.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::metadata::{live_brokers, OPERATIONS_UNKNOWN};
use crate::broker::Broker;
use crate::protocol::header::{encode_response, Request, WireError};

/// KIP-919's endpoint types (v0 requests carry none: the codec reads a broker's).
const BROKER_ENDPOINT: i8 = 1;
const CONTROLLER_ENDPOINT: i8 = 2;

/// Kafka's codes for them, newer than the codec's list of errors.
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

/// `listener`: the one the client came in on; every broker is listed with its endpoint there.
pub fn handle(
    broker: &Broker,
    request: &Request,
    listener: &str,
) -> Result<bytes::Bytes, WireError> {
    let body: DescribeClusterRequest = request.body()?;
    let response = DescribeClusterResponse::default()
        .with_endpoint_type(BROKER_ENDPOINT)
        // As Metadata: no authorizer, so no operations to report, asked for or not.
        .with_cluster_authorized_operations(OPERATIONS_UNKNOWN);
    let response = match body.endpoint_type {
        BROKER_ENDPOINT => {
            let (brokers, controller) = live_brokers(broker, listener);
            let brokers = brokers.into_iter().map(|b| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.id))
                    .with_host(StrBytes::from_string(b.host))
                    .with_port(b.port)
            });
            response
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

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::ApiKey;

    use super::*;
    use crate::control::testing::advertised;
    use crate::protocol::header::testing::{read_response, request};

    fn ask_on(
        broker: &Broker,
        version: i16,
        endpoint_type: i8,
        listener: &str,
    ) -> DescribeClusterResponse {
        let body = DescribeClusterRequest::default()
            .with_include_cluster_authorized_operations(true)
            .with_endpoint_type(endpoint_type);
        let request = request(ApiKey::DescribeCluster, version, &body);
        read_response(handle(broker, &request, listener).unwrap(), version).1
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
            assert_eq!(read.cluster_authorized_operations, OPERATIONS_UNKNOWN);
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
}
