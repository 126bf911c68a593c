//! One connection's produce requests waiting for their flush, and when they make the flush due
//! at once instead of at the end of the flush interval.
//!
//! A producer keeps a bounded number of requests in flight per connection: five for the Java
//! client and for any idempotent producer (Kafka's limit), one for kafka-python (idempotent by
//! default, one batch per partition in flight), a million for librdkafka without idempotence.
//! Once its whole window waits, it sends nothing more until one is answered, so waiting out the
//! flush interval holds it to a window per interval: the Java client's five requests of one
//! 16 KiB batch per partition are 640 KiB over 8 partitions, about 2.5 MB/s at four flushes a
//! second. Flushing every time a window fills costs the other way: a producer at 1 MB/s fills
//! its five requests within 25 ms (one per `linger.ms`), and would bring forty objects a second.
//!
//! So the flush is brought forward only for a whole window (as many requests as waited at once
//! in this round or the last, a round ending when none waits; five at most) that *presses*:
//! every request waiting in it came soon after an answer freed its place (within `PROMPT`)
//! and carries full batches (each at least three quarters of the largest batch the connection
//! sent). That is what a producer sends when records wait in it for the broker: it had the
//! next request ready, and each partition had more than a batch. A producer that keeps up
//! sends what waited and then its requests as its linger ends, small, and waits for the
//! interval; one falling behind gets a flush per window until it has caught up, then waits for
//! the interval again. So the objects per second stay at the interval's four plus what a
//! backlog needs, never more than one per window the producer sends.
//!
//! A window of five holding a megabyte or more is flushed at once as well, pressing or not: an
//! object that size costs about as little per byte as a scheduled one.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The most requests a bounded window holds: Kafka's limit for an idempotent producer, the
/// Java client's and kafka-python's default. A connection with more waiting has a larger
/// window (librdkafka's default is a million) and is not blocked: flushing early for it would
/// only cut the objects smaller.
const CLIENT_WINDOW: usize = 5;

/// A full window of five with at least this many bytes is flushed at once.
const EARLY_FLUSH_BYTES: usize = 1 << 20;

/// A request that comes within this long of an answer freeing a place in its window was ready
/// before the answer came: the producer waited for the broker. Measured on a busy 2-core
/// machine, the Java client refills a window of five 5–20 ms after the answers and
/// kafka-python sends its next request 3–12 ms after one; a producer keeping up sends at its
/// own pace, and small batches (`linger.ms` ended before a batch filled).
const PROMPT: Duration = Duration::from_millis(50);

/// What a produce request brings into its connection's window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) bytes: usize,
    /// The smallest and the largest record batch of the request that is buffered.
    pub(crate) smallest_batch: usize,
    pub(crate) largest_batch: usize,
}

impl Load {
    /// Counts in one buffered batch of `bytes`.
    pub(crate) fn add_batch(&mut self, bytes: usize) {
        self.add(Load {
            bytes,
            smallest_batch: bytes,
            largest_batch: bytes,
        });
    }

    /// Counts in the batches of `other`.
    pub(crate) fn add(&mut self, other: Load) {
        if other.largest_batch == 0 {
            return;
        }
        self.smallest_batch = if self.largest_batch == 0 {
            other.smallest_batch
        } else {
            self.smallest_batch.min(other.smallest_batch)
        };
        self.largest_batch = self.largest_batch.max(other.largest_batch);
        self.bytes += other.bytes;
    }
}

#[derive(Default)]
struct State {
    requests: usize,
    bytes: usize,
    /// The most requests that waited at once since the window was last empty, and in the
    /// round before that: together, the producer's window as it is now (a producer's first
    /// requests, sent before it knew its partitions' leaders, may come more at once).
    peak: usize,
    last_peak: usize,
    /// Of the requests waiting, those that press (see the module's text).
    pressing: usize,
    /// The largest batch the connection sent so far: about the client's `batch.size`.
    largest_batch: usize,
    /// When an answer last freed a place in the window.
    freed_at: Option<Instant>,
}

/// The produce requests of one connection that wait for their flush.
#[derive(Default)]
pub(crate) struct ProduceWindow {
    state: Mutex<State>,
}

