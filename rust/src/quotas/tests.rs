//! Quotas metered on a clock the tests move by hand.

use std::collections::BTreeMap;

use super::entity::{QuotaEntity, QuotaKind, QuotaTable};
use super::*;

/// An entity's (type, name) pairs.
type Parts<'a> = &'a [(&'a str, Option<&'a str>)];

fn quotas(quotas: &[(Parts<'_>, &str, f64)]) -> Quotas {
    let q = Quotas::new(Arc::default());
    q.replace(QuotaTable::new(quotas.iter().map(
        |(parts, name, value)| {
            let entity = QuotaEntity::from_wire(parts.iter().copied()).unwrap();
            (entity, BTreeMap::from([(name.to_string(), *value)]))
        },
    )));
    q
}

fn limit(q: &Quotas, kind: QuotaKind, client: Client<'_>) -> Limit {
    q.table()
        .client_limit(kind, client.user, client.client_id)
        .unwrap()
}

/// A producer sending `request` bytes as fast as its throttles let it, for `seconds`
/// (throttles waited out, as clients do): the bytes per second it got through.
fn held_rate(q: &Quotas, client: Client<'_>, request: f64, seconds: u64) -> f64 {
    let kind = QuotaKind::ProducerByteRate;
    let limit = limit(q, kind, client);
    let (mut now, mut sent) = (0u64, 0.0);
    while now < seconds * 1000 {
        sent += request;
        let throttle = q.record_at(kind, &limit, Use::kept(request), (now, u64::MAX));
        now += throttle.max(1); // one millisecond per request at least
    }
    sent / (now as f64 / 1000.0)
}

const MB: f64 = 1_048_576.0;

#[test]
fn a_producer_that_waits_out_its_throttles_is_held_at_its_quota() {
    let q = quotas(&[(&[("client-id", Some("slow"))], "producer_byte_rate", MB)]);
    let slow = Client::new("User:ANONYMOUS", Some("slow"));
    let rate = held_rate(&q, slow, 64.0 * 1024.0, 120);
    assert!((0.95 * MB..1.1 * MB).contains(&rate), "{rate}");
    // Another client has no quota: never throttled.
    let other = Client::new("User:ANONYMOUS", Some("other"));
    assert_eq!(
        q.record(QuotaKind::ProducerByteRate, other, 1e9),
        Duration::ZERO
    );
}

#[test]
fn a_default_quota_meters_each_client_on_its_own() {
    let q = quotas(&[(&[("client-id", None)], "producer_byte_rate", MB)]);
    let (a, b) = (Client::new("", Some("a")), Client::new("", Some("b")));
    let kind = QuotaKind::ProducerByteRate;
    // 20 MB at once from a: over its 10 s window at 1 MB/s, throttled for 10 s more
    assert_eq!(
        q.record_at(
            kind,
            &limit(&q, kind, a),
            Use::kept(20.0 * MB),
            (0, u64::MAX)
        ),
        10_000
    );
    // b has a meter of its own
    assert_eq!(
        q.record_at(kind, &limit(&q, kind, b), Use::kept(MB), (0, u64::MAX)),
        0
    );
}

#[test]
fn a_throttled_fetch_is_not_counted_as_used() {
    let q = quotas(&[(&[("user", Some("alice"))], "consumer_byte_rate", MB)]);
    let alice = Client::new("User:alice", Some("x"));
    assert_eq!(q.fetch_window_bytes(alice), Some((10.0 * MB) as usize));
    let kind = QuotaKind::ConsumerByteRate;
    assert_eq!(
        q.record_unless_throttled(kind, alice, 5.0 * MB),
        Duration::ZERO
    );
    assert!(q.record_unless_throttled(kind, alice, 10.0 * MB) > Duration::ZERO);
    // what is left is within the quota: a small answer goes through
    assert_eq!(q.record_unless_throttled(kind, alice, 1.0), Duration::ZERO);
    // the user's other clients share the user's quota
    let other = Client::new("User:alice", Some("y"));
    assert!(q.record_unless_throttled(kind, other, 6.0 * MB) > Duration::ZERO);
}

#[test]
fn request_time_and_connection_delays_are_bounded_as_in_kafka() {
    let q = quotas(&[
        (&[("user", None)], "request_percentage", 10.0),
        (&[("ip", None)], "connection_creation_rate", 2.0),
    ]);
    let bob = Client::new("User:bob", None);
    // a minute of one thread's time: far over, but throttled one window at most
    let throttle = q.record(QuotaKind::RequestPercentage, bob, 6000.0);
    assert_eq!(throttle, Duration::from_millis(MAX_REQUEST_THROTTLE_MS));
    // 20 connections within the window are a rate of 2/s: the next ones wait, then are
    // closed while the address stays over
    for _ in 0..20 {
        assert_eq!(q.connection_delay("10.0.0.1"), Duration::ZERO);
    }
    let delay = q.connection_delay("10.0.0.1");
    assert!(delay > Duration::ZERO && delay <= Duration::from_secs(1));
    assert!(q.connection_still_over("10.0.0.1"));
    // another address has a meter of its own
    assert_eq!(q.connection_delay("10.0.0.2"), Duration::ZERO);
    assert!(!q.connection_still_over("10.0.0.2"));
}

#[test]
fn a_quota_removed_stops_throttling_at_once() {
    let q = quotas(&[(&[("client-id", Some("c"))], "producer_byte_rate", 1.0)]);
    let c = Client::new("", Some("c"));
    assert!(q.record(QuotaKind::ProducerByteRate, c, MB) > Duration::ZERO);
    q.replace(QuotaTable::default());
    assert_eq!(q.record(QuotaKind::ProducerByteRate, c, MB), Duration::ZERO);
}
