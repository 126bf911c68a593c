//! The single-node broker's committed metadata, published next to its data for the segment
//! readers (`kafscale.segment`, polars, Spark, `kafscale segments`).
//!
//! The embedded store's file is locked by the running broker, so a reader cannot open it; what
//! a reader needs of it – the topic records, the partition records (log start, segment end) and
//! the write-ahead manifests (which objects are committed, and their runs) – is therefore
//! written as one object per key under `{namespace}/!meta/` of the data's storage:
//!
//! ```text
//! {namespace}/!meta/topics/{topic}              the topic record, as stored
//! {namespace}/!meta/partitions/{topic}/{p}      the partition record
//! {namespace}/!meta/wal/{broker}/{writer}-{seq} the manifest of a committed write-ahead object
//! ```
//!
//! A transaction's changes are published before it returns – before a produce is acknowledged –
//! and transactions with their publishing run one at a time, so the published objects change in
//! the store's order (a manifest is never published after its deletion). When publishing fails
//! (a full disk, say), the next transaction first publishes everything again; so does opening
//! the store, which also covers a broker killed between a commit and its publishing (such a
//! commit was never acknowledged). Ephemeral keys (owners, writers) are not published.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::{watch, Mutex};

use super::kv::{ChangeStream, Compare, KeyValue, KvStore, Listing, MetaError, Op};

/// The folder below the namespace that holds the published keys (`!` starts no topic name).
pub(crate) const PUBLISHED_FOLDER: &str = "!meta";

/// The keys published, relative to the cluster's root.
const PUBLISHED_PREFIXES: [&str; 3] = ["topics/", "partitions/", "wal/"];

/// Changes of one transaction published at once, at most.
const PUBLISHED_AT_ONCE: usize = 16;

/// Why publishing failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublishError {
    /// The shelf refused a write, a delete or a listing (`doing`: e.g. "writing wal/0/ab").
    #[error("{doing}: {source}")]
    Shelf {
        doing: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// What to publish could not be read from the metadata store.
    #[error("reading what to publish: {0}")]
    Store(#[from] MetaError),
}

impl PublishError {
    pub(crate) fn shelf(
        doing: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> PublishError {
        PublishError::Shelf {
            doing: doing.into(),
            source: source.into(),
        }
    }
}

/// Where published keys are written: names relative to the cluster root (`wal/0/ab-…`).
#[async_trait]
pub(crate) trait Shelf: Send + Sync {
    async fn put(&self, name: &str, value: Bytes) -> Result<(), PublishError>;
    async fn delete(&self, name: &str) -> Result<(), PublishError>;
    /// Every name on the shelf.
    async fn names(&self) -> Result<Vec<String>, PublishError>;
}

pub(crate) struct PublishedKv<S> {
    inner: S,
    /// The cluster's root with its trailing slash (`/kafscale/{cluster}/`).
    root: String,
    shelf: Box<dyn Shelf>,
    /// Held by a transaction until its changes are published.
    one_at_a_time: Mutex<()>,
    /// Publishing failed: the next transaction publishes everything first.
    stale: AtomicBool,
}

impl<S: KvStore> PublishedKv<S> {
    /// Wraps `inner` and publishes what it holds now. A failure to publish is reported, not
    /// fatal: the broker serves clients, and readers see the data once publishing works again.
    pub(crate) async fn open(inner: S, root: &str, shelf: Box<dyn Shelf>) -> PublishedKv<S> {
        let kv = PublishedKv {
            inner,
            root: format!("{}/", root.trim_end_matches('/')),
            shelf,
            one_at_a_time: Mutex::new(()),
            stale: AtomicBool::new(true),
        };
        kv.publish_all().await;
        kv
    }

    /// The published name of `key`, if it is one that is published.
    fn name_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        let name = key.strip_prefix(&self.root)?;
        let published = PUBLISHED_PREFIXES.iter().any(|p| name.starts_with(p));
        (published && !name.ends_with("/owner")).then_some(name)
    }

    /// Publishes every published key and removes what is published but no longer stored.
    async fn publish_all(&self) {
        if let Err(e) = self.try_publish_all().await {
            tracing::warn!(error = %e, "publishing the metadata for segment readers failed; \
                readers do not see the newest data until it succeeds (retried with the next \
                change)");
            return;
        }
        self.stale.store(false, Ordering::SeqCst);
    }

    async fn try_publish_all(&self) -> Result<(), PublishError> {
        let mut stored = BTreeSet::new();
        for prefix in PUBLISHED_PREFIXES {
            let listing = self.inner.range(&format!("{}{prefix}", self.root)).await?;
            for kv in listing.kvs {
                if let Some(name) = self.name_of(&kv.key) {
                    self.shelf.put(name, kv.value).await?;
                    stored.insert(name.to_string());
                }
            }
        }
        for name in self.shelf.names().await? {
            if !stored.contains(&name) {
                self.shelf.delete(&name).await?;
            }
        }
        Ok(())
    }

    /// Publishes the changes of a transaction that landed: each name's last change, several
    /// at once (a transaction's names are distinct once reduced so, so their order does not
    /// matter, and the lock that keeps transactions in order is held for one round trip to
    /// the store, not one per key – a compaction commit changes dozens of records).
    async fn publish(&self, ops: &[Op]) -> Result<(), PublishError> {
        let mut last: BTreeMap<String, Option<Bytes>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Put(key, value) => {
                    if let Some(name) = self.name_of(key) {
                        last.insert(name.to_string(), Some(value.clone()));
                    }
                }
                Op::Delete(key) => {
                    if let Some(name) = self.name_of(key) {
                        last.insert(name.to_string(), None);
                    }
                }
                Op::DeletePrefix(prefix) => {
                    let Some(within) = prefix.strip_prefix(&self.root) else {
                        continue;
                    };
                    // what is on the shelf, and what this transaction put before
                    let mut names = self.shelf.names().await?;
                    names.extend(last.keys().cloned());
                    for name in names.into_iter().filter(|n| n.starts_with(within)) {
                        last.insert(name, None);
                    }
                }
                Op::PutEphemeral(..) => {}
            }
        }
        let changes = last.into_iter().map(|(name, change)| async move {
            match change {
                Some(value) => self.shelf.put(&name, value).await,
                None => self.shelf.delete(&name).await,
            }
        });
        let mut changes = futures::stream::iter(changes).buffer_unordered(PUBLISHED_AT_ONCE);
        while let Some(done) = changes.next().await {
            done?;
        }
        Ok(())
    }
}

