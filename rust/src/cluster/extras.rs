//! Which brokers take each topic's extra partitions: the `r` left over when a topic's
//! partitions are divided among the brokers (`partitions = q * brokers + r`).
//!
//! Each broker's count of extras, and with it its total over all topics, must stay within the
//! balance bound. Among the choices that do, the one taken moves the fewest partitions: an
//! extra given to a broker that already holds `q + 1` of the topic keeps a partition where it
//! is; any other extra means one partition more changes owner. Finding it is a min-cost flow
//! (topic → broker → sink, one unit per extra, at most one per topic and broker, each broker's
//! units within a window), solved exactly by successive shortest paths. A fixed rendezvous
//! weight per topic and broker breaks ties, so the optimum is unique.
//!
//! Why exact and unique: while a hand-off lands, a broker giving partitions up only drops to
//! its target count and one taking them only rises to it. So the target's value rises by
//! exactly the progress made, no other choice's rises more, and the target stays the one
//! optimum: brokers never chase a moving target. (A greedy pass with a repair step reached the
//! same counts but changed its answer halfway through hand-offs.)
//!
//! Cost: the flow starts from every extra left where its holder has it, so a recompute routes
//! only what changed (a broker's share after a join, a leaver's extras); the brokers are the
//! only nodes of the search, topics appear as the moves between them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use super::assignment::partition_weight;
use super::placement::TopicShape;

