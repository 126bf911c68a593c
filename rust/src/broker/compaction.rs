//! Every compaction interval: the partitions this broker owns whose write-ahead runs are due
//! become segments (uploaded concurrently, committed in batched transactions, so the metadata
//! writes do not grow with the partitions compacted), then manifests whose runs all live in
//! segments go – object first, then manifest – and, now and then, write-ahead objects that
//! were never committed and are old enough that no commit can still be on its way. Between
//! intervals, the partitions whose commits brought them a segment's worth of runs
//! (`CompactionDue`) are compacted as they come, a round per `DUE_ROUND_SPACING` at most,
//! while the cache still holds their runs.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::cluster::state::ClusterState;
use crate::log::partition::{now_ms, Compacted, Partition};
use crate::meta::wal::{parse_manifest, OwnedChange, Settled, WalManifest};

/// Partitions compacted at once (each holds its runs' bytes while its segment uploads).
const COMPACTIONS_IN_PARALLEL: usize = 8;

/// Rounds of partitions due by size start at most this often: the partitions due meanwhile
/// share the round's commits (a metadata write per 64), and their runs wait in the cache,
/// which holds them for longer (`log::cache`).
const DUE_ROUND_SPACING: Duration = Duration::from_secs(1);

/// An object no manifest names is deleted once this old: far beyond any flush's upload and
/// commit, so no commit of it can still land.
const UNCOMMITTED_OBJECT_AGE: Duration = Duration::from_secs(600);

/// The sweep of uncommitted objects lists the bucket this often.
const SWEEP_INTERVAL: Duration = Duration::from_secs(300);

pub(crate) fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        let every = broker.log.settings.wal_compaction_interval;
        let mut tick = tokio::time::interval_at(Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep = Instant::now();
        let mut next_due_round = Instant::now();
        loop {
            let whole = tokio::select! {
                _ = tick.tick() => true,
                _ = broker.log.compaction_due.added() => false,
            };
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            if !whole {
                tokio::time::sleep_until(next_due_round).await;
                next_due_round = Instant::now() + DUE_ROUND_SPACING;
                let due = broker.log.compaction_due.take();
                broker.compact_within_an_interval(owned(due)).await;
                continue;
            }
            broker.compact_owned().await;
            broker.delete_compacted_objects().await;
            if last_sweep.elapsed() >= SWEEP_INTERVAL {
                last_sweep = Instant::now();
                broker.sweep_uncommitted_objects().await;
            }
        }
    });
}

/// The partitions of `due` this broker still owns.
fn owned(due: Vec<Arc<Partition>>) -> Vec<Arc<Partition>> {
    due.into_iter().filter(|p| p.is_leader()).collect()
}

impl Broker {
    /// Compacts every owned partition that is due and commits the switches in batches: one
    /// metadata write per 64 partitions compacted, whatever the segments each got. Only the
    /// partitions with write-ahead runs are looked at: an idle partition costs nothing here.
    /// A partition whose compaction stopped at its limits with more due is compacted again,
    /// until none is or the round has taken a compaction interval (then the objects compacted
    /// are deleted, and the next round, due at once, goes on).
    pub(crate) async fn compact_owned(&self) {
        let with_runs = self.log.wal.partitions_with_runs();
        if with_runs.is_empty() {
            return;
        }
        let by_id = self.topics_by_id();
        let with_runs = with_runs.into_iter().filter_map(|(topic_id, id)| {
            let slot = by_id
                .get(&topic_id)?
                .partitions
                .get(usize::try_from(id).ok()?)?;
            Some(slot.current())
        });
        self.compact_within_an_interval(owned(with_runs.collect()))
            .await;
    }

    /// Compacts `due` until none has more due or a compaction interval has passed.
    async fn compact_within_an_interval(&self, mut due: Vec<Arc<Partition>>) {
        let until = Instant::now() + self.log.settings.wal_compaction_interval;
        while !due.is_empty() && !self.stopping.load(Ordering::Acquire) {
            due = self.compact_partitions(due).await;
            if Instant::now() >= until {
                break;
            }
        }
    }

