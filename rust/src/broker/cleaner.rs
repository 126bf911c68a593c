//! The cleaner of compacted topics on this broker (`log::cleaner`): every backoff, the owned
//! partitions of topics whose cleanup.policy includes compact are measured, and cleaned one at
//! a time, dirtiest first, while they are due. What each measured is kept for the gauges.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::log::cleaner::{self, CleanerSettings, CleaningRules};
use crate::log::partition::{now_ms, Partition};
use crate::log::topic_config::{
    cleanup_policy, topic_fraction, topic_number, DELETE_RETENTION_MS, MAX_COMPACTION_LAG_MS,
    MIN_CLEANABLE_DIRTY_RATIO, MIN_COMPACTION_LAG_MS,
};
use crate::metrics::PartitionDirt;

pub(super) fn spawn(broker: &Arc<Broker>) {
    let broker = broker.clone();
    tokio::spawn(async move {
        let every = Duration::from_millis(broker.config.log_cleaner_backoff_ms.max(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if broker.stopping.load(Ordering::Acquire) {
                return;
            }
            broker.clean_owned().await;
        }
    });
}

impl Broker {
    /// One round: measures each owned compacted partition and cleans those due.
    pub(crate) async fn clean_owned(&self) {
        let settings = CleanerSettings {
            map_bytes: self.config.log_cleaner_dedupe_buffer_size,
            delete_delay: Duration::from_millis(self.config.file_delete_delay_ms),
        };
        let mut measured: Vec<(f64, Arc<Partition>, CleaningRules)> = Vec::new();
        let mut report = Vec::new();
        for topic in self.topics() {
            let Some(rules) = cleaning_rules(&topic.record.configs, &self.config) else {
                continue;
            };
            let rules = CleaningRules {
                segment_bytes: topic.limits.segment_bytes(),
                ..rules
            };
            for slot in &topic.partitions {
                let partition = slot.current();
                if !partition.is_leader() {
                    continue;
                }
                let now = now_ms();
                match cleaner::dirt(&self.log, &partition, &rules, now).await {
                    Ok((dirt, _)) => {
                        report.push(PartitionDirt {
                            topic: topic.record.name.clone(),
                            partition: partition.id,
                            dirty_ratio: dirt.ratio(),
                            lag_ms: dirt.oldest_dirty_ms.map_or(0, |at| (now - at).max(0)),
                        });
                        measured.push((dirt.ratio(), partition, rules));
                    }
                    Err(error) => {
                        tracing::warn!(topic = %partition.topic, partition = partition.id,
                            %error, "measuring a compacted partition failed; retrying next round")
                    }
                }
            }
        }
        self.metrics.set_cleaner_dirt(report);
        measured.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, partition, rules) in measured {
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            self.clean_one(&partition, rules, settings).await;
        }
    }

    async fn clean_one(
        &self,
        partition: &Arc<Partition>,
        rules: CleaningRules,
        settings: CleanerSettings,
    ) {
        let started = std::time::Instant::now();
        match cleaner::clean(&self.log, partition, rules, settings, now_ms()).await {
            Ok(Some(done)) => {
                let metrics = &self.metrics;
                metrics.cleaner_cleanings.inc();
                metrics.cleaner_bytes_read.inc_by(done.bytes_read);
                metrics.cleaner_bytes_written.inc_by(done.bytes_written);
                metrics.cleaner_records_removed.inc_by(done.records_removed);
                tracing::info!(topic = %partition.topic, partition = partition.id,
                    bytes_read = done.bytes_read, bytes_written = done.bytes_written,
                    records_removed = done.records_removed,
                    segments = done.segments_written,
                    cleaned_end = done.cleaned.map_or(0, |c| c.end),
                    seconds = started.elapsed().as_secs_f64(), "cleaned a compacted partition");
            }
            Ok(None) => {}
            Err(error) => {
                self.metrics.cleaner_errors.inc();
                tracing::warn!(topic = %partition.topic, partition = partition.id, %error,
                    "cleaning a compacted partition failed; the log is as it was, retrying \
                     next round");
            }
        }
    }
}

/// A topic's cleaning rules, from its configs or the broker defaults; None unless its
/// cleanup.policy includes compact.
pub(crate) fn cleaning_rules(
    configs: &BTreeMap<String, String>,
    config: &BrokerConfig,
) -> Option<CleaningRules> {
    if !cleanup_policy(configs).compact {
        return None;
    }
    let millis = |key: &str, default: i64| topic_number(configs, key).unwrap_or(default);
    Some(CleaningRules {
        min_cleanable_dirty_ratio: topic_fraction(configs, MIN_CLEANABLE_DIRTY_RATIO)
            .unwrap_or(config.log_cleaner_min_cleanable_ratio),
        min_compaction_lag_ms: millis(
            MIN_COMPACTION_LAG_MS,
            config.log_cleaner_min_compaction_lag_ms,
        ),
        max_compaction_lag_ms: millis(
            MAX_COMPACTION_LAG_MS,
            config.log_cleaner_max_compaction_lag_ms,
        ),
        delete_retention_ms: millis(DELETE_RETENTION_MS, config.log_cleaner_delete_retention_ms),
        segment_bytes: config.segment_bytes,
    })
}
