//! Bytes in flight: request bytes read but not yet answered plus response bytes not yet
//! written, per connection (`connection_max_inflight_bytes`) and over all connections
//! (`queued_max_request_bytes`). Past a budget the connection stops reading (backpressure)
//! instead of growing; see connection.rs.
//!
//! **Fair shares of the broker's budget.** Whatever a connection holds counts: its partial
//! request (charged as its bytes arrive, never by the size its prefix declares), its requests
//! being handled, its responses not yet written, its produced bytes not yet durable. Every
//! connection holding bytes of the broker's budget has an equal share of it, `budget / n`
//! (n: those connections, plus the one asking if it holds nothing). While the budget has room
//! anyone may read, so a lone client can use all of it (up to `connection_max_inflight_bytes`).
//! Once it is used up, most of it is given back by the broker's own work (responses written,
//! flushes); but a partial request is given back only by its client, which may never finish
//! it (a slow or hostile one: a few connections each sending most of a 100 MiB frame and
//! stopping would otherwise stall every other connection until `request_read_timeout_ms`). So
//! when a connection holding less than its share has waited `DROP_AFTER` for room, the broker
//! closes the connection whose partial request is the largest of those bigger than a whole
//! share (one at a time per waiter and `DROP_AFTER`), which frees its bytes; the waiter reads
//! on. A connection whose partial request fits in its share is never closed for it: a client
//! cannot lose its connection to others' greed, and honest requests (a megabyte or so) are far
//! below a share unless hundreds of connections hold bytes. The broker's memory stays within
//! the budget (nothing is read past it), the rule needs no setting, and a stalled partial
//! request pins at most a share until `request_read_timeout_ms`, and more only until a
//! connection under its share needs the room. Before authentication a SASL connection's
//! frames are capped far lower (`sasl_server_max_receive_size`, checked before the frame is
//! read; see connection.rs). The why of it, and the rejected alternatives: docs/connections.md.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use tokio::sync::watch;

/// How long a connection holding less than its share waits for room in the broker's budget
/// before the largest partial request of more than a share is dropped (its connection
/// closed). Long enough for responses and flushes to give room back under honest load.
pub(crate) const DROP_AFTER: Duration = Duration::from_secs(1);

/// At most one warning per this interval about partial requests dropped for others.
const DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

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
    /// The connections charging this budget (the broker's), for their shares.
    connections: Mutex<HashMap<u64, Weak<Budgets>>>,
    next_id: AtomicU64,
    /// When a drop was last logged, and how many were not logged since.
    drops_logged: Mutex<(Option<std::time::Instant>, u64)>,
}

/// The budget's use, read at scrape time (`kafscale_request_budget_used`).
pub(crate) struct BudgetGauge(pub(crate) Arc<ByteBudget>);

impl std::fmt::Debug for BudgetGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BudgetGauge")
    }
}

impl Collector for BudgetGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let metric = ConstGauge::new(self.0.used_now() as i64);
        metric.encode(encoder.encode_descriptor(
            "kafscale_request_budget_used",
            "Bytes charged to the broker's request budget (queued_max_request_bytes): requests \
             being received or handled, responses not yet sent, produced bytes not yet durable",
            Some(&Unit::Bytes),
            metric.metric_type(),
        )?)
    }
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            limit: limit.max(1),
            used: watch::Sender::new(0),
            connections: Mutex::default(),
            next_id: AtomicU64::new(0),
            drops_logged: Mutex::default(),
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

    pub(crate) fn used_now(&self) -> usize {
        *self.used.borrow()
    }

    /// The connections charging this budget now (collected under the lock, handed out
    /// after it: the last handle on one dropped here unregisters it, which takes the lock).
    fn live_connections(&self) -> Vec<Arc<Budgets>> {
        let connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        connections.values().filter_map(Weak::upgrade).collect()
    }

    /// For `waiter`, which has waited `DROP_AFTER` for room: if it holds less than its share,
    /// tells the connection with the largest partial request of more than a share to close.
    /// Returns that connection's partial bytes, if one was told.
    fn drop_greediest_for(&self, waiter: &Budgets) -> Option<usize> {
        let live = self.live_connections();
        let holders = live.iter().filter(|b| b.held() > 0).count();
        let contenders = holders + usize::from(waiter.held() == 0);
        let share = self.limit / contenders.max(1);
        if waiter.held() >= share {
            return None;
        }
        let victim = live
            .iter()
            .filter(|b| b.id != waiter.id && !*b.dropped.borrow())
            .map(|b| (b.partial.load(Ordering::Relaxed), b))
            .filter(|(partial, _)| *partial > share)
            .max_by_key(|(partial, _)| *partial)?;
        victim.1.dropped.send_replace(true);
        self.log_drop(victim.0, share);
        Some(victim.0)
    }

    /// A warning at most every `DROP_LOG_INTERVAL`: hostile clients must not flood the log.
    fn log_drop(&self, partial: usize, share: usize) {
        let mut logged = self.drops_logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if logged
            .0
            .is_some_and(|last| now.duration_since(last) < DROP_LOG_INTERVAL)
        {
            logged.1 += 1;
            return;
        }
        tracing::warn!(
            partial,
            share,
            dropped_since_last_message = logged.1,
            "closing a connection whose partial request held more than its share of \
             queued_max_request_bytes ({share} of {} bytes) while another connection waited for \
             room. If clients send requests this large under load, raise \
             --queued-max-request-bytes (KAFSCALE_QUEUED_MAX_REQUEST_BYTES)",
            self.limit
        );
        *logged = (Some(now), 0);
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used_now()
    }
}

