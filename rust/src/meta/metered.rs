//! A `KvStore` layer that times every request to the store beneath it and counts failures,
//! per store and operation, for the `kafscale_metadata_request_*` metrics. The store itself
//! stays unaware.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::watch;

use super::kv::{ChangeStream, Compare, KeyValue, KvStore, Listing, MetaError, Op};
use crate::metrics::Metrics;

/// Every operation label `record` is given.
const OPERATIONS: [&str; 5] = ["get", "range", "txn", "watch", "end_session"];

pub(crate) struct MeteredKv<S> {
    inner: S,
    /// The `store` label: `etcd` or `embedded`.
    store: &'static str,
    metrics: Arc<Metrics>,
}

impl<S: KvStore> MeteredKv<S> {
    pub(crate) fn new(inner: S, store: &'static str, metrics: Arc<Metrics>) -> Self {
        // Error counters exist from the start at 0, so that a rate() over them (an alert)
        // sees the first failure rather than a series appearing from nothing.
        for operation in OPERATIONS {
            metrics.preset_metadata_errors(store, operation);
        }
        MeteredKv {
            inner,
            store,
            metrics,
        }
    }

    fn record<T>(
        &self,
        operation: &'static str,
        started: Instant,
        result: Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        self.metrics
            .observe_metadata(self.store, operation, started, result.is_err());
        result
    }
}

#[async_trait]
impl<S: KvStore> KvStore for MeteredKv<S> {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let started = Instant::now();
        let result = self.inner.get(key).await;
        self.record("get", started, result)
    }

    async fn range(&self, prefix: &str) -> Result<Listing, MetaError> {
        let started = Instant::now();
        let result = self.inner.range(prefix).await;
        self.record("range", started, result)
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        let started = Instant::now();
        let result = self.inner.txn(compares, ops).await;
        self.record("txn", started, result)
    }

    /// Times setting the watch up; the stream itself lives as long as the watch.
    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError> {
        let started = Instant::now();
        let result = self.inner.watch(prefix, after).await;
        self.record("watch", started, result)
    }

    fn session(&self) -> watch::Receiver<u64> {
        self.inner.session()
    }

    async fn end_session(&self) -> Result<(), MetaError> {
        let started = Instant::now();
        let result = self.inner.end_session().await;
        self.record("end_session", started, result)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn max_txn_ops(&self) -> usize {
        self.inner.max_txn_ops()
    }
}
