//! The commit side of write-ahead flushes: one task per broker commits uploaded objects in the
//! order they were taken. The objects uploaded by the time a commit starts go together, in one
//! metadata transaction (within etcd's limits), and commits start no faster than `pace` allows
//! unless the broker is busy with bytes or a producer waits for it with its window full (see
//! `server::handlers::produce::window`; such objects come as fast as that producer's bytes ÷
//! its window, no faster): the metadata writes per second do not grow with the partitions,
//! and the objects of an interval share commits.
//!
//! A commit is conditioned on the broker's writer key (`meta::wal`). When the store's answer is
//! lost (timeout, connection reset), the commit may or may not have landed: the writer moves
//! its key on – after that, the lost commit can no longer land – and then looks for the first
//! manifest to learn which it was. A failed commit acknowledges nothing; its objects are never
//! part of any log (the sweep removes them).

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;

use super::index::run_cache_key;
use super::writer::{Flight, WalWriter, MAX_RETRY_BACKOFF};
use crate::log::cache::CachedBatches;
use crate::meta::kv::MetaError;
use crate::meta::wal::CommitGuard;

/// A commit waits for the pace unless the broker took this many objects' worth of bytes within
/// the last flush interval (100 MB/s at the defaults): a busy broker's acks do not wait for the
/// clock – its producers' in-flight limits would turn the wait into lost throughput – and its
/// metadata writes per second are bounded by its objects per second, bytes ÷ the size cap.
const BUSY_OBJECTS_PER_INTERVAL: usize = 3;

/// Manifest bytes one commit carries at most, well within etcd's 1.5 MiB per request (one
/// manifest alone may be larger and goes on its own).
const MANIFEST_BYTES_PER_COMMIT: usize = 1 << 20;

/// Why a commit did not happen, and what its producers are told.
pub(super) struct Failure {
    pub error: ResponseError,
    /// This broker may not commit any more (its writer key moved): nothing buffered can.
    pub fenced: bool,
    pub message: String,
}

impl Failure {
    fn storage(message: String) -> Failure {
        Failure {
            error: ResponseError::KafkaStorageError,
            fenced: false,
            message,
        }
    }

    fn swept() -> Failure {
        Failure::storage(
            "a sweep of uncommitted write-ahead objects was marked since it was taken; its \
             batches are taken again"
                .into(),
        )
    }

    fn fenced() -> Failure {
        Failure {
            error: ResponseError::NotLeaderOrFollower,
            fenced: true,
            message: "the writer key moved: this broker's session ended".into(),
        }
    }
}

impl From<MetaError> for Failure {
    fn from(e: MetaError) -> Self {
        Failure::storage(e.to_string())
    }
}

/// The oldest flight's state.
enum Front {
    Waiting,
    Uploaded,
    Failed(String),
}

/// The writer key as this broker last wrote it: the session it was opened under, and what the
/// next commit is conditioned on (its revision and the sweep mark).
#[derive(Clone, Copy)]
pub(super) struct Token {
    session: u64,
    guard: CommitGuard,
}

impl Token {
    fn new(session: u64, writer: i64, sweep: i64) -> Token {
        Token {
            session,
            guard: CommitGuard { writer, sweep },
        }
    }
}

/// Commits flights as their uploads end, oldest first. Ends with the writer.
pub(super) async fn commit_loop(writer: Weak<WalWriter>) {
    let mut token: Option<Token> = None;
    loop {
        let Some(strong) = writer.upgrade() else {
            return;
        };
        match strong.front() {
            Front::Waiting => {
                let uploaded = strong.uploaded.clone();
                drop(strong);
                // Woken by an upload's end (the writer is dropped only at exit).
                uploaded.notified().await;
                continue;
            }
            Front::Failed(message) => {
                let failed = strong.pipeline().flights.pop_front();
                strong.fail_from(failed.into_iter().collect(), &Failure::storage(message));
                continue;
            }
            Front::Uploaded => {}
        }
        let pace = &strong.ctx.meta_writes;
        if let Err(allowed) = pace.try_start(strong.ctx.settings.flush_interval) {
            let busy = BUSY_OBJECTS_PER_INTERVAL * strong.ctx.settings.wal_object_max_bytes;
            let urgent = strong.pipeline().flights.front().is_some_and(|f| f.urgent);
            if !urgent && strong.bytes_taken_lately() < busy {
                let uploaded = strong.uploaded.clone();
                drop(strong);
                tokio::select! {
                    _ = tokio::time::sleep_until(allowed) => {}
                    _ = uploaded.notified() => {}
                }
                continue;
            }
            pace.note();
        }
        let group = strong.uploaded_group();
        match strong.commit(&mut token, &group).await {
            Ok(()) => strong.complete(group),
            Err(failure) => strong.fail_from(group, &failure),
        }
    }
}

impl WalWriter {
    fn front(&self) -> Front {
        let pipeline = self.pipeline();
        match pipeline.flights.front().and_then(|f| f.upload.get()) {
            None => Front::Waiting,
            Some(Ok(())) => Front::Uploaded,
            Some(Err(message)) => Front::Failed(message.clone()),
        }
    }

