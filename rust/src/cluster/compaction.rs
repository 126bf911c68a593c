//! Every compaction interval: the partitions this broker owns whose write-ahead runs are due
//! become segments (uploaded concurrently, committed in batched transactions, so the metadata
//! writes do not grow with the partitions compacted), then manifests whose runs all live in
//! segments go – object first, then manifest – and, now and then, write-ahead objects that
//! were never committed and are old enough that no commit can still be on its way.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::broker::Broker;
use crate::cluster::state::ClusterState;
use crate::log::partition::{now_ms, Compacted, Partition};
use crate::meta::wal::WalManifest;

/// Partitions compacted at once (each holds its runs' bytes while its segment uploads).
const COMPACTIONS_IN_PARALLEL: usize = 8;

/// An object no manifest names is deleted once this old: far beyond any flush's upload and
/// commit, so no commit of it can still land.
const UNCOMMITTED_OBJECT_AGE: Duration = Duration::from_secs(600);

/// The sweep of uncommitted objects lists the bucket this often.
const SWEEP_INTERVAL: Duration = Duration::from_secs(300);

pub fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        let every = broker.log.settings.wal_compaction_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep = tokio::time::Instant::now();
        loop {
            tick.tick().await;
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            broker.compact_owned().await;
            broker.delete_compacted_objects().await;
            if last_sweep.elapsed() >= SWEEP_INTERVAL {
                last_sweep = tokio::time::Instant::now();
                broker.sweep_uncommitted_objects().await;
            }
        }
    });
}

impl Broker {
    /// Compacts every owned partition that is due, and commits the switches in batches.
    pub(crate) async fn compact_owned(&self) {
        let owned: Vec<Arc<Partition>> = self
            .topics()
            .iter()
            .flat_map(|t| t.partitions.iter().map(|s| s.current()))
            .filter(|p| p.is_leader())
            .collect();
        let now = now_ms();
        let ready: Vec<(Arc<Partition>, Compacted)> = futures::stream::iter(owned)
            .map(|p| async move { p.compact(&self.log, now).await.map(|c| (p, c)) })
            .buffer_unordered(COMPACTIONS_IN_PARALLEL)
            .filter_map(|c| async move { c })
            .collect()
            .await;
        let per_txn = (self.log.catalog.kv().max_txn_ops() / 2).max(1);
        let mut ready = ready.into_iter().peekable();
        while ready.peek().is_some() {
            let batch: Vec<_> = ready.by_ref().take(per_txn).collect();
            self.commit_compacted(batch).await;
        }
    }

    /// Commits one batch; a batch refused because one partition moved is split until the
    /// moved one stands alone (it is given up; its new owner compacts it).
    async fn commit_compacted(&self, batch: Vec<(Arc<Partition>, Compacted)>) {
        let mut work = vec![batch];
        while let Some(mut batch) = work.pop() {
            let changes: Vec<_> = batch
                .iter()
                .map(|(p, c)| (&*p.topic, p.id, &c.owned, &c.record))
                .collect();
            match self.log.catalog.commit_owned_records(&changes).await {
                Ok(Some(revision)) => {
                    for (partition, compacted) in batch {
                        partition.compacted(&self.log, compacted, revision);
                    }
                }
                Ok(None) if batch.len() > 1 => {
                    let second = batch.split_off(batch.len() / 2);
                    work.push(second);
                    work.push(batch);
                }
                Ok(None) => tracing::info!(topic = %batch[0].0.topic, partition = batch[0].0.id,
                    "compaction found the partition moved; leaving it to its owner"),
                Err(error) => tracing::warn!(%error, partitions = batch.len(),
                    "committing compacted segments failed; retrying next round"),
            }
        }
    }

    /// Deletes the write-ahead objects (then manifests) whose runs are all in segments, or
    /// whose topics are gone: this broker's own, and – on the live broker with the lowest
    /// id – those of brokers that are not registered.
    pub(crate) async fn delete_compacted_objects(&self) {
        let state = self.cluster();
        let me = self.config.broker_id;
        let sweeper = state.live_brokers().first() == Some(&me);
        for (key, manifest) in self.log.wal.manifests() {
            let mine =
                manifest.broker == me || (sweeper && !state.brokers.contains_key(&manifest.broker));
            if !mine || !all_compacted(&state, &manifest) {
                continue;
            }
            let Ok(path) = object_store::path::Path::parse(&manifest.object) else {
                continue;
            };
            let deleted = match self.log.store.delete(&path).await {
                Ok(()) => self
                    .log
                    .catalog
                    .delete_manifest(&key)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match deleted {
                Ok(()) => self.log.wal.remove(&key),
                Err(error) => {
                    tracing::warn!(object = %path, %error, "deleting a compacted write-ahead object failed; retrying next round");
                    return;
                }
            }
        }
    }

    /// Deletes write-ahead objects that no manifest names and that are old enough that their
    /// commit cannot land any more (a crash or failure between upload and commit). Run by the
    /// live broker with the lowest id, while its view of the manifests is current.
    pub(crate) async fn sweep_uncommitted_objects(&self) {
        let state = self.cluster();
        if state.live_brokers().first() != Some(&self.config.broker_id) || !self.mirror.is_live() {
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
        let old = now_ms() - UNCOMMITTED_OBJECT_AGE.as_millis() as i64;
        for (path, written_ms) in listed {
            if written_ms > old || named.contains(path.as_ref()) {
                continue;
            }
            tracing::info!(object = %path, "removing a write-ahead object that was never committed");
            if let Err(error) = self.log.store.delete(&path).await {
                tracing::warn!(object = %path, %error, "removing it failed; sweeping later");
            }
        }
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
