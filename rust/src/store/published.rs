//! The shelf the single-node broker publishes its committed metadata on for segment readers
//! (see `meta::published`): one object per key under `{namespace}/!meta/`, and the readers'
//! side of it.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::{SegmentStore, StoreError};
use crate::meta::published::{PublishError, Shelf, PUBLISHED_FOLDER};

struct ObjectShelf {
    store: Arc<dyn ObjectStore>,
    folder: Path,
}

impl ObjectShelf {
    fn path(&self, name: &str) -> Path {
        Path::from(format!("{}/{name}", self.folder))
    }
}

#[async_trait]
impl Shelf for ObjectShelf {
    async fn put(&self, name: &str, value: Bytes) -> Result<(), PublishError> {
        let path = self.path(name);
        let put = self.store.put(&path, value.into()).await;
        put.map(drop)
            .map_err(|e| PublishError::shelf(format!("writing {path}"), e))
    }

    async fn delete(&self, name: &str) -> Result<(), PublishError> {
        let path = self.path(name);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(PublishError::shelf(format!("deleting {path}"), e)),
        }
    }

    async fn names(&self) -> Result<Vec<String>, PublishError> {
        names_below(&self.store, &self.folder, &self.folder)
            .await
            .map_err(|e| PublishError::shelf(format!("listing {}", self.folder), e))
    }
}

/// The names (relative to `folder`) of the objects below `prefix`.
async fn names_below(
    store: &Arc<dyn ObjectStore>,
    folder: &Path,
    prefix: &Path,
) -> Result<Vec<String>, object_store::Error> {
    let listed: Vec<_> = store.list(Some(prefix)).try_collect().await?;
    let mut names: Vec<String> = listed
        .iter()
        .filter_map(|meta| {
            let parts: Vec<_> = meta.location.prefix_match(folder)?.collect();
            let parts: Vec<&str> = parts.iter().map(|p| p.as_ref()).collect();
            Some(parts.join("/"))
        })
        .collect();
    names.sort();
    Ok(names)
}

impl SegmentStore {
    fn published_folder(&self) -> Path {
        Path::from(format!("{}/{PUBLISHED_FOLDER}", self.namespace))
    }

    /// Where the single-node broker publishes its metadata in this store.
    pub(crate) fn published_shelf(&self) -> Box<dyn Shelf> {
        Box::new(ObjectShelf {
            store: self.store.clone(),
            folder: self.published_folder(),
        })
    }

    /// The published names below `prefix` (e.g. `wal/`), relative to the shelf.
    pub(crate) async fn published_names(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let folder = self.published_folder();
        let below = Path::from(format!("{folder}/{}", prefix.trim_end_matches('/')));
        Ok(names_below(&self.store, &folder, &below).await?)
    }

    /// A published key's value; None if it is not (or no longer) published.
    pub(crate) async fn published(&self, name: &str) -> Result<Option<Bytes>, StoreError> {
        let path = Path::from(format!("{}/{name}", self.published_folder()));
        match self.get(&path).await {
            Ok(value) => Ok(Some(value)),
            Err(StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether a broker publishes its metadata here (a single-node broker's storage).
    pub(crate) async fn has_published(&self) -> Result<bool, StoreError> {
        let folders = self.list_folders("").await?;
        Ok(folders.iter().any(|f| f == PUBLISHED_FOLDER))
    }
}
