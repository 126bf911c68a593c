//! Rendezvous (highest-random-weight) hashing over broker ids: which live broker coordinates
//! a consumer group, and the weights partition placement ranks brokers by (placement.rs).
//! Every broker computes the same answer from the same set of live brokers, and when a broker
//! joins or leaves only the keys it gains or loses move – about 1/n of them.

/// The weight of `broker` for `topic`/`partition`.
pub(crate) fn partition_weight(topic: &str, partition: i32, broker: i32) -> u64 {
    weight(
        topic
            .bytes()
            .chain(partition.to_be_bytes())
            .chain(broker.to_be_bytes()),
    )
}

/// The coordinator of consumer group `group_id` among `brokers` (None if there are none).
pub(crate) fn coordinator_of(group_id: &str, brokers: &[i32]) -> Option<i32> {
    tagged(GROUP_TAG, group_id, brokers)
}

/// The coordinator of transactional id `transactional_id` among `brokers`.
pub(crate) fn transaction_coordinator_of(transactional_id: &str, brokers: &[i32]) -> Option<i32> {
    tagged(TRANSACTION_TAG, transactional_id, brokers)
}

// The tags keep group and transaction keys apart from partition keys (no topic name contains
// a NUL) and from each other, so a group does not land where the same-named topic's
// partitions do.
const GROUP_TAG: &[u8] = b"group\0";
const TRANSACTION_TAG: &[u8] = b"transaction\0";

fn tagged(tag: &[u8], key: &str, brokers: &[i32]) -> Option<i32> {
    highest(brokers, |broker| {
        weight(
            tag.iter()
                .copied()
                .chain(key.bytes())
                .chain(broker.to_be_bytes()),
        )
    })
}

fn highest(brokers: &[i32], weight_of: impl Fn(i32) -> u64) -> Option<i32> {
    brokers
        .iter()
        .copied()
        .max_by_key(|&broker| (weight_of(broker), broker))
}

/// A well-mixed 64-bit weight for a (key, broker) byte string: FNV-1a, then a splitmix64
/// finaliser so that neighbouring keys and broker ids spread evenly.
fn weight(bytes: impl Iterator<Item = u8>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_spread_evenly_and_apart_from_partitions() {
        let brokers = [0, 1, 2];
        let mut counts = [0usize; 3];
        let mut same_as_partition = 0;
        for g in 0..3000 {
            let group = format!("group-{g}");
            let coordinator = coordinator_of(&group, &brokers).unwrap();
            counts[coordinator as usize] += 1;
            let partition_owner = highest(&brokers, |b| partition_weight(&group, 0, b));
            if Some(coordinator) == partition_owner {
                same_as_partition += 1;
            }
        }
        for count in counts {
            assert!((800..1200).contains(&count), "uneven spread: {counts:?}");
        }
        // independent keys agree about a third of the time
        assert!(
            (800..1200).contains(&same_as_partition),
            "{same_as_partition}"
        );
        assert_eq!(coordinator_of("g", &[]), None);
        assert_eq!(
            coordinator_of("g", &[2, 0, 1]),
            coordinator_of("g", &[0, 1, 2])
        );
    }

    #[test]
    fn a_leaving_broker_moves_only_its_groups() {
        let before = [0, 1, 2, 3];
        let after = [0, 1, 2];
        let mut moved = 0;
        for g in 0..2000 {
            let group = format!("g{g}");
            let old = coordinator_of(&group, &before).unwrap();
            let new = coordinator_of(&group, &after).unwrap();
            if old != new {
                assert_eq!(old, 3, "group {group} moved between two remaining brokers");
                moved += 1;
            }
        }
        assert!((350..650).contains(&moved), "{moved} of 2000 moved");
    }
}
