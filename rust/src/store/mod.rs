//! Object storage for segments: one type over the `object_store` crate for a local directory,
//! memory, or S3. Keys follow the KafScale layout
//! `{namespace}/{topic}/{partition}/segment-{base_offset:020}.{kfs|index}`; the segments the
//! cleaner of a compacted topic writes carry its generation too:
//! `segment-{base_offset:020}-{generation:016x}.{kfs|index}`.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    ClientOptions, GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, RetryConfig,
};

#[cfg(test)]
pub(crate) mod faulty;
mod location;
mod memory;
mod problems;
mod published;
mod requests;

pub(crate) use location::{Location, LocationError};
pub(crate) use problems::has_configured_credentials;
pub(crate) use problems::{concise, one_line, OpenError, Unusable};
pub(crate) use requests::RequestCounts;

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("object {0} already exists")]
    AlreadyExists(String),
    #[error("object {0} not found")]
    NotFound(String),
    /// The store's own message (callers say it is about object storage).
    #[error("{0}")]
    Other(String),
}

/// Whether uploads carry a SHA-256 of their body in the request signature. Over HTTPS (AWS, or
/// an https endpoint) TLS already protects the body in transit, and every batch's CRC-32C and
/// each segment's checksum are verified when read: hashing each uploaded byte once more costs
/// a fifth of the broker's CPU while producing, so it is left out there. Over plain HTTP the
/// signature is the body's only protection against change on the way, so it is kept. Setting
/// `AWS_UNSIGNED_PAYLOAD` (true or false, read by object_store) decides instead.
fn signs_payload(endpoint: Option<&str>, unsigned_payload_env: Option<&str>) -> bool {
    match unsigned_payload_env {
        Some(unsigned) => !unsigned.trim().eq_ignore_ascii_case("true"),
        None => endpoint.is_some_and(|url| url.to_ascii_lowercase().starts_with("http://")),
    }
}

impl From<object_store::Error> for StoreError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::AlreadyExists { path, .. } => StoreError::AlreadyExists(path),
            object_store::Error::NotFound { path, .. } => StoreError::NotFound(path),
            other => StoreError::Other(concise(&other.to_string())),
        }
    }
}

/// A chunk of a body as received, or a copy of it where it holds on to a buffer much larger
/// than itself. The HTTP client reads into buffers sized for the read it expects, and a read
/// that brings less leaves the rest of the buffer unused, yet alive as long as the chunk is
/// (the cache counts only the chunk).
fn without_slack(chunk: Bytes) -> Bytes {
    match chunk.try_into_mut() {
        Ok(alone) if alone.capacity() > alone.len() + alone.len() / 8 => {
            Bytes::copy_from_slice(&alone)
        }
        Ok(alone) => alone.freeze(),
        // Shares its buffer with other chunks (or the client's buffer): kept as it is.
        Err(shared) => shared,
    }
}

/// How long a probe of the store waits for its answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// Where segments live, as configured.
#[derive(Debug, Clone)]
pub(crate) enum StorageLocation {
    LocalDir(std::path::PathBuf),
    Memory,
    S3 {
        bucket: String,
        /// `None`: the AWS environment's (`AWS_REGION`, `AWS_DEFAULT_REGION`), else us-east-1.
        region: Option<String>,
        endpoint: Option<String>,
        /// Explicit credentials; `None` takes them from the standard AWS environment.
        credentials: Option<S3Credentials>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

/// Which of a partition's objects: a segment's two, or the idempotent producers' state as of
/// an offset (`log::partition::idempotence`), which readers of segments skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SegmentObject {
    Data,
    Index,
    ProducerSnapshot,
}

impl SegmentObject {
    /// The object's name prefix and extension.
    fn naming(self) -> (&'static str, &'static str) {
        match self {
            SegmentObject::Data => ("segment", "kfs"),
            SegmentObject::Index => ("segment", "index"),
            SegmentObject::ProducerSnapshot => ("producers", "json"),
        }
    }
}

/// A segment object found by listing a partition's prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedSegment {
    pub base_offset: i64,
    /// The cleaning that wrote it (`meta::catalog::CleanedLog`); None for compaction's.
    pub generation: Option<u64>,
    pub kind: SegmentObject,
    pub size: u64,
}

