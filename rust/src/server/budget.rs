//! Bytes in flight: request bytes read but not yet answered plus response bytes not yet
//! written, per connection (`connection_max_inflight_bytes`) and over all connections
//! (`queued_max_request_bytes`). Past a budget the connection stops reading (backpressure)
//! instead of growing; see connection.rs.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Bytes held against one limit.
///
/// A watch channel rather than a tokio `Semaphore` of bytes: a response is charged as soon
/// as it exists, whatever the room left, because waiting for room there could deadlock (the
/// room may be held by a later response on the same connection, which cannot be written
/// before this one). A semaphore cannot go past zero; this counter can, and readers wait
/// until it is back under the limit.
pub(crate) struct ByteBudget {
    limit: usize,
    used: watch::Sender<usize>,
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            limit: limit.max(1),
            used: watch::Sender::new(0),
        }
    }

    fn charge(&self, bytes: usize) {
        if bytes > 0 {
            self.used.send_modify(|used| *used += bytes);
        }
    }

    fn release(&self, bytes: usize) {
        if bytes > 0 {
            self.used.send_modify(|used| *used -= bytes);
        }
    }

    /// Charges up to `wanted` bytes of the room left, in one step (two callers never get the
    /// same room); returns how many.
    fn take_up_to(&self, wanted: usize) -> usize {
        let mut taken = 0;
        self.used.send_if_modified(|used| {
            taken = wanted.min(self.limit.saturating_sub(*used));
            *used += taken;
            taken > 0
        });
        taken
    }

    /// How many bytes may be read now: the room left, or `chunk` when all that is charged is
    /// the caller's own partial request (`own`), so a request bigger than the budget still
    /// gets through when nothing else is in flight. `None`: wait.
    fn readable(&self, used: usize, own: usize, chunk: usize) -> Option<usize> {
        if used <= own {
            Some(chunk)
        } else if used < self.limit {
            Some(chunk.min(self.limit - used))
        } else {
            None
        }
    }

    async fn wait_readable(&self, own: usize, chunk: usize) -> usize {
        let mut used = self.used.subscribe();
        let mut allowed = chunk;
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = used
            .wait_for(|used| match self.readable(*used, own, chunk) {
                Some(n) => {
                    allowed = n;
                    true
                }
                None => false,
            })
            .await;
        allowed
    }

    /// Completes once nothing has been charged for `idle` in a row.
    async fn idle_for(&self, idle: Duration) {
        let mut used = self.used.subscribe();
        loop {
            let _ = used.wait_for(|used| *used == 0).await;
            // Any change (even one charged and released again) restarts the clock.
            if tokio::time::timeout(idle, used.changed()).await.is_err() {
                return;
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        *self.used.borrow()
    }
}

/// One connection's budget and the broker-wide one it shares with every other connection.
pub(crate) struct Budgets {
    connection: ByteBudget,
    broker: Arc<ByteBudget>,
}

impl Budgets {
    pub(crate) fn new(connection_limit: usize, broker: Arc<ByteBudget>) -> Arc<Budgets> {
        Arc::new(Budgets {
            connection: ByteBudget::new(connection_limit),
            broker,
        })
    }

    /// Waits until both budgets let the connection read, then returns how many bytes (at most
    /// `chunk`). `own`: bytes of the request being read, which never block themselves.
    pub(crate) async fn wait_readable(&self, own: usize, chunk: usize) -> usize {
        let by_connection = self.connection.wait_readable(own, chunk).await;
        self.broker.wait_readable(own, by_connection).await
    }

    /// Completes once the connection has had nothing in flight (no request read and not
    /// answered, no response unwritten, no partial request) for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        self.connection.idle_for(idle).await
    }
}

/// Bytes charged to both budgets of a connection, released when dropped (also when the task
/// holding it is aborted).
pub(crate) struct Charge {
    budgets: Arc<Budgets>,
    bytes: usize,
}

