//! The single-node metadata store: the `KvStore` contract on a redb file on local disk, so a
//! restarted broker finds every topic and committed offset again. Each commit is durable
//! (fsync) before it returns.
//!
//! The session is the process: ephemeral keys are listed in a table of their own and all of
//! them are deleted when the store is opened (the process that wrote them is gone). Watches are
//! served from memory: the changes of the last `HISTORY_REVISIONS` revisions plus a broadcast of
//! new ones.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{stream, StreamExt};
use redb::{Database, ReadableDatabase, ReadableTable, Table, TableDefinition};
use tokio::sync::{broadcast, watch};

use super::kv::{Change, ChangeStream, Compare, KeyValue, KvStore, Listing, MetaError, Op};

/// key → (mod revision i64 big-endian ++ value)
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// Names of the keys written with `Op::PutEphemeral`.
const EPHEMERAL: TableDefinition<&str, ()> = TableDefinition::new("ephemeral");
const REVISION: TableDefinition<&str, i64> = TableDefinition::new("revision");
const REVISION_KEY: &str = "store";

/// Revisions a watch can start behind the newest one; older starts must list again.
const HISTORY_REVISIONS: usize = 4096;
/// Operations per transaction that batched writes use (see `KvStore::max_txn_ops`).
const EMBEDDED_MAX_TXN_OPS: usize = 4096;
/// Revisions a live watcher may fall behind before it gets an error (and lists again).
const LIVE_BUFFER: usize = 1024;

type Batch = (i64, Arc<Vec<Change>>);

/// Recent changes, for watches.
struct Hub {
    history: VecDeque<Batch>,
    history_limit: usize,
    /// Every change with a revision above this one is in `history`.
    complete_after: i64,
    live: broadcast::Sender<Batch>,
}

impl Hub {
    fn publish(&mut self, batch: Batch) {
        if self.history.len() == self.history_limit {
            if let Some((oldest, _)) = self.history.pop_front() {
                self.complete_after = oldest;
            }
        }
        self.history.push_back(batch.clone());
        // No receiver is not an error: nobody watches right now.
        let _ = self.live.send(batch);
    }
}

struct Shared {
    db: Database,
    hub: Mutex<Hub>,
    /// Held across commit and publish, so watchers see revisions in commit order without
    /// holding the hub lock through an fsync.
    writer: Mutex<()>,
}

/// Why the embedded metadata store did not open.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EmbeddedOpenError {
    #[error("cannot create the directory {}: {source}", dir.display())]
    Directory {
        dir: PathBuf,
        source: std::io::Error,
    },
    /// Another process holds it, or the file is not a store.
    #[error("the embedded metadata store {} cannot be opened: {source}", path.display())]
    Database {
        path: PathBuf,
        source: redb::DatabaseError,
    },
    #[error("embedded metadata store: {0}")]
    Unusable(#[from] MetaError),
}

pub(crate) struct EmbeddedStore {
    shared: Arc<Shared>,
    session: watch::Sender<u64>,
    path: PathBuf,
}

impl EmbeddedStore {
    pub(crate) fn open(path: &Path) -> Result<EmbeddedStore, EmbeddedOpenError> {
        EmbeddedStore::open_with(path, HISTORY_REVISIONS, LIVE_BUFFER)
    }

    /// `open` with the watch limits chosen (tests use small ones).
    fn open_with(
        path: &Path,
        history: usize,
        live: usize,
    ) -> Result<EmbeddedStore, EmbeddedOpenError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| EmbeddedOpenError::Directory {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let db = Database::create(path).map_err(|source| EmbeddedOpenError::Database {
            path: path.to_path_buf(),
            source,
        })?;
        let txn = db.begin_write().map_err(unavailable)?;
        txn.open_table(KV).map_err(unavailable)?;
        txn.open_table(EPHEMERAL).map_err(unavailable)?;
        let revision = current_revision(&txn.open_table(REVISION).map_err(unavailable)?)
            .map_err(unavailable)?;
        txn.commit().map_err(unavailable)?;
        let shared = Arc::new(Shared {
            db,
            hub: Mutex::new(Hub {
                history: VecDeque::new(),
                history_limit: history,
                complete_after: revision,
                live: broadcast::channel(live).0,
            }),
            writer: Mutex::new(()),
        });
        // The previous process's session ended with it.
        shared
            .commit(vec![], ephemeral_deletes)
            .map_err(unavailable)?;
        Ok(EmbeddedStore {
            shared,
            session: watch::channel(1).0,
            path: path.to_path_buf(),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Shared) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || work(&shared))
            .await
            .map_err(|e| MetaError::Unavailable(e.to_string()))?
    }
}

