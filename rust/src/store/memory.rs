//! The in-memory object store (`--use-memory-s3`). It keeps each object as the pieces it was
//! uploaded in, where object_store's `InMemory` joins them into a fresh buffer: write-ahead
//! objects and segments are uploaded as slices of produce requests and cached runs
//! (`log::pieces`), so storing them costs no copy and no memory beyond what those hold. A read
//! yields one chunk per piece it touches (a single piece is handed out without a copy).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    Attributes, Error, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult,
    Result,
};

const STORE: &str = "memory";

#[derive(Debug, Clone)]
struct Stored {
    pieces: Arc<[Bytes]>,
    size: u64,
    last_modified: DateTime<Utc>,
    e_tag: u64,
}

impl Stored {
    fn meta(&self, location: &Path) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: self.last_modified,
            size: self.size,
            e_tag: Some(self.e_tag.to_string()),
            version: None,
        }
    }

    /// The slices of the pieces that hold `range`, in order.
    fn slices(&self, range: Range<u64>) -> Vec<Bytes> {
        let mut slices = Vec::new();
        let mut start = 0u64;
        for piece in self.pieces.iter() {
            let end = start + piece.len() as u64;
            if end > range.start && start < range.end {
                let from = range.start.saturating_sub(start) as usize;
                let to = (range.end.min(end) - start) as usize;
                slices.push(piece.slice(from..to));
            }
            start = end;
        }
        slices
    }
}

#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    objects: RwLock<BTreeMap<Path, Stored>>,
    next_e_tag: AtomicU64,
}

impl fmt::Display for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryStore")
    }
}

impl MemoryStore {
    fn objects(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Path, Stored>> {
        self.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    fn objects_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Path, Stored>> {
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }

    fn entry(&self, location: &Path) -> Result<Stored> {
        self.objects()
            .get(location)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                path: location.to_string(),
                source: "no such object".into(),
            })
    }

    /// Stores `pieces` at `location`, or fails if `create` and something is there.
    fn store(&self, location: &Path, pieces: Arc<[Bytes]>, create: bool) -> Result<u64> {
        let e_tag = self.next_e_tag.fetch_add(1, Ordering::Relaxed);
        let stored = Stored {
            size: pieces.iter().map(|p| p.len() as u64).sum(),
            pieces,
            last_modified: Utc::now(),
            e_tag,
        };
        let mut objects = self.objects_mut();
        if create && objects.contains_key(location) {
            return Err(Error::AlreadyExists {
                path: location.to_string(),
                source: "an object is there already".into(),
            });
        }
        objects.insert(location.clone(), stored);
        Ok(e_tag)
    }

    /// The objects under `prefix`, in key order.
    fn under(&self, prefix: Option<&Path>) -> Vec<(Path, Stored)> {
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        self.objects()
            .range(prefix.clone()..)
            .take_while(|(key, _)| key.as_ref().starts_with(prefix.as_ref()))
            .filter(|(key, _)| key.prefix_matches(prefix))
            .map(|(key, stored)| (key.clone(), stored.clone()))
            .collect()
    }
}

