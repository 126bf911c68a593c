//! `GroupStore`: the metadata store under the consumer groups' root, for the Python group
//! coordinator. Keys cross the boundary relative to the root; compare-and-swap commits are the
//! coordinator's fencing (a coordinator that lost its group fails its next write).

use std::sync::Arc;

use bytes::Bytes;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use super::errors::store_error;
use super::runtime::on_runtime;
use crate::meta::kv::{Compare, KeyValue, KvStore, Op};

#[pyclass(frozen, get_all, module = "kafscale._core")]
pub(super) struct StoredEntry {
    key: String,
    value: Vec<u8>,
    mod_revision: i64,
}

#[pyclass(frozen, module = "kafscale._core")]
pub struct GroupStore {
    kv: Arc<dyn KvStore>,
    /// Ends with '/'.
    root: String,
    runtime: Arc<Runtime>,
}

impl GroupStore {
    pub fn new(kv: Arc<dyn KvStore>, root: String, runtime: Arc<Runtime>) -> Self {
        GroupStore { kv, root, runtime }
    }

    fn key(&self, relative: &str) -> String {
        format!("{}{relative}", self.root)
    }
}

/// The entry with its key relative to `root` (every key read comes from under it).
fn entry(root: &str, kv: KeyValue) -> StoredEntry {
    StoredEntry {
        key: kv.key.strip_prefix(root).unwrap_or(&kv.key).to_string(),
        value: kv.value.to_vec(),
        mod_revision: kv.mod_revision,
    }
}

#[pymethods]
impl GroupStore {
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let (kv, root, key) = (self.kv.clone(), self.root.clone(), self.key(key));
        on_runtime(&self.runtime, py, async move {
            let found = kv.get(&key).await.map_err(store_error)?;
            Ok(found.map(|kv| entry(&root, kv)))
        })
    }

    fn list<'py>(&self, py: Python<'py>, prefix: &str) -> PyResult<Bound<'py, PyAny>> {
        let (kv, root, prefix) = (self.kv.clone(), self.root.clone(), self.key(prefix));
        on_runtime(&self.runtime, py, async move {
            let listing = kv.range(&prefix).await.map_err(store_error)?;
            Ok(listing
                .kvs
                .into_iter()
                .map(|kv| entry(&root, kv))
                .collect::<Vec<_>>())
        })
    }

    fn commit<'py>(
        &self,
        py: Python<'py>,
        expect: Vec<(String, i64)>,
        put: Vec<(String, Vec<u8>)>,
        delete: Vec<String>,
        delete_prefixes: Vec<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let compares = expect
            .into_iter()
            .map(|(key, revision)| Compare::ModRevision(self.key(&key), revision))
            .collect();
        let puts = put
            .into_iter()
            .map(|(key, value)| Op::Put(self.key(&key), Bytes::from(value)));
        let deletes = delete.into_iter().map(|key| Op::Delete(self.key(&key)));
        let prefixes = delete_prefixes
            .into_iter()
            .map(|prefix| Op::DeletePrefix(self.key(&prefix)));
        // Deletes first, so a key both deleted and written ends up written (etcd refuses such
        // overlaps outright; the embedded store applies the ops in order).
        let ops = deletes.chain(prefixes).chain(puts).collect();
        let kv = self.kv.clone();
        on_runtime(&self.runtime, py, async move {
            kv.txn(compares, ops).await.map_err(store_error)
        })
    }
}
