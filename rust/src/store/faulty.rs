//! A memory object store with controllable faults, for unit tests of what the log does when
//! storage is slow or failing: uploads under a prefix can be held until released, and the
//! next uploads can be made to fail the way a transient S3 error does, and listings and reads
//! can be held.
//! Reads are recorded.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use tokio::sync::Semaphore;

#[derive(Debug, Default)]
pub(crate) struct FaultyStore {
    inner: Arc<InMemory>,
    /// Uploads under this prefix wait for a permit.
    gate: Mutex<Option<(String, Arc<Semaphore>)>>,
    failing_puts: AtomicUsize,
    held_puts: AtomicUsize,
    /// The path of every read, in order.
    reads: Mutex<Vec<String>>,
    /// Listings wait for a permit while this is set.
    list_gate: Mutex<Option<Arc<ListGate>>>,
    /// Reads of objects whose path ends with this wait for a permit.
    get_gate: Mutex<Option<(String, Arc<Semaphore>)>>,
    held_gets: AtomicUsize,
}

/// Listings held until released, and how many are waiting.
#[derive(Debug)]
pub(crate) struct ListGate {
    pub permits: Semaphore,
    waiting: AtomicUsize,
}

impl ListGate {
    /// How many listings are waiting at the gate right now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

impl FaultyStore {
    /// Holds every upload whose path starts with `prefix` until `release` lets it through.
    pub(crate) fn hold_puts(&self, prefix: &str) -> Arc<Semaphore> {
        let permits = Arc::new(Semaphore::new(0));
        *self.gate.lock().unwrap() = Some((prefix.to_string(), permits.clone()));
        permits
    }

    /// Makes the next `count` uploads fail with a generic (retriable-looking) error.
    pub(crate) fn fail_next_puts(&self, count: usize) {
        self.failing_puts.store(count, Ordering::SeqCst);
    }

    /// Holds every listing until the gate's `permits` let it through.
    pub(crate) fn hold_lists(&self) -> Arc<ListGate> {
        let gate = Arc::new(ListGate {
            permits: Semaphore::new(0),
            waiting: AtomicUsize::new(0),
        });
        *self.list_gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// Holds every read of an object whose path ends with `suffix` until `release` lets it
    /// through.
    pub(crate) fn hold_gets(&self, suffix: &str) -> Arc<Semaphore> {
        let permits = Arc::new(Semaphore::new(0));
        *self.get_gate.lock().unwrap() = Some((suffix.to_string(), permits.clone()));
        permits
    }

    /// How many reads are waiting at the gate right now.
    pub(crate) fn held_gets(&self) -> usize {
        self.held_gets.load(Ordering::SeqCst)
    }

    /// How many uploads are waiting at the gate right now.
    pub(crate) fn held_puts(&self) -> usize {
        self.held_puts.load(Ordering::SeqCst)
    }

    /// How many reads asked for an object whose path ends with `suffix`.
    pub(crate) fn reads_of(&self, suffix: &str) -> usize {
        let reads = self.reads.lock().unwrap();
        reads.iter().filter(|path| path.ends_with(suffix)).count()
    }

    fn gate_for(&self, location: &Path) -> Option<Arc<Semaphore>> {
        let gate = self.gate.lock().unwrap();
        let (prefix, permits) = gate.as_ref()?;
        location
            .as_ref()
            .starts_with(prefix.as_str())
            .then(|| permits.clone())
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore")
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if let Some(permits) = self.gate_for(location) {
            self.held_puts.fetch_add(1, Ordering::SeqCst);
            permits.acquire().await.expect("gate closed").forget();
            self.held_puts.fetch_sub(1, Ordering::SeqCst);
        }
        let failing = self
            .failing_puts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(object_store::Error::Generic {
                store: "FaultyStore",
                source: "injected upload failure".into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.reads.lock().unwrap().push(location.to_string());
        let gate = self.get_gate.lock().unwrap().clone();
        if let Some((_, permits)) = gate.filter(|(suffix, _)| location.as_ref().ends_with(suffix)) {
            self.held_gets.fetch_add(1, Ordering::SeqCst);
            permits.acquire().await.expect("gate closed").forget();
            self.held_gets.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.get_opts(location, options).await
    }

    async fn delete(&self, location: &Path) -> Result<()> {
        self.inner.delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let Some(gate) = self.list_gate.lock().unwrap().clone() else {
            return self.inner.list(prefix);
        };
        // What the store holds when the listing is let through, as a slow listing would see.
        let (inner, prefix) = (self.inner.clone(), prefix.cloned());
        futures::stream::once(async move {
            gate.waiting.fetch_add(1, Ordering::SeqCst);
            gate.permits.acquire().await.expect("gate closed").forget();
            gate.waiting.fetch_sub(1, Ordering::SeqCst);
            inner.list(prefix.as_ref())
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.copy_if_not_exists(from, to).await
    }
}
