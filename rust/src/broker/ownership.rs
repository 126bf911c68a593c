//! Keeps this broker's partitions in line with the cluster view: it claims the partitions
//! assigned to it once nobody owns them, hands off the ones assigned elsewhere (flush, then
//! release), and drops at once the ones it lost (its owner key is gone: lease expired or a
//! new session).
//!
//! Event-driven: a pass runs when the mirror reports changed keys, when a claim or hand-off
//! ends, when a failed claim's backoff is over and when a flush finds its partition fenced.
//! It applies just the changed keys to the cluster view and looks at just the partitions they
//! concern; only a change of the live brokers (which moves assignments) looks at every
//! partition. An idle cluster costs nothing: there is no periodic scan. (The owner key of a
//! crashed broker vanishes when its lease expires, and that deletion is an event too.)

use std::collections::{BTreeSet, HashSet};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::ResponseError;
use tokio::sync::Notify;

use super::claims::ClaimQueue;
use super::ownership_events::{Change, OwnershipEvents};
use crate::broker::{Broker, Slot, Topic};
use crate::cluster::state::{ClusterState, Touched};
use crate::log::follower_partition;
use crate::log::limits::TopicLimits;
use crate::log::partition::Partition;
use crate::log::wal::index::{Extended, WalIndex};
use crate::meta::catalog::{PartitionRecord, TopicRecord};
use crate::meta::kv::KeyValue;
use crate::meta::wal::parse_manifest;

/// Hand-offs and releases under way at once (each is a flush and a metadata transaction).
const RELEASES_IN_FLIGHT: usize = 64;

/// Bounds the hand-offs and releases under way.
pub(crate) struct Releases(tokio::sync::Semaphore);

impl Default for Releases {
    fn default() -> Self {
        Releases(tokio::sync::Semaphore::new(RELEASES_IN_FLIGHT))
    }
}

impl Releases {
    async fn acquire(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }
}

/// The reconciler's work: its view of the cluster, what to look at besides changed keys, and
/// the claims it queued.
#[derive(Default)]
pub(crate) struct Ownership {
    /// One pass at a time; holds the view as of the last pass (None: read everything).
    pub(crate) pass: tokio::sync::Mutex<Option<ClusterState>>,
    revisits: Mutex<Revisits>,
    wake: Notify,
    pub(crate) claims: ClaimQueue,
    releases: Releases,
    /// Partitions taken over, handed off and lost, summarised after each pass.
    pub(crate) events: OwnershipEvents,
    /// Catching up with the store before a read of a partition owned elsewhere.
    pub(crate) barrier: super::read_barrier::ReadBarrier,
    /// Passes run so far (tests check that an idle broker runs none).
    #[cfg(test)]
    passes: std::sync::atomic::AtomicUsize,
}

#[derive(Default)]
struct Revisits {
    everything: bool,
    partitions: HashSet<(String, i32)>,
}

impl Ownership {
    /// Asks for a pass that looks at this partition.
    pub(crate) fn revisit(&self, topic: &str, id: i32) {
        let mut revisits = self.revisits.lock().unwrap_or_else(|p| p.into_inner());
        revisits.partitions.insert((topic.to_string(), id));
        self.wake.notify_one();
    }

    /// Asks for a pass that rebuilds the view and looks at every partition.
    fn revisit_everything(&self) {
        self.revisits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .everything = true;
        self.wake.notify_one();
    }

