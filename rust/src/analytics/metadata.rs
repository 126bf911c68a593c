//! What is committed of a topic, as a reader outside the brokers learns it: the topic record,
//! each partition's record (log start, segment end) and the write-ahead runs committed above
//! the segment ends. A cluster's comes from its etcd (one revision for all of it); a
//! single-node broker's from the metadata it publishes next to its data (`meta::published`),
//! which it writes before it acknowledges what a change commits. Runs come only from manifests,
//! so an object no commit named (a fenced broker's upload) is never read.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use etcd_client as etcd;
use serde::de::DeserializeOwned;

use super::error::ReadError;
use crate::meta::catalog::{Catalog, PartitionRecord, TopicRecord};
use crate::meta::wal::WalManifest;
use crate::store::SegmentStore;

/// Where a reader learns what is committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Metadata {
    /// The etcd of the cluster whose namespace is `namespace`.
    Etcd {
        endpoints: Vec<String>,
        namespace: String,
    },
    /// The single-node broker's metadata, published in the storage read.
    Published,
    /// None: segments only, each up to its footer (a cluster's storage read without its etcd).
    SegmentsOnly,
}

/// One partition's committed batches in a write-ahead object: offsets `base_offset..end_offset`
/// at bytes `position..position + length` of `object` (its path in the storage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunRef {
    pub object: String,
    pub position: u64,
    pub length: u64,
    pub base_offset: i64,
    pub end_offset: i64,
    /// It holds a transaction's batches or markers.
    pub transactional: bool,
}

/// A topic's committed state at one moment.
#[derive(Debug, Clone)]
pub(crate) struct TopicSnapshot {
    /// Every partition of the topic; one nobody claimed yet is an empty log.
    pub records: BTreeMap<i32, PartitionRecord>,
    /// The committed runs of each partition, by base offset (those below the segment end
    /// included: compaction deletes their manifests after it commits).
    pub runs: BTreeMap<i32, Vec<RunRef>>,
}

impl Metadata {
    /// The topic's committed state; None if the metadata knows no such topic.
    pub(crate) async fn snapshot(
        &self,
        store: &SegmentStore,
        topic: &str,
    ) -> Result<Option<TopicSnapshot>, ReadError> {
        match self {
            Metadata::Etcd {
                endpoints,
                namespace,
            } => etcd_snapshot(endpoints, namespace, topic).await,
            Metadata::Published => {
                let parts = from_published(store, topic).await?;
                Ok(parts.map(|(topic, records, manifests)| snapshot(topic, records, manifests)))
            }
            Metadata::SegmentsOnly => Ok(None),
        }
    }
}

impl Metadata {
    /// The topics the metadata knows (None without metadata).
    pub(crate) async fn topics(
        &self,
        store: &SegmentStore,
    ) -> Result<Option<Vec<String>>, ReadError> {
        match self {
            Metadata::Etcd {
                endpoints,
                namespace,
            } => {
                let prefix = format!("{}/topics/", Catalog::root_of(namespace));
                let mut client = etcd_client(endpoints).await?;
                let options = etcd::GetOptions::new().with_prefix().with_keys_only();
                let listing = client
                    .get(prefix.as_str(), Some(options))
                    .await
                    .map_err(|e| etcd_failed(endpoints, e))?;
                let names = listing.kvs().iter().filter_map(|kv| {
                    let key = String::from_utf8_lossy(kv.key());
                    key.strip_prefix(&prefix).map(str::to_string)
                });
                Ok(Some(names.collect()))
            }
            Metadata::Published => {
                let names = store.published_names("topics/").await?;
                let names = names.iter().filter_map(|n| n.strip_prefix("topics/"));
                Ok(Some(names.map(str::to_string).collect()))
            }
            Metadata::SegmentsOnly => Ok(None),
        }
    }
}

fn etcd_failed(endpoints: &[String], e: etcd::Error) -> ReadError {
    ReadError::Metadata(format!(
        "etcd at {}: {e}. Check the etcd endpoints option lists reachable client URLs",
        endpoints.join(",")
    ))
}

async fn etcd_client(endpoints: &[String]) -> Result<etcd::Client, ReadError> {
    let options = etcd::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(15));
    etcd::Client::connect(endpoints, Some(options))
        .await
        .map_err(|e| etcd_failed(endpoints, e))
}

/// The topic's committed state in the etcd of the cluster whose namespace is `namespace`.
pub(crate) async fn etcd_snapshot(
    endpoints: &[String],
    namespace: &str,
    topic: &str,
) -> Result<Option<TopicSnapshot>, ReadError> {
    let parts = from_etcd(endpoints, namespace, topic).await?;
    Ok(parts.map(|(topic, records, manifests)| snapshot(topic, records, manifests)))
}

impl TopicSnapshot {
    /// The partition's committed runs that carry its log on from its segments, in offset
    /// order, and whether a later run was left out because it does not follow them (a gap: a
    /// compaction seen half-way). A run may begin below the segment end: compaction cuts a
    /// segment at the first batch boundary past its size, usually inside a run, whose rest
    /// stays committed until the next compaction takes it; readers read it from the segment
    /// end on (the batches below are the segment's too).
    pub(crate) fn runs_after_segments(&self, partition: i32) -> (Vec<RunRef>, bool) {
        let Some(record) = self.records.get(&partition) else {
            return (Vec::new(), false);
        };
        let mut end = record.segment_end();
        let mut runs = Vec::new();
        for run in self.runs.get(&partition).into_iter().flatten() {
            if run.end_offset <= end {
                continue; // compacted: its manifest goes once the compaction's commit is in
            }
            if run.base_offset > end {
                return (runs, true);
            }
            end = run.end_offset;
            runs.push(run.clone());
        }
        (runs, false)
    }