type KvTable<'t> = Table<'t, &'static str, &'static [u8]>;
type EphemeralTable<'t> = Table<'t, &'static str, ()>;

impl Shared {
    /// One write transaction: checks `compares`, then applies the ops that `ops` returns (it
    /// may read the ephemeral table) under a new revision and publishes their changes. No ops:
    /// nothing is written and the current revision is returned (as etcd does).
    fn commit(
        &self,
        compares: Vec<Compare>,
        ops: impl FnOnce(&EphemeralTable) -> Result<Vec<Op>, MetaError>,
    ) -> Result<Option<i64>, MetaError> {
        let _writer = lock(&self.writer);
        let txn = self.db.begin_write().map_err(unavailable)?;
        let (revision, changes) = {
            let mut kv = txn.open_table(KV).map_err(unavailable)?;
            let mut ephemeral = txn.open_table(EPHEMERAL).map_err(unavailable)?;
            let mut revisions = txn.open_table(REVISION).map_err(unavailable)?;
            for (key, expected) in compares.iter().filter_map(revision_compare) {
                let actual = match kv.get(key).map_err(unavailable)? {
                    Some(v) => decode(key, v.value())?.mod_revision,
                    None => 0,
                };
                if actual != expected {
                    return Ok(None);
                }
            }
            let current = current_revision(&revisions).map_err(unavailable)?;
            let ops = ops(&ephemeral)?;
            if ops.is_empty() {
                return Ok(Some(current));
            }
            let revision = current + 1;
            revisions
                .insert(REVISION_KEY, revision)
                .map_err(unavailable)?;
            let mut changes = Vec::new();
            for op in ops {
                apply(&mut kv, &mut ephemeral, op, revision, &mut changes)?;
            }
            (revision, changes)
        };
        txn.commit().map_err(unavailable)?;
        if !changes.is_empty() {
            lock(&self.hub).publish((revision, Arc::new(changes)));
        }
        Ok(Some(revision))
    }
}

/// A compare of a key's revision; session compares are checked before the transaction.
fn revision_compare(compare: &Compare) -> Option<(&str, i64)> {
    match compare {
        Compare::ModRevision(key, revision) => Some((key, *revision)),
        Compare::Session(_) => None,
    }
}

fn apply(
    kv: &mut KvTable,
    ephemeral: &mut EphemeralTable,
    op: Op,
    revision: i64,
    changes: &mut Vec<Change>,
) -> Result<(), MetaError> {
    let mut deleted = Vec::new();
    match op {
        Op::Put(key, value) => {
            ephemeral.remove(key.as_str()).map_err(unavailable)?;
            put(kv, key, value, revision, changes)?;
        }
        Op::PutEphemeral(key, value) => {
            ephemeral.insert(key.as_str(), ()).map_err(unavailable)?;
            put(kv, key, value, revision, changes)?;
        }
        Op::Delete(key) => deleted.push(key),
        Op::DeletePrefix(prefix) => {
            for entry in kv.range(prefix.as_str()..).map_err(unavailable)? {
                let (key, _) = entry.map_err(unavailable)?;
                if !key.value().starts_with(prefix.as_str()) {
                    break;
                }
                deleted.push(key.value().to_string());
            }
        }
    }
    for key in deleted {
        ephemeral.remove(key.as_str()).map_err(unavailable)?;
        if kv.remove(key.as_str()).map_err(unavailable)?.is_some() {
            changes.push(Change::Delete { key, revision });
        }
    }
    Ok(())
}

fn put(
    kv: &mut KvTable,
    key: String,
    value: Bytes,
    revision: i64,
    changes: &mut Vec<Change>,
) -> Result<(), MetaError> {
    let mut stored = Vec::with_capacity(8 + value.len());
    stored.extend_from_slice(&revision.to_be_bytes());
    stored.extend_from_slice(&value);
    kv.insert(key.as_str(), stored.as_slice())
        .map_err(unavailable)?;
    changes.push(Change::Put(KeyValue {
        key,
        value,
        mod_revision: revision,
    }));
    Ok(())
}