/// For each topic, the brokers that take one partition more than the others (sorted); any two
/// brokers' counts of extras differ by at most `slack`.
pub(super) fn extras(topics: &[&TopicShape<'_>], brokers: &[i32], slack: usize) -> Vec<Vec<i32>> {
    let n = brokers.len();
    let start = Start::new(topics, brokers);
    let given = |given: &[Vec<bool>]| -> Vec<Vec<i32>> {
        given
            .iter()
            .map(|given| (0..n).filter(|&b| given[b]).map(|b| brokers[b]).collect())
            .collect()
    };
    // Every extra where it is worth most is the best choice of all; when it is balanced
    // already (no hand-off under way, or one that keeps the counts), it is the answer.
    let counts = start.counts();
    let spread = counts.iter().max().zip(counts.iter().min());
    if start.pending.iter().all(|&p| p == 0) && spread.is_some_and(|(hi, lo)| hi - lo <= slack) {
        return given(&start.given);
    }
    let units: usize = start.wanted.iter().sum();
    // Each window [low, low + slack] that can hold every extra; together they hold every
    // balanced choice. The best value over the windows is concave in `low` (a linear
    // program's value as its bounds shift), so a binary search on its slope finds the best
    // window, the lowest on a tie.
    let mut solved: BTreeMap<usize, Flow<'_>> = BTreeMap::new();
    let mut value_at = |low: usize| {
        solved
            .entry(low)
            .or_insert_with(|| start.solve(low, low + slack))
            .value
    };
    let (mut low, mut high) = (units.div_ceil(n).saturating_sub(slack), units / n);
    while low < high {
        let mid = low + (high - low) / 2;
        if value_at(mid) >= value_at(mid + 1) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let best = solved
        .remove(&low)
        .unwrap_or_else(|| start.solve(low, low + slack));
    given(&best.given)
}

/// Filling a broker's window up to its lower bound is worth more than any value (so every
/// broker gets at least that many); above it, up to the upper bound, it is free.
const BELOW_LOW: i128 = 1 << 100;

/// Where every window's search starts: each topic's extras on the brokers that hold `q + 1`
/// of it (the heaviest of them when more hold it than there are extras), the rest pending.
struct Start {
    n: usize,
    /// What an extra of each topic is worth on each broker: keeping a partition in place
    /// outweighs any tie-break weight.
    values: Vec<Vec<i128>>,
    wanted: Vec<usize>,
    given: Vec<Vec<bool>>,
    pending: Vec<usize>,
    movable: Vec<BinaryHeap<Reverse<(i128, usize)>>>,
    unplaced: Vec<BinaryHeap<(i128, Reverse<usize>)>>,
}

impl Start {
    fn new(topics: &[&TopicShape<'_>], brokers: &[i32]) -> Start {
        let n = brokers.len();
        let mut start = Start {
            n,
            values: Vec::with_capacity(topics.len()),
            wanted: Vec::with_capacity(topics.len()),
            given: Vec::with_capacity(topics.len()),
            pending: Vec::with_capacity(topics.len()),
            movable: Vec::new(),
            unplaced: Vec::new(),
        };
        let (mut movable, mut unplaced) = (vec![Vec::new(); n * n], vec![Vec::new(); n]);
        for (t, topic) in topics.iter().enumerate() {
            let (q, r) = (topic.owners.len() / n, topic.owners.len() % n);
            let mut held: HashMap<i32, usize> = HashMap::new();
            for owner in topic.owners.iter().flatten() {
                *held.entry(*owner).or_insert(0) += 1;
            }
            let values: Vec<i128> = brokers
                .iter()
                .map(|b| {
                    let keeps = held.get(b).is_some_and(|&h| h > q);
                    (i128::from(keeps) << 64) | i128::from(partition_weight(topic.name, -1, *b))
                })
                .collect();
            let mut ranked: Vec<usize> = (0..n).collect();
            ranked.sort_by_key(|&b| Reverse(values[b]));
            let mut given = vec![false; n];
            let keepers = ranked.iter().take(r).filter(|&&b| values[b] >> 64 == 1);
            let mut placed = 0;
            for &b in keepers {
                given[b] = true;
                placed += 1;
            }
            for a in (0..n).filter(|&a| given[a]) {
                for b in (0..n).filter(|&b| !given[b]) {
                    movable[a * n + b].push(Reverse((values[a] - values[b], t)));
                }
            }
            if placed < r {
                for b in (0..n).filter(|&b| !given[b]) {
                    unplaced[b].push((values[b], Reverse(t)));
                }
            }
            start.values.push(values);
            start.wanted.push(r);
            start.given.push(given);
            start.pending.push(r - placed);
        }
        start.movable = movable.into_iter().map(BinaryHeap::from).collect();
        start.unplaced = unplaced.into_iter().map(BinaryHeap::from).collect();
        start
    }

    /// Extras on each broker.
    fn counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.n];
        for given in &self.given {
            for b in (0..self.n).filter(|&b| given[b]) {
                counts[b] += 1;
            }
        }
        counts
    }

    /// The best choice with every broker's count of extras within [low, high].
    fn solve(&self, low: usize, high: usize) -> Flow<'_> {
        let n = self.n;
        // With every extra at its most valuable broker, each move costs zero or more; with the
        // sink at -BELOW_LOW so does each arc into it, and with the source at the highest
        // value so does each arc out of it.
        let mut potential = vec![0; n + 1];
        potential[n] = -BELOW_LOW;
        let source = self.values.iter().flatten().copied().max().unwrap_or(0);
        let mut flow = Flow {
            start: self,
            low,
            high,
            given: self.given.clone(),
            pending: self.pending.clone(),
            count: self.counts(),
            sent: vec![0; n],
            source,
            potential,
            movable: self.movable.clone(),
            unplaced: self.unplaced.clone(),
            value: 0,
        };
        while flow.augment() {}
        debug_assert!(flow.count == flow.sent);
        debug_assert!(flow.sent.iter().all(|&c| (low..=high).contains(&c)));
        flow.value = flow
            .given
            .iter()
            .zip(&self.values)
            .flat_map(|(given, values)| given.iter().zip(values))
            .filter(|(given, _)| **given)
            .map(|(_, value)| value)
            .sum();
        flow
    }
}

/// How a broker was reached on the shortest path.
#[derive(Clone, Copy)]
enum Step {
    Unreached,
    /// It has an extra not yet counted against its window.
    Excess,
    /// A pending extra of this topic goes to it.
    Pending(usize),
    /// From broker `from`, by moving `topic`'s extra from `from` to it.
    Moved {
        from: usize,
        topic: usize,
    },
}