/// One connection's budget and the broker-wide one it shares with every other connection.
pub(crate) struct Budgets {
    connection: ByteBudget,
    broker: Arc<ByteBudget>,
    /// Its key among the broker budget's connections.
    id: u64,
    /// The bytes of the request being received (the partial frame), as its reader charged.
    partial: AtomicUsize,
    /// Set when the connection must close: its partial request holds more than a share of
    /// the broker's budget while a connection under its share waits for room.
    dropped: watch::Sender<bool>,
}

impl Budgets {
    pub(crate) fn new(connection_limit: usize, broker: Arc<ByteBudget>) -> Arc<Budgets> {
        let id = broker.next_id.fetch_add(1, Ordering::Relaxed);
        let budgets = Arc::new(Budgets {
            connection: ByteBudget::new(connection_limit),
            broker: broker.clone(),
            id,
            partial: AtomicUsize::new(0),
            dropped: watch::Sender::new(false),
        });
        broker
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, Arc::downgrade(&budgets));
        budgets
    }

    /// Bytes this connection holds (of both budgets: every charge is to both).
    fn held(&self) -> usize {
        self.connection.used_now()
    }

    /// Waits until both budgets let the connection read, then returns how many bytes (at most
    /// `chunk`). `own`: bytes of the request being read, which never block themselves. While
    /// it waits for the broker's budget, every `DROP_AFTER` the greediest partial request may
    /// be dropped for it (see the module's comment).
    pub(crate) async fn wait_readable(&self, own: usize, chunk: usize) -> usize {
        let by_connection = self.connection.wait_readable(own, chunk).await;
        loop {
            let room = self.broker.wait_readable(own, by_connection);
            match tokio::time::timeout(DROP_AFTER, room).await {
                Ok(allowed) => return allowed,
                Err(_) => {
                    self.broker.drop_greediest_for(self);
                }
            }
        }
    }

    /// Completes once the connection has had nothing in flight (no request read and not
    /// answered, no response unwritten, no partial request) for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        self.connection.idle_for(idle).await
    }

    /// Completes once the connection must close because its partial request held more than
    /// a share of the broker's budget that another connection needed.
    pub(crate) async fn dropped(&self) {
        let mut dropped = self.dropped.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = dropped.wait_for(|d| *d).await;
    }
}