#[async_trait]
impl<S: KvStore> KvStore for PublishedKv<S> {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        self.inner.get(key).await
    }

    async fn range(&self, prefix: &str) -> Result<Listing, MetaError> {
        self.inner.range(prefix).await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        let _in_store_order = self.one_at_a_time.lock().await;
        let published = ops.clone();
        let result = self.inner.txn(compares, ops).await;
        if matches!(result, Ok(Some(_))) {
            if self.stale.load(Ordering::SeqCst) {
                self.publish_all().await;
            } else if let Err(e) = self.publish(&published).await {
                tracing::warn!(error = %e, "publishing a metadata change for segment readers \
                    failed; everything is published again with the next change");
                self.stale.store(true, Ordering::SeqCst);
            }
        }
        result
    }

    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError> {
        self.inner.watch(prefix, after).await
    }

    fn session(&self) -> watch::Receiver<u64> {
        self.inner.session()
    }

    async fn end_session(&self) -> Result<(), MetaError> {
        self.inner.end_session().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn max_txn_ops(&self) -> usize {
        self.inner.max_txn_ops()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex as StdMutex};

    use super::*;
    use crate::meta::embedded::EmbeddedStore;

    /// A shelf in memory that can be made to fail.
    #[derive(Default, Clone)]
    struct MemoryShelf {
        names: Arc<StdMutex<BTreeMap<String, Bytes>>>,
        failing: Arc<AtomicBool>,
    }

    impl MemoryShelf {
        fn contents(&self) -> Vec<(String, String)> {
            let names = self.names.lock().unwrap();
            let text = |v: &Bytes| String::from_utf8_lossy(v).into_owned();
            names.iter().map(|(k, v)| (k.clone(), text(v))).collect()
        }

        fn check(&self) -> Result<(), PublishError> {
            match self.failing.load(Ordering::SeqCst) {
                true => Err(PublishError::shelf("writing", "disk full")),
                false => Ok(()),
            }
        }
    }

    #[async_trait]
    impl Shelf for MemoryShelf {
        async fn put(&self, name: &str, value: Bytes) -> Result<(), PublishError> {
            self.check()?;
            self.names.lock().unwrap().insert(name.to_string(), value);
            Ok(())
        }

        async fn delete(&self, name: &str) -> Result<(), PublishError> {
            self.check()?;
            self.names.lock().unwrap().remove(name);
            Ok(())
        }

        async fn names(&self) -> Result<Vec<String>, PublishError> {
            self.check()?;
            Ok(self.names.lock().unwrap().keys().cloned().collect())
        }
    }

    fn put(key: &str, value: &str) -> Op {
        Op::Put(format!("/kafscale/c/{key}"), Bytes::from(value.to_string()))
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        let owned = list.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        owned.collect()
    }

    #[tokio::test]
    async fn committed_changes_of_published_keys_are_on_the_shelf_when_the_commit_returns() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        let shelf = MemoryShelf::default();
        let kv = PublishedKv::open(store, "/kafscale/c", Box::new(shelf.clone())).await;
        let ops = vec![
            put("topics/t", "T"),
            put("partitions/t/0", "P0"),
            Op::PutEphemeral("/kafscale/c/partitions/t/0/owner".into(), Bytes::from("1")),
            put("wal/1/a-1", "M1"),
            put("wal/1/a-2", "M2"),
            put("groups/g", "G"),
            Op::PutEphemeral("/kafscale/c/writers/1".into(), Bytes::from("1")),
        ];
        assert!(kv.txn(vec![], ops).await.unwrap().is_some());
        let want = [
            ("partitions/t/0", "P0"),
            ("topics/t", "T"),
            ("wal/1/a-1", "M1"),
            ("wal/1/a-2", "M2"),
        ];
        assert_eq!(shelf.contents(), pairs(&want));
        // a refused transaction publishes nothing
        let refused = vec![Compare::ModRevision("/kafscale/c/topics/t".into(), 0)];
        let changed = vec![put("topics/t", "T2")];
        assert_eq!(kv.txn(refused, changed).await.unwrap(), None);
        assert_eq!(shelf.contents(), pairs(&want));
        // a name's last change counts, a prefix deleted after a put in the same one too
        let deletions = vec![
            Op::Delete("/kafscale/c/wal/1/a-1".into()),
            put("partitions/t/1", "P1"),
            Op::DeletePrefix("/kafscale/c/partitions/t/".into()),
            Op::Delete("/kafscale/c/wal/1/a-2".into()),
            put("wal/1/a-2", "M2"),
        ];
        assert!(kv.txn(vec![], deletions).await.unwrap().is_some());
        assert_eq!(
            shelf.contents(),
            pairs(&[("topics/t", "T"), ("wal/1/a-2", "M2")])
        );
    }

    #[tokio::test]
    async fn what_failed_to_publish_is_published_with_the_next_change_or_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        let shelf = MemoryShelf::default();
        {
            let store = EmbeddedStore::open(&path).unwrap();
            let kv = PublishedKv::open(store, "/kafscale/c", Box::new(shelf.clone())).await;
            kv.txn(vec![], vec![put("wal/1/a-1", "M1")]).await.unwrap();
            shelf.failing.store(true, Ordering::SeqCst);
            let committed = kv.txn(vec![], vec![put("wal/1/a-2", "M2")]).await.unwrap();
            assert!(committed.is_some(), "the commit stands");
            shelf.failing.store(false, Ordering::SeqCst);
            let deleted = vec![Op::Delete("/kafscale/c/wal/1/a-1".into())];
            kv.txn(vec![], deleted).await.unwrap();
            assert_eq!(shelf.contents(), pairs(&[("wal/1/a-2", "M2")]));
            // a commit whose publishing the broker did not live to do (killed in between)
            shelf.failing.store(true, Ordering::SeqCst);
            kv.txn(vec![], vec![put("wal/1/a-3", "M3")]).await.unwrap();
        }
        shelf.failing.store(false, Ordering::SeqCst);
        shelf
            .names
            .lock()
            .unwrap()
            .insert("wal/1/gone".into(), Bytes::new());
        let store = EmbeddedStore::open(&path).unwrap();
        let _kv = PublishedKv::open(store, "/kafscale/c", Box::new(shelf.clone())).await;
        assert_eq!(
            shelf.contents(),
            pairs(&[("wal/1/a-2", "M2"), ("wal/1/a-3", "M3")])
        );
    }
}
