//! The broker's Prometheus metrics. Counters and histograms are updated where the work happens
//! (cheap atomics, no allocation beyond a label lookup); gauges that describe state (owned
//! partitions, cache size, groups, lag) are computed at scrape time by `broker::gauges`, so they
//! can never drift from what the broker really holds; `server::ops_endpoint` serves them with the
//! health checks. This module is a leaf: it knows nothing of the broker.

pub(crate) mod process;
pub(crate) mod quotas;
pub(crate) mod traffic;
pub(crate) mod zones;

use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use self::quotas::QuotaMetrics;
use self::traffic::TopicTraffic;
use self::zones::ZoneTraffic;

/// A label value from outside (a topic or group name), escaped as the Prometheus and OpenMetrics
/// text formats require. prometheus-client writes label values verbatim and leaves escaping to
/// the value's encoder, so an unescaped quote or newline would forge series or break the page.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct LabelText<'a>(pub &'a str);

impl EncodeLabelValue for LabelText<'_> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ApiLabels {
    pub api: ApiName,
}

/// A Kafka API key, shown by its name ("Produce"); the name is only spelled out at scrape time.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct ApiName(pub i16);

impl EncodeLabelValue for ApiName {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        match ApiKey::try_from(self.0) {
            Ok(key) => write!(encoder, "{key:?}"),
            Err(()) => write!(encoder, "{}", self.0),
        }
    }
}

/// A metadata store request: which store (`etcd` or `embedded`) and which operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MetadataLabels {
    pub store: &'static str,
    pub operation: &'static str,
}

/// Request latencies span sub-millisecond metadata calls to multi-second long polls.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// What the Python group coordinator reports about the groups it coordinates; lag is worked
/// out from it against the high watermarks at scrape time.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupSnapshot {
    pub groups: Vec<GroupState>,
}

#[derive(Debug, Clone)]
pub(crate) struct GroupState {
    pub group: String,
    pub state: String,
    pub members: i64,
    /// (topic, partition, committed offset)
    pub offsets: Vec<(String, i32, i64)>,
}

#[derive(Debug)]
pub(crate) struct Metrics {
    pub request_duration: Family<ApiLabels, Histogram>,
    /// Produce and fetch counters per served topic (encoded by `traffic`'s collector).
    pub topic_traffic: TopicTraffic,
    /// Produce and fetch bytes by zone crossing.
    pub zone_traffic: ZoneTraffic,
    /// Per configured client quota: usage and throttling.
    pub quotas: QuotaMetrics,
    pub flush_duration: Histogram,
    pub flush_errors: Counter,
    pub upload_duration: Histogram,
    pub upload_errors: Counter,
    pub metadata_duration: Family<MetadataLabels, Histogram>,
    pub metadata_errors: Family<MetadataLabels, Counter>,
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    pub wal_objects_written: Counter,
    pub wal_commits: Counter,
    pub wal_bytes_written: Counter,
    pub compaction_segments_written: Counter,
    pub compaction_bytes_written: Counter,
    pub cleaner_cleanings: Counter,
    pub cleaner_bytes_read: Counter,
    pub cleaner_bytes_written: Counter,
    pub cleaner_records_removed: Counter,
    pub cleaner_errors: Counter,
    pub groups: Mutex<GroupSnapshot>,
    /// What the cleaner measured of each owned compacted partition in its last round.
    pub cleaner_dirt: Mutex<Vec<PartitionDirt>>,
}