/// Successive shortest paths over the brokers and a sink. The sources are the extras not yet
/// counted against a window: pending ones (reached from a source node through their topic)
/// and ones on a broker. An arc from broker `a` to broker `b` stands for moving some topic's
/// extra from `a` to `b`: `movable` keeps the candidates, cheapest first, checked for being
/// current when they come up.
struct Flow<'a> {
    start: &'a Start,
    low: usize,
    high: usize,
    given: Vec<Vec<bool>>,
    pending: Vec<usize>,
    /// Extras on each broker, and how many of them count against its window.
    count: Vec<usize>,
    sent: Vec<usize>,
    /// Potentials of the source, the brokers and the sink (last), keeping every residual
    /// arc's reduced cost at zero or more so that Dijkstra applies.
    source: i128,
    potential: Vec<i128>,
    movable: Vec<BinaryHeap<Reverse<(i128, usize)>>>,
    unplaced: Vec<BinaryHeap<(i128, Reverse<usize>)>>,
    value: i128,
}

impl Flow<'_> {
    /// Routes extras along one shortest path to the sink; false when none is left.
    fn augment(&mut self) -> bool {
        let n = self.start.n;
        let mut dist = vec![i128::MAX; n + 1];
        let mut step = vec![Step::Unreached; n];
        for b in 0..n {
            if self.count[b] > self.sent[b] {
                dist[b] = 0;
                step[b] = Step::Excess;
            }
            let (given, pending) = (&self.given, &self.pending);
            let best = top(&mut self.unplaced[b], |(_, Reverse(t))| {
                pending[*t] > 0 && !given[*t][b]
            });
            if let Some((value, Reverse(topic))) = best {
                let reduced = self.source - value - self.potential[b];
                if reduced < dist[b] {
                    dist[b] = reduced;
                    step[b] = Step::Pending(topic);
                }
            }
        }
        let sink = n;
        let mut last = None;
        let mut done = vec![false; n + 1];
        loop {
            let Some(node) = (0..=n)
                .filter(|&v| !done[v] && dist[v] != i128::MAX)
                .min_by_key(|&v| (dist[v], v))
            else {
                return false;
            };
            done[node] = true;
            if node == sink {
                break;
            }
            let at = self.potential[node];
            if self.sent[node] < self.high {
                let cost = if self.sent[node] < self.low {
                    -BELOW_LOW
                } else {
                    0
                };
                let through = dist[node] + cost + at - self.potential[sink];
                if through < dist[sink] {
                    dist[sink] = through;
                    last = Some(node);
                }
            }
            for to in (0..n).filter(|&to| !done[to]) {
                let given = &self.given;
                let candidate = top(&mut self.movable[node * n + to], |Reverse((_, t))| {
                    given[*t][node] && !given[*t][to]
                });
                if let Some(Reverse((cost, topic))) = candidate {
                    let through = dist[node] + cost + at - self.potential[to];
                    if through < dist[to] {
                        dist[to] = through;
                        step[to] = Step::Moved { from: node, topic };
                    }
                }
            }
        }
        let reach = dist[sink];
        for (potential, dist) in self.potential.iter_mut().zip(&dist) {
            *potential += (*dist).min(reach);
        }
        let mut at = last.expect("the sink is reached from a broker");
        let amount = match step[at] {
            // Straight from a broker's own extras: as many as its window takes at this cost.
            Step::Excess => {
                let bound = if self.sent[at] < self.low {
                    self.low
                } else {
                    self.high
                };
                (self.count[at] - self.sent[at]).min(bound - self.sent[at])
            }
            _ => 1,
        };
        self.sent[at] += amount;
        loop {
            match step[at] {
                Step::Excess => return true,
                Step::Pending(topic) => {
                    self.pending[topic] -= 1;
                    self.place(topic, at, true);
                    return true;
                }
                Step::Moved { from, topic } => {
                    self.place(topic, from, false);
                    self.place(topic, at, true);
                    at = from;
                }
                Step::Unreached => unreachable!("a path leads back to a source"),
            }
        }
    }

    /// Puts `topic`'s extra on `broker` or takes it off, and records the moves and pending
    /// choices that opens.
    fn place(&mut self, topic: usize, broker: usize, given: bool) {
        let n = self.start.n;
        let values = &self.start.values[topic];
        self.given[topic][broker] = given;
        if given {
            self.count[broker] += 1;
        } else {
            self.count[broker] -= 1;
        }
        for other in (0..n).filter(|&o| o != broker && self.given[topic][o] != given) {
            let (from, to) = if given {
                (broker, other)
            } else {
                (other, broker)
            };
            self.movable[from * n + to].push(Reverse((values[from] - values[to], topic)));
        }
        if !given && self.pending[topic] > 0 {
            self.unplaced[broker].push((values[broker], Reverse(topic)));
        }
    }
}

