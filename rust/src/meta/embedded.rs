//! The single-node metadata store: the `KvStore` contract on a redb file on local disk, so a
//! restarted broker finds every topic and committed offset again. Each commit is durable
//! (fsync) before it returns.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::kv::{Compare, KeyValue, KvStore, MetaError, Op};

/// key → (mod revision i64 big-endian ++ value)
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const REVISION: TableDefinition<&str, i64> = TableDefinition::new("revision");
const REVISION_KEY: &str = "store";

pub struct EmbeddedStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl EmbeddedStore {
    pub fn open(path: &Path) -> Result<EmbeddedStore, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!("KAFSCALE_DATA_DIR {}: cannot create it: {e}", dir.display())
            })?;
        }
        let db = Database::create(path).map_err(|e| {
            format!(
                "metadata store {}: {e} (is another broker using this KAFSCALE_DATA_DIR?)",
                path.display()
            )
        })?;
        let txn = db.begin_write().map_err(unavailable_str)?;
        txn.open_table(KV).map_err(unavailable_str)?;
        txn.open_table(REVISION).map_err(unavailable_str)?;
        txn.commit().map_err(unavailable_str)?;
        Ok(EmbeddedStore {
            db: Arc::new(db),
            path: path.to_path_buf(),
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Database) -> Result<T, MetaError> + Send + 'static,
    ) -> Result<T, MetaError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&db))
            .await
            .map_err(|e| MetaError::Unavailable(e.to_string()))?
    }
}

fn unavailable_str(e: impl std::fmt::Display) -> String {
    format!("embedded metadata store: {e}")
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

#[async_trait]
impl KvStore for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let key = key.to_string();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            let found = table.get(key.as_str()).map_err(unavailable)?;
            found.map(|v| decode(&key, v.value())).transpose()
        })
        .await
    }

    async fn range(&self, prefix: &str) -> Result<Vec<KeyValue>, MetaError> {
        let prefix = prefix.to_string();
        self.blocking(move |db| {
            let txn = db.begin_read().map_err(unavailable)?;
            let table = txn.open_table(KV).map_err(unavailable)?;
            let mut found = Vec::new();
            for entry in table.range(prefix.as_str()..).map_err(unavailable)? {
                let (k, v) = entry.map_err(unavailable)?;
                if !k.value().starts_with(prefix.as_str()) {
                    break;
                }
                found.push(decode(k.value(), v.value())?);
            }
            Ok(found)
        })
        .await
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(unavailable)?;
            let revision = {
                let mut kv = txn.open_table(KV).map_err(unavailable)?;
                for Compare::ModRevision(key, expected) in &compares {
                    let actual = match kv.get(key.as_str()).map_err(unavailable)? {
                        Some(v) => decode(key, v.value())?.mod_revision,
                        None => 0,
                    };
                    if actual != *expected {
                        return Ok(None);
                    }
                }
                let mut revisions = txn.open_table(REVISION).map_err(unavailable)?;
                let current = revisions
                    .get(REVISION_KEY)
                    .map_err(unavailable)?
                    .map(|v| v.value())
                    .unwrap_or(0);
                let revision = current + 1;
                revisions
                    .insert(REVISION_KEY, revision)
                    .map_err(unavailable)?;
                for op in &ops {
                    match op {
                        Op::Put(key, value) => {
                            let mut stored = Vec::with_capacity(8 + value.len());
                            stored.extend_from_slice(&revision.to_be_bytes());
                            stored.extend_from_slice(value);
                            kv.insert(key.as_str(), stored.as_slice())
                                .map_err(unavailable)?;
                        }
                        Op::Delete(key) => {
                            kv.remove(key.as_str()).map_err(unavailable)?;
                        }
                        Op::DeletePrefix(prefix) => {
                            kv.retain(|k, _| !k.starts_with(prefix.as_str()))
                                .map_err(unavailable)?;
                        }
                    }
                }
                revision
            };
            txn.commit().map_err(unavailable)?;
            Ok(Some(revision))
        })
        .await
    }

    fn describe(&self) -> String {
        format!("embedded store {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn compare_and_swap_by_revision_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metadata.redb");
        {
            let store = EmbeddedStore::open(&path).unwrap();
            let put = |v: &'static [u8]| vec![Op::Put("a/x".into(), Bytes::from_static(v))];
            let created = store
                .txn(vec![Compare::ModRevision("a/x".into(), 0)], put(b"1"))
                .await
                .unwrap()
                .unwrap();
            // creating again fails: the key exists
            let again = store.txn(vec![Compare::ModRevision("a/x".into(), 0)], put(b"2"));
            assert_eq!(again.await.unwrap(), None);
            let swapped = store
                .txn(vec![Compare::ModRevision("a/x".into(), created)], put(b"3"))
                .await
                .unwrap();
            assert!(swapped.unwrap() > created);
            store
                .txn(
                    vec![],
                    vec![Op::Put("a/y".into(), Bytes::from_static(b"y"))],
                )
                .await
                .unwrap();
            store
                .txn(vec![], vec![Op::Put("ab".into(), Bytes::from_static(b"z"))])
                .await
                .unwrap();
        }
        let store = EmbeddedStore::open(&path).unwrap();
        let all = store.range("a/").await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].value, Bytes::from_static(b"3"));
        store
            .txn(vec![], vec![Op::DeletePrefix("a/".into())])
            .await
            .unwrap();
        assert!(store.range("a/").await.unwrap().is_empty());
        assert!(store.get("ab").await.unwrap().is_some());
    }
}