    /// One pass over `due`; returns the partitions committed with more still due.
    async fn compact_partitions(&self, due: Vec<Arc<Partition>>) -> Vec<Arc<Partition>> {
        let now = now_ms();
        let compactions = futures::stream::iter(due)
            .map(|p| async move { p.compact(&self.log, now).await.map(|c| (p, c)) })
            .buffer_unordered(COMPACTIONS_IN_PARALLEL)
            .filter_map(|c| async move { c });
        let mut compactions = std::pin::pin!(compactions);
        let per_txn = (self.log.catalog.kv().max_txn_ops() / 2).max(1);
        let (mut ready, mut again) = (Vec::new(), Vec::new());
        while let Some(compacted) = compactions.next().await {
            ready.push(compacted);
            if ready.len() >= per_txn {
                again.extend(self.commit_compacted(std::mem::take(&mut ready)).await);
            }
        }
        if !ready.is_empty() {
            again.extend(self.commit_compacted(ready).await);
        }
        again
    }

    /// Commits one batch; a batch refused because one partition moved is split until the
    /// moved one stands alone (it is given up; its new owner compacts it). Returns the
    /// partitions committed that have more due.
    async fn commit_compacted(
        &self,
        batch: Vec<(Arc<Partition>, Compacted)>,
    ) -> Vec<Arc<Partition>> {
        let mut more = Vec::new();
        let mut work = vec![batch];
        while let Some(mut batch) = work.pop() {
            let changes: Vec<_> = batch
                .iter()
                .map(|(p, c)| (&*p.topic, p.id, &c.owned, &c.record))
                .collect();
            // (the segments' uploads are done; waiting for the pace only delays the switch)
            self.log
                .meta_writes
                .start(self.log.settings.flush_interval)
                .await;
            let outcome = match self.log.catalog.commit_owned_records(&changes).await {
                Ok(Some(revision)) => Settled::Landed(revision),
                Ok(None) => Settled::Moved,
                Err(error) => {
                    tracing::warn!(%error, partitions = batch.len(),
                        "the answer to a compaction commit was lost; settling whether it landed");
                    self.settle_compaction_commit(&changes).await
                }
            };
            match outcome {
                Settled::Landed(revision) => {
                    for (partition, compacted) in batch {
                        if compacted.more_due() {
                            more.push(partition.clone());
                        }
                        partition.compacted(&self.log, compacted, revision);
                    }
                }
                Settled::Rewritten(revision) => {
                    tracing::warn!(
                        partitions = batch.len(),
                        "a compaction commit did not land; compacting again next round"
                    );
                    for (partition, compacted) in &batch {
                        partition.record_rewritten(&compacted.owned, revision);
                    }
                }
                Settled::Moved if batch.len() > 1 => {
                    let second = batch.split_off(batch.len() / 2);
                    work.push(second);
                    work.push(batch);
                }
                Settled::Moved => {
                    tracing::debug!(topic = %batch[0].0.topic, partition = batch[0].0.id,
                    "compaction found the partition moved; leaving it to its owner")
                }
            }
        }
        more
    }