/// The top of a heap whose entries may have gone stale, dropping those that have.
fn top<T: Ord + Copy>(heap: &mut BinaryHeap<T>, current: impl Fn(&T) -> bool) -> Option<T> {
    while let Some(entry) = heap.peek() {
        if current(entry) {
            return Some(*entry);
        }
        heap.pop();
    }
    None
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The best balanced choice by trying every one.
    fn best_by_search(start: &Start, slack: usize) -> Vec<Vec<bool>> {
        let n = start.n;
        let subsets = |r: usize| -> Vec<Vec<bool>> {
            (0u32..1 << n)
                .filter(|mask| mask.count_ones() as usize == r)
                .map(|mask| (0..n).map(|b| mask >> b & 1 == 1).collect())
                .collect()
        };
        let options: Vec<Vec<Vec<bool>>> = start.wanted.iter().map(|&r| subsets(r)).collect();
        let mut best: Option<(i128, Vec<Vec<bool>>)> = None;
        let mut choice = vec![0; options.len()];
        loop {
            let given: Vec<Vec<bool>> = choice
                .iter()
                .zip(&options)
                .map(|(&i, o)| o[i].clone())
                .collect();
            let counts: Vec<usize> = (0..n)
                .map(|b| given.iter().filter(|g| g[b]).count())
                .collect();
            if counts.iter().max().unwrap() - counts.iter().min().unwrap() <= slack {
                let value: i128 = given
                    .iter()
                    .zip(&start.values)
                    .flat_map(|(g, v)| g.iter().zip(v).filter(|(g, _)| **g).map(|(_, v)| *v))
                    .sum();
                if best.as_ref().is_none_or(|(b, _)| value > *b) {
                    best = Some((value, given));
                }
            }
            // The next combination, like an odometer.
            let Some(t) = (0..choice.len()).find(|&t| choice[t] + 1 < options[t].len()) else {
                return best.expect("a balanced choice exists").1;
            };
            choice[t] += 1;
            choice[..t].iter_mut().for_each(|c| *c = 0);
        }
    }

    proptest! {
        /// Against an exhaustive search: the flow finds the best balanced choice, and being
        /// unique it is the same choice.
        #[test]
        fn the_flow_finds_the_best_balanced_choice(
            n in 2..=4usize,
            slack in 1..=2usize,
            owners in prop::collection::vec(
                prop::collection::vec(prop::option::of(0..5i32), 1..=9),
                1..=5,
            ),
        ) {
            let names: Vec<String> = (0..owners.len()).map(|t| format!("t{t}")).collect();
            let brokers: Vec<i32> = (0..n as i32).collect();
            let shapes: Vec<TopicShape<'_>> = names
                .iter()
                .zip(&owners)
                .map(|(name, owners)| TopicShape {
                    name,
                    owners: owners.iter().map(|o| o.filter(|b| brokers.contains(b))).collect(),
                })
                .collect();
            let topics: Vec<&TopicShape<'_>> = shapes.iter().collect();
            let start = Start::new(&topics, &brokers);
            let wanted: Vec<Vec<i32>> = best_by_search(&start, slack)
                .iter()
                .map(|g| (0..n).filter(|&b| g[b]).map(|b| brokers[b]).collect())
                .collect();
            prop_assert_eq!(extras(&topics, &brokers, slack), wanted);
        }
    }
}
