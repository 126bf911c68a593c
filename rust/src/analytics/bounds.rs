//! The committed bounds of a topic's partitions as the segment readers see them, read from
//! etcd: the log start and the segment end. Readers scan `.kfs` segments only, so they see the
//! log up to where compaction has reached (the committed tail above it is in write-ahead
//! objects, at most `wal_compaction_age` plus one compaction interval old); a reader given
//! these bounds never returns a record from an object a broker uploaded but did not commit.

use std::time::Duration;

use etcd_client as etcd;

use crate::meta::catalog::{Catalog, PartitionRecord};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBounds {
    pub partition: i32,
    pub log_start_offset: i64,
    /// Where the committed segments end: the end of what a segment reader can return.
    pub high_watermark: i64,
}

/// Reads every partition record of `topic` in the cluster named `namespace`.
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
    let mut bounds = Vec::new();
    for kv in listing.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        // Owner keys sit below the records (`{p}/owner`); only `{p}` itself is a record.
        let Some(Ok(partition)) = key.strip_prefix(&prefix).map(str::parse::<i32>) else {
            continue;
        };
        let record: PartitionRecord = serde_json::from_slice(kv.value())
            .map_err(|e| format!("etcd key {key} does not hold a partition record: {e}"))?;
        bounds.push(PartitionBounds {
            partition,
            log_start_offset: record.log_start_offset,
            high_watermark: record.segment_end(),
        });
    }
    bounds.sort_by_key(|b| b.partition);
    Ok(bounds)
}