/// Ops that delete every ephemeral key (the end of a session).
fn ephemeral_deletes(ephemeral: &EphemeralTable) -> Result<Vec<Op>, MetaError> {
    let mut ops = Vec::new();
    for entry in ephemeral.iter().map_err(unavailable)? {
        let (key, _) = entry.map_err(unavailable)?;
        ops.push(Op::Delete(key.value().to_string()));
    }
    Ok(ops)
}

fn current_revision(
    table: &impl ReadableTable<&'static str, i64>,
) -> Result<i64, redb::StorageError> {
    Ok(table.get(REVISION_KEY)?.map(|v| v.value()).unwrap_or(0))
}

/// A poisoned lock only means another thread panicked mid-write; the data it guards (a
/// history, or nothing) stays usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn unavailable(e: impl std::fmt::Display) -> MetaError {
    MetaError::Unavailable(e.to_string())
}

fn decode(key: &str, stored: &[u8]) -> Result<KeyValue, MetaError> {
    if stored.len() < 8 {
        return Err(MetaError::Corrupt {
            key: key.to_string(),
            reason: "record shorter than its revision".into(),
        });
    }
    Ok(KeyValue {
        key: key.to_string(),
        mod_revision: i64::from_be_bytes(stored[..8].try_into().unwrap()),
        value: Bytes::copy_from_slice(&stored[8..]),
    })
}

/// The changes of one batch that fall under `prefix`, if any.
fn matching(prefix: &str, changes: &[Change]) -> Option<Vec<Change>> {
    let found: Vec<Change> = changes
        .iter()
        .filter(|c| match c {
            Change::Put(kv) => kv.key.starts_with(prefix),
            Change::Delete { key, .. } => key.starts_with(prefix),
        })
        .cloned()
        .collect();
    (!found.is_empty()).then_some(found)
}

