//! Racks (zones, KIP-392): the zone a client is in and the broker of its zone that reads a
//! partition for it. Any broker serves a partition's committed data from the object store, so a
//! consumer can read through a broker of its own zone: only writes to the owner cross zones.

use std::hash::{Hash, Hasher};

use super::state::ClusterState;

/// The zone a client says it is in: the rack its Fetch names (`client.rack`), else a `zone=`
/// item of its client id (`myapp,zone=b`: the hint clients without `client.rack` give
/// object-storage brokers).
pub(crate) fn client_zone<'a>(rack_id: &'a str, client_id: Option<&'a str>) -> Option<&'a str> {
    if !rack_id.is_empty() {
        return Some(rack_id);
    }
    client_id?
        .split(',')
        .find_map(|item| item.trim().strip_prefix("zone="))
        .filter(|zone| !zone.is_empty())
}

impl ClusterState {
    /// The live broker of `rack` that reads `topic`'s `partition` for consumers of that rack,
    /// or None if no live broker is in it. One of the rack's brokers by a hash of the
    /// partition: the rack's brokers share the reads, and one partition's consumers in a rack
    /// meet in one broker's cache.
    pub(crate) fn reader_in_rack(&self, rack: &str, topic: &str, partition: i32) -> Option<i32> {
        let in_rack: Vec<i32> = self
            .brokers
            .values()
            .filter(|b| b.rack.as_deref() == Some(rack))
            .map(|b| b.id)
            .collect();
        if in_rack.is_empty() {
            return None;
        }
        // A fixed hash (not a per-process random one): every broker picks the same reader.
        let mut hasher = std::hash::DefaultHasher::new();
        (topic, partition).hash(&mut hasher);
        let pick = hasher.finish() % in_rack.len() as u64;
        Some(in_rack[pick as usize])
    }

    /// The replicas Metadata lists for a partition `leader` owns: the leader, then the broker
    /// each other rack reads it through. Clients send consumers only to a preferred read
    /// replica the partition lists (the Java client fetches from the leader otherwise).
    pub(crate) fn replicas(&self, topic: &str, partition: i32, leader: i32) -> Vec<i32> {
        let mut racks: Vec<&str> = self
            .brokers
            .values()
            .filter_map(|b| b.rack.as_deref())
            .collect();
        racks.sort_unstable();
        racks.dedup();
        let mut replicas = vec![leader];
        for rack in racks {
            if let Some(reader) = self.reader_in_rack(rack, topic, partition) {
                if !replicas.contains(&reader) {
                    replicas.push(reader);
                }
            }
        }
        replicas
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::catalog::BrokerRecord;

    fn cluster(racks: &[(i32, Option<&str>)]) -> ClusterState {
        let mut state = ClusterState::default();
        for &(id, rack) in racks {
            let record = BrokerRecord {
                id,
                rack: rack.map(String::from),
                ..Default::default()
            };
            state.brokers.insert(id, record);
        }
        state
    }

    #[test]
    fn the_rack_named_in_the_fetch_wins_over_the_client_id_hint() {
        assert_eq!(client_zone("a", Some("app,zone=b")), Some("a"));
        assert_eq!(client_zone("", Some("app,zone=b")), Some("b"));
        assert_eq!(client_zone("", Some("zone=c, other=1")), Some("c"));
        assert_eq!(client_zone("", Some("app, zone=b")), Some("b"));
        for none in [Some("app"), Some("app,zone="), Some("nozone=b"), None] {
            assert_eq!(client_zone("", none), None, "{none:?}");
        }
    }

    #[test]
    fn a_rack_s_brokers_share_its_partitions_and_every_broker_picks_the_same() {
        let state = cluster(&[(1, Some("a")), (2, Some("b")), (3, Some("b")), (4, None)]);
        assert_eq!(state.reader_in_rack("a", "t", 0), Some(1));
        assert_eq!(state.reader_in_rack("c", "t", 0), None);
        let picks: Vec<_> = (0..32)
            .map(|p| state.reader_in_rack("b", "t", p).unwrap())
            .collect();
        assert!(picks.contains(&2) && picks.contains(&3), "{picks:?}");
        assert!(picks.iter().all(|id| [2, 3].contains(id)));
        let again: Vec<_> = (0..32)
            .map(|p| cluster(&[(3, Some("b")), (2, Some("b"))]).reader_in_rack("b", "t", p))
            .collect();
        assert_eq!(again, picks.into_iter().map(Some).collect::<Vec<_>>());
    }

    #[test]
    fn a_partition_lists_its_leader_and_the_reader_of_every_other_rack() {
        let state = cluster(&[
            (1, Some("a")),
            (2, Some("b")),
            (3, Some("b")),
            (4, Some("c")),
        ]);
        for p in 0..8 {
            let replicas = state.replicas("t", p, 1);
            let b = state.reader_in_rack("b", "t", p).unwrap();
            assert_eq!(replicas, [1, b, 4], "partition {p}");
        }
        // the leader is its rack's reader, or not: listed once, first
        assert_eq!(state.replicas("t", 0, 4)[0], 4);
        assert_eq!(state.replicas("t", 0, 4).len(), 3);
        // without racks: the leader alone, as before
        assert_eq!(cluster(&[(1, None), (2, None)]).replicas("t", 0, 2), [2]);
    }
}
