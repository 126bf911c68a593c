//! Which live broker should own each partition: balanced, moving only what balance needs, and
//! computed alike by every broker from the same view of the metadata store.
//!
//! Plain rendezvous hashing (each partition to its highest-weight broker) moves little when
//! brokers come and go but spreads small counts unevenly: a 6-partition topic on 3 brokers
//! was placed 1/4/1. Here every topic gives each broker `q` or `q + 1` of its partitions
//! (q = partitions / brokers); which brokers take the `q + 1` keeps their totals over all
//! topics within one partition of each other, or within 2 % of the average when that is more.
//!
//! Placement starts from the owners the store names: which brokers take the `q + 1` is the
//! balanced choice that moves the fewest partitions (`extras.rs`), and a live owner keeps its
//! partitions up to its count, so a broker joining moves exactly what it takes and a broker
//! leaving exactly what it held. Every input (topics, live brokers,
//! owner keys) is in the store, so brokers that see the same revision place alike; while a
//! hand-off runs, the placement stays the same as each step lands (the partition a broker
//! gives up is still its own to shed, then a partition without owner, then the new owner's).

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use super::assignment::partition_weight;
use super::extras::extras;

/// A topic as placement sees it: its partitions and their live owners (None: no key, or the
/// owner is not a live broker).
#[derive(Debug, Clone)]
pub(crate) struct TopicShape<'a> {
    pub(crate) name: &'a str,
    pub(crate) owners: Vec<Option<i32>>,
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Placement {
    brokers: Vec<i32>,
    topics: HashMap<String, Arc<Vec<i32>>>,
}

impl Placement {
    /// The broker that should own `topic`/`partition` (None: no live broker, or no such
    /// partition).
    pub(crate) fn owner(&self, topic: &str, partition: i32) -> Option<i32> {
        let owners = self.topics.get(topic)?;
        owners.get(usize::try_from(partition).ok()?).copied()
    }

    /// The placement of `topics` over `brokers`; with the names of the topics where it
    /// differs from `self`'s (topics gone included).
    pub(crate) fn recompute(
        &self,
        topics: &[TopicShape<'_>],
        brokers: &[i32],
    ) -> (Placement, Vec<String>) {
        let mut brokers = brokers.to_vec();
        brokers.sort_unstable();
        brokers.dedup();
        let mut next = Placement {
            brokers,
            topics: HashMap::with_capacity(topics.len()),
        };
        let mut changed = Vec::new();
        if !next.brokers.is_empty() {
            let mut ordered: Vec<&TopicShape<'_>> = topics.iter().collect();
            ordered.sort_by_key(|t| t.name);
            let total: usize = topics.iter().map(|t| t.owners.len()).sum();
            // How far totals may drift apart: one partition, or 2 % of the average when more.
            let slack = (total / next.brokers.len() / 50).max(1);
            let extras = extras(&ordered, &next.brokers, slack);
            for (topic, extras) in ordered.into_iter().zip(extras) {
                let owners = place_topic(topic, &next.brokers, &extras);
                let placed = match self.topics.get(topic.name) {
                    Some(previous) if **previous == owners => previous.clone(),
                    _ => {
                        changed.push(topic.name.to_string());
                        Arc::new(owners)
                    }
                };
                next.topics.insert(topic.name.to_string(), placed);
            }
        }
        // Topics gone, or without brokers now: their partitions have no owner.
        changed.extend(
            self.topics
                .keys()
                .filter(|name| !next.topics.contains_key(*name))
                .cloned(),
        );
        (next, changed)
    }
}

/// The owners of one topic's partitions: each broker gets `partitions / brokers`, the
/// `extras` one more. A live owner keeps its partitions up to that count (its heaviest by
/// rendezvous weight); every other partition, in partition order, goes to the heaviest
/// broker with room. Processing in a fixed order makes the result the same again once some
/// of those partitions are claimed as placed.
fn place_topic(topic: &TopicShape<'_>, brokers: &[i32], extras: &[i32]) -> Vec<i32> {
    let count = topic.owners.len();
    let q = count / brokers.len();
    let mut room: HashMap<i32, usize> = brokers
        .iter()
        .map(|&b| (b, q + usize::from(extras.binary_search(&b).is_ok())))
        .collect();
    let weight = |partition: usize, broker: i32| {
        let partition = i32::try_from(partition).expect("partition ids are i32");
        partition_weight(topic.name, partition, broker)
    };
    let mut held: Vec<(i32, Reverse<u64>, usize)> = topic
        .owners
        .iter()
        .enumerate()
        .filter_map(|(p, owner)| owner.filter(|b| room.contains_key(b)).map(|b| (b, p)))
        .map(|(b, p)| (b, Reverse(weight(p, b)), p))
        .collect();
    held.sort_unstable();
    let mut owners: Vec<Option<i32>> = vec![None; count];
    for (broker, _, partition) in held {
        let free = room.get_mut(&broker).expect("held by a live broker");
        if *free > 0 {
            *free -= 1;
            owners[partition] = Some(broker);
        }
    }
    owners
        .iter()
        .enumerate()
        .map(|(partition, owner)| match owner {
            Some(broker) => *broker,
            None => {
                let broker = brokers
                    .iter()
                    .copied()
                    .filter(|b| room[b] > 0)
                    .max_by_key(|&b| (weight(partition, b), b))
                    .expect("the counts add up to the partitions");
                *room.get_mut(&broker).expect("a live broker") -= 1;
                broker
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Topics named `t0`, `t1`, … with these partition counts, unowned.
    fn topics(counts: &[usize]) -> Vec<(String, usize)> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| (format!("t{i}"), c))
            .collect()
    }

    /// The shapes of `topics` with the owners `placement` gave them (all claimed as placed),
    /// or unowned where it has none, and owners that are not in `live` dropped.
    fn owned<'a>(
        topics: &'a [(String, usize)],
        placement: &Placement,
        live: &[i32],
    ) -> Vec<TopicShape<'a>> {
        topics
            .iter()
            .map(|(name, count)| TopicShape {
                name,
                owners: (0..*count as i32)
                    .map(|p| placement.owner(name, p).filter(|b| live.contains(b)))
                    .collect(),
            })
            .collect()
    }

