//! ApiVersions v0–3. A version newer than we know is answered at v0 with UNSUPPORTED_VERSION
//! and the list, so the client can pick one (KIP-511).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use crate::protocol::header::{encode_response, Request};
use crate::protocol::versions::{supported, SUPPORTED};

pub fn handle(request: &Request) -> Result<bytes::Bytes, String> {
    let api_keys = SUPPORTED
        .iter()
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.key as i16)
                .with_min_version(api.min)
                .with_max_version(api.max)
        })
        .collect();
    let mut response = ApiVersionsResponse::default().with_api_keys(api_keys);
    let range = supported(request.api_key).expect("ApiVersions is always supported");
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