    fn take_revisits(&self) -> Revisits {
        std::mem::take(&mut *self.revisits.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Read-only logs for partitions `ids` of a topic, from their records in the cluster view (an
/// empty log for a partition nobody claimed yet).
fn follower_slots(
    record: &TopicRecord,
    ids: Range<i32>,
    limits: &Arc<TopicLimits>,
    state: &ClusterState,
    wal: &WalIndex,
) -> Vec<Arc<Slot>> {
    ids.map(|id| {
        let view = state.view(&record.name, id);
        let partition = view.record.clone().unwrap_or_else(PartitionRecord::empty);
        let end = wal.committed_end((record.id, id)).unwrap_or(0);
        let log = follower_partition(record, id, limits.clone(), partition, view.revision, end);
        Arc::new(Slot::new(log))
    })
    .collect()
}

/// Starts the reconciliation loop and the claimer.
pub(crate) fn spawn(broker: &Arc<Broker>) {
    super::claims::spawn(broker);
    let broker = broker.clone();
    tokio::spawn(async move {
        let mut changes = broker.mirror.changes();
        let mut session = broker.log.catalog.kv().session();
        let mut restores = broker.mirror.restores();
        // Changes that came before the subscription woke nobody: take them now.
        broker.reconcile().await;
        loop {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                changed = session.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    broker.start_over("metadata session lost").await;
                }
                changed = restores.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // What this broker owned may not be its own in the store as restored.
                    broker.start_over("metadata store restored to an earlier revision").await;
                }
                _ = broker.ownership.wake.notified() => {}
                _ = broker.wal.fenced().reported() => {}
            }
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            broker.reconcile().await;
        }
    });
}

/// What one pass looks at.
#[derive(Default)]
struct Visits {
    /// Every partition (the view was rebuilt or the live brokers changed).
    everything: bool,
    topics: BTreeSet<String>,
    partitions: HashSet<(String, i32)>,
    /// Topics whose placement changed: every partition of them.
    placed: Vec<String>,
}

impl Broker {
    /// Brings topics and partition roles in line with the metadata store as mirrored now:
    /// applies the keys changed since the last pass and looks at what they concern.
    pub(crate) async fn reconcile(self: &Arc<Self>) {
        let mut pass = self.ownership.pass.lock().await;
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        #[cfg(test)]
        self.ownership.passes.fetch_add(1, Ordering::Relaxed);
        let revisits = self.ownership.take_revisits();
        let mut visits = Visits {
            partitions: revisits.partitions,
            ..Default::default()
        };
        for (topic, id) in self.wal.fenced().take() {
            visits.partitions.insert((topic.to_string(), id));
        }
        let root = self.log.catalog.root();
        let manifests = self.log.catalog.manifests_prefix();
        let acls = crate::auth::store::acls_prefix(&self.log.catalog);
        let quotas = crate::quotas::store::quotas_prefix(&self.log.catalog);
        let mut acls_changed = false;
        let mut quotas_changed = false;
        let mut extended = Vec::new();
        let state = match pass.take() {
            Some(mut state) if !revisits.everything => {
                let changes = self.mirror.take_changes();
                let brokers = state.live_brokers();
                let mut placement_changed = false;
                for (key, value) in &changes.keys {
                    if key.starts_with(&manifests) {
                        extended.extend(self.apply_manifest(key, value.as_ref()));
                        continue;
                    }
                    if key.starts_with(&acls) {
                        acls_changed = true;
                        continue;
                    }
                    if key.starts_with(&quotas) {
                        quotas_changed = true;
                        continue;
                    }
                    let touched = state.apply(root, key, value.as_ref());
                    // Placement starts from the topics, the brokers and the owners; a
                    // partition's record (written by claims and compactions) is not part of it.
                    placement_changed |= matches!(
                        touched,
                        Touched::Topic(_) | Touched::Broker | Touched::Owner(..)
                    );
                    match touched {
                        Touched::Topic(name) => {
                            visits.topics.insert(name);
                        }
                        Touched::Partition(topic, id) | Touched::Owner(topic, id) => {
                            visits.topics.insert(topic.clone());
                            visits.partitions.insert((topic, id));
                        }
                        Touched::Broker | Touched::Other => {}
                    }
                }
                state.revision = changes.revision;
                if placement_changed {
                    // Placement starts from the owners: a claim or release, a topic created,
                    // grown or deleted, a broker come or gone can each move partitions of a
                    // topic no key of this batch names.
                    visits.placed = state.refresh_placement();
                }
                visits.everything = state.live_brokers() != brokers;
                state
            }
            _ => {
                let (entries, revision) = self.mirror.take_all(&format!("{root}/"));
                visits.everything = true;
                acls_changed = true;
                quotas_changed = true;
                let (wal, rest): (Vec<_>, Vec<_>) = entries
                    .iter()
                    .partition(|kv| kv.key.starts_with(&manifests));
                let parsed = wal.into_iter().filter_map(|kv| {
                    let manifest = parse_manifest(kv).map_err(|e| tracing::error!(%e)).ok()?;
                    Some((kv.key.clone(), manifest))
                });
                self.log.wal.replace_all(parsed);
                ClusterState::from_entries(root, revision, rest)
            }
        };
        if acls_changed {
            self.reload_acls();
        }
        if quotas_changed {
            self.reload_quotas();
        }
        let only = (!visits.everything).then_some(&visits.topics);
        let grown = self.sync_topics(&state, only);
        self.follow_manifests(extended, visits.everything);
        self.publish_cluster(Arc::new(state.clone()));
        if visits.everything {
            for topic in self.topics() {
                self.reconcile_topic(&topic, &state);
            }
        } else {
            let placed = visits.placed.iter().filter_map(|name| self.topic(name));
            for topic in grown.iter().cloned().chain(placed) {
                self.reconcile_topic(&topic, &state);
            }
            for (name, id) in &visits.partitions {
                let Some(topic) = self.topic(name) else {
                    continue;
                };
                if let Some(slot) = topic.partitions.get(*id as usize) {
                    self.reconcile_partition(&topic, *id, slot, &state);
                }
            }
        }
        *pass = Some(state);
        self.ownership.events.summarise();
    }