/// How dirty one compacted partition was when the cleaner last measured it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartitionDirt {
    pub topic: String,
    pub partition: i32,
    pub dirty_ratio: f64,
    /// How long the oldest uncleaned segment's newest record has waited (0: nothing dirty).
    pub lag_ms: i64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            request_duration: Family::new_with_constructor(latency_histogram),
            topic_traffic: TopicTraffic::default(),
            zone_traffic: ZoneTraffic::default(),
            quotas: QuotaMetrics::default(),
            flush_duration: latency_histogram(),
            flush_errors: Counter::default(),
            upload_duration: latency_histogram(),
            upload_errors: Counter::default(),
            metadata_duration: Family::new_with_constructor(latency_histogram),
            metadata_errors: Family::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            wal_objects_written: Counter::default(),
            wal_commits: Counter::default(),
            wal_bytes_written: Counter::default(),
            compaction_segments_written: Counter::default(),
            compaction_bytes_written: Counter::default(),
            cleaner_cleanings: Counter::default(),
            cleaner_bytes_read: Counter::default(),
            cleaner_bytes_written: Counter::default(),
            cleaner_records_removed: Counter::default(),
            cleaner_errors: Counter::default(),
            groups: Mutex::new(GroupSnapshot::default()),
            cleaner_dirt: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Adds every counter and histogram to `registry` (they stay shared: updates show at the
    /// next scrape).
    pub(crate) fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("kafscale");
        r.register_with_unit(
            "request_duration",
            "Time from a decoded request to its response, per Kafka API",
            Unit::Seconds,
            self.request_duration.clone(),
        );
        r.register_with_unit(
            "flush_duration",
            "Time of one write-ahead flush: object upload and manifest commit",
            Unit::Seconds,
            self.flush_duration.clone(),
        );
        r.register(
            "flush_errors",
            "Flushes that failed (their writes stay buffered and are retried)",
            self.flush_errors.clone(),
        );
        r.register_with_unit(
            "object_store_upload_duration",
            "Time to upload one write-ahead, segment or index object",
            Unit::Seconds,
            self.upload_duration.clone(),
        );
        r.register(
            "object_store_upload_errors",
            "Segment or index uploads that failed",
            self.upload_errors.clone(),
        );
        r.register_with_unit(
            "metadata_request_duration",
            "Time of one metadata store request (etcd or the embedded store), per operation; \
             the txn count is the metadata writes",
            Unit::Seconds,
            self.metadata_duration.clone(),
        );
        r.register(
            "metadata_request_errors",
            "Metadata store requests that failed, per operation",
            self.metadata_errors.clone(),
        );
        r.register(
            "cache_hits",
            "Fetches of committed segments served from the segment cache",
            self.cache_hits.clone(),
        );
        r.register(
            "cache_misses",
            "Fetches of committed segments that had to read the object store",
            self.cache_misses.clone(),
        );
        r.register(
            "wal_objects_written",
            "Write-ahead objects uploaded and committed (one per flush, all partitions)",
            self.wal_objects_written.clone(),
        );
        r.register(
            "wal_commits",
            "Metadata transactions that committed write-ahead objects (objects uploaded \
             together share one)",
            self.wal_commits.clone(),
        );
        r.register_with_unit(
            "wal_written",
            "Bytes of committed write-ahead objects",
            Unit::Bytes,
            self.wal_bytes_written.clone(),
        );
        r.register(
            "compaction_segments_written",
            "Segments compaction committed (each one .kfs and one .index object)",
            self.compaction_segments_written.clone(),
        );
        r.register_with_unit(
            "compaction_written",
            "Bytes of segments compaction committed",
            Unit::Bytes,
            self.compaction_bytes_written.clone(),
        );
        r.register(
            "cleaner_cleanings",
            "Cleanings of compacted partitions committed",
            self.cleaner_cleanings.clone(),
        );
        r.register_with_unit(
            "cleaner_read",
            "Bytes of segments the cleaner read (the cleaned part and the dirty one)",
            Unit::Bytes,
            self.cleaner_bytes_read.clone(),
        );
        r.register_with_unit(
            "cleaner_written",
            "Bytes of cleaned segments the cleaner committed",
            Unit::Bytes,
            self.cleaner_bytes_written.clone(),
        );
        r.register(
            "cleaner_records_removed",
            "Records cleanings removed: superseded by a later record of their key, without a \
             key, or tombstones past their delete horizon",
            self.cleaner_records_removed.clone(),
        );
        r.register(
            "cleaner_errors",
            "Cleanings that stopped without committing (the log stays as it was)",
            self.cleaner_errors.clone(),
        );
        self.zone_traffic.register(r);
        self.quotas.register(r);
    }

    pub(crate) fn observe_request(&self, api: ApiKey, started: Instant) {
        self.request_duration
            .get_or_create(&ApiLabels {
                api: ApiName(api as i16),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// A deleted topic's series go with it (a re-created one starts from zero).
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.topic_traffic.forget(topic);
    }

    pub(crate) fn observe_metadata(
        &self,
        store: &'static str,
        operation: &'static str,
        started: Instant,
        failed: bool,
    ) {
        let labels = MetadataLabels { store, operation };
        self.metadata_duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        if failed {
            self.metadata_errors.get_or_create(&labels).inc();
        }
    }

    /// The error counter of a store's operation, at 0 until it fails.
    pub(crate) fn preset_metadata_errors(&self, store: &'static str, operation: &'static str) {
        drop(
            self.metadata_errors
                .get_or_create(&MetadataLabels { store, operation }),
        );
    }

    pub(crate) fn set_groups(&self, snapshot: GroupSnapshot) {
        *self.groups.lock().unwrap_or_else(|p| p.into_inner()) = snapshot;
    }

    pub(crate) fn set_cleaner_dirt(&self, measured: Vec<PartitionDirt>) {
        *self.cleaner_dirt.lock().unwrap_or_else(|p| p.into_inner()) = measured;
    }

    pub(crate) fn cleaner_dirt(&self) -> Vec<PartitionDirt> {
        self.cleaner_dirt
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn group_snapshot(&self) -> GroupSnapshot {
        self.groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;

    use super::*;

    #[test]
    fn exposition_names_carry_units_and_totals() {
        let metrics = Metrics::default();
        metrics.observe_request(ApiKey::Produce, Instant::now());
        metrics.observe_metadata("etcd", "get", Instant::now(), true);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        for line in [
            "kafscale_request_duration_seconds_count{api=\"Produce\"} 1",
            "kafscale_metadata_request_errors_total{store=\"etcd\",operation=\"get\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn label_values_are_escaped_as_the_text_format_requires() {
        let value = "a\"b\\c\nd}\r,e=\"f";
        let family = Family::<[(&str, LabelText); 1], Counter>::default();
        family.get_or_create(&[("group", LabelText(value))]).inc();
        let mut registry = Registry::default();
        registry.register("g", "groups", family);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        let line = "g_total{group=\"a\\\"b\\\\c\\nd}\r,e=\\\"f\"} 1";
        assert!(text.contains(line), "{line} missing from:\n{text}");
        assert_eq!(
            text.lines().count(),
            4,
            "no line break inside a value:\n{text}"
        );
    }
}