    /// Whether a compaction commit whose answer was lost landed, asked until the store
    /// answers: nothing acts on the batch (the partitions' records, the objects compacted)
    /// before its outcome is known, and the partitions' record locks are held meanwhile.
    async fn settle_compaction_commit(&self, changes: &[OwnedChange<'_>]) -> Settled {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.log.catalog.settle_owned_records(changes).await {
                Ok(settled) => return settled,
                Err(error) => {
                    tracing::warn!(%error, "settling a compaction commit failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Deletes the write-ahead objects (then manifests) whose runs are all in segments, or
    /// whose topics are gone: this broker's own, and – on the live broker with the lowest
    /// id – those of brokers that are not registered.
    pub(crate) async fn delete_compacted_objects(&self) {
        // While the copy of the store is being rebuilt (after a watch failure, e.g. an etcd
        // restart) it may hold manifests without their topics or brokers yet: a topic or
        // broker that looks gone then is not, and deleting its objects would lose data.
        if !self.mirror.is_live() {
            return;
        }
        let state = self.cluster();
        let me = self.config.broker_id;
        let sweeper = state.live_brokers().first() == Some(&me);
        let mut gone = Vec::new();
        for (key, manifest) in self.log.wal.manifests() {
            let mine =
                manifest.broker == me || (sweeper && !state.brokers.contains_key(&manifest.broker));
            if !mine || !all_compacted(&state, &manifest) {
                continue;
            }
            let Ok(path) = object_store::path::Path::parse(&manifest.object) else {
                continue;
            };
            if let Err(error) = self.log.store.delete(&path).await {
                tracing::warn!(object = %path, %error,
                    "deleting a compacted write-ahead object failed; retrying next round");
                break;
            }
            gone.push(key);
        }
        // The manifests of the objects deleted, together (an object is deleted before its
        // manifest, so a failure here leaves manifests the next round deletes again).
        if !gone.is_empty() {
            self.log
                .meta_writes
                .start(self.log.settings.flush_interval)
                .await;
        }
        match self.log.catalog.delete_manifests(&gone).await {
            Ok(()) => {
                if !gone.is_empty() {
                    // Which objects went, for an operator tracing one: compaction holds their
                    // records in segments now.
                    tracing::debug!(objects = gone.len(), keys = ?gone,
                        "deleted compacted write-ahead objects and their manifests");
                }
                gone.iter().for_each(|key| self.log.wal.remove(key))
            }
            Err(error) => tracing::warn!(%error, manifests = gone.len(),
                "removing manifests of deleted objects failed; retrying next round"),
        }
    }

    /// Deletes write-ahead objects that no manifest names and that are old (a crash or failure
    /// between upload and commit). Run by the live broker with the lowest id, while its view
    /// of the manifests is current.
    pub(crate) async fn sweep_uncommitted_objects(&self) {
        self.sweep_objects_older_than(UNCOMMITTED_OBJECT_AGE).await;
    }

    /// The sweep, of objects older than `age`. Age alone cannot tell an object whose commit is
    /// still on its way (delayed by an etcd outage longer than `age`) from an abandoned one:
    /// before deleting a broker's objects the sweep marks it (`Catalog::mark_sweep`), which
    /// voids every commit of that broker's flights taken before, then looks again at the
    /// manifests as of the mark – every manifest that will ever name one of them is there.
    pub(super) async fn sweep_objects_older_than(&self, age: Duration) {
        let state = self.cluster();
        let me = self.config.broker_id;
        if state.live_brokers().first() != Some(&me) || !self.mirror.is_live() {
            return;
        }
        let listed = match self.log.store.list_wal().await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "listing write-ahead objects failed; sweeping later");
                return;
            }
        };
        let named: HashSet<String> = self
            .log
            .wal
            .manifests()
            .into_iter()
            .map(|(_, m)| m.object.clone())
            .collect();
        let old = now_ms() - age.as_millis() as i64;
        let mut by_broker: BTreeMap<i32, Vec<object_store::path::Path>> = BTreeMap::new();
        for (path, written_ms) in listed {
            if written_ms > old || named.contains(path.as_ref()) {
                continue;
            }
            if let Some(broker) = self.log.store.wal_broker(&path) {
                by_broker.entry(broker).or_default().push(path);
            }
        }
        for (broker, paths) in by_broker {
            let mark = match self.log.catalog.mark_sweep(broker, me).await {
                Ok(mark) => mark,
                Err(error) => {
                    tracing::warn!(broker, %error, "marking a sweep failed; sweeping later");
                    return;
                }
            };
            self.mirror.caught_up(mark).await;
            if self.mirror.revision() < mark {
                tracing::warn!(
                    broker,
                    "the metadata view did not reach the sweep's mark; sweeping later"
                );
                return;
            }
            let named = self.objects_named_in_mirror();
            for path in paths.iter().filter(|p| !named.contains(p.as_ref())) {
                tracing::info!(object = %path, "removing a write-ahead object that was never committed");
                if let Err(error) = self.log.store.delete(path).await {
                    tracing::warn!(object = %path, %error, "removing it failed; sweeping later");
                }
            }
        }
    }

    /// The objects the manifests in the metadata mirror name now.
    fn objects_named_in_mirror(&self) -> HashSet<String> {
        let manifests = self.mirror.range(&self.log.catalog.manifests_prefix());
        let parsed = manifests.iter().filter_map(|kv| parse_manifest(kv).ok());
        parsed.map(|m| m.object).collect()
    }
}

/// Every run of the manifest is in a committed segment, below its log start, or of a topic
/// that is gone.
fn all_compacted(state: &ClusterState, manifest: &WalManifest) -> bool {
    manifest.topics.iter().all(|topic| {
        let live = state
            .topics
            .get(&topic.topic)
            .is_some_and(|t| t.id == topic.id);
        !live
            || topic.runs.iter().all(|run| {
                let record = state
                    .partition(&topic.topic, run.partition)
                    .and_then(|v| v.record.as_ref());
                record.is_some_and(|r| {
                    run.last_offset < r.segment_end() || run.last_offset < r.log_start_offset
                })
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::tests::{broker, broker_compacting_when_due, produce, uploaded_compaction};
    use crate::log::reader;
    use crate::meta::kv::Op;
    use crate::meta::mirror::tests::eventually;

    /// The segment end of t-`id` as the broker's cluster view has it.
    fn viewed_end(b: &Broker, id: i32) -> i64 {
        let state = b.cluster();
        let view = state.partition("t", id).unwrap();
        view.record.as_ref().unwrap().segment_end()
    }

    /// Commits a compaction as the compaction loop does; its revision, None if fenced.
    async fn commit(b: &Broker, p: &Partition, c: &Compacted) -> Option<i64> {
        let changes = [(&*p.topic, p.id, &c.owned, &c.record)];
        b.log.catalog.commit_owned_records(&changes).await.unwrap()
    }

    #[tokio::test]
    async fn compacted_runs_become_segments_and_their_objects_go() {
        let t = broker(2_000).await;
        let b = &t.broker;
        b.create_topic("t", 2, Default::default()).await.unwrap();
        for round in 0..6 {
            assert_eq!(produce(b, "t", 0, 10).await, round * 10);
            assert_eq!(produce(b, "t", 1, 1).await, round);
        }
        // each produce here is a flush of its own: one object per partition and round
        assert_eq!(b.log.store.list_wal().await.unwrap().len(), 12);
        b.compact_owned().await;
        let p0 = b.topic("t").unwrap().partitions[0].current();
        let p1 = b.topic("t").unwrap().partitions[1].current();
        let end = |p: &Partition| p.owned().unwrap().record.segment_end();
        // partition 0 holds three segments' worth: compacted in rounds of one segment each;
        // partition 1 is small and young: left in the write-ahead objects
        assert_eq!(end(&p0), 60);
        assert_eq!(p0.segments().len(), 3);
        // the segments' batches moved in the cache from their pending names to their own
        for segment in p0.segments() {
            let key = p0.segment_key(&segment);
            assert!(b.log.cache.contains(&key), "{key} not cached");
            assert!(!b.log.cache.contains(&format!("pending:{key}")));
        }
        assert_eq!(end(&p1), 0);
        let read = reader::read(&b.log, &p0, 0, 1 << 20, true).await.unwrap();
        let records = read.records.concat();
        let offsets: Vec<i64> = crate::log::segment::BatchWalker::new(&records)
            .map(|r| r.unwrap().1.base_offset)
            .collect();
        assert_eq!(offsets, (0..6).map(|i| i * 10).collect::<Vec<_>>());
        // the objects of partition 0 go; partition 1's runs are only in write-ahead objects
        assert!(eventually(|| viewed_end(b, 0) == 60).await);
        b.delete_compacted_objects().await;
        assert_eq!(b.log.store.list_wal().await.unwrap().len(), 6);
        // once every run is in a segment (by age), the objects and manifests go
        let later = now_ms() + 3_600_000;
        for p in [&p0, &p1] {
            while let Some(c) = p.compact(&b.log, later).await {
                let revision = commit(b, p, &c).await.unwrap();
                p.compacted(&b.log, c, revision);
            }
        }
        assert_eq!(end(&p1), 6);
        assert!(eventually(|| viewed_end(b, 1) == 6).await);
        b.delete_compacted_objects().await;
        assert_eq!(b.log.store.list_wal().await.unwrap().len(), 0);
        assert!(b.log.wal.manifests().is_empty());
        let manifests = b
            .log
            .catalog
            .kv()
            .range(&b.log.catalog.manifests_prefix())
            .await;
        assert!(manifests.unwrap().kvs.is_empty());
        // the log reads the same from segments alone
        let read = reader::read(&b.log, &p1, 0, 1 << 20, true).await.unwrap();
        let records = read.records.concat();
        let offsets: Vec<i64> = crate::log::segment::BatchWalker::new(&records)
            .map(|r| r.unwrap().1.base_offset)
            .collect();
        assert_eq!(offsets, (0..6).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_partition_reaching_a_segments_worth_is_compacted_without_waiting_for_a_round() {
        let t = broker_compacting_when_due(2_000).await;
        let b = &t.broker;
        b.create_topic("t", 2, Default::default()).await.unwrap();
        // about 1.2 kB each: the second makes a segment's worth of partition 0
        assert_eq!(produce(b, "t", 0, 10).await, 0);
        assert_eq!(produce(b, "t", 1, 10).await, 0);
        assert_eq!(produce(b, "t", 0, 10).await, 10);
        let p0 = b.topic("t").unwrap().partitions[0].current();
        let p1 = b.topic("t").unwrap().partitions[1].current();
        let end = |p: &Partition| p.owned().unwrap().record.segment_end();
        assert!(eventually(|| end(&p0) == 20).await, "compacted when due");
        assert_eq!(end(&p1), 0, "less than a segment: left for its age");
    }

    #[tokio::test]
    async fn a_round_compacts_past_one_compactions_limits_until_nothing_is_due() {
        let t = broker(100).await;
        let b = &t.broker;
        b.create_topic("t", 1, Default::default()).await.unwrap();
        for round in 0..40 {
            assert_eq!(produce(b, "t", 0, 1).await, round);
        }
        // a segment of about 100 bytes is a batch or two: far more segments than one
        // compaction makes (16) are due, and one round makes them all
        b.compact_owned().await;
        let p = b.topic("t").unwrap().partitions[0].current();
        assert_eq!(p.owned().unwrap().record.segment_end(), 40);
        assert!(p.segments().len() > 16, "{} segments", p.segments().len());
    }

    #[tokio::test]
    async fn nothing_is_deleted_while_the_copy_of_the_store_is_rebuilding() {
        let t = broker(100).await;
        let b = &t.broker;
        let (p, c) = uploaded_compaction(b).await;
        let revision = commit(b, &p, &c).await.unwrap();
        p.compacted(&b.log, c, revision);
        assert!(eventually(|| viewed_end(b, 0) == 3).await);
        // mid-rebuild the copy can lack topics and brokers whose objects are still needed
        b.mirror.set_live(false);
        b.delete_compacted_objects().await;
        assert_eq!(b.log.store.list_wal().await.unwrap().len(), 1);
        assert_eq!(b.log.wal.manifests().len(), 1);
        b.mirror.set_live(true);
        b.delete_compacted_objects().await;
        assert_eq!(b.log.store.list_wal().await.unwrap().len(), 0);
    }

    #[tokio::test]
    async fn a_closed_log_is_not_compacted_and_one_claimed_again_is() {
        let t = broker(100).await;
        let b = &t.broker;
        b.create_topic("t", 1, Default::default()).await.unwrap();
        assert_eq!(produce(b, "t", 0, 3).await, 0);
        let slot = b.topic("t").unwrap().partitions[0].clone();
        let (first, epoch) = (slot.current(), slot.current().leader_epoch());
        let later = now_ms() + 3_600_000;
        // the owner key goes (as when it was released): the log closes, the broker claims the
        // partition again; the closed log (still holding its claim) compacts nothing
        let owner = b.log.catalog.owner_key("t", 0);
        let kv = b.log.catalog.kv();
        kv.txn(vec![], vec![Op::Delete(owner)]).await.unwrap();
        let reclaimed = || slot.current().is_leader() && slot.current().leader_epoch() > epoch;
        assert!(eventually(reclaimed).await);
        assert!(first.compact(&b.log, later).await.is_none());
        assert_eq!(produce(b, "t", 0, 3).await, 3);
        let p = slot.current();
        let c = p.compact(&b.log, later).await.expect("due");
        assert!(
            commit(b, &p, &c).await.is_some(),
            "the new claim's compaction was fenced"
        );
    }

    #[tokio::test]
    async fn a_compaction_whose_answer_was_lost_is_taken_in() {
        let t = broker(100).await;
        let b = &t.broker;
        let (p, c) = uploaded_compaction(b).await;
        let landed = commit(b, &p, &c).await.unwrap();
        // the store committed it, the broker never heard: its record stays the one before
        drop(c);
        assert_eq!(p.owned().unwrap().record.segment_end(), 0);
        // the cluster view shows the segment end moved: the objects compacted go
        assert!(eventually(|| viewed_end(b, 0) == 3).await);
        b.delete_compacted_objects().await;
        assert!(b.log.wal.manifests().is_empty());
        // the owner took the record in: it reads its log from the segment and compacts on
        assert!(eventually(|| p.owned().is_some_and(|o| o.revision == landed)).await);
        assert_eq!(p.owned().unwrap().record.segment_end(), 3);
        let read = reader::read(&b.log, &p, 0, 1 << 20, true).await.unwrap();
        let records = read.records.concat();
        let offsets: Vec<i64> = crate::log::segment::BatchWalker::new(&records)
            .map(|r| r.unwrap().1.base_offset)
            .collect();
        assert_eq!(offsets, vec![0]);
        assert_eq!(produce(b, "t", 0, 2).await, 3);
        let c = p.compact(&b.log, now_ms() + 3_600_000).await.expect("due");
        assert!(
            commit(b, &p, &c).await.is_some(),
            "the compaction after it was fenced"
        );
    }
}
