//! Request headers and response framing.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message};

/// A request whose header is decoded; the body is decoded by the handler for its API.
#[derive(Debug, Clone)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub body: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("unknown api key {0}")]
    UnknownApi(i16),
    #[error("undecodable request header: {0}")]
    Malformed(String),
}

impl Request {
    pub fn decode(mut frame: Bytes) -> Result<Request, HeaderError> {
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let api_key = ApiKey::try_from(key).map_err(|_| HeaderError::UnknownApi(key))?;
        let header_version = api_key.request_header_version(version);
        let header = RequestHeader::decode(&mut frame, header_version)
            .map_err(|e| HeaderError::Malformed(e.to_string()))?;
        Ok(Request {
            api_key,
            api_version: version,
            correlation_id: header.correlation_id,
            client_id: header.client_id.map(|c| c.to_string()),
            body: frame,
        })
    }

    /// The version of the codec's frame for this request (`newer`): its own, but for a
    /// version newer than the codec that keeps an older one's frame.
    pub(crate) fn frame_version(&self) -> i16 {
        super::newer::frame_version(self.api_key, self.api_version)
    }

    /// Decodes the body as `T` at the request's version; failures close the connection.
    pub fn body<T: Decodable + Message>(&self) -> Result<T, WireError> {
        let undecodable = |reason: String| WireError::Undecodable {
            api: self.api_key,
            version: self.api_version,
            reason,
        };
        let frame = self.frame_version();
        if frame < T::VERSIONS.min || frame > T::VERSIONS.max {
            return Err(undecodable("outside the codec's version range".into()));
        }
        let mut body = self.body.clone();
        T::decode(&mut body, frame).map_err(|e| undecodable(e.to_string()))
    }
}

/// Why a request gets no response at all: its connection is closed, with this as the reason
/// in the log (the Kafka protocol has no way to answer a request it cannot read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{api:?} v{version} request cannot be decoded: {reason}")]
    Undecodable {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("{api:?} v{version} is not served and has no error response to give")]
    Unsupported { api: ApiKey, version: i16 },
    #[error("the response cannot be encoded: {0}")]
    Unencodable(String),
    #[error("the control plane did not answer")]
    NoControlAnswer,
}

/// A response frame about to be encoded: size prefix, response header (at the version the
/// API uses), body.
pub(crate) struct ResponseEncoding<'a, T> {
    header: ResponseHeader,
    header_version: i16,
    version: i16,
    body: &'a T,
    /// The frame's length, size prefix included.
    pub(crate) len: usize,
}

impl<'a, T: Encodable + HeaderVersion> ResponseEncoding<'a, T> {
    pub(crate) fn new(correlation_id: i32, version: i16, body: &'a T) -> Result<Self, WireError> {
        let header_version = T::header_version(version);
        let header = ResponseHeader::default().with_correlation_id(correlation_id);
        let unencodable = |e: &dyn std::fmt::Display| WireError::Unencodable(e.to_string());
        let size = header
            .compute_size(header_version)
            .and_then(|h| body.compute_size(version).map(|b| h + b))
            .map_err(|e| unencodable(&e))?;
        if i32::try_from(size).is_err() {
            return Err(unencodable(&format!("a response of {size} bytes")));
        }
        Ok(ResponseEncoding {
            header,
            header_version,
            version,
            body,
            len: 4 + size,
        })
    }

    pub(crate) fn write<B: ByteBufMut>(&self, out: &mut B) -> Result<(), WireError> {
        out.put_i32((self.len - 4) as i32); // fits: checked in `new`
        self.header
            .encode(out, self.header_version)
            .and_then(|_| self.body.encode(out, self.version))
            .map_err(|e| WireError::Unencodable(e.to_string()))
    }
}

/// Encodes a response frame: size, response header (at the version the API uses), body.
pub(crate) fn encode_response<T: Encodable + HeaderVersion>(
    correlation_id: i32,
    version: i16,
    body: &T,
) -> Result<Bytes, WireError> {
    let encoding = ResponseEncoding::new(correlation_id, version, body)?;
    let mut out = BytesMut::with_capacity(encoding.len);
    encoding.write(&mut out)?;
    Ok(out.freeze())
}

/// Both ends of the wire for handler tests: requests as a client sends them, responses as a
/// client reads them.
#[cfg(test)]
pub(crate) mod testing {
    use bytes::{Buf, BytesMut};

    use crate::protocol::splice::ResponseFrame;

    use super::*;

    /// A request as the connection hands it to dispatch, its body encoded at `version`.
    pub(crate) fn request<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Request {
        let mut encoded = BytesMut::new();
        body.encode(&mut encoded, version).unwrap();
        Request {
            api_key,
            api_version: version,
            correlation_id: 7,
            client_id: Some("test".into()),
            body: encoded.freeze(),
        }
    }

    /// The correlation id and body of a response frame, decoded as a client would.
    pub(crate) fn read_response<T: Decodable + HeaderVersion>(
        frame: impl Into<ResponseFrame>,
        version: i16,
    ) -> (i32, T) {
        let mut frame = frame.into().to_bytes();
        let size = frame.get_i32();
        assert_eq!(
            size as usize,
            frame.len(),
            "the size prefix covers the frame"
        );
        let header = ResponseHeader::decode(&mut frame, T::header_version(version)).unwrap();
        let body = T::decode(&mut frame, version).unwrap();
        assert!(
            frame.is_empty(),
            "v{version} left {} bytes undecoded",
            frame.len()
        );
        (header.correlation_id, body)
    }
}