#[async_trait]
impl ObjectStore for MemoryStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let create = match opts.mode {
            PutMode::Overwrite => false,
            PutMode::Create => true,
            PutMode::Update(_) => return Err(Error::NotImplemented),
        };
        let pieces: Arc<[Bytes]> = payload.into_iter().filter(|p| !p.is_empty()).collect();
        let e_tag = self.store(location, pieces, create)?;
        Ok(PutResult {
            e_tag: Some(e_tag.to_string()),
            version: None,
        })
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        Err(Error::NotImplemented)
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let stored = self.entry(location)?;
        let meta = stored.meta(location);
        options.check_preconditions(&meta)?;
        let range = match &options.range {
            Some(range) => range.as_range(stored.size).map_err(|e| Error::Generic {
                store: STORE,
                source: e.into(),
            })?,
            None => 0..stored.size,
        };
        let slices = if options.head {
            Vec::new()
        } else {
            stored.slices(range.clone())
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream::iter(slices.into_iter().map(Ok)).boxed()),
            attributes: Attributes::default(),
            meta,
            range,
        })
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.objects_mut().remove(location);
        Ok(())
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let listed: Vec<_> = self
            .under(prefix)
            .into_iter()
            .map(|(key, stored)| Ok(stored.meta(&key)))
            .collect();
        stream::iter(listed).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        let mut common_prefixes = BTreeSet::new();
        let mut objects = Vec::new();
        for (key, stored) in self.under(Some(prefix)) {
            let Some(mut parts) = key.prefix_match(prefix) else {
                continue;
            };
            let Some(first) = parts.next() else {
                continue; // the prefix itself: not one of its children
            };
            if parts.next().is_some() {
                common_prefixes.insert(prefix.child(first));
            } else {
                objects.push(stored.meta(&key));
            }
        }
        Ok(ListResult {
            common_prefixes: common_prefixes.into_iter().collect(),
            objects,
        })
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        let stored = self.entry(from)?;
        self.store(to, stored.pieces, false).map(|_| ())
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        let stored = self.entry(from)?;
        self.store(to, stored.pieces, true).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use futures::TryStreamExt;
    use object_store::GetRange;

    use super::*;

    fn payload(pieces: &[&'static [u8]]) -> PutPayload {
        pieces.iter().map(|p| Bytes::from_static(p)).collect()
    }

    #[tokio::test]
    async fn keeps_the_pieces_it_was_given_and_reads_any_range_of_them() {
        let store = MemoryStore::default();
        let path = Path::from("a/b");
        let pieces = [Bytes::from(vec![1u8; 5]), Bytes::from(vec![2u8; 3])];
        let given: PutPayload = pieces.iter().cloned().collect();
        store.put(&path, given).await.unwrap();
        let whole = store.get(&path).await.unwrap();
        let chunks: Vec<Bytes> = whole.into_stream().try_collect().await.unwrap();
        // The very bytes given, not copies.
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[0].as_ptr(), pieces[0].as_ptr());
        assert_eq!(chunks[1].as_ptr(), pieces[1].as_ptr());
        let across = store.get_range(&path, 3..7).await.unwrap();
        assert_eq!(&across[..], &[1, 1, 2, 2]);
        let within = store.get_range(&path, 5..8).await.unwrap();
        assert_eq!(within.as_ptr(), pieces[1].as_ptr());
        let options = GetOptions {
            range: Some(GetRange::Suffix(2)),
            ..Default::default()
        };
        let tail = store.get_opts(&path, options).await.unwrap();
        assert_eq!(tail.range, 6..8);
        assert_eq!(&tail.bytes().await.unwrap()[..], &[2, 2]);
        assert_eq!(store.head(&path).await.unwrap().size, 8);
        // As in S3: a range running past the end gets what is there; one starting past it fails.
        assert_eq!(&store.get_range(&path, 7..9).await.unwrap()[..], &[2]);
        assert!(store.get_range(&path, 9..10).await.is_err());
    }

    #[tokio::test]
    async fn create_refuses_an_existing_object_and_overwrite_replaces_it() {
        let store = MemoryStore::default();
        let path = Path::from("x");
        let create = PutOptions::from(PutMode::Create);
        store
            .put_opts(&path, payload(&[b"one"]), create.clone())
            .await
            .unwrap();
        let again = store.put_opts(&path, payload(&[b"two"]), create).await;
        assert!(matches!(again, Err(Error::AlreadyExists { .. })));
        store.put(&path, payload(&[b"tw", b"o"])).await.unwrap();
        assert_eq!(&store.get_range(&path, 0..3).await.unwrap()[..], b"two");
        let copied = store.copy_if_not_exists(&path, &path).await;
        assert!(matches!(copied, Err(Error::AlreadyExists { .. })));
        store.delete(&path).await.unwrap();
        assert!(matches!(
            store.get(&path).await,
            Err(Error::NotFound { .. })
        ));
        store.delete(&path).await.unwrap(); // deleting nothing is not an error, as in S3
    }

    #[tokio::test]
    async fn lists_children_and_common_prefixes_like_a_bucket() {
        let store = MemoryStore::default();
        for key in ["t/0/a", "t/0/b", "t/1/a", "t/x", "tt/0", "u"] {
            store.put(&Path::from(key), payload(&[b"."])).await.unwrap();
        }
        let listed = store
            .list_with_delimiter(Some(&Path::from("t")))
            .await
            .unwrap();
        let folders: Vec<_> = listed
            .common_prefixes
            .iter()
            .map(|p| p.to_string())
            .collect();
        let objects: Vec<_> = listed
            .objects
            .iter()
            .map(|o| o.location.to_string())
            .collect();
        assert_eq!(folders, ["t/0", "t/1"]);
        assert_eq!(objects, ["t/x"]);
        let all: Vec<ObjectMeta> = store
            .list(Some(&Path::from("t/0")))
            .try_collect()
            .await
            .unwrap();
        let keys: Vec<_> = all.iter().map(|o| o.location.to_string()).collect();
        assert_eq!(keys, ["t/0/a", "t/0/b"]);
        assert_eq!(store.list(None).count().await, 6);
    }
}
