//! The committed bounds of a topic's partitions as the segment readers see them, read from
//! etcd: the log start and the segment end. Readers scan `.kfs` segments only, so they see the
//! log up to where compaction has reached (the committed tail above it is in write-ahead
//! objects, at most `wal_compaction_age` plus one compaction interval old); a reader given
//! these bounds never returns a record from an object a broker uploaded but did not commit.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client as etcd;

use crate::meta::catalog::{Catalog, PartitionRecord, TopicRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBounds {
    pub partition: i32,
    pub log_start_offset: i64,
    /// Where the committed segments end: the end of what a segment reader can return.
    pub high_watermark: i64,
}

/// The bounds of every partition of `topic` in the cluster named `namespace`, by partition.
pub async fn committed_bounds(
    endpoints: &[String],
    namespace: &str,
    topic: &str,
) -> Result<Vec<PartitionBounds>, String> {
    let described = endpoints.join(",");
    let failed = |e: etcd::Error| {
        format!(
            "etcd at {described}: {e}. Check the etcd endpoints option lists reachable client URLs"
        )
    };
    let options = etcd::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(15));
    let mut client = etcd::Client::connect(endpoints, Some(options))
        .await
        .map_err(failed)?;
    let prefix = Catalog::partition_records_prefix(namespace, topic);
    let listing = client
        .get(prefix.as_str(), Some(etcd::GetOptions::new().with_prefix()))
        .await
        .map_err(failed)?;
    // Partitions nobody claimed yet have no record: they are empty logs, up to the topic's
    // partition count (read after the records: a claim never comes before its topic key).
    let topic_key = Catalog::topic_record_key(namespace, topic);
    let topic_kv = client.get(topic_key.as_str(), None).await.map_err(failed)?;
    let partitions = match topic_kv.kvs().first() {
        Some(kv) => {
            serde_json::from_slice::<TopicRecord>(kv.value())
                .map_err(|e| format!("etcd key {topic_key} does not hold a topic record: {e}"))?
                .partitions
        }
        // No topic (a deleted one's records stay until its owners let go): nothing to read.
        None => return Ok(Vec::new()),
    };
    let mut records = BTreeMap::new();
    for kv in listing.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        // Owner keys sit below the records (`{p}/owner`); only `{p}` itself is a record.
        let Some(Ok(partition)) = key.strip_prefix(&prefix).map(str::parse::<i32>) else {
            continue;
        };
        let record: PartitionRecord = serde_json::from_slice(kv.value())
            .map_err(|e| format!("etcd key {key} does not hold a partition record: {e}"))?;
        records.insert(partition, record);
    }
    for partition in 0..partitions {
        records
            .entry(partition)
            .or_insert_with(PartitionRecord::empty);
    }
    let bounds = records
        .into_iter()
        .map(|(partition, record)| PartitionBounds {
            partition,
            log_start_offset: record.log_start_offset,
            high_watermark: record.segment_end(),
        });
    Ok(bounds.collect())
}
