//! A failure that maps onto a Kafka error code, with a message for people.

use kafka_protocol::ResponseError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct ApiError {
    pub code: ResponseError,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(code: ResponseError, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }
}
