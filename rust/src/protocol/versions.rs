//! The APIs and versions this broker advertises in ApiVersions: only versions that work.

use kafka_protocol::messages::ApiKey;

pub struct SupportedApi {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> SupportedApi {
    SupportedApi { key, min, max }
}

pub const SUPPORTED: &[SupportedApi] = &[
    // From v0 as Kafka does: librdkafka enables gzip, snappy and lz4 only when the broker
    // lists Produce v0. Clients send v3+ (RecordBatch) when offered; a v0–2 request (legacy
    // message sets) is answered with UNSUPPORTED_FOR_MESSAGE_FORMAT per partition.
    api(ApiKey::Produce, 0, 9),
    api(ApiKey::Fetch, 4, 13),
    api(ApiKey::ListOffsets, 0, 4),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::OffsetCommit, 0, 8),
    // v8+ batches several groups in one request; clients fall back to one group per request.
    api(ApiKey::OffsetFetch, 0, 7),
    api(ApiKey::FindCoordinator, 0, 4),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::ApiVersions, 0, 3),
    api(ApiKey::CreateTopics, 0, 2),
    api(ApiKey::DeleteTopics, 0, 2),
];

/// The supported range of `key`, if this broker serves it at all.
pub fn supported(key: ApiKey) -> Option<&'static SupportedApi> {
    SUPPORTED.iter().find(|s| s.key == key)
}

pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported(key).is_some_and(|s| (s.min..=s.max).contains(&version))
}
