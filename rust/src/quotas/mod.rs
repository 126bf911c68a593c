//! Client quotas, as Kafka's: byte rates of Produce and Fetch, the share of a thread a client's
//! requests take, and the rate of new connections from one address, set per user, client id,
//! both, their defaults, or per IP address (`entity`), kept in the metadata store (`store`)
//! and followed by every broker. A broker meters what each client uses over a sliding window
//! (`rate`) and, past the quota, throttles it the way Kafka does: the answer carries
//! `throttle_time_ms` and the connection reads nothing more for that long (older request
//! versions, whose clients do not wait on their own, get their answer that much later); a
//! connection over its address's rate waits, and is closed if still over. Requests never fail
//! for a quota. Each broker meters its own traffic, as each Kafka broker does: a quota is per
//! broker.

pub(crate) mod entity;
pub(crate) mod rate;
pub(crate) mod store;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use entity::{Limit, QuotaKind, QuotaTable};
use rate::{throttle_ms, Rate, SAMPLES, SAMPLE_MS};

use crate::metrics::Metrics;

/// Kafka's bound on a request-time throttle (`quota.window.size.seconds`): one sample.
const MAX_REQUEST_THROTTLE_MS: u64 = SAMPLE_MS;
/// Kafka's bound on how long a connection over its address's rate waits before it is
/// accepted or closed.
const MAX_CONNECTION_DELAY_MS: u64 = 1000;
/// Meters kept before idle ones (nothing recorded for the whole window) are dropped.
const METERS_BEFORE_PRUNING: usize = 10_000;

/// A client as quotas see it: its user (the principal's name, `ANONYMOUS` before a login) and
/// its client id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Client<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> Client<'a> {
    /// `principal` as the authorizer names it (`User:alice`).
    pub(crate) fn new(principal: &'a str, client_id: Option<&'a str>) -> Client<'a> {
        let user = principal.strip_prefix("User:").unwrap_or(principal);
        Client {
            user,
            client_id: client_id.unwrap_or(""),
        }
    }
}

/// Whose usage one meter holds.
type MeterKey = (QuotaKind, Option<String>, Option<String>);

pub(crate) struct Quotas {
    table: RwLock<Arc<QuotaTable>>,
    meters: Mutex<HashMap<MeterKey, Rate>>,
    metrics: Arc<Metrics>,
    epoch: Instant,
}

impl Quotas {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Quotas {
        Quotas {
            table: RwLock::default(),
            meters: Mutex::default(),
            metrics,
            epoch: Instant::now(),
        }
    }

    /// Puts `table` in force (every quota the metadata store holds now).
    pub(crate) fn replace(&self, table: QuotaTable) {
        let old = std::mem::replace(
            &mut *self.table.write().unwrap_or_else(|p| p.into_inner()),
            Arc::new(table),
        );
        let now = self.table();
        let kept: HashSet<(String, &str)> = now.configured().collect();
        for (entity, quota) in old.configured() {
            if !kept.contains(&(entity.clone(), quota)) {
                self.metrics.quotas.forget(quota, &entity);
            }
        }
    }

