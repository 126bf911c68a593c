//! A `KvStore` for tests that puts the metadata store's faults where a test wants them
//! (failpoints, not timing): a transaction that lands but whose answer is lost, a transaction
//! held until the test lets it go, a session that ends (as when etcd expires the lease of a
//! frozen broker), watches that break or fall behind and a store restored to an earlier
//! revision.

use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::{watch, Notify};

use super::kv::{ChangeStream, Compare, KeyValue, KvStore, Listing, MetaError, Op};

/// Which transactions a failpoint applies to.
type Matcher = Box<dyn Fn(&[Op]) -> bool + Send + Sync>;

enum Fault {
    /// Applied by the store, answered with an error.
    LoseAnswer,
    /// Not applied, answered with an error.
    Fail,
    /// Sent to the store once the test calls `release`.
    Hold(Arc<Notify>),
}

struct Failpoint {
    matches: Matcher,
    fault: Fault,
}

pub(crate) struct FaultyKv {
    inner: RwLock<Arc<dyn KvStore>>,
    session: watch::Sender<u64>,
    /// Armed failpoints; each applies to the first transaction it matches, once.
    failpoints: Mutex<Vec<Failpoint>>,
    /// Bumped to break every watch stream handed out so far.
    watches: watch::Sender<u64>,
    /// Transactions that tripped a failpoint so far.
    tripped: watch::Sender<usize>,
    /// While true, watches hold back what they would deliver.
    watches_paused: watch::Sender<bool>,
    /// The prefixes listed so far.
    listed: watch::Sender<Vec<String>>,
}

/// True for a transaction that writes a key containing `part`.
pub(crate) fn writes(part: &'static str) -> impl Fn(&[Op]) -> bool + Send + Sync {
    move |ops| {
        ops.iter().any(|op| match op {
            Op::Put(key, _) | Op::PutEphemeral(key, _) | Op::Delete(key) => key.contains(part),
            Op::DeletePrefix(prefix) => prefix.contains(part),
        })
    }
}

impl FaultyKv {
    pub(crate) fn new(inner: Arc<dyn KvStore>) -> FaultyKv {
        FaultyKv {
            inner: RwLock::new(inner),
            session: watch::channel(1).0,
            failpoints: Mutex::default(),
            watches: watch::channel(0).0,
            tripped: watch::channel(0).0,
            watches_paused: watch::channel(false).0,
            listed: watch::channel(Vec::new()).0,
        }
    }

    fn inner(&self) -> Arc<dyn KvStore> {
        self.inner.read().unwrap().clone()
    }

    /// The next transaction `matches` accepts is applied, but answered with an error.
    pub(crate) fn lose_answer(&self, matches: impl Fn(&[Op]) -> bool + Send + Sync + 'static) {
        self.arm(matches, Fault::LoseAnswer);
    }

    /// The next transaction `matches` accepts is not applied, and answered with an error.
    pub(crate) fn fail(&self, matches: impl Fn(&[Op]) -> bool + Send + Sync + 'static) {
        self.arm(matches, Fault::Fail);
    }

    /// The next transaction `matches` accepts waits until `release` is notified.
    pub(crate) fn hold(
        &self,
        matches: impl Fn(&[Op]) -> bool + Send + Sync + 'static,
        release: Arc<Notify>,
    ) {
        self.arm(matches, Fault::Hold(release));
    }

    fn arm(&self, matches: impl Fn(&[Op]) -> bool + Send + Sync + 'static, fault: Fault) {
        self.failpoints.lock().unwrap().push(Failpoint {
            matches: Box::new(matches),
            fault,
        });
    }

    /// Returns once `count` transactions tripped a failpoint.
    pub(crate) async fn tripped(&self, count: usize) {
        let mut tripped = self.tripped.subscribe();
        let _ = tripped.wait_for(|n| *n >= count).await;
    }

    /// The session ends as when the store expired its lease: its ephemeral keys go, and a
    /// new session begins.
    pub(crate) async fn expire_session(&self) {
        self.inner().end_session().await.unwrap();
        self.session.send_modify(|n| *n += 1);
    }

