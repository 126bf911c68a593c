//! Gauges computed at scrape time from what the broker holds right now: owned partitions,
//! partitions nobody owns (in this broker's view of the cluster), segment cache size, and,
//! from the Python coordinator's latest report, coordinated groups, their members and each
//! committed offset's lag behind the partition's high watermark.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

use super::Broker;
use crate::metrics::{LabelText, PartitionDirt};

pub(crate) struct BrokerGauges {
    broker: Arc<Broker>,
}

impl std::fmt::Debug for BrokerGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerGauges")
    }
}

impl BrokerGauges {
    pub(crate) fn new(broker: Arc<Broker>) -> Self {
        BrokerGauges { broker }
    }
}

/// One unlabelled gauge.
fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: i64,
) -> std::fmt::Result {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
}

/// One gauge per measured compacted partition, labelled with its topic and partition.
fn partition_gauge<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    values: impl Iterator<Item = (&'a PartitionDirt, f64)>,
) -> std::fmt::Result {
    let kind = ConstGauge::new(0.0f64).metric_type();
    let mut family = encoder.encode_descriptor(name, help, unit, kind)?;
    for (measured, value) in values {
        let partition = measured.partition.to_string();
        let labels = [
            ("topic", LabelText(&measured.topic)),
            ("partition", LabelText(&partition)),
        ];
        ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for BrokerGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let topics = self.broker.topics();
        let owned = topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|slot| slot.current().is_leader())
            .count();
        gauge(
            &mut encoder,
            "kafscale_owned_partitions",
            "Partitions this broker owns (writes and flushes)",
            None,
            owned as i64,
        )?;
        gauge(
            &mut encoder,
            "kafscale_partitions_without_owner",
            "Partitions of the cluster that no live broker owns, as this broker's view of the \
             metadata store has it (writes to them fail until one is claimed)",
            None,
            self.broker.cluster().partitions_without_owner() as i64,
        )?;
        gauge(
            &mut encoder,
            "kafscale_cache",
            "Bytes of committed segments held in the segment cache",
            Some(&Unit::Bytes),
            self.broker.log.cache.bytes() as i64,
        )?;

        let dirt = self.broker.metrics.cleaner_dirt();
        partition_gauge(
            &mut encoder,
            "kafscale_cleaner_dirty_ratio",
            "Share of an owned compacted partition's segment bytes not yet cleaned (and old \
             enough to clean), as the cleaner last measured it",
            None,
            dirt.iter().map(|d| (d, d.dirty_ratio)),
        )?;
        partition_gauge(
            &mut encoder,
            "kafscale_cleaner_lag",
            "How long the newest record of an owned compacted partition's oldest uncleaned \
             segment has waited for the cleaner",
            Some(&Unit::Seconds),
            dirt.iter().map(|d| (d, d.lag_ms as f64 / 1000.0)),
        )?;

        let snapshot = self.broker.metrics.group_snapshot();
        gauge(
            &mut encoder,
            "kafscale_coordinated_groups",
            "Consumer groups this broker coordinates",
            None,
            snapshot.groups.len() as i64,
        )?;
        let members = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "kafscale_group_members",
            "Members of each consumer group this broker coordinates",
            None,
            members.metric_type(),
        )?;
        for group in &snapshot.groups {
            let labels = [
                ("group", LabelText(&group.group)),
                ("state", LabelText(&group.state)),
            ];
            ConstGauge::new(group.members).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "kafscale_consumer_group_lag",
            "Records between a group's committed offset and the partition's high watermark",
            None,
            members.metric_type(),
        )?;
        for group in &snapshot.groups {
            for (topic, partition, committed) in &group.offsets {
                let Some(high_watermark) = self.high_watermark(topic, *partition) else {
                    continue; // the topic or partition is gone
                };
                let partition = partition.to_string();
                let labels = [
                    ("group", LabelText(&group.group)),
                    ("topic", LabelText(topic)),
                    ("partition", LabelText(&partition)),
                ];
                let lag = (high_watermark - committed).max(0);
                ConstGauge::new(lag).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

impl BrokerGauges {
    fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        let topic = self.broker.topic(topic)?;
        let slot = topic.partitions.get(usize::try_from(partition).ok()?)?;
        Some(slot.current().high_watermark())
    }
}