    fn place(topics: &[(String, usize)], brokers: &[i32]) -> Placement {
        Placement::default()
            .recompute(&owned(topics, &Placement::default(), brokers), brokers)
            .0
    }

    fn counts(placement: &Placement, topic: &str) -> BTreeMap<i32, usize> {
        let mut counts: BTreeMap<i32, usize> = placement.brokers.iter().map(|&b| (b, 0)).collect();
        for owner in placement.topics[topic].iter() {
            *counts.get_mut(owner).unwrap() += 1;
        }
        counts
    }

    fn totals(placement: &Placement) -> BTreeMap<i32, usize> {
        let mut totals: BTreeMap<i32, usize> = placement.brokers.iter().map(|&b| (b, 0)).collect();
        for owners in placement.topics.values() {
            for owner in owners.iter() {
                *totals.get_mut(owner).unwrap() += 1;
            }
        }
        totals
    }

    fn spread(counts: &BTreeMap<i32, usize>) -> usize {
        counts.values().max().unwrap() - counts.values().min().unwrap()
    }

    fn moves(before: &Placement, after: &Placement) -> usize {
        before
            .topics
            .iter()
            .map(|(name, owners)| {
                let now = &after.topics[name];
                owners
                    .iter()
                    .zip(now.iter())
                    .filter(|(a, b)| a != b)
                    .count()
            })
            .sum()
    }

    fn assert_balanced(placement: &Placement, topics: &[(String, usize)]) {
        for (name, _) in topics {
            assert!(
                spread(&counts(placement, name)) <= 1,
                "{name}: {:?}",
                counts(placement, name)
            );
        }
        let total: usize = topics.iter().map(|(_, c)| c).sum();
        let allowed = (total / placement.brokers.len() / 50).max(1);
        let totals = totals(placement);
        assert!(spread(&totals) <= allowed, "totals {totals:?}");
    }

    #[test]
    fn a_small_topic_is_spread_evenly() {
        let topics = topics(&[6]);
        let placement = place(&topics, &[1, 2, 3]);
        assert_eq!(
            counts(&placement, "t0").into_values().collect::<Vec<_>>(),
            [2, 2, 2]
        );
        assert_eq!(placement.owner("t0", 6), None);
        assert_eq!(placement.owner("u", 0), None);
    }

    #[test]
    fn every_broker_computes_the_same_placement() {
        let topics = topics(&[7, 1, 30]);
        let one = place(&topics, &[3, 1, 2]);
        let mut shapes = owned(&topics, &Placement::default(), &[]);
        shapes.reverse();
        let (two, changed) = Placement::default().recompute(&shapes, &[1, 2, 3, 3]);
        assert_eq!(changed.len(), 3);
        assert_eq!(one.topics, two.topics);
        let (none, changed) = one.recompute(&owned(&topics, &one, &[]), &[]);
        assert_eq!(none.owner("t0", 0), None);
        assert_eq!(changed.len(), 3, "no broker left: every topic changed");
    }

    #[test]
    fn balance_holds_per_topic_and_in_total_for_1_to_12_brokers() {
        let counts: Vec<usize> = (0..200).map(|i| 1 + i % 7).collect();
        let many = topics(&counts);
        let big = topics(&[10_000, 5, 1]);
        for n in 1..=12 {
            let brokers: Vec<i32> = (0..n).collect();
            assert_balanced(&place(&many, &brokers), &many);
            assert_balanced(&place(&big, &brokers), &big);
        }
    }

