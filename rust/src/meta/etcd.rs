//! The cluster metadata store: the `KvStore` contract on etcd v3. The session is an etcd lease
//! that a background task keeps alive; ephemeral keys are attached to it, so etcd deletes them
//! when this broker stops renewing it (crash, pause, partition) or revokes it (shutdown).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client as etcd;
use futures::{stream, StreamExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::kv::{Change, ChangeStream, Compare, KeyValue, KvStore, Listing, MetaError, Op};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings notice a hung etcd under an open watch (a paused process keeps its TCP
/// connections); etcd answers pings more frequent than every 5 s with GOAWAY.
const PING_INTERVAL: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// The listing of a large cluster outgrows tonic's 4 MiB default response limit.
const MAX_RESPONSE_BYTES: usize = 256 << 20;
/// etcd refuses shorter leases (1.5 election timeouts by default).
const MIN_LEASE_SECONDS: i64 = 2;

pub(crate) struct EtcdStore {
    kv: etcd::KvClient,
    watch: etcd::WatchClient,
    lease: etcd::LeaseClient,
    session: Arc<Session>,
    keeper: JoinHandle<()>,
    endpoints: String,
}

/// Why the broker could not open its etcd session; the caller names the setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Nothing accepted the connection (refused, no route, unknown host): the innermost cause.
    #[error("cannot reach etcd at {endpoints}: {cause}")]
    Unreachable { endpoints: String, cause: String },
    /// etcd refused the user, password or missing login (its own words).
    #[error("etcd at {endpoints} refused the login: {answer}")]
    Auth { endpoints: String, answer: String },
    #[error("etcd at {endpoints} did not answer within {} s", REQUEST_TIMEOUT.as_secs())]
    NoAnswer { endpoints: String },
    #[error("etcd at {endpoints}: {answer}")]
    Other { endpoints: String, answer: String },
}

impl ConnectError {
    fn of(endpoints: &str, error: etcd::Error) -> ConnectError {
        let endpoints = endpoints.to_string();
        let status = match &error {
            etcd::Error::GRpcStatus(status) => Some(status),
            _ => None,
        };
        let answer = status.map_or_else(|| error.to_string(), |s| s.message().to_string());
        if let Some(answer) = login_refused(&answer) {
            return ConnectError::Auth { endpoints, answer };
        }
        // A connection that failed comes back as a status carrying the transport error.
        let transport: Option<&(dyn std::error::Error + 'static)> = match &error {
            etcd::Error::TransportError(e) => Some(e),
            etcd::Error::GRpcStatus(status) => {
                std::error::Error::source(status).map(|_| status as &dyn std::error::Error)
            }
            _ => None,
        };
        if let Some(transport) = transport {
            return ConnectError::Unreachable {
                endpoints,
                cause: root_cause(transport),
            };
        }
        ConnectError::Other { endpoints, answer }
    }
}

/// etcd's own words when `text` (an error's message) says it refused the login or the
/// user's permissions: the `etcdserver: ...` part.
pub(crate) fn login_refused(text: &str) -> Option<String> {
    const REFUSALS: [&str; 6] = [
        "authentication failed",
        "user name is empty",
        "invalid auth token",
        "permission denied",
        "authentication is not enabled",
        "user name not found",
    ];
    if !REFUSALS.iter().any(|refusal| text.contains(refusal)) {
        return None;
    }
    let start = text.find("etcdserver:").unwrap_or(0);
    let answer = &text[start..];
    let end = answer.find('"').unwrap_or(answer.len());
    Some(answer[..end].trim().to_string())
}

/// The innermost error's message ("Connection refused (os error 111)").
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = cause.to_string();
    // io::Error says "Connection refused (os error 111)": the number tells people nothing.
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The current lease and the session number handed out to watchers of `session()`.
struct Session {
    /// The session's number and its lease, changed together: a transaction that names a
    /// session (`Compare::Session`) writes with that session's lease or not at all.
    current: std::sync::Mutex<(u64, i64)>,
    number: watch::Sender<u64>,
}

impl Session {
    fn current(&self) -> (u64, i64) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lease(&self) -> i64 {
        self.current().1
    }
}

impl EtcdStore {
    /// Connects, grants this process's lease and starts keeping it alive. Fails when etcd
    /// does not answer: a broker must not start without its metadata.
    pub(crate) async fn connect(
        endpoints: &[String],
        user: Option<(String, String)>,
        lease_ttl: Duration,
    ) -> Result<EtcdStore, ConnectError> {
        let described = endpoints.join(",");
        let failed = |e: Option<etcd::Error>| match e {
            Some(e) => ConnectError::of(&described, e),
            None => ConnectError::NoAnswer {
                endpoints: described.clone(),
            },
        };
        let mut options = etcd::ConnectOptions::new()
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_timeout(REQUEST_TIMEOUT)
            .with_keep_alive(PING_INTERVAL, PING_TIMEOUT)
            // A member cut off from its cluster's quorum fails requests and ends watches
            // instead of serving stale data or a watch that stays silent.
            .with_require_leader(true);
        if let Some((name, password)) = user {
            options = options.with_user(name, password);
        }
        let client = answered(etcd::Client::connect(endpoints, Some(options)))
            .await
            .map_err(failed)?;
        let ttl = lease_seconds(lease_ttl);
        let mut lease = client.lease_client();
        // The first request: with no credentials to check, `connect` itself sends nothing.
        let granted = answered(lease.grant(ttl, None)).await.map_err(failed)?;
        let session = Arc::new(Session {
            current: std::sync::Mutex::new((1, granted.id())),
            number: watch::channel(1).0,
        });
        let keeper = tokio::spawn(keep_alive(lease.clone(), session.clone(), ttl));
        Ok(EtcdStore {
            kv: client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch: client
                .watch_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            lease,
            session,
            keeper,
            endpoints: described,
        })
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Without renewals the lease expires and etcd deletes this process's ephemeral keys.
        self.keeper.abort();
    }
}

fn lease_seconds(ttl: Duration) -> i64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .max(MIN_LEASE_SECONDS)
}

