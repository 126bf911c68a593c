//! Both ends of the bridge for the conversion tests: a request body as the control handler
//! decodes it from what a client sent, and a response as the client reads it back.

use std::ops::RangeInclusive;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::control::body::ControlBody;
use crate::protocol::header::encode_response;
use crate::protocol::header::testing::{read_response, request};
use crate::server::apis::supported;

/// The versions this broker advertises for `key`.
pub(crate) fn advertised(key: ApiKey) -> RangeInclusive<i16> {
    let range = supported(key).unwrap();
    range.min..=range.max
}

/// The body as the control handler decodes it from a request a client sent at `version`.
pub(crate) fn decoded(key: ApiKey, version: i16, body: &impl Encodable) -> ControlBody {
    ControlBody::decode(&request(key, version, body)).unwrap()
}

/// What a client reads after the response is encoded at `version`.
pub(crate) fn on_the_wire<T: Encodable + Decodable + HeaderVersion>(
    response: &T,
    version: i16,
) -> T {
    let (correlation_id, body) =
        read_response(encode_response(7, version, response).unwrap(), version);
    assert_eq!(correlation_id, 7);
    body
}