    /// Takes a manifest change into the write-ahead index; the partitions it extends.
    fn apply_manifest(&self, key: &str, value: Option<&KeyValue>) -> Vec<Extended> {
        match value.map(parse_manifest) {
            Some(Ok(manifest)) => self.log.wal.insert(key, manifest),
            Some(Err(error)) => {
                tracing::error!(%error, "ignoring a write-ahead manifest");
                Vec::new()
            }
            None => {
                self.log.wal.remove(key);
                Vec::new()
            }
        }
    }

    /// Followers learn how far their owners committed: the partitions `extended` names, or
    /// every one (the index was rebuilt).
    fn follow_manifests(&self, extended: Vec<Extended>, everything: bool) {
        if everything {
            for topic in self.topics() {
                for (id, slot) in topic.partitions.iter().enumerate() {
                    if let Some(end) = self.log.wal.committed_end((topic.record.id, id as i32)) {
                        slot.current().observe_end(end);
                    }
                }
            }
            return;
        }
        for run in extended {
            let Some(topic) = self.topic(&run.topic) else {
                continue;
            };
            if topic.record.id != run.topic_id {
                continue;
            }
            if let Some(slot) = topic.partitions.get(run.partition as usize) {
                slot.current().observe_end(run.end);
            }
        }
    }

    fn reconcile_topic(self: &Arc<Self>, topic: &Arc<Topic>, state: &ClusterState) {
        for (id, slot) in topic.partitions.iter().enumerate() {
            self.reconcile_partition(topic, id as i32, slot, state);
        }
    }

    /// True if `topic` is still the topic of that name this broker serves (not deleted, maybe
    /// re-created, meanwhile; a newer record of the same topic shares its slots).
    pub(crate) fn serves(&self, topic: &Topic) -> bool {
        self.topic(&topic.record.name)
            .is_some_and(|current| current.record.id == topic.record.id)
    }

    /// Adds topics that appeared in the store (every partition starts as a follower), follows
    /// the ones whose record changed (configs, added partitions) and removes the ones deleted
    /// there, failing their buffered writes. Looks at the topics named in `only`, or at all.
    /// Returns the topics that are new or have new partitions.
    fn sync_topics(
        self: &Arc<Self>,
        state: &ClusterState,
        only: Option<&BTreeSet<String>>,
    ) -> Vec<Arc<Topic>> {
        let mut topics = self.topics_map();
        let looked_at = |name: &String| only.is_none_or(|names| names.contains(name));
        topics.retain(|name, topic| {
            let alive = !looked_at(name)
                || state
                    .topics
                    .get(name)
                    .is_some_and(|record| record.id == topic.record.id);
            if !alive {
                let logs: Vec<_> = topic.partitions.iter().map(|s| s.current()).collect();
                for log in &logs {
                    log.abandon(ResponseError::UnknownTopicOrPartition);
                }
                self.spawn_let_go(name, logs);
                self.metrics.forget_topic(name);
            }
            alive
        });
        let settings = &self.log.settings;
        let mut grown = Vec::new();
        let records: Box<dyn Iterator<Item = (&String, &TopicRecord)>> = match only {
            Some(names) => Box::new(
                names
                    .iter()
                    .filter_map(|name| state.topics.get(name).map(|record| (name, record))),
            ),
            None => Box::new(state.topics.iter()),
        };
        for (name, record) in records {
            let followed = match topics.get(name) {
                Some(topic) if topic.record == *record => continue,
                Some(topic) => {
                    topic.limits.update(&record.configs, settings);
                    // Partitions are only ever added, by a change of the topic record.
                    let known = topic.partitions.len() as i32;
                    let added = follower_slots(
                        record,
                        known..record.partitions,
                        &topic.limits,
                        state,
                        &self.log.wal,
                    );
                    Topic {
                        record: record.clone(),
                        partitions: topic.partitions.iter().cloned().chain(added).collect(),
                        limits: topic.limits.clone(),
                    }
                }
                None => {
                    let limits = Arc::new(TopicLimits::new(&record.configs, settings));
                    let partitions =
                        follower_slots(record, 0..record.partitions, &limits, state, &self.log.wal);
                    Topic {
                        record: record.clone(),
                        partitions,
                        limits,
                    }
                }
            };
            let followed = Arc::new(followed);
            if topics
                .get(name)
                .is_none_or(|old| old.partitions.len() < followed.partitions.len())
            {
                grown.push(followed.clone());
            }
            topics.insert(name.clone(), followed);
        }
        grown
    }

