//! Why a produce's records are refused: the Kafka error and a message for the producer (the
//! validator's and the record walker's answer).

use std::fmt::Display;

use kafka_protocol::ResponseError;

/// Why a partition's records were refused: the Kafka error, a message for the producer and,
/// when one record broke a rule, its index in its batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub error: ResponseError,
    pub message: String,
    pub record: Option<i32>,
}

impl From<ResponseError> for Rejection {
    fn from(error: ResponseError) -> Rejection {
        Rejection {
            error,
            message: error.to_string(),
            record: None,
        }
    }
}

pub(super) fn corrupt(message: impl Display) -> Rejection {
    Rejection {
        error: ResponseError::CorruptMessage,
        message: message.to_string(),
        record: None,
    }
}

pub(super) fn invalid_record(record: Option<i32>, message: impl Display) -> Rejection {
    Rejection {
        error: ResponseError::InvalidRecord,
        message: message.to_string(),
        record,
    }
}