    /// Where the partition's committed log ends: past its segments and the runs that follow
    /// them without a gap.
    pub(crate) fn committed_end(&self, partition: i32) -> i64 {
        let Some(record) = self.records.get(&partition) else {
            return 0;
        };
        let (runs, _) = self.runs_after_segments(partition);
        let end = runs.last().map_or(record.segment_end(), |r| r.end_offset);
        end.max(record.log_start_offset)
    }
}

/// The topic record, `(partition, record)` and the manifests, as read.
type Parts = (TopicRecord, Vec<(i32, PartitionRecord)>, Vec<WalManifest>);

fn snapshot(
    topic: TopicRecord,
    partitions: Vec<(i32, PartitionRecord)>,
    manifests: Vec<WalManifest>,
) -> TopicSnapshot {
    let mut records: BTreeMap<i32, PartitionRecord> = partitions
        .into_iter()
        .filter(|(p, _)| (0..topic.partitions).contains(p))
        .collect();
    for partition in 0..topic.partitions {
        records
            .entry(partition)
            .or_insert_with(PartitionRecord::empty);
    }
    let mut runs: BTreeMap<i32, Vec<RunRef>> = BTreeMap::new();
    for manifest in manifests {
        // A deleted topic's runs may outlive it; a re-created one has another id.
        let of_topic = manifest
            .topics
            .iter()
            .filter(|t| t.topic == topic.name && t.id == topic.id);
        for topic_runs in of_topic {
            for run in &topic_runs.runs {
                runs.entry(run.partition).or_default().push(RunRef {
                    object: manifest.object.clone(),
                    position: run.position,
                    length: run.length,
                    base_offset: run.base_offset,
                    end_offset: run.last_offset + 1,
                    transactional: topic_runs.transactional.contains(&run.partition),
                });
            }
        }
    }
    for list in runs.values_mut() {
        list.sort_by_key(|r| r.base_offset);
    }
    TopicSnapshot { records, runs }
}

fn parse<T: DeserializeOwned>(what: &str, value: &[u8]) -> Result<T, ReadError> {
    serde_json::from_slice(value)
        .map_err(|e| ReadError::Metadata(format!("{what} does not hold what a broker writes: {e}")))
}

async fn from_etcd(
    endpoints: &[String],
    namespace: &str,
    topic: &str,
) -> Result<Option<Parts>, ReadError> {
    let failed = |e: etcd::Error| etcd_failed(endpoints, e);
    let mut client = etcd_client(endpoints).await?;
    let topic_key = Catalog::topic_record_key(namespace, topic);
    let got = client.get(topic_key.as_str(), None).await.map_err(failed)?;
    let Some(kv) = got.kvs().first() else {
        return Ok(None);
    };
    let record: TopicRecord = parse(&format!("etcd key {topic_key}"), kv.value())?;
    // Everything else as of the same revision: one consistent view of the topic.
    let revision = got.header().map_or(0, |h| h.revision());
    let at = |prefix: &str| {
        let options = etcd::GetOptions::new()
            .with_prefix()
            .with_revision(revision);
        (prefix.to_string(), options)
    };
    let prefix = Catalog::partition_records_prefix(namespace, topic);
    let (key, options) = at(&prefix);
    let listing = client.get(key, Some(options)).await.map_err(failed)?;
    let mut partitions = Vec::new();
    for kv in listing.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        // Owner keys sit below the records (`{p}/owner`); only `{p}` itself is a record.
        let Some(Ok(partition)) = key.strip_prefix(&prefix).map(str::parse::<i32>) else {
            continue;
        };
        partitions.push((partition, parse(&format!("etcd key {key}"), kv.value())?));
    }
    let (key, options) = at(&format!("{}/wal/", Catalog::root_of(namespace)));
    let listing = client.get(key, Some(options)).await.map_err(failed)?;
    let manifests = listing
        .kvs()
        .iter()
        .map(|kv| {
            parse(
                &format!("etcd key {}", String::from_utf8_lossy(kv.key())),
                kv.value(),
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(Some((record, partitions, manifests)))
}

/// The published metadata is one object per key, read one after the other: a compaction
/// between the reads can show a manifest deleted before the segment end that covers it moved.
/// The log built from it then has a gap, and is read again (`ReadError::Moved`).
async fn from_published(store: &SegmentStore, topic: &str) -> Result<Option<Parts>, ReadError> {
    let published = |name: String| async move {
        let value: Option<Bytes> = store.published(&name).await?;
        Ok::<_, ReadError>(value.map(|v| (name, v)))
    };
    let Some((name, value)) = published(format!("topics/{topic}")).await? else {
        return Ok(None);
    };
    let record: TopicRecord = parse(&format!("published {name}"), &value)?;
    let mut partitions = Vec::new();
    for name in store
        .published_names(&format!("partitions/{topic}/"))
        .await?
    {
        let Some(Ok(partition)) = name.rsplit('/').next().map(str::parse::<i32>) else {
            continue;
        };
        if let Some((name, value)) = published(name).await? {
            partitions.push((partition, parse(&format!("published {name}"), &value)?));
        }
    }
    let mut manifests = Vec::new();
    for name in store.published_names("wal/").await? {
        // Deleted meanwhile: compaction collected its object.
        if let Some((name, value)) = published(name).await? {
            manifests.push(parse(&format!("published {name}"), &value)?);
        }
    }
    Ok(Some((record, partitions, manifests)))
}