    fn reconcile_partition(
        self: &Arc<Self>,
        topic: &Arc<Topic>,
        id: i32,
        slot: &Slot,
        state: &ClusterState,
    ) {
        let name = &topic.record.name;
        let view = state.view(name, id);
        if slot.is_changing() {
            return; // a claim or hand-off decides this partition's role right now
        }
        let me = self.config.broker_id;
        let assigned_here = state.assigned_owner(name, id) == Some(me);
        let current = slot.current();
        match current.owned() {
            Some(owned) => {
                let key_is_ours = view.owner == Some((me, owned.owner_revision));
                let mirror_saw_claim = state.revision >= owned.owner_revision;
                if (!key_is_ours && mirror_saw_claim) || !current.is_leader() {
                    self.drop_ownership(topic, id, slot, key_is_ours);
                    return;
                }
                if let Some(record) = view.record.as_ref().filter(|_| key_is_ours) {
                    if view.revision > owned.revision {
                        let (record, revision) = (record.clone(), view.revision);
                        tokio::spawn(async move {
                            current.adopt_landed_record(&record, revision).await;
                        });
                    }
                }
                if key_is_ours && !assigned_here && slot.begin_change() {
                    self.spawn_hand_off(topic.clone(), id);
                }
            }
            None => {
                if let Some(record) = &view.record {
                    current.follow(record, view.revision);
                }
                match view.owner {
                    None if assigned_here && slot.begin_change() => {
                        self.ownership.claims.push(topic.clone(), id);
                    }
                    // Our owner key, but no log here owns the partition: a release that failed
                    // or a claim whose answer was lost (etcd timed out, yet committed it).
                    // Nobody else can claim it until it goes, and our lease keeps it: remove it.
                    Some((owner, revision)) if owner == me && slot.begin_change() => {
                        self.spawn_release(topic.clone(), id, revision);
                    }
                    _ => {}
                }
            }
        }
    }

    /// The partition is no longer ours (or can no longer be written): answer its buffered
    /// writes with NOT_LEADER_OR_FOLLOWER and serve reads only. If the owner key is still
    /// ours (the log was closed by a failed commit), release it so it can be claimed again.
    fn drop_ownership(
        self: &Arc<Self>,
        topic: &Arc<Topic>,
        id: i32,
        slot: &Slot,
        key_is_ours: bool,
    ) {
        let current = slot.current();
        self.ownership
            .events
            .record(Change::Lost, &topic.record.name, id);
        current.abandon(ResponseError::NotLeaderOrFollower);
        slot.replace(self.follower_of(&current));
        // A pass looks at it again: if it is still assigned here and nobody owns it now (the
        // key simply went), that pass claims it; no other change would bring one.
        self.ownership.revisit(&topic.record.name, id);
        if let (true, Some(owned)) = (key_is_ours, current.owned()) {
            let broker = self.clone();
            let name = topic.record.name.clone();
            tokio::spawn(async move {
                let _ = broker
                    .log
                    .catalog
                    .release_partition(&name, id, &owned)
                    .await;
            });
        }
    }

