//! The order in which one connection's requests take effect (docs/requests.md).
//!
//! Kafka handles a connection's requests one at a time: its network thread stops reading a
//! connection once a request of it is read, until that request's response is sent. Clients
//! count on it when they pipeline: of two OffsetCommits sent back to back the second is
//! stored, a Metadata sent after a CreateTopics lists the topic. Here a connection's requests
//! are read and dispatched as they arrive, and each takes a [`Turn`] at dispatch, in request
//! order:
//!
//! - a request other than Produce runs alone: it starts once every request before it has
//!   finished, Produces included;
//! - a Produce starts once every request before it that runs alone has finished, and does not
//!   wait for the Produces before it: its records are appended as it is read, after theirs,
//!   while they wait for the flush that stores them all.
//!
//! A request has finished once its answer exists (a Produce's, once its records are durable or
//! its timeout passed). Connections never wait for each other here.

use std::sync::Arc;

use futures::future::{FutureExt, Shared};
use tokio::sync::oneshot;

/// Completes once a request (or a group of Produces) has finished.
type Signal = Shared<oneshot::Receiver<()>>;

/// Hands out one connection's turns, in request order.
#[derive(Default)]
pub(crate) struct RequestOrder {
    /// The last request that runs alone: finished only after every request before it.
    alone: Option<Signal>,
    /// The Produces since then: the signal completes once each of them has finished. The
    /// sender kept here is dropped when the next request that runs alone takes the signal.
    produces: Option<(Arc<oneshot::Sender<()>>, Signal)>,
}

impl RequestOrder {
    /// The turn of a request that runs alone: after every request handed a turn before it.
    pub(crate) fn alone(&mut self) -> Turn {
        let (finished, signal) = oneshot::channel();
        let mut after = Vec::with_capacity(2);
        after.extend(self.alone.replace(signal.shared()));
        after.extend(self.produces.take().map(|(_, produces)| produces));
        Turn::new(after, Arc::new(finished))
    }

    /// The turn of a Produce: after every request that runs alone handed a turn before it.
    pub(crate) fn produce(&mut self) -> Turn {
        // Once the last request that runs alone has finished, the Produces after it wait for
        // nothing (a completed signal must not be polled again: it is dropped instead).
        if let Some(alone) = &self.alone {
            if alone.clone().now_or_never().is_some() {
                self.alone = None;
            }
        }
        let (finished, _) = self.produces.get_or_insert_with(|| {
            let (finished, signal) = oneshot::channel();
            (Arc::new(finished), signal.shared())
        });
        let finished = finished.clone();
        Turn::new(self.alone.iter().cloned().collect(), finished)
    }
}

/// A request's place in its connection's order: what has to finish before it starts.
pub(crate) struct Turn {
    /// Signals not yet seen complete.
    after: Vec<Signal>,
    /// Given to the request when it starts; `None` once it has been.
    done: Option<Done>,
}

/// Held by a request from its start until its answer exists: dropping it lets the requests
/// after it start.
pub(crate) struct Done {
    _finished: Arc<oneshot::Sender<()>>,
}

impl Turn {
    fn new(after: Vec<Signal>, finished: Arc<oneshot::Sender<()>>) -> Turn {
        Turn {
            after,
            done: Some(Done {
                _finished: finished,
            }),
        }
    }

    /// Whether the request may start now.
    pub(crate) fn ready(&mut self) -> bool {
        // A completed signal leaves the list as soon as it is seen (it must not be polled
        // again).
        self.after
            .retain_mut(|signal| signal.now_or_never().is_none());
        self.after.is_empty()
    }

    /// Completes once the request may start. Cancel-safe: what it saw complete stays seen.
    pub(crate) async fn wait(&mut self) {
        while let Some(signal) = self.after.last_mut() {
            let _ = signal.await;
            self.after.pop();
        }
    }

    /// Waits for the request's turn; the [`Done`] it returns is to be held until the answer
    /// exists.
    pub(crate) async fn start(mut self) -> Done {
        self.wait().await;
        self.done.take().expect("a turn starts once")
    }
}