    /// The uploaded flights at the front, oldest first, as many as one commit carries (all of
    /// one session).
    fn uploaded_group(&self) -> Vec<Flight> {
        let max_manifests = self.ctx.catalog.kv().max_txn_ops().saturating_sub(1).max(1);
        let mut pipeline = self.pipeline();
        let mut group: Vec<Flight> = Vec::new();
        let mut bytes = 0;
        while let Some(flight) = pipeline.flights.front() {
            let uploaded = matches!(flight.upload.get(), Some(Ok(())));
            let fits = group.is_empty()
                || (group.len() < max_manifests
                    && (flight.session, flight.sweep) == (group[0].session, group[0].sweep)
                    && bytes + flight.encoded.len() <= MANIFEST_BYTES_PER_COMMIT);
            if !uploaded || !fits {
                break;
            }
            bytes += flight.encoded.len();
            group.extend(pipeline.flights.pop_front());
        }
        pipeline.committing = group
            .iter()
            .flat_map(|f| f.parts.iter().map(|p| p.partition.clone()))
            .collect();
        group
    }

    /// Commits `group` in one transaction conditioned on the writer key at `token`, opening
    /// the key first under the group's session if it is not open in that session. A group
    /// whose session ended is fenced: its partitions were dropped with their owner keys, and a
    /// key opened under the next session must not commit for them. A group taken under an
    /// earlier sweep mark than this writer knows fails: its object may be gone.
    async fn commit(&self, token: &mut Option<Token>, group: &[Flight]) -> Result<(), Failure> {
        let catalog = &self.ctx.catalog;
        let (session, sweep) = (group[0].session, group[0].sweep);
        if sweep != self.sweep.load(Ordering::Acquire) {
            return Err(Failure::swept());
        }
        let guard = match *token {
            Some(open) if open.session == session && open.guard.sweep == sweep => open.guard,
            _ => match catalog.open_writer(self.broker, session, sweep).await? {
                Some(writer) => token.insert(Token::new(session, writer, sweep)).guard,
                None => {
                    *token = None;
                    return Err(self.refused(sweep).await);
                }
            },
        };
        let manifests: Vec<(String, Bytes)> = group
            .iter()
            .map(|f| (f.key.clone(), f.encoded.clone()))
            .collect();
        match catalog
            .commit_manifests(self.broker, guard, &manifests)
            .await
        {
            Ok(Some(writer)) => {
                *token = Some(Token::new(session, writer, sweep));
                Ok(())
            }
            Ok(None) => {
                *token = None;
                Err(self.refused(sweep).await)
            }
            Err(error) => {
                self.settle(token, session, guard, &group[0].key, error)
                    .await
            }
        }
    }

    /// A commit (or opening the writer key) failed its conditions. The sweep mark moved: the
    /// flights taken before are failed (their objects may be gone) and taken again under the
    /// new mark. Otherwise the writer key moved or the session ended: fenced.
    async fn refused(&self, sweep: i64) -> Failure {
        match self.ctx.catalog.sweep_mark(self.broker).await {
            Ok(mark) if mark != sweep => {
                self.sweep.store(mark, Ordering::Release);
                Failure::swept()
            }
            Ok(_) => Failure::fenced(),
            Err(error) => Failure::storage(format!("commit refused; {error}")),
        }
    }

    /// The store's answer to a commit was lost. Moves the writer key on (so the commit cannot
    /// land later), then reads whether it landed before. Retries until the store answers: the
    /// outcome decides what the producers are told, and later commits wait for it.
    async fn settle(
        &self,
        token: &mut Option<Token>,
        session: u64,
        guard: CommitGuard,
        key: &str,
        error: MetaError,
    ) -> Result<(), Failure> {
        tracing::warn!(manifest = key, %error, "commit outcome unknown; settling it");
        let catalog = &self.ctx.catalog;
        let mut backoff = Duration::from_millis(100);
        loop {
            let settled = match catalog.advance_writer(self.broker, guard).await {
                Ok(Some(writer)) => {
                    *token = Some(Token::new(session, writer, guard.sweep));
                    return Err(Failure::storage(format!("commit failed: {error}")));
                }
                Ok(None) => catalog.manifest(key).await,
                Err(e) => Err(e),
            };
            match settled {
                Ok(Some(_)) => {
                    // It landed, and moved the key: open it afresh for the next commit.
                    *token = None;
                    return Ok(());
                }
                Ok(None) => {
                    *token = None;
                    return Err(self.refused(guard.sweep).await);
                }
                Err(e) => {
                    tracing::warn!(manifest = key, error = %e, "settling a commit failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
            }
        }
    }

    /// `group` is committed: its runs join the index and the cache, and its producers are
    /// answered, oldest object first.
    fn complete(&self, group: Vec<Flight>) {
        let metrics = &self.ctx.metrics;
        metrics.wal_commits.inc();
        let mut through = 0;
        for flight in group {
            self.index.insert(&flight.key, flight.manifest.clone());
            metrics.wal_objects_written.inc();
            metrics
                .wal_bytes_written
                .inc_by(flight.object.content_length() as u64);
            metrics
                .flush_duration
                .observe(flight.started.elapsed().as_secs_f64());
            let runs = flight.manifest.topics.iter().flat_map(|t| &t.runs);
            let pieces = flight.object.as_ref();
            for ((part, run), held) in flight.parts.into_iter().zip(runs).zip(flight.runs) {
                let batches = CachedBatches::pieces(run.position, &pieces[held]);
                let key = run_cache_key(flight.path.as_ref(), run.position);
                self.ctx.cache.insert_uncompacted(key, batches);
                self.ctx
                    .compaction_due
                    .note_committed_run(&part.partition, run.length);
                part.partition
                    .complete_flush(part.owed, run.last_offset + 1);
            }
            through = flight.seq + 1;
        }
        let mut pipeline = self.pipeline();
        pipeline.committing.clear();
        pipeline.backoff = Duration::ZERO;
        pipeline.retry_at = None;
        drop(pipeline);
        self.settled
            .send_modify(|s| s.through = s.through.max(through));
    }
}