#[async_trait]
impl KvStore for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let key = key.to_string();
        self.blocking(move |shared| {
            let txn = shared.db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            let found = table.get(key.as_str()).map_err(unavailable)?;
            found.map(|v| decode(&key, v.value())).transpose()
        })
        .await
    }

    async fn range(&self, prefix: &str) -> Result<Listing, MetaError> {
        let prefix = prefix.to_string();
        self.blocking(move |shared| {
            let txn = shared.db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            let revisions = txn.open_table(REVISION).map_err(unavailable)?;
            let mut kvs = Vec::new();
            for entry in table.range(prefix.as_str()..).map_err(unavailable)? {
                let (k, v) = entry.map_err(unavailable)?;
                if !k.value().starts_with(prefix.as_str()) {
                    break;
                }
                kvs.push(decode(k.value(), v.value())?);
            }
            let revision = current_revision(&revisions).map_err(unavailable)?;
            Ok(Listing { kvs, revision })
        })
        .await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        // The process is the session: it never changes, but a compare naming another fails.
        let session = *self.session.borrow();
        if compares
            .iter()
            .any(|c| matches!(c, Compare::Session(s) if *s != session))
        {
            return Ok(None);
        }
        self.blocking(move |shared| shared.commit(compares, |_| Ok(ops)))
            .await
    }

    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError> {
        // Copying the history and subscribing under one lock: nothing published in between.
        let (replay, live) = {
            let hub = lock(&self.shared.hub);
            if after < hub.complete_after {
                let error = MetaError::Unavailable(format!(
                    "watch from revision {after}: changes up to revision {} are no longer kept",
                    hub.complete_after
                ));
                return Ok(stream::once(async { Err(error) }).boxed());
            }
            let replay: Vec<Batch> = hub
                .history
                .iter()
                .filter(|(revision, _)| *revision > after)
                .cloned()
                .collect();
            (replay, hub.live.subscribe())
        };
        let live = stream::unfold(Some(live), |receiver| async move {
            let mut receiver = receiver?;
            match receiver.recv().await {
                Ok(batch) => Some((Ok(batch), Some(receiver))),
                Err(broadcast::error::RecvError::Closed) => None,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    let error = MetaError::Unavailable(format!(
                        "watcher fell {missed} revisions behind the embedded store"
                    ));
                    Some((Err(error), None))
                }
            }
        });
        let prefix = prefix.to_string();
        let batches = stream::iter(replay.into_iter().map(Ok)).chain(live);
        Ok(batches
            .filter_map(move |item| {
                let item = match item {
                    Ok((_, changes)) => matching(&prefix, &changes).map(Ok),
                    Err(e) => Some(Err(e)),
                };
                async move { item }
            })
            .boxed())
    }

    fn session(&self) -> watch::Receiver<u64> {
        self.session.subscribe()
    }

    async fn end_session(&self) -> Result<(), MetaError> {
        self.blocking(|shared| shared.commit(vec![], ephemeral_deletes).map(|_| ()))
            .await
    }

    fn describe(&self) -> String {
        format!("embedded store {}", self.path.display())
    }

    fn max_txn_ops(&self) -> usize {
        // One fsync per transaction is the cost here, not its size: big batches, bounded so
        // one transaction never holds the writer for long.
        EMBEDDED_MAX_TXN_OPS
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn put(key: &str, value: &'static [u8]) -> Op {
        Op::Put(key.into(), Bytes::from_static(value))
    }

    fn put_ephemeral(key: &str) -> Op {
        Op::PutEphemeral(key.into(), Bytes::from_static(b"e"))
    }

    /// An unconditional transaction; its revision.
    async fn write(store: &EmbeddedStore, ops: Vec<Op>) -> i64 {
        store.txn(vec![], ops).await.unwrap().unwrap()
    }

    async fn keys(store: &EmbeddedStore, prefix: &str) -> Vec<String> {
        let listing = store.range(prefix).await.unwrap();
        listing.kvs.into_iter().map(|kv| kv.key).collect()
    }

    /// The next watch item as (revision, "+key" for a put / "-key" for a delete).
    async fn next(stream: &mut ChangeStream) -> (i64, Vec<String>) {
        let item = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        let batch = item.expect("a watch item").expect("not ended").unwrap();
        let summary = batch.iter().map(|change| match change {
            Change::Put(kv) => (kv.mod_revision, format!("+{}", kv.key)),
            Change::Delete { key, revision } => (*revision, format!("-{key}")),
        });
        let (revisions, keys): (Vec<i64>, Vec<String>) = summary.unzip();
        assert!(revisions.iter().all(|r| *r == revisions[0]), "one revision");
        (revisions[0], keys)
    }

    #[tokio::test]
    async fn compare_and_swap_by_revision_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.redb");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            let cas = |revision: i64, value: &'static [u8]| {
                let compares = vec![Compare::ModRevision("a/x".into(), revision)];
                store.txn(compares, vec![put("a/x", value)])
            };
            let created = cas(0, b"1").await.unwrap().unwrap();
            assert_eq!(cas(0, b"2").await.unwrap(), None, "exists already");
            let swapped = cas(created, b"3").await.unwrap().unwrap();
            assert!(swapped > created);
            assert_eq!(cas(created, b"4").await.unwrap(), None, "stale revision");
            let last = write(&store, vec![put("a/y", b"y"), put("ab", b"z")]).await;
            // no ops: nothing written, the current revision
            assert_eq!(store.txn(vec![], vec![]).await.unwrap(), Some(last));
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let all = store.range("a/").await.unwrap();
        assert_eq!(all.kvs.len(), 2);
        assert_eq!(all.kvs[0].value, Bytes::from_static(b"3"));
        assert_eq!(all.revision, 3);
        write(&store, vec![Op::DeletePrefix("a/".into())]).await;
        assert!(keys(&store, "a/").await.is_empty());
        assert!(store.get("ab").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn ephemeral_keys_vanish_on_reopen_and_on_end_session() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.redb");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            assert_eq!(*store.session().borrow(), 1);
            let ops = vec![put_ephemeral("e/1"), put_ephemeral("e/2"), put("p/1", b"1")];
            write(&store, ops).await;
            // overwritten by a plain put: no longer ephemeral
            write(&store, vec![put("e/2", b"kept")]).await;
            // made ephemeral, then deleted: nothing left to delete later
            write(&store, vec![put_ephemeral("e/3")]).await;
            write(&store, vec![Op::Delete("e/3".into())]).await;
            assert_eq!(keys(&store, "").await, ["e/1", "e/2", "p/1"]);
        }
        let store = EmbeddedStore::open(&path).unwrap();
        assert_eq!(keys(&store, "").await, ["e/2", "p/1"]);
        let opened = store.range("").await.unwrap().revision;

        let mut watch = store.watch("", opened).await.unwrap();
        write(&store, vec![put_ephemeral("e/4"), put_ephemeral("p/2")]).await;
        assert_eq!(next(&mut watch).await.1, ["+e/4", "+p/2"]);
        store.end_session().await.unwrap();
        assert_eq!(next(&mut watch).await.1, ["-e/4", "-p/2"]);
        assert_eq!(keys(&store, "").await, ["e/2", "p/1"]);
        // nothing ephemeral left: ending again writes nothing
        let ended = store.range("").await.unwrap().revision;
        store.end_session().await.unwrap();
        assert_eq!(store.range("").await.unwrap().revision, ended);
    }

    #[tokio::test]
    async fn watch_replays_history_then_delivers_live_changes_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(EmbeddedStore::open(&dir.path().join("m.redb")).unwrap());
        let first = write(&store, vec![put("w/a", b"1")]).await;
        write(&store, vec![put("other", b"2")]).await;
        let third = write(&store, vec![put("w/b", b"3")]).await;
        // from the first revision: replays w/b only (other is outside the prefix)
        let mut watch = store.watch("w/", first).await.unwrap();
        assert_eq!(next(&mut watch).await, (third, vec!["+w/b".into()]));
        let mut from_start = store.watch("w/", 0).await.unwrap();
        assert_eq!(next(&mut from_start).await, (first, vec!["+w/a".into()]));

        // a writer races the watcher: every revision arrives once, in order
        let writer = {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..200 {
                    let key = format!("w/{}", i % 7);
                    write(&store, vec![Op::Put(key, Bytes::from(i.to_string()))]).await;
                }
            })
        };
        for expected in third + 1..=third + 200 {
            let (revision, changed) = next(&mut watch).await;
            assert_eq!(revision, expected, "no gap, no repeat");
            assert_eq!(changed.len(), 1);
        }
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn delete_prefix_reports_every_deleted_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        let ops = vec![put("t/a/0", b"0"), put("t/a/1", b"1"), put("t/ab", b"x")];
        let created = write(&store, ops).await;
        let mut watch = store.watch("t/", created).await.unwrap();
        let ops = vec![Op::DeletePrefix("t/a/".into()), Op::Delete("nope".into())];
        let deleted = write(&store, ops).await;
        let expected = (deleted, vec!["-t/a/0".into(), "-t/a/1".into()]);
        assert_eq!(next(&mut watch).await, expected);
        assert_eq!(keys(&store, "t/").await, ["t/ab"]);
    }

    #[tokio::test]
    async fn watch_from_a_revision_no_longer_kept_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.redb");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            for _ in 0..3 {
                write(&store, vec![put("k", b"v")]).await;
            }
        }
        // a reopened store (at revision 3) has no history before its opening revision
        let store = EmbeddedStore::open_with(&path, 2, 8).unwrap();
        let mut stale = store.watch("", 2).await.unwrap();
        assert!(stale.next().await.unwrap().is_err());
        assert!(stale.next().await.is_none());
        let mut current = store.watch("", 3).await.unwrap();
        for _ in 0..3 {
            write(&store, vec![put("k", b"v")]).await;
        }
        // only the last two revisions (5, 6) are kept now
        let mut trimmed = store.watch("", 3).await.unwrap();
        assert!(trimmed.next().await.unwrap().is_err());
        let mut kept = store.watch("", 4).await.unwrap();
        assert_eq!(next(&mut kept).await.0, 5);
        assert_eq!(next(&mut kept).await.0, 6);
        // a watcher that kept up is unaffected by trimming
        for revision in 4..=6 {
            assert_eq!(next(&mut current).await.0, revision);
        }
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_gets_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open_with(&dir.path().join("m.redb"), 16, 2).unwrap();
        let mut watch = store.watch("", 0).await.unwrap();
        for _ in 0..4 {
            write(&store, vec![put("k", b"v")]).await;
        }
        assert!(watch.next().await.unwrap().is_err());
        assert!(watch.next().await.is_none());
    }
}