impl Drop for Turn {
    /// A request dropped before its turn (its task cancelled: the connection is closing) must
    /// not let the requests after it overtake the ones before it: its `Done` is released only
    /// once those have finished.
    fn drop(&mut self) {
        let Some(done) = self.done.take() else { return };
        if self.ready() {
            return;
        }
        let after = std::mem::take(&mut self.after);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for signal in after {
                    let _ = signal.await;
                }
                drop(done);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn requests_that_run_alone_start_one_at_a_time_in_order() {
        let mut order = RequestOrder::default();
        let mut turns: Vec<Turn> = (0..4).map(|_| order.alone()).collect();
        assert!(turns[0].ready());
        assert!(!turns[1].ready() && !turns[2].ready() && !turns[3].ready());
        let first = turns.remove(0).start().now_or_never().unwrap();
        assert!(
            !turns[0].ready(),
            "started, not finished: the next one waits"
        );
        drop(first);
        assert!(turns[0].ready());
        assert!(!turns[1].ready() && !turns[2].ready());
        let second = turns.remove(0).start().now_or_never().unwrap();
        drop(second);
        assert!(turns[0].ready() && !turns[1].ready());
    }

    #[test]
    fn produces_overlap_and_the_next_request_waits_for_all_of_them() {
        let mut order = RequestOrder::default();
        let mut produces: Vec<Turn> = (0..3).map(|_| order.produce()).collect();
        let mut metadata = order.alone();
        let mut produce_after = order.produce();
        assert!(produces.iter_mut().all(Turn::ready));
        let mut running: Vec<Done> = produces
            .into_iter()
            .map(|t| t.start().now_or_never().unwrap())
            .collect();
        // Their flushes complete in any order; the request after them waits for the last.
        drop(running.remove(1));
        drop(running.remove(1));
        assert!(!metadata.ready());
        assert!(!produce_after.ready());
        drop(running.remove(0));
        assert!(metadata.ready());
        assert!(
            !produce_after.ready(),
            "a Produce waits for the request before it"
        );
        drop(metadata.start().now_or_never().unwrap());
        assert!(produce_after.ready());
    }

    #[test]
    fn a_produce_after_a_finished_request_waits_for_nothing() {
        let mut order = RequestOrder::default();
        let create_topics = order.alone();
        drop(create_topics.start().now_or_never().unwrap());
        let turn = order.produce();
        assert!(turn.after.is_empty(), "the finished signal was let go");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_cancelled_before_its_turn_keeps_the_order() {
        let mut order = RequestOrder::default();
        let first = order.alone().start().await;
        let cancelled = order.alone();
        let mut third = order.alone();
        drop(cancelled);
        tokio::task::yield_now().await;
        assert!(!third.ready(), "the first request still runs");
        drop(first);
        // The cancelled request's place is given up once the request before it finished.
        tokio::time::timeout(std::time::Duration::from_secs(1), third.wait())
            .await
            .expect("the third request's turn comes");
    }

    #[test]
    fn a_request_cancelled_after_its_predecessors_lets_the_next_start() {
        let mut order = RequestOrder::default();
        let cancelled = order.alone();
        let mut next = order.alone();
        drop(cancelled); // no runtime needed: nothing was before it
        assert!(next.ready());
    }

    /// One step of a connection's life: a request is read (a Produce or not), or a running
    /// request finishes (the `usize` picks which).
    #[derive(Debug, Clone)]
    enum Step {
        Read { produce: bool },
        Finish(usize),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            any::<bool>().prop_map(|produce| Step::Read { produce }),
            any::<usize>().prop_map(Step::Finish),
        ];
        proptest::collection::vec(step, 1..60)
    }

    proptest! {
        /// Whatever the mix of requests and the order their answers come in, a request starts
        /// exactly when Kafka's order allows: one that runs alone once every earlier request
        /// has finished, a Produce once every earlier request that runs alone has.
        #[test]
        fn a_request_starts_exactly_when_the_order_allows(steps in steps()) {
            let mut order = RequestOrder::default();
            // Per request, in arrival order: whether it is a Produce, and its turn until it
            // starts.
            let mut kinds: Vec<bool> = vec![];
            let mut waiting: Vec<Option<Turn>> = vec![];
            let mut running: Vec<(usize, Done)> = vec![];
            let mut finished: BTreeSet<usize> = BTreeSet::new();
            for step in steps {
                match step {
                    Step::Read { produce } => {
                        kinds.push(produce);
                        let turn = if produce { order.produce() } else { order.alone() };
                        waiting.push(Some(turn));
                    }
                    Step::Finish(pick) if !running.is_empty() => {
                        let (index, done) = running.remove(pick % running.len());
                        drop(done);
                        finished.insert(index);
                    }
                    Step::Finish(_) => {}
                }
                // Start whatever may start; check that exactly those may.
                for index in 0..waiting.len() {
                    let Some(turn) = waiting[index].as_mut() else { continue };
                    let allowed = (0..index).all(|earlier| {
                        finished.contains(&earlier) || (kinds[index] && kinds[earlier])
                    });
                    prop_assert_eq!(turn.ready(), allowed, "request {} of {:?}", index, kinds);
                    if allowed {
                        let done = waiting[index].take().unwrap().start().now_or_never();
                        running.push((index, done.expect("a ready turn starts at once")));
                    }
                }
            }
        }
    }
}
