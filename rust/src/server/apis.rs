//! The one table of data-plane APIs, the requests answered in Rust: each row is an API's key,
//! the versions served and its handler. ApiVersions lists these rows and the control plane's
//! (`control::SERVED`, answered in Python); dispatch routes by them.
//!
//! Adding a data-plane API: a module under `handlers/` whose `handle` is a [`Handler`] (it
//! gets the request and its [`RequestContext`]; what must happen in the connection's request
//! order happens before it returns, the rest in the future it returns), its row here, its
//! tests (the handler's own, and a client's in tests/), and its line in
//! docs/compatibility.md.

use futures::FutureExt;
use kafka_protocol::messages::ApiKey;

use super::handlers::{
    self, acls, client_quotas, delete_records, describe_cluster, describe_log_dirs,
    describe_producers, describe_topic_partitions, describe_transactions, fetch, find_coordinator,
    init_producer_id, list_offsets, metadata, offset_for_leader_epoch, produce, scram_credentials,
    transactions, Handler, Handling, RequestContext,
};
use crate::control::body::ControlBody;
use crate::protocol::header::Request;
use crate::protocol::versions::SupportedApi;

/// A data-plane API: its served versions and its handler.
pub(crate) struct DataPlaneApi {
    pub(crate) versions: SupportedApi,
    pub(crate) handler: Handler,
}

const fn api(key: ApiKey, min: i16, max: i16, handler: Handler) -> DataPlaneApi {
    DataPlaneApi {
        versions: SupportedApi { key, min, max },
        handler,
    }
}

/// The APIs answered in Rust.
#[rustfmt::skip] // one row a line, as a table
pub(crate) const DATA_PLANE: &[DataPlaneApi] = &[
    // From v0 as Kafka does: librdkafka enables gzip, snappy and lz4 only when the broker
    // lists Produce v0. Clients send v3+ (RecordBatch) when offered; a v0–2 request (legacy
    // message sets) is answered with UNSUPPORTED_FOR_MESSAGE_FORMAT per partition.
    // v12 is v11 from a producer of the second transaction protocol (KIP-890 part 2: the
    // broker adds a transactional batch's partition to its transaction).
    api(ApiKey::Produce, 0, 12, produce::handle),
    // v14–17 change only what replicas send (replica state, directory id) and add
    // leader-discovery hints (KIP-951) a consumer may go without.
    api(ApiKey::Fetch, 4, 17, fetch::handle),
    api(ApiKey::ListOffsets, 0, 9, list_offsets::handle),
    api(ApiKey::Metadata, 0, 12, metadata::handle),
    // v5 only adds an error code of transactions (KIP-890); v6 adds share groups (KIP-932).
    api(ApiKey::FindCoordinator, 0, 5, find_coordinator::handle),
    api(ApiKey::ApiVersions, 0, 4, api_versions),
    api(ApiKey::OffsetForLeaderEpoch, 0, 4, offset_for_leader_epoch::handle),
    api(ApiKey::InitProducerId, 0, 5, init_producer_id::handle),
    // The transaction coordinator's: v4+ of AddPartitionsToTxn are brokers' (KIP-890), v4
    // of the others lets the answer be TRANSACTION_ABORTABLE, EndTxn v5 bumps the epoch.
    api(ApiKey::AddPartitionsToTxn, 0, 5, transactions::handle_add_partitions),
    api(ApiKey::AddOffsetsToTxn, 0, 4, transactions::handle_add_offsets),
    api(ApiKey::EndTxn, 0, 5, transactions::handle_end),
    api(ApiKey::DescribeTransactions, 0, 0, describe_transactions::handle_describe),
    // v1 adds a filter by how long a transaction has run (KIP-994).
    api(ApiKey::ListTransactions, 0, 1, describe_transactions::handle_list),
    api(ApiKey::DescribeProducers, 0, 0, describe_producers::handle),
    api(ApiKey::DeleteRecords, 0, 2, delete_records::handle),
    api(ApiKey::DescribeLogDirs, 0, 4, describe_log_dirs::handle),
    // Answered from the cluster view, as Metadata: what admin clients ask instead of Metadata
    // to describe the cluster and its topics.
    api(ApiKey::DescribeCluster, 0, 1, describe_cluster::handle),
    api(ApiKey::DescribeTopicPartitions, 0, 0, describe_topic_partitions::handle),
    // After v0 the SASL tokens travel bare, outside Kafka's framing (older clients).
    api(ApiKey::SaslHandshake, 0, 1, outside_sasl),
    api(ApiKey::SaslAuthenticate, 0, 2, outside_sasl),
    api(ApiKey::DescribeUserScramCredentials, 0, 0, scram_credentials::handle_describe),
    api(ApiKey::AlterUserScramCredentials, 0, 0, scram_credentials::handle_alter),
    // v1 adds prefixed patterns (KIP-290); v2–3 are the flexible encodings.
    api(ApiKey::DescribeAcls, 0, 3, acls::handle_describe),
    api(ApiKey::CreateAcls, 0, 3, acls::handle_create),
    api(ApiKey::DeleteAcls, 0, 3, acls::handle_delete),
    // v1 is the flexible encoding.
    api(ApiKey::DescribeClientQuotas, 0, 1, client_quotas::handle_describe),
    api(ApiKey::AlterClientQuotas, 0, 1, client_quotas::handle_alter),
];