impl Drop for Budgets {
    fn drop(&mut self) {
        self.broker
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// Bytes charged to both budgets of a connection, released when dropped (also when the task
/// holding it is aborted).
pub(crate) struct Charge {
    budgets: Arc<Budgets>,
    bytes: usize,
    /// The bytes of a request still arriving: kept in the connection's `partial` too.
    partial: bool,
}

impl Charge {
    pub(crate) fn new(budgets: &Arc<Budgets>) -> Charge {
        Charge {
            budgets: budgets.clone(),
            bytes: 0,
            partial: false,
        }
    }

    /// A charge for the bytes of a request still arriving (the reader's buffer): what it
    /// holds is the connection's partial request, which may be dropped when it holds more
    /// than a share of the broker's budget that another connection needs.
    pub(crate) fn partial(budgets: &Arc<Budgets>) -> Charge {
        Charge {
            budgets: budgets.clone(),
            bytes: 0,
            partial: true,
        }
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn changed(&self) {
        if self.partial {
            self.budgets.partial.store(self.bytes, Ordering::Relaxed);
        }
    }

    /// Charges `bytes` more, whatever the room left: they are already in memory.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.budgets.connection.charge(bytes);
        self.budgets.broker.charge(bytes);
        self.bytes += bytes;
        self.changed();
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
            self.changed();
        }
    }

    /// Moves `bytes` of this charge to a new one (a request leaving the read buffer).
    pub(crate) fn split_off(&mut self, bytes: usize) -> Charge {
        let moved = bytes.min(self.bytes);
        self.bytes -= moved;
        self.changed();
        Charge {
            budgets: self.budgets.clone(),
            bytes: moved,
            partial: false,
        }
    }

    /// Charges as much of `wanted` as both budgets have room for; returns how much.
    pub(crate) fn take_up_to(&mut self, wanted: usize) -> usize {
        let from_connection = self.budgets.connection.take_up_to(wanted);
        let taken = self.budgets.broker.take_up_to(from_connection);
        self.budgets.connection.release(from_connection - taken);
        self.bytes += taken;
        self.changed();
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

    /// `n` connections of one broker budget of `limit` bytes, each with room for all of it.
    fn connections(n: usize, limit: usize) -> (Vec<Arc<Budgets>>, Arc<ByteBudget>) {
        let broker = Arc::new(ByteBudget::new(limit));
        let all = (0..n)
            .map(|_| Budgets::new(limit, broker.clone()))
            .collect();
        (all, broker)
    }

    fn is_dropped(budgets: &Budgets) -> bool {
        *budgets.dropped.borrow()
    }

    #[tokio::test(start_paused = true)]
    async fn partial_requests_filling_the_budget_give_way_to_a_connection_under_its_share() {
        let (c, broker) = connections(4, 100);
        // Two clients each sent most of a large request and stopped: the budget is full.
        let mut greedy = Charge::partial(&c[0]);
        greedy.add(60);
        let mut other = Charge::partial(&c[1]);
        other.add(40);
        let waiter = {
            let c2 = c[2].clone();
            tokio::spawn(async move { c2.wait_readable(0, 64).await })
        };
        tokio::time::sleep(DROP_AFTER / 2).await;
        assert!(
            !waiter.is_finished() && !is_dropped(&c[0]),
            "room may still come back"
        );
        tokio::time::sleep(DROP_AFTER).await;
        // A share is 100 / 3: both partial requests are larger; the largest goes first.
        assert!(is_dropped(&c[0]) && !is_dropped(&c[1]));
        tokio::time::timeout(Duration::from_secs(1), c[0].dropped())
            .await
            .expect("the connection learns it must close");
        drop(greedy); // its connection closed
        assert_eq!(waiter.await.unwrap(), 60);
        assert_eq!(broker.used(), 40);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_request_within_its_share_is_never_dropped() {
        let (c, _broker) = connections(3, 90);
        let mut partial = Charge::partial(&c[0]);
        partial.add(30); // a share is 90 / 3
        let mut answers = Charge::new(&c[1]);
        answers.add(60); // responses and requests being handled: the broker gives them back
        let waiter = {
            let c2 = c[2].clone();
            tokio::spawn(async move { c2.wait_readable(0, 64).await })
        };
        tokio::time::sleep(DROP_AFTER * 10).await;
        assert!(!is_dropped(&c[0]) && !is_dropped(&c[1]));
        assert!(!waiter.is_finished());
        drop(answers);
        assert_eq!(waiter.await.unwrap(), 60);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_over_its_share_waits_without_dropping_anyone() {
        let (c, _broker) = connections(2, 100);
        let mut partial = Charge::partial(&c[0]);
        partial.add(60);
        let mut held = Charge::new(&c[1]);
        held.add(50); // over its share of 100 / 2 already
        let waiter = {
            let c1 = c[1].clone();
            tokio::spawn(async move { c1.wait_readable(0, 64).await })
        };
        tokio::time::sleep(DROP_AFTER * 10).await;
        assert!(!is_dropped(&c[0]));
        assert!(!waiter.is_finished());
        drop(partial);
        assert_eq!(waiter.await.unwrap(), 50);
    }

    #[test]
    fn a_partial_charge_tells_its_connection_its_size_and_a_split_does_not() {
        let (c, broker) = connections(1, 100);
        let mut buffered = Charge::partial(&c[0]);
        buffered.add(70);
        assert_eq!(c[0].partial.load(Ordering::Relaxed), 70);
        let request = buffered.split_off(50);
        assert_eq!(c[0].partial.load(Ordering::Relaxed), 20);
        drop(buffered);
        assert_eq!(c[0].partial.load(Ordering::Relaxed), 0);
        assert_eq!(broker.used(), 50, "the whole request is still charged");
        drop(request);
        assert!(broker.live_connections().len() == 1);
        drop(c);
        assert!(
            broker.live_connections().is_empty(),
            "a closed connection unregisters"
        );
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