impl Charge {
    pub(crate) fn new(budgets: &Arc<Budgets>) -> Charge {
        Charge {
            budgets: budgets.clone(),
            bytes: 0,
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Charges `bytes` more, whatever the room left: they are already in memory.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.budgets.connection.charge(bytes);
        self.budgets.broker.charge(bytes);
        self.bytes += bytes;
    }

    /// Charges or releases the difference so that exactly `bytes` are held.
    pub(crate) fn resize(&mut self, bytes: usize) {
        if bytes >= self.bytes {
            self.add(bytes - self.bytes);
        } else {
            let released = self.bytes - bytes;
            self.budgets.connection.release(released);
            self.budgets.broker.release(released);
            self.bytes = bytes;
        }
    }

    /// Moves `bytes` of this charge to a new one (a request leaving the read buffer).
    pub(crate) fn split_off(&mut self, bytes: usize) -> Charge {
        let moved = bytes.min(self.bytes);
        self.bytes -= moved;
        Charge {
            budgets: self.budgets.clone(),
            bytes: moved,
        }
    }

    /// Charges as much of `wanted` as both budgets have room for; returns how much.
    pub(crate) fn take_up_to(&mut self, wanted: usize) -> usize {
        let from_connection = self.budgets.connection.take_up_to(wanted);
        let taken = self.budgets.broker.take_up_to(from_connection);
        self.budgets.connection.release(from_connection - taken);
        self.bytes += taken;
        taken
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.resize(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budgets(connection: usize, broker: usize) -> (Arc<Budgets>, Arc<ByteBudget>) {
        let broker = Arc::new(ByteBudget::new(broker));
        (Budgets::new(connection, broker.clone()), broker)
    }

    #[test]
    fn charges_are_released_on_drop_and_split_keeps_the_total() {
        let (budgets, broker) = budgets(100, 1000);
        let mut buffered = Charge::new(&budgets);
        buffered.add(70);
        let request = buffered.split_off(50);
        assert_eq!((buffered.bytes(), request.bytes()), (20, 50));
        assert_eq!((budgets.connection.used(), broker.used()), (70, 70));
        drop(request);
        assert_eq!((budgets.connection.used(), broker.used()), (20, 20));
        drop(buffered);
        assert_eq!((budgets.connection.used(), broker.used()), (0, 0));
    }

    #[test]
    fn take_up_to_grants_only_the_room_of_the_tighter_budget() {
        let (budgets, broker) = budgets(100, 60);
        let mut first = Charge::new(&budgets);
        assert_eq!(first.take_up_to(1000), 60);
        let mut second = Charge::new(&budgets);
        assert_eq!(second.take_up_to(1000), 0);
        first.resize(10);
        assert_eq!(second.take_up_to(1000), 50);
        assert_eq!((budgets.connection.used(), broker.used()), (60, 60));
    }

    #[test]
    fn reading_stops_past_the_limit_unless_only_the_own_request_is_charged() {
        let budget = ByteBudget::new(100);
        assert_eq!(budget.readable(0, 0, 64), Some(64));
        assert_eq!(budget.readable(80, 0, 64), Some(20));
        assert_eq!(budget.readable(100, 0, 64), None);
        assert_eq!(budget.readable(150, 50, 64), None, "someone else holds 100");
        // One request bigger than the whole budget, nothing else in flight: keep reading it.
        assert_eq!(budget.readable(500, 500, 64), Some(64));
    }

    #[tokio::test]
    async fn a_reader_waits_for_room_and_resumes_when_a_response_is_written() {
        let (budgets, _broker) = budgets(100, 1000);
        let mut response = Charge::new(&budgets);
        response.add(150); // a response bigger than the room: charged anyway
        let reader = {
            let budgets = budgets.clone();
            tokio::spawn(async move { budgets.wait_readable(0, 64).await })
        };
        tokio::task::yield_now().await;
        assert!(!reader.is_finished());
        drop(response); // written
        assert_eq!(reader.await.unwrap(), 64);
    }

    #[tokio::test]
    async fn the_broker_budget_blocks_every_connection() {
        let broker = Arc::new(ByteBudget::new(100));
        let busy = Budgets::new(1000, broker.clone());
        let other = Budgets::new(1000, broker.clone());
        let mut held = Charge::new(&busy);
        held.add(100);
        let waiting = tokio::spawn(async move { other.wait_readable(0, 64).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        held.resize(90);
        assert_eq!(waiting.await.unwrap(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_only_after_a_quiet_period_with_nothing_in_flight() {
        let (budgets, _broker) = budgets(100, 1000);
        let mut charge = Charge::new(&budgets);
        charge.add(1);
        let idle = {
            let budgets = budgets.clone();
            tokio::spawn(async move { budgets.idle_for(Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!idle.is_finished(), "a request in flight is not idle");
        charge.resize(0);
        tokio::time::sleep(Duration::from_secs(5)).await;
        charge.add(1);
        charge.resize(0); // activity in between restarts the clock
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!idle.is_finished());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(idle.is_finished());
    }
}