/// Renews the lease every third of its TTL. An unreachable etcd is retried without ending
/// the session (the lease may well outlive the outage); only when etcd says the lease is gone
/// does a new session begin.
async fn keep_alive(mut lease: etcd::LeaseClient, session: Arc<Session>, ttl: i64) {
    let period = Duration::from_secs(ttl as u64) / 3;
    let mut failing = false;
    loop {
        tokio::time::sleep(period).await;
        let id = session.lease();
        match tokio::time::timeout(period, lease.keep_alive(id)).await {
            Ok(Ok(_)) => {
                if failing {
                    tracing::info!("etcd lease {id:x} renewed again");
                    failing = false;
                }
            }
            // etcd answered with TTL 0: the lease expired or was revoked. (The client raises
            // this error only for that answer; unreachable etcd is a transport error.)
            Ok(Err(etcd::Error::LeaseKeepAliveError(_))) => {
                failing = !renew(&mut lease, &session, ttl).await;
            }
            Ok(Err(e)) => {
                if !failing {
                    tracing::warn!("cannot renew etcd lease {id:x}, retrying: {e}");
                }
                failing = true;
            }
            Err(_) => {
                if !failing {
                    tracing::warn!("renewing etcd lease {id:x} timed out, retrying");
                }
                failing = true;
            }
        }
    }
}

/// Starts a new session after the old lease was lost. Returns whether it worked (otherwise
/// the next renewal finds the old lease gone again and retries).
async fn renew(lease: &mut etcd::LeaseClient, session: &Session, ttl: i64) -> bool {
    let old = session.lease();
    // Best effort: it is gone already unless etcd's answer was wrong.
    let _ = bounded(lease.revoke(old)).await;
    match bounded(lease.grant(ttl, None)).await {
        Ok(granted) => {
            // Number and lease change together, before anyone is told: whoever wakes up on
            // the new number writes with its lease.
            let number = {
                let mut current = session.current.lock().unwrap_or_else(|p| p.into_inner());
                *current = (current.0 + 1, granted.id());
                current.0
            };
            session.number.send_replace(number);
            tracing::warn!(
                "etcd lease {old:x} was lost (its ephemeral keys are gone); session {} \
                 continues with lease {:x}",
                *session.number.borrow(),
                granted.id()
            );
            true
        }
        Err(e) => {
            tracing::warn!("etcd lease {old:x} was lost and a new one cannot be granted: {e}");
            false
        }
    }
}

