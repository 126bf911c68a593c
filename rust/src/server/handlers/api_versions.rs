//! ApiVersions v0–4. A version newer than we know is answered at v0 with UNSUPPORTED_VERSION
//! and the list, so the client can pick one (KIP-511). Only what is served is listed, as
//! Kafka does: clients read an API's absence as "not supported". From v3 the answer also
//! lists the cluster's features (KIP-584), which clients read to choose a protocol.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::versions::SupportedApi;

/// Every broker's features, finalized at the highest level each supports (a feature's level
/// is the same on every broker of a cluster: there is one build). `transaction.version` 2 is
/// the second transaction protocol (KIP-890 part 2: an epoch bump per transaction, partitions
/// added by the broker a transactional batch reaches); clients that find it use EndTxn v5.
const FEATURES: &[(&str, i16)] = &[("transaction.version", 2)];

/// The epoch of `FEATURES`: clients keep the finalized features of the highest epoch they
/// saw. Raised when `FEATURES` changes.
const FEATURES_EPOCH: i64 = 1;

/// v4+ lists the supported features; v3 does not, as Kafka (KAFKA-17011): clients before it
/// reject a supported range starting at 0. Both list the finalized ones.
fn with_features(response: ApiVersionsResponse, version: i16) -> ApiVersionsResponse {
    let name = |name: &'static str| StrBytes::from_static_str(name);
    let supported = FEATURES.iter().map(|&(feature, level)| {
        SupportedFeatureKey::default()
            .with_name(name(feature))
            .with_min_version(0)
            .with_max_version(level)
    });
    let finalized = FEATURES.iter().map(|&(feature, level)| {
        FinalizedFeatureKey::default()
            .with_name(name(feature))
            .with_min_version_level(level)
            .with_max_version_level(level)
    });
    let supported = if version >= 4 {
        supported.collect()
    } else {
        Vec::new()
    };
    response
        .with_supported_features(supported)
        .with_finalized_features_epoch(FEATURES_EPOCH)
        .with_finalized_features(finalized.collect())
}

/// The answer to `request`, listing `served` (every API of both tables).
pub(crate) fn answer(
    request: &Request,
    served: impl Iterator<Item = &'static SupportedApi>,
) -> Result<bytes::Bytes, WireError> {
    let served: Vec<_> = served.collect();
    let listed = |key: ApiKey, min, max| {
        ApiVersion::default()
            .with_api_key(key as i16)
            .with_min_version(min)
            .with_max_version(max)
    };
    let api_keys = served
        .iter()
        .map(|api| listed(api.key, api.min, api.max))
        .collect();
    let mut response = ApiVersionsResponse::default().with_api_keys(api_keys);
    let range = served
        .iter()
        .find(|api| api.key == request.api_key)
        .expect("ApiVersions is always served");
    let version = if (range.min..=range.max).contains(&request.api_version) {
        // A body we cannot decode closes the connection, as for every other API.
        request.body::<ApiVersionsRequest>()?;
        if request.api_version >= 3 {
            response = with_features(response, request.api_version);
        }
        request.api_version
    } else {
        response.error_code = ResponseError::UnsupportedVersion.code();
        0
    };
    encode_response(request.correlation_id, version, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::header::testing::{read_response, request};
    use crate::server::apis::served;

    #[test]
    fn lists_the_served_apis_with_their_versions_and_nothing_else() {
        for version in 0..=4 {
            let asked = request(ApiKey::ApiVersions, version, &ApiVersionsRequest::default());
            let (_, response): (_, ApiVersionsResponse) =
                read_response(answer(&asked, served()).unwrap(), version);
            assert_eq!(response.error_code, 0);
            let listed = |key: ApiKey| {
                let found = response.api_keys.iter().find(|a| a.api_key == key as i16);
                found.map(|a| (a.min_version, a.max_version))
            };
            assert_eq!(listed(ApiKey::DescribeConfigs), Some((0, 4)), "v{version}");
            assert_eq!(listed(ApiKey::OffsetForLeaderEpoch), Some((0, 4)));
            assert_eq!(listed(ApiKey::InitProducerId), Some((0, 5)));
            assert_eq!(listed(ApiKey::DescribeCluster), Some((0, 1)));
            assert_eq!(listed(ApiKey::AllocateProducerIds), None);
            assert_eq!(listed(ApiKey::EndTxn), Some((0, 5)));
            assert_eq!(listed(ApiKey::TxnOffsetCommit), Some((0, 5)));
            assert_eq!(listed(ApiKey::Produce), Some((0, 12)));
            let finalized = response.finalized_features.iter();
            let finalized: Vec<_> = finalized
                .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
                .collect();
            if version >= 3 {
                assert_eq!(finalized, [("transaction.version".to_string(), 2, 2)]);
                let supported = response.supported_features.first().map(|f| f.max_version);
                assert_eq!(supported, (version >= 4).then_some(2), "v{version}");
                assert!(response.finalized_features_epoch > 0);
            } else {
                assert!(finalized.is_empty(), "no features before v3");
            }
            assert_eq!(
                listed(ApiKey::WriteTxnMarkers),
                None,
                "brokers write their own"
            );
            assert_eq!(response.api_keys.len(), served().count());
        }
    }
}
