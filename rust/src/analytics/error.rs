use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("object storage: {0}")]
    Storage(#[from] StoreError),
    /// The object's bytes are not a valid segment: nothing from it is returned.
    #[error("segment object {object} is corrupt at offset {offset}: {reason}")]
    Corrupt {
        object: String,
        offset: i64,
        reason: String,
    },
}

impl ReadError {
    pub fn corrupt(object: &str, offset: i64, reason: &str) -> ReadError {
        ReadError::Corrupt {
            object: object.to_string(),
            offset,
            reason: reason.to_string(),
        }
    }
}