/// An etcd call with an overall deadline: the per-request timeout does not cover waiting for
/// a connection when no endpoint answers at all.
/// The call's result within the request timeout; `Err(None)` when it had none by then.
async fn answered<T>(
    call: impl Future<Output = Result<T, etcd::Error>>,
) -> Result<T, Option<etcd::Error>> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

async fn bounded<T>(call: impl Future<Output = Result<T, etcd::Error>>) -> Result<T, MetaError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(super::etcd_limits::classify(e)),
        Err(_) => Err(MetaError::Unavailable(format!(
            "etcd: no answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        ))),
    }
}

fn key_value(kv: &etcd::KeyValue) -> Result<KeyValue, MetaError> {
    let key = kv.key_str().map_err(|e| MetaError::Corrupt {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: format!("key is not UTF-8: {e}"),
    })?;
    Ok(KeyValue {
        key: key.to_string(),
        value: Bytes::copy_from_slice(kv.value()),
        mod_revision: kv.mod_revision(),
    })
}

fn revision(header: Option<&etcd::ResponseHeader>) -> Result<i64, MetaError> {
    header
        .map(|h| h.revision())
        .ok_or_else(|| MetaError::Unavailable("etcd: response without a header".into()))
}

/// A watch response's events as one batch per revision (a transaction's events share one).
fn batches(events: &[etcd::Event]) -> Result<Vec<Vec<Change>>, MetaError> {
    let mut batches: Vec<Vec<Change>> = Vec::new();
    let mut current = 0;
    for event in events {
        let Some(kv) = event.kv() else { continue };
        let change = match event.event_type() {
            etcd::EventType::Put => Change::Put(key_value(kv)?),
            etcd::EventType::Delete => Change::Delete {
                key: key_value(kv)?.key,
                revision: kv.mod_revision(),
            },
        };
        match batches.last_mut() {
            Some(batch) if current == kv.mod_revision() => batch.push(change),
            _ => {
                current = kv.mod_revision();
                batches.push(vec![change]);
            }
        }
    }
    Ok(batches)
}

/// The next items of a watch: its batches, or an error after which the stream ends.
async fn next_batches(
    mut stream: etcd::WatchStream,
) -> Option<(
    Vec<Result<Vec<Change>, MetaError>>,
    Option<etcd::WatchStream>,
)> {
    loop {
        let failure = match stream.message().await {
            Ok(Some(response)) if response.canceled() => {
                if response.compact_revision() > 0 {
                    format!(
                        "etcd compacted its history up to revision {}",
                        response.compact_revision()
                    )
                } else {
                    format!("etcd canceled the watch: {}", response.cancel_reason())
                }
            }
            Ok(Some(response)) => match batches(response.events()) {
                Ok(batches) if batches.is_empty() => continue,
                Ok(batches) => return Some((batches.into_iter().map(Ok).collect(), Some(stream))),
                Err(e) => return Some((vec![Err(e)], None)),
            },
            Ok(None) => "etcd closed the watch".to_string(),
            Err(e) => format!("etcd watch failed: {e}"),
        };
        return Some((vec![Err(MetaError::Unavailable(failure))], None));
    }
}

#[async_trait]
impl KvStore for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, MetaError> {
        let response = bounded(self.kv.clone().get(key, None)).await?;
        response.kvs().first().map(key_value).transpose()
    }

    async fn range(&self, prefix: &str) -> Result<Listing, MetaError> {
        let options = etcd::GetOptions::new().with_prefix();
        let response = bounded(self.kv.clone().get(prefix, Some(options))).await?;
        Ok(Listing {
            kvs: response
                .kvs()
                .iter()
                .map(key_value)
                .collect::<Result<_, _>>()?,
            revision: revision(response.header())?,
        })
    }

    async fn txn(&self, compares: Vec<Compare>, ops: Vec<Op>) -> Result<Option<i64>, MetaError> {
        // A missing key compares as mod_revision 0, so ModRevision(key, 0) = "does not exist".
        let (session, lease) = self.session.current();
        let mut revisions = Vec::with_capacity(compares.len());
        for compare in compares {
            match compare {
                Compare::ModRevision(key, revision) => revisions.push(etcd::Compare::mod_revision(
                    key,
                    etcd::CompareOp::Equal,
                    revision,
                )),
                Compare::Session(expected) if expected != session => return Ok(None),
                Compare::Session(_) => {}
            }
        }
        let ops: Vec<etcd::TxnOp> = ops
            .into_iter()
            .map(|op| match op {
                Op::Put(key, value) => etcd::TxnOp::put(key, value.to_vec(), None),
                Op::PutEphemeral(key, value) => {
                    let options = etcd::PutOptions::new().with_lease(lease);
                    etcd::TxnOp::put(key, value.to_vec(), Some(options))
                }
                Op::Delete(key) => etcd::TxnOp::delete(key, None),
                Op::DeletePrefix(prefix) => {
                    let options = etcd::DeleteOptions::new().with_prefix();
                    etcd::TxnOp::delete(prefix, Some(options))
                }
            })
            .collect();
        let txn = etcd::Txn::new().when(revisions).and_then(ops);
        let response = bounded(self.kv.clone().txn(txn)).await?;
        if !response.succeeded() {
            return Ok(None);
        }
        revision(response.header()).map(Some)
    }

    async fn watch(&self, prefix: &str, after: i64) -> Result<ChangeStream, MetaError> {
        let options = etcd::WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1);
        let stream = bounded(self.watch.clone().watch(prefix, Some(options))).await?;
        let batches = stream::unfold(
            Some(stream),
            |stream| async move { next_batches(stream?).await },
        );
        Ok(batches.flat_map(stream::iter).boxed())
    }

    fn session(&self) -> watch::Receiver<u64> {
        self.session.number.subscribe()
    }

    async fn end_session(&self) -> Result<(), MetaError> {
        // Stop renewing first, or the keeper would find the lease gone and start a new one.
        self.keeper.abort();
        let id = self.session.lease();
        bounded(self.lease.clone().revoke(id)).await.map(|_| ())
    }

    fn describe(&self) -> String {
        format!("etcd {}", self.endpoints)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::meta::test_etcd::{free_port, TestEtcd};

    const TTL: Duration = Duration::from_secs(2);

    async fn store(etcd: &TestEtcd) -> EtcdStore {
        EtcdStore::connect(&etcd.endpoints(), None, TTL)
            .await
            .unwrap()
    }

    fn put(key: &str, value: &'static [u8]) -> Op {
        Op::Put(key.into(), Bytes::from_static(value))
    }

    fn put_ephemeral(key: &str) -> Op {
        Op::PutEphemeral(key.into(), Bytes::from_static(b"e"))
    }

    /// The key's lease as etcd has it (None: no such key).
    async fn lease_of(client: &mut etcd::Client, key: &str) -> Option<i64> {
        let response = client.get(key, None).await.unwrap();
        response.kvs().first().map(|kv| kv.lease())
    }

    /// Waits up to `within` for the key to disappear; returns whether it did.
    async fn disappears(client: &mut etcd::Client, key: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if lease_of(client, key).await.is_none() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    async fn next(stream: &mut ChangeStream) -> Result<Vec<Change>, MetaError> {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
        item.expect("a watch item in time")
            .expect("the watch goes on")
    }

    fn delete(key: &str, revision: i64) -> Change {
        Change::Delete {
            key: key.into(),
            revision,
        }
    }

    fn kv(key: &str, value: &'static [u8], mod_revision: i64) -> KeyValue {
        let value = Bytes::from_static(value);
        KeyValue {
            key: key.into(),
            value,
            mod_revision,
        }
    }

    fn value(key: &str, value: &'static [u8], revision: i64) -> Change {
        Change::Put(kv(key, value, revision))
    }

    /// An unconditional transaction; its revision.
    async fn write(store: &EtcdStore, ops: Vec<Op>) -> i64 {
        store.txn(vec![], ops).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn transactions_compare_mod_revisions_where_zero_means_absent() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        let absent = || vec![Compare::ModRevision("t/a".into(), 0)];
        let created = store.txn(absent(), vec![put("t/a", b"1")]).await.unwrap();
        let created = created.expect("created: the key did not exist");
        let again = store.txn(absent(), vec![put("t/a", b"2")]).await.unwrap();
        assert_eq!(again, None, "the key exists now");
        assert_eq!(
            store.get("t/a").await.unwrap(),
            Some(kv("t/a", b"1", created))
        );

        let stale = vec![Compare::ModRevision("t/a".into(), created - 1)];
        let stale = store.txn(stale, vec![put("t/a", b"x")]).await.unwrap();
        assert_eq!(stale, None);
        let current = vec![Compare::ModRevision("t/a".into(), created)];
        let ops = vec![put("t/a", b"3"), put("t/b", b"b")];
        let swapped = store.txn(current, ops).await.unwrap().unwrap();
        assert!(swapped > created);
        write(&store, vec![put("t-other", b"o")]).await;

        let listing = store.range("t/").await.unwrap();
        let expected = [kv("t/a", b"3", swapped), kv("t/b", b"b", swapped)];
        assert_eq!(listing.kvs, expected);
        assert_eq!(listing.revision, swapped + 1);
        assert!(store.get("t/missing").await.unwrap().is_none());
        assert_eq!(store.describe(), format!("etcd {}", etcd.endpoint));
    }

    #[tokio::test]
    async fn delete_prefix_and_watch_from_a_revision() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        let ops = vec![put("d/x/1", b"1"), put("d/x/2", b"2"), put("d/xy", b"y")];
        let created = write(&store, ops).await;
        write(&store, vec![put("elsewhere", b"e")]).await;
        let deleted = write(&store, vec![Op::DeletePrefix("d/x/".into())]).await;
        let left = store.range("d/").await.unwrap().kvs;
        assert_eq!(left, [kv("d/xy", b"y", created)]);

        // from before the first write: one batch per revision, nothing outside the prefix
        let mut watch = store.watch("d/", created - 1).await.unwrap();
        let puts = [
            value("d/x/1", b"1", created),
            value("d/x/2", b"2", created),
            value("d/xy", b"y", created),
        ];
        assert_eq!(next(&mut watch).await.unwrap(), puts);
        let deletes = [delete("d/x/1", deleted), delete("d/x/2", deleted)];
        assert_eq!(next(&mut watch).await.unwrap(), deletes);
        // then live changes
        let live = write(&store, vec![put("d/z", b"z")]).await;
        assert_eq!(next(&mut watch).await.unwrap(), [value("d/z", b"z", live)]);

        // from a later revision: only what came after it
        let mut later = store.watch("d/", created).await.unwrap();
        assert_eq!(next(&mut later).await.unwrap(), deletes);
    }

    #[tokio::test]
    async fn a_watch_from_compacted_history_fails() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        let mut last = 0;
        for _ in 0..3 {
            last = write(&store, vec![put("c/k", b"v")]).await;
        }
        etcd.client().await.compact(last, None).await.unwrap();
        let mut watch = store.watch("c/", 1).await.unwrap();
        let error = next(&mut watch).await.unwrap_err();
        assert!(error.to_string().contains("compacted"), "{error}");
        assert!(watch.next().await.is_none());
    }

    #[tokio::test]
    async fn ephemeral_keys_go_with_end_session() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        let ops = vec![put_ephemeral("e/k"), put("e/plain", b"p")];
        write(&store, ops).await;
        let mut client = etcd.client().await;
        let lease = lease_of(&mut client, "e/k").await;
        assert!(lease.is_some_and(|id| id != 0), "attached to a lease");
        assert_eq!(lease_of(&mut client, "e/plain").await, Some(0));
        store.end_session().await.unwrap();
        assert_eq!(lease_of(&mut client, "e/k").await, None, "deleted at once");
        assert_eq!(lease_of(&mut client, "e/plain").await, Some(0));
    }

    #[tokio::test]
    async fn ephemeral_keys_live_while_kept_alive_and_expire_after_the_process() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        write(&store, vec![put_ephemeral("e/k")]).await;
        let mut client = etcd.client().await;
        // twice the TTL: only renewals keep it
        tokio::time::sleep(2 * TTL).await;
        assert!(lease_of(&mut client, "e/k").await.is_some());
        assert_eq!(*store.session().borrow(), 1);
        drop(store);
        assert!(disappears(&mut client, "e/k", 4 * TTL).await);
    }

    #[tokio::test]
    async fn a_lease_revoked_behind_its_back_starts_a_new_session() {
        let etcd = TestEtcd::start().await;
        let store = store(&etcd).await;
        let mut session = store.session();
        assert_eq!(*session.borrow_and_update(), 1);
        write(&store, vec![put_ephemeral("e/old")]).await;
        let mut client = etcd.client().await;
        let leases = client.leases().await.unwrap();
        assert_eq!(leases.leases().len(), 1);
        let old = leases.leases()[0].id();
        client.lease_revoke(old).await.unwrap();
        assert_eq!(lease_of(&mut client, "e/old").await, None);

        tokio::time::timeout(2 * TTL, session.changed())
            .await
            .expect("a new session soon")
            .unwrap();
        assert_eq!(*session.borrow(), 2);
        write(&store, vec![put_ephemeral("e/new")]).await;
        let lease = lease_of(&mut client, "e/new").await.unwrap();
        assert!(lease != 0 && lease != old, "{lease:x} vs {old:x}");
        // and the new lease is kept alive
        tokio::time::sleep(2 * TTL).await;
        assert!(lease_of(&mut client, "e/new").await.is_some());
        assert_eq!(*store.session().borrow(), 2);
    }

    #[tokio::test]
    async fn a_short_outage_keeps_the_session() {
        let etcd = TestEtcd::start().await;
        let ttl = Duration::from_secs(6);
        let store = EtcdStore::connect(&etcd.endpoints(), None, ttl)
            .await
            .unwrap();
        write(&store, vec![put_ephemeral("e/k")]).await;
        etcd.pause();
        // several renewals fail, but the lease outlives the outage
        tokio::time::sleep(Duration::from_secs(2)).await;
        let during = tokio::time::timeout(Duration::from_secs(1), store.get("e/k")).await;
        etcd.resume();
        assert!(during.is_err(), "etcd answered while paused: {during:?}");
        tokio::time::sleep(ttl).await;
        assert_eq!(*store.session().borrow(), 1);
        assert!(store.get("e/k").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn an_unreachable_etcd_fails_start_up_naming_the_setting() {
        let started = Instant::now();
        let nobody = vec![format!("http://127.0.0.1:{}", free_port())];
        let error = EtcdStore::connect(&nobody, None, TTL).await.err().unwrap();
        assert!(matches!(error, ConnectError::Unreachable { .. }), "{error}");
        let text = error.to_string();
        assert!(text.contains(&nobody[0]), "{text}");
        assert!(text.contains("Connection refused"), "{text}");
        assert!(
            !text.contains("tonic") && !text.contains("os error"),
            "{text}"
        );

        // one that accepts connections but never answers
        let etcd = TestEtcd::start().await;
        etcd.pause();
        let error = EtcdStore::connect(&etcd.endpoints(), None, TTL).await;
        etcd.resume();
        let error = error.err().unwrap();
        // no answer to the requests, or to the connection's handshake (connect timeout)
        assert!(
            matches!(
                error,
                ConnectError::NoAnswer { .. } | ConnectError::Unreachable { .. }
            ),
            "{error}"
        );
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