    /// The read-only log that replaces `log` when this broker gives the partition up: it
    /// starts no lower than the write-ahead index's committed end, which may be ahead of the
    /// log's own (a manifest the mirror reported while the log still owned the partition).
    fn follower_of(&self, log: &Partition) -> Arc<Partition> {
        let end = self.log.wal.committed_end((log.topic_id, log.id));
        log.to_follower(end.unwrap_or(0))
    }

    /// Removes an owner key of this broker's that no log here owns (see `reconcile_partition`).
    fn spawn_release(self: &Arc<Self>, topic: Arc<Topic>, id: i32, owner_revision: i64) {
        let broker = self.clone();
        tokio::spawn(async move {
            let _permit = broker.ownership.releases.acquire().await;
            let name = &topic.record.name;
            let released = broker
                .log
                .catalog
                .release_owner_key(name, id, owner_revision)
                .await;
            match released {
                Ok(()) => tracing::info!(
                    topic = name,
                    partition = id,
                    "removed an owner key of this broker's that no log here used"
                ),
                Err(error) => tracing::debug!(topic = name, partition = id, %error,
                    "removing a stray owner key failed; the next pass tries again"),
            }
            topic.partitions[id as usize].end_change();
            broker.ownership.revisit(name, id);
        });
    }

    /// The partitions of a deleted topic that this broker owned: once no compaction of them is
    /// under way any more (one may still be uploading a segment), their owner keys go, so the
    /// topic's deletion can remove its objects knowing nothing more is written
    /// (`Catalog::delete_topic`). Retried until done; a key no longer ours is left.
    fn spawn_let_go(self: &Arc<Self>, topic: &str, logs: Vec<Arc<Partition>>) {
        if logs.iter().all(|log| log.owned().is_none()) {
            return;
        }
        let broker = self.clone();
        let topic = topic.to_string();
        tokio::spawn(async move {
            let mut owned = Vec::new();
            for log in logs {
                log.wait_for_record_changes().await;
                if let Some(committed) = log.owned() {
                    owned.push((log.id, committed.owner_revision));
                }
            }
            let mut backoff = Duration::from_millis(100);
            let catalog = &broker.log.catalog;
            while let Err(error) = catalog.release_owner_keys(&topic, owned.clone()).await {
                tracing::warn!(topic, %error, "giving up a deleted topic's partitions failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        });
    }

    /// Graceful hand-off to the broker the partition is assigned to now: stop taking writes,
    /// flush and acknowledge what is buffered, then release the owner key. Hand-offs run a
    /// bounded number at a time: a broker joining a cluster of 100,000 partitions is handed a
    /// third of them at once, and as many concurrent releases would time out in etcd.
    fn spawn_hand_off(self: &Arc<Self>, topic: Arc<Topic>, id: i32) {
        let broker = self.clone();
        tokio::spawn(async move {
            let _permit = broker.ownership.releases.acquire().await;
            let slot = &topic.partitions[id as usize];
            let partition = slot.current();
            partition.close(ResponseError::NotLeaderOrFollower);
            // Returns once no flush holding its batches is under way: the release below comes
            // after the last commit of the partition, so the next owner's view has them all.
            broker.wal.drain(std::slice::from_ref(&partition)).await;
            if let Some(owned) = partition.owned() {
                let released = broker
                    .log
                    .catalog
                    .release_partition(&topic.record.name, id, &owned)
                    .await;
                if let Err(error) = released {
                    tracing::warn!(topic = topic.record.name, partition = id, %error,
                        "releasing the partition failed; retrying");
                }
            }
            slot.replace(broker.follower_of(&partition));
            broker
                .ownership
                .events
                .record(Change::HandedOff, &topic.record.name, id);
            slot.end_change();
            broker.ownership.revisit(&topic.record.name, id);
        });
    }

    /// The session was lost (lease expired while this broker could not renew it): every
    /// owner key it held is gone. Drop all ownership and register again under the new one.
    /// (Also after the store was restored to an earlier revision, where ownership is moot.)
    async fn start_over(self: &Arc<Self>, why: &str) {
        tracing::warn!("{why}; giving up every partition and rejoining");
        self.ownership.revisit_everything();
        for topic in self.topics() {
            for slot in &topic.partitions {
                let current = slot.current();
                if current.owned().is_some() {
                    current.abandon(ResponseError::NotLeaderOrFollower);
                    slot.replace(self.follower_of(&current));
                }
            }
        }
        let mut backoff = Duration::from_millis(100);
        while let Err(error) = self.register().await {
            tracing::warn!(%error, "rejoining the cluster failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use kafka_protocol::records::Compression;
    use kafka_protocol::ResponseError;

    use super::*;
    use crate::broker::tests::{broker, produce, TestBroker};
    use crate::log::batch::tests::encoded_batch;
    use crate::log::batch::validate_batches;
    use crate::meta::kv::Op;
    use crate::meta::mirror::tests::eventually;

    /// A broker with topic "t" of `partitions` partitions, the slot of partition `id` and the
    /// epoch it was claimed under.
    async fn owned_partition(partitions: i32, id: usize) -> (TestBroker, Arc<Slot>, i32) {
        let t = broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("t", partitions, Default::default())
            .await
            .unwrap();
        let slot = b.topic("t").unwrap().partitions[id].clone();
        let epoch = slot.current().leader_epoch();
        (t, slot, epoch)
    }

    #[tokio::test]
    async fn a_partition_is_claimed_when_the_old_owner_key_goes_and_idle_runs_no_pass() {
        let (t, slot, epoch) = owned_partition(3, 1).await;
        let b = &t.broker;
        // another broker's claim: this one gives the partition up and waits for that key to go
        let owner = b.log.catalog.owner_key("t", 1);
        let kv = b.log.catalog.kv();
        let taken = Op::PutEphemeral(owner.clone(), Bytes::from_static(b"2"));
        kv.txn(vec![], vec![taken]).await.unwrap();
        assert!(eventually(|| !slot.current().is_leader()).await);
        // nothing changes now, so nothing runs: no periodic scan (it used to tick every second)
        let passes = b.ownership.passes.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert_eq!(b.ownership.passes.load(Ordering::Relaxed), passes);
        // the key goes (as when that broker's lease expires): the deletion alone brings the claim
        kv.txn(vec![], vec![Op::Delete(owner)]).await.unwrap();
        assert!(eventually(|| slot.current().is_leader()).await);
        assert!(slot.current().leader_epoch() > epoch);
        assert_eq!(produce(b, "t", 1, 2).await, 0);
        // the other partitions were left alone
        assert_eq!(
            b.topic("t").unwrap().partitions[0].current().leader_epoch(),
            epoch
        );
    }

    #[tokio::test]
    async fn an_owner_key_of_ours_that_no_log_uses_is_removed_and_the_partition_claimed_again() {
        let (t, slot, epoch) = owned_partition(2, 1).await;
        let b = &t.broker;
        // a hand-off whose release timed out: the log is a follower, the key still ours
        slot.replace(slot.current().to_follower(0));
        assert!(!slot.current().is_leader());
        b.ownership.revisit("t", 1);
        assert!(eventually(|| slot.current().is_leader()).await);
        assert!(slot.current().leader_epoch() > epoch);
        assert_eq!(produce(b, "t", 1, 2).await, 0);
    }

    #[tokio::test]
    async fn a_writer_fenced_by_its_writer_key_gives_the_partition_up_and_claims_again() {
        let (t, slot, epoch) = owned_partition(1, 0).await;
        let b = &t.broker;
        assert_eq!(produce(b, "t", 0, 1).await, 0);
        // the writer key moves under the broker (as when a lost commit is settled elsewhere):
        // the reconciler sees nothing wrong, the next flush is fenced
        let writer = format!("{}/writers/1", b.log.catalog.root());
        let kv = b.log.catalog.kv();
        kv.txn(vec![], vec![Op::Delete(writer)]).await.unwrap();
        let log = slot.current();
        let batch = encoded_batch(1, 10, Compression::None);
        let batches = validate_batches(&batch, 1 << 20).unwrap();
        let (ack, appended) = log.append(batches, true).unwrap().buffered();
        b.wal.note_append(&log, appended);
        let acked = tokio::time::timeout(Duration::from_secs(10), ack).await;
        assert_eq!(
            acked.unwrap().unwrap(),
            Err(ResponseError::NotLeaderOrFollower)
        );
        // reported by the writer: released and claimed afresh, without any other change
        assert!(eventually(|| slot.current().leader_epoch() > epoch).await);
        assert!(eventually(|| slot.current().is_leader()).await);
        // the fenced object is not part of the log: the next write follows the first
        assert_eq!(produce(b, "t", 0, 2).await, 1);
    }
}
