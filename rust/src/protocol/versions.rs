//! The data-plane APIs' served versions. With the control-plane rows (`control::SERVED`) they
//! make what ApiVersions advertises (`server::handlers::api_versions`).

use kafka_protocol::messages::ApiKey;

pub(crate) struct SupportedApi {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> SupportedApi {
    SupportedApi { key, min, max }
}

/// The APIs answered in Rust; the control-plane ones (answered in Python) are `control::SERVED`.
pub(crate) const DATA_PLANE: &[SupportedApi] = &[
    // From v0 as Kafka does: librdkafka enables gzip, snappy and lz4 only when the broker
    // lists Produce v0. Clients send v3+ (RecordBatch) when offered; a v0–2 request (legacy
    // message sets) is answered with UNSUPPORTED_FOR_MESSAGE_FORMAT per partition.
    api(ApiKey::Produce, 0, 11),
    // v14–17 change only what replicas send (replica state, directory id) and add
    // leader-discovery hints (KIP-951) a consumer may go without.
    api(ApiKey::Fetch, 4, 17),
    api(ApiKey::ListOffsets, 0, 9),
    api(ApiKey::Metadata, 0, 12),
    // v5 only adds an error code of transactions (KIP-890); v6 adds share groups (KIP-932).
    api(ApiKey::FindCoordinator, 0, 5),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::OffsetForLeaderEpoch, 0, 4),
    // Idempotent producers only (no transactional id).
    api(ApiKey::InitProducerId, 0, 5),
    api(ApiKey::DescribeProducers, 0, 0),
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::DescribeLogDirs, 0, 4),
    // Answered from the cluster view, as Metadata: what admin clients ask instead of Metadata
    // to describe the cluster and its topics.
    api(ApiKey::DescribeCluster, 0, 1),
    api(ApiKey::DescribeTopicPartitions, 0, 0),
    // After v0 the SASL tokens travel bare, outside Kafka's framing (older clients).
    api(ApiKey::SaslHandshake, 0, 1),
    api(ApiKey::SaslAuthenticate, 0, 2),
    api(ApiKey::DescribeUserScramCredentials, 0, 0),
    api(ApiKey::AlterUserScramCredentials, 0, 0),
    // v1 adds prefixed patterns (KIP-290); v2–3 are the flexible encodings.
    api(ApiKey::DescribeAcls, 0, 3),
    api(ApiKey::CreateAcls, 0, 3),
    api(ApiKey::DeleteAcls, 0, 3),
];