/// ApiVersions, answered from both tables.
fn api_versions(_: &RequestContext, request: Request) -> Handling {
    async move { handlers::api_versions::answer(&request, served()).into() }.boxed()
}

/// A SaslHandshake or SaslAuthenticate on a connection that is not in a login: a SASL
/// listener's connection answers these itself (`sasl::Authenticator`).
fn outside_sasl(_: &RequestContext, request: Request) -> Handling {
    let reply = super::sasl::outside_sasl(&request);
    async move { reply }.boxed()
}

/// Every API served: the data plane's, then the control plane's.
pub(crate) fn served() -> impl Iterator<Item = &'static SupportedApi> {
    let data_plane = DATA_PLANE.iter().map(|api| &api.versions);
    data_plane.chain(crate::control::SERVED)
}

/// The served range of `key`, if this broker serves it at all.
#[cfg(test)]
pub(crate) fn supported(key: ApiKey) -> Option<&'static SupportedApi> {
    served().find(|s| s.key == key)
}

/// The served versions and the handler of `key`'s requests, if it is served: one look-up
/// per request.
pub(crate) fn route(key: ApiKey) -> Option<(&'static SupportedApi, Handler)> {
    match DATA_PLANE.iter().find(|api| api.versions.key == key) {
        Some(api) => Some((&api.versions, api.handler)),
        None if ControlBody::serves(key) => {
            let versions = crate::control::SERVED.iter().find(|s| s.key == key)?;
            Some((versions, handlers::control::handle as Handler))
        }
        None => None,
    }
}

/// The handler of `request`: its API's, if its version is served; ApiVersions answers every
/// version (KIP-511); anything else is answered as unsupported.
pub(crate) fn handler_of(request: &Request) -> Handler {
    let (key, version) = (request.api_key, request.api_version);
    match route(key) {
        Some((versions, handler))
            if key == ApiKey::ApiVersions || (versions.min..=versions.max).contains(&version) =>
        {
            handler
        }
        _ => unsupported,
    }
}

fn unsupported(_: &RequestContext, request: Request) -> Handling {
    async move { handlers::unsupported::handle(&request) }.boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_api_is_routed() {
        for api in served() {
            assert!(
                route(api.key).is_some(),
                "{:?} is advertised but not routed",
                api.key
            );
        }
    }

    #[test]
    fn every_routed_control_api_is_advertised() {
        for key in ApiKey::iter() {
            if ControlBody::serves(key) {
                assert!(
                    supported(key).is_some(),
                    "{key:?} is routed but not advertised"
                );
            }
        }
    }

    #[test]
    fn no_api_is_listed_twice() {
        let mut keys: Vec<i16> = served().map(|api| api.key as i16).collect();
        let count = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), count);
    }
}
