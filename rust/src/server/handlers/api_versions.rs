//! ApiVersions v0–4. A version newer than we know is answered at v0 with UNSUPPORTED_VERSION
//! and the list, so the client can pick one (KIP-511). Only what is served is listed, as
//! Kafka does: clients read an API's absence as "not supported".

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use crate::protocol::header::{encode_response, Request, WireError};
use crate::protocol::versions::SupportedApi;

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
            assert_eq!(listed(ApiKey::EndTxn), Some((0, 3)));
            assert_eq!(listed(ApiKey::TxnOffsetCommit), Some((0, 3)));
            assert_eq!(
                listed(ApiKey::WriteTxnMarkers),
                None,
                "brokers write their own"
            );
            assert_eq!(response.api_keys.len(), served().count());
        }
    }
}