    /// Claims as placed, some at a time (a partition between two owners has none): the
    /// placement stays what it was at every step, so brokers never chase a moving target.
    #[test]
    fn the_placement_holds_while_hand_offs_land() {
        let counts: Vec<usize> = (0..60).map(|i| 1 + i % 12).chain([1200]).collect();
        let singles = vec![1; 300];
        for topics in [topics(&[12, 7, 30, 1]), topics(&counts), topics(&singles)] {
            let changes: [(Vec<i32>, Vec<i32>); 7] = [
                ((0..3).collect(), (0..4).collect()),
                ((0..4).collect(), (0..3).collect()),
                ((0..7).collect(), (0..8).collect()),
                ((0..8).collect(), (0..7).collect()),
                ((0..1).collect(), (0..5).collect()),
                ((0..12).collect(), (1..12).collect()),
                ((0..6).collect(), vec![0, 1, 3, 4, 5]),
            ];
            for (before, brokers) in changes {
                let old = place(&topics, &before);
                hand_off_in_steps(&topics, &old, &brokers);
            }
        }
    }

    fn hand_off_in_steps(topics: &[(String, usize)], old: &Placement, brokers: &[i32]) {
        let mut now: Vec<TopicShape<'_>> = owned(topics, old, brokers);
        let (target, _) = old.recompute(&now, brokers);
        for step in 0.. {
            let (placed, _) = old.recompute(&now, brokers);
            assert_eq!(placed.topics, target.topics, "step {step}");
            // Every third pending move lands per step: its old owner lets go, then the new
            // one claims (one step apart).
            let mut pending = 0;
            for shape in &mut now {
                for (p, owner) in shape.owners.iter_mut().enumerate() {
                    let wanted = target.owner(shape.name, p as i32);
                    if *owner != wanted {
                        pending += 1;
                        if (p + step) % 3 == 0 {
                            *owner = if owner.is_some() { None } else { wanted };
                        }
                    }
                }
            }
            if pending == 0 {
                return;
            }
        }
    }

    /// A broker joining takes its share, a broker leaving hands out its own; the counts go
    /// in docs/metadata.md.
    #[test]
    fn joins_and_leaves_move_only_what_balance_needs() {
        let counts: Vec<usize> = (0..60).map(|i| 1 + i % 12).chain([1200]).collect();
        let singles = vec![1; 300];
        for topics in [topics(&counts), topics(&[10_000]), topics(&singles)] {
            joins_and_leaves(&topics);
        }
    }

    fn joins_and_leaves(topics: &[(String, usize)]) {
        for n in 1..12 {
            let before: Vec<i32> = (0..n).collect();
            let after: Vec<i32> = (0..=n).collect();
            let a = place(topics, &before);
            let (b, _) = a.recompute(&owned(topics, &a, &after), &after);
            assert_balanced(&b, topics);
            let joined = moves(&a, &b);
            let joiner_share = totals(&b)[&n];
            let (c, _) = b.recompute(&owned(topics, &b, &before), &before);
            assert_balanced(&c, topics);
            let left = moves(&b, &c);
            // Every partition the joiner takes must move, so its share is the least a join can
            // move; the placement moves nothing more, and leaving moves the same back.
            assert_eq!(joined, joiner_share, "{n}->{}", n + 1);
            assert_eq!(left, joiner_share, "{}->{n}", n + 1);
            // The first broker leaving instead: only its own partitions move.
            let rest: Vec<i32> = (1..=n).collect();
            let (d, _) = b.recompute(&owned(topics, &b, &rest), &rest);
            assert_balanced(&d, topics);
            assert_eq!(moves(&b, &d), totals(&b)[&0], "broker 0 of {} left", n + 1);
            println!(
                "{n}->{}: {joined} moved, the joiner's share {joiner_share}; back: {left} moved",
                n + 1
            );
        }
    }

    #[test]
    fn a_new_topic_moves_no_partition_of_older_ones() {
        let old = topics(&[5, 2]);
        let before = place(&old, &[1, 2, 3]);
        let grown = topics(&[5, 2, 4]);
        let (after, changed) = before.recompute(&owned(&grown, &before, &[1, 2, 3]), &[1, 2, 3]);
        assert_eq!(changed, ["t2"]);
        assert!(Arc::ptr_eq(&before.topics["t0"], &after.topics["t0"]));
        let (_, changed) = after.recompute(&owned(&old, &after, &[1, 2, 3]), &[1, 2, 3]);
        assert_eq!(changed, ["t2"], "a topic deleted: only its partitions go");
    }
}
