//! Counts every request made of the object store, by operation and by the kind of object it
//! is about: requests are what object storage bills (a PUT costs about twelve GETs), and the
//! write path is designed around how many it makes per GiB. Wraps whatever store the
//! location opened, so no caller can make one uncounted; the broker serves the counts as
//! `kafscale_object_store_requests_total`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::WAL_FOLDER;
use crate::meta::published::PUBLISHED_FOLDER;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// `put`, `get` (whole or ranged, and heads), `list` or `delete` (copies count as `put`:
    /// S3 bills them so).
    pub operation: &'static str,
    /// `wal`, `segment`, `index`, `producer_state`, `published_metadata` or `other`.
    pub object: &'static str,
}

/// Requests made so far, shared with the metrics registry.
pub(crate) type RequestCounts = Family<RequestLabels, Counter>;

/// The kind of object at `path`, from the layout (`store` and `meta::published`).
fn object_kind(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    if path.split('/').any(|part| part == PUBLISHED_FOLDER) {
        "published_metadata"
    } else if path.split('/').any(|part| part == WAL_FOLDER) {
        "wal"
    } else if name.ends_with(".kfs") {
        "segment"
    } else if name.ends_with(".index") {
        "index"
    } else if name.starts_with("producers-") {
        "producer_state"
    } else {
        "other"
    }
}

/// An object store whose requests are counted in `counts`.
pub(super) struct Counted {
    inner: Arc<dyn ObjectStore>,
    counts: RequestCounts,
}

impl Counted {
    pub(super) fn new(inner: Arc<dyn ObjectStore>, counts: RequestCounts) -> Counted {
        Counted { inner, counts }
    }

    fn count(&self, operation: &'static str, path: Option<&Path>) {
        let object = path.map_or("other", |p| object_kind(p.as_ref()));
        self.counts
            .get_or_create(&RequestLabels { operation, object })
            .inc();
    }
}

impl fmt::Debug for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counted({})", self.inner)
    }
}

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner, f)
    }
}

#[async_trait]
impl ObjectStore for Counted {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.count("put", Some(location));
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.count("put", Some(location));
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.count("get", Some(location));
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.count("delete", Some(location));
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        // One listing may take several requests (a page per thousand keys); counted as one.
        self.count("list", prefix);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.count("list", prefix);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.count("put", Some(to));
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.count("put", Some(to));
        self.inner.copy_if_not_exists(from, to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_told_apart_by_the_layout() {
        for (path, kind) in [
            ("ns/!wal/1/00ab-000000000001.wal", "wal"),
            ("ns/t/0/segment-00000000000000000000.kfs", "segment"),
            ("ns/t/0/segment-00000000000000000000.index", "index"),
            (
                "ns/t/0/producers-00000000000000000042.json",
                "producer_state",
            ),
            ("ns/!meta/topics/t", "published_metadata"),
            ("ns/t/0", "other"),
        ] {
            assert_eq!(object_kind(path), kind, "{path}");
        }
    }
}
