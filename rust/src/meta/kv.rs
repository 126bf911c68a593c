//! The metadata store contract: an etcd-shaped key-value store with per-key modification
//! revisions, compare-and-swap transactions, prefix watches and a session whose ephemeral keys
//! vanish when the process dies. The embedded store (single node) and etcd (cluster) implement
//! it; everything typed lives above it in `catalog`.

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::sync::watch;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Store revision of the last write to this key (etcd's mod_revision).
    pub mod_revision: i64,
}

/// Keys under a prefix, as of one store revision (the point a watch continues from).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub kvs: Vec<KeyValue>,
    pub revision: i64,
}

/// A precondition of a transaction.
#[derive(Debug, Clone)]
pub enum Compare {
    /// The key was last written at this revision; 0 means the key must not exist.
    ModRevision(String, i64),
    /// The store's session is still this one (`KvStore::session`): ephemeral keys the
    /// transaction writes belong to it. Checked by the client side of the store together with
    /// the choice of lease, so a write meant for a session that ended fails instead of landing
    /// under the next one.
    Session(u64),
}

#[derive(Debug, Clone)]
pub enum Op {
    Put(String, Bytes),
    /// A key that lives only as long as this process's session (etcd: attached to its lease).
    PutEphemeral(String, Bytes),
    Delete(String),
    DeletePrefix(String),
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put(KeyValue),
    Delete { key: String, revision: i64 },
}

impl Change {
    pub fn key(&self) -> &str {
        match self {
            Change::Put(kv) => &kv.key,
            Change::Delete { key, .. } => key,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata store unavailable: {0}")]
    Unavailable(String),
    /// The store refused the request for good: it exceeds one of its configured limits (the
    /// message names the limit and what to change). Retrying the same request cannot help.
    #[error("metadata store limit reached: {0}")]
    Limit(String),
    #[error("metadata record {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
}

pub(crate) type ChangeStream = BoxStream<'static, Result<Vec<Change>, MetaError>>;

#[async_trait]
pub trait KvStore: Send + Sync {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError>;

    /// Every key starting with `prefix`, in key order, with the revision they reflect.
    async fn range(&self, prefix: &str) -> Result<Listing, MetaError>;

    /// Applies `ops` atomically if every compare holds. Returns the new store revision on
    /// success, `None` when a compare failed (nothing written).
    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError>;

    /// Changes under `prefix` with a revision above `after`, in revision order, one item per
    /// store revision. The stream ends or yields an error when it can no longer deliver every
    /// change (connection lost, history compacted); the caller lists again and re-watches.
    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError>;

    /// The current session's number. It increases whenever a session was lost and a new one
    /// began; every ephemeral key written under an older session is gone by then.
    fn session(&self) -> watch::Receiver<u64>;

    /// Ends the session now (graceful shutdown): its ephemeral keys disappear at once.
    async fn end_session(&self) -> Result<(), MetaError>;

    fn describe(&self) -> String;

    /// How many compares, and how many ops, one transaction may carry (etcd's default
    /// `--max-txn-ops`); batched writes split their work into transactions of this size.
    fn max_txn_ops(&self) -> usize {
        ETCD_MAX_TXN_OPS
    }
}

/// etcd's default limit of operations per transaction.
pub(crate) const ETCD_MAX_TXN_OPS: usize = 128;
