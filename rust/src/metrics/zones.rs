//! Bytes by zone crossing: what a broker's clients produce and fetch, counted by whether the
//! client is in the broker's rack (`same`), in another (`cross`: the traffic a cloud bills), or
//! either side has no zone (`unknown`). Three series per family, whatever the clients send.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

/// Where a client's bytes go relative to the broker's rack.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Crossing {
    Same,
    Cross,
    Unknown,
}

impl Crossing {
    pub(crate) fn between(broker_rack: Option<&str>, client_zone: Option<&str>) -> Crossing {
        match (broker_rack, client_zone) {
            (Some(rack), Some(zone)) if rack == zone => Crossing::Same,
            (Some(_), Some(_)) => Crossing::Cross,
            _ => Crossing::Unknown,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Crossing::Same => "same",
            Crossing::Cross => "cross",
            Crossing::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ZoneLabels {
    zone: &'static str,
}

#[derive(Debug, Default)]
pub(crate) struct ZoneTraffic {
    fetched: Family<ZoneLabels, Counter>,
    produced: Family<ZoneLabels, Counter>,
}

impl ZoneTraffic {
    /// Every series from 0, so a rate over them exists before the first byte.
    pub(crate) fn register(&self, registry: &mut Registry) {
        for crossing in [Crossing::Same, Crossing::Cross, Crossing::Unknown] {
            let labels = ZoneLabels {
                zone: crossing.label(),
            };
            drop(self.fetched.get_or_create(&labels));
            drop(self.produced.get_or_create(&labels));
        }
        registry.register_with_unit(
            "zone_fetch",
            "Record bytes Fetch returned to consumers, by whether the consumer's zone (its \
             client.rack or zone= in its client id) is this broker's rack",
            Unit::Bytes,
            self.fetched.clone(),
        );
        registry.register_with_unit(
            "zone_produce",
            "Record bytes Produce appended, by whether the producer's zone (zone= in its client \
             id) is this broker's rack",
            Unit::Bytes,
            self.produced.clone(),
        );
    }

    pub(crate) fn count_fetch(&self, crossing: Crossing, bytes: u64) {
        self.count(&self.fetched, crossing, bytes);
    }

    pub(crate) fn count_produce(&self, crossing: Crossing, bytes: u64) {
        self.count(&self.produced, crossing, bytes);
    }

    fn count(&self, family: &Family<ZoneLabels, Counter>, crossing: Crossing, bytes: u64) {
        if bytes > 0 {
            let labels = ZoneLabels {
                zone: crossing.label(),
            };
            family.get_or_create(&labels).inc_by(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_counted_by_crossing_and_every_series_starts_at_zero() {
        assert_eq!(Crossing::between(Some("a"), Some("a")), Crossing::Same);
        assert_eq!(Crossing::between(Some("a"), Some("b")), Crossing::Cross);
        assert_eq!(Crossing::between(None, Some("b")), Crossing::Unknown);
        assert_eq!(Crossing::between(Some("a"), None), Crossing::Unknown);
        let zones = ZoneTraffic::default();
        let mut registry = Registry::default();
        zones.register(registry.sub_registry_with_prefix("kafscale"));
        zones.count_fetch(Crossing::Cross, 100);
        zones.count_fetch(Crossing::Cross, 20);
        zones.count_produce(Crossing::Same, 7);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kafscale_zone_fetch_bytes_total{zone=\"cross\"} 120",
            "kafscale_zone_fetch_bytes_total{zone=\"same\"} 0",
            "kafscale_zone_fetch_bytes_total{zone=\"unknown\"} 0",
            "kafscale_zone_produce_bytes_total{zone=\"same\"} 7",
            "kafscale_zone_produce_bytes_total{zone=\"cross\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
