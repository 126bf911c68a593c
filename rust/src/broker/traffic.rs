//! The broker's side of the per-topic traffic series (`metrics::traffic`): counting only for
//! topics this broker serves, and encoding only those at scrape time.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use uuid::Uuid;

use super::Broker;

impl Broker {
    /// One Produce request's appends to `topic`, if this broker serves a topic of that name.
    pub(crate) fn count_produce(&self, topic: &str, records: u64, bytes: u64) {
        if let Some(served) = self.topic(topic) {
            let traffic = &self.metrics.topic_traffic;
            traffic.count_produce(topic, served.record.id, records, bytes);
        }
    }

    /// One Fetch request's yield for one topic it named (zeros when nothing was returned), if
    /// this broker serves a topic of that name.
    pub(crate) fn count_fetch(&self, topic: &str, records: u64, bytes: u64) {
        if let Some(served) = self.topic(topic) {
            let traffic = &self.metrics.topic_traffic;
            traffic.count_fetch(topic, served.record.id, records, bytes);
        }
    }
}

/// Encodes the per-topic families at scrape time, for the topics the broker still serves.
pub(crate) struct TopicTrafficCollector {
    broker: Arc<Broker>,
}

impl TopicTrafficCollector {
    pub(crate) fn new(broker: Arc<Broker>) -> Self {
        TopicTrafficCollector { broker }
    }
}

impl std::fmt::Debug for TopicTrafficCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicTrafficCollector")
    }
}

impl Collector for TopicTrafficCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let served = |name: &str, id: Uuid| {
            self.broker
                .topic(name)
                .is_some_and(|topic| topic.record.id == id)
        };
        self.broker
            .metrics
            .topic_traffic
            .encode(&mut encoder, served)
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn only_topics_the_broker_serves_are_counted() {
        let t = crate::broker::tests::broker(1 << 20).await;
        let b = &t.broker;
        b.create_topic("served", 1, Default::default())
            .await
            .unwrap();
        b.count_produce("served", 3, 30);
        b.count_fetch("served", 2, 20);
        for _ in 0..20 {
            b.count_produce(&"x".repeat(10_000), 1, 1);
            b.count_fetch("missing\n", 1, 1);
        }
        let names = b.metrics.topic_traffic.topic_names();
        assert_eq!(names, ["served"]);
        b.delete_topic("served", None).await.unwrap();
        assert!(b.metrics.topic_traffic.topic_names().is_empty());
    }
}