impl ProduceWindow {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request's place in its connection's window, given back when it is answered.
pub(crate) struct Waiting {
    window: Arc<ProduceWindow>,
    bytes: usize,
    pressing: bool,
}

impl Waiting {
    /// Counts a request carrying `load` in; and whether the flush is due now (its window is
    /// full and presses, or holds a megabyte).
    pub(crate) fn enter(window: &Arc<ProduceWindow>, load: Load) -> (Waiting, bool) {
        let now = Instant::now();
        let mut state = window.state();
        state.largest_batch = state.largest_batch.max(load.largest_batch);
        let full_batches = load.smallest_batch * 4 >= state.largest_batch * 3;
        let prompt = state
            .freed_at
            .is_some_and(|freed| now.duration_since(freed) <= PROMPT);
        let pressing = full_batches && prompt;
        state.requests += 1;
        state.peak = state.peak.max(state.requests);
        state.bytes += load.bytes;
        state.pressing += usize::from(pressing);
        let size = state.peak.max(state.last_peak);
        let blocked = state.requests == size && size <= CLIENT_WINDOW;
        let due = blocked
            && (state.pressing == state.requests
                || (size == CLIENT_WINDOW && state.bytes >= EARLY_FLUSH_BYTES));
        let waiting = Waiting {
            window: window.clone(),
            bytes: load.bytes,
            pressing,
        };
        (waiting, due)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.window.state();
        state.requests -= 1;
        state.bytes -= self.bytes;
        state.pressing -= usize::from(self.pressing);
        state.freed_at = Some(Instant::now());
        if state.requests == 0 {
            state.last_peak = std::mem::take(&mut state.peak);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `batches` batches of `batch` bytes each.
    fn load(batches: usize, batch: usize) -> Load {
        let mut load = Load::default();
        (0..batches).for_each(|_| load.add_batch(batch));
        load
    }

    const FULL: usize = 16 * 1024;

    /// Enters `count` requests of `each`, `apart` from each other; whether the last made the
    /// flush due.
    async fn send(
        window: &Arc<ProduceWindow>,
        waiting: &mut Vec<Waiting>,
        count: usize,
        each: Load,
        apart: Duration,
    ) -> bool {
        let mut due = false;
        for _ in 0..count {
            tokio::time::advance(apart).await;
            let (entered, now) = Waiting::enter(window, each);
            waiting.push(entered);
            due = now;
        }
        due
    }

    #[test]
    fn a_load_knows_its_smallest_and_largest_batch() {
        let mut load = Load::default();
        load.add_batch(300);
        load.add_batch(100);
        load.add_batch(200);
        let mut request = Load::default();
        request.add(Load::default());
        request.add(load);
        request.add_batch(50);
        assert_eq!(
            request,
            Load {
                bytes: 650,
                smallest_batch: 50,
                largest_batch: 300
            }
        );
        assert_eq!(
            load,
            Load {
                bytes: 600,
                smallest_batch: 100,
                largest_batch: 300
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_refilled_at_once_with_full_batches_is_flushed_early() {
        let window = Arc::new(ProduceWindow::default());
        let mut waiting = Vec::new();
        let ms = Duration::from_millis;
        // The first window fills as the producer's linger ends: it waits for the interval.
        assert!(!send(&window, &mut waiting, 5, load(8, FULL), ms(5)).await);
        // The interval's flush answers all five; the producer had the next five ready.
        waiting.clear();
        assert!(send(&window, &mut waiting, 5, load(8, FULL), ms(0)).await);
        // Answered again: it refills one place at a time, each at once.
        for _ in 0..3 {
            waiting.remove(0);
            assert!(send(&window, &mut waiting, 1, load(8, FULL), ms(1)).await);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_producer_that_keeps_up_waits_for_the_interval() {
        let window = Arc::new(ProduceWindow::default());
        let mut waiting = Vec::new();
        let ms = Duration::from_millis;
        assert!(!send(&window, &mut waiting, 5, load(8, FULL), ms(5)).await);
        waiting.clear();
        // Its backlog goes out at once in full batches, then what lingered, small.
        assert!(!send(&window, &mut waiting, 2, load(8, FULL), ms(0)).await);
        assert!(!send(&window, &mut waiting, 3, load(1, 5_000), ms(0)).await);
        waiting.clear();
        // Full batches, but sent at its own pace, not when an answer came.
        assert!(!send(&window, &mut waiting, 5, load(8, FULL), ms(60)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_of_one_presses_too() {
        let window = Arc::new(ProduceWindow::default());
        let mut waiting = Vec::new();
        let ms = Duration::from_millis;
        // Two at first (kafka-python, before it knew every partition's leader)...
        assert!(!send(&window, &mut waiting, 2, load(8, FULL), ms(0)).await);
        waiting.clear();
        // ...then one at a time: the first round of one is not blocked yet, the next is.
        assert!(!send(&window, &mut waiting, 1, load(8, FULL), ms(1)).await);
        waiting.clear();
        assert!(send(&window, &mut waiting, 1, load(8, FULL), ms(1)).await);
        waiting.clear();
        tokio::time::advance(ms(100)).await;
        assert!(
            !send(&window, &mut waiting, 1, load(8, FULL), ms(0)).await,
            "a request long after the answer: the producer did not wait for it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_larger_window_is_never_flushed_early() {
        let window = Arc::new(ProduceWindow::default());
        let mut waiting = Vec::new();
        let ms = Duration::from_millis;
        assert!(!send(&window, &mut waiting, 6, load(8, FULL), ms(1)).await);
        waiting.clear();
        assert!(
            !send(&window, &mut waiting, 6, load(64, FULL), ms(0)).await,
            "more than five waited in the last round: this producer's window is not five"
        );
        waiting.clear();
        assert!(
            !send(&window, &mut waiting, 5, load(64, FULL), ms(0)).await,
            "nor in this one, before six waited"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_window_of_five_holding_a_megabyte_is_flushed_early() {
        let window = Arc::new(ProduceWindow::default());
        let mut waiting = Vec::new();
        let ms = Duration::from_millis;
        assert!(send(&window, &mut waiting, 5, load(1, 300_000), ms(10)).await);
        // one answered, the next request, late, fills the window again
        waiting.remove(0);
        assert!(send(&window, &mut waiting, 1, load(1, 300_000), ms(10)).await);
        waiting.drain(..3);
        assert!(
            !send(&window, &mut waiting, 3, load(1, 1_000), ms(0)).await,
            "five again, under a megabyte"
        );
    }
}
