//! An in-memory copy of everything under a prefix of the metadata store, kept current by a
//! watch, so hot paths (Metadata requests, ownership decisions) never wait for the store.
//! Sub-prefixes the core never reads (consumer groups) can be left out: their keys are not
//! copied and a change to them alone wakes nobody.
//!
//! Besides the copy, the mirror keeps the set of keys changed since its consumer last took
//! them (`take_changes`), so the cluster view is updated key by key instead of being rebuilt.
//!
//! When the watch fails (store unreachable, history compacted, watcher too slow) the copy is
//! marked not live and rebuilt from a fresh listing, retried with backoff until it works. A
//! listing at a lower revision than the copy had means the store went back in time (restored
//! from a backup): the copy is rebuilt from it all the same, and `restores` tells the broker,
//! whose ownership may no longer hold there.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockWriteGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::kv::{Change, ChangeStream, KeyValue, KvStore, Listing, MetaError};

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long `caught_up` trusts the watch to deliver a revision before it lists instead (the
/// watch never reports a revision that changed nothing under the prefix).
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

pub(crate) struct Mirror {
    kv: Arc<dyn KvStore>,
    prefix: String,
    excluded: Vec<String>,
    state: RwLock<State>,
    live: AtomicBool,
    /// The revision after each change to the copy.
    changes: watch::Sender<i64>,
    /// The revision the copy reflects, after every batch (also one that only touched excluded
    /// keys): what `caught_up` waits for.
    reached: watch::Sender<i64>,
    /// Counts the times the store was found at a lower revision than the copy.
    restores: watch::Sender<u64>,
    follower: OnceLock<AbortHandle>,
}

/// The copy and the store revision it reflects, changed together.
struct State {
    entries: BTreeMap<String, KeyValue>,
    revision: i64,
    /// Keys put or deleted since the consumer last took them (a set: bounded by the keys).
    changed: BTreeSet<String>,
}

/// The keys changed since the last take, with their values now (None: deleted), and the
/// revision the copy reflects: every change up to it is in there or in an earlier take.
pub(crate) struct Changes {
    pub keys: Vec<(String, Option<KeyValue>)>,
    pub revision: i64,
}

impl Mirror {
    /// Lists the prefix and starts following it, leaving out keys under any of `excluded`.
    /// Fails if the store cannot be listed or watched now.
    pub(crate) async fn start(
        kv: Arc<dyn KvStore>,
        prefix: &str,
        excluded: &[String],
    ) -> Result<Arc<Mirror>, MetaError> {
        let listing = kv.range(prefix).await?;
        let stream = kv.watch(prefix, listing.revision).await?;
        let mirror = Arc::new(Mirror {
            kv,
            prefix: prefix.to_string(),
            excluded: excluded.to_vec(),
            state: RwLock::new(State {
                entries: BTreeMap::new(),
                revision: 0,
                changed: BTreeSet::new(),
            }),
            live: AtomicBool::new(true),
            changes: watch::channel(0).0,
            reached: watch::channel(0).0,
            restores: watch::channel(0).0,
            follower: OnceLock::new(),
        });
        mirror.install(listing);
        let follower = tokio::spawn(follow(Arc::downgrade(&mirror), stream));
        let _ = mirror.follower.set(follower.abort_handle());
        Ok(mirror)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, key: &str) -> Option<KeyValue> {
        self.read().entries.get(key).cloned()
    }

    /// Every mirrored key starting with `prefix`, in key order.
    pub(crate) fn range(&self, prefix: &str) -> Vec<KeyValue> {
        entries_under(&self.read().entries, prefix)
    }

    /// Every mirrored key starting with `prefix` and the revision they reflect; forgets the
    /// changed keys (the caller starts from this listing instead).
    pub(crate) fn take_all(&self, prefix: &str) -> (Vec<KeyValue>, i64) {
        let mut state = self.write();
        state.changed.clear();
        (entries_under(&state.entries, prefix), state.revision)
    }

    /// The keys changed since the last `take_changes` or `take_all`. Meant for one consumer
    /// (the ownership reconciler): what it takes, nobody else sees.
    pub(crate) fn take_changes(&self) -> Changes {
        let mut state = self.write();
        let changed = std::mem::take(&mut state.changed);
        let keys = changed
            .into_iter()
            .map(|key| {
                let value = state.entries.get(&key).cloned();
                (key, value)
            })
            .collect();
        Changes {
            keys,
            revision: state.revision,
        }
    }

    /// The store revision the copy reflects (for the keys it copies).
    pub(crate) fn revision(&self) -> i64 {
        self.read().revision
    }

    /// Whether the copy is following the store right now (false while it is rebuilding).
    pub(crate) fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Marks the copy as rebuilding or live again, as a watch failure and its resync do.
    #[cfg(test)]
    pub(crate) fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::Release);
    }

    /// Changes each time the store was found restored to an earlier revision.
    pub(crate) fn restores(&self) -> watch::Receiver<u64> {
        self.restores.subscribe()
    }

    /// The revision the copy reflects, after every batch the watch brought.
    pub(crate) fn reached(&self) -> watch::Receiver<i64> {
        self.reached.subscribe()
    }

    /// The revision after each change to the copy: wakes consumers up to re-read it.
    pub(crate) fn changes(&self) -> watch::Receiver<i64> {
        self.changes.subscribe()
    }

    /// Returns once the copy reflects at least `revision` (read-your-writes after a
    /// transaction). If the watch does not bring it soon, lists the store instead; if that
    /// fails too the copy stays as it is (the store is unreachable, and the follower catches
    /// up when it is back).
    pub(crate) async fn caught_up(&self, revision: i64) {
        let mut reflected = self.reached.subscribe();
        let reached = reflected.wait_for(|current| *current >= revision);
        if let Ok(Ok(_)) = tokio::time::timeout(CATCH_UP_WAIT, reached).await {
            return;
        }
        match self.kv.range(&self.prefix).await {
            Ok(listing) => self.install(listing),
            Err(e) => tracing::warn!("metadata mirror cannot catch up to revision {revision}: {e}"),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A poisoned lock means a panic between two map updates of one batch at worst; the
        // next re-list replaces the map anyway.
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the copy with a listing, unless the copy is newer already (then the watch
    /// started at the listing skips what the copy has and continues from there). The keys
    /// that differ count as changed, so a resync after missed events reports just those.
    fn install(&self, listing: Listing) {
        self.install_into(&mut self.write(), listing);
    }

    fn install_into(&self, state: &mut State, listing: Listing) {
        if listing.revision < state.revision {
            return;
        }
        let entries: BTreeMap<String, KeyValue> = listing
            .kvs
            .into_iter()
            .filter(|kv| self.copies(&kv.key))
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        let old = std::mem::take(&mut state.entries);
        let gone = old.keys().filter(|key| !entries.contains_key(*key));
        let differ = entries
            .iter()
            .filter(|(key, kv)| old.get(*key) != Some(kv))
            .map(|(key, _)| key);
        let changed: Vec<String> = gone.chain(differ).cloned().collect();
        state.changed.extend(changed);
        state.entries = entries;
        state.revision = listing.revision;
        self.changes.send_replace(listing.revision);
        self.reached.send_replace(listing.revision);
    }

    /// Applies one revision's changes, unless the copy has it already.
    fn apply(&self, batch: Vec<Change>) {
        let Some(revision) = batch.first().map(|change| match change {
            Change::Put(kv) => kv.mod_revision,
            Change::Delete { revision, .. } => *revision,
        }) else {
            return;
        };
        let mut state = self.write();
        if revision <= state.revision {
            return;
        }
        let mut copied = false;
        for change in batch {
            if !self.copies(change.key()) {
                continue;
            }
            copied = true;
            state.changed.insert(change.key().to_string());
            match change {
                Change::Put(kv) => {
                    state.entries.insert(kv.key.clone(), kv);
                }
                Change::Delete { key, .. } => {
                    state.entries.remove(&key);
                }
            }
        }
        state.revision = revision;
        if copied {
            self.changes.send_replace(revision);
        }
        self.reached.send_replace(revision);
    }

    fn copies(&self, key: &str) -> bool {
        !self.excluded.iter().any(|prefix| key.starts_with(prefix))
    }

    /// A fresh listing and a watch from it.
    async fn resync(&self) -> Result<ChangeStream, MetaError> {
        // A listing asked for after the copy reached this revision reflects at least it,
        // unless the store went back.
        let known = self.read().revision;
        let listing = self.kv.range(&self.prefix).await?;
        let stream = self.kv.watch(&self.prefix, listing.revision).await?;
        let restored = listing.revision < known;
        {
            let mut state = self.write();
            if restored {
                tracing::error!(
                    "the metadata store is at revision {} where it was at {known} (restored \
                     from a backup?); rebuilding the copy of {} from it",
                    listing.revision,
                    self.prefix
                );
                state.revision = 0;
            }
            self.install_into(&mut state, listing);
        }
        if restored {
            self.restores.send_modify(|n| *n += 1);
        }
        Ok(stream)
    }
}

/// Copies of the entries whose keys start with `prefix`, in key order.
fn entries_under(entries: &BTreeMap<String, KeyValue>, prefix: &str) -> Vec<KeyValue> {
    entries
        .range(prefix.to_string()..)
        .take_while(|(key, _)| key.starts_with(prefix))
        .map(|(_, kv)| kv.clone())
        .collect()
}

impl Drop for Mirror {
    fn drop(&mut self) {
        if let Some(follower) = self.follower.get() {
            follower.abort();
        }
    }
}

/// Applies the watch to the copy; when it fails, rebuilds the copy and watches again. Holds
/// the mirror only while using it, so dropping the last handle ends the task.
async fn follow(mirror: Weak<Mirror>, mut stream: ChangeStream) {
    let mut backoff = MIN_BACKOFF;
    loop {
        while let Some(item) = stream.next().await {
            let Some(mirror) = mirror.upgrade() else {
                return;
            };
            match item {
                Ok(batch) => {
                    mirror.apply(batch);
                    backoff = MIN_BACKOFF;
                }
                Err(e) => {
                    tracing::warn!("metadata watch on {} failed: {e}", mirror.prefix);
                    break;
                }
            }
        }
        loop {
            match mirror.upgrade() {
                Some(mirror) => mirror.live.store(false, Ordering::Release),
                None => return,
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            let Some(mirror) = mirror.upgrade() else {
                return;
            };
            match mirror.resync().await {
                Ok(resumed) => {
                    stream = resumed;
                    mirror.live.store(true, Ordering::Release);
                    tracing::info!("metadata watch on {} resumed", mirror.prefix);
                    break;
                }
                Err(e) => tracing::warn!("metadata mirror of {} cannot resync: {e}", mirror.prefix),
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Instant;

    use bytes::Bytes;

    use super::*;
    use crate::meta::embedded::EmbeddedStore;
    use crate::meta::etcd::EtcdStore;
    use crate::meta::faulty_kv::FaultyKv;
    use crate::meta::kv::Op;
    use crate::meta::test_etcd::TestEtcd;

    fn put(key: &str, value: &'static [u8]) -> Op {
        Op::Put(key.into(), Bytes::from_static(value))
    }

    fn keys(entries: &[KeyValue]) -> Vec<&str> {
        entries.iter().map(|kv| kv.key.as_str()).collect()
    }

    /// Waits up to 20 s for `check` to hold; returns whether it did.
    pub(crate) async fn eventually(mut check: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if check() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// A write that may have to wait for the store to come back.
    async fn write(kv: &Arc<dyn KvStore>, ops: Vec<Op>) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match kv.txn(vec![], ops.clone()).await {
                Ok(revision) => return revision.unwrap(),
                Err(e) if Instant::now() > deadline => panic!("store not back: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    #[tokio::test]
    async fn follows_puts_and_deletes_and_catches_up_to_a_revision() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(&dir.path().join("m.redb")).unwrap();
        let kv: Arc<dyn KvStore> = Arc::new(store);
        write(
            &kv,
            vec![put("m/a", b"1"), put("m/b/1", b"2"), put("n", b"x")],
        )
        .await;
        let mirror = Mirror::start(kv.clone(), "m/", &[]).await.unwrap();
        assert!(mirror.is_live());
        assert_eq!(keys(&mirror.range("m/")), ["m/a", "m/b/1"]);
        assert_eq!(mirror.get("m/a").unwrap().value, Bytes::from_static(b"1"));
        assert!(mirror.get("n").is_none(), "outside the prefix");

        let mut changes = mirror.changes();
        changes.borrow_and_update();
        let started = Instant::now();
        let ops = vec![put("m/b/2", b"3"), Op::Delete("m/a".into())];
        let revision = write(&kv, ops).await;
        mirror.caught_up(revision).await;
        assert!(started.elapsed() < CATCH_UP_WAIT, "the watch brought it");
        assert_eq!(keys(&mirror.range("m/")), ["m/b/1", "m/b/2"]);
        assert_eq!(keys(&mirror.range("m/b/2")), ["m/b/2"]);
        assert_eq!(mirror.revision(), revision);
        assert!(changes.has_changed().unwrap());

        write(&kv, vec![Op::DeletePrefix("m/b/".into())]).await;
        let mut changes = mirror.changes();
        changes
            .wait_for(|_| mirror.range("m/").is_empty())
            .await
            .unwrap();

        // a revision that changed nothing under the prefix: caught up by listing
        let outside = write(&kv, vec![put("n", b"y")]).await;
        mirror.caught_up(outside).await;
        assert!(mirror.revision() >= outside);
    }

    fn embedded(dir: &tempfile::TempDir) -> Arc<dyn KvStore> {
        Arc::new(EmbeddedStore::open(&dir.path().join("m.redb")).unwrap())
    }

    fn changed_keys(mirror: &Mirror) -> Vec<(String, bool)> {
        let changes = mirror.take_changes();
        let keys = changes.keys.into_iter();
        keys.map(|(key, value)| (key, value.is_some())).collect()
    }

    #[tokio::test]
    async fn reports_the_keys_changed_since_the_last_take_also_across_a_resync() {
        let dir = tempfile::tempdir().unwrap();
        let kv = embedded(&dir);
        write(&kv, vec![put("m/a", b"1"), put("m/b", b"2")]).await;
        let mirror = Mirror::start(kv.clone(), "m/", &[]).await.unwrap();
        let (all, _) = mirror.take_all("m/");
        assert_eq!(keys(&all), ["m/a", "m/b"]);
        assert!(changed_keys(&mirror).is_empty(), "taken with the listing");

        write(&kv, vec![put("m/c", b"3")]).await;
        let revision = write(&kv, vec![put("m/c", b"4"), Op::Delete("m/a".into())]).await;
        mirror.caught_up(revision).await;
        let changes = mirror.take_changes();
        assert_eq!(changes.revision, revision);
        let reported: Vec<_> = changes
            .keys
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        assert_eq!(reported[0], ("m/a", None));
        assert_eq!(reported[1].0, "m/c");
        assert_eq!(
            reported[1].1.as_ref().unwrap().value,
            Bytes::from_static(b"4")
        );
        assert!(changed_keys(&mirror).is_empty());

        // a resync (events missed) reports just the keys that differ from the copy
        let listing = Listing {
            kvs: vec![
                mirror.get("m/b").unwrap(),
                KeyValue {
                    key: "m/d".into(),
                    value: Bytes::from_static(b"5"),
                    mod_revision: revision + 1,
                },
            ],
            revision: revision + 1,
        };
        mirror.install(listing);
        let expected = [("m/c".to_string(), false), ("m/d".to_string(), true)];
        assert_eq!(changed_keys(&mirror), expected);
    }

    #[tokio::test]
    async fn leaves_out_excluded_keys_and_wakes_nobody_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let kv = embedded(&dir);
        write(&kv, vec![put("m/a", b"1"), put("m/groups/g", b"2")]).await;
        let excluded = ["m/groups/".to_string()];
        let mirror = Mirror::start(kv.clone(), "m/", &excluded).await.unwrap();
        assert_eq!(keys(&mirror.range("")), ["m/a"], "listing leaves them out");

        let mut changes = mirror.changes();
        changes.borrow_and_update();
        let started = Instant::now();
        let revision = write(&kv, vec![put("m/groups/g/offsets/t/0", b"7")]).await;
        mirror.caught_up(revision).await;
        assert!(started.elapsed() < CATCH_UP_WAIT, "the watch brought it");
        assert_eq!(mirror.revision(), revision);
        assert!(
            !changes.has_changed().unwrap(),
            "a group-only change wakes nobody"
        );
        assert_eq!(keys(&mirror.range("")), ["m/a"]);

        // a batch touching both: the copied key arrives, consumers wake, the other is left out
        let ops = vec![
            put("m/b", b"3"),
            Op::DeletePrefix("m/groups/".into()),
            put("m/groups/h", b"4"),
        ];
        let revision = write(&kv, ops).await;
        mirror.caught_up(revision).await;
        assert!(changes.has_changed().unwrap());
        assert_eq!(keys(&mirror.range("")), ["m/a", "m/b"]);
        assert_eq!(*changes.borrow_and_update(), revision);
    }

    #[tokio::test]
    async fn recovers_after_etcd_pauses_and_restarts() {
        let mut etcd = TestEtcd::start().await;
        let ttl = Duration::from_secs(10);
        let store = EtcdStore::connect(&etcd.endpoints(), None, ttl).await;
        let kv: Arc<dyn KvStore> = Arc::new(store.unwrap());
        write(&kv, vec![put("m/1", b"1")]).await;
        let mirror = Mirror::start(kv.clone(), "m/", &[]).await.unwrap();
        assert_eq!(keys(&mirror.range("")), ["m/1"]);

        // changes written by another client arrive through the watch
        let mut client = etcd.client().await;
        client.put("m/2", "2", None).await.unwrap();
        client.delete("m/1", None).await.unwrap();
        assert!(eventually(|| keys(&mirror.range("")) == ["m/2"]).await);

        // paused: the watch's connection stays open and carries on afterwards
        etcd.pause();
        tokio::time::sleep(Duration::from_secs(1)).await;
        etcd.resume();
        let revision = write(&kv, vec![put("m/3", b"3")]).await;
        mirror.caught_up(revision).await;
        assert!(mirror.is_live());
        assert_eq!(keys(&mirror.range("")), ["m/2", "m/3"]);

        // killed: the mirror notices, serves what it has, and resyncs once etcd is back
        etcd.kill();
        assert!(eventually(|| !mirror.is_live()).await, "noticed the outage");
        assert_eq!(keys(&mirror.range("")), ["m/2", "m/3"]);
        etcd.start_again().await;
        let revision = write(&kv, vec![put("m/4", b"4"), Op::Delete("m/2".into())]).await;
        assert!(eventually(|| mirror.is_live() && mirror.revision() >= revision).await);
        assert_eq!(keys(&mirror.range("")), ["m/3", "m/4"]);
        // and follows again
        let mut client = etcd.client().await;
        client.put("m/5", "5", None).await.unwrap();
        assert!(eventually(|| mirror.get("m/5").is_some()).await);
    }

    #[tokio::test]
    async fn a_store_restored_to_an_earlier_revision_is_mirrored_as_it_is_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| -> Arc<dyn KvStore> {
            Arc::new(EmbeddedStore::open(&dir.path().join(name)).unwrap())
        };
        // the backup: taken when the store held m/1 only
        let backup = open("backup.redb");
        write(&backup, vec![put("m/1", b"1")]).await;
        let live = open("live.redb");
        for i in 0..5 {
            write(
                &live,
                vec![put("m/1", b"1"), put(&format!("m/{}", i + 2), b"x")],
            )
            .await;
        }
        let faulty = Arc::new(FaultyKv::new(live));
        let kv: Arc<dyn KvStore> = faulty.clone();
        let mirror = Mirror::start(kv, "m/", &[]).await.unwrap();
        let before = mirror.revision();
        assert_eq!(mirror.range("").len(), 6);
        let mut restores = mirror.restores();
        // etcd is restored from the backup: a lower revision, and the keys written since gone
        faulty.restore(backup);
        tokio::time::timeout(Duration::from_secs(20), restores.changed())
            .await
            .expect("the restore is reported")
            .unwrap();
        assert!(mirror.revision() < before);
        assert_eq!(keys(&mirror.range("")), ["m/1"]);
        // the keys that went are reported as changed (and m/1, at its revision in the backup),
        // and the copy follows the store again
        let changed = mirror.take_changes();
        assert_eq!(changed.keys.len(), 6);
        let kv: Arc<dyn KvStore> = faulty.clone();
        write(&kv, vec![put("m/9", b"9")]).await;
        assert!(eventually(|| mirror.get("m/9").is_some()).await);
    }
}
