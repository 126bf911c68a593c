//! Produce and fetch traffic per topic. Series exist only for topics this broker serves: a
//! request naming a topic that does not exist counts nothing (clients choose the names, so
//! counting them would let anyone grow the page and the heap at will), a deleted topic's series
//! go with it, and every scrape drops the series of a topic that is gone meanwhile (a count
//! racing a deletion), so nothing stale can pile up.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use uuid::Uuid;

use super::LabelText;

/// One topic's counters.
#[derive(Debug, Default)]
struct TopicCounters {
    produce_requests: Counter,
    produce_records: Counter,
    produce_bytes: Counter,
    fetch_requests: Counter,
    fetch_records: Counter,
    fetch_bytes: Counter,
}

/// The families, in page order: (name, help, unit, which counter).
type Field = fn(&TopicCounters) -> &Counter;
const FAMILIES: [(&str, &str, Option<Unit>, Field); 6] = [
    (
        "kafscale_produce_requests",
        "Produce requests naming the topic",
        None,
        |c| &c.produce_requests,
    ),
    (
        "kafscale_produce_records",
        "Records appended by Produce",
        None,
        |c| &c.produce_records,
    ),
    (
        "kafscale_produce",
        "Record batch bytes appended by Produce",
        Some(Unit::Bytes),
        |c| &c.produce_bytes,
    ),
    (
        "kafscale_fetch_requests",
        "Fetch requests naming the topic",
        None,
        |c| &c.fetch_requests,
    ),
    (
        "kafscale_fetch_records",
        "Records returned by Fetch",
        None,
        |c| &c.fetch_records,
    ),
    (
        "kafscale_fetch",
        "Record batch bytes returned by Fetch",
        Some(Unit::Bytes),
        |c| &c.fetch_bytes,
    ),
];

/// The counters of every served topic that saw traffic, by name, with the id of the topic they
/// belong to (a topic re-created under the same name starts from zero).
#[derive(Debug, Default)]
pub(crate) struct TopicTraffic {
    topics: RwLock<HashMap<String, (Uuid, Arc<TopicCounters>)>>,
}

impl TopicTraffic {
    fn counters(&self, name: &str, id: Uuid) -> Arc<TopicCounters> {
        let known = self.read().get(name).cloned();
        match known {
            Some((known_id, counters)) if known_id == id => counters,
            _ => {
                let mut topics = self.write();
                let entry = topics
                    .entry(name.to_owned())
                    .or_insert_with(|| (id, Arc::default()));
                if entry.0 != id {
                    *entry = (id, Arc::default());
                }
                entry.1.clone()
            }
        }
    }

    pub(crate) fn count_produce(&self, name: &str, id: Uuid, records: u64, bytes: u64) {
        let counters = self.counters(name, id);
        counters.produce_requests.inc();
        counters.produce_records.inc_by(records);
        counters.produce_bytes.inc_by(bytes);
    }

    pub(crate) fn count_fetch(&self, name: &str, id: Uuid, records: u64, bytes: u64) {
        let counters = self.counters(name, id);
        counters.fetch_requests.inc();
        counters.fetch_records.inc_by(records);
        counters.fetch_bytes.inc_by(bytes);
    }

    /// A deleted topic's series go with it.
    pub(crate) fn forget(&self, name: &str) {
        self.write().remove(name);
    }

    /// Keeps only the topics `served` says exist (by name and id); the rest, sorted by name.
    fn retain_served(
        &self,
        served: impl Fn(&str, Uuid) -> bool,
    ) -> Vec<(String, Arc<TopicCounters>)> {
        let mut topics = self.write();
        topics.retain(|name, (id, _)| served(name, *id));
        let mut all: Vec<_> = topics
            .iter()
            .map(|(name, (_, counters))| (name.clone(), counters.clone()))
            .collect();
        drop(topics);
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub(crate) fn encode(
        &self,
        encoder: &mut DescriptorEncoder,
        served: impl Fn(&str, Uuid) -> bool,
    ) -> std::fmt::Result {
        let topics = self.retain_served(served);
        for (name, help, unit, field) in &FAMILIES {
            let mut family =
                encoder.encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
            for (topic, counters) in &topics {
                let labels = [("topic", LabelText(topic))];
                field(counters).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }

    /// The topics that have series now.
    #[cfg(test)]
    pub(crate) fn topic_names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (Uuid, Arc<TopicCounters>)>> {
        self.topics.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<String, (Uuid, Arc<TopicCounters>)>> {
        self.topics.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::*;

    /// The page `traffic` gives when `served` holds.
    fn page(traffic: Arc<TopicTraffic>, served: fn(&str, Uuid) -> bool) -> String {
        #[derive(Debug)]
        struct Fixed(Arc<TopicTraffic>, fn(&str, Uuid) -> bool);
        impl Collector for Fixed {
            fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
                self.0.encode(&mut encoder, self.1)
            }
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(traffic, served)));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    const ID: Uuid = Uuid::from_u128(1);

    #[test]
    fn every_family_is_per_served_topic_and_goes_with_it() {
        let traffic = Arc::new(TopicTraffic::default());
        traffic.count_produce("orders", ID, 4, 100);
        traffic.count_fetch("orders", ID, 2, 50);
        traffic.count_fetch("orders", ID, 0, 0);
        let text = page(traffic.clone(), |_, _| true);
        for line in [
            "kafscale_produce_requests_total{topic=\"orders\"} 1",
            "kafscale_produce_records_total{topic=\"orders\"} 4",
            "kafscale_produce_bytes_total{topic=\"orders\"} 100",
            "kafscale_fetch_requests_total{topic=\"orders\"} 2",
            "kafscale_fetch_records_total{topic=\"orders\"} 2",
            "kafscale_fetch_bytes_total{topic=\"orders\"} 50",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        traffic.forget("orders");
        assert!(!page(traffic, |_, _| true).contains("orders"));
    }

    #[test]
    fn a_scrape_drops_topics_that_are_gone_or_were_re_created() {
        let traffic = Arc::new(TopicTraffic::default());
        traffic.count_produce("kept", ID, 1, 1);
        traffic.count_produce("gone", ID, 1, 1);
        traffic.count_produce("renewed", Uuid::from_u128(2), 1, 1);
        let text = page(traffic.clone(), |name, id| name != "gone" && id == ID);
        assert!(text.contains("topic=\"kept\""), "{text}");
        assert!(
            !text.contains("gone") && !text.contains("renewed"),
            "{text}"
        );
        assert_eq!(traffic.read().len(), 1, "the dropped counters are freed");
    }

    #[test]
    fn a_re_created_topic_starts_from_zero() {
        let traffic = TopicTraffic::default();
        traffic.count_produce("t", ID, 5, 5);
        traffic.count_produce("t", Uuid::from_u128(2), 1, 1);
        let counters = traffic.counters("t", Uuid::from_u128(2));
        assert_eq!(counters.produce_records.get(), 1);
    }
}
