//! The APIs and versions this broker advertises in ApiVersions: only versions that work, and
//! the APIs it will not serve, listed as such.

use kafka_protocol::messages::ApiKey;

pub struct SupportedApi {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> SupportedApi {
    SupportedApi { key, min, max }
}

/// The data-plane APIs, answered in Rust; the control-plane ones are `control_apis::SERVED`.
pub const DATA_PLANE: &[SupportedApi] = &[
    // From v0 as Kafka does: librdkafka enables gzip, snappy and lz4 only when the broker
    // lists Produce v0. Clients send v3+ (RecordBatch) when offered; a v0–2 request (legacy
    // message sets) is answered with UNSUPPORTED_FOR_MESSAGE_FORMAT per partition.
    api(ApiKey::Produce, 0, 9),
    api(ApiKey::Fetch, 4, 13),
    api(ApiKey::ListOffsets, 0, 4),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::FindCoordinator, 0, 4),
    api(ApiKey::ApiVersions, 0, 3),
    api(ApiKey::OffsetForLeaderEpoch, 0, 4),
];

/// APIs this broker will not serve (replication and controller internals, transactions,
/// quotas, KRaft): ApiVersions lists them with MinVersion = MaxVersion = -1, so tools see them
/// as known and refused. A request for one is answered UNSUPPORTED_VERSION like any other
/// version that is not served.
pub const REFUSED: &[ApiKey] = &[
    ApiKey::LeaderAndIsr,
    ApiKey::StopReplica,
    ApiKey::UpdateMetadata,
    ApiKey::ControlledShutdown,
    ApiKey::DeleteRecords,
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::ListPartitionReassignments,
    ApiKey::OffsetDelete,
    ApiKey::DescribeClientQuotas,
    ApiKey::AlterClientQuotas,
    ApiKey::DescribeUserScramCredentials,
    ApiKey::AlterUserScramCredentials,
    ApiKey::Vote,
    ApiKey::BeginQuorumEpoch,
    ApiKey::EndQuorumEpoch,
    ApiKey::DescribeQuorum,
    ApiKey::AlterPartition,
    ApiKey::UpdateFeatures,
    ApiKey::DescribeTransactions,
    ApiKey::ListTransactions,
    ApiKey::AllocateProducerIds,
];

/// Every API served, data plane first.
pub fn served() -> impl Iterator<Item = &'static SupportedApi> {
    DATA_PLANE.iter().chain(crate::control::SERVED)
}

/// The supported range of `key`, if this broker serves it at all.
pub fn supported(key: ApiKey) -> Option<&'static SupportedApi> {
    served().find(|s| s.key == key)
}

pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported(key).is_some_and(|s| (s.min..=s.max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_apis_are_not_served_at_any_version() {
        for &key in REFUSED {
            assert!(
                supported(key).is_none(),
                "{key:?} is both served and refused"
            );
            for version in -1..=20 {
                assert!(!is_supported(key, version));
            }
        }
        let mut keys: Vec<i16> = served().map(|api| api.key as i16).collect();
        keys.extend(REFUSED.iter().map(|&key| key as i16));
        let count = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), count, "an API is listed twice");
    }
}
