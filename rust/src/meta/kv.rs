//! The metadata store contract: an etcd-shaped key-value store with per-key modification
//! revisions and compare-and-swap transactions. The embedded store (single node) and etcd
//! (cluster) implement it; everything typed lives above it in `catalog`.

use async_trait::async_trait;
use bytes::Bytes;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Store revision of the last write to this key (etcd's mod_revision).
    pub mod_revision: i64,
}

/// A precondition of a transaction.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key was last written at this revision; 0 means the key must not exist.
    ModRevision(String, i64),
}

#[derive(Debug, Clone)]
pub enum Op {
    Put(String, Bytes),
    Delete(String),
    DeletePrefix(String),
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    #[error("metadata record {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
}

#[async_trait]
pub trait KvStore: Send + Sync {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError>;
    /// Every key starting with `prefix`, in key order.
    async fn range(&self, prefix: &str) -> Result<Vec<KeyValue>, MetaError>;
    /// Applies `ops` atomically if every compare holds. Returns the new store revision on
    /// success, `None` when a compare failed (nothing written).
    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError>;
    fn describe(&self) -> String;
}