    /// Every watch handed out so far fails (as when the store restarts).
    pub(crate) fn break_watches(&self) {
        self.watches.send_modify(|n| *n += 1);
    }

    /// Watches deliver nothing from now on until `resume_watches` (a watch that falls behind
    /// the store); then they deliver what they held, in order.
    pub(crate) fn pause_watches(&self) {
        self.watches_paused.send_replace(true);
    }

    pub(crate) fn resume_watches(&self) {
        self.watches_paused.send_replace(false);
    }

    /// Returns once a prefix containing `part` was listed.
    pub(crate) async fn listed(&self, part: &str) {
        let mut listed = self.listed.subscribe();
        let _ = listed
            .wait_for(|prefixes| prefixes.iter().any(|p| p.contains(part)))
            .await;
    }

    /// From now on the store is `restored` (a copy of an earlier state: its revision may be
    /// lower than any seen so far); the watches on the old one fail.
    pub(crate) fn restore(&self, restored: Arc<dyn KvStore>) {
        *self.inner.write().unwrap() = restored;
        self.break_watches();
    }

    fn take_failpoint(&self, ops: &[Op]) -> Option<Fault> {
        let mut failpoints = self.failpoints.lock().unwrap();
        let at = failpoints.iter().position(|f| (f.matches)(ops))?;
        Some(failpoints.remove(at).fault)
    }
}

#[async_trait]
impl KvStore for FaultyKv {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        self.inner().get(key).await
    }

    async fn range(&self, prefix: &str) -> Result<Listing, MetaError> {
        let listing = self.inner().range(prefix).await;
        self.listed
            .send_modify(|listed| listed.push(prefix.to_string()));
        listing
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        let session = *self.session.borrow();
        let mut revisions = Vec::with_capacity(compares.len());
        for compare in compares {
            match compare {
                Compare::Session(expected) if expected != session => return Ok(None),
                Compare::Session(_) => {}
                other => revisions.push(other),
            }
        }
        let fault = self.take_failpoint(&ops);
        if fault.is_some() {
            self.tripped.send_modify(|n| *n += 1);
        }
        match fault {
            Some(Fault::Fail) => Err(MetaError::Unavailable("failed (failpoint)".into())),
            Some(Fault::LoseAnswer) => {
                self.inner().txn(revisions, ops).await?;
                Err(MetaError::Unavailable("answer lost (failpoint)".into()))
            }
            Some(Fault::Hold(release)) => {
                release.notified().await;
                // What etcd does with a write under a lease that expired meanwhile.
                let ephemeral = ops.iter().any(|op| matches!(op, Op::PutEphemeral(..)));
                if ephemeral && *self.session.borrow() != session {
                    return Err(MetaError::Unavailable("requested lease not found".into()));
                }
                self.inner().txn(revisions, ops).await
            }
            None => self.inner().txn(revisions, ops).await,
        }
    }

    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError> {
        let stream = self.inner().watch(prefix, after).await?;
        let mut broken = self.watches.subscribe();
        broken.mark_unchanged();
        // Ends with an error once the watches are broken.
        let breaks = futures::stream::once(async move {
            let _ = broken.changed().await;
            Err(MetaError::Unavailable("watch broken (failpoint)".into()))
        });
        let paused = self.watches_paused.subscribe();
        let held = stream.then(move |item| {
            let mut paused = paused.clone();
            async move {
                let _ = paused.wait_for(|paused| !paused).await;
                item
            }
        });
        // (the mirror drops a stream at its first error)
        Ok(futures::stream::select(held, breaks).boxed())
    }

    fn session(&self) -> watch::Receiver<u64> {
        self.session.subscribe()
    }

    async fn end_session(&self) -> Result<(), MetaError> {
        self.inner().end_session().await
    }

    fn describe(&self) -> String {
        format!("faulty {}", self.inner().describe())
    }

    fn max_txn_ops(&self) -> usize {
        self.inner().max_txn_ops()
    }
}