/// `{base_offset:020}` or `{base_offset:020}-{generation:016x}`.
fn parse_stem(stem: &str) -> Option<(i64, Option<u64>)> {
    match stem.split_once('-') {
        None => Some((stem.parse().ok()?, None)),
        Some((base, generation)) => Some((
            base.parse().ok()?,
            Some(u64::from_str_radix(generation, 16).ok()?),
        )),
    }
}

/// The folder of write-ahead objects under the namespace.
pub(crate) const WAL_FOLDER: &str = "!wal";

pub(crate) struct SegmentStore {
    store: Arc<dyn ObjectStore>,
    namespace: String,
    description: String,
    /// The directory of a local store, whose objects can be memory-mapped.
    local_root: Option<std::path::PathBuf>,
    /// Every request made of `store` so far.
    requests: RequestCounts,
}

impl SegmentStore {
    pub(crate) fn open(
        location: &StorageLocation,
        namespace: &str,
    ) -> Result<SegmentStore, OpenError> {
        let local_root = match location {
            StorageLocation::LocalDir(dir) => Some(dir.clone()),
            _ => None,
        };
        // The start-up line and DescribeLogDirs name the store by its URL (`store::location`).
        let (store, note): (Arc<dyn ObjectStore>, String) = match location {
            StorageLocation::LocalDir(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| OpenError::Directory {
                    dir: dir.clone(),
                    error: e.to_string(),
                })?;
                let fs =
                    LocalFileSystem::new_with_prefix(dir).map_err(|e| OpenError::Directory {
                        dir: dir.clone(),
                        error: e.to_string(),
                    })?;
                (Arc::new(fs), String::new())
            }
            StorageLocation::Memory => (
                Arc::new(memory::MemoryStore::default()),
                " (data is lost on exit)".to_string(),
            ),
            StorageLocation::S3 {
                bucket,
                region,
                endpoint,
                credentials,
            } => {
                // Bounded retries with backoff for transient failures; a request that hangs
                // (a paused server) times out instead of stalling its partition forever.
                let retry = RetryConfig {
                    max_retries: 4,
                    retry_timeout: Duration::from_secs(20),
                    ..Default::default()
                };
                let options = ClientOptions::new()
                    .with_timeout(Duration::from_secs(10))
                    .with_connect_timeout(Duration::from_secs(3))
                    .with_allow_http(true);
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .with_client_options(options);
                if let Some(region) = region {
                    builder = builder.with_region(region);
                }
                if let Some(keys) = credentials {
                    builder = builder
                        .with_access_key_id(&keys.access_key_id)
                        .with_secret_access_key(&keys.secret_access_key);
                    if let Some(token) = &keys.session_token {
                        builder = builder.with_token(token);
                    }
                }
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_virtual_hosted_style_request(false);
                }
                // An S3-compatible server (an endpoint given here or in AWS_ENDPOINT_URL) never
                // gets credentials from a cloud instance's metadata service: without any
                // configured, object_store would ask 169.254.169.254, a request to a machine
                // nobody configured, before failing. Refuse instead, saying how to give them.
                if let Some(url) = builder.get_config_value(&AmazonS3ConfigKey::Endpoint) {
                    if !has_configured_credentials(&builder) {
                        return Err(OpenError::NoCredentials { endpoint: url });
                    }
                }
                let endpoint_url = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
                let unsigned_env = std::env::var("AWS_UNSIGNED_PAYLOAD").ok();
                let sign_payload = signs_payload(endpoint_url.as_deref(), unsigned_env.as_deref());
                builder = builder.with_unsigned_payload(!sign_payload);
                let s3 = builder.build().map_err(|e| OpenError::S3 {
                    bucket: bucket.clone(),
                    message: one_line(&e.to_string()),
                })?;
                let signed = match sign_payload {
                    true => " (upload bodies signed)",
                    false => " (upload bodies not signed)",
                };
                (Arc::new(s3), signed.to_string())
            }
        };
        Ok(SegmentStore::counted(
            store,
            namespace,
            format!("{}{note}", Location::new(location.clone(), namespace)),
            local_root,
        ))
    }

    /// A store over any `object_store` implementation (tests inject faults this way).
    #[cfg(test)]
    pub(crate) fn over(store: Arc<dyn ObjectStore>, namespace: &str) -> SegmentStore {
        SegmentStore::counted(store, namespace, "test store".to_string(), None)
    }

    fn counted(
        store: Arc<dyn ObjectStore>,
        namespace: &str,
        description: String,
        local_root: Option<std::path::PathBuf>,
    ) -> SegmentStore {
        let requests = RequestCounts::default();
        SegmentStore {
            store: Arc::new(requests::Counted::new(store, requests.clone())),
            namespace: namespace.to_string(),
            description,
            local_root,
            requests,
        }
    }

    /// The requests made of the store so far, by operation and kind of object.
    pub(crate) fn requests(&self) -> &RequestCounts {
        &self.requests
    }

    pub(crate) fn describe(&self) -> &str {
        &self.description
    }

    /// Checks the store answers (start-up must fail loudly, not at the first produce).
    pub(crate) async fn probe(&self) -> Result<(), StoreError> {
        let prefix = Path::from(self.namespace.as_str());
        let listing = self.store.list_with_delimiter(Some(&prefix));
        match tokio::time::timeout(PROBE_TIMEOUT, listing).await {
            Ok(result) => result.map(|_| ()).map_err(StoreError::from),
            Err(_) => Err(StoreError::Other(format!(
                "no answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Like `probe`, for start-up: what is wrong, classified so the message can say what to
    /// do about it.
    pub(crate) async fn check(&self) -> Result<(), Unusable> {
        let prefix = Path::from(self.namespace.as_str());
        let listing = self.store.list_with_delimiter(Some(&prefix));
        match tokio::time::timeout(PROBE_TIMEOUT, listing).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(Unusable::classify(&e)),
            Err(_) => Err(Unusable::NoAnswer),
        }
    }

    pub(crate) fn segment_path(
        &self,
        topic: &str,
        partition: i32,
        base: i64,
        kind: SegmentObject,
    ) -> Path {
        self.object_path(topic, partition, base, None, kind)
    }

    /// Where a segment object of `generation` lives (None: compaction's, as `segment_path`).
    pub(crate) fn object_path(
        &self,
        topic: &str,
        partition: i32,
        base: i64,
        generation: Option<u64>,
        kind: SegmentObject,
    ) -> Path {
        let (prefix, extension) = kind.naming();
        let namespace = &self.namespace;
        Path::from(match generation {
            None => format!("{namespace}/{topic}/{partition}/{prefix}-{base:020}.{extension}"),
            Some(generation) => format!(
                "{namespace}/{topic}/{partition}/{prefix}-{base:020}-{generation:016x}.{extension}"
            ),
        })
    }

    /// Where a write-ahead object lives. `!` is no topic name's character, so the folder
    /// never meets a topic's.
    pub(crate) fn wal_path(&self, broker: i32, name: &str) -> Path {
        Path::from(format!(
            "{}/{WAL_FOLDER}/{broker}/{name}.wal",
            self.namespace
        ))
    }

    /// The broker that wrote the write-ahead object at `path` (`wal_path`).
    pub(crate) fn wal_broker(&self, path: &Path) -> Option<i32> {
        let mut parts = path
            .parts()
            .skip_while(|p| p.as_ref() != WAL_FOLDER)
            .skip(1);
        parts.next()?.as_ref().parse().ok()
    }

    /// Every write-ahead object, with when it was written (unix ms; for the sweep of
    /// uncommitted ones).
    pub(crate) async fn list_wal(&self) -> Result<Vec<(Path, i64)>, StoreError> {
        let prefix = Path::from(format!("{}/{WAL_FOLDER}", self.namespace));
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(objects
            .into_iter()
            .map(|meta| (meta.location, meta.last_modified.timestamp_millis()))
            .collect())
    }

    fn topic_prefix(&self, topic: &str) -> Path {
        Path::from(format!("{}/{topic}", self.namespace))
    }

    /// Writes an object that must not exist yet (If-None-Match: *), so nothing committed is
    /// ever overwritten.
    pub(crate) async fn put_new(
        &self,
        path: &Path,
        object: impl Into<PutPayload>,
    ) -> Result<(), StoreError> {
        let options = PutOptions::from(PutMode::Create);
        self.store.put_opts(path, object.into(), options).await?;
        Ok(())
    }

    pub(crate) async fn get(&self, path: &Path) -> Result<Bytes, StoreError> {
        Ok(self.store.get(path).await?.bytes().await?)
    }

    /// The whole object; a local file is memory-mapped instead of copied into a fresh buffer
    /// (its pages come straight from the page cache, faulted in here, on the caller's task).
    /// Objects are written to a staging name and linked into place complete, and a committed
    /// object is never changed, only unlinked, which leaves an existing mapping intact.
    pub(crate) async fn get_mapped(&self, path: &Path) -> Result<Bytes, StoreError> {
        let Some(root) = &self.local_root else {
            return self.get(path).await;
        };
        let failed = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound => StoreError::NotFound(path.to_string()),
            _ => StoreError::Other(format!("{path}: {e}")),
        };
        let file = std::fs::File::open(root.join(path.as_ref())).map_err(failed)?;
        if file.metadata().map_err(failed)?.len() == 0 {
            return Ok(Bytes::new());
        }
        // SAFETY: the file is immutable while mapped (see above), so the mapped bytes never
        // change under the `Bytes` that owns the mapping.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(failed)?;
        Ok(Bytes::from_owner(map))
    }

    /// Bytes `range` of an object; an empty range is no request (a cleaned segment may hold no
    /// batch at all, and S3 refuses an empty byte range).
    pub(crate) async fn get_range(
        &self,
        path: &Path,
        range: Range<u64>,
    ) -> Result<Bytes, StoreError> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        Ok(self.store.get_range(path, range).await?)
    }

    /// Bytes `range` of an object as the chunks its body arrived in, not copied together. A
    /// local file is read in one piece (its store would hand it over in 8 KiB chunks).
    pub(crate) async fn get_range_pieces(
        &self,
        path: &Path,
        range: Range<u64>,
    ) -> Result<Vec<Bytes>, StoreError> {
        if self.local_root.is_some() {
            return Ok(vec![self.get_range(path, range).await?]);
        }
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let expected = range.end - range.start;
        let options = GetOptions {
            range: Some(range.into()),
            ..GetOptions::default()
        };
        let result = self.store.get_opts(path, options).await?;
        let pieces: Vec<Bytes> = result.into_stream().try_collect().await?;
        // Only now, with the body read, does a chunk hold its buffer alone.
        let pieces: Vec<Bytes> = pieces.into_iter().map(without_slack).collect();
        let got: u64 = pieces.iter().map(|piece| piece.len() as u64).sum();
        if got != expected {
            return Err(StoreError::Other(format!(
                "{path}: the store sent {got} bytes for a range of {expected}"
            )));
        }
        Ok(pieces)
    }

    pub(crate) async fn delete(&self, path: &Path) -> Result<(), StoreError> {
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Names of the folders right under `{namespace}/{below}` (topics, or a topic's partitions).
    pub(crate) async fn list_folders(&self, below: &str) -> Result<Vec<String>, StoreError> {
        let parts = self.namespace.split('/').chain(below.split('/'));
        let prefix = Path::from_iter(parts.filter(|part| !part.is_empty()));
        let listing = self.store.list_with_delimiter(Some(&prefix)).await?;
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The objects of one partition, sorted by base offset (data, index, producer snapshot).
    pub(crate) async fn list_partition(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<ListedSegment>, StoreError> {
        let prefix = Path::from(format!("{}/{topic}/{partition}", self.namespace));
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        let mut listed: Vec<ListedSegment> = objects
            .iter()
            .filter_map(|meta| {
                let (prefix, rest) = meta.location.filename()?.split_once('-')?;
                let (stem, extension) = rest.split_once('.')?;
                let kind = [
                    SegmentObject::Data,
                    SegmentObject::Index,
                    SegmentObject::ProducerSnapshot,
                ]
                .into_iter()
                .find(|kind| kind.naming() == (prefix, extension))?;
                let (base_offset, generation) = parse_stem(stem)?;
                Some(ListedSegment {
                    base_offset,
                    generation,
                    kind,
                    size: meta.size,
                })
            })
            .collect();
        listed.sort_by_key(|s| (s.base_offset, s.kind, s.generation));
        Ok(listed)
    }

    /// Deletes every object of a topic; returns how many went.
    pub(crate) async fn delete_topic_objects(&self, topic: &str) -> Result<usize, StoreError> {
        let prefix = self.topic_prefix(topic);
        let paths: Vec<Path> = self
            .store
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        for path in &paths {
            self.delete(path).await?;
        }
        Ok(paths.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_range_is_read_as_the_chunks_it_arrives_in_and_a_file_in_one() {
        let store = SegmentStore::open(&StorageLocation::Memory, "ns").unwrap();
        let path = Path::from("ns/object");
        let pieces = [Bytes::from(vec![1u8; 100]), Bytes::from(vec![2u8; 50])];
        store
            .put_new(&path, PutPayload::from_iter(pieces.clone()))
            .await
            .unwrap();
        let read = store.get_range_pieces(&path, 90..120).await.unwrap();
        assert_eq!(read.len(), 2, "not copied together");
        assert_eq!(read[0].as_ptr(), pieces[0][90..].as_ptr());
        assert_eq!(read[1].as_ptr(), pieces[1].as_ptr());
        assert_eq!(read.concat(), [&[1u8; 10][..], &[2u8; 20]].concat());
        assert!(store
            .get_range_pieces(&path, 5..5)
            .await
            .unwrap()
            .is_empty());

        let dir = tempfile::tempdir().unwrap();
        let local = SegmentStore::open(&StorageLocation::LocalDir(dir.path().into()), "ns");
        let local = local.unwrap();
        local.put_new(&path, vec![7u8; 100_000]).await.unwrap();
        let read = local.get_range_pieces(&path, 10..90_000).await.unwrap();
        assert_eq!((read.len(), read[0].len()), (1, 89_990));
    }

    #[test]
    fn a_chunk_alone_in_a_much_larger_buffer_is_copied_out_of_it() {
        let mut buffer = bytes::BytesMut::with_capacity(64 * 1024);
        buffer.extend_from_slice(&[1; 1000]);
        let chunk = buffer.split().freeze();
        drop(buffer); // the client moved on to another buffer
        let alone = without_slack(chunk)
            .try_into_mut()
            .expect("a buffer of its own");
        assert_eq!((alone.len(), alone.capacity()), (1000, 1000));
        // One that (nearly) fills its buffer, or shares it, stays where it is.
        let full = Bytes::from(vec![2; 4096]);
        let at = full.as_ptr();
        assert_eq!(without_slack(full).as_ptr(), at);
        let mut shared = bytes::BytesMut::with_capacity(64 * 1024);
        shared.extend_from_slice(&[3; 1000]);
        let first = shared.split().freeze();
        let at = first.as_ptr();
        assert_eq!(without_slack(first).as_ptr(), at);
    }

    #[test]
    fn payloads_are_signed_only_where_no_tls_protects_them() {
        assert!(!signs_payload(None, None), "AWS itself: HTTPS");
        assert!(!signs_payload(Some("https://minio.local:9000"), None));
        assert!(signs_payload(Some("http://127.0.0.1:9000"), None));
        assert!(signs_payload(Some("HTTP://minio:9000"), None));
        // AWS_UNSIGNED_PAYLOAD decides when set
        assert!(!signs_payload(Some("http://127.0.0.1:9000"), Some("true")));
        assert!(signs_payload(None, Some("false")));
    }

    #[test]
    fn an_endpoint_without_credentials_is_refused_before_any_request() {
        let location = StorageLocation::S3 {
            bucket: "b".into(),
            region: Some("us-east-1".into()),
            endpoint: Some("http://127.0.0.1:9".into()),
            credentials: None,
        };
        let keys = S3Credentials {
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
            session_token: None,
        };
        let with_keys = match location.clone() {
            StorageLocation::S3 {
                bucket,
                region,
                endpoint,
                ..
            } => StorageLocation::S3 {
                bucket,
                region,
                endpoint,
                credentials: Some(keys),
            },
            _ => unreachable!(),
        };
        assert!(SegmentStore::open(&with_keys, "ns").is_ok());
        // Only meaningful where the test's environment has no AWS credentials of its own.
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && std::env::var_os("AWS_SECRET_ACCESS_KEY").is_none()
            && std::env::var_os("AWS_SKIP_SIGNATURE").is_none()
            && std::env::var_os("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_none()
            && std::env::var_os("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_none()
            && std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_none()
        {
            let refused = SegmentStore::open(&location, "ns").err();
            assert!(
                matches!(refused, Some(OpenError::NoCredentials { .. })),
                "{refused:?}"
            );
        }
    }

    #[tokio::test]
    async fn conditional_create_never_overwrites() {
        let store = SegmentStore::open(&StorageLocation::Memory, "ns").unwrap();
        let path = store.segment_path("orders", 0, 5, SegmentObject::Data);
        assert_eq!(
            path.as_ref(),
            "ns/orders/0/segment-00000000000000000005.kfs"
        );
        store
            .put_new(&path, Bytes::from_static(b"one"))
            .await
            .unwrap();
        let again = store.put_new(&path, Bytes::from_static(b"two")).await;
        assert!(matches!(again, Err(StoreError::AlreadyExists(_))));
        assert_eq!(store.get(&path).await.unwrap(), Bytes::from_static(b"one"));
    }

    #[tokio::test]
    async fn local_objects_read_mapped_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SegmentStore::open(&StorageLocation::LocalDir(dir.path().into()), "ns").unwrap();
        let path = store.segment_path("t", 0, 0, SegmentObject::Data);
        let missing = store.get_mapped(&path).await;
        assert!(matches!(missing, Err(StoreError::NotFound(_))));
        let object = Bytes::from(vec![7u8; 10_000]);
        store.put_new(&path, object.clone()).await.unwrap();
        assert_eq!(store.get_mapped(&path).await.unwrap(), object);
        // an unlinked file stays readable through a mapping made before
        let mapped = store.get_mapped(&path).await.unwrap();
        store.delete(&path).await.unwrap();
        assert_eq!(mapped, object);
    }

    #[tokio::test]
    async fn lists_a_partition_in_offset_order() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SegmentStore::open(&StorageLocation::LocalDir(dir.path().into()), "ns").unwrap();
        for base in [20, 0, 10] {
            for kind in [SegmentObject::Index, SegmentObject::Data] {
                let path = store.segment_path("t", 1, base, kind);
                store
                    .put_new(&path, Bytes::from_static(b"x"))
                    .await
                    .unwrap();
            }
        }
        let snapshot = store.segment_path("t", 1, 10, SegmentObject::ProducerSnapshot);
        assert!(snapshot
            .as_ref()
            .ends_with("t/1/producers-00000000000000000010.json"));
        store
            .put_new(&snapshot, Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let cleaned = store.object_path("t", 1, 10, Some(0xab), SegmentObject::Data);
        assert!(cleaned
            .as_ref()
            .ends_with("t/1/segment-00000000000000000010-00000000000000ab.kfs"));
        store
            .put_new(&cleaned, Bytes::from_static(b"x"))
            .await
            .unwrap();
        let other = store.segment_path("t", 11, 0, SegmentObject::Data);
        store
            .put_new(&other, Bytes::from_static(b"x"))
            .await
            .unwrap();
        let listed = store.list_partition("t", 1).await.unwrap();
        let order: Vec<_> = listed
            .iter()
            .map(|s| (s.base_offset, s.kind, s.generation))
            .collect();
        assert_eq!(
            order,
            vec![
                (0, SegmentObject::Data, None),
                (0, SegmentObject::Index, None),
                (10, SegmentObject::Data, None),
                (10, SegmentObject::Data, Some(0xab)),
                (10, SegmentObject::Index, None),
                (10, SegmentObject::ProducerSnapshot, None),
                (20, SegmentObject::Data, None),
                (20, SegmentObject::Index, None),
            ]
        );
        assert_eq!(store.delete_topic_objects("t").await.unwrap(), 9);
        assert!(store.list_partition("t", 1).await.unwrap().is_empty());
    }
}