    fn table(&self) -> Arc<QuotaTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Records `amount` of `kind` used by `client` (bytes of a Produce request or a Fetch
    /// answer, percent-seconds of request time) and returns how long to throttle it (zero
    /// within its quota, or without one).
    pub(crate) fn record(&self, kind: QuotaKind, client: Client<'_>, amount: f64) -> Duration {
        let table = self.table();
        if table.is_empty() {
            return Duration::ZERO;
        }
        let Some(limit) = table.client_limit(kind, client.user, client.client_id) else {
            return Duration::ZERO;
        };
        let most = match kind {
            QuotaKind::RequestPercentage => MAX_REQUEST_THROTTLE_MS,
            _ => u64::MAX,
        };
        let use_ = Use::kept(amount);
        Duration::from_millis(self.record_at(kind, &limit, use_, (self.now_ms(), most)))
    }

    /// As `record`, for a use that does not happen if it is throttled (a throttled Fetch is
    /// answered without its records, as Kafka does): then nothing is counted as used.
    pub(crate) fn record_unless_throttled(
        &self,
        kind: QuotaKind,
        client: Client<'_>,
        amount: f64,
    ) -> Duration {
        let table = self.table();
        let Some(limit) = table.client_limit(kind, client.user, client.client_id) else {
            return Duration::ZERO;
        };
        let use_ = Use {
            amount,
            undone_if_throttled: true,
        };
        Duration::from_millis(self.record_at(kind, &limit, use_, (self.now_ms(), u64::MAX)))
    }

    /// The most bytes one Fetch answer of `client` may hold without being throttled whatever
    /// came before it (Kafka's bound: the quota over the window but one sample); None without
    /// a consumer quota.
    pub(crate) fn fetch_window_bytes(&self, client: Client<'_>) -> Option<usize> {
        let table = self.table();
        let limit =
            table.client_limit(QuotaKind::ConsumerByteRate, client.user, client.client_id)?;
        let window_s = ((SAMPLES - 1) as u64 * SAMPLE_MS) as f64 / 1000.0;
        Some((limit.bound * window_s) as usize)
    }

    /// A new connection from `ip`: how long to hold it before serving it (zero within the
    /// address's connection rate, or without a quota).
    pub(crate) fn connection_delay(&self, ip: &str) -> Duration {
        let table = self.table();
        let Some(limit) = table.ip_limit(ip) else {
            return Duration::ZERO;
        };
        let kind = QuotaKind::ConnectionCreationRate;
        let most = MAX_CONNECTION_DELAY_MS;
        let use_ = Use::kept(1.0);
        Duration::from_millis(self.record_at(kind, &limit, use_, (self.now_ms(), most)))
    }

    /// After its delay, whether a connection from `ip` is still over the address's rate (then
    /// it is closed, and not counted).
    pub(crate) fn connection_still_over(&self, ip: &str) -> bool {
        let table = self.table();
        let Some(limit) = table.ip_limit(ip) else {
            return false;
        };
        let key = meter_key(QuotaKind::ConnectionCreationRate, &limit);
        let now = self.now_ms();
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        let Some(meter) = meters.get_mut(&key) else {
            return false;
        };
        let (rate, _) = meter.measure(now);
        let over = rate > limit.bound;
        if over {
            meter.record(-1.0, now);
        }
        over
    }

    /// Records `use_` at `now_ms`; the throttle, at most `most` ms.
    fn record_at(
        &self,
        kind: QuotaKind,
        limit: &Limit,
        use_: Use,
        (now_ms, most): (u64, u64),
    ) -> u64 {
        let key = meter_key(kind, limit);
        let mut meters = self.meters.lock().unwrap_or_else(|p| p.into_inner());
        if meters.len() >= METERS_BEFORE_PRUNING && !meters.contains_key(&key) {
            let span = SAMPLES as u64 * SAMPLE_MS;
            meters.retain(|_, m| now_ms.saturating_sub(m.last_ms) < span);
        }
        let meter = meters.entry(key).or_insert_with(|| Rate::new(now_ms));
        meter.record(use_.amount, now_ms);
        let (rate, window) = meter.measure(now_ms);
        let ms = throttle_ms(rate, limit.bound, window).min(most);
        let undone = ms > 0 && use_.undone_if_throttled;
        if undone {
            meter.record(-use_.amount, now_ms);
        }
        drop(meters);
        let entity = limit.entity.to_string();
        if !undone {
            self.metrics.quotas.used(kind.name(), &entity, use_.amount);
        }
        if ms > 0 {
            self.metrics.quotas.throttled(kind.name(), &entity, ms);
        }
        ms
    }
}

/// What one record adds to a meter.
#[derive(Debug, Clone, Copy)]
struct Use {
    amount: f64,
    /// Taken back if it is throttled: it did not happen.
    undone_if_throttled: bool,
}

impl Use {
    fn kept(amount: f64) -> Use {
        Use {
            amount,
            undone_if_throttled: false,
        }
    }
}

fn meter_key(kind: QuotaKind, limit: &Limit) -> MeterKey {
    (kind, limit.metered.0.clone(), limit.metered.1.clone())
}

#[cfg(test)]
mod tests;
