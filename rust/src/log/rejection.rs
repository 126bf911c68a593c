//! Why a produce's records are refused: the Kafka error and a message for the producer (the
//! validator's and the record walker's answer).

use std::fmt::Display;

use kafka_protocol::ResponseError;

use super::decompress::DecompressError;
use super::records::RecordError;

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

/// A record that does not decode is INVALID_RECORD (the same bytes would fail again), naming
/// the record when it is about one.
impl From<RecordError> for Rejection {
    fn from(error: RecordError) -> Rejection {
        invalid_record(error.record(), error)
    }
}

/// Compressed bytes that do not decompress (or expand past the limit) cannot be trusted:
/// CORRUPT_MESSAGE.
impl From<DecompressError> for Rejection {
    fn from(error: DecompressError) -> Rejection {
        corrupt(error)
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
