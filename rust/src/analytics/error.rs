use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("object storage: {0}")]
    Storage(#[from] StoreError),
    /// The object's bytes are not a valid segment: nothing from it is returned.
    #[error("segment object {object} is corrupt at offset {offset}: {reason}")]
    Corrupt {
        object: String,
        offset: i64,
        reason: String,
    },
    /// What is committed could not be learned (etcd unreachable, a record unreadable).
    #[error("metadata: {0}")]
    Metadata(String),
    /// The log changed while it was read (a compaction moved committed runs into a segment and
    /// collected their objects) more often than a read starts again.
    #[error("partition {partition} of {topic} changed while it was read; read it again")]
    Moved { topic: String, partition: i32 },
}

impl ReadError {
    pub(crate) fn corrupt(object: &str, offset: i64, reason: &str) -> ReadError {
        ReadError::Corrupt {
            object: object.to_string(),
            offset,
            reason: reason.to_string(),
        }
    }
}
